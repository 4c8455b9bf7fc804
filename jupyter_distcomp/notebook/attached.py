"""The Azure ML jobs this kernel is attached to (``%distcomp attach JOB``), by job name: the
Azure side (azureml/attach.py: the job, its nodes' SSH endpoints) joined to the local side
(local/attached: the tunnels, the ranks at the group prompt). The session routes ``where``,
``collectives``, ``compare``, ``status``, ``interrupt`` and ``wait`` of a job's name here;
of a job submitted with ``--cells``, ``%%distcomp run NAME --job JOB`` (its ranks as
engines: local/jobcells.py) and ``%distcomp stop JOB`` (the job ends).
JupyterLab's debugger shows an attached job's ranks as threads (local/debug/dap.py).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..contracts import RankState
from ..core.ranges import format_ranks
from ..errors import RankError

if TYPE_CHECKING:
    from ..local.attached import AttachedJob
    from ..local.jobcells import JobCells, JobWorld
    from .config import AzureML


class AttachedJobs:
    """This kernel's attached jobs (``settings``: ``%config AzureML``)."""

    def __init__(self, settings: AzureML) -> None:
        self.settings = settings
        self.jobs: dict[str, AttachedJob] = {}
        self.clients: dict[str, Any] = {}
        self.seconds: dict[str, float] = {}  # how long each attach took, once Running
        self.cell_jobs: dict[str, int] = {}  # jobs whose ranks run cells: ranks per node
        self.engines: dict[str, JobCells] = {}  # their engines, once a cell asked for them

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
        if target.cells:
            self.cell_jobs[name] = max(1, target.world_size // max(1, job.instance_count))
        _threads_changed()
        return job

    def cells(self, name: str, progress: Callable[[int], None] | None = None) -> JobWorld:
        """The ranks of attached job ``name`` as engines of this kernel (started on first
        use); a RankError where the job's ranks do not run cells."""
        from ..local.jobcells import JobCells

        job = self.get(name)
        engines = self.engines.get(name)
        if engines is None or engines.world is None:
            if name not in self.cell_jobs:
                raise RankError(
                    f"job {name!r} was not submitted with --cells: its ranks run the spec's "
                    "command, not the notebook's cells. Fix: `%distcomp submit NAME --compute "
                    "C --debug --cells`; `%distcomp attach` reaches this job's breakpoints."
                )
            engines = JobCells(job, self.cell_jobs[name])
            try:
                engines.start(progress)
            except BaseException:  # nothing of ours is left running: the controller goes
                engines.close()
                raise
            self.engines[name] = engines
        assert engines.world is not None, "set by start"
        return engines.world

    def describe(self, name: str) -> list[str]:
        """What ``%distcomp status JOB`` says: the attach's nodes and ranks, and of a job
        whose ranks run cells, where its engines are."""
        lines = self.get(name).describe()
        engines = self.engines.get(name)
        world = engines.world if engines is not None else None
        if world is not None:
            alive = [i.rank for i in world.ranks if i.state != RankState.DEAD]
            lines.append(
                f"engines of this kernel: {format_ranks(alive) if alive else 'none left'} "
                f"(`%%distcomp run NAME --job {name}`); the job ends at `%distcomp stop {name}`"
                f" or after {self.get(name).idle_minutes:g} min without a cell"
            )
        elif name in self.cell_jobs:
            lines.append(f"its ranks wait for cells: `%%distcomp run NAME --job {name}`")
        return lines

    def end(self, name: str) -> str:
        """``%distcomp stop JOB``: every rank's engine ends (its process exits with code 0,
        the job completes), then the kernel detaches."""
        engines = self.engines.pop(name, None)
        if engines is None:
            raise RankError(
                f"job {name!r} runs no cells of this kernel: nothing to stop. Fix: "
                f"`%distcomp detach {name}` leaves it; Azure ML studio cancels it."
            )
        ended = engines.end()
        self.detach(name)
        return (
            f"Ended job {name}'s engines on {format_ranks(ended) if ended else 'no rank'}: each "
            "rank's process exits with code 0 and the job completes."
        )

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
        engines = self.engines.pop(name, None)
        if engines is not None:  # the ranks' engines lose this kernel: the idle limit ends them
            engines.close()
        job.detach()
        if engines is not None:
            return (
                f"Detached from job {name}: it keeps running on Azure ML; its ranks' engines "
                f"end after {job.idle_minutes:g} min without a cell, and the job with them "
                f"(`%distcomp stop {name}` ends it at once)."
            )
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


def attached_text(job: AttachedJob, seconds: float, cells: bool = False) -> str:
    """What ``%distcomp attach`` says once attached (``cells``: its ranks run cells)."""
    nodes = ", ".join(
        f"node {n.index} {n.destination}" + ("" if n.state == "attached" else f" ({n.state})")
        for n in job.nodes
    )
    head = (
        f"Attached to job {job.name} in {seconds:.1f} s over SSH ({job.route} route): "
        f"{job.instance_count} node(s), {job.world_size} rank(s): {nodes}"
    )
    if cells:
        return (
            f"{head}; each rank an engine of this kernel: `%%distcomp run NAME --job "
            f"{job.name}` runs a cell on them.\n"
            f"Idle limit: the job ends after {job.idle_minutes:g} min without a cell, also "
            f"when this kernel is gone (set at submit: --idle-limit). `%distcomp stop "
            f"{job.name}` ends it now."
        )
    return (
        f"{head}.\n"
        "A breakpoint() in the job stops at the group prompt; stops that come while no cell "
        f"of this kernel serves them are held: `%distcomp wait {job.name}` opens the prompt. "
        f"`where`, `collectives`, `compare`, `status`, `interrupt` take {job.name} too.\n"
        f"Idle limit: a breakpoint() waits {job.idle_minutes:g} min for a notebook, a prompt "
        f"{job.idle_minutes:g} min for a command; then the rank runs on (set at submit: "
        f"--idle-limit). `%distcomp detach {job.name}` leaves the job running."
    )


__all__ = ["AttachedJobs", "attached_text"]
