"""The options of one ``%%distcomp run`` cell, as one frozen object.

The magic fills it from its arguments, the session adds the settings' defaults, the backend
checks the rank lists, and the cell run reads it: the same options pass down one path as
one value instead of a dozen keywords.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class CellOptions:
    """How one cell runs on the ranks of a component."""

    #: the ranks it runs on (``"0,2-3"``, a list of ranks), None for all
    ranks: str | Iterable[int] | None = None
    #: seconds before the cell is stopped, None for none
    timeout: float | None = None
    #: one block of output per rank, shown when the cell ends
    group_output: bool = False
    #: the line of the cell where the code starts (tracebacks count so)
    first_line: int = 1
    #: seconds the other ranks may go on after one failed, None to wait for them all
    fail_fast: float | None = None
    #: return a started BackgroundCell at once; the kernel is free while it runs
    background: bool = False
    #: the ranks whose ``breakpoint()`` stops (None: every rank; "": none, a replay)
    debug_ranks: str | None = None
    #: the ranks compare each collective before it runs
    check_collectives: bool = False
    #: seconds in collectives without progress before a foreground cell without a
    #: time-out says so
    hang_notice: float | None = None
    #: a success joins the replay log
    record: bool = True

    def replayed(self, ranks: list[int]) -> dict[str, Any]:
        """What the replay log keeps of these options, run on ``ranks``."""
        return {
            "ranks": ranks,
            "timeout": self.timeout,
            "group_output": self.group_output,
            "first_line": self.first_line,
            "fail_fast": self.fail_fast,
            "check_collectives": self.check_collectives,
        }
