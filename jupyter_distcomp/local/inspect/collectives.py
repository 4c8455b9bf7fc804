"""``%distcomp collectives NAME [--last N]``: each group's recent collectives, aligned by
sequence number across ranks, divergent ranks marked, and the verdict on top.

The calls come from each rank's ledger file (``rank_side/ledger.py``), read here while the
ranks run, wait or hang; of a ``%distcomp command`` run, from its processes' ledgers.
"""

from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING

from ...contracts import RankState
from ...core.hangs import hang_lines
from ...core.ranges import format_ranks
from ...rank_side import ledger, ledger_words
from ..ranks import ledgers as world_ledgers
from .where import WhereReport

if TYPE_CHECKING:
    from ..command.active import ActiveRun
    from ..ranks.world import World

DIVERGES = "<-- diverges"


def collectives(world: World, last: int = 10) -> WhereReport:
    """The recent collectives of every rank of ``world``."""
    states = world.states()
    busy = {r for r, state in states.items() if state in (RankState.BUSY, RankState.DEBUGGING)}
    ledgers = world_ledgers.read(world)
    title = f"{world.name}: the last {last} collective(s) of each group, by sequence number"
    failed = [r for r in world.failed_ranks if r not in busy]
    said = world_ledgers.besides(world, failed)
    shown = report(title, ledgers, world.world_size, busy, last, dict(states), said)
    away = [r for r in range(world.world_size) if r not in ledgers]
    if away:  # a ledger is a file on its rank's host
        shown.sections.append(
            (f"{format_ranks(away)}: on another host, their ledgers are not read here", [])
        )
    return shown


def collectives_processes(title: str, run: ActiveRun, last: int = 10) -> WhereReport:
    """The same for the processes of a ``%distcomp command`` run (each rank's first Python
    process)."""
    targets = run.targets(list(range(run.world_size)))
    ledgers = {
        rank: world_ledgers.user_sites(
            ledger.read_ledger(os.path.splitext(stack_file)[0] + ".ledger")
        )
        for rank, (_, stack_file, _) in targets.items()
    }
    return report(title, ledgers, run.world_size, None, last)


def _state(calls: dict[int, ledger_words.Entry], now: float) -> str:
    gpu = ledger_words.gpu_text(calls)
    state = _ledger_state(list(calls.values()), now)
    return f"{state} ({gpu})" if gpu else state


def _ledger_state(entries: list[ledger_words.Entry], now: float) -> str:
    running = [e for e in entries if e.running]
    if not running:
        return "done"
    if not any(e.blocked for e in running):  # non-blocking calls no Wait has seen complete
        return f"not complete, posted {now - min(e.started for e in running):.0f} s ago"
    return f"waiting {now - min(e.started for e in running):.0f} s"


def group_lines(
    table: dict[int, dict[int, ledger_words.Entry]], members: list[int], last: int, now: float
) -> list[str]:
    """One line per sequence number where the ranks agree; a marked block where not."""
    lines = []
    for seq in sorted(table)[-last:]:
        calls = table[seq]
        split = ledger_words.sides(calls)
        absent = [r for r in members if r not in calls]
        if len(split) == 1 and not absent:
            ranks, call = split[0]
            lines.append(
                f"#{seq:<5} {ledger_words.call_text(call, group=False, seq=False)} at {call.site()}: "
                f"{format_ranks(ranks)} {_state(calls, now)}"
            )
            continue
        lines.append(f"#{seq:<5} {DIVERGES}")
        for ranks, call in split:
            lines.append(
                f"    {format_ranks(ranks)}: {ledger_words.call_text(call, group=False, seq=False)} at "
                f"{call.site()}, {_state({r: calls[r] for r in ranks}, now)}"
            )
        if absent:
            lines.append(f"    {format_ranks(absent)}: no call")
    return lines


def _no_wait(
    ledgers: dict[int, list[ledger_words.Entry]], groups: list[tuple[str, list[str]]]
) -> list[str]:
    """The verdict where no rank waits for a call that cannot come: the ranks agree, unless
    a row below diverges (a ledger damaged, read as empty, or cut short)."""
    if not any(DIVERGES in line for _, lines in groups for line in lines):
        return [
            "every group's ranks agree on their calls, and no rank waits for one that cannot come"
        ]
    lines = [
        "no rank waits for a call that cannot come, but the ranks' ledgers do not hold the "
        f"same calls (the rows marked {DIVERGES})"
    ]
    empty = [rank for rank, entries in sorted(ledgers.items()) if not entries]
    if empty:
        lines.append(
            f"{format_ranks(empty)}: no call in its ledger (a damaged ledger counts as "
            "empty, and is said where it was read)"
        )
    return lines


def report(
    title: str,
    ledgers: dict[int, list[ledger_words.Entry]],
    world_size: int,
    busy: set[int] | None,
    last: int,
    states: dict[int, str] | None = None,
    besides: dict[int, str] | None = None,
) -> WhereReport:
    """``states``: each rank's state (idle, busy, dead...); ``besides``: what ranks do that
    their ledgers do not say (see ledger_words.verdicts)."""
    now = time.time()
    sections: list[tuple[str, list[str]]] = []
    verdict = hang_lines(ledgers, world_size, busy, states, besides)
    if not any(ledgers.values()):
        sections.append(("no collective recorded yet", []))
        return WhereReport(title, sections)
    groups = []
    for group, table in ledger_words.by_group(ledgers).items():
        first = next(iter(next(iter(table.values())).values()))
        members = [r for r in (first.members or range(world_size)) if r in ledgers]
        groups.append((group, group_lines(table, members, last, now)))
    sections.append(("verdict", verdict or _no_wait(ledgers, groups)))
    sections.extend(groups)
    p2p = []
    for rank, entries in sorted(ledgers.items()):
        for e in [e for e in entries if e.kind == ledger_words.P2P][-last:]:
            p2p.append(
                f"{format_ranks([rank])}: {ledger_words.call_text(e)} at {e.site()}, "
                f"{_state({rank: e}, now)}"
            )
    if p2p:
        sections.append(("point-to-point", p2p))
    return WhereReport(title, sections)
