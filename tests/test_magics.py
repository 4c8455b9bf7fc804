"""The magics in a real IPython shell: definitions, errors as the message only, the env table."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from IPython.core.error import UsageError

from jupyter_distcomp import Component, DistcompError, SpecError

SPEC = """\
name: mpi_demo
type: DistributedComponent
inputs:
  n: {type: Integer, default: 4, min: 1}
outputs:
  out: {type: path}
launcher:
  type: mpi
  additional_arguments: python demo.py --n {inputs.n} --out {outputs.out}
"""


def run_cell(ip, line: str, cell: str | None = None):
    """Run a cell the way a notebook does and return (result, captured display outputs)."""
    from IPython.utils.capture import capture_output

    source = f"%%distcomp {line}\n{cell}" if cell is not None else f"%distcomp {line}"
    with capture_output() as captured:
        result = ip.run_cell(source)
    return result, captured


def test_load_ext_imports_no_heavy_package():
    code = (
        "import sys, json\n"
        "from IPython.testing.globalipapp import get_ipython\n"
        "ip = get_ipython()\n"
        "ip.run_line_magic('load_ext', 'jupyter_distcomp')\n"
        "heavy = ['ipyparallel', 'mpi4py', 'azure.ai.ml', 'ipywidgets', 'jsonschema', 'zmq.asyncio',"
        " 'tensorflow', 'deepspeed', 'torch']\n"
        "print(json.dumps([m for m in heavy if m in sys.modules]))\n"
        "print(json.dumps('distcomp' in ip.magics_manager.magics['cell']))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.splitlines()
    assert json.loads(out[-2]) == []
    assert json.loads(out[-1]) is True


def test_definition_binds_name_and_displays_summary(ip):
    result, captured = run_cell(ip, "demo", SPEC)
    assert result.success, result.error_in_exec
    component = ip.user_ns["demo"]
    assert isinstance(component, Component) and component.name == "mpi_demo"
    bundle = captured.outputs[0].data
    assert "mpi_demo" in bundle["text/html"] and "--n {inputs.n}" in bundle["text/html"]
    assert "launcher:    mpi" in bundle["text/plain"]


def test_invalid_spec_fails_the_cell_with_the_message_only(ip):
    bad = SPEC.replace("type: mpi", "type: horovod")
    result, captured = run_cell(ip, "demo_bad", bad)
    assert not result.success
    error = result.error_in_exec
    assert isinstance(error, SpecError), "the spec's error reaches the cell with its type"
    assert (error.line, error.column, error.path) == (9, 9, "launcher.type")  # as the cell counts
    message = str(error)
    assert "line 9, column 9" in message and "horovod" in message
    assert "Traceback" not in captured.stdout + captured.stderr
    assert "demo_bad" not in ip.user_ns


def test_every_mistake_of_a_spec_fails_the_cell_once_with_all_of_them(ip):
    """Three mistakes: one run names all three, at the lines the cell shows, in the editor's
    words (tests/data/bad_specs.json holds the same words for the editor's tests)."""
    bad = (
        SPEC.replace("type: mpi", "type: mpii")
        .replace("min: 1}", "min: 1, optional: maybe}")
        .replace("{inputs.n}", "{inputs.m}")
    )
    result, captured = run_cell(ip, "demo_three", bad)
    error = result.error_in_exec
    assert isinstance(error, SpecError)
    lines = str(error).splitlines()
    assert lines[0] == "3 errors in %%distcomp demo_three:"
    assert [line.split(",")[0].strip() for line in lines[1:]] == ["line 5", "line 9", "line 10"]
    assert "inputs.n.optional must be true or false, got a string 'maybe'." in lines[1]
    assert "unknown launcher type 'mpii'. Did you mean 'mpi'?" in lines[2]
    assert "placeholder {inputs.m} names no declared input." in lines[3]
    assert "Traceback" not in captured.stdout + captured.stderr


def test_redefinition_keeps_user_settings(ip):
    run_cell(ip, "keep", SPEC)
    ip.user_ns["keep"].runsettings.resource_layout.configure(
        instance_count=2, process_count_per_node=3
    )
    ip.user_ns["keep"].runsettings.set_input("n", 8)
    run_cell(ip, "keep", SPEC.replace("default: 4", "default: 5"))
    settings = ip.user_ns["keep"].runsettings
    assert (
        settings.resource_layout.instance_count,
        settings.resource_layout.process_count_per_node,
    ) == (2, 3)
    assert settings.inputs == {"n": 8}
    result, _ = run_cell(ip, "keep", SPEC.replace("default: 4, min: 1", "default: 12, min: 10"))
    assert result.success, result.error_in_exec
    assert ip.user_ns["keep"].runsettings.inputs == {}, "8 is below the new min: dropped"


def test_usage_errors(ip):
    for line, cell, kind, words in [
        ("", "x: 1", UsageError, "needs a component name"),
        ("my-comp", SPEC, UsageError, "Python identifier"),
        ("empty", None, UsageError, "must hold the component's YAML"),
        ("env nope", None, DistcompError, "No component named 'nope'"),
        ("run", "x = 1", UsageError, "the following arguments are required: name"),
    ]:
        result, captured = run_cell(ip, line, cell)
        assert not result.success and type(result.error_in_exec) is kind, line
        assert words in str(result.error_in_exec), (line, str(result.error_in_exec))
        assert "Traceback" not in captured.stdout + captured.stderr


@pytest.mark.parametrize(
    ("line", "cell", "words"),
    [
        ("run x --timeout -1", "x = 1", "--timeout -1: give a number of seconds above 0"),
        ("run x --timeout nan", "x = 1", "--timeout nan: give a number of seconds above 0"),
        ("run x --timeout inf", "x = 1", "--timeout inf: give a number of seconds above 0"),
        ("run x --timeout 0", "x = 1", "--timeout 0: give a number of seconds above 0"),
        ("command x --timeout -5", None, "--timeout -5: give a number of seconds above 0"),
        ("wait x --timeout nan", None, "--timeout nan: give a number of seconds above 0"),
        ("compare x y --timeout -1", None, "--timeout -1: give a number of seconds above 0"),
        ("compare x y --rtol -1", None, "--rtol -1: give a relative tolerance of 0 or more"),
        ("compare x y --rtol nan", None, "--rtol nan: give a relative tolerance of 0 or more"),
        ("compare x y --rtol inf", None, "--rtol inf: give a relative tolerance of 0 or more"),
        ("debug x --rank -1", None, "--rank -1: give a rank of 0 or more"),
        ("layout x --instance-count 0", None, "--instance-count 0: give a count of 1 or more"),
        ("env x --process-count-per-node -2", None, "--process-count-per-node -2: give a count"),
    ],
)
def test_numbers_out_of_range_are_usage_errors_naming_the_range(ip, line, cell, words):
    result, captured = run_cell(ip, line, cell)
    assert not result.success and type(result.error_in_exec) is UsageError, line
    message = str(result.error_in_exec)
    assert words in message, (line, message)
    assert "e.g." in message, message  # and a value that works
    assert "Traceback" not in captured.stdout + captured.stderr


def test_env_table_per_rank(ip):
    pytest.importorskip("jupyter_distcomp.core.layout")
    run_cell(ip, "envdemo", SPEC)
    result, captured = run_cell(ip, "env envdemo --instance-count 2 --process-count-per-node 2")
    assert result.success, result.error_in_exec
    caption, *text = captured.outputs[0].data["text/plain"].splitlines()
    # no ranks yet: the ports are shown as chosen when the ranks start
    assert caption.startswith("mpi: 2 node(s) x 2 process(es) = 4 rank(s); ")
    assert caption.endswith("; ports chosen when the ranks start")
    # what every rank shares, once; then a row per rank with what varies
    shared = text[text.index("on every rank:") + 1 : -5]
    assert [line.split()[0] for line in shared if "OMPI_COMM_WORLD_SIZE" in line] == [
        "OMPI_COMM_WORLD_SIZE"
    ]
    assert any(line.split() == ["OMPI_COMM_WORLD_SIZE", "4"] for line in shared)
    header = text[-5].split()
    assert header[:4] == ["rank", "node", "local", "rank"]
    assert "OMPI_COMM_WORLD_SIZE" not in header
    rows = [line.split() for line in text[-4:]]
    assert [r[:3] for r in rows] == [
        ["0", "0", "0"],
        ["1", "0", "1"],
        ["2", "1", "0"],
        ["3", "1", "1"],
    ]
    assert "OMPI_COMM_WORLD_LOCAL_RANK" in header
    assert "a preview: the settings of envdemo and its ranks are unchanged" in caption
    # the flags previewed that layout: the settings are as they were
    layout = ip.user_ns["envdemo"].runsettings.resource_layout
    assert (layout.instance_count, layout.process_count_per_node) == (1, 1)
    # `layout` sets them, and shows the table of the layout set
    result, captured = run_cell(ip, "layout envdemo --instance-count 2 --process-count-per-node 2")
    assert result.success, result.error_in_exec
    assert (layout.instance_count, layout.process_count_per_node) == (2, 2)
    caption = captured.outputs[0].data["text/plain"].splitlines()[0]
    assert (
        caption == "mpi: 2 node(s) x 2 process(es) = 4 rank(s); ports chosen when the ranks start"
    )


def test_config_defaults_apply_to_new_definitions(ip):
    ip.run_line_magic("config", "DistComp.default_process_count_per_node = 3")
    try:
        run_cell(ip, "configured", SPEC)
        assert ip.user_ns["configured"].runsettings.resource_layout.process_count_per_node == 3
    finally:
        ip.run_line_magic("config", "DistComp.default_process_count_per_node = 1")


V2_SPEC = """\
name: v2_layout
type: command
command: python train.py
distribution:
  type: pytorch
  process_count_per_instance: 4
resources:
  instance_count: 2
"""


def test_a_v2_spec_keeps_its_own_layout_when_defined(ip):
    ip.run_line_magic("config", "DistComp.default_process_count_per_node = 3")
    try:
        run_cell(ip, "v2layout", V2_SPEC)
        layout = ip.user_ns["v2layout"].runsettings.resource_layout
        assert (layout.instance_count, layout.process_count_per_node) == (2, 4)
        # what the spec leaves open takes the %config default
        run_cell(ip, "v2half", V2_SPEC.replace("resources:\n  instance_count: 2\n", ""))
        layout = ip.user_ns["v2half"].runsettings.resource_layout
        assert (layout.instance_count, layout.process_count_per_node) == (1, 4)
    finally:
        ip.run_line_magic("config", "DistComp.default_process_count_per_node = 1")


def _session(ip):
    return ip.magics_manager.registry["DistCompMagics"].session


def test_local_and_azure_settings_are_two_configurables(ip):
    from IPython.utils.capture import capture_output

    session = _session(ip)
    with capture_output() as azure:
        ip.run_line_magic("config", "AzureML")
    with capture_output() as local:
        ip.run_line_magic("config", "DistComp")
    assert "AzureML.compute" in azure.stdout and "AzureML.workspace_config" in azure.stdout
    assert "default_timeout" not in azure.stdout
    assert "DistComp.default_timeout" in local.stdout and "compute" not in local.stdout

    try:
        ip.run_line_magic("config", "AzureML.compute = 'cpu-a'")
        ip.run_line_magic("config", "DistComp.default_timeout = 5")
        assert (session.azureml.compute, session.local.default_timeout) == ("cpu-a", 5)
        assert not session.local.has_trait("compute")
        assert not session.azureml.has_trait("default_timeout")
        # the values live in the shell's config: a new session (%reload_ext) keeps them
        ip.run_line_magic("reload_ext", "jupyter_distcomp")
        fresh = _session(ip)
        assert fresh is not session
        assert (fresh.azureml.compute, fresh.local.default_timeout) == ("cpu-a", 5)
        assert ip.configurables.count(fresh.azureml) == 1
        assert session.azureml not in ip.configurables
    finally:
        ip.run_line_magic("config", "AzureML.compute = None")
        ip.run_line_magic("config", "DistComp.default_timeout = None")


def test_a_setting_given_to_the_other_group_says_where_it_belongs(ip):
    session = _session(ip)
    try:
        with pytest.warns(UserWarning, match=r"Fix: %config AzureML\.compute = "):
            ip.run_line_magic("config", "DistComp.compute = 'cpu-a'")
        with pytest.warns(UserWarning, match=r"Fix: %config DistComp\.default_timeout = "):
            ip.run_line_magic("config", "AzureML.default_timeout = 5")
        assert session.azureml.compute is None and session.local.default_timeout is None
    finally:
        ip.config.DistComp.pop("compute", None)
        ip.config.AzureML.pop("default_timeout", None)


def test_config_azureml_compute_reaches_the_export(ip, tmp_path, monkeypatch):
    import yaml

    monkeypatch.chdir(tmp_path)
    (tmp_path / "demo.py").write_text("print('hi')\n")
    run_cell(ip, "exp", SPEC + "environment: {name: AzureML-Minimal}\n")
    session = _session(ip)
    assert session.resolve_compute(ip.user_ns["exp"]) is None
    try:
        ip.run_line_magic("config", "AzureML.compute = 'cpu-from-config'")
        ip.run_line_magic("config", "AzureML.experiment_name = 'from-config'")
        assert session.resolve_compute(ip.user_ns["exp"]) == "cpu-from-config"
        result, _ = run_cell(ip, "export exp job.yml")
        assert result.success, result.error_in_exec
        job = yaml.safe_load((tmp_path / "job.yml").read_text())
        assert (job["compute"], job["experiment_name"]) == (
            "azureml:cpu-from-config",
            "from-config",
        )
        # the component's own setting, then a flag, win over %config
        ip.user_ns["exp"].runsettings.compute = "cpu-own"
        assert session.resolve_compute(ip.user_ns["exp"]) == "cpu-own"
        result, _ = run_cell(ip, "export exp job.yml --compute cpu-flag")
        assert result.success, result.error_in_exec
        assert yaml.safe_load((tmp_path / "job.yml").read_text())["compute"] == "azureml:cpu-flag"
    finally:
        ip.run_line_magic("config", "AzureML.compute = None")
        ip.run_line_magic("config", "AzureML.experiment_name = None")


def test_an_error_from_inside_the_package_shows_no_package_frames(ip, tmp_path):
    assert run_cell(ip, "inside", SPEC)[0].success
    target = tmp_path / "missing" / "deeper" / "job.yml"
    target.parent.parent.write_text("a file, not a folder")
    result, captured = run_cell(ip, f"export inside {target}")
    assert not result.success
    shown = "\n".join(result.error_in_exec._render_traceback_())
    assert "Error" in shown and str(target.parent.parent) in shown, shown
    assert "File " not in shown and ".py" not in shown, shown
    assert "Traceback" not in captured.stdout + captured.stderr


def test_help_prints_the_subcommands_and_each_ones_options(ip):
    result, captured = run_cell(ip, "--help")
    assert result.success, result.error_in_exec
    assert "unrecognized arguments" not in captured.stdout
    assert "usage: %distcomp" in captured.stdout
    assert "interrupt           send SIGINT to the busy ranks of NAME" in captured.stdout
    result, captured = run_cell(ip, "stop --help")
    assert result.success and "usage: %distcomp stop [-h] [name]" in captured.stdout
    result, captured = run_cell(ip, "-h")
    assert result.success and "%%distcomp NAME defines a component" in captured.stdout
