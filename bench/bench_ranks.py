"""Local ranks against their floor (bare mpiexec) and their peer (ipyparallel), in one run.

Run: .venv/bin/python bench/bench_ranks.py [--quick]   (not a test; prints its figures)

Every figure is a ratio against a floor or a peer measured in the same run, side by side
(each repetition measures both); the medians of those ratios are printed, absolute times
only beside them, for scale. ``--quick`` measures fewer sizes and repetitions.

1. start-up of 1, 4, 8, 16, 32 ranks: our backend against the floor, a bare
   ``mpiexec -n N python -c "from mpi4py import MPI; MPI.COMM_WORLD.Barrier()"`` (target at
   4 ranks <= 2.0x), and ipyparallel's own ``ipp.Cluster(engines="mpi", n=N)`` against the
   same floor; then 4 ranks on 2 emulated nodes (an Open MPI daemon per node, each node a
   host of its own) against the same 4 ranks on one node, for a start and for a first
   Allreduce of a cell (ranks of two nodes talk over TCP, of one node over shared memory)
2. a warm ``%%distcomp run`` round trip on 4 and 16 ranks against ``%%px`` on the same
   engines (target <= 1.0x), and against relaunching ``mpiexec`` each time
3. 10,000 printed lines per rank on 4 ranks: every line arrives, against ``%%px --stream``
4. mpi4py Allreduce of 64 MiB inside the ranks against the same in a bare mpiexec script
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time

from common import (
    alternated,
    bare_mpiexec,
    bench_shell,
    figure,
    load,
    median_ratio,
    mpiexec,
    mpiexec_env,
    quiet,
    set_ranks,
    stop_and_settle,
)

QUICK = "--quick" in sys.argv
STARTUP_SIZES = (1, 4, 8) if QUICK else (1, 4, 8, 16, 32)
TRIP_SIZES = (4, 16)
STREAM_RANKS = 4
#: seconds ipyparallel's cluster may take to start (its own default, 60, is too short for
#: 32 ranks on a busy 2-core machine)
START_TIMEOUT = 300
ALLREDUCE = """
import time
import numpy as np
from mpi4py import MPI
a = np.ones(8 * 1024 * 1024)  # 64 MiB of float64
b = np.empty_like(a)
MPI.COMM_WORLD.Allreduce(a, b)
MPI.COMM_WORLD.Barrier()
tic = time.perf_counter()
for _ in range(5):
    MPI.COMM_WORLD.Allreduce(a, b)
dt = MPI.COMM_WORLD.allreduce((time.perf_counter() - tic) / 5, op=MPI.MAX)
assert b[0] == MPI.COMM_WORLD.Get_size()
"""


def ipp_cluster(ranks: int):
    """What an ipyparallel user writes, plus what this machine needs to start at all."""
    import ipyparallel as ipp

    cluster = ipp.Cluster(engines="mpi", n=ranks, log_level=40, engine_timeout=START_TIMEOUT)
    cluster.config.MPILauncher.mpi_cmd = [mpiexec()]
    cluster.config.MPILauncher.mpi_args = ["--oversubscribe"]
    cluster.config.MPIEngineSetLauncher.environment = {
        "OMPI_ALLOW_RUN_AS_ROOT": "1",
        "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
    }
    return cluster


def start_ipp(ranks: int) -> float:
    tic = time.perf_counter()
    cluster = ipp_cluster(ranks)
    client, _ = quiet(cluster.start_and_connect_sync, ranks)  # hides its progress bar
    seconds = time.perf_counter() - tic
    client.close()
    stop_and_settle(cluster.stop_cluster_sync)
    return seconds


def start_ours(shell, backend, ranks: int) -> float:
    set_ranks(shell, ranks)
    tic = time.perf_counter()
    quiet(backend.start, "bench", shell.user_ns["bench"])
    seconds = time.perf_counter() - tic
    stop_and_settle(backend.stop, "bench")
    return seconds


def bench_startup(shell, backend) -> None:
    print("start-up (ready for a cell), each against the floor measured beside it:")
    for ranks in STARTUP_SIZES:
        reps = 1 if ranks >= 16 or QUICK else 3
        ours, peer = [], []
        for _ in range(reps):
            floor = bare_mpiexec(ranks)
            ours.append((start_ours(shell, backend, ranks), floor))
            floor = bare_mpiexec(ranks)
            peer.append((start_ipp(ranks), floor))
        floor_s = statistics.median(f for _, f in ours + peer)
        ours_s = statistics.median(o for o, _ in ours)
        peer_s = statistics.median(p for p, _ in peer)
        print(
            figure(
                f"  {ranks:2d} rank(s): ours",
                median_ratio(ours),
                "bare mpiexec",
                "<= 2.0x" if ranks == 4 else "",
                f"ours {ours_s:.2f} s, floor {floor_s:.2f} s",
            )
        )
        print(
            figure(
                f"  {ranks:2d} rank(s): ipp.Cluster",
                median_ratio(peer),
                "bare mpiexec",
                "",
                f"ipp.Cluster {peer_s:.2f} s; ours is {peer_s / ours_s:.1f}x faster",
            )
        )


def set_layout(shell, nodes: int, per_node: int) -> None:
    shell.user_ns["bench"].runsettings.resource_layout.configure(
        instance_count=nodes, process_count_per_node=per_node
    )


FIRST_ALLREDUCE = (
    "%%distcomp run bench\nfrom mpi4py import MPI\nMPI.COMM_WORLD.allreduce(MPI.COMM_WORLD.rank)"
)


def start_layout(shell, backend, nodes: int, per_node: int) -> tuple[float, float]:
    """Seconds to start ``nodes`` x ``per_node`` ranks, and then for a first allreduce."""
    set_layout(shell, nodes, per_node)
    tic = time.perf_counter()
    quiet(backend.start, "bench", shell.user_ns["bench"])
    started = time.perf_counter() - tic
    tic = time.perf_counter()
    result, _ = quiet(shell.run_cell, FIRST_ALLREDUCE)
    first = time.perf_counter() - tic
    assert result.success, result.error_in_exec
    stop_and_settle(backend.stop, "bench")
    return started, first


def bench_emulated_nodes(shell, backend) -> None:
    reps = 1 if QUICK else 3
    starts, firsts = [], []
    for _ in range(reps):
        one = start_layout(shell, backend, 1, 4)
        two = start_layout(shell, backend, 2, 2)
        starts.append((two[0], one[0]))
        firsts.append((two[1], one[1]))
    for label, pairs, against in (
        ("   2 nodes x 2: ours", starts, "1 node x 4 (ours)"),
        ("   2 x 2, first allreduce cell", firsts, "1 x 4 (ours)"),
    ):
        two_s = statistics.median(t for t, _ in pairs)
        one_s = statistics.median(o for _, o in pairs)
        seconds = f"2 x 2 {two_s:.3f} s, 1 x 4 {one_s:.3f} s"
        print(figure(label, median_ratio(pairs), against, "", seconds))


def bench_round_trip(shell, world, n: int = 60) -> tuple[float, float, float]:
    """Medians: ours/%%px per pair of cells, ours (s), %%px (s)."""
    view = world.client[:]
    view.block = True
    view.activate()  # registers %px / %%px on this shell, on the same engines

    def cell(code: str) -> None:
        result, _ = quiet(shell.run_cell, code)
        assert result.success, result.error_in_exec

    return alternated(lambda: cell("%%distcomp run bench\nx = 1"), lambda: cell("%%px\nx = 1"), n)


def bench_stream(shell, lines: int = 10_000) -> tuple[float, int, float, int]:
    code = f"for i in range({lines}):\n    print(i)"
    tic = time.perf_counter()
    result, out = quiet(shell.run_cell, f"%%distcomp run bench\n{code}")
    ours = time.perf_counter() - tic
    assert result.success
    got = [line for line in out.splitlines() if line.startswith("[rank")]
    per_rank = {
        r: [ln.split("] ", 1)[1] for ln in got if ln.startswith(f"[rank {r}]")]
        for r in range(STREAM_RANKS)
    }
    for r in range(STREAM_RANKS):
        assert per_rank[r] == [str(i) for i in range(lines)], f"rank {r} lost or reordered lines"
    tic = time.perf_counter()
    result, out = quiet(shell.run_cell, f"%%px --stream\n{code}")
    px = time.perf_counter() - tic
    px_lines = sum(1 for line in out.splitlines() if line.strip().isdigit())
    return ours, len(got), px, px_lines


def bench_allreduce(shell, world) -> tuple[float, float]:
    result, _ = quiet(shell.run_cell, f"%%distcomp run bench\n{ALLREDUCE}")
    assert result.success
    inside = world.client[0].pull("dt", block=True)
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as script:
        script.write(ALLREDUCE + "\nif MPI.COMM_WORLD.Get_rank() == 0:\n    print(dt)\n")
    try:
        out = subprocess.run(
            [mpiexec(), "--oversubscribe", "-n", str(STREAM_RANKS), sys.executable, script.name],
            check=True,
            capture_output=True,
            text=True,
            env=mpiexec_env(),
        )
    finally:
        os.unlink(script.name)
    return inside, float(out.stdout.split()[-1])


def main() -> None:
    from jupyter_distcomp.local.ranks.backend import get_backend

    shell = bench_shell(STREAM_RANKS)
    backend = get_backend()
    backend.stop("bench")  # nothing starts ahead (no kernel, no pre-start): every start is timed
    print(f"jupyter-distcomp local ranks; {load()} at the start\n")

    bench_startup(shell, backend)
    bench_emulated_nodes(shell, backend)

    print("\nwarm round trip (x = 1), against %%px on the same engines:")
    for ranks in TRIP_SIZES:
        set_ranks(shell, ranks)
        world, _ = quiet(backend.start, "bench", shell.user_ns["bench"])
        ratio, ours, px = bench_round_trip(shell, world)
        print(
            figure(
                f"  {ranks:2d} ranks: ours",
                ratio,
                "%%px",
                "<= 1.0x",
                f"ours {ours * 1000:.1f} ms, %%px {px * 1000:.1f} ms",
            )
        )
        if ranks == STREAM_RANKS:
            relaunch = statistics.median(bare_mpiexec(ranks) for _ in range(5))
            print(
                figure(
                    f"  {ranks:2d} ranks: ours",
                    ours / relaunch,
                    "relaunching mpiexec each time",
                    "<= 0.1x",
                    f"relaunch {relaunch * 1000:.0f} ms",
                )
            )

    set_ranks(shell, STREAM_RANKS)
    world, _ = quiet(backend.start, "bench", shell.user_ns["bench"])
    view = world.client[:]
    view.block = True
    view.activate()  # %%px on these engines
    ours_s, ours_lines, px_s, px_lines = bench_stream(shell)
    print(
        "\n"
        + figure(
            f"10,000 lines x {STREAM_RANKS} ranks: ours",
            ours_s / px_s,
            "%%px --stream",
            "",
            f"{ours_lines} of {STREAM_RANKS * 10000} lines, labelled, in order, "
            f"{ours_s:.2f} s; %%px --stream {px_lines} lines, {px_s:.2f} s",
        )
    )

    inside, outside = bench_allreduce(shell, world)
    print(
        figure(
            f"Allreduce 64 MiB on {STREAM_RANKS} ranks: ours",
            inside / outside,
            "a bare mpiexec script (time)",
            "<= 1.1x",
            f"in ranks {inside * 1000:.1f} ms, bare {outside * 1000:.1f} ms",
        )
    )
    backend.shutdown()
    print(f"\n{load()} at the end")


if __name__ == "__main__":
    main()
