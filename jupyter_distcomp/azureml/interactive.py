"""Azure ML's interactive job services: JupyterLab, VS Code and SSH on every node of a job.

``%distcomp submit NAME --interactive jupyterlab,vscode,ssh`` (and the panel) adds them to the
job (azure-ai-ml's ``JupyterLabJobService``, ``VsCodeJobService``, ``SshJobService`` with the
user's public key), so the ranks that ran locally can be inspected on the cluster; once the
job runs, :func:`service_endpoints` lists where to connect.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from ..errors import AzureMLError, did_you_mean

#: the services, by the name the flag uses
INTERACTIVE_SERVICES = ("jupyterlab", "vscode", "ssh")
#: the job's service names start with this, so ours are told apart from Studio / Tracking
PREFIX = "distcomp_"
#: public keys looked for when none is given, in this order
SSH_KEYS = ("id_ed25519.pub", "id_ecdsa.pub", "id_rsa.pub")


def parse_services(text: str | Iterable[str] | None) -> tuple[str, ...]:
    """``"jupyterlab,vscode"`` -> ("jupyterlab", "vscode"); an unknown name is an error."""
    if text is None:
        return ()
    words = text.split(",") if isinstance(text, str) else list(text)
    names = [w.strip().lower() for w in words if w.strip()]
    for name in names:
        if name not in INTERACTIVE_SERVICES:
            raise AzureMLError(
                f"--interactive: unknown service {name!r}.{did_you_mean(name, INTERACTIVE_SERVICES)}"
                f" Fix: use any of {','.join(INTERACTIVE_SERVICES)} (comma-separated)."
            )
    return tuple(dict.fromkeys(names))


def ssh_public_key(path: str | Path | None = None) -> str:
    """The public key the SSH service accepts: ``path``, else the first of ~/.ssh/SSH_KEYS."""
    candidates = [Path(path).expanduser()] if path else [Path.home() / ".ssh" / k for k in SSH_KEYS]
    for candidate in candidates:
        if candidate.is_file():
            key = candidate.read_text(encoding="utf-8").strip()
            if key.startswith(("ssh-", "ecdsa-")):
                return key
            raise AzureMLError(
                f"{candidate} is not an SSH public key (it should start with 'ssh-'). Fix: give "
                "the .pub file, e.g. --ssh-key ~/.ssh/id_ed25519.pub."
            )
    where = candidates[0] if path else f"~/.ssh ({', '.join(SSH_KEYS)})"
    raise AzureMLError(
        f"--interactive ssh needs your SSH public key; none found in {where}. Fix: create one "
        "with `ssh-keygen -t ed25519`, pass --ssh-key PATH, or leave ssh out "
        "(--interactive jupyterlab,vscode)."
    )


def job_services(names: Iterable[str], ssh_key: str | Path | None = None) -> dict[str, Any]:
    """The azure-ai-ml services for ``names``, on every node of the job."""
    from azure.ai.ml.entities import JupyterLabJobService, SshJobService, VsCodeJobService

    services: dict[str, Any] = {}
    for name in names:
        if name == "jupyterlab":
            services[PREFIX + name] = JupyterLabJobService(nodes="all")
        elif name == "vscode":
            services[PREFIX + name] = VsCodeJobService(nodes="all")
        elif name == "ssh":
            services[PREFIX + name] = SshJobService(
                nodes="all", ssh_public_keys=ssh_public_key(ssh_key)
            )
    return services


def service_endpoints(job: Any) -> dict[str, str]:
    """Our services' endpoints once Azure ML has filled them in (service name -> endpoint)."""
    found = {}
    for name, service in (getattr(job, "services", None) or {}).items():
        endpoint = getattr(service, "endpoint", None)
        if name.startswith(PREFIX) and endpoint:
            found[name[len(PREFIX) :]] = str(endpoint)
    return found


def print_endpoints() -> Callable[[Any], None]:
    """A ``wait_for_job`` ``on_job`` callback printing each service's endpoint once."""
    shown: set[str] = set()

    def show(job: Any) -> None:
        for name, endpoint in service_endpoints(job).items():
            if name not in shown:
                shown.add(name)
                print(f"{job.name}: {name} at {endpoint}", flush=True)

    return show


__all__ = [
    "INTERACTIVE_SERVICES",
    "job_services",
    "parse_services",
    "print_endpoints",
    "service_endpoints",
    "ssh_public_key",
]
