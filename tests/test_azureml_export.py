"""`%distcomp export` / ``export()``: YAML that azure-ai-ml's own loaders read back unchanged."""

from __future__ import annotations

import pytest
import yaml

from jupyter_distcomp import AzureMLError
from jupyter_distcomp.azureml import export, to_azureml_component, to_azureml_job

from .azure_standin import prepare_spec, required_values
from .conftest import PUBLIC_SPECS, public_spec_ids

pytest.importorskip("azure.ai.ml")
pytestmark = [
    pytest.mark.filterwarnings("ignore:The `context` parameter is deprecated"),
    pytest.mark.filterwarnings("ignore::jupyter_distcomp.errors.AzureMLWarning"),
]


def _rest(job, base) -> dict:
    """The REST body the SDK would send, with local paths resolved against ``base``."""
    from azure.ai.ml.entities._job.to_rest_functions import to_rest_job_object

    body = to_rest_job_object(job).as_dict()
    body.pop("name", None)  # a fresh random name per job object
    props = body["properties"]
    props["codeId"] = str((base / props["codeId"]).resolve())
    env = props["environmentId"]
    if isinstance(env, str):  # load_job drops the azureml: prefix; both resolve the same asset
        props["environmentId"] = env.removeprefix("azureml:")
    else:  # an anonymous environment: compare what defines it
        build = env.build and (str((base / env.build.path).resolve()), env.build.dockerfile_path)
        props["environmentId"] = (env.image, env.conda_file, env.os_type, build)
    return body


def _component_dict(entity) -> dict:
    data = entity._to_dict()
    if isinstance(data.get("environment"), dict):  # anonymous: name/version are content hashes
        for key in ("name", "version", "tags"):
            data["environment"].pop(key, None)
    return data


@pytest.mark.parametrize("spec", PUBLIC_SPECS, ids=public_spec_ids())
def test_job_yaml_round_trips_through_load_job(spec, tmp_path):
    from azure.ai.ml import load_job

    component = prepare_spec(spec, tmp_path / "project")
    component.runsettings.resource_layout.configure(instance_count=3, process_count_per_node=2)
    values = required_values(component)
    path = export(component, tmp_path / "out" / "job.yml", inputs=values, compute="cpu-cluster")
    original = to_azureml_job(component, inputs=values, compute="cpu-cluster")
    loaded = load_job(path)
    assert _rest(loaded, path.parent) == _rest(original, tmp_path / "project")
    data = yaml.safe_load(path.read_text())
    assert data["code"] == "../project"  # relative: the folder can move as a whole
    assert data["resources"]["instance_count"] == 3
    if component.launcher_type:
        assert data["distribution"]["process_count_per_instance"] == 2


@pytest.mark.parametrize("spec", PUBLIC_SPECS, ids=public_spec_ids())
def test_component_yaml_round_trips_through_load_component(spec, tmp_path):
    from azure.ai.ml import load_component

    component = prepare_spec(spec, tmp_path)
    component.runsettings.resource_layout.configure(instance_count=2)
    path = export(component, tmp_path / "component.yml", component_form=True)
    loaded = load_component(path)
    assert _component_dict(loaded) == _component_dict(to_azureml_component(component))
    assert loaded.resources.instance_count == 2
    assert loaded._validate().passed


def test_booleans_stay_booleans(tmp_path):
    """azure-ai-ml dumps True as 1, which `az ml job create` would send as "1", not "True"."""
    from azure.ai.ml import load_job
    from azure.ai.ml.entities._job.to_rest_functions import to_rest_job_object

    spec = next(p for p in PUBLIC_SPECS if "lightgbm_python" in p.name)
    component = prepare_spec(spec, tmp_path)
    path = export(component, tmp_path / "job.yml", inputs=required_values(component))
    data = yaml.safe_load(path.read_text())
    assert data["inputs"]["construct"] is True and data["inputs"]["verbose"] is False
    sent = to_rest_job_object(load_job(path)).as_dict()["properties"]["inputs"]
    assert sent["construct"]["value"] == "True" and sent["verbose"]["value"] == "False"


def test_export_errors(tmp_path):
    component = prepare_spec(PUBLIC_SPECS[0], tmp_path)
    with pytest.raises(AzureMLError, match=r"give the file a \.yml or \.yaml suffix"):
        export(component, tmp_path / "job.json", inputs=required_values(component))
    with pytest.raises(AzureMLError, match="is a folder"):
        export(component, tmp_path, inputs=required_values(component))
    with pytest.raises(AzureMLError, match="a component has no input values"):
        export(component, tmp_path / "c.yml", component_form=True, inputs={"x": 1})
    assert not (tmp_path / "c.yml").exists()


def test_export_never_writes_through_a_link_and_says_what_it_cannot_write(tmp_path):
    component = prepare_spec(PUBLIC_SPECS[0], tmp_path)
    values = required_values(component)
    target = tmp_path / "target.txt"
    target.write_text("the user's notes")
    (tmp_path / "link.yml").symlink_to("target.txt")
    with pytest.raises(AzureMLError) as caught:
        export(component, tmp_path / "link.yml", inputs=values)
    message = str(caught.value)
    assert f"{tmp_path / 'link.yml'} is a link (to target.txt)" in message, message
    assert "Fix: give a file name that is not a link" in message
    assert target.read_text() == "the user's notes" and (tmp_path / "link.yml").is_symlink()
    # a link in the folder's path is fine: the file is written where the folder is
    (tmp_path / "real").mkdir()
    (tmp_path / "folder").symlink_to("real")
    export(component, tmp_path / "folder" / "job.yml", inputs=values)
    assert (tmp_path / "real" / "job.yml").is_file()
    with pytest.raises(AzureMLError) as caught:
        export(component, "/proc/self/x.yml", inputs=values)
    message = str(caught.value)
    assert message.startswith("cannot write /proc/self/x.yml:"), message
    assert "Fix: give a path in a folder you can write to" in message


MAGIC_SPEC = """\
name: mpi_quick
type: DistributedComponent
inputs:
  steps: {type: Integer, default: 10}
  data: {type: path}
outputs:
  out: {type: path}
launcher:
  type: mpi
  additional_arguments: python train.py --steps {inputs.steps} --data {inputs.data} --out {outputs.out}
environment:
  docker: {image: 'python:3.11-slim'}
"""


def test_export_magic(ip, tmp_path, monkeypatch):
    from azure.ai.ml import load_job
    from IPython.utils.capture import capture_output

    from jupyter_distcomp import SpecError

    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").write_text("print('hi')\n")
    assert ip.run_cell(f"%%distcomp quick\n{MAGIC_SPEC}").success
    ip.user_ns["quick"].runsettings.resource_layout.configure(
        instance_count=2, process_count_per_node=2
    )
    with capture_output() as captured:
        result = ip.run_cell(
            "%distcomp export quick jobs/quick.yml --input steps=25 "
            "--input data=azureml://datastores/workspaceblobstore/paths/d/ --compute cpu"
        )
    assert result.success, result.error_in_exec
    path = tmp_path / "jobs" / "quick.yml"
    assert f"az ml job create -f {path}" in captured.stdout
    job = load_job(path)
    assert job.inputs["steps"]._data == 25 and job.compute == "cpu"
    assert job.resources.instance_count == 2 and job.distribution.process_count_per_instance == 2
    assert job.environment.image == "python:3.11-slim"

    result = ip.run_cell("%distcomp export quick quick_component.yml --component")
    assert result.success, result.error_in_exec
    assert yaml.safe_load((tmp_path / "quick_component.yml").read_text())["name"] == "mpi_quick"

    result = ip.run_cell("%distcomp export quick bad.yml --input stepz=3")
    assert isinstance(result.error_in_exec, SpecError)
    assert "has no input 'stepz'. Did you mean 'steps'?" in str(result.error_in_exec)
    result = ip.run_cell("%distcomp export quick bad.yml")
    assert "needs values for its required inputs: data" in str(result.error_in_exec)
    assert not (tmp_path / "bad.yml").exists()


def test_export_of_a_spec_without_environment_names_the_image_it_picks(ip, tmp_path, monkeypatch):
    from azure.ai.ml import load_job
    from IPython.utils.capture import capture_output

    from jupyter_distcomp.azureml.environment import DEFAULT_IMAGE

    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").write_text("print('hi')\n")
    bare = MAGIC_SPEC.split("environment:")[0].replace("mpi_quick", "mpi_bare")
    assert ip.run_cell(f"%%distcomp bare\n{bare}").success
    with capture_output() as captured:
        result = ip.run_cell(
            "%distcomp export bare bare.yml --input data=azureml://datastores/workspaceblobstore/paths/d/ --compute cpu"
        )
    assert result.success, result.error_in_exec
    said = f"'mpi_bare' names no environment: the job runs in Azure ML's base image {DEFAULT_IMAGE}"
    assert said in captured.stdout, captured.stdout
    assert "Fix: add an `environment:` section to the spec" in captured.stdout
    assert load_job(tmp_path / "bare.yml").environment.image == DEFAULT_IMAGE
    assert ip.run_cell(f"%%distcomp quick\n{MAGIC_SPEC}").success
    with capture_output() as captured:
        result = ip.run_cell(
            "%distcomp export quick quick.yml --input data=azureml://datastores/workspaceblobstore/paths/d/ --compute cpu"
        )
    assert result.success and "names no environment" not in captured.stdout, captured.stdout


def test_azure_ai_ml_is_imported_by_export_not_by_load_ext(tmp_path):
    import subprocess
    import sys

    code = f"""
import json, sys
from IPython.testing.globalipapp import get_ipython
ip = get_ipython()
ip.run_line_magic("load_ext", "jupyter_distcomp")
import jupyter_distcomp.azureml
seen = ["azure.ai.ml" in sys.modules]
(__import__("pathlib").Path({str(tmp_path)!r}) / "train.py").write_text("print(1)")
__import__("os").chdir({str(tmp_path)!r})
assert ip.run_cell('''%%distcomp quick\\n{MAGIC_SPEC}''').success
seen.append("azure.ai.ml" in sys.modules)
result = ip.run_cell("%distcomp export quick job.yml --input data=azureml:mnist:1")
assert result.success, result.error_in_exec
seen.append("azure.ai.ml" in sys.modules)
print(json.dumps(seen))
"""
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip().splitlines()[-1] == "[false, false, true]"
