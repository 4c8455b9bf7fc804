"""The wait-for graph and the verdicts for 64 ranks with full ledger rings, measured in one run.

Run: .venv/bin/python bench/bench_waitfor.py   (not a test; prints its figures)

64 ledger files of 1,024 calls each (a training loop's all_reduce and barrier on the world,
sends and receives between neighbours, a sub-communicator's bcast), written by the ranks'
own ``Ring``; their newest calls hang: ranks 0-31 in an Ssend ring, ranks 32-63 in an
all_reduce that rank 63 has not reached. What the kernel does on each report:
``hang_lines`` (the graph, its deadlocks, each group's verdict and pattern) on the rings
read (target < 50 ms), as a ratio to reading the 64 rings alone (the peer every report
pays already); the median of alternating pairs.
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time

from common import alternated, figure, load

RANKS = 64
CAPACITY = 1024


class _Code:
    co_filename = "/tmp/ipykernel_1/7.py"
    co_name = "<module>"


def write(folder: str) -> list[str]:
    """The 64 rings, full, their last calls hanging as the docstring says."""
    from jupyter_distcomp.rank_side.ledger import Ring
    from jupyter_distcomp.rank_side.ledger_words import COLLECTIVE, P2P

    paths = []
    world = "COMM_WORLD"
    half = "comm 1 (ranks " + ", ".join(map(str, range(RANKS // 2, RANKS))) + ")"
    for rank in range(RANKS):
        path = os.path.join(folder, f"rank-{rank}.ledger")
        ring = Ring(path, CAPACITY)
        seqs = {"w": 0, "p": 0, "h": 0}
        right, left = (rank + 1) % RANKS, (rank - 1) % RANKS
        for step in range(CAPACITY - 2):
            kind = step % 4
            if kind == 0:
                seqs["w"] += 1
                call = (COLLECTIVE, world, "Allreduce", "[1024] float32", "sum", "", "")
                ring.end(ring.begin(seqs["w"], call, _Code, 4))
            elif kind in (1, 2):
                seqs["p"] += 1
                root = f"to rank {right}" if kind == 1 else f"from rank {left}"
                op = "Isend" if kind == 1 else "Irecv"
                call = (P2P, world, op, "[256] float64", "", root, "nb")
                ring.end(ring.begin(seqs["p"], call, _Code, 6))
            elif rank >= RANKS // 2:
                seqs["h"] += 1
                call = (COLLECTIVE, half, "Bcast", "[16] int64", "", "root 0", "")
                ring.end(ring.begin(seqs["h"], call, _Code, 8))
            else:
                seqs["w"] += 1
                call = (COLLECTIVE, world, "Barrier", "", "", "", "")
                ring.end(ring.begin(seqs["w"], call, _Code, 9))
        if rank < RANKS // 2:  # an Ssend ring among ranks 0-31
            seqs["p"] += 1
            root = f"to rank {(rank + 1) % (RANKS // 2)}"
            ring.begin(seqs["p"], (P2P, world, "Ssend", "[8] float64", "", root, ""), _Code, 12)
        elif rank < RANKS - 1:  # the others in a reduction rank 63 has not reached
            ring.begin(
                99999, (COLLECTIVE, half, "Allreduce", "[4] float32", "sum", "", ""), _Code, 14
            )
        paths.append(path)
    return paths


def main() -> None:
    from jupyter_distcomp.core.hangs import hang_lines
    from jupyter_distcomp.rank_side.ledger import read_ledger

    with tempfile.TemporaryDirectory(prefix="bench-waitfor-") as folder:
        paths = write(folder)
        busy = set(range(RANKS))

        def read() -> dict:
            return {rank: read_ledger(path) for rank, path in enumerate(paths)}

        ledgers = read()
        lines = hang_lines(ledgers, RANKS, busy)
        assert any(line.startswith("deadlock: rank 0 waits to send to rank 1") for line in lines)
        assert any("Allreduce #99999" in line for line in lines), lines

        def verdicts() -> None:
            hang_lines(ledgers, RANKS, busy)

        ratio, ours, rings = alternated(verdicts, read, 30)
        cpu = []
        for _ in range(30):
            tic = time.process_time()
            verdicts()
            cpu.append(time.process_time() - tic)
    print(f"jupyter-distcomp wait-for graph, {RANKS} ranks x {CAPACITY} calls; {load()}\n")
    print(
        figure(
            "graph + verdicts / reading the rings",
            ratio,
            "reading alone",
            "graph + verdicts < 50 ms",
            f"graph + verdicts {ours * 1000:.1f} ms (CPU {statistics.median(cpu) * 1000:.1f} ms), "
            f"reading {rings * 1000:.1f} ms",
        )
    )


if __name__ == "__main__":
    main()
