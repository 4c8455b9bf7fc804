"""A long-lived kernel stays lean and blames the right rank: what `make soak` checks at scale."""

from __future__ import annotations

import gc
import subprocess
import threading

import pytest

from jupyter_distcomp.local.ranks.health import Notices, RankInfo, WorldHealth


def _live_results() -> int:
    from ipyparallel.client.asyncresult import AsyncResult

    gc.collect()
    # type(), not isinstance(): lazy proxies (azure-ai-ml's DockerProxy) raise on __class__
    return sum(issubclass(type(obj), AsyncResult) for obj in gc.get_objects())


@pytest.mark.slow
def test_finished_cells_keep_no_results_alive(ip):
    from .ranks_support import MPI_SPEC, define, run_cell

    define(ip, "lean", MPI_SPEC, nodes=1, per_node=2)
    for i in range(3):
        assert run_cell(ip, f"%%distcomp run lean\nprint({i})").ok
    baseline = _live_results()
    for i in range(20):
        cell = run_cell(ip, f"%%distcomp run lean\nprint('x' * 10000, {i})")
        assert cell.ok, cell.error
    # each cell's results and output (10 kB a rank here) are let go once it ended
    assert _live_results() <= baseline
    ip.run_line_magic("distcomp", "stop lean")


class _Mpiexec:
    def __init__(self) -> None:
        self.running = True

    def mpiexec_alive(self) -> bool:
        return self.running


class _Health(WorldHealth):
    """The liveness part of a World over real processes, with an mpiexec that can end."""

    def __init__(self, procs: list[subprocess.Popen]) -> None:
        self.world_size = self.instance_count = len(procs)
        self.ranks = [RankInfo(r, 0, r, "busy", pid=p.pid) for r, p in enumerate(procs)]
        self.cluster = _Mpiexec()  # type: ignore[assignment]
        self.client = None
        self.error = None
        self._on_change = lambda _: None
        self.notices = Notices(lambda: self._on_change(self))
        self._done = threading.Event()
        self._done.set()
        self._lock = threading.RLock()
        self._stopped = False


def test_the_rank_whose_process_went_first_is_blamed_though_mpiexec_ended_all():
    procs = [subprocess.Popen(["sleep", "60"]) for _ in range(4)]
    try:
        health = _Health(procs)
        assert health.check_alive() == [] and health.first_gone() == []
        procs[2].kill()
        procs[2].wait()
        assert health.check_alive() == [2]
        for proc in procs:  # mpiexec stops the others and ends
            proc.kill()
            proc.wait()
        health.cluster.running = False  # type: ignore[union-attr]
        assert health.check_alive() == [0, 1, 3]
        assert health.dead_ranks == [0, 1, 2, 3]
        assert health.first_gone() == [2]
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()
