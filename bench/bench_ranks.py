"""Local ranks against ipyparallel itself and bare mpiexec, measured in one run.

Run: .venv/bin/python bench/bench_ranks.py   (not a test; prints its figures)

1. start-up of 4 ranks: our backend vs a bare ``ipp.Cluster(engines="mpi", n=4)`` (target <= 1.1)
2. a warm ``%%distcomp run`` round trip on 4 ranks vs ``%%px`` on the same engines (<= 1.2)
   and vs relaunching ``mpiexec -n 4 python -c ...`` each time (>= 10x faster)
3. 10,000 printed lines per rank on 4 ranks: every line arrives, vs ``%%px --stream``
4. mpi4py Allreduce of 64 MiB inside the ranks vs the same in a bare mpiexec script (>= 0.9)
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import bench_shell, quiet

RANKS = 4
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


def mpiexec() -> str:
    return str(Path(sys.executable).parent / "mpiexec")


def bare_cluster():
    """What an ipyparallel user writes, plus what this machine needs to start at all."""
    import ipyparallel as ipp

    cluster = ipp.Cluster(engines="mpi", n=RANKS, log_level=40)
    cluster.config.MPILauncher.mpi_cmd = [mpiexec()]
    cluster.config.MPILauncher.mpi_args = ["--oversubscribe"]
    cluster.config.MPIEngineSetLauncher.environment = {
        "OMPI_ALLOW_RUN_AS_ROOT": "1",
        "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
    }
    return cluster


def bench_startup(shell, backend) -> tuple[float, float]:
    ours, bare = [], []
    for _ in range(2):
        tic = time.perf_counter()
        cluster = bare_cluster()
        client, _ = quiet(cluster.start_and_connect_sync, RANKS)  # hides its progress bar
        bare.append(time.perf_counter() - tic)
        client.close()
        cluster.stop_cluster_sync()

        tic = time.perf_counter()
        quiet(backend.start, "bench", shell.user_ns["bench"])
        ours.append(time.perf_counter() - tic)
        backend.stop("bench")
    return statistics.median(ours), statistics.median(bare)


def bench_round_trip(shell, world, n: int = 50) -> tuple[float, float, float]:
    view = world.client[:]
    view.block = True
    view.activate()  # registers %px / %%px on this shell, on the same engines
    ours, px = [], []
    for _ in range(n):
        tic = time.perf_counter()
        result, _ = quiet(shell.run_cell, "%%distcomp run bench\nx = 1")
        ours.append(time.perf_counter() - tic)
        assert result.success, result.error_in_exec
        tic = time.perf_counter()
        result, _ = quiet(shell.run_cell, "%%px\nx = 1")
        px.append(time.perf_counter() - tic)
        assert result.success
    relaunch = []
    code = "from mpi4py import MPI; MPI.COMM_WORLD.Barrier()"
    for _ in range(5):
        tic = time.perf_counter()
        subprocess.run(
            [mpiexec(), "--oversubscribe", "-n", str(RANKS), sys.executable, "-c", code],
            check=True,
            env={
                **os.environ,
                "OMPI_ALLOW_RUN_AS_ROOT": "1",
                "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
            },
            capture_output=True,
        )
        relaunch.append(time.perf_counter() - tic)
    return statistics.median(ours), statistics.median(px), statistics.median(relaunch)


def bench_stream(shell, lines: int = 10_000) -> tuple[float, int, float, int]:
    code = f"for i in range({lines}):\n    print(i)"
    tic = time.perf_counter()
    result, out = quiet(shell.run_cell, f"%%distcomp run bench\n{code}")
    ours = time.perf_counter() - tic
    assert result.success
    got = [line for line in out.splitlines() if line.startswith("[rank")]
    per_rank = {
        r: [ln.split("] ", 1)[1] for ln in got if ln.startswith(f"[rank {r}]")]
        for r in range(RANKS)
    }
    for r in range(RANKS):
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
            [mpiexec(), "--oversubscribe", "-n", str(RANKS), sys.executable, script.name],
            check=True,
            capture_output=True,
            text=True,
            env={
                **os.environ,
                "OMPI_ALLOW_RUN_AS_ROOT": "1",
                "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
            },
        )
    finally:
        os.unlink(script.name)
    return inside, float(out.stdout.split()[-1])


def main() -> None:
    from jupyter_distcomp.local.ranks.backend import get_backend

    shell = bench_shell(RANKS)
    backend = get_backend()
    print(f"jupyter-distcomp local ranks, {RANKS} ranks on {os.cpu_count()} core(s)\n")

    ours, bare = bench_startup(shell, backend)
    print(
        f"start-up of {RANKS} ranks:    ours {ours:6.2f} s   bare ipp.Cluster {bare:6.2f} s   "
        f"ratio {ours / bare:.2f} (target <= 1.1)"
    )

    world, _ = quiet(backend.start, "bench", shell.user_ns["bench"])
    ours_rt, px_rt, relaunch = bench_round_trip(shell, world)
    print(
        f"warm round trip:          ours {ours_rt * 1000:6.1f} ms  %%px {px_rt * 1000:6.1f} ms      "
        f"ratio {ours_rt / px_rt:.2f} (target <= 1.2)"
    )
    print(
        f"                          relaunching mpiexec each time {relaunch * 1000:6.0f} ms: "
        f"ours is {relaunch / ours_rt:.0f}x faster (target >= 10x)"
    )

    ours_s, ours_lines, px_s, px_lines = bench_stream(shell)
    print(
        f"10,000 lines x {RANKS} ranks:  ours {ours_s:6.2f} s ({ours_lines} of {RANKS * 10000} lines, "
        f"labelled, in order)   %%px --stream {px_s:6.2f} s ({px_lines} lines)"
    )

    inside, outside = bench_allreduce(shell, world)
    print(
        f"Allreduce 64 MiB:         in ranks {inside * 1000:6.1f} ms  bare mpiexec {outside * 1000:6.1f} ms  "
        f"speed ratio {outside / inside:.2f} (target >= 0.9)"
    )
    backend.shutdown()


if __name__ == "__main__":
    main()
