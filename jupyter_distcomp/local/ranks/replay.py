"""``%distcomp restart NAME --replay``: the ``%%distcomp run`` cells that succeeded on a
component's ranks, to run again in order on fresh ones.

A cell is noted when it ended well on every rank it ran on. The log of a component outlives
its ranks (``stop``, ``restart``) until ``%distcomp replay NAME --clear`` empties it. A replay
first lists what it will run (each cell numbered, with the ranks it runs on now) and what it
cannot bring back; it runs only what the user confirmed. A cell that ran on every rank runs
on every rank of the current layout; one that ran on some ranks runs on the same ranks while
the layout has the size it had, else the replay is refused with the reason.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ...core.ranges import format_ranks
from ...errors import RankError

#: what re-running cells cannot give back, shown before every replay
CANNOT_RESTORE = (
    "A replay runs the cells again; it cannot restore what they did outside the ranks' "
    "memory: files they wrote, deleted or appended to are changed again (a cell that wipes a "
    "folder wipes it again), random numbers and the time differ unless the cell seeds them, "
    "input() is asked again, and edits made at a debugger prompt or with Copy to Globals are "
    "lost; cells that failed are not in the log. Breakpoints do not stop a replay."
)


@dataclass
class Replayed:
    """One cell as it was run: its name in the notebook, the arguments of its run, and the
    world size it ran in."""

    label: str
    code: str
    options: dict[str, Any] = field(default_factory=dict)
    world_size: int = 0

    def headline(self) -> str:
        first = next((line.strip() for line in self.code.splitlines() if line.strip()), "")
        return f"{self.label}: {first[:60]}" + ("..." if len(first) > 60 else "")

    def ranks_now(self, world_size: int) -> list[int]:
        """The ranks this cell runs on in a world of ``world_size``; RankError when its
        ranks have no counterpart there."""
        ran = list(self.options.get("ranks") or range(self.world_size))
        if ran == list(range(self.world_size)):
            return list(range(world_size))  # every rank then: every rank now
        if world_size == self.world_size:
            return ran
        raise RankError(
            f"it ran on {format_ranks(ran)} of {self.world_size}, and the layout now has "
            f"{world_size} ranks: which ranks it should run on is unknown"
        )


class ReplayLog:
    """The succeeded cells of each component, kept until cleared."""

    def __init__(self) -> None:
        self._cells: dict[str, list[Replayed]] = {}

    def record(self, name: str, cell: Replayed) -> None:
        self._cells.setdefault(name, []).append(cell)

    def cells(self, name: str) -> list[Replayed]:
        return list(self._cells.get(name, []))

    def replace(self, name: str, cells: list[Replayed]) -> None:
        self._cells[name] = list(cells)

    def clear(self, name: str) -> int:
        """Forget the cells of ``name``; how many there were."""
        return len(self._cells.pop(name, []))


def cell_numbers(text: str | None, count: int, flag: str) -> set[int]:
    """``"2,4-5"`` -> ``{2, 4, 5}``: numbers of the replay list (1 to ``count``)."""
    if text is None:
        return set()
    numbers: set[int] = set()
    for part in (p.strip() for p in text.split(",") if p.strip()):
        first, sep, last = part.partition("-")
        try:
            lo, hi = int(first), int(last) if sep else int(first)
        except ValueError:
            raise RankError(
                f"{flag} {text!r}: {part!r} is not a cell number or a range of them. Fix: "
                f"numbers from the list `%distcomp replay NAME` shows, like 2,4-5."
            ) from None
        if not 1 <= lo <= hi <= count:
            raise RankError(
                f"{flag} {text!r}: the log holds cells 1-{count}. Fix: numbers from the list "
                f"`%distcomp replay NAME` shows."
            )
        numbers.update(range(lo, hi + 1))
    return numbers


@dataclass
class Plan:
    """What a replay runs: ``(number in the list, cell, ranks now)`` in order."""

    name: str
    world_size: int
    runs: list[tuple[int, Replayed, list[int]]]
    left_out: list[int]
    all_cells: list[Replayed]

    def text(self) -> str:
        if not self.all_cells:
            return (
                f"{self.name}: no `%%distcomp run` cell succeeded, so there is nothing to replay."
            )
        lines = [f"Cells a replay of {self.name} runs, in order ({self.world_size} ranks):"]
        chosen = {number: ranks for number, _, ranks in self.runs}
        for number, cell in enumerate(self.all_cells, 1):
            if number in chosen:
                ran = list(cell.options.get("ranks") or range(cell.world_size))
                where = f"on {format_ranks(chosen[number])}"
                if chosen[number] != ran:
                    where += f" (ran on {format_ranks(ran)} of {cell.world_size})"
            else:
                where = "left out"
            lines.append(f"  {number}. {cell.headline()}  [{where}]")
        lines.append(CANNOT_RESTORE)
        return "\n".join(lines)


def plan(
    name: str,
    cells: list[Replayed],
    world_size: int,
    skip: str | None = None,
    only: str | None = None,
) -> Plan:
    """The replay of ``cells`` in a world of ``world_size``, less ``--skip`` and within
    ``--only``; RankError naming every cell whose ranks have no counterpart now."""
    left_out = cell_numbers(skip, len(cells), "--skip")
    if only is not None:
        kept = cell_numbers(only, len(cells), "--only")
        left_out |= set(range(1, len(cells) + 1)) - kept
    runs, refused, numbers = [], [], []
    for number, cell in enumerate(cells, 1):
        if number in left_out:
            continue
        try:
            runs.append((number, cell, cell.ranks_now(world_size)))
        except RankError as exc:
            refused.append(f"cell {number} ({cell.headline()}): {exc}")
            numbers.append(str(number))
    if refused:
        raise RankError(
            f"Cannot replay {name} on its current layout ({world_size} ranks): "
            + "; ".join(refused)
            + f". Nothing was restarted. Fix: `--skip {','.join(numbers)}` leaves those cells "
            "out, or set the layout back to the size they ran in."
        )
    return Plan(name, world_size, runs, sorted(left_out), cells)
