"""Is each rank alive, what did mpiexec say, where is a rank stuck: the World's senses.

:class:`WorldHealth` is the base of :class:`~.world.World`, kept apart so the lifecycle code
stays readable. It declares the attributes of World it reads; World sets them.
"""

from __future__ import annotations

import contextlib
import functools
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ...contracts import RankState
from ...core.ranges import rank_label
from ...machine.network import is_local_host
from ...machine.node_disks import user_text
from ..stacks import RemoteRank, collect_stacks, file_size, remote_stacks
from . import ipp
from .failures import mpiexec_messages

if TYPE_CHECKING:
    import psutil

    from ...machine.hosts import Placement
    from .ipp import Client, LocalCluster


#: seconds between two notices of one world's changes (to the ranks panel, the widget, the
#: debugger's threads): the changes within are told once, at the end of the gap
NOTICE_GAP = 0.05


class Notices:
    """Calls ``tell`` on a change: at once when the last call is NOTICE_GAP ago, else once
    at the end of the gap for every change within it (16 ranks that reply within a few
    milliseconds make one notice, not 16). ``tell`` reads the state when it runs, so the
    last notice tells the latest state; notices never overlap. ``clock`` and ``timer`` (a
    ``threading.Timer`` alike: ``timer(seconds, function)``, ``start``, ``cancel``) are
    time's and the gap's end, for tests to drive."""

    def __init__(
        self,
        tell: Callable[[], None],
        clock: Callable[[], float] = time.monotonic,
        timer: Callable[[float, Callable[[], None]], Any] = threading.Timer,
    ) -> None:
        self._tell = tell
        self._clock = clock
        self._new_timer = timer
        self._lock = threading.Lock()
        self._telling = threading.RLock()  # a listener may change the world again
        self._told_at = -NOTICE_GAP
        self._timer: Any = None  # the gap's end, while a notice waits for it
        self._held = 0  # callers in :meth:`held`
        self._due = False  # a change while held

    @contextlib.contextmanager
    def held(self) -> Iterator[None]:
        """Changes in the block are told right after it, at once (a cell's requests go out
        first, then the panel hears that its ranks are busy)."""
        with self._lock:
            self._held += 1
        try:
            yield
        finally:
            with self._lock:
                self._held -= 1
                due = self._due and not self._held
                if due:
                    self._due = False
            if due:
                self._call()

    def changed(self) -> None:
        with self._lock:
            if self._held:
                self._due = True
                return
            if self._timer is not None:  # the notice due tells this change too
                return
            wait = self._told_at + NOTICE_GAP - self._clock()
            if wait > 0:
                self._timer = self._new_timer(wait, self.flush)
                self._timer.daemon = True
                self._timer.start()
                return
        self._call()

    def flush(self) -> None:
        """Tell the changes a timer waits for now (a cell ends: its ranks' last states
        before its end)."""
        with self._lock:
            if self._timer is None:
                return
        self._call()

    def _call(self) -> None:
        """Tell now; a notice that was due is told by this one."""
        with self._lock:
            timer, self._timer = self._timer, None
            self._told_at = self._clock()
        if timer is not None:
            timer.cancel()
        with self._telling:
            try:
                self._tell()
            except Exception:
                pass


@dataclass
class RankInfo:
    rank: int
    node: int
    local_rank: int
    state: RankState = RankState.STARTING
    pid: int | None = None
    host: str | None = None
    main_thread: int | None = None
    engine_id: int | None = None
    death: str | None = None  # why it died, once known
    gone_at: float | None = None  # when its own process was seen gone while mpiexec ran
    process: psutil.Process | None = None  # looked up on the first liveness check


class WorldHealth:
    world_size: int
    instance_count: int
    ranks: list[RankInfo]
    cluster: LocalCluster | None  # ours; None before the start and for the user's own cluster
    client: Client | None
    placement: Placement
    error: BaseException | None
    _on_change: Callable[[Any], None]
    notices: Notices  # calls _on_change
    _done: threading.Event
    _lock: threading.RLock
    _stopped: bool
    _tmp: str

    # -- state --------------------------------------------------------------------------
    def _changed(self) -> None:
        self.notices.changed()

    def set_state(self, ranks: list[int], state: RankState) -> None:
        """Put ``ranks`` in ``state`` (a dead rank stays dead)."""
        self._set(ranks, state, lambda current: current != RankState.DEAD)

    def change_state(self, rank: int, before: RankState, after: RankState) -> None:
        """``rank`` goes from ``before`` to ``after``, if it is still in ``before``."""
        self._set([rank], after, lambda current: current == before)

    def _set(self, ranks: list[int], state: RankState, allowed: Callable[[str], bool]) -> None:
        changed = False
        with self._lock:
            for rank in ranks:
                info = self.ranks[rank]
                if info.state != state and allowed(info.state):
                    info.state = state
                    changed = True
        if changed:
            self._changed()

    def states(self) -> dict[int, RankState]:
        return {info.rank: info.state for info in self.ranks}

    @property
    def dead_ranks(self) -> list[int]:
        return [info.rank for info in self.ranks if info.state == RankState.DEAD]

    def label(self, rank: int) -> str:
        return rank_label(rank, self.ranks[rank].node, self.instance_count)

    # -- liveness -----------------------------------------------------------------------
    def mpiexec_alive(self) -> bool:
        """Our mpiexec still runs (always True for the user's own cluster)."""
        return self.cluster is None or self.cluster.mpiexec_alive()

    def _pid_alive(self, info: RankInfo) -> bool:
        import psutil

        if info.pid is None or not is_local_host(info.host):
            return self.client is not None and info.engine_id in ipp.engine_ids(self.client)
        try:
            if info.process is None:
                info.process = psutil.Process(info.pid)
            return info.process.status() != psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return False

    def check_alive(self) -> list[int]:
        """Mark ranks whose process is gone as dead; return the newly dead ranks."""
        if not self._done.is_set() or self.error is not None or self._stopped:
            return []
        newly = []
        mpiexec_alive = self.mpiexec_alive()
        now = time.monotonic()
        with self._lock:
            for info in self.ranks:
                if info.state == RankState.DEAD:
                    continue
                if mpiexec_alive and not self._pid_alive(info):
                    info.gone_at = now
                if not mpiexec_alive or info.gone_at is not None:
                    info.state = RankState.DEAD
                    newly.append(info.rank)
        if newly:
            self._changed()
        return newly

    def first_gone(self) -> list[int]:
        """The ranks whose own process was seen gone first, before mpiexec stopped the rest."""
        seen = [info for info in self.ranks if info.gone_at is not None]
        first = min((info.gone_at for info in seen if info.gone_at is not None), default=None)
        return [info.rank for info in seen if info.gone_at == first]

    def _watch(self) -> None:
        while not self._stopped and self.dead_ranks != list(range(self.world_size)):
            self.check_alive()
            time.sleep(0.5)

    # -- mpiexec's own words ------------------------------------------------------------
    def output_size(self) -> int:
        path = self.cluster.output_file() if self.cluster else None
        return file_size(path) if path else 0

    def mpiexec_output(self, since: int = 0, limit: int = 40) -> str:
        """What mpiexec (and ranks' fatal errors) printed, without the engines' log lines."""
        if self.cluster is None:
            return ""
        return mpiexec_messages(self.cluster.mpiexec_text(since), limit)

    # -- signals and stacks ---------------------------------------------------------------
    def signal(self, ranks: list[int], sig: int) -> None:
        """Send ``sig`` to ranks: directly to local pids, through the nanny otherwise. SIGINT
        reaches the processes a local rank started too (its DataLoader workers, its
        multiprocessing pool), as Ctrl-C in a terminal reaches the whole foreground job."""
        remote: list[int] = []
        for rank in ranks:
            info = self.ranks[rank]
            if info.pid and is_local_host(info.host):
                pids = [info.pid]
                if sig == signal.SIGINT:
                    pids += [child.pid for child in self.children(rank)]
                for pid in pids:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, sig)
            elif info.engine_id is not None:
                remote.append(info.engine_id)
        if remote and self.client is not None:
            ipp.send_signal(self.client, sig, remote)

    def children(self, rank: int) -> list[psutil.Process]:
        """The processes a local ``rank`` started that still run (none for a rank on
        another host, or one that has ended)."""
        import psutil

        info = self.ranks[rank]
        if not info.pid or not is_local_host(info.host):
            return []
        try:
            return psutil.Process(info.pid).children(recursive=True)
        except psutil.Error:
            return []

    def stacks(self, ranks: list[int], wait: float = 1.0) -> dict[int, str]:
        """Each rank's current main-thread Python stack (via faulthandler on SIGUSR1), taken
        on the host that runs the rank."""
        local = [r for r in ranks if is_local_host(self.ranks[r].host)]
        paths = {r: os.path.join(self._tmp, f"rank-{r}.stack") for r in local}
        threads = {r: self.ranks[r].main_thread for r in local}
        send = functools.partial(self.signal, local, signal.SIGUSR1)
        result = collect_stacks(paths, threads, send, wait)
        result.update(self._remote_stacks([r for r in ranks if r not in local], wait))
        result = {rank: user_text(stack) for rank, stack in result.items()}  # user's files
        for rank in ranks:
            result.setdefault(rank, "(no stack: the rank did not answer SIGUSR1)")
        return result

    def _remote_stacks(self, ranks: list[int], wait: float) -> dict[int, str]:
        """Stacks of ranks on the placement's hosts, over ssh (none for a user's cluster)."""
        hosts = self.placement.hosts
        targets = [
            RemoteRank(
                r,
                hosts[self.ranks[r].node],
                self.ranks[r].pid or 0,
                os.path.join(self._tmp, f"rank-{r}.stack"),
                self.ranks[r].main_thread,
            )
            for r in ranks
            if self.ranks[r].pid and self.ranks[r].node < len(hosts)
        ]
        return remote_stacks(self.placement.ssh_command, targets, wait) if targets else {}
