"""The collectives ledger's cost, measured in one run on the same 4 ranks.

Run: .venv/bin/python bench/bench_ledger.py   (not a test; prints its figures)

1. 2,000 ``dist.all_reduce`` of 4 float32 on gloo, through the ledger's wrapper against
   torch's own function on the same process group (target ratio <= 1.05). The two sides
   alternate in blocks of 100 calls, each side first in every other block; a round is
   2,000 calls a side, and the figure is the median of the ratios of neighbouring blocks
   over all rounds (the times shown are the medians of the rounds' sums). Beside it, the
   wrapper's own CPU time (the calling thread's, on a group of one rank: no waiting on other
   ranks, measured on rank 0 while the others sleep) as a share of the 4-rank call: the
   wall-time ratio is as noisy as the ranks' scheduling on a loaded machine, the CPU time
   is much less so.
2. One 64 MiB ``COMM_WORLD.Allreduce`` (float64) through the ledger's communicator against
   mpi4py's own method on the same communicator (target ratio <= 1.01): pairs of calls, in
   the order plain-ledger and ledger-plain alternately, the median of the pairs' ratios.
   Beside it, the wrapper's own CPU time for an ``Allreduce`` (on ``COMM_SELF``, 1 float, a
   mean over 2,000 calls a side) as a share of the 64 MiB call: the ledger's cost does not
   grow with the buffer (it reads the buffer's shape, never its data), so this is the bound
   one call can cost, whatever one 100 ms call's noise.
3. Check mode's cost on the loop of 1 (reported, no target).
"""

from __future__ import annotations

import os

from common import bench_shell, cell_figures, quiet

RANKS = 4
ROUNDS = 7
PAIRS = 40

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
one, out = np.ones(1), np.empty(1)

def block(fn, n, clock=time.perf_counter):
    tic = clock()
    for _ in range(n):
        fn(t)
    return clock() - tic

def loops(first, second, blocks=20, n=100, clock=time.perf_counter, together=True):
    # 2,000 calls a side, in blocks that alternate: load changes weigh on both alike;
    # also each pair of neighbouring blocks' ratio, second side to first
    a = b = 0.0
    ratios = []
    if together:
        dist.barrier()
    for i in range(blocks):  # each side goes first in every other block
        if i % 2:
            y = block(second, n, clock)
        x = block(first, n, clock)
        if not i % 2:
            y = block(second, n, clock)
        a, b = a + x, b + y
        ratios.append(y / x)
    return a, b, ratios

def big(fn):
    comm.Barrier()
    tic = time.perf_counter()
    fn(send, recv)
    return time.perf_counter() - tic

def small(fn, n=2000):
    tic = time.thread_time()
    for _ in range(n):
        fn(one, out)
    return (time.thread_time() - tic) / n

plain_big = lambda s, r: plain_Allreduce(comm, s, r)
big(comm.Allreduce)  # the buffers' pages are touched once before any figure
alone, _ = dist.new_subgroups(group_size=1)  # this rank by itself: the wrapper's own cost
sides = {k: [] for k in ("plain", "ledger", "ratio", "check", "solo plain", "solo ledger",
                         "mpi plain", "mpi ledger", "mpi ratio", "self plain", "self ledger")}
for _ in range(ROUNDS):
    plain, ledger, ratios = loops(plain_all_reduce, dist.all_reduce)
    sides["plain"].append(plain)
    sides["ledger"].append(ledger)
    sides["ratio"].extend(ratios)
    hooks.configure(True)
    sides["check"].append(block(dist.all_reduce, 200) * 10)
    hooks.configure(False)
# CPU time of the calling thread: what the wrapper adds, whatever the machine's load; on
# rank 0 alone, while the others sleep in a gloo barrier (MPI's would spin)
if comm.rank == 0:
    for _ in range(ROUNDS):
        plain, ledger, _ = loops(lambda x: plain_all_reduce(x, group=alone),
                                 lambda x: dist.all_reduce(x, group=alone),
                                 clock=time.thread_time, together=False)
        sides["solo plain"].append(plain)
        sides["solo ledger"].append(ledger)
        sides["self plain"].append(small(lambda s, r: plain_Allreduce(MPI.COMM_SELF, s, r)))
        sides["self ledger"].append(small(MPI.COMM_SELF.Allreduce))
dist.barrier()
for i in range(PAIRS):  # plain-ledger, then ledger-plain
    if i % 2:
        ledger, plain = big(comm.Allreduce), big(plain_big)
    else:
        plain, ledger = big(plain_big), big(comm.Allreduce)
    sides["mpi plain"].append(plain)
    sides["mpi ledger"].append(ledger)
    sides["mpi ratio"].append(ledger / plain)
if comm.rank == 0:
    print("FIGURES", {k: statistics.median(v) for k, v in sides.items()})
"""


def main() -> None:
    from jupyter_distcomp.local.ranks.backend import get_backend

    shell = bench_shell(RANKS)
    quiet(get_backend().start, "bench", shell.user_ns["bench"])
    result, _ = quiet(shell.run_cell, f"%%distcomp run bench\n{SETUP}")
    assert result.success, result.error_in_exec
    figures = cell_figures(
        shell, f"%%distcomp run bench\nROUNDS, PAIRS = {ROUNDS}, {PAIRS}\n{MEASURE}"
    )
    load = os.getloadavg()[0]
    print(
        f"collectives ledger, {RANKS} ranks on {os.cpu_count()} core(s), load {load:.1f} "
        f"(1-minute average at the end)\n"
    )
    plain, ledger, check = figures["plain"], figures["ledger"], figures["check"]
    print(
        f"2,000 all_reduce of 4 floats (gloo): plain {plain * 1000:7.1f} ms  "
        f"ledger {ledger * 1000:7.1f} ms  ratio {figures['ratio']:.3f} "
        f"(median of {ROUNDS * 20} block pairs; target <= 1.05)"
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
        f"ledger {mpi_ledger * 1000:7.1f} ms  ratio {figures['mpi ratio']:.3f} "
        f"(median of {PAIRS} pairs; target <= 1.01)"
    )
    per_call = figures["self ledger"] - figures["self plain"]
    print(
        f"  the wrapper's own CPU time (thread time, COMM_SELF): {per_call * 1e6:.1f} us "
        f"a call = {per_call / mpi_plain:.4%} of the 64 MiB Allreduce"
    )
    quiet(shell.run_line_magic, "distcomp", "stop")


if __name__ == "__main__":
    main()
