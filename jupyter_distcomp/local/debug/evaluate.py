"""``%distcomp compare NAME EXPR`` on ranks stopped at a breakpoint of a background cell:
EXPR is evaluated in each stopped rank's frame (through its pdb, as ``compare`` at the
prompt does), on idle ranks in their namespace; the stops stay for ``%distcomp wait``."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from ...contracts import RankState
from ...core.compare_table import CompareTable, check_expression, table
from ...core.ranges import format_ranks
from ...errors import RankError
from ...rank_side.compare import SLOT, diff_value, summarize
from .cells import interrupt_ranks
from .stopped import StoppedRanks

if TYPE_CHECKING:
    from ..ranks.world import World


def compare_stopped(
    world: World,
    ranks: list[int],
    expr: str,
    rtol: float | None,
    interrupt: Callable[[list[int]], None] | None = None,
) -> CompareTable:
    """``expr`` on ``ranks``: in their stopped frames, or (idle ranks) their namespace.
    ``interrupt``: how ranks past the evaluation's time limit are interrupted (default: the
    world's ranks, by pid)."""
    check_expression(world.name, expr)
    states = world.states()
    channel = getattr(world, "debugger", None)
    stops = [s for s in channel.stops() if s[0].rank in ranks] if channel is not None else []
    stopped = {session.rank for session, _ in stops}
    idle = [r for r in ranks if states[r] == RankState.IDLE]
    other = [r for r in ranks if r not in stopped and r not in idle]
    if other:
        fine = sorted(stopped | set(idle))
        fix = f"--ranks {format_ranks(fine).split(' ', 1)[1]}" if fine else "--ranks R"
        raise RankError(
            f"{format_ranks(other)} of {world.name!r} are busy (not stopped at a breakpoint); "
            f"compare runs on idle ranks and on ranks stopped at a breakpoint. Fix: {fix}, "
            f"or `%distcomp where {world.name}` to see where they are."
        )
    summaries: dict[int, dict] = {}
    if idle:
        answers = world.call_each(idle, summarize, lambda info: (expr, SLOT))
        summaries.update(zip(idle, answers, strict=True))
        world.call_each(idle, diff_value, lambda info: (SLOT, None, None))  # forget them
    if not stops:
        return table(world.name, expr, summaries, rtol)
    assert channel is not None
    held = StoppedRanks(
        channel=channel,
        name=world.name,
        interrupt=interrupt or (lambda late: interrupt_ranks(world, late)),
    )
    members = held.hold(stops)
    try:
        summaries.update(held.evaluate(members, expr))
        # the reference serves its array from its prompt (an idle one forgot it: no max |diff|)
        return held.table(members, expr, summaries, rtol)
    finally:
        StoppedRanks.release(members)
