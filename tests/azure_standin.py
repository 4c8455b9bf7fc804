"""A local stand-in of the Azure ML REST API, for the real azure-ai-ml client to talk to.

It serves what ``MLClient.jobs.create_or_update`` / ``jobs.get`` call for a command job with a
local code folder: the code-asset lookup, the pending upload that hands out a blob SAS URI,
the blob calls themselves (the SAS URI points back here, Azurite-style
``http://127.0.0.1:PORT/ACCOUNT/CONTAINER``), the code and anonymous environment versions, and
the job PUT / GET; and what the submission's preflight reads: a compute (``computes/NAME``, the
workspace's list of computes) and the location's VM sizes (``locations/LOC/vmSizes``), from
:attr:`AzureStandIn.computes` and :data:`VM_SIZES`. Every request is recorded with its parsed body, so
tests assert on what really went over the wire. Failures (401, 404, 400, 429, 5xx) are
scripted per route with :meth:`AzureStandIn.fail`.

The ARM endpoint is ``https://management.azure.com``; :meth:`AzureStandIn.transport` returns an
azure-core transport that sends those requests here instead (after azure-core's policies ran,
so the bearer-token policy still sees an https URL and still attaches the token).
"""

from __future__ import annotations

import json
import re
import threading
import time
import uuid
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

ARM = "https://management.azure.com"
SUBSCRIPTION = "00000000-1111-2222-3333-444444444444"
RESOURCE_GROUP = "rg-distcomp"
WORKSPACE = "ws-distcomp"
TOKEN = "FAKE-BEARER-TOKEN-6f1d2c9a"  # a test greps outputs and files for it
SAS_SIGNATURE = "FAKE-SAS-SIGNATURE-93be1d"
_SIZES_PATH = re.compile(
    r"^/subscriptions/(?P<sub>[^/]+)/providers/Microsoft\.MachineLearningServices/locations/"
    r"(?P<location>[^/]+)/vmSizes$",
    re.IGNORECASE,
)
_WS_PATH = re.compile(
    r"^/subscriptions/(?P<sub>[^/]+)/resourceGroups/(?P<rg>[^/]+)/providers/"
    r"Microsoft\.MachineLearningServices/workspaces/(?P<ws>[^/]+)(?P<rest>/.*)?$",
    re.IGNORECASE,
)


@dataclass
class Recorded:
    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]
    body: Any  # parsed JSON, raw bytes for blobs, or None

    @property
    def route(self) -> str:
        return f"{self.method} {self.path}"


@dataclass
class _Failure:
    method: str
    pattern: re.Pattern
    status: int
    body: dict
    times: int | None  # None: always
    headers: dict = field(default_factory=dict)


class FakeCredential:
    """A TokenCredential that hands out a fixed, recognisable token (never a real one)."""

    def __init__(self, token: str = TOKEN):
        self.token = token
        self.calls = 0

    def get_token(self, *scopes: str, **kwargs: Any):
        from azure.core.credentials import AccessToken

        self.calls += 1
        return AccessToken(self.token, int(time.time()) + 3600)


LOCATION = "westeurope"
#: the VM sizes of the location, as ``locations/LOC/vmSizes`` lists them (real sizes' figures)
VM_SIZES = [
    {
        "name": name,
        "family": family,
        "vCPUs": cpus,
        "gpus": gpus,
        "osVhdSizeMB": 1047552,
        "maxResourceVolumeMB": disk,
        "memoryGB": memory,
        "lowPriorityCapable": True,
        "premiumIO": True,
        "supportedComputeTypes": ["Cluster", "ComputeInstance"],
    }
    for name, family, cpus, gpus, memory, disk in (
        ("Standard_DS3_v2", "standardDSv2Family", 4, 0, 14.0, 28672),
        ("Standard_NC6s_v3", "standardNCSv3Family", 6, 1, 112.0, 344064),
        ("Standard_NC24s_v3", "standardNCSv3Family", 24, 4, 448.0, 1376256),
        ("Standard_ND96asr_v4", "standardNDASv4_A100Family", 96, 8, 900.0, 6830080),
    )
]
#: the workspace's computes: name -> (computeType, VM size as Azure writes it, max nodes)
COMPUTES = {
    "cpu": ("AmlCompute", "STANDARD_DS3_V2", 4),
    "cpu-cluster": ("AmlCompute", "STANDARD_DS3_V2", 4),
    "cpu-default": ("AmlCompute", "STANDARD_DS3_V2", 4),
    "gpu": ("AmlCompute", "STANDARD_NC24S_V3", 4),
    "gpu-cluster": ("AmlCompute", "STANDARD_NC24S_V3", 4),
    "gpu-small": ("AmlCompute", "STANDARD_NC6S_V3", 2),
    "my-instance": ("ComputeInstance", "STANDARD_NC6S_V3", 1),
    "aks": ("Kubernetes", "", 0),
}

#: where the stand-in says a running job's interactive service listens
INTERACTIVE_ENDPOINT = "https://standin.instances.azureml.ms/{}"


class AzureStandIn:
    """The HTTP stand-in; start() / stop(), or use as a context manager."""

    def __init__(
        self,
        subscription: str = SUBSCRIPTION,
        resource_group: str = RESOURCE_GROUP,
        workspace: str = WORKSPACE,
        token: str = TOKEN,
        statuses: tuple[str, ...] = ("Queued", "Running", "Completed"),
        latency: float = 0.0,
    ):
        self.subscription = subscription
        self.resource_group = resource_group
        self.workspace = workspace
        self.token = token
        self.statuses = statuses
        self.latency = latency  # seconds each answer waits (a network round trip, for benches)
        self.requests: list[Recorded] = []
        self.jobs: dict[str, dict] = {}
        self.job_gets: dict[str, int] = {}
        self.blobs: dict[str, bytes] = {}
        self.failures: list[_Failure] = []
        self.computes: dict[str, tuple[str, str, int]] = dict(COMPUTES)
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle ---------------------------------------------------------------------
    def start(self) -> AzureStandIn:
        standin = self

        class Handler(_Handler):
            owner = standin

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._thread.join(timeout=5)
            self._server = None

    def __enter__(self) -> AzureStandIn:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    # -- test helpers ------------------------------------------------------------------
    def fail(
        self,
        method: str,
        path_regex: str,
        status: int,
        message: str = "",
        code: str = "",
        times: int | None = None,
        headers: dict | None = None,
    ) -> None:
        """Answer matching requests with an ARM error body (``times`` times, or always)."""
        body = {"error": {"code": code or f"Http{status}", "message": message or f"HTTP {status}"}}
        self.failures.append(
            _Failure(method.upper(), re.compile(path_regex), status, body, times, headers or {})
        )

    def transport(self, **kwargs: Any):
        """An azure-core transport that sends ARM requests to this stand-in."""
        return _make_transport(self.url, **kwargs)

    def client_kwargs(self, **extra: Any) -> dict:
        """MLClient keyword arguments that route it here, with fast retries."""
        kwargs = {
            "transport": self.transport(),
            "enable_telemetry": False,
            "retry_backoff_factor": 0.01,
            "retry_backoff_max": 0.05,
            "retry_total": 3,
        }
        kwargs.update(extra)
        return kwargs

    def ml_client(self, credential: Any = None, **extra: Any):
        from azure.ai.ml import MLClient

        return MLClient(
            credential or FakeCredential(self.token),
            subscription_id=self.subscription,
            resource_group_name=self.resource_group,
            workspace_name=self.workspace,
            **self.client_kwargs(**extra),
        )

    def find(self, method: str, fragment: str) -> list[Recorded]:
        return [r for r in self.requests if r.method == method and fragment in r.path]

    def job_puts(self) -> list[Recorded]:
        return [r for r in self.find("PUT", "/jobs/") if r.body is not None]

    # -- request handling --------------------------------------------------------------
    def _scripted_failure(self, method: str, path: str) -> _Failure | None:
        with self._lock:
            for failure in self.failures:
                if failure.method == method and failure.pattern.search(path):
                    if failure.times is not None:
                        if failure.times <= 0:
                            continue
                        failure.times -= 1
                    return failure
        return None

    def _arm(self, method: str, path: str, query: dict, body: Any, headers: dict):
        """Answer one ARM request: (status, body dict or None, extra headers)."""
        if headers.get("authorization") != f"Bearer {self.token}":
            return 401, _error("InvalidAuthenticationToken", "The access token is invalid."), {}
        sizes = _SIZES_PATH.match(path)
        if sizes and method == "GET" and sizes["sub"] == self.subscription:
            return 200, {"value": VM_SIZES}, {}
        match = _WS_PATH.match(path)
        if not match:
            return 404, _error("NotFound", f"No route for {method} {path}"), {}
        if (match["sub"], match["rg"].lower(), match["ws"].lower()) != (
            self.subscription,
            self.resource_group.lower(),
            self.workspace.lower(),
        ):
            return (
                404,
                _error(
                    "ResourceNotFound",
                    f"The Resource 'Microsoft.MachineLearningServices/workspaces/{match['ws']}' "
                    f"under resource group '{match['rg']}' was not found.",
                ),
                {},
            )
        rest = match["rest"] or ""
        ws_id = path[: len(path) - len(rest)]
        parts = rest.strip("/").split("/")
        if parts[:1] == ["codes"] and len(parts) == 3 and method == "GET":
            return 200, {"value": []}, {}
        if parts[:1] == ["codes"] and parts[-1] == "startPendingUpload":
            name, version = parts[1], parts[3]
            container = f"{self.url}/{'devstoreaccount1'}/azureml-blobstore-{name[:8]}"
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
        if method == "PUT" and len(parts) == 4 and parts[0] in ("codes", "environments"):
            return 201, _resource(ws_id, rest, parts, body), {}
        if parts[:1] == ["jobs"] and len(parts) == 2:
            return self._job(method, ws_id, parts[1], body)
        if parts == ["computes"] and method == "GET":
            return 200, {"value": [self._compute(ws_id, n) for n in self.computes]}, {}
        if parts[:1] == ["computes"] and len(parts) == 2 and method == "GET":
            if parts[1] not in self.computes:
                return (
                    404,
                    _error(
                        "ResourceNotFound",
                        "The Resource 'Microsoft.MachineLearningServices/workspaces/"
                        f"{self.workspace}/computes/{parts[1]}' under resource group "
                        f"'{self.resource_group}' was not found.",
                    ),
                    {},
                )
            return 200, self._compute(ws_id, parts[1]), {}
        return 404, _error("NotFound", f"The stand-in does not serve {method} {rest}"), {}

    def _compute(self, ws_id: str, name: str) -> dict:
        """A compute as ``computes/NAME`` GET answers (ComputeResource)."""
        kind, size, max_nodes = self.computes[name]
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

    def _job(self, method: str, ws_id: str, name: str, body: Any):
        if method == "PUT":
            props = dict(body.get("properties", {}))
            props["status"] = "NotStarted"
            wsid = ws_id
            # services the job asked for (interactive ones) come back, endpoints once it runs
            props["services"] = {
                **(props.get("services") or {}),
                "Studio": {
                    "jobServiceType": "Studio",
                    "endpoint": f"https://ml.azure.com/runs/{name}?wsid={wsid}",
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
            with self._lock:
                self.jobs[name] = job
                self.job_gets[name] = 0
            return 201, job, {}
        if method == "GET":
            with self._lock:
                job = self.jobs.get(name)
                if job is None:
                    return 404, _error("UserError", f"Job {name} not found."), {}
                index = min(self.job_gets[name], len(self.statuses) - 1)
                self.job_gets[name] += 1
                job = json.loads(json.dumps(job))
                job["properties"]["status"] = self.statuses[index]
                if self.statuses[index] == "Running":
                    for service_name, service in job["properties"]["services"].items():
                        service.setdefault("endpoint", INTERACTIVE_ENDPOINT.format(service_name))
            return 200, job, {}
        return 405, _error("MethodNotAllowed", method), {}

    def _blob(self, method: str, path: str, query: dict, data: bytes):
        """Azure Blob Storage, just enough for the SDK's directory upload."""
        if SAS_SIGNATURE not in query.get("sig", [""])[0]:
            return 403, None, {"x-ms-error-code": "AuthenticationFailed"}
        comp = query.get("comp", [""])[0]
        restype = query.get("restype", [""])[0]
        if comp == "list":
            prefix = query.get("prefix", [""])[0]
            container = path
            names = [k[len(container) + 1 :] for k in self.blobs if k.startswith(container + "/")]
            names = [n for n in names if n.startswith(prefix)]
            xml = "".join(f"<Blob><Name>{n}</Name><Properties/></Blob>" for n in names)
            payload = (
                '<?xml version="1.0" encoding="utf-8"?><EnumerationResults>'
                f"<Blobs>{xml}</Blobs><NextMarker/></EnumerationResults>"
            ).encode()
            return 200, payload, {"Content-Type": "application/xml"}
        if restype == "container":
            return 200, b"", {}
        if method == "HEAD" or (method == "GET" and not comp):
            if path not in self.blobs:
                return 404, None, {"x-ms-error-code": "BlobNotFound"}
            content = self.blobs[path]
            return 200, content if method == "GET" else None, {"Content-Length": str(len(content))}
        if method == "PUT" and comp == "metadata":
            return 200, b"", {}
        if method == "PUT" and comp in ("block", "blocklist"):
            return 201, b"", {}
        if method == "PUT":
            self.blobs[path] = data
            return 201, b"", {"Content-MD5": ""}
        if method == "DELETE":
            self.blobs.pop(path, None)
            return 202, b"", {}
        return 400, None, {"x-ms-error-code": "UnsupportedOperation"}


def _error(code: str, message: str) -> dict:
    return {"error": {"code": code, "message": message}}


def _resource(ws_id: str, rest: str, parts: list[str], body: Any) -> dict:
    return {
        "id": ws_id + rest,
        "name": parts[3],
        "type": f"Microsoft.MachineLearningServices/workspaces/{parts[0]}/versions",
        "properties": (body or {}).get("properties", {}),
    }


class _Handler(BaseHTTPRequestHandler):
    owner: AzureStandIn
    protocol_version = "HTTP/1.1"

    def log_message(self, *args: Any) -> None:  # keep test output clean
        pass

    def _handle(self) -> None:
        owner = self.owner
        split = urlsplit(self.path)
        query = parse_qs(split.query)
        length = int(self.headers.get("Content-Length") or 0)
        data = self.rfile.read(length) if length else b""
        headers = {k.lower(): v for k, v in self.headers.items()}
        is_arm = split.path.startswith("/subscriptions/")
        body: Any = data or None
        if is_arm and data:
            try:
                body = json.loads(data)
            except ValueError:
                body = data
        recorded_headers = {k: v for k, v in headers.items() if k != "authorization"}
        owner.requests.append(Recorded(self.command, split.path, query, recorded_headers, body))
        if owner.latency:
            time.sleep(owner.latency)
        failure = owner._scripted_failure(self.command, split.path)
        if failure is not None:
            self._reply(failure.status, failure.body, failure.headers)
            return
        if is_arm:
            status, payload, extra = owner._arm(self.command, split.path, query, body, headers)
        else:
            status, payload, extra = owner._blob(self.command, split.path, query, data)
        self._reply(status, payload, extra)

    def _reply(self, status: int, payload: Any, extra: dict) -> None:
        if isinstance(payload, (dict, list)):
            raw = json.dumps(payload).encode()
            content_type = "application/json"
        else:
            raw = payload or b""
            content_type = extra.pop("Content-Type", "application/octet-stream")
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("x-ms-request-id", str(uuid.uuid4()))
        for key, value in extra.items():
            self.send_header(key, value)
        if "Content-Length" not in extra:
            self.send_header("Content-Length", str(0 if self.command == "HEAD" else len(raw)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(raw)

    do_GET = do_PUT = do_POST = do_HEAD = do_DELETE = do_PATCH = _handle


def _make_transport(base_url: str, **kwargs: Any):
    from azure.core.pipeline.transport import RequestsTransport

    class StandInTransport(RequestsTransport):
        """Sends requests meant for the ARM endpoint to the stand-in (after all policies)."""

        def send(self, request, **send_kwargs):
            original = request.url
            if original.startswith(ARM):
                request.url = base_url + original[len(ARM) :]
            try:
                return super().send(request, **send_kwargs)
            finally:  # a retry goes through the policies again, which expect the https URL
                request.url = original

    kwargs.setdefault("use_env_settings", False)
    return StandInTransport(**kwargs)


# -- specs for the Azure tests ----------------------------------------------------------------
def prepare_spec(spec: Any, folder: Any):
    """Copy a public spec into ``folder`` with the files it names (Dockerfile, conda file, a
    script), as they sit beside the spec in its own repository; return the loaded Component."""
    import shutil
    from pathlib import Path

    from jupyter_distcomp import load_component

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copy(spec, folder / "spec.yaml")
    (folder / "train.py").write_text("print('hello from rank')\n")
    component = load_component(folder / "spec.yaml")
    env = component.environment
    if env is not None and env.dockerfile:
        (folder / env.dockerfile).write_text(
            "FROM mcr.microsoft.com/azureml/openmpi4.1.0-ubuntu22.04\n"
        )
    if env is not None and env.conda_file:
        (folder / env.conda_file).write_text("name: env\ndependencies:\n  - python=3.10\n")
    return component


def required_values(
    component: Any, data_uri: str = "azureml://datastores/workspaceblobstore/paths/in/"
):
    """A value for every required input without a default (a URI for data inputs)."""
    values = {}
    for name, inp in component.inputs.items():
        if inp.optional or inp.default is not None:
            continue
        values[name] = data_uri if inp.is_data else example_value(inp)
    return values


def example_value(inp: Any) -> Any:
    if inp.param_type == "enum":
        return inp.enum[-1]
    if inp.param_type == "integer":
        return int(inp.min) + 1 if inp.min is not None else 3
    if inp.param_type == "number":
        return 0.25
    if inp.param_type == "boolean":
        return True
    return f"{inp.name}-value"
