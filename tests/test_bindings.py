"""What a run binds (jupyter_distcomp.core.bindings): one set of rules for a local run and an
Azure ML job, one list of what is remote, checked against azure-ai-ml's own reading of every
kind of path Azure ML accepts."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from jupyter_distcomp import SpecError, load_component
from jupyter_distcomp.core.bindings import (
    default_output,
    input_values,
    is_remote,
    local_inputs,
    local_outputs,
)

SPEC = """
name: bind_demo
type: DistributedComponent
inputs:
  data: {type: path}
  lr: {type: Float, default: 0.1, min: 0}
  tag: {type: String, optional: true}
outputs:
  model: {type: path}
launcher:
  type: mpi
  additional_arguments: python train.py --data {inputs.data} --lr {inputs.lr} [--tag {inputs.tag}] --model {outputs.model}
"""

#: every kind of data path Azure ML reads where it is (Azure ML docs, "Access data in a job":
#: datastore URIs long and short, data assets, public and storage URLs), and other URLs
#: azure-ai-ml passes on unread
REMOTE = [
    "azureml://datastores/workspaceblobstore/paths/data/",
    "azureml://subscriptions/s/resourcegroups/g/workspaces/w/datastores/d/paths/p/",
    "azureml:my_data:1",
    "azureml:my_data@latest",
    "https://account.blob.core.windows.net/container/data/",
    "http://example.com/data.csv",
    "wasbs://container@account.blob.core.windows.net/data/",
    "wasb://container@account.blob.core.windows.net/data/",
    "abfss://filesystem@account.dfs.core.windows.net/data/",
    "abfs://filesystem@account.dfs.core.windows.net/data/",
    "adl://account.azuredatalakestore.net/data/",
    "s3://bucket/data/",
    "AzureML://datastores/workspaceblobstore/paths/data/",
]
LOCAL = ["data", "./data", "data/x.csv", "/tmp/data", "~/data"]


def azure_passes_on(path: str) -> bool:
    """azure-ai-ml's reading of a job input (JobOperations._resolve_job_input): a URL or an
    asset id goes to the service as written; anything else is a local path it uploads."""
    from azure.ai.ml._utils.utils import is_url

    return is_url(path) or (not os.path.isabs(path) and (":" in path or "@" in path))


@pytest.mark.parametrize("path", REMOTE + LOCAL)
def test_what_is_remote_is_what_azure_ml_reads_where_it_is(path):
    assert is_remote(path) == azure_passes_on(path) == (path in REMOTE)


@pytest.mark.parametrize("path", REMOTE)
def test_a_remote_value_is_refused_locally_and_passed_on_to_azure(path, tmp_path):
    from jupyter_distcomp.azureml.values import job_inputs

    component = load_component(SPEC, base_dir=tmp_path)
    with pytest.raises(SpecError, match="which a local run cannot read"):
        local_inputs(component, {"data": path}, tmp_path)
    assert job_inputs(component, {"data": path})["data"].path == path


def test_values_come_from_defaults_then_settings_then_the_call(tmp_path):
    component = load_component(SPEC)
    component.runsettings.set_input("lr", "0.5")
    component.runsettings.set_input("tag", "kept")
    values = input_values(component, {"data": "d", "tag": None})  # None unbinds
    assert values == {"data": "d", "lr": 0.5}
    assert input_values(component, {"data": "d", "lr": 2})["lr"] == 2.0
    component.runsettings.set_input("lr", None)
    assert input_values(component, {"data": "d"}) == {"data": "d", "lr": 0.1, "tag": "kept"}
    with pytest.raises(SpecError, match=r"needs values for its required inputs: data") as caught:
        input_values(component, {"data": "  "})  # a blank path is no path
    assert caught.value.line == 5 and caught.value.path == "inputs.data"  # SPEC starts blank


def test_a_name_the_component_does_not_declare_is_named_with_the_closest(tmp_path):
    component = load_component(SPEC)
    with pytest.raises(SpecError, match=r"has no input 'lrr'\. Did you mean 'lr'\? Its inputs"):
        input_values(component, {"data": "d", "lrr": 1})
    with pytest.raises(SpecError, match=r"has no output 'modl'"):
        local_outputs(component, {"modl": "x"}, tmp_path)


def test_a_bad_parameter_names_the_input_and_its_flag():
    component = load_component(SPEC)
    with pytest.raises(SpecError, match=r"--input lr='abc': input 'lr' is Float") as caught:
        input_values(component, {"data": "d", "lr": "abc"})
    assert caught.value.path == "inputs.lr"


def test_local_paths_are_absolute_and_outputs_default_under_the_notebook(tmp_path):
    (tmp_path / "data").mkdir()
    component = load_component(SPEC)
    assert local_inputs(component, {"data": "data"}, tmp_path)["data"] == str(tmp_path / "data")
    with pytest.raises(SpecError, match=r"'nope' does not exist"):
        local_inputs(component, {"data": "nope"}, tmp_path)
    outputs = local_outputs(component, None, tmp_path)
    assert outputs == {"model": tmp_path / default_output("bind_demo", "model")}
    assert default_output("bind_demo", "model") == Path("outputs/bind_demo/model")
    assert local_outputs(component, {"model": "file:m"}, tmp_path) == {"model": tmp_path / "m"}
