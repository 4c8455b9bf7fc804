"""What ``submit --debug`` adds to a job, so that the notebook can attach to it while it runs
(``%distcomp attach``, attach.py).

``submit(..., debug=True)`` (``%distcomp submit NAME --compute C --debug``) gives the job
azure-ai-ml's ``SshJobService`` on every node with the user's public key (the private key
never leaves their machine), a code snapshot that carries the rank side of attach
(rank_side/job_attach.py and the debugger it loads: snapshot.py), and two variables:
``DISTCOMP_ATTACH_DIR``, the job's folder on each node (named after the job, which is named
here with azure-ai-ml's own ``generate_job_name``), and ``DISTCOMP_IDLE_MINUTES``, how long
a ``breakpoint()`` waits for a notebook (and a prompt for a command) before the rank runs
on. A job nobody attaches to runs as it would without ``--debug``.
"""

from __future__ import annotations

from typing import Any

from ..errors import AzureMLError
from ..rank_side.job_attach import DEFAULT_IDLE_MINUTES, ENV_FOLDER, ENV_IDLE

#: on each node, the job's folder: this prefix and the job's name
FOLDER_PREFIX = "/tmp/distcomp-attach-"


def debug_variables(job_name: str, idle_minutes: float | None = None) -> dict[str, str]:
    """The variables of a job submitted with ``--debug`` (see the module's docstring)."""
    idle = DEFAULT_IDLE_MINUTES if idle_minutes is None else float(idle_minutes)
    if idle <= 0:
        raise AzureMLError(
            f"--idle-limit {idle:g}: a breakpoint must wait some minutes for the notebook. "
            f"Fix: a positive number of minutes (default {DEFAULT_IDLE_MINUTES:g})."
        )
    return {ENV_FOLDER: FOLDER_PREFIX + job_name, ENV_IDLE: f"{idle:g}"}


def new_job_name() -> str:
    """A job name as azure-ai-ml makes one when none is given (``generate_job_name``)."""
    from azure.ai.ml.entities._job.job_name_generator import generate_job_name

    return str(generate_job_name())


def debugged(
    job_kwargs: dict[str, Any], idle_minutes: float | None, ssh_key: Any
) -> tuple[dict[str, Any], dict[str, str]]:
    """``job_kwargs`` of a job the notebook attaches to (a name chosen here: the ranks find
    their folder by it; the SSH service on every node), and the attach variables."""
    from .interactive import job_services

    name = job_kwargs.get("name") or new_job_name()
    services = dict(job_kwargs.get("services") or {})
    if not any(type(s).__name__ == "SshJobService" for s in services.values()):
        services.update(job_services(["ssh"], ssh_key))
    return {**job_kwargs, "name": name, "services": services}, debug_variables(name, idle_minutes)


__all__ = ["FOLDER_PREFIX", "debug_variables", "debugged", "new_job_name"]
