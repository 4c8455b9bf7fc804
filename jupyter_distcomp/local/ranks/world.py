"""One world: the ranks of one component, as ipyparallel engines under one ``mpiexec``.

A World starts (in a background thread, so a definition cell returns at once), applies each
rank's Azure ML variables, runs the start-up hooks it was given (the debugger attaches this
way), tracks each rank's state for the status table and the JupyterLab panel, signals
ranks, and stops everything it started.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from secrets import token_hex
from typing import TYPE_CHECKING, Any

from ...contracts import RankState
from ...core.layout import env_places, layout_text
from ...core.ranges import format_ranks
from ...errors import RankError, SpecError
from ...machine import mpi, remote, scratch, shim
from ...machine.hosts import Placement
from ...machine.network import is_local_host
from ...machine.node_disks import NodeDisks, make_node_disks
from ...rank_side import flow, reaper
from ...rank_side import segments as records
from ...rank_side.check_exchange import KEY_VARIABLE as CHECK_KEY_VARIABLE
from ...rank_side.rank_setup import CELL_LABEL, LEAN_REQUEST, OPEN_MPI_WORLD_KEYS, setup_rank
from . import ipp, ledgers
from .connection import Connection, connect_client
from .flow import Flows
from .health import Notices, RankInfo, WorldHealth

if TYPE_CHECKING:
    from ..debug.channel import DebugChannel
    from .ipp import Client

__all__ = ["NOTEBOOK_DIR", "START_TIMEOUT", "RankInfo", "World"]

#: the notebook's folder, on every rank of this machine (each node runs in a copy of it)
NOTEBOOK_DIR = "DISTCOMP_NOTEBOOK_DIR"

START_TIMEOUT = 120.0
SETUP_TIMEOUT = 60.0  # seconds the ranks have to answer a call of the start (or call_each)
#: seconds a stop waits at most for output on its way to the cell on show; it waits only
#: while that output keeps arriving, and a rank has at most its flow window (512 K
#: characters) on its way, which takes seconds to show on 2 loaded cores
STOP_SETTLE = 30.0
#: ... and gives up once none has arrived for this long (a loaded kernel pauses for as much)
STOP_STALL = 3.0


def _silent(text: str) -> None:
    """A stop nobody watches says nothing."""


#: run once the ranks are set up, before the world counts as started (its start fails if
#: one raises); on this machine, as soon as the setup is sent: each rank runs the hook's
#: calls after its setup
StartHook = Callable[["World"], None]


class World(WorldHealth):
    """The ranks of one component. Create, then :meth:`start_async` or :meth:`start`."""

    #: the ranks keep the variables their launcher gave them and their own SIGUSR1 stack
    #: file (a job's ranks: local/jobcells.py); ``envs`` then only place them
    own_environment = False

    def __init__(
        self,
        name: str,
        envs: list[dict[str, str]],
        *,
        launcher: str,
        instance_count: int,
        process_count_per_node: int,
        connection: Connection | None = None,
        placement: Placement | None = None,
        on_change: Callable[[World], None] | None = None,
        on_ready: Sequence[StartHook] = (),
        start_env: Mapping[str, str] | None = None,
        node_disks: bool = False,
    ):
        self.name = name
        self.envs = [dict(env) for env in envs]
        #: variables in mpiexec's environment: every rank has them from its start
        self.start_env = dict(start_env or {})
        #: on several emulated nodes, each node's ranks in their own copy of the kernel's
        #: folder with their own TMPDIR (``DistComp.node_local_files``)
        self.node_disks = node_disks and instance_count > 1
        self.disks: NodeDisks | None = None  # those copies, once made
        self._copying: _Copying | None = None  # the copies being made while the ranks start
        self.launcher = launcher
        self.instance_count = instance_count
        self.process_count_per_node = process_count_per_node
        self.world_size = len(self.envs)
        self.connection = connection or Connection()
        self.placement = placement or Placement()
        self.ranks = [
            RankInfo(r, node, local) for r, (node, local) in enumerate(env_places(self.envs))
        ]
        self.cluster: ipp.LocalCluster | None = None
        self.client: Client | None = None
        self.view: Any = None  # a DirectView on every rank, once started
        self.ready_count = 0
        self.error: BaseException | None = None
        self.started_seconds: float | None = None
        self._on_change = on_change or (lambda world: None)
        self.notices = Notices(lambda: self._on_change(self))
        self._on_ready = tuple(on_ready)
        self._done = threading.Event()
        self._stopped = False
        self._lock = threading.RLock()
        self._tmp = scratch.make_folder(f"distcomp-{name}-")
        self._check_key = token_hex(16)  # the ranks' alone (check_exchange.Signer)
        #: the ranks' shared-memory segments (on this machine), removed with the world
        self._segments = (
            scratch.shared_memory_folder(f"distcomp-{name}-") if self.placement.local else None
        )
        self._monitor: threading.Thread | None = None
        self._thread: threading.Thread | None = None
        self._start_finished = False
        self._delay = 0.0
        self._stop_event = threading.Event()
        self.used = False  # a cell ran here: its state is the user's, keep it
        self.cell_code = ""  # the last cell sent to the ranks: source lines of their stacks
        self.background = False  # a `--background` cell runs on the ranks
        self.hang: str | None = None  # the hang notice's words while the cell's ranks hang
        #: where breakpoint() on a rank connects (set by the debugger's start-up hook)
        self.debugger: DebugChannel | None = None
        self.failed_ranks: list[int] = []  # ranks whose last cell failed (post-mortem)
        self.dap_armed = False  # its ranks hold JupyterLab's breakpoints (debug/dap.py)
        #: the ranks compare each collective before it runs (None: to be told again)
        self.checking: bool | None = False
        self.check_epoch = 0  # check mode's epoch on the ranks (ledgers.void_checks)
        #: the ranks' flow files: their output waits while the notebook is behind
        self.flows: Flows | None = None

    # -- starting -----------------------------------------------------------------------
    def start_async(self, delay: float = 0.0) -> None:
        """Start in a background thread; :meth:`wait_started` joins it.

        ``delay``: wait this long before launching anything, so that a stop (say, the layout
        set in the next cell) cancels the start without a process ever running.
        """
        self._delay = delay
        self._thread = threading.Thread(
            target=self._start_guarded, name=f"distcomp-start-{self.name}", daemon=True
        )
        self._thread.start()

    def start(self) -> None:
        self._start_guarded()
        self.raise_start_error()

    @property
    def started(self) -> bool:
        return self._done.is_set()

    @property
    def stopped(self) -> bool:
        """:meth:`stop` was called: the ranks are gone on purpose, not dead."""
        return self._stopped

    def wait_started(self, timeout: float | None = None) -> bool:
        return self._done.wait(timeout)

    def raise_start_error(self) -> None:
        if self.error is not None:
            raise self.error

    def _start_guarded(self) -> None:
        tic = time.perf_counter()
        try:
            if self._delay and self._stop_event.wait(self._delay):
                raise _Stopped
            if self.connection.embedded:
                self._start_embedded()
            else:
                self._connect_existing()
            if self._stopped:
                raise _Stopped
            self._setup_ranks()
            self.started_seconds = time.perf_counter() - tic
        except _Stopped:
            pass
        except BaseException as exc:
            if not self._stopped:
                passes = isinstance(exc, (RankError, SpecError))  # says what to fix itself
                self.error = exc if passes else self._start_failure(exc)
        finally:
            with self._lock:
                self._start_finished = True
                teardown = self._stopped or self.error is not None
            if teardown:  # a stop() during the start left the teardown to us
                self._teardown()
            if self.error is not None:  # no rank is left starting
                for info in self.ranks:
                    if info.state != RankState.DEAD:
                        info.state, info.death = RankState.DEAD, "did not start"
            self._done.set()
            self._changed()

    def _start_embedded(self) -> None:
        if self.node_disks and self.placement.local:  # copied while mpiexec starts the ranks
            self._copying = _Copying(self._node_disks)
        profile_dir = os.path.join(self._tmp, "profile")
        self.cluster = cluster = ipp.LocalCluster(
            self.world_size,
            profile_dir,
            START_TIMEOUT,
            self.placement,
            self.process_count_per_node,
            mpi.run_files_environment(self._tmp, self._segments, os.environ),
            self.start_env,
            shim.node_slots(self.envs) if self.placement.local else [],
        )
        cluster.start()
        if self._stopped:
            raise _Stopped
        self.client = client = cluster.connect()
        self._wait_for_engines(client, list(range(self.world_size)))

    def _connect_existing(self) -> None:
        def progress(count: int) -> None:
            self.ready_count = count
            self._changed()

        layout = layout_text(self.instance_count, self.process_count_per_node)
        self.client, ids = connect_client(
            self.connection, self.name, self.world_size, layout, progress
        )
        for info, eid in zip(self.ranks, ids, strict=False):
            info.engine_id = eid

    def _wait_for_engines(self, client: Client, ids: list[int]) -> None:
        deadline = time.monotonic() + START_TIMEOUT
        while True:
            registered = set(ipp.engine_ids(client))
            count = len(registered & set(ids))
            if count != self.ready_count:
                self.ready_count = count
                self._changed()
            if count == len(ids):
                break
            if self._stopped:
                raise _Stopped
            if not self.mpiexec_alive():
                raise RankError(
                    f"mpiexec for {self.name!r} stopped while ranks were starting "
                    f"({count} of {len(ids)} ready). It said:\n{self.mpiexec_output()}"
                )
            if time.monotonic() > deadline:
                raise RankError(
                    f"Only {count} of {len(ids)} ranks of {self.name!r} registered within "
                    f"{START_TIMEOUT:.0f} s. mpiexec said:\n{self.mpiexec_output()}"
                )
            time.sleep(0.05)
        for info in self.ranks:
            info.engine_id = info.rank  # engine id = MPI rank under mpiexec

    def _setup_ranks(self) -> None:
        ledgers.name_cells()
        client = self.client
        assert client is not None, "set by the start"
        ids = [info.engine_id for info in self.ranks if info.engine_id is not None]
        self.view = ipp.view(client, ids)
        if self.flows is None:
            self.flows = Flows(self._segments or self._tmp, self.world_size)
        flows = self.flows
        cwds = [""] * self.world_size
        private: dict[str, str] = {}
        here = self.connection.embedded and self.placement.local
        if here:  # the notebook's folder, also where each node has a copy of it
            private[NOTEBOOK_DIR] = str(Path.cwd())
        if self._copying is not None:
            self.disks = self._copying.result()
        if self.disks is not None:
            for info in self.ranks:
                self.envs[info.rank].update(self.disks.environment(info.node))
                cwds[info.rank] = self.disks.code[info.node]
        elif here:
            # the ranks' temp files (multiprocessing's pymp- folders among them) in the
            # world's scratch folder: they go with the ranks, also after a kill -9
            private["TMPDIR"] = os.path.join(self._tmp, "tmp")
            os.makedirs(private["TMPDIR"], exist_ok=True)
        own = self.own_environment
        pending = self.send_each(
            list(range(self.world_size)),
            setup_rank,
            lambda info: (
                {
                    **private,  # empty but on this machine's own ranks
                    **({} if own else self.envs[info.rank]),
                    **({} if own else self._node_environment(info.rank)),
                    CHECK_KEY_VARIABLE: self._check_key,  # signs check mode's store values
                },
                [] if own else list(OPEN_MPI_WORLD_KEYS),
                None if own else os.path.join(self._tmp, f"rank-{info.rank}.stack"),
                (ledgers.HOOKS_FILE, self.ledger_path(info.rank)),
                (flow.__file__, flows.paths[info.rank]),
                LEAN_REQUEST,
                cwds[info.rank],
                CELL_LABEL,
                (records.__file__, os.path.join(self._tmp, f"rank-{info.rank}{records.SUFFIX}"))
                if self.placement.local
                else None,
            ),
        )
        # on this machine the hooks need nothing the setup answers: their calls follow it
        # at once (a round trip less), and each rank runs them after its setup
        early = self.connection.embedded and self.placement.local
        if early:
            for hook in self._on_ready:
                hook(self)
        facts = ipp.results(pending, SETUP_TIMEOUT)
        for info, fact in zip(self.ranks, facts, strict=True):
            info.pid, info.host = fact["pid"], fact["host"]
            info.main_thread = fact["main_thread"]
            mpi_place = (fact["mpi_rank"], fact["mpi_size"])
            if self.connection.embedded and mpi_place != (info.rank, self.world_size):
                raise RankError(
                    f"Engine {info.engine_id} is MPI rank {mpi_place[0]} of {mpi_place[1]}, "
                    f"expected rank {info.rank} of {self.world_size}."
                )
            info.state = RankState.IDLE
        if not early:
            for hook in self._on_ready:
                hook(self)
        self.ready_count = self.world_size
        self._monitor = threading.Thread(
            target=self._watch, name=f"distcomp-watch-{self.name}", daemon=True
        )
        self._monitor.start()

    def _node_disks(self) -> NodeDisks:
        """Each node's copy of the notebook's folder."""
        return make_node_disks(Path.cwd(), self.instance_count, root=self._tmp)

    def _node_environment(self, rank: int) -> dict[str, str]:
        """The listen shim's variables of ``rank``'s emulated node, if it has its own address;
        what the shim says there (node 1 looked for node 0 at localhost) goes to a file."""
        env = shim.node_environment(self.envs[rank])
        if env:
            env["DISTCOMP_NOTICE_FILE"] = os.path.join(self._tmp, f"rank-{rank}.notice")
        return env

    def node_notices(
        self, ranks: Sequence[int], consume: bool = True
    ) -> list[tuple[str, list[str]]]:
        """What the listen shim said on ``ranks``, one report section per rank that said it;
        ``consume``: said once (a report), else again in the next report (a notice)."""
        sections = []
        for rank in ranks:
            with contextlib.suppress(OSError):
                path = os.path.join(self._tmp, f"rank-{rank}.notice")
                with open(path, encoding="utf-8", errors="replace") as handle:
                    lines = handle.read().splitlines()
                if consume:
                    os.remove(path)
                sections.append((format_ranks([rank]), list(dict.fromkeys(lines))))
        return sections

    def ledger_path(self, rank: int) -> str:
        """The file where ``rank`` records its collectives (on the rank's host): in shared
        memory where there is some, so that writing it never waits for a disk."""
        return os.path.join(self._segments or self._tmp, f"rank-{rank}.ledger")

    def call_each(
        self,
        ranks: list[int],
        function: Callable[..., Any],
        args: Callable[[RankInfo], tuple],
        timeout: float = SETUP_TIMEOUT,
    ) -> list[Any]:
        """``function(*args(info))`` on each of ``ranks`` at once (shipped to the engine as
        code); their results, in order."""
        return ipp.results(self.send_each(ranks, function, args), timeout)

    def send_each(
        self, ranks: list[int], function: Callable[..., Any], args: Callable[[RankInfo], tuple]
    ) -> list:
        """:meth:`call_each` without waiting: what ``ipp.results`` waits for."""
        client = self.client
        if client is None:
            raise RankError(f"The ranks of {self.name!r} are stopped.")
        calls = []
        for rank in ranks:
            info = self.ranks[rank]
            assert info.engine_id is not None, "every rank of a started world has its engine"
            calls.append((info.engine_id, function, args(info)))
        return ipp.send_each(client, calls)

    def _start_failure(self, exc: BaseException) -> RankError:
        output = self.mpiexec_output()
        said = f"\nmpiexec said:\n{output}" if output else ""
        return RankError(
            f"The ranks of {self.name!r} did not start: {type(exc).__name__}: {exc}.{said}\n"
            f"Fix: see the message above; `%distcomp restart {self.name}` tries again."
        )

    # -- stopping -----------------------------------------------------------------------
    def stop(self, wait: bool = True, say: Callable[[str], None] | None = None) -> None:
        """Stop every process this world started (nothing, for a cluster we do not own), in
        bounded time whatever state the ranks are in (see :meth:`_teardown`); ``say(text)``
        is told what each phase waits for, as it begins.

        While the world is still starting, its start thread does the teardown as soon as
        it notices; ``wait=False`` returns without waiting for that. Output the ranks wrote
        for the cell on show and that is still on its way gets a moment to arrive first.
        """
        say = say or _silent
        if self.flows is not None and self.client is not None:
            if self.flows.shown_behind():
                say(f"waiting for the ranks' last output (at most {STOP_SETTLE:g} s)")
            self.flows.settle(STOP_SETTLE, STOP_STALL)
        with self._lock:
            self._stopped = True
            self._stop_event.set()
            finished = self._start_finished or self._thread is None
        if finished:
            self._teardown(say)
        elif wait and self._thread is not None:
            say("waiting for the ranks still starting to stop")
            self._thread.join(timeout=START_TIMEOUT)
        with self._lock:
            for info in self.ranks:
                info.state = RankState.DEAD
        self._changed()

    def _teardown(self, say: Callable[[str], None] = _silent) -> None:
        """Each local rank's tree gets SIGTERM, and SIGKILL after :data:`RANK_EXIT_GRACE`
        s (a rank blocked in C code, such as a send its peer never receives, runs no Python
        handler); then mpiexec and the controller (ipp.LocalCluster.stop: SIGTERM, SIGKILL
        after its grace)."""
        with self._lock:
            client, self.client = self.client, None
        if self.debugger is not None:
            self.debugger.close()
        if client is not None:
            ipp.close(client)
        if self.cluster is not None:
            # each local rank's tree first, with SIGTERM: the rank's Python exits as it does
            # on SIGTERM anywhere (its resource tracker unlinks its shared memory, its
            # multiprocessing temp folder goes), where mpiexec's stop would SIGKILL them all
            local = [i for i in self.ranks if i.pid and is_local_host(i.host)]
            pids = [i.pid for i in local if i.pid]
            segments = reaper.mapped_segments([*pids, *reaper.descendants(pids)])
            if pids:
                ranks = format_ranks(i.rank for i in local)
                say(f"stopping {ranks}: SIGTERM, then SIGKILL after {RANK_EXIT_GRACE:g} s")
            left = reaper.end_gently(pids, RANK_EXIT_GRACE)
            if left:  # blocked in C code: SIGTERM's Python handler never ran
                reaper.kill_tree(left, include_roots=True, grace=0)
            say(
                "stopping mpiexec and the controller: SIGTERM, then SIGKILL after "
                f"{self.cluster.grace:g} s"
            )
            self.cluster.stop()  # keeps what mpiexec printed, for the reports
            # what a rank killed before its resource tracker could act left behind
            reaper.unlink_unused(segments)
            records.unlink_recorded(self._tmp)
            if not self.placement.local:  # the ranks' stack files on their hosts
                say(f"removing the ranks' files on {self.placement.describe()}")
                remote.remove(self.placement.ssh_command, self.placement.hosts, self._tmp)
        if self.flows is not None:
            self.flows.close()
        if self._copying is not None:  # done copying, or failed: nothing is left of it
            with contextlib.suppress(Exception):
                self._copying.result().remove()
        scratch.remove(self._tmp, self._segments)

    def describe_layout(self) -> str:
        return (
            f"{self.launcher}, {layout_text(self.instance_count, self.process_count_per_node)}"
            f" = {self.world_size} rank(s) on {self._where()}"
        )

    def _where(self) -> str:
        if self.connection.embedded and not self.placement.local:
            return f"mpiexec over ssh on {self.placement.describe()}"
        return self.connection.describe()

    def __repr__(self) -> str:
        states = ", ".join(f"{format_ranks([i.rank])}: {i.state}" for i in self.ranks[:8]) + (
            ", ..." if self.world_size > 8 else ""
        )
        return f"<World {self.name!r} {self.describe_layout()}; {states}>"


#: how long the ranks have to exit on SIGTERM when they stop (an idle rank: about 1 s),
#: before SIGKILL
RANK_EXIT_GRACE = 3.0


class _Stopped(Exception):
    """stop() was called while the world was starting."""


class _Copying:
    """Each node's copy of the notebook's folder, made in a thread of its own while mpiexec
    starts the ranks (their start takes longer); :meth:`result` waits for it."""

    def __init__(self, make: Callable[[], NodeDisks]) -> None:
        self._made: NodeDisks | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(
            target=self._run, args=(make,), name="distcomp-node-disks", daemon=True
        )
        self._thread.start()

    def _run(self, make: Callable[[], NodeDisks]) -> None:
        try:
            self._made = make()
        except BaseException as exc:
            self._error = exc

    def result(self) -> NodeDisks:
        """The copies; what making them raised, raised here."""
        self._thread.join()
        if self._error is not None:
            raise self._error
        assert self._made is not None, "made or failed"
        return self._made
