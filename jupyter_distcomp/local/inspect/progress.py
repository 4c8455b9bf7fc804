"""STAT's time dimension for ``%distcomp where``: which busy ranks progressed since the last
look at the same world (their stack or their ledger's newest call changed) and which did
not move, the sign of a hang rather than slow work.

A look is kept per world, weakly (a world that goes takes its looks with it).
"""

from __future__ import annotations

import time
import weakref
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ...core.ranges import format_ranks
from ..ranks import ledgers as world_ledgers

if TYPE_CHECKING:
    from ..ranks.world import World


@dataclass
class Look:
    """When a look was taken, and each busy rank's stack and newest ledger call then."""

    at: float
    marks: dict[int, tuple]


_LOOKS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def marks(world: World, stacks: dict[int, str]) -> dict[int, tuple]:
    """What tells a rank moved: its stack, its newest call (sequence, start, end)."""
    newest = world_ledgers.read(world, sorted(stacks), last=1)
    found = {}
    for rank, stack in stacks.items():
        entries = newest.get(rank) or []
        call = (entries[-1].seq, entries[-1].started, entries[-1].finished) if entries else ()
        found[rank] = (stack, call)
    return found


def progress_sections(world: World, stacks: dict[int, str]) -> list[tuple[str, list[str]]]:
    """The section comparing this look with the last, and this look kept for the next; none
    on a first look, or when no rank was busy both times."""
    now = marks(world, stacks)
    try:
        last = _LOOKS.get(world)
        _LOOKS[world] = Look(time.monotonic(), now)
    except TypeError:  # a world that cannot be weakly referenced: no time dimension
        return []
    if last is None:
        return []
    both = sorted(set(now) & set(last.marks))
    if not both:
        return []
    moved = [r for r in both if now[r] != last.marks[r]]
    still = [r for r in both if r not in moved]
    lines = []
    if moved:
        lines.append(f"{format_ranks(moved)}: progressed (stack or newest call changed)")
    if still:
        lines.append(f"{format_ranks(still)}: did not move (same stack, same call)")
    age = time.monotonic() - last.at
    return [(f"since the last look, {age:.0f} s ago", lines)]
