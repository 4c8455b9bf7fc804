"""The collectives ledger's cost on Horovod's allreduce, measured in one run on the same 2
ranks (Horovod built by ``make horovod``).

Run: .venv/bin/python bench/bench_ledger_horovod.py   (not a test; prints its figures)

2,000 blocking ``hvd.allreduce`` of 4 float32 through the ledger (its wrappers of Horovod's
``mpi_lib_v2`` functions: the enqueue and the wait) against Horovod's own functions, put back
in ``mpi_lib_v2`` for the other side's blocks (target ratio <= 1.05). The sides alternate in
blocks of 100 calls, each side first in every other block, and the figure is the median of
the ratios of neighbouring blocks over all rounds (the times shown are the medians of the
rounds' sums). A Horovod allreduce waits for Horovod's background cycle
(``HOROVOD_CYCLE_TIME``, 1 ms by default), which the ledger's microseconds are set against.
"""

from __future__ import annotations

import os

from common import bench_shell, cell_figures, quiet

RANKS = 2
ROUNDS = 5

SETUP = """\
import statistics, sys, time
import horovod.torch as hvd
import torch

hvd.init()
lib = sys.modules["horovod.torch.mpi_ops"].mpi_lib
wrapped = {name: getattr(lib, name) for name in dir(lib)
           if hasattr(getattr(lib, name), "__distcomp_ledger__")}
plain = {name: fn.__distcomp_ledger__ for name, fn in wrapped.items()}
"""

MEASURE = """\
t = torch.ones(4)

def block(functions, n=100):
    for name, fn in functions.items():
        setattr(lib, name, fn)
    hvd.barrier()
    tic = time.perf_counter()
    for _ in range(n):
        hvd.allreduce(t, op=hvd.Sum)
    took = time.perf_counter() - tic
    for name, fn in wrapped.items():
        setattr(lib, name, fn)
    return took

sides = {"plain": [], "ledger": [], "ratio": []}
for _ in range(ROUNDS):
    a = b = 0.0
    for i in range(20):  # each side goes first in every other block
        if i % 2:
            y = block(wrapped)
        x = block(plain)
        if not i % 2:
            y = block(wrapped)
        a, b = a + x, b + y
        sides["ratio"].append(y / x)
    sides["plain"].append(a)
    sides["ledger"].append(b)
if hvd.rank() == 0:
    print("FIGURES", {k: statistics.median(v) for k, v in sides.items()})
"""


def main() -> None:
    from jupyter_distcomp.local.ranks.backend import get_backend

    try:
        import horovod  # noqa: F401
    except ImportError:  # make bench goes on with the others
        print("collectives ledger on Horovod: not measured, no Horovod here (make horovod)")
        return
    shell = bench_shell(RANKS)
    quiet(get_backend().start, "bench", shell.user_ns["bench"])
    result, _ = quiet(shell.run_cell, f"%%distcomp run bench\n{SETUP}")
    assert result.success, result.error_in_exec
    figures = cell_figures(shell, f"%%distcomp run bench\nROUNDS = {ROUNDS}\n{MEASURE}")
    load = os.getloadavg()[0]
    print(
        f"collectives ledger on Horovod, {RANKS} ranks on {os.cpu_count()} core(s), load "
        f"{load:.1f} (1-minute average at the end)\n"
    )
    plain, ledger = figures["plain"], figures["ledger"]
    per_call = (ledger - plain) / 2000
    print(
        f"2,000 hvd.allreduce of 4 floats: plain {plain * 1000:7.1f} ms  ledger "
        f"{ledger * 1000:7.1f} ms  ratio {figures['ratio']:.3f} (median of {ROUNDS * 20} "
        f"block pairs; target <= 1.05); {per_call * 1e6:+.1f} us a call"
    )
    quiet(shell.run_line_magic, "distcomp", "stop")


if __name__ == "__main__":
    main()
