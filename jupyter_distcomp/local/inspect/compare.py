"""``%distcomp compare NAME EXPR [--ranks ...] [--rtol X]``: one value, every rank, one table.

Each rank evaluates EXPR and sends a summary (``rank_side/compare.py``): numbers as they
are, strings, arrays and tensors as shape, dtype and a digest, a ``state_dict()`` as the
summary of each entry. Ranks with equal summaries form a group; the largest group is the
reference and the others are flagged. Only for ranks that differ, the reference rank serves
its value from its own host and each differing rank, on whichever host, fetches it and
computes its max |diff| (and, with ``--rtol``, whether all of it is within that relative
tolerance, which puts the rank into the reference group): no array ever travels to the
kernel.
"""

from __future__ import annotations

import secrets
from typing import TYPE_CHECKING, Any

from ...contracts import RankState
from ...core.compare_table import CompareTable, check_expression, table
from ...core.ranges import format_ranks
from ...errors import RankError
from ...rank_side.compare import SLOT, diff_value, serve_value, summarize

__all__ = ["CompareTable", "compare"]

if TYPE_CHECKING:
    from ..ranks.world import World

CALL_TIMEOUT = 120.0


def compare(world: World, ranks: list[int], expr: str, rtol: float | None) -> CompareTable:
    """Evaluate ``expr`` on ``ranks`` of ``world`` and group the ranks by its value."""
    check_expression(world.name, expr)
    busy = [r for r in ranks if world.ranks[r].state != RankState.IDLE]
    if busy:
        raise RankError(
            f"{format_ranks(busy)} of {world.name!r} are not idle "
            f"({', '.join(sorted({world.ranks[r].state for r in busy}))}); compare runs on idle "
            f"ranks. Fix: `%distcomp wait {world.name}` or `%distcomp where {world.name}`."
        )
    answers = world.call_each(ranks, summarize, lambda info: (expr, SLOT))
    summaries = dict(zip(ranks, answers, strict=True))
    return table(
        world.name,
        expr,
        summaries,
        rtol,
        lambda keys, ref: _diff_kept(world, summaries, keys, ref, rtol),
    )


def _diff_kept(
    world: World, summaries: dict[int, dict], keys: dict[int, Any], ref: int, rtol: float | None
) -> dict[int, dict]:
    """max |diff| on the ranks that kept an array or mapping and differ; the rest forget.

    The reference rank serves its value on its own host (see :func:`_toward`) to the
    differing ranks, which fetch it with a one-time token: the value goes from rank to rank,
    across hosts too, and never through the kernel.
    """
    kept = [r for r, s in summaries.items() if s["kind"] in ("array", "dict")]
    if not kept:
        return {}
    differing = [r for r in kept if keys[r] != keys[ref]]
    source, unserved = None, {}
    if differing and ref in kept:
        token = secrets.token_hex(16)
        serve = (SLOT, _toward(world, ref, differing), len(differing), token, CALL_TIMEOUT)
        (where,) = world.call_each([ref], serve_value, lambda info: serve)
        if isinstance(where, str):  # the differing ranks forget their values below
            unserved = {r: {"maxdiff": None, "close": False, "why": where} for r in differing}
        else:
            source = (*where, token)
    results = world.call_each(
        kept,
        diff_value,
        lambda info: (SLOT, source if info.rank in differing else None, rtol, CALL_TIMEOUT),
        CALL_TIMEOUT,
    )
    return unserved or {
        r: res for r, res in zip(kept, results, strict=True) if r in differing and res
    }


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
