"""JupyterLab's debugger on the ranks, each figure against the same on a plain cell of the
kernel (debugpy), measured in the same run with the debug requests JupyterLab sends.

Run: .venv/bin/python bench/bench_dap.py   (not a test; prints its figures)

1. Cell start to ``stopped``: from the execute request of a ``%%distcomp run`` cell with a
   gutter breakpoint to the ``stopped`` event of the last of its 4 ranks, beside the same
   for a plain cell (its one ``stopped`` event).
2. One Next: from the ``next`` request to the ``stopped`` event of the last of 4 paused
   ranks (each steps), beside one Next on a plain cell.
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

from common import figure, load, median_ratio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.dap_support import DapClient
from tests.debug_support import MPI_SPEC, DebugKernel

RANKS = 4
REPEAT = 7
RANK_CELL = "%%distcomp run dbg\nx = comm.rank\ny = x + 1\nz = y + 1\nprint(z)"
PLAIN_CELL = "p = 1\nq = p + 1\nr = q + 1\nprint(r)"


def stop_and_step(dap: DapClient, code: str, count: int) -> tuple[float, float]:
    """Seconds to the ``count``-th stop of the cell, and of one Next; then it runs on."""
    ranks = code.startswith("%%")  # the ranks' threads, or the kernel's own
    since = len(dap.events)
    tic = time.perf_counter()
    msg_id = dap.execute(code)
    stops = dap.wait_events("stopped", count, since, ranks=ranks)
    to_stop = time.perf_counter() - tic
    thread = stops[-1]["body"]["threadId"]
    since = len(dap.events)
    tic = time.perf_counter()
    dap.request("next", threadId=thread)
    dap.wait_events("stopped", count, since, ranks=ranks)
    to_step = time.perf_counter() - tic
    dap.request("continue", threadId=thread)
    assert dap.wait_reply(msg_id)["status"] == "ok", dap.output(msg_id)
    return to_stop, to_step


def main() -> None:
    kernel = DebugKernel()
    dap = DapClient(kernel.kc)
    try:
        for code in (
            "%load_ext jupyter_distcomp",
            f"%%distcomp dbg\n{MPI_SPEC}",
            "dbg.runsettings.resource_layout.configure("
            f"instance_count=1, process_count_per_node={RANKS})",
            "%%distcomp run dbg\nfrom mpi4py import MPI\ncomm = MPI.COMM_WORLD",
        ):
            reply, text = dap.run(code, timeout=300)
            assert reply["status"] == "ok", text
        dap.start()
        dap.breakpoints(RANK_CELL, [3])
        dap.breakpoints(PLAIN_CELL, [2])
        dap.request("configurationDone")
        stop_and_step(dap, RANK_CELL, RANKS)  # warm: each rank's first stop connects
        stop_and_step(dap, PLAIN_CELL, 1)
        stops, steps = [], []
        for _ in range(REPEAT):
            ours = stop_and_step(dap, RANK_CELL, RANKS)
            plain = stop_and_step(dap, PLAIN_CELL, 1)
            stops.append((ours[0], plain[0]))
            steps.append((ours[1], plain[1]))
        dap.stop()
    finally:
        kernel.close()
    print(f"bench_dap: {RANKS} MPI ranks, {REPEAT} runs each, {load()}")
    for what, pairs in (("cell start to stopped", stops), ("one Next on the paused", steps)):
        ours = statistics.median(p[0] for p in pairs) * 1000
        plain = statistics.median(p[1] for p in pairs) * 1000
        print(
            figure(
                what,
                median_ratio(pairs),
                "a plain cell under debugpy",
                scale=f"{RANKS} ranks {ours:.0f} ms, plain cell {plain:.0f} ms",
            )
        )


if __name__ == "__main__":
    main()
