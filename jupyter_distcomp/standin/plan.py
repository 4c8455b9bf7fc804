"""A submitted job's REST body as something ``%distcomp command`` runs: the component, its
bound values and its code folder.

The body is what azure-ai-ml's ``to_rest_job_object`` sends (``properties``: ``command``
with ``${{inputs.x}}`` / ``$[[...]]``, ``codeId``, ``distribution``, ``resources.
instanceCount``, ``environmentVariables``, ``inputs`` / ``outputs``). It becomes a v2 command
component spec, parsed by this package's own loader, so the ranks get exactly the variables
and layout a local run gives. Data inputs ``azureml://datastores/DS/paths/P`` are the
stand-in's datastore folders; each output is a folder ``azureml/JOB/OUTPUT`` of the default
datastore (where azure-ai-ml looks for a job's named outputs). The code folder is put
together again from the blobs its code asset uploaded.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from ..core.spec_parsing import load_component
from ..core.template import from_azureml, placeholders
from ..errors import SpecError
from .catalog import ACCOUNT, DEFAULT_DATASTORE

if TYPE_CHECKING:
    from ..core.model import Component
    from .server import AzureStandIn

_DATASTORE_URI = re.compile(r"^azureml://datastores/(?P<ds>[^/]+)/paths/(?P<path>.*)$")
#: REST distributionType -> the v2 spec's distribution type
_DISTRIBUTIONS = {"mpi": "mpi", "pytorch": "pytorch", "tensorflow": "tensorflow"}


@dataclass
class Plan:
    component: Component
    inputs: dict[str, Any]
    outputs: dict[str, str]
    folder: Path  # the job's own folder (its code below it)
    output_uris: dict[str, str]  # output name -> azureml://datastores/... where it lands


def make_plan(standin: AzureStandIn, name: str, props: dict) -> Plan:
    """The job ``name`` as a local run; a SpecError says what the stand-in cannot run."""
    folder = standin.root / "jobs" / name
    code = _code_folder(standin, props.get("codeId"), folder / "code")
    command = from_azureml(props.get("command") or "")
    declared: dict[str, dict] = {}
    values: dict[str, Any] = {}
    for key, given in (props.get("inputs") or {}).items():
        kind = str(given.get("jobInputType", "literal")).lower()
        if kind == "literal":
            declared[key] = {"type": "string"}
            values[key] = str(given.get("value", ""))
        elif kind in ("uri_folder", "uri_file"):
            declared[key] = {"type": kind}
            values[key] = str(_datastore_path(standin, key, str(given.get("uri", "")), kind))
        else:
            raise SpecError(
                f"input '{key}' is a {kind}: the stand-in mounts only uri_folder / uri_file "
                "inputs of the form azureml://datastores/NAME/paths/PATH, and literal values."
            )
    for placeholder in placeholders(command):  # inputs left unbound: their blocks drop
        if placeholder.kind == "inputs" and placeholder.name not in declared:
            declared[placeholder.name] = {"type": "string", "optional": True}
    outputs: dict[str, str] = {}
    uris: dict[str, str] = {}
    out_specs: dict[str, dict] = {}
    for key, given in (props.get("outputs") or {}).items():
        kind = str(given.get("jobOutputType", "uri_folder")).lower()
        out_specs[key] = {"type": "uri_file" if kind == "uri_file" else "uri_folder"}
        relative = f"azureml/{name}/{key}"
        path = standin.datastore(DEFAULT_DATASTORE) / relative
        outputs[key] = str(path)
        uris[key] = f"azureml://datastores/{DEFAULT_DATASTORE}/paths/{relative}/"
    spec: dict[str, Any] = {
        "name": re.sub(r"[^a-z0-9_]", "_", name.lower()) or "job",
        "type": "command",
        "command": props.get("command") or "",
        "code": str(code),
        "inputs": declared,
        "outputs": out_specs,
        "environment_variables": dict(props.get("environmentVariables") or {}),
        "resources": {
            "instance_count": int((props.get("resources") or {}).get("instanceCount") or 1)
        },
    }
    distribution = props.get("distribution") or {}
    dist_kind = _DISTRIBUTIONS.get(str(distribution.get("distributionType", "")).lower())
    if distribution and dist_kind is None:
        raise SpecError(
            f"distribution {distribution.get('distributionType')!r}: the stand-in runs mpi, "
            "pytorch and tensorflow jobs."
        )
    if dist_kind == "tensorflow":
        spec["distribution"] = {
            "type": dist_kind,
            "worker_count": distribution.get("workerCount") or spec["resources"]["instance_count"],
            "parameter_server_count": distribution.get("parameterServerCount") or 0,
        }
    elif dist_kind is not None:
        spec["distribution"] = {
            "type": dist_kind,
            "process_count_per_instance": distribution.get("processCountPerInstance") or 1,
        }
    component = load_component(yaml.safe_dump(spec), base_dir=folder, source_name=f"job {name}")
    return Plan(component, values, outputs, folder, uris)


def _datastore_path(standin: AzureStandIn, key: str, uri: str, kind: str) -> Path:
    match = _DATASTORE_URI.match(uri)
    if match is None:
        raise SpecError(
            f"input '{key}' = {uri!r}: the stand-in mounts only azureml://datastores/NAME/"
            "paths/PATH inputs (files under AzureStandIn.datastore(NAME))."
        )
    path = standin.datastore(match["ds"]) / match["path"].strip("/")
    if kind == "uri_folder":
        path.mkdir(parents=True, exist_ok=True)
    elif not path.is_file():
        raise SpecError(f"input '{key}' = {uri!r}: no such file in the datastore ({path}).")
    return path


def _code_folder(standin: AzureStandIn, code_id: Any, folder: Path) -> Path:
    """The code folder, written anew from the blobs of the code asset ``code_id``."""
    folder.mkdir(parents=True, exist_ok=True)
    if not code_id:
        return folder
    code_uri = standin.codes.get(str(code_id).lower().split("?")[0])
    if code_uri is None:
        raise SpecError(f"code {code_id!r} was never uploaded to this workspace.")
    # codeUri is the pending upload's blobUri followed by "CONTAINER/FOLDER", the blobs'
    # own path in the container they were put in
    path = code_uri.split("://", 1)[1].split("/", 1)[1].split("?")[0].strip("/")
    account, container, *rest = path.split("/")
    if container in rest:
        rest = rest[len(rest) - rest[::-1].index(container) :]
    base = "/".join(rest)
    container_key = f"/{account}/{container}"
    for blob in standin.store.names(container_key, base + "/"):
        target = (folder / blob[len(base) + 1 :]).resolve()
        if not target.is_relative_to(folder.resolve()):
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(standin.store.read(f"{container_key}/{blob}") or b"")
    return folder


__all__ = ["ACCOUNT", "Plan", "make_plan"]
