"""Looking into ranks: ``%distcomp where`` and ``%distcomp compare``, measured in one run.

Run: .venv/bin/python bench/bench_inspect.py   (not a test; prints its figures)

1. ``%distcomp where`` on 4 busy ranks (3 in an MPI Barrier, 1 in ``time.sleep``): median
   time to the printed stacks (target < 0.5 s), and as a ratio to a ``%px`` round trip on
   the same engines when idle (the machine's pace in this run).
2. ``%distcomp compare NAME loss`` (a scalar) on 4 ranks vs ``%px loss`` on the same
   engines (target ratio <= 1.5).
"""

from __future__ import annotations

import os
import statistics
import time

from common import bench_shell, quiet

RANKS = 4


def timed(shell, cell: str, n: int) -> float:
    seconds = []
    for _ in range(n):
        tic = time.perf_counter()
        result, _ = quiet(shell.run_cell, cell)
        seconds.append(time.perf_counter() - tic)
        assert result.success, result.error_in_exec
    return statistics.median(seconds)


def main() -> None:
    from jupyter_distcomp.local.inspect.where import where
    from jupyter_distcomp.local.ranks.backend import get_backend

    shell = bench_shell(RANKS)
    backend = get_backend()
    world, _ = quiet(backend.start, "bench", shell.user_ns["bench"])
    view = world.client[:]
    view.block = True
    view.activate()  # %px on the same engines
    setup = "import time\nfrom mpi4py import MPI\nloss = 0.5 + mpi_rank * 0.0"
    assert quiet(shell.run_cell, f"%%distcomp run bench\n{setup}")[0].success
    print(f"jupyter-distcomp where / compare, {RANKS} ranks on {os.cpu_count()} core(s)\n")

    px = timed(shell, "%px loss", 30)
    compare = timed(shell, "%distcomp compare bench loss", 30)
    print(
        f"compare of a scalar:      ours {compare * 1000:6.1f} ms  %px {px * 1000:6.1f} ms       "
        f"ratio {compare / px:.2f} (target <= 1.5)"
    )

    busy = "if mpi_rank == 3:\n    time.sleep(30)\nMPI.COMM_WORLD.Barrier()"
    assert quiet(shell.run_cell, f"%%distcomp run bench --background\n{busy}")[0].success
    time.sleep(1.0)  # the ranks reach the barrier
    where_s = []
    for _ in range(10):
        tic = time.perf_counter()
        report = where(world)
        where_s.append(time.perf_counter() - tic)
        assert "Barrier()" in report.text() and "no stack" not in report.text()
    where = statistics.median(where_s)
    print(
        f"where on {RANKS} busy ranks:   ours {where * 1000:6.1f} ms  (target < 500 ms; "
        f"{where / px:.1f}x an idle %px round trip)"
    )
    backend.shutdown()


if __name__ == "__main__":
    main()
