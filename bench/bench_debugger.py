"""The rank debugger's figures, each against a peer measured in the same run.

Run: .venv/bin/python bench/bench_debugger.py   (not a test; prints its figures)

1. Rank 1 of 2 stops at ``breakpoint()``; the person types ``p x`` COMMANDS times. One round
   trip is from the answer leaving ``input()`` to the next prompt, the value printed in
   between (target: median under 20 ms). The peer is what ``%%px --targets 1 print(x)``
   sends: an ipyparallel ``execute`` on the same engine (the ratio is ours / px).
2. One group ``n`` on 4 stopped ranks, from the answer to the prompt where all 4 stopped
   again (target: median under 50 ms), beside one rank's ``n`` (``--debug-ranks 0``) on
   the same world.
3. ``where`` as a prefix tree on 32 ranks (oversubscribed: more ranks than cores), 31 in an
   MPI barrier and one asleep (target: under 1 s), beside a ``%px`` round trip on the 32.
"""

from __future__ import annotations

import builtins
import io
import statistics
import time
from contextlib import redirect_stderr, redirect_stdout

from jupyter_distcomp.local.ranks.options import CellOptions

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
                "bench",
                component,
                "x = 42\nbreakpoint()\ny = x",
                CellOptions(timeout=600, debug_ranks="1"),
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


STEPS = 40
STEP_CELL = """def steps():
    x = 0
    breakpoint()
    while x < 10**6:
        x += 1
steps()
"""


def step_round_trips(backend, component, debug_ranks: str | None) -> list[float]:
    """Seconds from each ``n`` typed to the next prompt (all stopped ranks again there)."""
    trips: list[float] = []
    typed_at: list[float] = []
    prompts: list[str] = []
    asked = 0

    def person(prompt: str = "") -> str:
        nonlocal asked
        now = time.perf_counter()
        if typed_at:
            trips.append(now - typed_at[-1])
        prompts.append(prompt)
        asked += 1
        if asked > STEPS:
            typed_at.clear()
            return "c"
        typed_at.append(time.perf_counter())
        return "n"

    read = builtins.input
    builtins.input = person
    try:
        out = io.StringIO()
        with redirect_stdout(out), redirect_stderr(io.StringIO()):
            backend.run_cell(
                "steps", component, STEP_CELL, CellOptions(timeout=600, debug_ranks=debug_ranks)
            )
        text = out.getvalue()
        assert "still running" not in text, text[-500:]
        every = "(Pdb rank 0) " if debug_ranks == "0" else "(Pdb ranks 0-3) "
        assert set(prompts) == {every}, set(prompts)
    finally:
        builtins.input = read
    return trips[1:]


def group_steps() -> None:
    from jupyter_distcomp.core.spec_parsing import load_component
    from jupyter_distcomp.local.ranks.backend import get_backend

    component = load_component(SPEC.replace("bench_debugger", "steps"))
    component.runsettings.resource_layout.configure(instance_count=1, process_count_per_node=4)
    backend = get_backend()
    with redirect_stdout(io.StringIO()), redirect_stderr(io.StringIO()):
        backend.start("steps", component)
    try:
        group = statistics.median(step_round_trips(backend, component, None))
        one = statistics.median(step_round_trips(backend, component, "0"))
    finally:
        backend.shutdown()
    print("debugger: `n` to the next prompt, 4 ranks")
    print(f"  group of 4  median {group * 1000:7.2f} ms   (target < 50 ms)")
    print(f"  one rank    median {one * 1000:7.2f} ms   (--debug-ranks 0, same world)")
    print(f"  ratio group / one = {group / one:.2f}")


WHERE_RANKS = 32


def where_tree() -> None:
    from jupyter_distcomp.core.spec_parsing import load_component
    from jupyter_distcomp.local.inspect.where import where
    from jupyter_distcomp.local.ranks.backend import get_backend

    component = load_component(SPEC.replace("bench_debugger", "wide"))
    component.runsettings.resource_layout.configure(
        instance_count=1, process_count_per_node=WHERE_RANKS
    )
    backend = get_backend()
    with redirect_stdout(io.StringIO()), redirect_stderr(io.StringIO()):
        world = backend.start("wide", component)
        backend.run_cell(
            "wide", component, "import time\nfrom mpi4py import MPI", CellOptions(timeout=600)
        )
    try:
        view = world.client[:]
        px = []
        for _ in range(5):
            tic = time.perf_counter()
            view.execute("pass", block=True)
            px.append(time.perf_counter() - tic)
        busy = "if mpi_rank == 7:\n    time.sleep(120)\nMPI.COMM_WORLD.Barrier()"
        with redirect_stdout(io.StringIO()), redirect_stderr(io.StringIO()):
            backend.run_cell("wide", component, busy, CellOptions(background=True))
        time.sleep(5.0)  # every rank reaches the barrier
        seconds = []
        for _ in range(5):
            tic = time.perf_counter()
            text = where(world).text()
            seconds.append(time.perf_counter() - tic)
            assert "+ rank 7  <- differs" in text and "Barrier()" in text, text
    finally:
        backend.shutdown()
    tree = statistics.median(seconds)
    ratio = tree / statistics.median(px)
    print(f"where as a tree: {WHERE_RANKS} ranks (oversubscribed), 31 in a barrier, 1 asleep")
    print(f"  where  median {tree * 1000:7.1f} ms   (target < 1000 ms)")
    print(f"  %px    median {statistics.median(px) * 1000:7.1f} ms   (idle round trip, 32 ranks)")
    print(f"  ratio where / %px = {ratio:.1f}")


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
    group_steps()
    where_tree()


if __name__ == "__main__":
    main()
