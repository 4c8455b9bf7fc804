"""The stand-in's HTTP server: one loopback port serving ARM, the workspace's region API
(discovery, run history, data plane) and Blob Storage, each request recorded.

:class:`AzureStandIn` is what tests, benches and notebooks hold: ``start()`` / ``stop()`` (or
``with``), :meth:`~AzureStandIn.ml_client` / :meth:`~AzureStandIn.client_kwargs` /
:meth:`~AzureStandIn.session_settings` to point azure-ai-ml at it, and the faults a test
scripts: :meth:`~AzureStandIn.fail` (an HTTP error on a route) and
:meth:`~AzureStandIn.drop` (the connection reset, no answer). Routes are dispatched by the
path's first part: ``/subscriptions/`` is ARM (arm.py), ``/discovery``, ``/history/`` and
``/data/`` the region API (runhistory.py), anything else a blob (blobs.py).
"""

from __future__ import annotations

import contextlib
import json
import re
import socket
import struct
import threading
import time
import uuid
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from ..machine import scratch
from . import arm, runhistory
from .blobs import BlobStore
from .catalog import (
    ACCOUNT,
    COMPUTES,
    DATASTORES,
    RESOURCE_GROUP,
    SUBSCRIPTION,
    TOKEN,
    WORKSPACE,
)
from .jobs import DELAYS, StandInJob
from .transport import make_transport


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
    status: int  # 0: reset the connection, no answer
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


class AzureStandIn:
    """The HTTP stand-in; start() / stop(), or use as a context manager.

    ``statuses``: a scripted list of statuses that successive job GETs answer, the jobs not
    run (for tests of submission alone); None (the default) runs every submitted command
    job on local ranks (jobs.py). ``delays``: seconds a job spends in each state before its
    ranks start and after they end (``NotStarted``, ``Queued``, ``Preparing``,
    ``Finalizing``). ``latency``: seconds each answer waits (a network round trip, for
    benches). ``root``: the folder of the datastores and the jobs' code (default: a scratch
    folder removed at stop()). ``hosts``: the machines a job's nodes run on, node i on host i
    (each with its own sshd, reached with ``ssh_command``, which runs the ranks there with
    mpiexec), as on a cluster; none: every node on this machine. A job's SSH service
    (``SshJobService``) is then each node's sshd, at ``ssh://ssh_user@HOST:22``, and its
    public keys are let in through ``authorized_keys`` (the file those sshds read) while
    the job runs.
    """

    def __init__(
        self,
        subscription: str = SUBSCRIPTION,
        resource_group: str = RESOURCE_GROUP,
        workspace: str = WORKSPACE,
        token: str = TOKEN,
        statuses: tuple[str, ...] | None = None,
        latency: float = 0.0,
        delays: dict[str, float] | None = None,
        root: str | Path | None = None,
        hosts: tuple[str, ...] = (),
        ssh_command: str = "ssh",
        authorized_keys: str | Path | None = None,
        ssh_user: str = "root",
    ):
        self.subscription = subscription
        self.resource_group = resource_group
        self.workspace = workspace
        self.token = token
        self.statuses = statuses
        self.latency = latency
        self.delays = {**DELAYS, **(delays or {})}
        self.requests: list[Recorded] = []
        self.jobs: dict[str, dict] = {}  # name -> the job resource as PUT made it
        self.job_gets: dict[str, int] = {}
        self.runs: dict[str, StandInJob] = {}  # name -> the job as it runs here
        self.codes: dict[str, str] = {}  # code version ARM id (lower case) -> its codeUri
        self.store = BlobStore()
        self.failures: list[_Failure] = []
        self.computes: dict[str, tuple[str, str, int]] = dict(COMPUTES)
        self.hosts = tuple(hosts)
        self.ssh_command = ssh_command
        self.authorized_keys = Path(authorized_keys) if authorized_keys else None
        self.ssh_user = ssh_user
        self.keys_lock = threading.Lock()  # jobs that start or end edit authorized_keys
        self._own_root = root is None
        self.root = Path(root or scratch.make_folder("distcomp-standin-"))
        for name, container in DATASTORES.items():
            self.store.folders[f"/{ACCOUNT}/{container}"] = self.datastore(name)
        self._lock = threading.Lock()
        self._connections: set[socket.socket] = set()  # open now, closed by refuse()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def blobs(self) -> dict[str, Any]:
        """Every blob held in memory: "/account/container/name" -> its bytes."""
        return self.store.blobs

    # -- lifecycle ---------------------------------------------------------------------
    def start(self) -> AzureStandIn:
        self._listen(0)
        return self

    def _listen(self, port: int) -> None:
        standin = self

        class Handler(_Handler):
            owner = standin

        self._server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()

    def _close(self) -> None:
        """Stop listening and close every open connection."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            if self._thread is not None:
                self._thread.join(timeout=5)
        for connection in list(self._connections):
            with contextlib.suppress(OSError):
                connection.shutdown(socket.SHUT_RDWR)

    def stop(self) -> None:
        """Cancel the jobs still running (their ranks stop), then close the port."""
        for job in list(self.runs.values()):
            job.cancel_and_wait()
        self._close()
        self._server = None
        if self._own_root:
            scratch.remove(str(self.root))

    def refuse(self, seconds: float) -> threading.Thread:
        """Refuse every connection for ``seconds``, open ones closed (Azure out of reach),
        then listen on the same port again; the thread that reopens it."""
        assert self._server is not None, "the stand-in is not started: call start()"
        port = self._server.server_address[1]
        self._close()

        def reopen() -> None:
            time.sleep(seconds)
            self._listen(port)

        thread = threading.Thread(target=reopen, daemon=True)
        thread.start()
        return thread

    def __enter__(self) -> AzureStandIn:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    @property
    def url(self) -> str:
        assert self._server is not None, "the stand-in is not started: call start()"
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def datastore(self, name: str) -> Path:
        """The folder that holds datastore ``name``'s files (``azureml://datastores/NAME/paths/P``
        is ``datastore(NAME) / P``)."""
        folder = self.root / "datastores" / name
        folder.mkdir(parents=True, exist_ok=True)
        return folder

    # -- pointing azure-ai-ml here -------------------------------------------------------
    def transport(self, **kwargs: Any):
        """An azure-core transport that sends Azure's requests to this stand-in (transport.py)."""
        return make_transport(self.url, **kwargs)

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

    def storage_proxy(self):
        """A context manager: while it runs, blob clients built with azure-core's default
        transport (``jobs.download``'s) reach this stand-in through ``HTTPS_PROXY`` (proxy.py)."""
        from .proxy import proxy_environment

        return proxy_environment(self.url, self.root / "tls")

    def session_settings(self) -> dict[str, Any]:
        """The ``%config AzureML`` settings that point a session here (credential and
        client_kwargs are objects: :meth:`use_in_notebook` sets them all)."""
        return {
            "subscription_id": self.subscription,
            "resource_group": self.resource_group,
            "workspace_name": self.workspace,
            "credential": FakeCredential(self.token),
            "client_kwargs": self.client_kwargs(show_progress=False),
        }

    def use_in_notebook(self, shell: Any = None) -> AzureStandIn:
        """Point the ``%distcomp`` session of ``shell`` (the running IPython's) at this
        stand-in: its submit, follow and diagnose talk to it from now on. Returns itself."""
        if shell is None:
            from IPython import get_ipython

            shell = get_ipython()
        magics = shell.magics_manager.registry.get("DistCompMagics") if shell else None
        if magics is None:
            raise RuntimeError(
                "no %distcomp session in this shell. Fix: run `%load_ext jupyter_distcomp` "
                "first, then use_in_notebook()."
            )
        for key, value in self.session_settings().items():
            setattr(magics.session.azureml, key, value)
        return self

    @property
    def last_job(self) -> str:
        """The name of the job submitted last (empty when none was)."""
        return next(reversed(self.runs), "")

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

    def drop(self, method: str, path_regex: str, times: int | None = None) -> None:
        """Reset the connection of matching requests, with no answer (``times`` times, or
        always): a network error as a client sees one."""
        self.failures.append(_Failure(method.upper(), re.compile(path_regex), 0, {}, times))

    def heal(self) -> None:
        """Forget every scripted failure and drop."""
        with self._lock:
            self.failures.clear()

    def find(self, method: str, fragment: str) -> list[Recorded]:
        return [r for r in self.requests if r.method == method and fragment in r.path]

    def job_puts(self) -> list[Recorded]:
        return [r for r in self.find("PUT", "/jobs/") if r.body is not None]

    def job(self, name: str) -> StandInJob:
        """The job ``name`` as it runs here (its status, logs, error)."""
        return self.runs[name]

    def add_pipeline_job(self, name: str, children: tuple[str, ...] = ()) -> None:
        """A pipeline job (as azure-ai-ml submits one), Running; ``children``: its steps' job
        names, already submitted here."""
        arm.add_pipeline_job(self, name, children)

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

    def _authorized(self, headers: dict) -> bool:
        return headers.get("authorization") == f"Bearer {self.token}"

    def answer(self, method: str, path: str, query: dict, body: Any, headers: dict, data: bytes):
        """(status, payload, extra headers) for one request."""
        if path.startswith("/subscriptions/"):
            return arm.answer(self, method, path, query, body, headers)
        if path == "/discovery" or path.startswith(("/history/", "/data/")):
            return runhistory.answer(self, method, path, query, body, headers)
        return self.store.handle(method, path, query, headers, data)


def _error(code: str, message: str) -> dict:
    return {"error": {"code": code, "message": message}}


class _Handler(BaseHTTPRequestHandler):
    owner: AzureStandIn
    protocol_version = "HTTP/1.1"
    account: str | None = None  # inside a CONNECT tunnel: the storage account it reached

    def do_CONNECT(self) -> None:
        """``CONNECT ACCOUNT.blob.core.windows.net:443`` of a client using ``storage_proxy``:
        TLS with the stand-in's certificate, then the tunnel's requests as blob requests."""
        from .proxy import BLOB_SUFFIX, server_context

        host, _, port = self.path.rpartition(":")
        if not host.endswith(BLOB_SUFFIX) or port != "443":
            self.send_error(502, f"the stand-in proxies only *{BLOB_SUFFIX}:443")
            return
        self.send_response(200, "Connection established")
        self.end_headers()
        self.wfile.flush()
        context = server_context(self.owner.root / "tls")
        self.connection = context.wrap_socket(self.connection, server_side=True)
        self.rfile = self.connection.makefile("rb", self.rbufsize)
        self.wfile = self.connection.makefile("wb", 0)
        self.account = host[: -len(BLOB_SUFFIX)]
        self.close_connection = False  # CONNECT is HTTP/1.0: the tunnel's requests follow

    def log_message(self, *args: Any) -> None:  # keep test output clean
        pass

    def setup(self) -> None:
        super().setup()
        self.owner._connections.add(self.connection)

    def finish(self) -> None:
        self.owner._connections.discard(self.connection)
        with contextlib.suppress(OSError):
            super().finish()

    def _handle(self) -> None:
        owner = self.owner
        split = urlsplit(self.path)
        if self.account is not None:  # a request inside a tunnel names no account
            split = split._replace(path=f"/{self.account}{split.path}")
        query = parse_qs(split.query)
        length = int(self.headers.get("Content-Length") or 0)
        data = self.rfile.read(length) if length else b""
        headers = {k.lower(): v for k, v in self.headers.items()}
        is_json = split.path.startswith(("/subscriptions/", "/history/", "/data/"))
        body: Any = data or None
        if is_json and data:
            try:
                body = json.loads(data)
            except ValueError:
                body = data
        recorded_headers = {k: v for k, v in headers.items() if k != "authorization"}
        owner.requests.append(Recorded(self.command, split.path, query, recorded_headers, body))
        if owner.latency:
            time.sleep(owner.latency)
        failure = owner._scripted_failure(self.command, split.path)
        if failure is not None and failure.status == 0:
            self._reset()
            return
        if failure is not None:
            self._reply(failure.status, failure.body, dict(failure.headers))
            return
        status, payload, extra = owner.answer(self.command, split.path, query, body, headers, data)
        self._reply(status, payload, extra)

    def _reset(self) -> None:
        """Close the connection with a TCP reset (SO_LINGER 0), answering nothing."""
        self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.close_connection = True
        self.connection.close()

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


__all__ = ["AzureStandIn", "FakeCredential", "Recorded", "_error"]
