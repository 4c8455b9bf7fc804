"""The notebook's cells on the ranks of an attached job submitted with ``--debug --cells``:
``%%distcomp run NAME --job JOB``.

Each rank of such a job waits, in its own process, to become an ipyparallel engine
(rank_side/job_engine.py). :class:`JobCells` starts a controller in this kernel (on
127.0.0.1, CurveZMQ: ipp.Controller), forwards each of its ports onto every node's loopback
through the node's SSH connection that attach opened (``ssh -O forward -R``), and writes on
each node the engines' connection with that node's ports (0600, through ssh's stdin). The
ranks register as engines whose ids are their ranks, and :class:`JobWorld` is then a world
as local ranks are: a cell runs through the same code path (local/ranks/run.py: live output
labelled ``[node N rank R]``, gathered errors, time-out, interrupt). Signals and stacks go
over the SSH connections, as attach's do. :meth:`JobCells.end` ends every rank's engine
(each rank's process exits with code 0: the job completes).
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Callable
from typing import Any

from ..contracts import RankState
from ..core.ranges import format_ranks, parse_ranks
from ..errors import RankError
from ..machine import scratch
from ..machine.node_disks import user_text
from ..rank_side.job_engine import end_engine, engine_file
from .attached import nodes as node_side
from .attached.job import AttachedJob
from .ranks import ipp
from .ranks.connection import Connection
from .ranks.options import CellOptions
from .ranks.world import World
from .stacks import RemoteRank, remote_stacks

#: the controller's ports an engine connects to, as its connection file names them
PORTS = ("registration", "control", "mux", "task", "iopub", "hb_ping", "hb_pong")
#: seconds the job's ranks have to register as engines once their connection is written
REGISTER_SECONDS = 120.0


def node_connection(connection: dict[str, Any], ports: dict[int, int]) -> dict[str, Any]:
    """The engines' ``connection`` with each port replaced by where its tunnel ends on a
    node (``ports``: the controller's port -> the node's)."""
    found = dict(connection)
    for key in PORTS:
        found[key] = ports[int(connection[key])]
    found["broadcast"] = [ports[int(p)] for p in connection.get("broadcast") or []]
    found["interface"] = "tcp://127.0.0.1"
    found["location"] = "127.0.0.1"
    return found


def controller_ports(connection: dict[str, Any]) -> list[int]:
    return [int(connection[k]) for k in PORTS] + [int(p) for p in connection.get("broadcast") or []]


class JobWorld(World):
    """The ranks of an attached job as a world of this kernel: engines that registered with
    ``controller``; signals and stacks through the job's SSH connections."""

    own_environment = True  # the ranks keep the job's variables and attach's stack files

    def __init__(self, job: AttachedJob, controller: ipp.Controller, per_node: int) -> None:
        nodes = [
            job.procs[r].node if r in job.procs else r // per_node for r in range(job.world_size)
        ]
        super().__init__(
            job.name,
            [{"AZUREML_CR_NODE_RANK": str(node)} for node in nodes],
            launcher="job",
            instance_count=job.instance_count,
            process_count_per_node=per_node,
            connection=Connection(
                profile_dir=controller.profile_dir, cluster_id=controller.cluster_id
            ),
        )
        self.job = job

    def _pid_alive(self, info: Any) -> bool:
        return self.client is not None and info.engine_id in ipp.engine_ids(self.client)

    def signal(self, ranks: list[int], sig: int) -> None:
        if sig in (signal.SIGINT, signal.SIGUSR1, signal.SIGTERM):
            self.job.signal(list(ranks), sig)

    def stacks(self, ranks: list[int], wait: float = 1.0) -> dict[int, str]:
        """Each rank's stack, taken on its node (faulthandler on SIGUSR1, armed by attach)."""
        targets = []
        for rank in ranks:
            process, node = self.job.procs.get(rank), self.job.node_of(rank)
            if process is not None and node is not None:
                targets.append(
                    RemoteRank(rank, node.destination, process.pid, process.stack, process.thread)
                )
        found = remote_stacks(self.job.ssh_command, targets, wait) if targets else {}
        result = {rank: user_text(stack) for rank, stack in found.items()}
        for rank in ranks:
            result.setdefault(rank, "(no stack: the rank did not answer SIGUSR1)")
        return result

    def describe_layout(self) -> str:
        return (
            f"job {self.name}, {self.world_size} rank(s) on {self.instance_count} node(s), over SSH"
        )


class JobCells:
    """The engines of attached job ``job``: :meth:`start` once, then :attr:`world`."""

    def __init__(self, job: AttachedJob, per_node: int) -> None:
        self.job = job
        self.per_node = per_node
        self.profile = scratch.make_folder("distcomp-cells-")
        self.controller: ipp.Controller | None = None
        self.world: JobWorld | None = None
        self.seconds = 0.0  # how long the engines took to register

    def start(self, progress: Callable[[int], None] | None = None) -> JobWorld:
        """The controller, its tunnels, the connection on every node, the ranks registered
        and set up; a RankError that says which node or rank did not come."""
        tic = time.monotonic()
        self.controller = ipp.Controller(os.path.join(self.profile, "profile"))
        connection = self.controller.start()
        session = self.job.session
        for node in self.job.nodes:
            if node.state != "attached":
                raise RankError(
                    f"node {node.index} of job {self.job.name} is {node.state}: its ranks cannot "
                    f"run cells. Fix: `%distcomp attach {self.job.name}` again."
                )
            try:
                ports = {port: node.link.forward(port) for port in controller_ports(connection)}
            except OSError as exc:
                raise RankError(
                    f"node {node.index} of job {self.job.name}: {exc}. Fix: attach again; "
                    "sshd on the node must allow TCP forwarding (AllowTcpForwarding)."
                ) from None
            data = json.dumps(
                {"session": session, "connection": node_connection(connection, ports)}
            )
            path = engine_file(self.job.folder, node.index)
            done = node.link.run(node_side.private_file_script(self.job.folder, path), stdin=data)
            if done is None or not node_side.said(done.stdout, "written"):
                raise RankError(
                    f"node {node.index} of job {self.job.name}: the engines' connection could "
                    f"not be written into {self.job.folder}. Fix: attach again."
                )
        world = JobWorld(self.job, self.controller, self.per_node)
        world.start_async()
        deadline = time.monotonic() + REGISTER_SECONDS
        while not world.wait_started(0.2):
            if progress is not None:
                progress(world.ready_count)
            if time.monotonic() > deadline:
                world.stop(wait=False)
                raise RankError(
                    f"job {self.job.name}: {world.ready_count} of {world.world_size} ranks "
                    f"came as engines within {REGISTER_SECONDS:g} s. A rank serves one "
                    "attach: after a detach (or a kernel that ended) its engine waits for "
                    "that notebook until the idle limit ends it. Fix: submit the job again, "
                    "with an image that has ipyparallel; its ranks' logs say why "
                    f"(`%distcomp follow {self.job.name}`)."
                )
        world.raise_start_error()
        self.world = world
        self.seconds = time.monotonic() - tic
        return world

    def end(self, reason: str = "the notebook ended the job") -> list[int]:
        """End every rank's engine: each rank's process exits with code 0; the ranks told."""
        ended: list[int] = []
        world = self.world
        if world is not None and world.client is not None:
            alive = [i.rank for i in world.ranks if i.state != RankState.DEAD]
            try:
                world.call_each(alive, end_engine, lambda info: (reason,), timeout=30)
                ended = alive
            except Exception:  # a rank gone meanwhile: the others were told
                ended = alive
        self.close()
        return ended

    def close(self) -> None:
        """Our side only: the client, the controller, its files (the engines left idle end
        by the idle limit)."""
        if self.world is not None:
            self.world.stop(wait=False)
        if self.controller is not None:
            self.controller.stop()
        scratch.remove(self.profile)


def refuse_background(options: CellOptions | None, job: str) -> None:
    """A RankError for a ``--background`` cell on a job's ranks (not built)."""
    if options is not None and options.background:
        raise RankError(
            f"--background is not available with --job: the cell waits for job {job}'s "
            "ranks. Fix: run it without --background."
        )


def run_job_cell(world: JobWorld, code: str, options: CellOptions, shell: Any = None) -> None:
    """Run ``code`` on the job's ranks (``options.ranks``) as a local run cell runs; the
    caller has refused ``--background`` (:func:`refuse_background`, before attaching)."""
    from .ranks.ledgers import busy_message
    from .ranks.run import CellRun

    targets = parse_ranks(options.ranks, world.world_size)
    dead = [r for r in targets if world.ranks[r].state == RankState.DEAD]
    if dead:
        raise RankError(
            f"{format_ranks(dead)} of job {world.name} ended (their engine is gone). Fix: "
            "submit the job again; its ranks' logs say why (`%distcomp diagnose`)."
        )
    busy = [r for r in targets if world.ranks[r].state == RankState.BUSY]
    if busy:
        raise RankError(busy_message(world, busy))
    stopping = (
        None if options.debug_ranks is None else parse_ranks(options.debug_ranks, world.world_size)
    )

    def restate(rank: int, state: RankState) -> None:  # busy <-> debugging, as local ranks
        before = RankState.BUSY if state == RankState.DEBUGGING else RankState.DEBUGGING
        world.change_state(rank, before, state)

    # a breakpoint() in the cell reaches attach's channel: the cell serves it at the prompt
    with world.job.serving_cell(restate) as channel:
        world.debugger = channel
        try:
            CellRun(world, targets, code, options, shell=shell, stopping=stopping).run()
        finally:
            world.debugger = None


__all__ = ["JobCells", "JobWorld", "node_connection", "refuse_background", "run_job_cell"]
