"""A debugger command's round trip on a rank, against a ``%%px`` round trip, in one run.

Run: .venv/bin/python bench/bench_debugger.py   (not a test; prints its figures)

Rank 1 of 2 stops at ``breakpoint()``; the person types ``p x`` COMMANDS times. One round trip
is from the answer leaving ``input()`` to the next prompt, the value printed in between
(target: median under 20 ms). The peer is what ``%%px --targets 1 print(x)`` sends: an
ipyparallel ``execute`` on the same engine, blocking until its reply (the ratio is ours / px).
"""

from __future__ import annotations

import builtins
import io
import statistics
import time
from contextlib import redirect_stderr, redirect_stdout

SPEC = """\
name: bench_debugger
type: DistributedComponent
launcher:
  type: mpi
  additional_arguments: python bench.py
"""
COMMANDS = 60


def debugger_round_trips(backend, component) -> list[float]:
    """Seconds from each ``p x`` typed to the next prompt on rank 1."""
    trips: list[float] = []
    typed_at: list[float] = []
    asked = 0

    def person(prompt: str = "") -> str:
        nonlocal asked
        now = time.perf_counter()
        if typed_at:
            trips.append(now - typed_at[-1])
        asked += 1
        if asked > COMMANDS:
            typed_at.clear()
            return "c"
        typed_at.append(time.perf_counter())
        return "p x"

    read = builtins.input
    builtins.input = person
    try:
        out = io.StringIO()
        with redirect_stdout(out), redirect_stderr(io.StringIO()):
            backend.run_cell(
                "bench", component, "x = 42\nbreakpoint()\ny = x", timeout=600, debug_ranks="1"
            )
        assert out.getvalue().splitlines().count("42") == COMMANDS, out.getvalue()[-500:]
    finally:
        builtins.input = read
    return trips[1:]  # the first includes the prompt's arrival after the stop


def px_round_trips(world) -> list[float]:
    view = world.client[[1]]
    trips = []
    for _ in range(COMMANDS):
        tic = time.perf_counter()
        view.execute("print(x)", block=False).get()
        trips.append(time.perf_counter() - tic)
    return trips


def main() -> None:
    from jupyter_distcomp.core.spec_parsing import load_component
    from jupyter_distcomp.local.ranks.backend import get_backend

    component = load_component(SPEC)
    component.runsettings.resource_layout.configure(instance_count=1, process_count_per_node=2)
    backend = get_backend()
    out = io.StringIO()
    with redirect_stdout(out), redirect_stderr(io.StringIO()):
        world = backend.start("bench", component)
    try:
        ours = statistics.median(debugger_round_trips(backend, component))
        px = statistics.median(px_round_trips(world))
    finally:
        backend.shutdown()
    print("debugger: `p x` at a rank's prompt to its output, 2 ranks")
    print(f"  ours  median {ours * 1000:7.2f} ms   (target < 20 ms)")
    print(f"  %%px  median {px * 1000:7.2f} ms   (ipyparallel execute on the same engine)")
    print(f"  ratio ours / %%px = {ours / px:.2f}")


if __name__ == "__main__":
    main()
