"""What the benchmarks share: the component they run, output kept out of the figures, the
bare-mpiexec floor, and how a figure is printed (a ratio against a floor or peer measured in
the same run; absolute times only beside it, for scale).

Run as ``python bench/bench_x.py``: this folder is then first on ``sys.path``.
"""

from __future__ import annotations

import io
import os
import statistics
import subprocess
import sys
import time
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path
from typing import Any

#: an MPI component whose command is never run: the benchmarks time cells on its ranks
SPEC = """\
name: bench
type: DistributedComponent
launcher:
  type: mpi
  additional_arguments: python bench.py
"""
#: the floor of a start: MPI processes that start, meet and leave, with nothing of ours
FLOOR_CODE = "from mpi4py import MPI; MPI.COMM_WORLD.Barrier()"


def quiet(fn: Any, *args: Any) -> tuple[Any, str]:
    """Run fn with stdout/stderr captured; return (result, captured stdout)."""
    out = io.StringIO()
    with redirect_stdout(out), redirect_stderr(io.StringIO()):
        result = fn(*args)
    return result, out.getvalue()


def bench_shell(ranks: int) -> Any:
    """The process's IPython shell with the extension loaded and the component ``bench``
    defined on one node of ``ranks`` processes."""
    from IPython.testing.globalipapp import get_ipython

    shell = get_ipython()
    shell.run_line_magic("load_ext", "jupyter_distcomp")
    quiet(shell.run_cell, f"%%distcomp bench\n{SPEC}")
    set_ranks(shell, ranks)
    return shell


def hosts_shell(script: str) -> Any:
    """For a benchmark on the test suite's namespaced hosts (tests/netns_support.py): the
    process's IPython shell with the extension loaded and no ranks started before they are
    asked for; None, said as ``script``'s skip, where those hosts cannot be made."""
    from tests.netns_support import unavailable

    why = unavailable()
    if why:
        print(f"{script}: skipped, no namespaced hosts: {why}")
        return None
    from IPython.testing.globalipapp import get_ipython

    shell = get_ipython()
    shell.run_line_magic("load_ext", "jupyter_distcomp")
    shell.run_line_magic("config", "DistComp.prestart = False")
    return shell


def set_ranks(shell: Any, ranks: int) -> None:
    """``bench`` on one node of ``ranks`` processes."""
    shell.user_ns["bench"].runsettings.resource_layout.configure(
        instance_count=1, process_count_per_node=ranks
    )


def mpiexec() -> str:
    return str(Path(sys.executable).parent / "mpiexec")


def mpiexec_env() -> dict[str, str]:
    """The kernel's environment, plus what Open MPI needs to run as root."""
    return {**os.environ, "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}


def bare_mpiexec(ranks: int, code: str = FLOOR_CODE) -> float:
    """Seconds for ``mpiexec -n ranks python -c code``: the floor of a start."""
    tic = time.perf_counter()
    subprocess.run(
        [mpiexec(), "--oversubscribe", "-n", str(ranks), sys.executable, "-c", code],
        check=True,
        env=mpiexec_env(),
        capture_output=True,
    )
    return time.perf_counter() - tic


def stop_and_settle(stop: Any, *args: Any) -> None:
    """``stop(*args)``, then wait (up to 30 s) for every process started below this one to
    end: the next figure is not timed beside the last one's teardown (ipyparallel's nannies
    outlive its ``stop_cluster_sync`` by seconds)."""
    import psutil

    below = psutil.Process().children(recursive=True)
    stop(*args)
    psutil.wait_procs(below, timeout=30)


def median_ratio(pairs: list[tuple[float, float]]) -> float:
    """The median of ours/theirs over measurements taken side by side."""
    return statistics.median(ours / theirs for ours, theirs in pairs)


def alternated(ours: Any, theirs: Any, pairs: int, warm: int = 5) -> tuple[float, float, float]:
    """``ours()`` and ``theirs()`` timed side by side ``pairs`` times, which goes first
    alternating (after ``warm`` untimed rounds of both): the median ratio, and the median
    seconds of each."""
    for _ in range(warm):
        ours()
        theirs()
    times = []
    for i in range(pairs):
        took = {}
        for name, fn in (("ours", ours), ("theirs", theirs))[:: 1 if i % 2 else -1]:
            tic = time.perf_counter()
            fn()
            took[name] = time.perf_counter() - tic
        times.append((took["ours"], took["theirs"]))
    return (
        median_ratio(times),
        statistics.median(o for o, _ in times),
        statistics.median(t for _, t in times),
    )


def figure(what: str, ratio: float, against: str, target: str = "", scale: str = "") -> str:
    """One line of a benchmark's output: the ratio first, absolute times after it."""
    line = f"{what:<34} {ratio:6.2f}x {against}"
    if target:
        line += f"  (target {target})"
    if scale:
        line += f"  [{scale}]"
    return line


def load() -> str:
    """The machine's load averages (1, 5, 15 min) and cores: how noisy the run was."""
    one, five, fifteen = os.getloadavg()
    return f"load {one:.1f} {five:.1f} {fifteen:.1f} on {os.cpu_count()} core(s)"


def cell_figures(shell: Any, cell: str) -> dict[str, Any]:
    """The figures a ``%%distcomp run`` cell prints on rank 0 as ``FIGURES {...}``."""
    import ast

    result, out = quiet(shell.run_cell, cell)
    assert result.success, result.error_in_exec
    line = next(line for line in out.splitlines() if "FIGURES" in line)
    return dict(ast.literal_eval(line.split("FIGURES", 1)[1]))
