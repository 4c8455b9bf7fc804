"""``%distcomp where NAME [--ranks ...]``: each rank's current Python stack, grouped.

The stacks come from faulthandler on SIGUSR1 (``local/stacks.py``), so a rank answers while
it runs Python, sleeps, or waits in C code such as an MPI or gloo collective. Identical
stacks are shown once with their ranks; ranks that run nothing say so in one line. The
processes of a ``%distcomp command`` run are found through ``command/active.py``.
"""

from __future__ import annotations

import os
import re
import signal
from collections.abc import Iterable
from typing import TYPE_CHECKING

from ...contracts import RankState
from ...core.ranges import format_ranks
from ...errors import strip_ansi
from ...machine.node_disks import user_text
from ..ranks import gpu
from ..ranks.ledgers import verdict_sections
from ..stacks import Frame, collect_stacks, stack_frames, stack_sections
from .progress import progress_sections
from .tree import stack_tree

if TYPE_CHECKING:
    from ..command.active import ActiveRun
    from ..ranks.world import World

_RELATIVE = re.compile(r'File "(?!/)([^"<]+)"')
#: states whose ranks run user code, and the heading their stacks get
_LABELS = {RankState.BUSY: "busy, current stack", RankState.DEBUGGING: "at a debugger prompt"}


class WhereReport:
    """A title and ``(heading, lines)`` sections; shown as plain text."""

    def __init__(self, title: str, sections: Iterable[tuple[str, list[str]]]) -> None:
        self.title = title
        self.sections = list(sections)

    def text(self) -> str:
        lines = [self.title]
        for heading, body in self.sections:
            lines.append(f"--- {heading} ---")
            lines.extend(strip_ansi(line) for line in body)
        return "\n".join(lines)

    def __repr__(self) -> str:
        return self.text()


def where(world: World, ranks: list[int] | None = None) -> WhereReport:
    """Where each of ``ranks`` (default: all) of ``world`` is now: the busy ranks' stacks as
    one prefix tree, the ranks at a debugger prompt by the line they stopped at."""
    ranks = list(range(world.world_size)) if ranks is None else ranks
    states = world.states()
    working = [r for r in ranks if states[r] in _LABELS]
    stacks = world.stacks(working) if working else {}
    busy: dict[int, list[Frame]] = {}
    at_prompt: dict[str, list[int]] = {}
    for rank in working:
        frames, debugging = stack_frames(stacks.get(rank, ""), world.cell_code)
        if debugging or states[rank] == RankState.DEBUGGING:
            spot = f", {frames[-1].place()}" if frames else ""
            at_prompt.setdefault(f"{_LABELS[RankState.DEBUGGING]}{spot}", []).append(rank)
        elif rank in stacks:
            busy[rank] = frames
    sections: list[tuple[str, list[str]]] = []
    if busy:
        sections.append((f"{format_ranks(busy)}: {_LABELS[RankState.BUSY]}", stack_tree(busy)))
    sections += _children_sections(world, working)
    silent = [r for r in working if r not in stacks and states[r] == RankState.BUSY]
    if silent:
        sections.append((f"{format_ranks(silent)}: busy, gave no stack", []))
    sections += [(f"{format_ranks(group)}: {spot}", []) for spot, group in at_prompt.items()]
    rest: dict[str, list[int]] = {}
    for rank in ranks:
        if rank not in working:
            rest.setdefault(states[rank], []).append(rank)
    for state_name, group in rest.items():
        sections.append((f"{format_ranks(group)}: {state_name}", []))
    facts = gpu.read(world, ranks)
    if facts:  # the ranks' devices and memory, as of their last facts (every 2 s)
        lines = [f"{format_ranks([r])}: {gpu.fact_text(f)}" for r, f in sorted(facts.items())]
        sections.append(("GPU memory", lines))
    moving = {r: stacks[r] for r in busy}
    sections += progress_sections(world, moving)
    if len(ranks) == world.world_size:  # what the collectives say, first (whole world only)
        sections = verdict_sections(world, working) + sections
    title = f"{world.name}: where {format_ranks(ranks)} are"
    if world.background:
        title += " (a background cell runs)"
    return WhereReport(title, sections)


def _children_sections(world: World, ranks: list[int]) -> list[tuple[str, list[str]]]:
    """The processes each of ``ranks`` started (a DataLoader's workers, a multiprocessing
    pool, ``os.fork``): one line each, under the rank's label."""
    import psutil

    sections = []
    for rank in ranks:
        lines = []
        for child in world.children(rank):
            try:
                with child.oneshot():
                    command = " ".join(child.cmdline())
                    forked = command == " ".join(psutil.Process(world.ranks[rank].pid).cmdline())
                    what = "forked from the rank" if forked else command
                    lines.append(f"pid {child.pid} ({child.status()}): {what}"[:200])
            except psutil.Error:  # it ended meanwhile
                continue
        if lines:
            sections.append((f"{format_ranks([rank])}: processes it started", lines))
    return sections


def where_processes(title: str, ranks: list[int], run: ActiveRun) -> WhereReport:
    """Where the processes of a ``%distcomp command`` run are: each rank's first Python
    process, signalled to write its stack; relative file names in the stacks are relative
    to the ranks' folder, and a node's copy of it is named as the user's folder."""
    targets = run.targets(ranks)

    def send() -> None:
        for pid, _, _ in targets.values():
            try:
                os.kill(pid, signal.SIGUSR1)
            except ProcessLookupError:
                pass

    stacks = collect_stacks(
        {r: t[1] for r, t in targets.items()}, {r: t[2] for r, t in targets.items()}, send
    )
    absolute = {
        r: user_text(_RELATIVE.sub(rf'File "{run.cwd}/\1"', stack)) for r, stack in stacks.items()
    }
    sections = stack_sections(absolute, "", "running, current stack")
    quiet = [r for r in ranks if r not in stacks]
    if quiet:
        why = "not started yet, exited, or not Python"
        sections.append((f"{format_ranks(quiet)}: no Python stack ({why})", []))
    return WhereReport(title, sections)
