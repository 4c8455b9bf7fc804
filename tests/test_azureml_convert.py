"""Component -> azure-ai-ml job / component, checked with azure-ai-ml's own validation and REST
conversion (offline; the submission tests against the stand-in are in test_azureml_submit.py)."""

from __future__ import annotations

import warnings

import pytest

from jupyter_distcomp import AzureMLError, SpecError, load_component
from jupyter_distcomp.azureml import to_azureml_component, to_azureml_job
from jupyter_distcomp.errors import AzureMLWarning

from .azure_standin import example_value, prepare_spec, required_values
from .conftest import PUBLIC_SPECS, public_spec_ids

pytest.importorskip("azure.ai.ml")
pytestmark = pytest.mark.filterwarnings("ignore:The `context` parameter is deprecated")

SPEC = """\
name: microsoft.com.distcomp.Train-Demo
version: 0.0.3
display_name: Train demo
type: DistributedComponent
description: trains
tags: {team: ml, priority: 1}
inputs:
  data: {type: AnyDirectory}
  table: {type: AnyFile, optional: true}
  epochs: {type: Integer, default: 4, min: 1}
  lr: {type: Float, default: 0.01}
  verbose: {type: Boolean, default: false}
  mode: {type: Enum, enum: [fast, slow], default: fast}
  note: {type: String, optional: true}
outputs:
  model: {type: path}
launcher:
  type: LAUNCHER
  additional_arguments: >-
    python train.py --data {inputs.data} [--table {inputs.table}] --epochs {inputs.epochs}
    --lr {inputs.lr} --verbose {inputs.verbose} --mode {inputs.mode} [--note {inputs.note}]
    --model {outputs.model}
environment:
  name: AzureML-Minimal
"""
DATA = "azureml://datastores/workspaceblobstore/paths/train/"


def make(tmp_path, launcher="mpi", text=SPEC):
    (tmp_path / "train.py").write_text("print('train')\n")
    path = tmp_path / "spec.yaml"
    path.write_text(text.replace("LAUNCHER", launcher))
    return load_component(path)


def rest(job) -> dict:
    from azure.ai.ml.entities._job.to_rest_functions import to_rest_job_object

    return to_rest_job_object(job).as_dict()["properties"]


@pytest.mark.parametrize(
    ("launcher", "rest_type"),
    [("mpi", "Mpi"), ("torch.distributed", "PyTorch"), ("deepspeed", "PyTorch")],
)
def test_distribution_and_layout_come_from_runsettings(tmp_path, launcher, rest_type):
    component = make(tmp_path, launcher)
    component.runsettings.resource_layout.configure(instance_count=3, process_count_per_node=2)
    body = rest(to_azureml_job(component, inputs={"data": DATA}, compute="cpu-cluster"))
    assert body["distribution"] == {"distributionType": rest_type, "processCountPerInstance": 2}
    assert body["resources"]["instanceCount"] == 3
    # the layout is read at build time: a later change is what the next job gets
    component.runsettings.resource_layout.configure(node_count=5)
    assert rest(to_azureml_job(component, inputs={"data": DATA}))["resources"]["instanceCount"] == 5


def test_tensorflow_worker_and_parameter_server_counts(tmp_path):
    component = make(tmp_path, "tensorflow")
    component.runsettings.resource_layout.configure(
        instance_count=3, process_count_per_node=1, parameter_server_count=1
    )
    body = rest(to_azureml_job(component, inputs={"data": DATA}))
    assert body["distribution"] == {  # as Azure: one worker per node, + 1 parameter server
        "distributionType": "TensorFlow",
        "workerCount": 3,
        "parameterServerCount": 1,
    }
    assert body["resources"]["instanceCount"] == 3
    component.runsettings.resource_layout.configure(worker_count=2, parameter_server_count=0)
    assert rest(to_azureml_job(component, inputs={"data": DATA}))["distribution"] == {
        "distributionType": "TensorFlow",
        "workerCount": 2,
        "parameterServerCount": 0,
    }


def test_command_component_has_no_distribution(tmp_path):
    text = SPEC.replace("type: DistributedComponent", "type: CommandComponent")
    text = text.replace("launcher:\n  type: LAUNCHER\n  additional_arguments:", "command:")
    component = make(tmp_path, text=text)
    body = rest(to_azureml_job(component, inputs={"data": DATA}))
    assert "distribution" not in body and body["resources"]["instanceCount"] == 1


def test_inputs_defaults_settings_and_call_values(tmp_path):
    component = make(tmp_path)
    component.runsettings.set_input("epochs", 9)
    component.runsettings.set_input("data", DATA)
    with pytest.warns(AzureMLWarning):  # see test_values_the_shell_would_change_are_flagged
        body = rest(to_azureml_job(component, inputs={"lr": "0.5", "note": "a b; $(id)"}))
    inputs = body["inputs"]
    # defaults are passed explicitly, run settings override them, call values override both
    assert inputs["epochs"] == {"jobInputType": "literal", "value": "9"}
    assert inputs["lr"] == {"jobInputType": "literal", "value": "0.5"}
    assert inputs["verbose"] == {"jobInputType": "literal", "value": "False"}
    assert inputs["mode"] == {"jobInputType": "literal", "value": "fast"}
    assert inputs["note"]["value"] == "a b; $(id)"
    assert inputs["data"] == {"jobInputType": "uri_folder", "uri": DATA}
    assert "table" not in inputs  # optional, unset: its $[[...]] block drops on Azure
    assert body["command"].startswith("python train.py --data ${{inputs.data}} $[[--table")
    assert body["environmentId"] == "azureml:AzureML-Minimal@latest"


def test_local_data_paths_are_typed_and_uploaded_by_path(tmp_path):
    component = make(tmp_path)
    (tmp_path / "data").mkdir()
    (tmp_path / "table.csv").write_text("a,b\n")
    job = to_azureml_job(component, inputs={"data": "data", "table": "table.csv"})
    assert job.inputs["data"]._data.type == "uri_folder"
    assert job.inputs["table"]._data.type == "uri_file"
    assert job.inputs["data"]._data.path == str(tmp_path / "data")


def test_input_errors_say_what_and_how(tmp_path):
    component = make(tmp_path)
    with pytest.raises(SpecError, match=r"needs values for its required inputs: data \(data"):
        to_azureml_job(component)
    with pytest.raises(SpecError, match=r"has no input 'epoch'\. Did you mean 'epochs'"):
        to_azureml_job(component, inputs={"data": DATA, "epoch": 3})
    with pytest.raises(SpecError, match="input 'epochs' must be at least 1, got 0"):
        to_azureml_job(component, inputs={"data": DATA, "epochs": 0})
    with pytest.raises(SpecError, match="must be one of fast, slow; got 'fats'"):
        to_azureml_job(component, inputs={"data": DATA, "mode": "fats"})
    with pytest.raises(AzureMLError, match="'missing_dir' does not exist"):
        to_azureml_job(component, inputs={"data": "missing_dir"})
    with pytest.raises(AzureMLError, match="local path, which a job on Azure ML cannot"):
        to_azureml_job(component, inputs={"data": DATA}, outputs={"model": "out/"})


def test_names_tags_and_metadata(tmp_path):
    component = make(tmp_path)
    job = to_azureml_job(component, inputs={"data": DATA}, compute="cpu-cluster")
    body = rest(job)
    assert body["displayName"] == "Train demo" and body["description"] == "trains"
    assert body["experimentName"] == "microsoft_com_distcomp_train_demo"
    assert body["tags"] == {
        "team": "ml",
        "priority": "1",
        "distcomp_original_name": "microsoft.com.distcomp.Train-Demo",
    }
    assert body["computeId"] == "cpu-cluster"
    assert body["codeId"] == str(tmp_path)
    entity = to_azureml_component(component)
    assert entity.name == "microsoft_com_distcomp_train_demo" and entity.version == "0.0.3"
    assert entity.tags["distcomp_original_name"] == "microsoft.com.distcomp.Train-Demo"
    assert entity.inputs["mode"].enum == ["fast", "slow"] and entity.inputs["mode"].type == "string"
    assert entity.inputs["epochs"].min == 1 and entity.inputs["epochs"].default == 4
    assert entity.inputs["table"].type == "uri_file" and entity.inputs["table"].optional
    assert entity.resources.instance_count == 1
    assert entity.distribution.type == "mpi"


def test_environment_forms(tmp_path):
    text = SPEC.replace("  name: AzureML-Minimal", "  name: AzureML-Minimal\n  version: '7'")
    assert rest(to_azureml_job(make(tmp_path, text=text), inputs={"data": DATA}))[
        "environmentId"
    ] == ("azureml:AzureML-Minimal:7")
    text = SPEC.replace(
        "  name: AzureML-Minimal",
        "  docker: {image: 'python:3.11'}\n  conda:\n    conda_dependencies:\n"
        "      dependencies: [python=3.11, {pip: [mpi4py]}]",
    )
    env = to_azureml_job(make(tmp_path, text=text), inputs={"data": DATA}).environment
    assert env.image == "python:3.11" and "mpi4py" in str(env.conda_file)
    text = SPEC.replace(
        "  name: AzureML-Minimal", "  docker:\n    build: {dockerfile: file:env/Dockerfile}"
    )
    with pytest.raises(AzureMLError, match=r"environment Dockerfile 'env/Dockerfile' does not"):
        to_azureml_job(make(tmp_path, text=text), inputs={"data": DATA})
    (tmp_path / "env").mkdir()
    (tmp_path / "env" / "Dockerfile").write_text("FROM python:3.11\n")
    env = to_azureml_job(make(tmp_path, text=text), inputs={"data": DATA}).environment
    assert env.build.path == str(tmp_path / "env") and env.build.dockerfile_path == "Dockerfile"


@pytest.mark.filterwarnings("ignore::jupyter_distcomp.errors.AzureMLWarning")  # tested below
@pytest.mark.parametrize("spec", PUBLIC_SPECS, ids=public_spec_ids())
def test_public_spec_passes_azure_validation(spec, tmp_path):
    """Both forms pass azure-ai-ml's own client-side validation (run inside the builders)."""
    component = prepare_spec(spec, tmp_path)
    job = to_azureml_job(component, inputs=required_values(component), compute="cpu")
    assert job._validate().passed
    job._to_job()._validate()  # raises on failure
    entity = to_azureml_component(component)
    assert entity._validate().passed
    assert entity.name.replace("_", "").isalnum() and entity.name.islower()


def _argvs(component, values, fill):
    """(argv on Azure, argv locally, inputs flagged by AzureMLWarning) for these values."""
    from jupyter_distcomp.core.template import expand_azureml

    data = {n: f"/mnt/azureml/inputs/{n}" for n, i in component.inputs.items() if i.is_data}
    data = {n: p for n, p in data.items() if n in values or fill == "all"}
    outputs = {n: f"/mnt/azureml/outputs/{n}" for n in component.outputs}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        job = to_azureml_job(component, inputs={**values, **{n: DATA for n in data}})
    flagged = {w.message.input_name for w in caught if isinstance(w.message, AzureMLWarning)}
    body = rest(job)
    sent = {n: v["value"] for n, v in body["inputs"].items() if v["jobInputType"] == "literal"}
    azure_argv = expand_azureml(body["command"], {**sent, **data}, outputs)
    local_argv = component.render_command({**values, **data}, outputs)
    return azure_argv, local_argv, flagged


@pytest.mark.parametrize("spec", PUBLIC_SPECS, ids=public_spec_ids())
@pytest.mark.parametrize("fill", ["required", "all"])
def test_local_and_azure_commands_agree(spec, fill, tmp_path):
    """Expanding what is sent to Azure by Azure's rules gives the argv of the local run; where
    a value makes them differ (Azure pastes values unquoted), the user is warned about it."""
    component = prepare_spec(spec, tmp_path)
    values = required_values(component)
    if fill == "all":
        values.update({n: example_value(i) for n, i in component.inputs.items() if i.is_parameter})
    azure_argv, local_argv, flagged = _argvs(component, values, fill)
    if azure_argv != local_argv:
        # lightgbm specs: `--metric {inputs.metric}` with default '' vanishes on Azure
        assert flagged, (azure_argv, local_argv)
        values.update({name: "x" for name in flagged})
        azure_argv, local_argv, flagged = _argvs(component, values, fill)
    assert not flagged
    assert azure_argv == local_argv


def test_values_the_shell_would_change_are_flagged(tmp_path):
    component = make(tmp_path)
    with pytest.warns(AzureMLWarning, match=r"input 'note' = 'a b; \$\(id\)' runs differently"):
        to_azureml_job(component, inputs={"data": DATA, "note": "a b; $(id)"})
    quoted = SPEC.replace("[--note {inputs.note}]", "[--note '{inputs.note}']")
    component = make(tmp_path, text=quoted)
    with warnings.catch_warnings():
        warnings.simplefilter("error", AzureMLWarning)  # quoted in the template: same argv
        to_azureml_job(component, inputs={"data": DATA, "note": "a b c"})


def test_a_quote_in_a_value_that_breaks_azures_quoting_is_flagged_with_the_fix(tmp_path):
    # Microsoft's own components write '{inputs.x}': a value holding ' then closes the quote
    quoted = SPEC.replace("[--note {inputs.note}]", "[--note '{inputs.note}']")
    component = make(tmp_path, text=quoted)
    with pytest.warns(AzureMLWarning) as caught:
        to_azureml_job(component, inputs={"data": DATA, "note": "it's"})
    (message,) = [str(w.message) for w in caught if isinstance(w.message, AzureMLWarning)]
    assert "input 'note' = \"it's\" runs differently on Azure ML" in message
    assert "bash stops with a syntax error" in message
    assert "Fix: remove the quote characters from the value" in message


def test_zero_or_greater_warns_that_a_v2_job_fails_on_any_nonzero_exit(tmp_path):
    component = make(tmp_path, text=SPEC + "successful_return_code: ZeroOrGreater\n")
    with pytest.warns(AzureMLWarning, match="the Azure ML v2 job fails on any non-zero exit"):
        to_azureml_job(component, inputs={"data": DATA})


@pytest.mark.parametrize("code", ["/", "~/", "HOME"])  # (a bare ~ is YAML null)
def test_a_code_folder_at_the_root_or_home_is_refused(tmp_path, code):
    from pathlib import Path

    from jupyter_distcomp.errors import AzureMLError

    written = str(Path.home()) if code == "HOME" else code
    component = make(tmp_path, text=SPEC + f"code: {written}\n")
    with pytest.raises(AzureMLError) as caught:
        to_azureml_job(component, inputs={"data": DATA})
    message = str(caught.value)
    assert f"code: {written} is" in message and "would upload all of it" in message
    assert "Fix: set `code:` to the folder that holds only the scripts" in message
