"""Fail fast: a rank failed while the others stay busy, most likely waiting for it.

A rank that raises before a collective leaves its peers blocked in that collective for good.
Once a rank's cell has failed and some other rank is still busy ``grace`` seconds later, the
cell ends: the failed ranks' tracebacks first, then where each busy rank is (stacks grouped
by ``local/stacks.py``), then how to recover. The busy ranks are sent SIGINT, so the advice
names what worked: nothing more to do, or a restart for ranks blocked in C code. A rank at
a debugger prompt (state ``debugging``) is not stuck: while any rank is there, the grace
does not run.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ...contracts import RankState
from ...core.ranges import format_ranks
from ...errors import RankError
from ..stacks import stack_sections
from . import gpu, ledgers
from .failures import error_sections

if TYPE_CHECKING:
    from .world import World


class FailFast:
    """Watches one cell; :meth:`check` raises once the grace after a failure has passed.

    ``errors()`` gives the failed ranks' errors (interrupts excluded); ``settle(seconds,
    until)`` keeps the cell's output flowing while the busy ranks answer SIGINT.
    """

    def __init__(
        self,
        world: World,
        code: str,
        grace: float | None,
        errors: Callable[[], dict[int, Any]],
        settle: Callable[[float, Callable[[], bool]], None],
        interrupt_grace: float,
        cell: str = "Cell",
        quits: Callable[[], set[int]] = set,
    ) -> None:
        self.world = world
        self.code = code
        self.cell = cell
        self.grace = grace
        self.errors = errors
        self.settle = settle
        self.interrupt_grace = interrupt_grace
        self.quits = quits  # ranks that quit in the debugger: their peers wait for them too
        self._since: float | None = None

    def _gpu(self, rank: int) -> list[str]:
        return gpu.out_of_memory_lines(self.world, rank)

    def check(self, running: set[int]) -> None:
        """Raise RankError when a rank failed and others stayed busy past the grace."""
        if self.grace is None or not running:
            return
        states = self.world.states()
        if RankState.DEBUGGING in states.values() or not (self.errors() or self._quit(running)):
            self._since = None
            return
        now = time.monotonic()
        if self._since is None:
            self._since = now
        if now - self._since >= self.grace:
            self._fail(running)

    def _quit(self, running: set[int]) -> set[int]:
        """Ranks that quit in the debugger and whose cell is over."""
        return self.quits() - running

    def _fail(self, running: set[int]) -> None:
        world = self.world
        errors = self.errors()
        quits = self._quit(running)
        busy = sorted(running - set(errors) - quits)
        stacks = world.stacks(busy)
        world.signal(busy, signal.SIGINT)
        self.settle(self.interrupt_grace, lambda: not (running & set(busy)))
        still = sorted(running & set(busy))
        sections = error_sections(errors, self._gpu)
        sections += world.node_notices([*errors, *busy])
        sections += ledgers.verdict_sections(world, busy, sorted(errors))
        sections += stack_sections(stacks, self.code, "still busy, waiting here", self.cell)
        failed = format_ranks(sorted(set(errors) | quits))
        sections = [(format_ranks([r]), [f"rank {r}: quit in the debugger"]) for r in quits] + (
            sections
        )
        if still:
            fix = ledgers.stuck_fix(world, still)
        else:
            fix = (
                f"{format_ranks(busy)} stopped on SIGINT: every rank keeps its state and is "
                "ready for the next cell. Recover: fix the error above and run the cell again."
            )
        running.clear()
        how = "quit in the debugger" if quits and not errors else "failed"
        raise RankError(
            f"{failed} of {world.name!r} {how} while {format_ranks(busy)} stayed busy "
            f"for {self.grace:g} s (waiting for {failed}?)",
            sections=sections,
            fix=fix + " The wait before this report is `%config DistComp.fail_fast_grace`.",
        )
