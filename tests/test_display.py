"""What the summaries and ``%distcomp env`` show, as text a person reads (pure: no kernel)."""

from __future__ import annotations

import json

from jupyter_distcomp.core.rank_view import rank_view
from jupyter_distcomp.core.spec_parsing import load_component
from jupyter_distcomp.notebook.views.component import component_html, component_line, component_text
from jupyter_distcomp.notebook.views.env import EnvTable

from .ranks_support import MPI_SPEC, TF_SPEC

WITH_PORTS = """\
name: ported
type: DistributedComponent
inputs:
  lr: {type: Float, min: 0}
  steps: {type: Integer, max: 9}
  n: {type: Integer, min: 1, max: 4}
outputs:
  model: {type: path}
launcher:
  type: mpi
  additional_arguments: python t.py --lr {inputs.lr} --steps {inputs.steps} --n {inputs.n}
"""


def test_ranges_read_as_people_write_them():
    text = component_text(load_component(WITH_PORTS))
    assert "lr: Float (>= 0)" in text
    assert "steps: Integer (<= 9)" in text
    assert "n: Integer (1 to 4)" in text
    assert "[" not in text.split("command:")[0], text


def test_no_empty_input_or_output_headings():
    bare = load_component(MPI_SPEC)
    assert "inputs" not in component_text(bare) and "outputs" not in component_text(bare)
    assert ">inputs<" not in component_html(bare) and ">outputs<" not in component_html(bare)
    ported = component_html(load_component(WITH_PORTS))
    assert ">inputs<" in ported and ">outputs<" in ported


def test_list_line_is_a_summary():
    line = component_line(load_component(WITH_PORTS))
    assert line == (
        "ported (DistributedComponent, mpi, 1 node(s) x 1 process(es) = 1 rank(s)); "
        "inputs lr, steps, n; outputs model"
    )


def test_env_shows_shared_values_once_and_what_varies_per_rank():
    component = load_component(MPI_SPEC)
    component.runsettings.resource_layout.configure(instance_count=2, process_count_per_node=2)
    table = EnvTable(component, component.rank_environments())
    assert table.view.shared["OMPI_COMM_WORLD_SIZE"] == "4"
    assert "OMPI_COMM_WORLD_SIZE" not in table.view.header
    assert [row[:4] for row in table.view.rows] == [
        ["0", "0", "0", "0"],
        ["1", "0", "1", "1"],
        ["2", "1", "0", "2"],
        ["3", "1", "1", "3"],
    ]
    html = table._repr_html_()
    assert html.count("OMPI_<wbr>COMM_<wbr>WORLD_<wbr>SIZE") == 1


def test_tf_config_is_shown_in_readable_parts():
    envs = []
    hosts = ["127.0.0.1:1001", "127.0.0.1:1002", "127.0.0.1:1003"]
    for index, kind in enumerate(["worker", "worker", "ps"]):
        task = {"type": kind, "index": index if kind == "worker" else 0}
        config = {"cluster": {"worker": hosts[:2], "ps": hosts[2:]}, "task": task}
        envs.append({"TF_CONFIG": json.dumps({**config, "environment": "cloud"})})
    view = rank_view("tensorflow", envs)
    assert view.shared == {
        "TF_CONFIG cluster": "worker: 127.0.0.1:1001, 127.0.0.1:1002; ps: 127.0.0.1:1003",
        "TF_CONFIG environment": "cloud",
    }
    assert view.header == ["rank", "node", "local rank", "TF_CONFIG task"]
    assert [row[-1] for row in view.rows] == ["worker 0", "worker 1", "ps 0"]


def test_env_table_of_a_tf_spec_has_no_raw_json():
    component = load_component(TF_SPEC)
    component.runsettings.resource_layout.configure(instance_count=2, process_count_per_node=1)
    text = repr(EnvTable(component, component.rank_environments()))
    assert "{" not in text and "TF_CONFIG task" in text and "worker 1" in text, text


def test_the_name_shows_once_and_a_display_name_that_says_more_beside_it():
    bare = load_component(WITH_PORTS)
    assert component_text(bare).splitlines()[0] == "ported, DistributedComponent"
    assert component_html(bare).count("ported") == 1  # the header names it once
    named = load_component(WITH_PORTS.replace("name: ported", "name: ported\ndisplay_name: Ported"))
    assert component_text(named).splitlines()[0] == "ported, DistributedComponent"
    titled = load_component(
        WITH_PORTS.replace("name: ported", "name: ported\ndisplay_name: MPI demo")
    )
    assert component_text(titled).splitlines()[0] == "MPI demo (ported), DistributedComponent"
    assert "<b>MPI demo</b> <code>ported</code>" in component_html(titled)


def test_text_shows_no_markdown_and_html_draws_code_as_code():
    from jupyter_distcomp.notebook.views.code_marks import plain, rich
    from jupyter_distcomp.notebook.views.env import files_text

    assert plain("run `%distcomp restart t` <now>") == "run %distcomp restart t <now>"
    assert rich("run `%distcomp restart t` <now>") == (
        "run <code>%distcomp restart t</code> &lt;now&gt;"
    )
    component = load_component(MPI_SPEC)
    component.runsettings.resource_layout.configure(instance_count=2, process_count_per_node=1)
    table = EnvTable(component, component.rank_environments(), files=files_text(2, True))
    text = repr(table)
    assert "files: %%distcomp run: each node in its own copy" in text and "`" not in text, text
    assert "files: <code>%%distcomp run</code>: each node" in table._repr_html_()
    assert "`" not in table._repr_html_()
