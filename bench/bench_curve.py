"""What CurveZMQ on the controller's sockets costs: two worlds side by side, one with it (as
every world starts) and one without, the same cells alternated between them.

Run: .venv/bin/python bench/bench_curve.py [--quick]   (not a test; prints its figures)

1. a warm ``%%distcomp run`` round trip (x = 1) on 4 ranks, curve against plain
2. 10,000 and 200,000 printed lines per rank on 4 ranks (every line arrives; the second
   about 1.3 MB per rank, many messages through the controller), curve against plain
3. start-up of 4 ranks, curve against plain
Each figure is the median of ratios of runs taken side by side, which one first alternating.
"""

from __future__ import annotations

import functools
import json
import statistics
import sys
import time
from pathlib import Path

from common import SPEC, alternated, figure, load, quiet, stop_and_settle

QUICK = "--quick" in sys.argv
RANKS = 4
LINES = (10_000, 200_000)
TRIPS = 30 if QUICK else 100
STREAMS = 3 if QUICK else 8
STARTS = 2 if QUICK else 5


def define(shell, name: str) -> None:
    quiet(shell.run_cell, f"%%distcomp {name}\n{SPEC.replace('name: bench', f'name: {name}')}")
    shell.user_ns[name].runsettings.resource_layout.configure(
        instance_count=1, process_count_per_node=RANKS
    )


def start(backend, shell, name: str, curve: bool):
    from jupyter_distcomp.local.ranks import ipp

    ipp.CURVE = curve  # read when the world's controller is configured
    try:
        world, _ = quiet(backend.start, name, shell.user_ns[name])
    finally:
        ipp.CURVE = True
    files = Path(world._tmp, "profile", "security").glob("ipcontroller-*-client.json")
    has_key = bool(json.loads(next(files).read_text()).get("curve_serverkey"))
    assert has_key == curve, f"{name}: curve {has_key}, wanted {curve}"
    return world


def cell(shell, name: str, code: str) -> str:
    result, out = quiet(shell.run_cell, f"%%distcomp run {name}\n{code}")
    assert result.success, result.error_in_exec
    return out


def stream(shell, name: str, lines: int) -> list[str]:
    """The cell's lines that are not what it printed (notices of ours)."""
    out = cell(shell, name, f"for i in range({lines}):\n    print(i)")
    got = [line for line in out.splitlines() if line.startswith("[rank")]
    printed = sum(1 for line in got if line.rpartition(" ")[2].isdigit())
    assert printed == RANKS * lines, f"{name}: {printed} of {RANKS * lines} lines"
    return [line for line in got if not line.rpartition(" ")[2].isdigit()]


def timed_start(backend, shell, name: str, curve: bool) -> float:
    tic = time.perf_counter()
    start(backend, shell, name, curve)
    seconds = time.perf_counter() - tic
    stop_and_settle(backend.stop, name)
    return seconds


def main() -> None:
    from IPython.testing.globalipapp import get_ipython

    from jupyter_distcomp.local.ranks.backend import get_backend

    shell = get_ipython()
    shell.run_line_magic("load_ext", "jupyter_distcomp")
    backend = get_backend()
    for name in ("curve", "plain"):
        define(shell, name)
    print(f"CurveZMQ on the controller, against without; {load()} at the start\n")
    start(backend, shell, "curve", True)
    start(backend, shell, "plain", False)

    ratio, curve_s, plain_s = alternated(
        lambda: cell(shell, "curve", "x = 1"), lambda: cell(shell, "plain", "x = 1"), TRIPS
    )
    print(
        figure(
            f"round trip, {RANKS} ranks: curve",
            ratio,
            "plain",
            "",
            f"curve {curve_s * 1000:.1f} ms, plain {plain_s * 1000:.1f} ms, {TRIPS} pairs",
        )
    )
    for lines in LINES:
        ratio, curve_s, plain_s = alternated(
            functools.partial(stream, shell, "curve", lines),
            functools.partial(stream, shell, "plain", lines),
            STREAMS,
            warm=1,
        )
        print(
            figure(
                f"{lines:,} lines x {RANKS} ranks: curve",
                ratio,
                "plain",
                "",
                f"curve {curve_s:.2f} s, plain {plain_s:.2f} s, {STREAMS} pairs",
            )
        )
    for name in ("curve", "plain"):
        stop_and_settle(backend.stop, name)

    pairs = []
    for i in range(STARTS):
        order = [("curve", True), ("plain", False)][:: 1 if i % 2 else -1]
        took = {name: timed_start(backend, shell, name, curve) for name, curve in order}
        pairs.append((took["curve"], took["plain"]))
    print(
        figure(
            f"start-up, {RANKS} ranks: curve",
            statistics.median(c / p for c, p in pairs),
            "plain",
            "",
            f"curve {statistics.median(c for c, _ in pairs):.2f} s, "
            f"plain {statistics.median(p for _, p in pairs):.2f} s, {STARTS} pairs",
        )
    )
    backend.shutdown()
    print(f"\n{load()} at the end")


if __name__ == "__main__":
    main()
