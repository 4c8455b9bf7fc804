"""The workspace's region API as the stand-in serves it: discovery, run history, data plane.

azure-ai-ml finds these through the workspace's ``discoveryUrl``
(``JobOperations._get_workspace_url``: the discovery document's ``api`` key is the base URL
of its ``RunHistoryClient``, ``DatasetDataplaneClient`` and ``ModelDataplaneClient``). Each
route names the azure-ai-ml function that calls it:

- ``GET /discovery``: ``JobOperations._get_workspace_url`` (``download_text_from_url``)
- ``GET /history/v1.0/.../runs/NAME/details``: ``RunOperations.get_run_details``, which
  ``jobs.stream`` polls (``stream_logs_until_completion``): status, error, warnings and
  ``logFiles``, each log's name -> a SAS URL of its blob in the artifact store
- ``GET /history/v1.0/.../runs/NAME``: ``RunOperations.get_run``
- ``GET /history/v1.0/.../runs/NAME/serviceinstances/NODE``: ``jobs.show_services``
- ``POST /history/v1.0/.../rundata``: ``RunOperations.get_run_data``, which ``jobs.download``
  reads the named outputs' asset ids from (``get_job_output_uris_from_dataplane``)
- ``POST /data/v1.0/.../dataversion/batchGetResolvedUris``:
  ``DatasetDataplaneOperations.get_batch_dataset_uris`` (those assets' ``azureml://`` URIs)
"""

from __future__ import annotations

import re
import uuid
from typing import TYPE_CHECKING, Any

from .arm import error
from .blobs import SAS_SIGNATURE
from .catalog import INTERACTIVE_ENDPOINT
from .jobs import log_prefix, run_details_error
from .transport import API

if TYPE_CHECKING:
    from .jobs import StandInJob
    from .server import AzureStandIn

_WORKSPACE = (
    r"/subscriptions/(?P<sub>[^/]+)/resourceGroups/(?P<rg>[^/]+)/providers/"
    r"Microsoft\.MachineLearningServices/workspaces/(?P<ws>[^/]+)"
)
_RUN = re.compile(rf"^/history/v1\.0{_WORKSPACE}/runs/(?P<run>[^/]+)(?P<rest>/.*)?$", re.I)
_RUNDATA = re.compile(rf"^/history/v1\.0{_WORKSPACE}/rundata$", re.I)
_BATCH_URIS = re.compile(rf"^/data/v1\.0{_WORKSPACE}/dataversion/batchGetResolvedUris$", re.I)
#: the discovery document's keys (every service of the region answers at one host)
_SERVICES = ("api", "catalog", "experimentation", "gallery", "history", "hyperdrive",
             "labeling", "modelmanagement", "pipelines", "studiocoreservices")  # fmt: skip
_ASSET = (
    "azureml://locations/westeurope/workspaces/standin/data/azureml_{}_output_data_{}/versions/1"
)


def answer(standin: AzureStandIn, method: str, path: str, query: dict, body: Any, headers: dict):
    if path == "/discovery" and method == "GET":  # public, as Azure's is
        return 200, {key: API for key in _SERVICES}, {}
    if not standin._authorized(headers):
        return 401, error("InvalidAuthenticationToken", "The access token is invalid."), {}
    if (match := _RUN.match(path)) and method == "GET":
        run = _known(standin, match["run"])
        if run is None:
            return 404, error("UserError", f"Run {match['run']} was not found"), {}
        rest = match["rest"] or ""
        if rest == "/details":
            return 200, run_details(standin, run), {}
        if rest == "":
            return 200, _run(standin, run), {}
        if rest.startswith("/serviceinstances/"):
            return 200, _service_instances(standin, run, rest.rsplit("/", 1)[-1]), {}
    if _RUNDATA.match(path) and method == "POST":
        run = _known(standin, str((body or {}).get("runId", "")))
        if run is None:
            return 404, error("UserError", f"Run {(body or {}).get('runId')} was not found"), {}
        return 200, {"runMetadata": _run(standin, run)}, {}
    if _BATCH_URIS.match(path) and method == "POST":
        return 200, {"values": _resolved(standin, (body or {}).get("values") or [])}, {}
    return 404, error("NotFound", f"The stand-in does not serve {method} {path}"), {}


def _known(standin: AzureStandIn, name: str) -> str | None:
    return name if name in standin.jobs else None


def _status(standin: AzureStandIn, name: str) -> str:
    from .arm import _job_view

    return str(_job_view(standin, name)["properties"]["status"])


def _sas_url(standin: AzureStandIn, name: str, log: str) -> str:
    """The log's blob as run history hands it out: an https URL of the storage account
    with a read SAS (the transport brings it here)."""
    account_path = log_prefix(name)  # /ACCOUNT/CONTAINER/ExperimentRun/dcid.NAME
    account, rest = account_path.strip("/").split("/", 1)
    return (
        f"https://{account}.blob.core.windows.net/{rest}/{log}"
        f"?sv=2021-08-06&sr=b&sp=r&sig={SAS_SIGNATURE}"
    )


def run_details(standin: AzureStandIn, name: str) -> dict:
    """``RunDetails``: status, error, and every log written so far (name -> SAS URL)."""
    job: StandInJob | None = standin.runs.get(name)
    logs = list(job.logs) if job is not None else []
    details: dict[str, Any] = {
        "runId": name,
        "runUuid": str(uuid.uuid5(uuid.NAMESPACE_URL, name)),
        "status": _status(standin, name),
        "target": "cpu-cluster",
        "logFiles": {log: _sas_url(standin, name, log) for log in logs},
        "warnings": [],
        "properties": {},
        "tags": {},
    }
    if job is not None and (error_body := run_details_error(job)) is not None:
        details["error"] = error_body
    return details


def _run(standin: AzureStandIn, name: str) -> dict:
    """``Run``: what ``get_run`` and ``rundata`` say of the job, its outputs as data assets."""
    job = standin.runs.get(name)
    outputs = {
        key: {"assetId": _ASSET.format(name, key), "type": "uri_folder"}
        for key in (job.output_uris if job is not None else {})
    }
    return {"runId": name, "status": _status(standin, name), "outputs": outputs or None}


def _resolved(standin: AzureStandIn, asset_ids: list[str]) -> dict:
    found = {}
    for job in list(standin.runs.values()):
        for key, uri in job.output_uris.items():
            asset = _ASSET.format(job.name, key)
            if asset in asset_ids:
                found[asset] = {"uri": uri, "type": "uri_folder"}
    return found


def _service_instances(standin: AzureStandIn, name: str, node: str) -> dict:
    """Each interactive service of a running job, on node ``node``. With hosts, the SSH
    service is that node's host's sshd (the direct route's endpoint; the websocket proxy
    that ``az ml job connect-ssh`` uses is named in ``properties`` but not served)."""
    if _status(standin, name) != "Running":
        return {"instances": {}}
    services = standin.jobs[name]["properties"].get("services") or {}
    instances = {}
    for key, service in services.items():
        kind = service.get("jobServiceType")
        if kind in ("Studio", "Tracking"):
            continue
        instance = {
            "type": kind,
            "port": service.get("port") or 8888,
            "status": "Running",
            "endpoint": INTERACTIVE_ENDPOINT.format(key) + f"?node={node}",
        }
        if kind == "SSH":
            instance["port"] = 22
            instance["properties"] = {"ProxyEndpoint": INTERACTIVE_ENDPOINT.format(key)}
            index = int(node) if str(node).isdigit() else -1
            if 0 <= index < len(standin.hosts):
                instance["endpoint"] = f"ssh://{standin.ssh_user}@{standin.hosts[index]}:22"
        instances[key] = instance
    return {"instances": instances}
