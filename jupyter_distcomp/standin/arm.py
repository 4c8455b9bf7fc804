"""The ARM routes of the stand-in (``https://management.azure.com/subscriptions/...``).

Each route names the azure-ai-ml function that calls it (azure-ai-ml 1.35):

- ``GET locations/LOC/vmSizes``: ``preflight`` reads the region's sizes (``compute.list_sizes``)
- ``GET workspaces/WS``: ``WorkspaceOperations.get``, for ``discoveryUrl``
  (``JobOperations._get_workspace_url``, on the way to run history)
- ``GET codes/NAME/versions?hash=``, ``POST .../startPendingUpload``, ``PUT codes|environments/
  NAME/versions/V``: ``jobs.create_or_update`` uploading the code (``_check_and_upload_path``)
  and registering an inline environment
- ``PUT jobs/NAME``: ``jobs.create_or_update``; ``GET jobs/NAME``: ``jobs.get`` / ``_get_job``
  (``jobs.stream``, ``jobs.download``); ``GET jobs``: ``jobs.list``
- ``POST jobs/NAME/cancel`` (202, then ``Location`` polled): ``jobs.begin_cancel``
- ``GET datastores?isDefault=true``, ``GET datastores/NAME``, ``POST datastores/NAME/
  listSecrets``: ``DatastoreOperations.get_default`` / ``get`` / ``_list_secrets``
  (``jobs.download`` through ``get_datastore_info``)
- ``GET computes``, ``GET computes/NAME``: ``compute.list`` / ``compute.get`` (preflight)
"""

from __future__ import annotations

import json
import re
import uuid
from typing import TYPE_CHECKING, Any

from .blobs import SAS_SIGNATURE
from .catalog import (
    ACCOUNT,
    DATASTORES,
    DEFAULT_DATASTORE,
    INTERACTIVE_ENDPOINT,
    LOCATION,
    VM_SIZES,
)
from .jobs import StandInJob
from .transport import API

if TYPE_CHECKING:
    from .server import AzureStandIn

_SIZES_PATH = re.compile(
    r"^/subscriptions/(?P<sub>[^/]+)/providers/Microsoft\.MachineLearningServices/locations/"
    r"(?P<location>[^/]+)/vmSizes$",
    re.IGNORECASE,
)
_CANCEL_STATUS = re.compile(
    r"^/subscriptions/[^/]+/providers/Microsoft\.MachineLearningServices/locations/[^/]+/"
    r"mfeOperationResults/jc:(?P<job>[^/]+)$",
    re.IGNORECASE,
)
_WS_PATH = re.compile(
    r"^/subscriptions/(?P<sub>[^/]+)/resourceGroups/(?P<rg>[^/]+)/providers/"
    r"Microsoft\.MachineLearningServices/workspaces/(?P<ws>[^/]+)(?P<rest>/.*)?$",
    re.IGNORECASE,
)
ARM_HOST = "https://management.azure.com"


def error(code: str, message: str) -> dict:
    return {"error": {"code": code, "message": message}}


def not_found(standin: AzureStandIn, what: str) -> tuple[int, dict, dict]:
    return (
        404,
        error(
            "ResourceNotFound",
            f"The Resource 'Microsoft.MachineLearningServices/workspaces/{standin.workspace}/"
            f"{what}' under resource group '{standin.resource_group}' was not found.",
        ),
        {},
    )


def answer(standin: AzureStandIn, method: str, path: str, query: dict, body: Any, headers: dict):
    """Answer one ARM request: (status, body dict or None, extra headers)."""
    if not standin._authorized(headers):
        return 401, error("InvalidAuthenticationToken", "The access token is invalid."), {}
    sizes = _SIZES_PATH.match(path)
    if sizes and method == "GET" and sizes["sub"] == standin.subscription:
        return 200, {"value": VM_SIZES}, {}
    cancel = _CANCEL_STATUS.match(path)
    if cancel and method == "GET":  # the Location a cancel answered, polled by ARMPolling
        run = standin.runs.get(cancel["job"])
        done = run is None or run.ended
        return (200 if done else 202), ({} if done else None), ({} if done else _retry_now())
    match = _WS_PATH.match(path)
    if not match:
        return 404, error("NotFound", f"No route for {method} {path}"), {}
    if (match["sub"], match["rg"].lower(), match["ws"].lower()) != (
        standin.subscription,
        standin.resource_group.lower(),
        standin.workspace.lower(),
    ):
        return (
            404,
            error(
                "ResourceNotFound",
                f"The Resource 'Microsoft.MachineLearningServices/workspaces/{match['ws']}' "
                f"under resource group '{match['rg']}' was not found.",
            ),
            {},
        )
    rest = match["rest"] or ""
    ws_id = path[: len(path) - len(rest)]
    parts = rest.strip("/").split("/") if rest.strip("/") else []
    if not parts and method == "GET":
        return 200, _workspace(standin, ws_id), {}
    if parts[:1] == ["codes"]:
        return _codes(standin, method, ws_id, rest, parts, body)
    if method == "PUT" and len(parts) == 4 and parts[0] == "environments":
        return 201, _resource(ws_id, rest, parts, body), {}
    if parts == ["jobs"] and method == "GET":
        return 200, {"value": [_job_view(standin, n) for n in list(standin.jobs)]}, {}
    if parts[:1] == ["jobs"] and len(parts) == 2:
        return _job(standin, method, ws_id, parts[1], body)
    if parts[:1] == ["jobs"] and parts[2:] == ["cancel"] and method == "POST":
        return _cancel(standin, parts[1])
    if parts[:1] == ["datastores"]:
        return _datastores(standin, method, ws_id, parts, query)
    if parts == ["computes"] and method == "GET":
        return 200, {"value": [_compute(standin, ws_id, n) for n in standin.computes]}, {}
    if parts[:1] == ["computes"] and len(parts) == 2 and method == "GET":
        if parts[1] not in standin.computes:
            return not_found(standin, f"computes/{parts[1]}")
        return 200, _compute(standin, ws_id, parts[1]), {}
    return 404, error("NotFound", f"The stand-in does not serve {method} {rest}"), {}


def _retry_now() -> dict:
    """Poll again in a second (azure-core's ARM polling takes "0" as "no advice": 30 s)."""
    return {"Retry-After": "1"}


def _workspace(standin: AzureStandIn, ws_id: str) -> dict:
    """The workspace as ``WorkspaceOperations.get`` reads it; ``discoveryUrl`` leads to the
    region API (discovery, run history)."""
    return {
        "id": ws_id,
        "name": standin.workspace,
        "type": "Microsoft.MachineLearningServices/workspaces",
        "location": LOCATION,
        "kind": "Default",
        "properties": {
            "friendlyName": standin.workspace,
            "discoveryUrl": f"{API}/discovery",
            "workspaceId": "5a5a5a5a-0000-4000-8000-000000000001",
            "storageAccount": (
                f"/subscriptions/{standin.subscription}/resourceGroups/{standin.resource_group}"
                f"/providers/Microsoft.Storage/storageAccounts/{ACCOUNT}"
            ),
            "mlFlowTrackingUri": f"azureml://{LOCATION}.api.azureml.ms/mlflow/v1.0{ws_id}",
            "provisioningState": "Succeeded",
            "publicNetworkAccess": "Enabled",
        },
    }


def _codes(standin: AzureStandIn, method: str, ws_id: str, rest: str, parts: list, body: Any):
    if len(parts) == 3 and method == "GET":  # is this code already uploaded? never, here
        return 200, {"value": []}, {}
    if parts[-1] == "startPendingUpload":
        name, version = parts[1], parts[3]
        container = f"{standin.url}/{ACCOUNT}/azureml-blobstore-{name[:8]}"
        return (
            200,
            {
                "blobReferenceForConsumption": {
                    "blobUri": f"{container}/LocalUpload/{name}/{version}",
                    "credential": {
                        "credentialType": "SAS",
                        "sasUri": f"{container}?sv=2021-08-06&sr=c&sig={SAS_SIGNATURE}",
                    },
                    "storageAccountArmId": None,
                },
                "pendingUploadId": str(uuid.uuid4()),
                "pendingUploadType": "TemporaryBlobReference",
            },
            {},
        )
    if method == "PUT" and len(parts) == 4:
        code_uri = ((body or {}).get("properties") or {}).get("codeUri")
        if code_uri:
            standin.codes[(ws_id + rest).lower()] = code_uri
        return 201, _resource(ws_id, rest, parts, body), {}
    return 404, error("NotFound", f"The stand-in does not serve {method} {rest}"), {}


def _resource(ws_id: str, rest: str, parts: list[str], body: Any) -> dict:
    return {
        "id": ws_id + rest,
        "name": parts[3],
        "type": f"Microsoft.MachineLearningServices/workspaces/{parts[0]}/versions",
        "properties": (body or {}).get("properties", {}),
    }


def _compute(standin: AzureStandIn, ws_id: str, name: str) -> dict:
    """A compute as ``computes/NAME`` GET answers (ComputeResource)."""
    kind, size, max_nodes = standin.computes[name]
    own: dict[str, Any] = {"vmSize": size, "osType": "Linux"}
    if kind == "Kubernetes":
        own = {"namespace": "default", "defaultInstanceType": "defaultinstancetype"}
    elif kind == "AmlCompute":
        own.update(
            vmPriority="Dedicated",
            scaleSettings={
                "maxNodeCount": max_nodes,
                "minNodeCount": 0,
                "nodeIdleTimeBeforeScaleDown": "PT2M",
            },
            currentNodeCount=0,
            targetNodeCount=0,
            allocationState="Steady",
        )
    else:
        own["state"] = "Running"
    return {
        "id": f"{ws_id}/computes/{name}",
        "name": name,
        "type": "Microsoft.MachineLearningServices/workspaces/computes",
        "location": LOCATION,
        "properties": {
            "computeType": kind,
            "computeLocation": LOCATION,
            "provisioningState": "Succeeded",
            "isAttachedCompute": False,
            "disableLocalAuth": True,
            "properties": own,
        },
    }


def _datastores(standin: AzureStandIn, method: str, ws_id: str, parts: list, query: dict):
    if len(parts) == 1 and method == "GET":
        names = list(DATASTORES)
        if query.get("isDefault", [""])[0].lower() == "true":
            names = [DEFAULT_DATASTORE]
        return 200, {"value": [_datastore(ws_id, n) for n in names]}, {}
    name = parts[1]
    if name not in DATASTORES:
        return not_found(standin, f"datastores/{name}")
    if len(parts) == 2 and method == "GET":
        return 200, _datastore(ws_id, name), {}
    if parts[2:] == ["listSecrets"] and method == "POST":
        return (
            200,
            {"secretsType": "Sas", "sasToken": f"sv=2021-08-06&sr=c&sig={SAS_SIGNATURE}"},
            {},
        )
    return 404, error("NotFound", f"The stand-in does not serve {method} datastores/{name}"), {}


def _datastore(ws_id: str, name: str) -> dict:
    return {
        "id": f"{ws_id}/datastores/{name}",
        "name": name,
        "type": "Microsoft.MachineLearningServices/workspaces/datastores",
        "properties": {
            "datastoreType": "AzureBlob",
            "accountName": ACCOUNT,
            "containerName": DATASTORES[name],
            "endpoint": "core.windows.net",
            "protocol": "https",
            "isDefault": name == DEFAULT_DATASTORE,
            "credentials": {"credentialsType": "Sas"},
        },
    }


def _job(standin: AzureStandIn, method: str, ws_id: str, name: str, body: Any):
    if method == "PUT":
        props = dict(body.get("properties", {}))
        props["status"] = "NotStarted"
        # services the job asked for (interactive ones) come back, endpoints once it runs
        props["services"] = {
            **(props.get("services") or {}),
            "Studio": {
                "jobServiceType": "Studio",
                "endpoint": f"https://ml.azure.com/runs/{name}?wsid={ws_id}",
            },
            "Tracking": {"jobServiceType": "Tracking", "endpoint": "azureml://tracking"},
        }
        job = {
            "id": f"{ws_id}/jobs/{name}",
            "name": name,
            "type": "Microsoft.MachineLearningServices/workspaces/jobs",
            "properties": props,
            "systemData": {"createdAt": "2026-01-01T00:00:00Z", "createdBy": "tester"},
        }
        with standin._lock:
            standin.jobs[name] = job
            standin.job_gets[name] = 0
        if standin.statuses is None and str(props.get("jobType", "")).lower() == "command":
            run = StandInJob(standin, name, props)
            standin.runs[name] = run
            run.start()
        return 201, job, {}
    if method == "GET":
        if name not in standin.jobs:
            return 404, error("UserError", f"Job {name} not found."), {}
        return 200, _job_view(standin, name, count=True), {}
    return 405, error("MethodNotAllowed", method), {}


def _job_view(standin: AzureStandIn, name: str, count: bool = False) -> dict:
    """The job as a GET answers it now: its status (scripted, or its run's), and the
    endpoints of its services once it runs."""
    with standin._lock:
        job = json.loads(json.dumps(standin.jobs[name]))
        run = standin.runs.get(name)
        if run is not None:
            status = run.status
        elif standin.statuses is not None and job["properties"].get("jobType") != "Pipeline":
            index = min(standin.job_gets[name], len(standin.statuses) - 1)
            standin.job_gets[name] += count
            status = standin.statuses[index]
        else:
            status = job["properties"]["status"]
    job["properties"]["status"] = status
    if status == "Running":
        for service_name, service in job["properties"].get("services", {}).items():
            service.setdefault("endpoint", INTERACTIVE_ENDPOINT.format(service_name))
    return job


def _cancel(standin: AzureStandIn, name: str):
    if name not in standin.jobs:
        return 404, error("UserError", f"Job {name} not found."), {}
    run = standin.runs.get(name)
    if run is not None:
        run.cancel()
    location = (
        f"{ARM_HOST}/subscriptions/{standin.subscription}/providers/"
        f"Microsoft.MachineLearningServices/locations/{LOCATION}/mfeOperationResults/"
        f"jc:{name}?api-version=2023-04-01-preview"
    )
    return 202, None, {"Location": location, **_retry_now()}


def add_pipeline_job(standin: AzureStandIn, name: str, children: tuple[str, ...]) -> None:
    ws_id = (
        f"/subscriptions/{standin.subscription}/resourceGroups/{standin.resource_group}/"
        f"providers/Microsoft.MachineLearningServices/workspaces/{standin.workspace}"
    )
    with standin._lock:
        standin.jobs[name] = {
            "id": f"{ws_id}/jobs/{name}",
            "name": name,
            "type": "Microsoft.MachineLearningServices/workspaces/jobs",
            "properties": {
                "jobType": "Pipeline",
                "status": "Running",
                "jobs": {child: {"type": "command", "name": child} for child in children},
                "settings": {},
                "inputs": {},
                "outputs": {},
                "services": {
                    "Studio": {
                        "jobServiceType": "Studio",
                        "endpoint": f"https://ml.azure.com/runs/{name}?wsid={ws_id}",
                    }
                },
            },
            "systemData": {"createdAt": "2026-01-01T00:00:00Z", "createdBy": "tester"},
        }
        standin.job_gets[name] = 0
        for child in children:
            if child in standin.jobs:
                standin.jobs[child]["properties"].setdefault("parentJobName", name)
