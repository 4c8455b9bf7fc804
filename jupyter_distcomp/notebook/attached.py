"""The Azure ML jobs this kernel is attached to (``%distcomp attach JOB``), by job name: the
Azure side (azureml/attach.py: the job, its nodes' SSH endpoints) joined to the local side
(local/attached: the tunnels, the ranks at the group prompt). The session routes ``where``,
``collectives``, ``compare``, ``status``, ``interrupt`` and ``wait`` of a job's name here;
JupyterLab's debugger shows an attached job's ranks as threads (local/debug/dap.py).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..errors import RankError

if TYPE_CHECKING:
    from ..local.attached import AttachedJob
    from .config import AzureML


class AttachedJobs:
    """This kernel's attached jobs (``settings``: ``%config AzureML``)."""

    def __init__(self, settings: AzureML) -> None:
        self.settings = settings
        self.jobs: dict[str, AttachedJob] = {}
        self.clients: dict[str, Any] = {}
        self.seconds: dict[str, float] = {}  # how long each attach took, once Running

    def __contains__(self, name: object) -> bool:
        return name in self.jobs

    def get(self, name: str) -> AttachedJob:
        job = self.jobs.get(name)
        if job is None:
            raise RankError(
                f"job {name!r} is not attached in this kernel. Fix: `%distcomp attach {name}`."
            )
        return job

    def attach(
        self,
        name: str,
        client: Any,
        timeout: float = 600.0,
        on_status: Callable[[str], None] | None = None,
    ) -> AttachedJob:
        """Attach to job ``name`` of ``client``'s workspace once it runs (a second attach
        replaces the first)."""
        from ..azureml.attach import ROUTE, attach_target
        from ..local.attached import AttachedJob

        if name in self.jobs:
            self.detach(name)
        target = attach_target(
            client, name, timeout=timeout, on_status=on_status, user=self.settings.ssh_user
        )
        tic = time.monotonic()
        job = AttachedJob(
            name,
            target.destinations,
            target.folder,
            target.world_size,
            ssh_command=self.settings.ssh_command or "ssh",
            idle_minutes=target.idle_minutes,
            route=ROUTE,
        )
        job.open(timeout=min(timeout, 60.0))
        self.seconds[name] = time.monotonic() - tic
        self.jobs[name] = job
        self.clients[name] = client
        _threads_changed()
        return job

    def ended(self, name: str) -> Callable[[], bool]:
        """Whether Azure ML says job ``name`` has ended (read at most every few seconds)."""
        from ..azureml.logs import read_job

        def check() -> bool:
            try:
                return read_job(self.clients[name], name).final_status is not None
            except Exception:  # the workspace out of reach a moment: not ended
                return False

        return check

    def detach(self, name: str) -> str:
        job = self.jobs.pop(name, None)
        self.clients.pop(name, None)
        if job is None:
            raise RankError(f"job {name!r} is not attached in this kernel; nothing to detach.")
        job.detach()
        _threads_changed()
        return (
            f"Detached from job {name}: it keeps running on Azure ML; ranks at the prompt run "
            f"on, and the next breakpoint() waits for `%distcomp attach {name}` (at most "
            f"{job.idle_minutes:g} min)."
        )

    def shutdown(self) -> None:
        """The kernel ends: leave every job running, tunnels closed."""
        for name in list(self.jobs):
            try:
                self.detach(name)
            except Exception:  # a node out of reach: its connection ends with us anyway
                pass


def _threads_changed() -> None:
    """JupyterLab's debugger, if on, is told of the ranks that came or left as threads."""
    from ..local.debug import dap

    adapter = dap.current()
    if adapter is not None:
        adapter.sync_threads()


def attached_text(job: AttachedJob, seconds: float) -> str:
    """What ``%distcomp attach`` says once attached."""
    nodes = ", ".join(
        f"node {n.index} {n.destination}" + ("" if n.state == "attached" else f" ({n.state})")
        for n in job.nodes
    )
    return (
        f"Attached to job {job.name} in {seconds:.1f} s over SSH ({job.route} route): "
        f"{job.instance_count} node(s), {job.world_size} rank(s): {nodes}.\n"
        "A breakpoint() in the job stops at the group prompt; stops that come while no cell "
        f"of this kernel serves them are held: `%distcomp wait {job.name}` opens the prompt. "
        f"`where`, `collectives`, `compare`, `status`, `interrupt` take {job.name} too.\n"
        f"Idle limit: a breakpoint() waits {job.idle_minutes:g} min for a notebook, a prompt "
        f"{job.idle_minutes:g} min for a command; then the rank runs on (set at submit: "
        f"--idle-limit). `%distcomp detach {job.name}` leaves the job running."
    )


__all__ = ["AttachedJobs", "attached_text"]
