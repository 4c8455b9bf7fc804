"""The silent cell's status line (local/ranks/silence.py): what its looks at the ranks cost
the ranks, measured in one run on the same 2 ranks.

Run: .venv/bin/python bench/bench_silence.py   (not a test; prints its figures)

1. What one look costs a rank: the processor time of the stack faulthandler writes on
   SIGUSR1 (what a look asks of a rank that is not in a collective; one in a collective is
   only read from its ledger file), over 500 signals a rank sends itself, as a share of the
   2 s between two looks (target <= 0.1%). Robust to a loaded machine: it is the rank's own
   processor time.
2. End to end, as noisy as the machine: rank 0 counts a pure-Python loop for 10 s in a cell
   that prints nothing (rank 1 loops 6 s, then waits in an MPI Barrier, so both kinds of look
   are taken: a stack over SIGUSR1 for a running rank, the ledger for a waiting one). The
   same cell runs with the line on (the real settings: the first look after 3 s, then every
   2 s) and off, alternately, the order swapped every round; the figure is the median of the
   rounds' ratios of rank 0's loop rate, off over on. Beside it, the same with a look every
   0.2 s (ten times as often). On a machine shared with other work these ratios move with
   its load (printed beside them) far more than a look's cost could move them.
"""

from __future__ import annotations

import ast
import statistics

from common import bench_shell, figure, load, quiet

RANKS = 2
ROUNDS = 4
SECONDS = 10.0
SIGNALS = 500

ONE_LOOK = f"""\
import os, signal, time
tic = time.thread_time()
for _ in range({SIGNALS}):
    os.kill(os.getpid(), signal.SIGUSR1)
look_cost = (time.thread_time() - tic) / {SIGNALS}
"""

WORK = f"""\
import time
from mpi4py import MPI
comm = MPI.COMM_WORLD
end = time.perf_counter() + ({SECONDS} if comm.rank == 0 else {SECONDS - 4})
count = 0
while time.perf_counter() < end:
    count += 1
rate = count / {SECONDS}
comm.Barrier()
"""


def rates(shell, on: bool, every: float) -> tuple[float, int]:
    """Rank 0's loop rate in one silent cell, and the looks the line took."""
    from jupyter_distcomp.local.ranks import run, silence

    silence.SILENCE, silence.EVERY = (3.0 if on else None), every
    lines: list[silence.SilenceLine] = []
    made = run.SilenceLine

    def kept(*args, **kwargs):
        line = made(*args, **kwargs)
        lines.append(line)
        return line

    run.SilenceLine = kept
    try:
        result, _ = quiet(shell.run_cell, f"%%distcomp run bench\n{WORK}")
    finally:
        run.SilenceLine = made
    assert result.success, result.error_in_exec
    result, out = quiet(shell.run_cell, "%%distcomp run bench --ranks 0\nprint(repr(rate))")
    assert result.success, result.error_in_exec
    rate = ast.literal_eval(out.strip().rsplit("] ", 1)[-1])
    return rate, sum(line.looks for line in lines)


def compare(shell, every: float) -> tuple[float, float, float, float]:
    """Median ratio of rank 0's rate off / on over the rounds, the median rates, and the
    median looks per cell with the line on."""
    pairs, looks = [], []
    for index in range(ROUNDS):
        found = {}
        for on in (True, False)[:: 1 if index % 2 else -1]:
            found[on] = rates(shell, on, every)
        pairs.append((found[False][0], found[True][0]))
        looks.append(found[True][1])
    ratio = statistics.median(off / on for off, on in pairs)
    return (
        ratio,
        statistics.median(o for o, _ in pairs),
        statistics.median(n for _, n in pairs),
        statistics.median(looks),
    )


def main() -> None:
    from jupyter_distcomp.local.ranks import silence
    from jupyter_distcomp.local.ranks.backend import get_backend

    shell = bench_shell(RANKS)
    quiet(get_backend().start, "bench", shell.user_ns["bench"])
    assert quiet(shell.run_cell, "%%distcomp run bench\nx = 1")[0].success
    print(f"the silent cell's status line, {RANKS} ranks; {load()}\n")
    real = silence.EVERY
    assert quiet(shell.run_cell, f"%%distcomp run bench\n{ONE_LOOK}")[0].success
    result, out = quiet(shell.run_cell, "%%distcomp run bench\nprint(repr(look_cost))")
    assert result.success, result.error_in_exec
    costs = [ast.literal_eval(line.rsplit("] ", 1)[-1]) for line in out.strip().splitlines()]
    cost = statistics.median(costs)
    print(
        f"{'a look, on a rank':<34} {100 * cost / real:6.3f}% of the {real:g} s between looks"
        f"  (target <= 0.1%)  [{cost * 1e6:.1f} us of processor time: faulthandler's stack]"
    )
    for every, target in ((real, ""), (0.2, "")):
        ratio, off, on, looks = compare(shell, every)
        print(
            figure(
                f"loop rate, a look every {every:g} s",
                ratio,
                "off / on (as noisy as the machine)",
                target,
                f"{off:,.0f} vs {on:,.0f} loops/s; {looks:.0f} looks a cell; {load()}",
            )
        )
    silence.SILENCE, silence.EVERY = 3.0, real
    get_backend().shutdown()


if __name__ == "__main__":
    main()
