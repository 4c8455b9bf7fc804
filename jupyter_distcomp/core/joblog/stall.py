"""What the ranks' state lines say, in the words of a local run: who is missing from which
collective (the ledger's verdicts), the wait-for cycle of a deadlock (``waitfor``), the
known hang patterns with their fixes (``hangs``), and each rank's stack, identical stacks
once.

A state line is written at one moment (a stall, a SIGTERM, a failure, the exit); the
verdicts are judged as of the newest of them. A rank whose last line is a failure or its
exit calls nothing more. A rank that failed with a time-out or a lost peer raised out of
the call it waited in, which its ledger shows as ended; that call counts as the one it
waited in.
"""

from __future__ import annotations

import dataclasses

from ...rank_side import ledger_words
from ...rank_side.ledger_words import Entry, format_ranks
from .. import hangs, waitfor
from .classify import CONSEQUENCE, kind_of
from .state import RankState
from .tracebacks import Frame

#: a call that ended this close (seconds) before a failure line is the one it raised from
_RAISED_FROM = 10.0


def _ledgers(states: dict[int, RankState]) -> dict[int, list[Entry]]:
    ledgers = {}
    for rank, state in states.items():
        calls = list(state.calls)
        if state.reason in ("failure", "sigterm") and calls and state.error:
            side, _ = kind_of(state.error)
            last = calls[-1]
            if side == CONSEQUENCE and 0 < state.time - last.finished < _RAISED_FROM:
                calls[-1] = dataclasses.replace(last, finished=0.0, posted=False)
        ledgers[rank] = calls
    return ledgers


def _mine(frames: list[dict]) -> list[Frame]:
    """A stack's frames the user wrote (outermost first); the innermost when none is."""
    every = [
        Frame(
            str(f.get("file", "?")),
            int(f.get("line") or 0),
            str(f.get("function") or ""),
            str(f.get("code") or ""),
        )
        for f in frames
    ]
    return [f for f in every if f.mine] or every[-1:]


def _besides(states: dict[int, RankState]) -> dict[int, str]:
    """What each rank does that its ledger does not say: exited, raised, or runs a line
    of its own (its stack's innermost frame of the user's)."""
    words = {}
    for rank, state in states.items():
        if state.reason == "exit":
            words[rank] = "exited"
        elif state.reason == "failure" and state.error:
            words[rank] = f"raised {state.error}"
        elif state.frames and not any(e.blocked for e in state.calls[-1:]):
            top = _mine(state.frames)[-1]
            words[rank] = f"is at {top.place()}" + (f": {top.code}" if top.code else "")
    return words


def hang_lines(states: dict[int, RankState], world_size: int) -> tuple[list[str], list[int]]:
    """The deadlocks, then each group's collective verdict with its known pattern; and the
    ranks they name (a deadlock's, those missing from or diverging in a collective)."""
    if not any(state.calls for state in states.values()):
        return [], []
    ledgers = _ledgers(states)
    now = max(state.time for state in states.values())
    gone = {
        rank: waitfor.EXITED
        for rank, state in states.items()
        if state.reason in ("exit", "failure")
    }
    besides = _besides(states)
    tables = ledger_words.by_group(ledgers)
    found = waitfor.waits(ledgers, world_size, tables)
    chains = waitfor.chains(found, gone)
    lines = [waitfor.chain_text(chain, now) for chain in chains]
    named = {wait.rank for chain in chains if chain.cycle for wait, _, _ in chain.links}
    for verdict in ledger_words.verdicts(ledgers, world_size, None, now, tables, besides):
        table = tables[verdict.group].get(verdict.seq, {})
        text = ledger_words.verdict_text(verdict, table, besides)
        head = ledger_words.call_text(verdict.call)
        if text.startswith(head) and verdict.call.file:  # where the callers wait
            text = f"{head} at {verdict.call.site()}{text[len(head) :]}"
        lines.append(text + hangs.pattern(verdict, ledgers, gone, None))
        named.update(verdict.ranks)
    return lines, sorted(named)


def _frame_lines(frames: list[dict]) -> list[str]:
    return [line for frame in _mine(frames) for line in frame.lines()]


def stack_sections(states: dict[int, RankState]) -> list[tuple[str, list[str]]]:
    """Each distinct main-thread stack once (the user's frames), headed by its ranks and
    what they were doing (``ranks 0-1: stack, stalled 12 s``)."""
    by_stack: dict[tuple[str, ...], list[int]] = {}
    for rank in sorted(states):
        lines = _frame_lines(states[rank].frames)
        if lines:
            by_stack.setdefault(tuple(lines), []).append(rank)
    sections = []
    for shown, ranks in by_stack.items():
        first = states[ranks[0]]
        stalled = first.raw.get("stalled")
        how = {
            "stall": "stalled",
            "sigterm": "at SIGTERM",
            "failure": "as it failed",
            "exit": "as it exited",
        }[first.reason]
        if first.stack_from_stall:
            how = "stalled (stack from the stall), then SIGTERM"
        if isinstance(stalled, int | float) and stalled:
            how += f" {stalled:.0f} s"
        sections.append((f"{format_ranks(ranks)}: stack, {how}", list(shown)))
    return sections
