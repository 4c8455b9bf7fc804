"""Files the package writes: never at a predictable shared path, never through a planted link
(another local user who plants a folder or a link must not get the user's files overwritten
or the exported job's build context pointed at their folder)."""

from __future__ import annotations

import hashlib
import os
import stat
import tempfile

import pytest
import yaml

from jupyter_distcomp import AzureMLError, load_component

pytest.importorskip("azure.ai.ml")
pytestmark = pytest.mark.filterwarnings("ignore:The `context` parameter is deprecated")

DOCKERFILE = "FROM python:3.11-slim\nRUN pip install mpi4py\n"
SPEC = """\
name: planted
type: DistributedComponent
inputs:
  data: {type: path}
launcher:
  type: mpi
  additional_arguments: python train.py --data {inputs.data}
environment:
  docker:
    base_dockerfile: |
      FROM python:3.11-slim
      RUN pip install mpi4py
"""
DATA = "azureml://datastores/workspaceblobstore/paths/train/"


def _component(folder):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "train.py").write_text("print('train')\n")
    (folder / "spec.yaml").write_text(SPEC)
    return load_component(folder / "spec.yaml")


@pytest.fixture
def shared_tmp(tmp_path, monkeypatch):
    """A temp dir standing in for the machine's shared /tmp."""
    shared = tmp_path / "shared-tmp"
    shared.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(shared))
    return shared


def test_inline_dockerfile_ignores_a_planted_folder(tmp_path, shared_tmp):
    from jupyter_distcomp.azureml import to_azureml_job

    victim = tmp_path / "victim.txt"
    victim.write_text("the user's own file\n")
    attacker = tmp_path / "attacker"
    attacker.mkdir()
    (attacker / "payload").write_text("evil\n")
    # the attack of issue 28: the folder the old code wrote to, planted with links
    digest = hashlib.sha256(DOCKERFILE.encode()).hexdigest()[:16]
    planted = shared_tmp / "jupyter-distcomp-env" / digest
    planted.mkdir(parents=True)
    (planted / "Dockerfile").symlink_to(victim)
    (shared_tmp / "jupyter-distcomp-env" / "link").symlink_to(attacker)

    job = to_azureml_job(_component(tmp_path / "project"), inputs={"data": DATA})
    context = job.environment.build.path
    assert victim.read_text() == "the user's own file\n"
    assert not context.startswith(str(shared_tmp / "jupyter-distcomp-env"))
    for folder in (context, os.path.dirname(context)):
        info = os.lstat(folder)
        assert stat.S_ISDIR(info.st_mode) and info.st_uid == os.getuid()
        assert stat.S_IMODE(info.st_mode) == 0o700  # nobody else can plant in it
    assert os.path.dirname(context).startswith(str(shared_tmp / "distcomp-env-"))
    assert os.listdir(context) == ["Dockerfile"]  # the context holds the Dockerfile only
    with open(os.path.join(context, "Dockerfile"), encoding="utf-8") as handle:
        assert handle.read() == DOCKERFILE
    # a second build reuses this kernel's own folder, not a new one per call
    again = to_azureml_job(_component(tmp_path / "project"), inputs={"data": DATA})
    assert again.environment.build.path == context


def test_export_writes_the_build_context_beside_the_yaml(tmp_path):
    from azure.ai.ml import load_job

    from jupyter_distcomp.azureml import export

    component = _component(tmp_path / "project")
    out = tmp_path / "out"
    out.mkdir()
    victim = tmp_path / "victim.txt"
    victim.write_text("the user's own file\n")
    (out / "job-environment").mkdir()
    (out / "job-environment" / "Dockerfile").symlink_to(victim)  # a link left in the folder

    path = export(component, out / "job.yml", inputs={"data": DATA})
    assert victim.read_text() == "the user's own file\n"
    dockerfile = out / "job-environment" / "Dockerfile"
    assert not dockerfile.is_symlink() and dockerfile.read_text() == DOCKERFILE
    data = yaml.safe_load(path.read_text())
    assert data["environment"]["build"]["path"] == "job-environment"
    loaded = load_job(path)
    built = out / loaded.environment.build.path  # relative to the YAML's folder
    assert (built / "Dockerfile").read_text() == DOCKERFILE


def test_export_refuses_a_build_context_folder_that_is_a_link(tmp_path):
    from jupyter_distcomp.azureml import export

    component = _component(tmp_path / "project")
    attacker = tmp_path / "attacker"
    attacker.mkdir()
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "job-environment").symlink_to(attacker)
    with pytest.raises(AzureMLError, match=r"job-environment exists and is not a folder of yours"):
        export(component, tmp_path / "out" / "job.yml", inputs={"data": DATA})
    assert os.listdir(attacker) == []
    assert not (tmp_path / "out" / "job.yml").exists()
