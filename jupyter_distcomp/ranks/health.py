"""Is each rank alive, what did mpiexec say, where is a rank stuck: the World's senses.

A mixin of :class:`~.world.World`, kept apart so the lifecycle code stays readable. It
expects ``ranks``, ``cluster``, ``client``, ``world_size``, ``_tmp``, ``_lock``,
``_stopped``, ``_last_engine_set``, ``started``, ``error`` and ``_changed()``.
"""

from __future__ import annotations

import os
import signal
import time
from typing import TYPE_CHECKING

from ..mpi import is_local_host
from .failures import collect_stacks, mpiexec_messages

if TYPE_CHECKING:
    from .world import RankInfo


class WorldHealth:
    # -- liveness -----------------------------------------------------------------------
    def _mpiexec_alive(self) -> bool:
        engine_set = self.cluster.engine_set if self.cluster else None
        process = getattr(engine_set, "process", None)
        if process is None:
            return self.cluster is None or engine_set is None
        try:
            return process.is_running() and process.status() != "zombie"
        except Exception:
            return False

    def _pid_alive(self, info: RankInfo) -> bool:
        import psutil

        if info.pid is None or not is_local_host(info.host):
            return self.client is not None and info.engine_id in self.client.ids
        try:
            if info.process is None:
                info.process = psutil.Process(info.pid)
            return info.process.status() != psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return False

    def check_alive(self) -> list[int]:
        """Mark ranks whose process is gone as dead; return the newly dead ranks."""
        if not self.started or self.error is not None or self._stopped:
            return []
        newly = []
        mpiexec_alive = self._mpiexec_alive()
        with self._lock:
            for info in self.ranks:
                if info.state != "dead" and (not mpiexec_alive or not self._pid_alive(info)):
                    info.state = "dead"
                    newly.append(info.rank)
        if newly:
            self._changed()
        return newly

    def _watch(self) -> None:
        while not self._stopped and self.dead_ranks != list(range(self.world_size)):
            self.check_alive()
            time.sleep(0.5)

    # -- mpiexec's own words ------------------------------------------------------------
    def output_size(self) -> int:
        path = self._output_file()
        try:
            return os.path.getsize(path) if path else 0
        except OSError:
            return 0

    @property
    def _engine_set(self):
        """mpiexec's launcher; kept after stop, as it holds mpiexec's output from then on."""
        if self._last_engine_set is None and self.cluster is not None:
            self._last_engine_set = self.cluster.engine_set
        return self._last_engine_set

    def _output_file(self) -> str | None:
        return getattr(self._engine_set, "output_file", None)

    def mpiexec_output(self, since: int = 0, limit: int = 40) -> str:
        """What mpiexec (and ranks' fatal errors) printed, without the engines' log lines."""
        path = self._output_file()
        if path and os.path.exists(path):
            with open(path, errors="replace") as f:
                f.seek(since)
                text = f.read()
        elif self._engine_set is not None:
            # ipyparallel read the file into memory and removed it when mpiexec ended
            text = self._engine_set.get_output()[since:]
        else:
            return ""
        return mpiexec_messages(text, limit)

    # -- signals and stacks ---------------------------------------------------------------
    def signal(self, ranks: list[int], sig: int) -> None:
        """Send ``sig`` to ranks: directly to local pids, through the nanny otherwise."""
        remote = []
        for rank in ranks:
            info = self.ranks[rank]
            if info.pid and is_local_host(info.host):
                try:
                    os.kill(info.pid, sig)
                except ProcessLookupError:
                    pass
            else:
                remote.append(info.engine_id)
        if remote and self.client is not None:
            self.client.send_signal(sig, targets=remote, block=False)

    def stacks(self, ranks: list[int], wait: float = 1.0) -> dict[int, str]:
        """Each rank's current main-thread Python stack (via faulthandler on SIGUSR1)."""
        local = [r for r in ranks if is_local_host(self.ranks[r].host)]
        paths = {r: os.path.join(self._tmp, f"rank-{r}.stack") for r in local}
        threads = {r: self.ranks[r].main_thread for r in local}
        result = collect_stacks(paths, threads, lambda: self.signal(local, signal.SIGUSR1), wait)
        for rank in ranks:
            result.setdefault(rank, "(no stack: the rank did not answer SIGUSR1)")
        return result
