"""Where the nodes of a running job submitted with ``--debug`` (debugged.py) are: its SSH
services, for ``%distcomp attach``.

:func:`attach_target` reads the job (``jobs.get``) and each node's SSH endpoint
(``jobs.show_services(name, node_index)``, azure-ai-ml's ``ServiceInstance``). Azure ML
offers two routes to that endpoint. The ml CLI extension's ``az ml job connect-ssh`` (its
``_ssh_command.py`` and ``_ssh_connector.py``) runs ``ssh azureuser@...`` with a
ProxyCommand that opens a websocket to the service's ``properties["ProxyEndpoint"]`` +
``/nbip/v1.0/ws-tcp``, authenticated with an ARM bearer token, and relays the SSH bytes
over it. The direct route, which this module takes, connects to the endpoint's host and
port itself: it needs the notebook in the workspace's network (a compute instance, a VM in
its virtual network). Only the stand-in of Azure ML (standin/) has served these endpoints
to it so far.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from ..errors import AzureMLError
from ..rank_side.job_attach import DEFAULT_IDLE_MINUTES, ENV_FOLDER, ENV_IDLE
from .debugged import ENV_CELLS
from .logs.job import JobFacts, read_job

#: the user ``az ml job connect-ssh`` logs in as (the ml CLI extension's _ssh_command.py)
SSH_USER = "azureuser"
#: the REST name of the SSH service (azure-ai-ml's JobServiceTypeNames.RestNames.SSH)
SSH_SERVICE = "SSH"
ROUTE = "direct"


@dataclass(frozen=True)
class AttachTarget:
    """Everything attach needs of a running job submitted with ``--debug``."""

    facts: JobFacts
    destinations: list[str]  # node i's SSH destination, ssh://user@host:port
    folder: str
    idle_minutes: float
    cells: bool = False  # its ranks wait to run the notebook's cells (submit --cells)

    @property
    def world_size(self) -> int:
        return len(self.facts.places())


def parse_endpoint(text: str, user: str = SSH_USER) -> str:
    """An SSH service's endpoint (``ssh://[user@]host[:port]`` or ``host:port``) as the
    destination ssh takes, ``ssh://user@host:port``."""
    raw = str(text or "").strip()
    split = urlsplit(raw if "://" in raw else f"ssh://{raw}")
    if split.scheme != "ssh" or not split.hostname:
        raise AzureMLError(
            f"the SSH service's endpoint {raw!r} is not an ssh address (ssh://host:port): the "
            "direct route needs one. Fix: connect with `az ml job connect-ssh` (the proxy "
            "route), which this version does not drive."
        )
    host = f"[{split.hostname}]" if ":" in split.hostname else split.hostname
    return f"ssh://{split.username or user}@{host}:{split.port or 22}"


def attach_target(
    ml_client: Any,
    name: str,
    *,
    timeout: float = 600.0,
    poll: float = 2.0,
    on_status: Callable[[str], None] | None = None,
    user: str = SSH_USER,
) -> AttachTarget:
    """Job ``name`` once it runs (waited for, ``on_status`` told each new status) and the SSH
    destination of each node; an AzureMLError that says why not and the fix."""
    facts, variables = _job(ml_client, name)
    folder = variables.get(ENV_FOLDER)
    if not folder:
        raise AzureMLError(
            f"job '{name}' was not submitted with --debug: its ranks do not wait for a "
            "notebook. Fix: submit it again with `%distcomp submit NAME --compute C --debug`."
        )
    seen = facts.status
    deadline = time.monotonic() + timeout
    while facts.status != "Running":
        if on_status is not None and facts.status != seen:
            on_status(facts.status)
        seen = facts.status
        if facts.final_status is not None:
            raise AzureMLError(
                f"job '{name}' has ended ({facts.status}): there is nothing to attach to. "
                f"Fix: `%distcomp diagnose {name}` reads its ranks' logs."
            )
        if time.monotonic() > deadline:
            raise AzureMLError(
                f"job '{name}' is still {facts.status} after {timeout:g} s. Fix: attach once "
                "it runs (its status in Azure ML studio), or wait longer (--timeout S)."
            )
        time.sleep(poll)
        facts, variables = _job(ml_client, name)
    if on_status is not None and seen != "Running":
        on_status("Running")
    destinations = [
        _node_destination(ml_client, name, node, user) for node in range(facts.instance_count)
    ]
    idle = float(variables.get(ENV_IDLE) or DEFAULT_IDLE_MINUTES)
    cells = bool(variables.get(ENV_CELLS))
    return AttachTarget(facts, destinations, str(folder), idle, cells)


def _job(ml_client: Any, name: str) -> tuple[JobFacts, dict[str, str]]:
    facts = read_job(ml_client, name)
    return facts, dict(facts.environment_variables)


def _node_destination(ml_client: Any, name: str, node: int, user: str) -> str:
    """Node ``node``'s SSH service, as ``jobs.show_services`` gives it, once it runs."""
    from .failures import explain

    deadline = time.monotonic() + 120
    while True:
        try:
            services = ml_client.jobs.show_services(name, node_index=node) or {}
        except Exception as exc:
            raise explain(exc, ml_client, f"read the services of job '{name}'") from None
        ssh = [s for s in services.values() if str(getattr(s, "type", "")) == SSH_SERVICE]
        if not ssh:
            raise AzureMLError(
                f"node {node} of job '{name}' has no SSH service. Fix: submit with --debug "
                "(or --interactive ssh), which adds it on every node."
            )
        service: Any = ssh[0]
        endpoint = str(getattr(service, "endpoint", None) or "")
        if str(getattr(service, "status", "")) == "Running" and endpoint:
            return parse_endpoint(endpoint, user)
        if time.monotonic() > deadline:
            raise AzureMLError(
                f"the SSH service of node {node} of job '{name}' is "
                f"{getattr(service, 'status', None) or 'not running'}"
                f"{': ' + str(service.error) if getattr(service, 'error', None) else ''}. "
                "Fix: attach again in a minute; the image needs openssh-server."
            )
        time.sleep(2.0)


__all__ = ["ROUTE", "SSH_USER", "AttachTarget", "attach_target", "parse_endpoint"]
