"""``%distcomp compare NAME EXPR [--ranks ...] [--rtol X] [--timeout S]``: one value, every rank,
one table.

Each rank evaluates EXPR and sends a summary (``rank_side/compare.py``): numbers as they
are, strings, arrays and tensors as shape, dtype and a digest, a ``state_dict()`` as the
summary of each entry. Ranks with equal summaries form a group; the largest group is the
reference and the others are flagged. Only for ranks that differ, the reference rank serves
its value from its own host and each differing rank, on whichever host, fetches it and
computes its max |diff| (and, with ``--rtol``, whether all of it is within that relative
tolerance, which puts the rank into the reference group): no array ever travels to the
kernel.

While it runs, the compared ranks show busy. A comparison that does not finish within its
time-out, or that the user interrupts, sends SIGINT to the ranks still evaluating; they show
busy until they stop. A rank that dies is named by its rank; every value server is closed
when the comparison ends, however it ends.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ...contracts import RankState
from ...core.compare_table import CompareTable, check_expression, table
from ...core.ranges import format_ranks
from ...errors import RankError, RankInterrupt
from ...rank_side.compare import SLOT, diff_value, forget, serve_value, summarize
from ..ranks.ipp import reply_errors
from ..ranks.ledgers import verdict_lines

__all__ = ["CompareTable", "compare"]

if TYPE_CHECKING:
    from ..ranks.world import World

#: seconds the evaluation on the ranks may take (``--timeout``)
EVAL_TIMEOUT = 60.0
#: seconds the reference value may take to travel to the differing ranks
CALL_TIMEOUT = 120.0
#: how often a waiting compare looks for dead ranks
POLL = 0.1


def compare(
    world: World,
    ranks: list[int],
    expr: str,
    rtol: float | None,
    timeout: float | None = None,
) -> CompareTable:
    """Evaluate ``expr`` on ``ranks`` of ``world`` and group the ranks by its value;
    ``timeout``: seconds the evaluation may take (default :data:`EVAL_TIMEOUT`)."""
    check_expression(world.name, expr)
    busy = [r for r in ranks if world.ranks[r].state != RankState.IDLE]
    if busy:
        raise RankError(
            f"{format_ranks(busy)} of {world.name!r} are not idle "
            f"({', '.join(sorted({world.ranks[r].state for r in busy}))}); compare runs on idle "
            f"ranks. {_busy_fix(world)}"
        )
    calls = _Calls(world, expr)
    try:
        answers = calls.each(ranks, summarize, lambda info: (expr, SLOT), timeout or EVAL_TIMEOUT)
        summaries = dict(zip(ranks, answers, strict=True))
        return table(
            world.name,
            expr,
            summaries,
            rtol,
            lambda keys, ref: _diff_kept(calls, summaries, keys, ref, rtol),
        )
    finally:
        calls.forget(ranks)


def _diff_kept(
    calls: _Calls, summaries: dict[int, dict], keys: dict[int, Any], ref: int, rtol: float | None
) -> dict[int, dict]:
    """max |diff| on the ranks that kept an array or mapping and differ; the rest forget.

    The reference rank serves its value on its own host (see :func:`_toward`) to the
    differing ranks, which fetch it with a one-time token: the value goes from rank to rank,
    across hosts too, and never through the kernel.
    """
    world = calls.world
    kept = [r for r, s in summaries.items() if s["kind"] in ("array", "dict")]
    if not kept:
        return {}
    differing = [r for r in kept if keys[r] != keys[ref]]
    source, unserved = None, {}
    if differing and ref in kept:
        token = secrets.token_hex(16)
        serve = (SLOT, _toward(world, ref, differing), len(differing), token, CALL_TIMEOUT)
        (where,) = calls.each([ref], serve_value, lambda info: serve, CALL_TIMEOUT)
        if isinstance(where, str):  # the differing ranks forget their values below
            unserved = {r: {"maxdiff": None, "close": False, "why": where} for r in differing}
        else:
            source = (*where, token)
    results = calls.each(
        kept,
        diff_value,
        lambda info: (SLOT, source if info.rank in differing else None, rtol, CALL_TIMEOUT),
        CALL_TIMEOUT + 5,
    )
    return unserved or {
        r: res for r, res in zip(kept, results, strict=True) if r in differing and res
    }


def _busy_fix(world: World) -> str:
    """The way to idle ranks that works: waiting, unless they hang (then waiting never
    ends: the hang is named and a restart is the way out)."""
    name = world.name
    working = [r for r, state in world.states().items() if state != RankState.IDLE]
    hang = verdict_lines(world, working)
    if not hang:
        return f"Fix: `%distcomp wait {name}` or `%distcomp where {name}`."
    return (
        f"They wait for each other: {'; '.join(hang)}. `%distcomp wait {name}` ends only if "
        f"that changes, a deadlock never. Fix: `%distcomp restart {name} --replay` starts "
        "fresh ranks and re-runs the cells that succeeded since the last start "
        f"(`%distcomp where {name}` shows whether they still move)."
    )


class _Calls:
    """The calls of one comparison on the ranks of ``world``: the ranks show busy while one
    runs, and are interrupted when it does not end in time or the user interrupts it."""

    def __init__(self, world: World, expr: str) -> None:
        self.world, self.expr = world, expr

    def each(
        self,
        ranks: list[int],
        function: Callable[..., Any],
        args: Callable[[Any], tuple],
        timeout: float,
    ) -> list[Any]:
        """``function(*args(info))`` on each rank at once; their results, in order."""
        world = self.world
        client = world.client
        if client is None:
            raise RankError(f"The ranks of {world.name!r} are stopped.")
        world.set_state(ranks, RankState.BUSY)
        pending: dict[int, Any] = {}
        for rank in ranks:
            info = world.ranks[rank]
            pending[rank] = result = client[info.engine_id].apply_async(function, *args(info))
            result.add_done_callback(
                lambda _, rank=rank: world.change_state(rank, RankState.BUSY, RankState.IDLE)
            )
        deadline = time.monotonic() + timeout
        try:
            while not all(result.ready() for result in pending.values()):
                dead = [r for r in ranks if world.ranks[r].state == RankState.DEAD]
                if dead:
                    raise self._died(dead)
                if time.monotonic() > deadline:
                    raise self._stop(pending, f"did not answer within {timeout:g} s")
                time.sleep(POLL)
        except KeyboardInterrupt:
            raise self._stop(pending, "were interrupted", RankInterrupt) from None
        return [self._result(rank, result) for rank, result in pending.items()]

    def _result(self, rank: int, result: Any) -> Any:
        engine_error, remote_error = reply_errors()
        try:
            return result.get(0)
        except engine_error:
            raise self._died([rank]) from None
        except remote_error as exc:
            raise RankError(
                f"%distcomp compare {self.world.name} `{self.expr}`: rank {rank} failed: "
                f"{exc.ename}: {exc.evalue}"
            ) from None

    def _died(self, dead: list[int]) -> RankError:
        name = self.world.name
        return RankError(
            f"%distcomp compare {name} `{self.expr}`: {format_ranks(dead)} died during the "
            f"comparison. Fix: `%distcomp restart {name}` starts the ranks again."
        )

    def _stop(self, pending: dict[int, Any], what: str, error: type = RankError) -> Exception:
        """SIGINT to the ranks still at work: they show busy until they stop."""
        import signal

        name = self.world.name
        still = [rank for rank, result in pending.items() if not result.ready()]
        self.world.signal(still, signal.SIGINT)
        return error(
            f"%distcomp compare {name} `{self.expr}`: {format_ranks(still)} {what}; they got "
            f"SIGINT and show busy in `%distcomp status {name}` until they stop. Fix: a "
            f"quicker expression, or --timeout S; `%distcomp restart {name}` if they stay busy."
        )

    def forget(self, ranks: list[int]) -> None:
        """Each rank drops what the comparison kept and closes its value server (after what
        it evaluates now, on a rank still at work)."""
        client = self.world.client
        if client is None:
            return
        results = []
        for rank in ranks:
            info = self.world.ranks[rank]
            if info.state != RankState.DEAD and info.engine_id is not None:
                try:
                    results.append(client[info.engine_id].apply_async(forget, SLOT))
                except Exception:  # the ranks are being stopped
                    pass
        if all(self.world.ranks[r].state == RankState.IDLE for r in ranks):
            deadline = time.monotonic() + 5  # closed before the table shows
            for result in results:
                result.wait(max(deadline - time.monotonic(), 0))


def _toward(world: World, ref: int, differing: list[int]) -> str | None:
    """A host of a differing rank on another machine than the reference rank (the reference
    serves on its address on the route there), as the hosts setting names it; None when
    they all run on the reference rank's machine (it then serves on loopback)."""
    mine = world.ranks[ref]
    for rank in differing:
        other = world.ranks[rank]
        if other.host != mine.host:
            hosts = world.placement.hosts
            return hosts[other.node] if other.node < len(hosts) else other.host
    return None
