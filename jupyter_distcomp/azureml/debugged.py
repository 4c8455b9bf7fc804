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

With ``cells`` (``--debug --cells``) the job runs no command of the spec: each rank's
process, started by the job's launcher with the job's environment, runs
``rank_side/job_engine.py`` and becomes an ipyparallel engine of the notebook once it
attaches (``%%distcomp run NAME --job JOB``), until the notebook ends it or no cell comes
for the idle limit. ``DISTCOMP_CELLS`` tells attach so.
"""

from __future__ import annotations

import os
from typing import Any

from ..errors import AzureMLError
from ..rank_side.job_attach import DEFAULT_IDLE_MINUTES, ENV_FOLDER, ENV_IDLE

#: set on a job whose ranks run the notebook's cells (``--cells``)
ENV_CELLS = "DISTCOMP_CELLS"
#: the rank side a cells job runs, in its code snapshot (azureml/snapshot.py)
ENGINE_SCRIPT = ".distcomp/rank_side/job_engine.py"

#: on each node, the job's folder: this prefix and the job's name
FOLDER_PREFIX = "/tmp/distcomp-attach-"


def debug_variables(
    job_name: str, idle_minutes: float | None = None, cells: bool = False
) -> dict[str, str]:
    """The variables of a job submitted with ``--debug`` (see the module's docstring)."""
    idle = DEFAULT_IDLE_MINUTES if idle_minutes is None else float(idle_minutes)
    if idle <= 0:
        raise AzureMLError(
            f"--idle-limit {idle:g}: a breakpoint must wait some minutes for the notebook. "
            f"Fix: a positive number of minutes (default {DEFAULT_IDLE_MINUTES:g})."
        )
    found = {ENV_FOLDER: FOLDER_PREFIX + job_name, ENV_IDLE: f"{idle:g}"}
    return {**found, ENV_CELLS: "1"} if cells else found


def cells_command(command: str) -> str:
    """The command of a ``--cells`` job: the rank side's engine in the Python the spec's
    command starts with (``python`` where it starts with something else)."""
    import shlex

    try:
        words = shlex.split(command or "")
    except ValueError:
        words = []
    first = words[0] if words else ""
    python = first if os.path.basename(first).startswith("python") else "python"
    return f"{shlex.quote(python)} {ENGINE_SCRIPT}"


def new_job_name() -> str:
    """A job name as azure-ai-ml makes one when none is given (``generate_job_name``)."""
    from azure.ai.ml.entities._job.job_name_generator import generate_job_name

    return str(generate_job_name())


def debugged(
    job_kwargs: dict[str, Any], idle_minutes: float | None, ssh_key: Any, cells: bool = False
) -> tuple[dict[str, Any], dict[str, str]]:
    """``job_kwargs`` of a job the notebook attaches to (a name chosen here: the ranks find
    their folder by it; the SSH service on every node), and the attach variables."""
    from .interactive import job_services

    name = job_kwargs.get("name") or new_job_name()
    services = dict(job_kwargs.get("services") or {})
    if not any(type(s).__name__ == "SshJobService" for s in services.values()):
        services.update(job_services(["ssh"], ssh_key))
    variables = debug_variables(name, idle_minutes, cells)
    return {**job_kwargs, "name": name, "services": services}, variables


__all__ = [
    "ENGINE_SCRIPT",
    "ENV_CELLS",
    "FOLDER_PREFIX",
    "cells_command",
    "debug_variables",
    "debugged",
    "new_job_name",
]
