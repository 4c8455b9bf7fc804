"""Where ranks stopped, as a person reads it: ``In [5], line 7, in step`` for a notebook
cell's lines (the cell that defined the code), ``train.py:12, in main`` for a file; ranks at
the same place named once."""

from __future__ import annotations

import re
from collections.abc import Callable

from ...core.ranges import format_ranks
from ..cell_names import where as cell_where

#: a rank's file for the cell, in pdb's location lines ``FILE(LINE)func()`` and ``FILE:LINE``
_CELL_PAREN = re.compile(r"(\S*/ipykernel_\d+/\d+\.py|<ipython-input-[^>]+>)\((\d+)\)")
_CELL_COLON = re.compile(r"(\S*/ipykernel_\d+/\d+\.py|<ipython-input-[^>]+>):(\d+)")


def place(where: dict) -> str:
    """``In [5], line 3, in <module>`` (a file: ``train.py:12, in main``); a rank in
    ``input()``: ``input (Your name: )``."""
    if "ask" in where:
        return f"input ({str(where['ask'].get('prompt', '')).strip() or 'input()'})"
    path, line, func = str(where.get("file", "?")), where.get("line", 0), where.get("func", "?")
    spot = cell_where(path, line) or f"{path}:{line}"
    return f"{spot}, in {func}"


def group_label(ranks: list[int], label: Callable[[int], str] | None = None) -> str:
    """``[rank 1]`` (the world's own label for one rank), ``[ranks 0-3]``."""
    if len(ranks) == 1:
        return label(ranks[0]) if label else f"[rank {ranks[0]}]"
    return f"[{format_ranks(ranks)}]"


def describe_stop(rank: int, where: dict, label: Callable[[int], str] | None = None) -> str:
    """``[rank 1] stopped at In [5], line 3, in <module>``; ``[rank 1] waits for input (...)``."""
    if "ask" in where:
        return f"{group_label([rank], label)} waits for {place(where)}"
    return f"{group_label([rank], label)} stopped at {place(where)}"


def by_place(wheres: dict[int, dict]) -> dict[str, list[int]]:
    """The ranks at each distinct place, in order of their lowest rank."""
    places: dict[str, list[int]] = {}
    for rank in sorted(wheres):
        places.setdefault(place(wheres[rank]), []).append(rank)
    return places


def describe_stops(wheres: dict[int, dict], label: Callable[[int], str] | None = None) -> list[str]:
    """One ``[ranks 0-3] stopped at In [5], line 7, in step`` line per distinct place."""
    return [
        f"{group_label(ranks, label)} stopped at {spot}" for spot, ranks in by_place(wheres).items()
    ]


def summary(wheres: dict[int, dict]) -> str:
    """``ranks 0-1, 3 at In [5], line 7, in step; rank 2 at In [5], line 9, in step``."""
    return "; ".join(f"{format_ranks(r)} at {spot}" for spot, r in by_place(wheres).items())


def cell_lines(text: str) -> str:
    """pdb's text with a cell's file shown as ``In [5], line N`` (pdb's ``FILE(N)func()``
    as ``In [5], line N, in func()``)."""
    text = _CELL_PAREN.sub(lambda m: f"{cell_where(m[1], m[2])}, in ", text)
    return _CELL_COLON.sub(lambda m: cell_where(m[1], m[2]), text)
