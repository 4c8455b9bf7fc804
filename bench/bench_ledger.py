"""The collectives ledger's cost, measured in one run on the same 4 ranks.

Run: .venv/bin/python bench/bench_ledger.py   (not a test; prints its figures)

1. 2,000 ``dist.all_reduce`` of 4 float32 on gloo, through the ledger's wrapper against
   torch's own function on the same process group (target ratio <= 1.05); and the
   wrapper's own CPU time (the calling thread's, on a group of one rank: no waiting on
   other ranks), as a share of the 4-rank call: on a loaded machine the wall-time ratio is
   as noisy as the ranks' scheduling, the CPU time is not.
2. One 64 MiB ``COMM_WORLD.Allreduce`` (float64) through the ledger's communicator against
   mpi4py's own method on the same communicator (target ratio <= 1.01).
3. Check mode's cost on the loop of 1 (reported, no target).

Each pair alternates its two sides over several rounds on every rank, and the medians of
rank 0 are compared, so the machine's load in this run weighs on both sides alike.
"""

from __future__ import annotations

import ast
import os

from common import bench_shell, quiet

RANKS = 4
ROUNDS = 5

SETUP = """\
import os, socket, statistics, time, sys
import numpy as np
from mpi4py import MPI
comm = MPI.COMM_WORLD
if comm.rank == 0:
    probe = socket.socket(); probe.bind(("127.0.0.1", 0)); port = probe.getsockname()[1]
    probe.close()
else:
    port = None
os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(comm.bcast(port)),
                  RANK=str(comm.rank), WORLD_SIZE=str(comm.size))
import torch, torch.distributed as dist
dist.init_process_group("gloo")
hooks = sys.modules["distcomp_ledger_hooks"]
plain_all_reduce = dist.all_reduce.__distcomp_ledger__
plain_Allreduce = MPI.Intracomm.Allreduce
"""

MEASURE = """\
t = torch.ones(4)
send, recv = np.ones(8 * 1024 * 1024), np.empty(8 * 1024 * 1024)

def block(fn, n, clock=time.perf_counter):
    tic = clock()
    for _ in range(n):
        fn(t)
    return clock() - tic

def loops(first, second, blocks=20, n=100, clock=time.perf_counter):
    # 2,000 calls a side, in blocks that alternate: load changes weigh on both alike
    a = b = 0.0
    dist.barrier()
    for i in range(blocks):  # each side goes first in every other block
        if i % 2:
            b += block(second, n, clock)
        a += block(first, n, clock)
        if not i % 2:
            b += block(second, n, clock)
    return a, b

def big(fn):
    comm.Barrier()
    tic = time.perf_counter()
    fn(send, recv)
    return time.perf_counter() - tic

big(comm.Allreduce)  # the buffers' pages are touched once before any figure
alone, _ = dist.new_subgroups(group_size=1)  # this rank by itself: the wrapper's own cost
sides = {k: [] for k in ("plain", "ledger", "check", "mpi plain", "mpi ledger", "solo plain",
                         "solo ledger")}
for _ in range(ROUNDS):
    plain, ledger = loops(plain_all_reduce, dist.all_reduce)
    sides["plain"].append(plain)
    sides["ledger"].append(ledger)
    # CPU time of the calling thread: what the wrapper adds, whatever the machine's load
    plain, ledger = loops(lambda x: plain_all_reduce(x, group=alone),
                          lambda x: dist.all_reduce(x, group=alone), clock=time.thread_time)
    sides["solo plain"].append(plain)
    sides["solo ledger"].append(ledger)
    hooks.configure(True)
    sides["check"].append(block(dist.all_reduce, 200) * 10)
    hooks.configure(False)
    for _ in range(2):  # plain, ledger, ledger, plain
        sides["mpi plain"].append(big(lambda s, r: plain_Allreduce(comm, s, r)))
        sides["mpi ledger"].append(big(comm.Allreduce))
        sides["mpi ledger"].append(big(comm.Allreduce))
        sides["mpi plain"].append(big(lambda s, r: plain_Allreduce(comm, s, r)))
figures = {k: statistics.median(v) for k, v in sides.items()}
if comm.rank == 0:
    print("FIGURES", figures)
"""


def main() -> None:
    from jupyter_distcomp.local.ranks.backend import get_backend

    shell = bench_shell(RANKS)
    quiet(get_backend().start, "bench", shell.user_ns["bench"])
    result, _ = quiet(shell.run_cell, f"%%distcomp run bench\n{SETUP}")
    assert result.success, result.error_in_exec
    result, out = quiet(shell.run_cell, f"%%distcomp run bench\nROUNDS = {ROUNDS}\n{MEASURE}")
    assert result.success, result.error_in_exec
    line = next(line for line in out.splitlines() if "FIGURES" in line)
    figures = ast.literal_eval(line.split("FIGURES", 1)[1])
    print(f"collectives ledger, {RANKS} ranks on {os.cpu_count()} core(s), median of {ROUNDS}\n")
    plain, ledger, check = figures["plain"], figures["ledger"], figures["check"]
    print(
        f"2,000 all_reduce of 4 floats (gloo): plain {plain * 1000:7.1f} ms  "
        f"ledger {ledger * 1000:7.1f} ms  ratio {ledger / plain:.3f} (target <= 1.05)"
    )
    per_call = (figures["solo ledger"] - figures["solo plain"]) / 2000
    print(
        f"  the wrapper's own CPU time (thread time, a group of one rank): "
        f"{per_call * 1e6:.1f} us a call = {per_call / (plain / 2000):.2%} of a 4-rank "
        "all_reduce here"
    )
    print(
        f"  check mode, same loop:           check  {check * 1000:7.1f} ms  ratio "
        f"{check / plain:.2f} (reported)"
    )
    mpi_plain, mpi_ledger = figures["mpi plain"], figures["mpi ledger"]
    print(
        f"one 64 MiB Allreduce (mpi4py):     plain {mpi_plain * 1000:7.1f} ms  "
        f"ledger {mpi_ledger * 1000:7.1f} ms  ratio {mpi_ledger / mpi_plain:.3f} "
        "(target <= 1.01)"
    )
    quiet(shell.run_line_magic, "distcomp", "stop")


if __name__ == "__main__":
    main()
