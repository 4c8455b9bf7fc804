"""What hung ranks wait for, in the words every report uses: the deadlocks of the wait-for
graph (``waitfor``) first, then each group's collective verdict (``rank_side/ledger.py``),
each with the known pattern it fits and that pattern's usual fix.

The patterns: uneven inputs under DDP (the others reduce gradients in backward while a
rank's loop has ended), a rank at a debugger prompt, a rank in a different collective, a
rank in point-to-point while the others are in a collective.
"""

from __future__ import annotations

import time

from ..contracts import RankState
from ..rank_side import ledger_words
from ..rank_side.ledger_words import P2P, Entry, Verdict, format_ranks
from . import waitfor


def gone_ranks(
    world_size: int, busy: set[int] | None, states: dict[int, str] | None
) -> dict[int, str]:
    """The ranks that will call nothing more: exited, or (``busy`` known) done with their
    cell."""
    states = states or {}
    gone = {}
    for rank in range(world_size):
        if states.get(rank) == RankState.DEAD:
            gone[rank] = waitfor.EXITED
        elif busy is not None and rank not in busy and states.get(rank) != RankState.DEBUGGING:
            gone[rank] = waitfor.ENDED
    return gone


def _current(entries: list[Entry]) -> Entry | None:
    return next((e for e in reversed(entries) if e.blocked), None)


def pattern(
    verdict: Verdict,
    ledgers: dict[int, list[Entry]],
    gone: dict[int, str],
    states: dict[int, str] | None,
) -> str:
    """The known hang a collective verdict shows, with its fix; "" for none."""
    states = states or {}
    missing = sorted(verdict.missing)
    ended = [r for r in missing if gone.get(r) == waitfor.ENDED]
    if verdict.call.bucket and ended:
        return (
            f". Uneven inputs under DDP: {format_ranks(ended)} ran out of batches while "
            f"{format_ranks(verdict.callers)} reduce gradients in backward. Fix: wrap the "
            "training loop in `with model.join():`, or give every rank the same number of "
            "batches (`DistributedSampler(..., drop_last=True)`)"
        )
    prompt = [r for r in missing if states.get(r) == RankState.DEBUGGING]
    if prompt:
        return (
            f". {format_ranks(prompt)} {'is' if len(prompt) == 1 else 'are'} at a debugger "
            "prompt: the others wait until it goes on (continue it at its prompt)"
        )
    in_p2p = [
        r for r in missing if (e := _current(ledgers.get(r, []))) is not None and e.kind == P2P
    ]
    if in_p2p:
        return (
            f". {format_ranks(in_p2p)} {'is' if len(in_p2p) == 1 else 'are'} in a point-to-point "
            "call while the others are in the collective. Fix: let every send meet its "
            "receive before any rank enters the collective"
        )
    if any(e.op != verdict.call.op for _, e in verdict.others) or any(
        (e := _current(ledgers.get(r, []))) is not None and e.group == verdict.group
        for r in missing
    ):
        return (
            f". The ranks are in different collectives of {verdict.group}. Fix: every rank "
            "of a group must call its collectives in the same order"
        )
    return ""


def hang_lines(
    ledgers: dict[int, list[Entry]],
    world_size: int,
    busy: set[int] | None = None,
    states: dict[int, str] | None = None,
    besides: dict[int, str] | None = None,
) -> list[str]:
    """The deadlocks, then each group's verdict with its pattern, one line each;
    ``besides``: what ranks do that their ledgers do not say (see ledger_words.verdicts)."""
    now = time.time()
    gone = gone_ranks(world_size, busy, states)
    tables = ledger_words.by_group(ledgers)
    lines = waitfor.wait_lines(ledgers, world_size, gone, now, tables)
    for verdict in ledger_words.verdicts(ledgers, world_size, busy, now, tables, besides):
        table = tables[verdict.group].get(verdict.seq, {})
        text = ledger_words.verdict_text(verdict, table, besides)
        lines.append(text + pattern(verdict, ledgers, gone, states))
    return lines
