"""The run-settings panel, driven from Python as a user drives it in the browser.

Values are set on the controls (what typing does), buttons pressed with ``.click()`` (which
runs their handlers), and the checks are on what a user relies on: the component's run
settings, the preview, the status line and the real effects (ranks running, command output,
a YAML file Azure ML reads). Components come from YAML text through ``load_component``.
Pure widget tests take about a second together; the ``slow`` ones start real ranks.
"""

from __future__ import annotations

import time

import ipywidgets as w
import psutil
import pytest
from IPython.utils.capture import capture_output

from jupyter_distcomp.core.spec_parsing import load_component
from jupyter_distcomp.notebook.session import Session
from jupyter_distcomp.notebook.widgets import RunSettingsPanel, get_panel, panel_for

SPEC = """\
name: train_demo
display_name: Train demo
type: DistributedComponent
inputs:
  data: {type: AnyDirectory, description: training data}
  epochs: {type: Integer, default: 4, min: 1, max: 100}
  lr: {type: Float, default: 0.1, min: 0.0}
  optimizer: {type: Enum, enum: [adam, sgd], default: adam}
  verbose: {type: Boolean, default: false}
  tag: {type: String, optional: true}
outputs:
  model: {type: path}
launcher:
  type: LAUNCHER
  additional_arguments: >-
    python train.py --data {inputs.data} --epochs {inputs.epochs} --lr {inputs.lr}
    --optimizer {inputs.optimizer} [--tag {inputs.tag}] --model {outputs.model}
"""

HELLO = """\
name: hello
type: DistributedComponent
inputs:
  greeting: {type: String, default: hello}
  seconds: {type: Integer, default: 0}
launcher:
  type: mpi
  additional_arguments: python hello.py {inputs.greeting} {inputs.seconds}
"""

#: PID_DIR: the test's folder, by absolute path (a command runs in a copy of its code folder)
HELLO_PY = """\
import os, sys, time
PID_DIR = "{pid_dir}"
rank = os.environ["OMPI_COMM_WORLD_RANK"]
size = os.environ["OMPI_COMM_WORLD_SIZE"]
with open(os.path.join(PID_DIR, f"pid{rank}"), "w") as handle:  # the test checks they end
    handle.write(str(os.getpid()))
print(f"{sys.argv[1]} from {rank} of {size}", flush=True)
time.sleep(int(sys.argv[2]))
if sys.argv[1] == "fail" and rank == "1":
    print("rank 1 gives up", file=sys.stderr)
    sys.exit(3)
"""


#: what a spec submitted from the panel names (the panel refuses a spec without one)
ENVIRONMENT = "environment:\n  name: AzureML-Minimal\n"


def spec_text(launcher: str = "mpi") -> str:
    return SPEC.replace("LAUNCHER", launcher)


def component(launcher: str = "mpi", base_dir=None, environment: bool = False):
    return load_component(
        spec_text(launcher) + (ENVIRONMENT if environment else ""), base_dir=base_dir
    )


@pytest.fixture
def panel():
    made = []

    def make(comp=None, name="demo", session=None):
        made.append(RunSettingsPanel(name, comp or component(), session or Session()))
        return made[-1]

    yield make
    for each in made:
        each.close()


def classes(widget: w.Widget) -> set[str]:
    return set(widget._dom_classes)


def all_widgets(widget: w.Widget) -> list[w.Widget]:
    found = [widget]
    for child in getattr(widget, "children", ()):
        found += all_widgets(child)
    return found


def by_class(panel: RunSettingsPanel, css: str) -> w.Widget:
    (found,) = [x for x in all_widgets(panel) if css in getattr(x, "_dom_classes", ())]
    return found


# -- layout: one source of truth ----------------------------------------------------------


def test_layout_controls_and_configure_are_one_state(panel):
    comp = component()
    p = panel(comp)
    nodes, per_node = by_class(p, "distcomp-instance-count"), by_class(p, "distcomp-process-count")
    assert isinstance(nodes, w.BoundedIntText) and nodes.min == 1
    nodes.value, per_node.value = 2, 3  # the user types in the panel
    layout = comp.runsettings.resource_layout
    assert (layout.instance_count, layout.process_count_per_node, layout.world_size) == (2, 3, 6)
    assert "world size 6 = 2 node(s) x 3 process(es)" in p.preview.value

    layout.configure(instance_count=4, process_count_per_node=1)  # ...and from Python
    assert (nodes.value, per_node.value) == (4, 1)
    assert "world size 4 = 4 node(s) x 1 process(es)" in p.preview.value
    assert "launcher <b>mpi</b>" in by_class(p, "distcomp-launcher").value


def test_a_refused_layout_edit_puts_the_control_back_and_says_why(panel):
    comp = component()
    p = panel(comp)
    nodes, per_node = by_class(p, "distcomp-instance-count"), by_class(p, "distcomp-process-count")
    nodes.value = 2
    nodes.value = 2000  # more nodes than a layout may have
    layout = comp.runsettings.resource_layout
    assert layout.instance_count == 2 and nodes.value == 2  # the control shows the settings
    message = by_class(p, "distcomp-layout-message").value
    assert "not applied: instance_count must be at most 1,024, got 2,000" in message
    assert "world size 2 = 2 node(s) x 1 process(es)" in p.preview.value
    per_node.value = 40_000
    assert layout.process_count_per_node == 1 and per_node.value == 1
    assert "process_count_per_node must be at most 1,024" in p.layout_fields.message.value
    per_node.value = 3  # an edit the layout takes clears the message
    assert layout.world_size == 6 and p.layout_fields.message.value == ""


def test_the_set_boxes_are_labelled_and_checking_an_output_binds_its_default(panel):
    comp = component()
    p = panel(comp)
    field = p.output_fields["model"]
    assert field.toggle.description == "set"
    assert "unchecked: the default folder" in field.toggle.tooltip
    assert "model" not in comp.runsettings.outputs
    field.toggle.value = True  # the user ticks the box of an unset output
    assert comp.runsettings.outputs["model"] == field.default
    assert field.control.value == field.default and field.toggle.value
    field.toggle.value = False
    assert "model" not in comp.runsettings.outputs


def test_config_defaults_and_the_panel_write_the_settings_env_shows(ip):
    try:
        ip.run_line_magic("config", "DistComp.default_instance_count = 3")
        ip.run_cell_magic("distcomp", "wflags", spec_text())
        with capture_output() as captured:
            ip.run_line_magic("distcomp", "widget wflags")
        p = get_panel("wflags")
        assert p.component is ip.user_ns["wflags"]
        assert p.layout_fields.instance_count.value == 3  # %config default for a new component
        bundle = captured.outputs[-1].data
        assert "application/vnd.jupyter.widget-view+json" in bundle
        assert "world size 3 = 3 node(s) x 1 process(es)" in bundle["text/plain"]

        with capture_output():  # a preview: the settings and the panel stay at 3 x 1
            ip.run_line_magic(
                "distcomp", "env wflags --instance-count 2 --process-count-per-node 2"
            )
        assert p.layout_fields.instance_count.value == 3
        assert p.layout_fields.process_count.value == 1
        p.layout_fields.instance_count.value = 2
        p.layout_fields.process_count.value = 4
        with capture_output() as captured:
            ip.run_line_magic("distcomp", "env wflags")
        assert "2 node(s) x 4 process(es)" in captured.outputs[-1].data["text/html"]
        assert p.session is ip.magics_manager.registry["DistCompMagics"].session
    finally:
        ip.run_line_magic("config", "DistComp.default_instance_count = 1")


def test_widget_of_an_unknown_component_is_a_clear_usage_error(ip):
    from jupyter_distcomp import DistcompError

    ip.run_cell_magic("distcomp", "wknown", spec_text())
    with pytest.raises(DistcompError, match=r"No component named 'wknwn'.*wknown"):
        ip.run_line_magic("distcomp", "widget wknwn")


def test_tensorflow_shows_worker_and_parameter_server_counts(panel):
    comp = component("tensorflow")
    p = panel(comp)
    workers, servers = by_class(p, "distcomp-worker-count"), by_class(p, "distcomp-ps-count")
    with pytest.raises(ValueError):  # Azure lays TensorFlow out in tasks, not processes
        by_class(p, "distcomp-process-count")
    p.layout_fields.instance_count.value = 2
    servers.value = 1
    layout = comp.runsettings.resource_layout
    assert (layout.worker_count, layout.parameter_server_count) == (None, 1)
    assert "world size 3 = 2 worker(s), 1 parameter server(s) on 2 node(s)" in p.preview.value
    assert "<td>ps 0</td>" in p.preview.value and "<td>worker 1</td>" in p.preview.value
    workers.value = 3
    assert layout.worker_count == 3
    assert "world size 4 = 3 worker(s)" in p.preview.value
    layout.configure(worker_count=1)
    assert workers.value == 1 and "<td>worker 1</td>" not in p.preview.value
    with pytest.raises(ValueError):
        by_class(panel(component("mpi"), name="m"), "distcomp-worker-count")


# -- inputs -------------------------------------------------------------------------------


def test_one_control_per_input_from_its_spec_type(panel):
    p = panel()
    expected = {
        "data": w.Text,
        "epochs": w.BoundedIntText,
        "lr": w.BoundedFloatText,
        "optimizer": w.Dropdown,
        "verbose": w.Checkbox,
        "tag": w.Text,
    }
    for name, kind in expected.items():
        assert type(by_class(p, f"distcomp-input-{name}")) is kind, name
    epochs = by_class(p, "distcomp-input-epochs")
    assert (epochs.min, epochs.max, epochs.value) == (1, 100, 4)  # spec range, default filled
    assert by_class(p, "distcomp-input-lr").value == 0.1
    assert by_class(p, "distcomp-input-optimizer").options == ("adam", "sgd")
    assert by_class(p, "distcomp-input-verbose").value is False
    assert "local path or azureml:// URI" in by_class(p, "distcomp-input-data").placeholder
    assert p.component.runsettings.inputs == {}  # defaults shown, not copied into settings
    assert "required: give a value" in p.input_fields["data"].message.value
    assert "default 4" in p.input_fields["epochs"].message.value
    assert by_class(p, "distcomp-output-model").placeholder == "outputs/train_demo/model"


def test_input_values_flow_both_ways_and_optional_ones_can_be_unset(panel, tmp_path):
    comp = component()
    settings = comp.runsettings
    p = panel(comp)
    by_class(p, "distcomp-input-epochs").value = 7
    by_class(p, "distcomp-input-optimizer").value = "sgd"
    by_class(p, "distcomp-input-verbose").value = True
    by_class(p, "distcomp-input-data").value = str(tmp_path)
    assert settings.inputs == {
        "epochs": 7,
        "optimizer": "sgd",
        "verbose": True,
        "data": str(tmp_path),
    }
    assert f"--data {tmp_path} --epochs 7 --lr 0.1 --optimizer sgd --model" in p.preview.value

    settings.set_input("lr", 0.5)  # from Python: the control follows
    assert by_class(p, "distcomp-input-lr").value == 0.5

    tag, tag_set = by_class(p, "distcomp-input-tag"), by_class(p, "distcomp-input-set-tag")
    assert tag_set.layout.visibility == "visible" and tag_set.value is False
    tag.value = "run 1"  # typing sets it
    assert settings.inputs["tag"] == "run 1" and tag_set.value is True
    assert "[--tag" not in p.preview.value and "--tag &#x27;run 1&#x27;" in p.preview.value
    tag_set.value = False  # the explicit unset state
    assert "tag" not in settings.inputs and "--tag" not in p.preview.value
    settings.set_input("tag", "again")
    assert tag_set.value is True and tag.value == "again"

    by_class(p, "distcomp-input-data").value = ""  # a cleared path unbinds the data input
    assert "data" not in settings.inputs
    assert (
        "needs values for its required inputs: data" in p.preview.value
        and "Traceback" not in p.preview.value
    )


def test_invalid_values_are_marked_at_the_control_with_the_reason(panel, tmp_path):
    comp = component()
    p = panel(comp)
    epochs = by_class(p, "distcomp-input-epochs")
    comp.runsettings.set_input("epochs", 0)  # out of the spec's range, set from Python
    assert "distcomp-invalid" in classes(epochs)
    assert "must be at least 1, got 0" in p.input_fields["epochs"].message.value
    assert comp.runsettings.inputs["epochs"] == 0  # not clamped behind the user's back
    assert "cannot be rendered yet" in p.preview.value
    comp.runsettings.set_input("optimizer", "adamw")
    assert "must be one of adam, sgd" in p.input_fields["optimizer"].message.value
    assert "Did you mean" in p.input_fields["optimizer"].message.value
    epochs.value = 5  # the user fixes it in the panel
    assert "distcomp-invalid" not in classes(epochs) and comp.runsettings.inputs["epochs"] == 5
    comp.runsettings.set_input("data", str(tmp_path / "missing"))
    assert "no such file or folder" in p.input_fields["data"].message.value


# -- preview and text fallback ------------------------------------------------------------


def test_preview_shows_world_size_each_rank_and_rank0_command(panel, tmp_path):
    comp = component("torch.distributed")
    comp.runsettings.resource_layout.configure(instance_count=2, process_count_per_node=2)
    comp.runsettings.set_input("data", str(tmp_path))
    html = panel(comp).preview.value
    assert "world size 4 = 2 node(s) x 2 process(es)" in html
    assert "<th>rank</th><th>node</th><th>local rank</th>" in html
    assert "<th>NODE_RANK</th><th>RANK</th><th>LOCAL_RANK</th>" in html
    assert (
        "<tr><td>3</td><td>1</td><td>1</td><td>1</td><td>3</td><td>1</td><td>rank_3</td>"
        "<td>1</td></tr>"
    ) in html
    assert "WORLD_SIZE=4" in html  # equal on every rank: one line under the table
    # no ranks yet: the port is the one each world chooses when it starts
    assert "MASTER_PORT=&lt;chosen at start&gt;" in html
    assert f"rank 0 runs: <code>python train.py --data {tmp_path} --epochs 4" in html


def test_large_worlds_keep_the_table_compact(panel):
    comp = component()
    comp.runsettings.resource_layout.configure(instance_count=16, process_count_per_node=8)
    html = panel(comp).preview.value
    assert "world size 128" in html
    assert html.count("<tr>") == 1 + 8  # header, 6 first ranks, "...", the last rank
    assert "<td>127</td>" in html and "<td>...</td>" in html


def test_text_fallback_is_a_summary_of_the_settings(panel):
    comp = component()
    comp.runsettings.set_input("epochs", 9)
    comp.runsettings.compute = "cpu-cluster"
    p = panel(comp, name="demo")
    text = p._repr_mimebundle_()["text/plain"]
    assert "VBox" not in text
    assert "distcomp run settings of demo (mpi)" in text
    assert "world size 1 = 1 node(s) x 1 process(es)" in text
    assert "input   epochs = 9" in text and "input   lr = 0.1 (default)" in text
    assert "input   data = unset (required)" in text and "input   tag = unset" in text
    assert "output  model -> outputs/train_demo/model" in text
    assert "compute: cpu-cluster" in text
    assert "rank 0 gets: OMPI_COMM_WORLD_RANK=0, OMPI_COMM_WORLD_SIZE=1" in text
    assert "command: line 5, key 'inputs.data'" in text  # why no command yet


def test_stable_css_classes_for_browser_tests(panel):
    p = panel(component("tensorflow"))
    found = set().union(*(classes(x) for x in all_widgets(p) if hasattr(x, "_dom_classes")))
    found |= classes(by_class(panel(component("mpi"), name="m"), "distcomp-process-count"))
    for css in (
        "distcomp-panel",
        "distcomp-instance-count",
        "distcomp-process-count",
        "distcomp-worker-count",
        "distcomp-ps-count",
        "distcomp-input-epochs",
        "distcomp-output-model",
        "distcomp-btn-start",
        "distcomp-btn-run-command",
        "distcomp-btn-export",
        "distcomp-btn-submit",
        "distcomp-btn-follow",
        "distcomp-btn-stop",
        "distcomp-export-path",
        "distcomp-compute",
        "distcomp-interactive",
        "distcomp-status",
        "distcomp-preview",
        "distcomp-progress",
    ):
        assert css in found, css
    import jupyter_distcomp.notebook.widgets as module

    undocumented = {c for c in found if f"``{c}``" not in module.__doc__}
    assert not {
        c for c in undocumented if not c.startswith(("distcomp-input-", "distcomp-output-"))
    }


def test_redefinition_keeps_values_and_the_new_panel_follows(ip, tmp_path):
    ip.run_cell_magic("distcomp", "wredef", spec_text())
    with capture_output():
        ip.run_line_magic("distcomp", "widget wredef")
    old = get_panel("wredef")
    old.layout_fields.instance_count.value = 2
    old.input_fields["epochs"].control.value = 50
    old.input_fields["tag"].control.value = "keep me"
    narrower = (
        spec_text()
        .replace("max: 100", "max: 10")
        .replace("  tag: {type: String, optional: true}\n", "")
        .replace(" [--tag {inputs.tag}]", "")
    )
    ip.run_cell_magic("distcomp", "wredef", narrower)
    with capture_output():
        ip.run_line_magic("distcomp", "widget wredef")
    new = get_panel("wredef")
    assert new is not old and old.closed
    assert new.layout_fields.instance_count.value == 2
    assert new.component.runsettings.inputs == {}  # 50 is out of the new range; tag is gone
    new.input_fields["epochs"].control.value = 8
    assert ip.user_ns["wredef"].runsettings.inputs == {"epochs": 8}
    with capture_output():
        ip.run_line_magic("distcomp", "widget wredef")
    assert get_panel("wredef") is new  # the same panel, shown again


# -- actions ------------------------------------------------------------------------------


def press(p: RunSettingsPanel, key: str, timeout: float = 120) -> float:
    """Click like the browser does; the share of the action's time the click itself took
    (near 0 when the handler returns at once and a thread does the work, 1 if it blocks)."""
    tic = time.perf_counter()
    p.buttons[key].click()
    took = time.perf_counter() - tic
    assert p.wait(timeout), f"{key} still running after {timeout} s: {p.worker.text}"
    return took / (time.perf_counter() - tic)


def test_export_writes_yaml_that_azure_ml_loads(panel, tmp_path):
    from azure.ai.ml import load_job

    (tmp_path / "train.py").write_text("print('hi')\n")
    comp = component(base_dir=tmp_path)
    p = panel(comp)
    p.layout_fields.instance_count.value = 2
    p.layout_fields.process_count.value = 3
    by_class(p, "distcomp-input-data").value = "azureml://datastores/blob/paths/mnist/"
    by_class(p, "distcomp-compute").value = "cpu-cluster"
    assert comp.runsettings.compute == "cpu-cluster"
    by_class(p, "distcomp-export-path").value = str(tmp_path / "out" / "job.yml")
    assert press(p, "export") < 0.5  # the click returned before the export was done
    assert p.worker.state == "ok", p.worker.text
    assert f"az ml job create -f {tmp_path / 'out' / 'job.yml'}" in p.worker.text
    job = load_job(tmp_path / "out" / "job.yml")
    assert job.resources.instance_count == 2
    assert job.distribution.process_count_per_instance == 3
    assert job.compute == "cpu-cluster"
    assert job.inputs["data"].path == "azureml://datastores/blob/paths/mnist/"


def test_action_errors_land_in_the_status_line(panel, tmp_path):
    p = panel(component(base_dir=tmp_path))
    p.export_path.value = str(tmp_path / "job.yml")
    press(p, "export")  # the required data input has no value
    assert p.worker.state == "error"
    assert "needs values for its required inputs: data" in p.worker.text
    assert "needs values" in by_class(p, "distcomp-status").value
    assert not (tmp_path / "job.yml").exists()
    press(p, "submit")
    assert p.worker.state == "error" and "needs a compute target" in p.worker.text
    press(p, "run-command")
    assert (
        p.worker.state == "error" and "needs values for its required inputs: data" in p.worker.text
    )
    assert "Traceback" not in p.worker.text
    assert all(not b.disabled for k, b in p.buttons.items() if k != "stop")  # usable again
    # no ranks and no action: nothing to stop
    assert p.buttons["stop"].disabled and p.buttons["stop"].button_style == ""


@pytest.fixture
def standin():
    from .azure_standin import AzureStandIn

    with AzureStandIn() as server:
        yield server


def azure_session(standin, **settings):
    """A session whose AzureML settings name the stand-in's workspace."""
    session = Session()
    azureml = session.azureml
    azureml.subscription_id = standin.subscription
    azureml.resource_group = standin.resource_group
    azureml.workspace_name = standin.workspace
    azureml.client_kwargs = standin.client_kwargs(show_progress=False)
    for key, value in settings.items():
        setattr(azureml, key, value)
    return session


@pytest.mark.slow
def test_submit_sends_the_panel_layout_to_azure_ml(panel, standin, tmp_path):
    (tmp_path / "train.py").write_text("print('hi')\n")
    comp = component(base_dir=tmp_path, environment=True)
    from .azure_standin import FakeCredential

    p = panel(comp, session=azure_session(standin, credential=FakeCredential(standin.token)))
    p.layout_fields.instance_count.value = 3
    p.layout_fields.process_count.value = 2
    p.input_fields["data"].control.value = "azureml://datastores/blob/paths/mnist/"
    p.compute.value = "gpu-cluster"
    p.interactive.value = "jupyterlab, vscode"
    press(p, "submit")
    assert p.worker.state == "ok", p.worker.text
    body = standin.job_puts()[0].body["properties"]
    assert body["resources"]["instanceCount"] == 3
    assert body["distribution"]["processCountPerInstance"] == 2
    assert body["computeId"].endswith("gpu-cluster")
    services = {k: v["jobServiceType"] for k, v in body["services"].items()}
    assert (services["distcomp_jupyterlab"], services["distcomp_vscode"]) == (
        "JupyterLab",
        "VSCode",
    )
    assert "distcomp_ssh" not in services
    assert f"submitted job {p.last_job.name}" in p.worker.text


@pytest.mark.slow
def test_submit_checks_the_layout_against_the_compute(panel, standin, tmp_path):
    from jupyter_distcomp.azureml import preflight

    from .azure_standin import FakeCredential

    preflight._SIZES.clear()
    (tmp_path / "train.py").write_text("print('hi')\n")
    session = azure_session(standin, credential=FakeCredential(standin.token))
    p = panel(component("torch.distributed", tmp_path, environment=True), session=session)
    p.layout_fields.process_count.value = 4
    p.input_fields["data"].control.value = "azureml://datastores/blob/paths/mnist/"
    p.compute.value = "gpu-small"
    press(p, "submit")
    assert p.worker.state == "error"
    assert "process_count_per_node 4 > 1 GPU of Standard_NC6s_v3 on compute 'gpu-small'" in (
        p.worker.text
    )
    assert "set process_count_per_node to 1" in p.worker.text
    assert standin.job_puts() == []
    # a CPU cluster takes the job, with the warning in the log and a word in the status line
    p.compute.value = "cpu-cluster"
    press(p, "submit")
    assert p.worker.state == "ok", p.worker.text
    assert "1 warning(s) in the log below" in p.worker.text
    (logged,) = [o["text"] for o in p.worker.log.outputs if o.get("name") == "stderr"]
    assert "Standard_DS3_v2 of compute 'cpu-cluster' has no GPUs" in logged
    assert standin.job_puts()[0].body["properties"]["computeId"].endswith("/cpu-cluster")


@pytest.mark.slow
def test_follow_shows_every_rank_of_the_submitted_job_in_the_log(panel, tmp_path):
    from jupyter_distcomp.standin import AzureStandIn

    (tmp_path / "hello.py").write_text(HELLO_PY.replace("{pid_dir}", str(tmp_path)))
    comp = load_component(HELLO + ENVIRONMENT, base_dir=tmp_path)
    comp.runsettings.resource_layout.configure(instance_count=2, process_count_per_node=1)
    with AzureStandIn(root=tmp_path / "standin") as running:  # runs what is submitted
        session = Session()
        for key, value in running.session_settings().items():
            setattr(session.azureml, key, value)
        session.azureml.follow_poll = 0.2
        p = panel(comp, name="hello", session=session)
        press(p, "follow")  # nothing submitted yet
        assert p.worker.state == "error" and "press 'submit to Azure ML' first" in p.worker.text
        p.compute.value = "cpu"
        press(p, "submit")
        assert p.worker.state == "ok", p.worker.text
        press(p, "follow")
        assert p.worker.state == "ok", p.worker.text
        assert f"job {p.last_job.name}: Completed" in p.worker.text
        logged = "".join(o["text"] for o in p.worker.log.outputs if o.get("name") == "stdout")
        assert "[node 0 rank 0] hello from 0 of 2" in logged
        assert "[node 1 rank 1] hello from 1 of 2" in logged


@pytest.mark.slow
def test_submit_without_credentials_says_how_to_sign_in(panel, standin, tmp_path, monkeypatch):
    from .azure_standin import TOKEN

    for name in list(__import__("os").environ):
        if name.startswith(("AZURE_", "IDENTITY_", "MSI_")):
            monkeypatch.delenv(name)
    monkeypatch.setenv("AZURE_CONFIG_DIR", str(tmp_path / "no-az-cli"))
    monkeypatch.setenv("PATH", "/nonexistent")

    (tmp_path / "train.py").write_text("print('hi')\n")
    comp = component(base_dir=tmp_path, environment=True)
    p = panel(comp, session=azure_session(standin, compute="cpu"))
    p.input_fields["data"].control.value = "azureml://datastores/blob/paths/mnist/"
    press(p, "submit")
    assert p.worker.state == "error"
    assert "no Azure credentials were found" in p.worker.text and "az login" in p.worker.text
    assert "Traceback" not in p.worker.text and TOKEN not in p.worker.text
    assert standin.requests == []


@pytest.mark.slow
def test_submit_refuses_a_spec_without_an_environment_naming_both_fixes(panel, standin, tmp_path):
    from .azure_standin import FakeCredential

    (tmp_path / "train.py").write_text("print('hi')\n")
    session = azure_session(standin, credential=FakeCredential(standin.token), compute="cpu")
    comp = session.define("bare", spec_text(), base_dir=tmp_path)  # %%distcomp bare
    p = panel(comp, name="bare", session=session)
    p.input_fields["data"].control.value = "azureml://datastores/blob/paths/mnist/"
    press(p, "submit")
    assert p.worker.state == "error", p.worker.text
    said = p.worker.text
    assert "Not submitted: 'bare' names no environment" in said, said
    assert "add an `environment:` section" in said, said
    assert "`%distcomp submit bare --no-environment`" in said, said
    assert "Traceback" not in said
    assert standin.requests == []  # nothing reached the workspace


# -- real ranks ---------------------------------------------------------------------------


def our_processes() -> list[psutil.Process]:
    return psutil.Process().children(recursive=True)


def gone(procs: list[psutil.Process], seconds: float = 15) -> list[psutil.Process]:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        alive = [p for p in procs if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
        if not alive:
            return []
        time.sleep(0.1)
    return alive


def still_running(pids: list[int], program: str, seconds: float = 15) -> list[int]:
    """Which of ``pids`` still run ``program`` after up to ``seconds`` (a reused pid does not)."""

    def running(pid: int) -> bool:
        try:
            proc = psutil.Process(pid)
            return proc.status() != psutil.STATUS_ZOMBIE and program in " ".join(proc.cmdline())
        except psutil.Error:
            return False

    deadline = time.monotonic() + seconds
    while any(map(running, pids)) and time.monotonic() < deadline:
        time.sleep(0.1)
    return [pid for pid in pids if running(pid)]


def eventually(check, seconds: float = 5) -> bool:
    deadline = time.monotonic() + seconds
    while not check():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


@pytest.mark.slow
def test_start_ranks_then_stop_leaves_no_process(panel):
    from jupyter_distcomp.local.ranks.backend import get_backend

    comp = load_component(HELLO)
    p = panel(comp, name="wstart")
    p.layout_fields.process_count.value = 2
    before = {q.pid for q in our_processes()}  # count only what this test starts
    try:
        assert press(p, "start") < 0.5  # the handler returns at once; a thread does the work
        assert p.worker.state == "ok", p.worker.text
        assert "2 of 2 ranks ready" in by_class(p, "distcomp-status").value
        assert (p.worker.progress.value, p.worker.progress.max) == (2, 2)
        world = get_backend().world("wstart")
        assert world is not None and [r.state for r in world.ranks] == ["idle", "idle"]
        pids = [r.pid for r in world.ranks]
        assert all(psutil.pid_exists(pid) for pid in pids)
        assert eventually(lambda: "2 idle" in p.ranks_line.value)
        started = [q for q in our_processes() if q.pid not in before]
        assert started
        press(p, "start")  # same layout: the running ranks are reused
        assert get_backend().world("wstart") is world
    finally:
        p.stop().join(60)
    assert "Stopped the ranks of wstart" in p.worker.text
    assert not gone(started) and get_backend().world("wstart") is None
    assert eventually(lambda: "stopped" in p.ranks_line.value)


@pytest.mark.slow
def test_the_panel_shows_the_current_state_only(panel):
    """Ranks stopped elsewhere (a magic, the ranks panel): "ready" gives way to "stopped";
    a new action replaces the log of the one before."""
    from jupyter_distcomp.local.ranks.backend import get_backend

    p = panel(load_component(HELLO), name="wcurrent")
    try:
        press(p, "start")
        assert "1 of 1 ranks ready" in p.worker.text
        p.worker.write("an earlier action's error", stderr=True)
        get_backend().stop("wcurrent")  # as `%distcomp stop wcurrent` does
        assert eventually(lambda: p.worker.text == "The ranks of wcurrent stopped."), p.worker.text
        assert "ranks: stopped" in p.ranks_line.value
        press(p, "start")
        assert "1 of 1 ranks ready" in p.worker.text and p.worker.log.outputs == ()
    finally:
        p.stop().join(60)


@pytest.mark.slow
def test_run_command_streams_labelled_output_and_failures(panel, tmp_path):
    (tmp_path / "hello.py").write_text(HELLO_PY.replace("{pid_dir}", str(tmp_path)))
    comp = load_component(HELLO, base_dir=tmp_path)
    p = panel(comp, name="wcmd")
    p.layout_fields.process_count.value = 2
    press(p, "run-command")
    assert p.worker.state == "ok", p.worker.text
    log = "".join(o["text"] for o in p.worker.log.outputs)
    assert "[rank 0] hello from 0 of 2" in log and "[rank 1] hello from 1 of 2" in log
    assert "every rank succeeded" in p.worker.text

    p.input_fields["greeting"].control.value = "fail"
    press(p, "run-command")
    assert p.worker.state == "error"
    assert "rank 1" in p.worker.text and "exit code 3" in p.worker.text
    assert "rank 1 gives up" in p.worker.text
    # the ranks' own pids: a leaked rank is reparented to init, no child of ours any more
    ranks = [int((tmp_path / f"pid{rank}").read_text()) for rank in range(2)]
    assert not still_running(ranks, "hello.py")


@pytest.mark.slow
def test_stop_interrupts_a_running_command(panel, tmp_path):
    (tmp_path / "hello.py").write_text(HELLO_PY.replace("{pid_dir}", str(tmp_path)))
    comp = load_component(HELLO, base_dir=tmp_path)
    comp.runsettings.set_input("seconds", 60)
    p = panel(comp, name="wlong")
    p.layout_fields.process_count.value = 2
    before = {q.pid for q in our_processes()}  # count only what this test starts
    p.buttons["run-command"].click()
    deadline = time.monotonic() + 60
    while "hello from 1" not in "".join(o["text"] for o in p.worker.log.outputs):
        assert time.monotonic() < deadline, p.worker.text
        time.sleep(0.1)
    running = [q for q in our_processes() if q.pid not in before]
    assert running
    p.buttons["stop"].click()  # code runs: the first click asks, as JupyterLab does
    assert p.buttons["stop"].description == "confirm stop"
    assert "Stop ends the command running on every rank" in p.worker.text
    assert p.worker.busy and all(q.is_running() for q in running)
    p.buttons["stop"].click()
    assert p.wait(30), "the ranks sleep 60 s: stop must end them long before"
    assert p.buttons["stop"].description == "stop ranks"
    assert "Stopped the command on every rank" in p.worker.text
    assert not gone(running)


def test_an_unanswered_stop_question_goes_away(panel, monkeypatch):
    import threading

    from jupyter_distcomp.notebook.widgets import actions

    monkeypatch.setattr(actions, "CONFIRM_SECONDS", 0.3)
    p = panel(component(), name="wask")
    release = threading.Event()
    assert p.worker.run("run the command", lambda: release.wait(30))  # as a long command
    try:
        before = p.worker.text
        p.buttons["stop"].click()
        assert p.buttons["stop"].description == "confirm stop"
        assert p.worker.text.startswith("Stop ends the command running on every rank")
        assert eventually(lambda: p.buttons["stop"].description == "stop ranks")
        assert p.worker.text == before and p.worker.busy  # nothing was stopped
    finally:
        release.set()
        p.wait(30)


def test_panel_for_reuses_the_panel_of_the_same_component():
    comp, session = component(), Session()
    first = panel_for("wreuse", comp, session)
    assert panel_for("wreuse", comp, session) is first
    second = panel_for("wreuse", component(), session)
    assert second is not first and first.closed
    second.close()


def test_a_bounded_input_reads_as_people_write_its_range(panel):
    from .test_display import WITH_PORTS  # lr >= 0, steps <= 9, n from 1 to 4

    p = panel(load_component(WITH_PORTS))
    labels = {
        name: next(
            x.value for x in all_widgets(p) if isinstance(x, w.HTML) and f"<b>{name}</b>" in x.value
        )
        for name in ("lr", "steps", "n")
    }
    assert "number (&gt;= 0)" in labels["lr"], labels
    assert "integer (&lt;= 9)" in labels["steps"], labels
    assert "integer (1 to 4)" in labels["n"] and "[" not in "".join(labels.values()), labels
