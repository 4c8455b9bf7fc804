"""``%distcomp restart NAME --replay``: the ``%%distcomp run`` cells that succeeded on a
world since it started, to run again in order on its replacement.

A cell is noted when it ended well on every rank it ran on; a new world starts with no
cells. Replaying runs each cell as it was run (ranks, time-out, check mode), named as it
goes; the first that fails stops the replay with its own error.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .world import World


@dataclass
class Replayed:
    """One cell as it was run: its name in the notebook and the arguments of its run."""

    label: str
    code: str
    options: dict[str, Any] = field(default_factory=dict)

    def headline(self) -> str:
        first = next((line.strip() for line in self.code.splitlines() if line.strip()), "")
        return f"{self.label}: {first[:60]}" + ("..." if len(first) > 60 else "")


class ReplayLog:
    """The succeeded cells of each component's current world."""

    def __init__(self) -> None:
        self._cells: dict[str, tuple[World, list[Replayed]]] = {}

    def record(self, world: World, cell: Replayed) -> None:
        held = self._cells.get(world.name)
        if held is None or held[0] is not world:
            held = self._cells[world.name] = (world, [])
        held[1].append(cell)

    def cells(self, world: World | None) -> list[Replayed]:
        """The cells that succeeded on ``world`` since it started."""
        if world is None:
            return []
        held = self._cells.get(world.name)
        return list(held[1]) if held is not None and held[0] is world else []
