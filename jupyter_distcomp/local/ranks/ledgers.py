"""The kernel's side of the collectives ledger (rank_side/ledger.py): read each rank's ledger
file, say what blocks or diverges, switch check mode, and notice a hang.

A rank's ledger is a file of this machine (ranks on other hosts are not read), so it is
read while the rank is blocked in C code, without a message to the rank.
"""

from __future__ import annotations

import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from ...core.hangs import gone_ranks, hang_lines
from ...core.horovod_stall import pending_stall_lines
from ...core.ranges import format_ranks
from ...core.waitfor import deadlock_lines
from ...machine.network import is_local_host
from ...machine.node_disks import user_path
from ...rank_side import ledger, ledger_words
from ...rank_side.rank_setup import check_collectives
from ..cell_names import where as cell_where

if TYPE_CHECKING:
    from .world import World

HOOKS_FILE = str(Path(ledger.__file__).with_name("ledger_hooks.py"))
HANG_CHECK = 1.0  # seconds between reads of the ledgers while a cell may hang
#: bytes at the end of mpiexec's output read for Horovod's stall inspector (rank 0's C++
#: writes it to the process's stderr, which mpiexec's output keeps)
STALL_TAIL = 65536
RECENT = 64  # the newest calls of each rank that show a point-to-point deadlock


def name_cells() -> None:
    """From now on the kernel names the ledger's call sites in cells as the notebook does:
    ``In [5], line 7``, the cell that defined the code (a world calls this as it starts)."""
    ledger_words.name_cells(cell_where)


def read(
    world: World, ranks: list[int] | None = None, last: int | None = None
) -> dict[int, list[ledger_words.Entry]]:
    """Each rank's recorded calls, oldest first (its ``last`` ones, when given; ranks on
    this machine)."""
    chosen = range(world.world_size) if ranks is None else ranks
    return {
        r: user_sites(ledger.read_ledger(world.ledger_path(r), last))
        for r in chosen
        if world.ranks[r].host is None or is_local_host(world.ranks[r].host)
    }


def user_sites(entries: list[ledger.Entry]) -> list[ledger.Entry]:
    """``entries`` with their call sites in the user's files, not a node's copy of them."""
    return [
        entry if user_path(entry.file) == entry.file else replace(entry, file=user_path(entry.file))
        for entry in entries
    ]


#: what a verdict says of a rank whose cell raised, and of one at a breakpoint prompt
RAISED = "raised an error"
AT_PROMPT = "is stopped at a breakpoint prompt"


def besides(world: World, failed: list[int] | None = None) -> dict[int, str]:
    """What ranks do that their ledgers do not say: stopped at a prompt, or (``failed``) raised."""
    from ...contracts import RankState

    said = {r: AT_PROMPT for r, state in world.states().items() if state == RankState.DEBUGGING}
    said.update({r: RAISED for r in failed or ()})
    return said


def verdict_lines(
    world: World, busy: list[int] | None = None, failed: list[int] | None = None
) -> list[str]:
    """The deadlocks, and what blocks or diverges in the world's collectives, one line per
    group (core/hangs.py); ``failed``: the ranks whose cell raised."""
    try:
        ledgers = read(world)
        chosen = None if busy is None else set(busy)
        states: dict[int, str] = dict(world.states())
        lines = hang_lines(ledgers, world.world_size, chosen, states, besides(world, failed))
        return lines + horovod_lines(world, ledgers)
    except Exception as exc:  # a report must not fail for want of a ledger
        return [f"(the collectives ledger could not be read: {exc!r})"]


def horovod_lines(world: World, ledgers: dict[int, list[ledger_words.Entry]]) -> list[str]:
    """Horovod's stall inspector on the calls still pending, from the end of mpiexec's
    output (core/horovod_stall.py); [] where it said nothing of them."""
    if world.cluster is None or not any(
        e.op.startswith("hvd.") for v in ledgers.values() for e in v
    ):
        return []
    text = world.cluster.mpiexec_text(max(0, world.output_size() - STALL_TAIL))
    return pending_stall_lines(text, ledgers) if "Missing ranks:" in text else []


def verdict_sections(
    world: World, busy: list[int] | None = None, failed: list[int] | None = None
) -> list[tuple[str, list[str]]]:
    """The verdicts as a report section, or none."""
    lines = verdict_lines(world, busy, failed)
    return [("collectives", lines)] if lines else []


def blocked_ranks(world: World, ranks: list[int]) -> list[int]:
    """Those of ``ranks`` waiting in their last recorded call: inside a collective or a
    point-to-point call, or in a Wait for a non-blocking one (where SIGINT waits until the
    call returns); a non-blocking call merely posted does not hold a rank."""
    ledgers = read(world, ranks, last=1)
    return [r for r in ranks if ledgers.get(r) and ledgers[r][-1].blocked]


def set_check(world: World, on: bool) -> None:
    """Check mode on the ranks of ``world``, in its epoch (one message, only when either
    changes)."""
    if world.checking == on:
        return
    epoch = world.check_epoch
    world.call_each(list(range(world.world_size)), check_collectives, lambda info: (on, epoch))
    world.checking = on


def void_checks(world: World) -> None:
    """After a checked cell that did not end well: the ranks' next checked cell starts a
    new epoch, which voids what an interrupted exchange left behind (a signature one rank
    posted that the others never read) and counts each group's exchanges from 1 again."""
    world.check_epoch += 1
    world.checking = None


class HangWatch:
    """Says once, for a cell without a time-out, that every busy rank has sat in collectives
    or point-to-point calls without progress for ``seconds``, in the cell's output and in
    the ranks panel (``world.hang``); kills nothing."""

    def __init__(self, world: World, seconds: float | None) -> None:
        self.world = world
        self.seconds = seconds
        self.said = False
        self._next = time.monotonic() + (seconds or 0)
        world.hang = None  # a new cell: the last one's hang is over

    def check(self, running: set[int]) -> None:
        if self.said or not self.seconds or not running or time.monotonic() < self._next:
            return
        self._next = time.monotonic() + HANG_CHECK
        busy = sorted(running)
        notices = self.world.node_notices(busy, consume=False)
        if notices:  # a rank of node 1 looked for node 0 at localhost: why nothing moves
            self.said = True
            said = "\n".join(f"[{where}] {line}" for where, lines in notices for line in lines)
            print(
                f"{said}\nThe cell keeps waiting. To get out: interrupt the kernel, then fix "
                "the address the program connects to.",
                file=sys.stderr,
                flush=True,
            )
            return
        ledgers = read(self.world, busy, last=1)
        now = time.time()
        last = [ledgers[r][-1] if ledgers.get(r) else None for r in busy]
        if any(e is None or not e.blocked or now - e.started < self.seconds for e in last):
            self._deadlock(busy, last, now)
            return
        self.said = True
        name = self.world.name
        calls = (
            "collectives"
            if all(e and e.kind == ledger_words.COLLECTIVE for e in last)
            else ("collectives and point-to-point calls")
        )
        lines = verdict_lines(self.world, busy)
        verdict = "; ".join(lines) or "every busy rank waits there"
        self.world.hang = "\n".join(lines) or f"{format_ranks(busy)} wait in {calls}"
        self.world.notices.changed()  # the ranks panel shows it
        print(
            f"distcomp: {format_ranks(busy)} of {name!r} have waited in {calls} for "
            f"{self.seconds:g} s: {verdict}. The cell keeps waiting. To get out: interrupt the "
            f"kernel (ranks blocked in a collective do not stop on it), then "
            f"{replay_advice(name)}; `%config DistComp.hang_notice` sets this wait.",
            file=sys.stderr,
            flush=True,
        )

    def _deadlock(self, busy: list[int], last: list, now: float) -> None:
        """Said also while other ranks still run: ranks in a point-to-point deadlock."""
        waited = [
            e for e in last if e is not None and e.blocked and now - e.started >= self.seconds
        ]
        if len(waited) < 2:
            return
        world = self.world
        recent = read(world, None, last=RECENT)
        gone = gone_ranks(world.world_size, set(busy), dict(world.states()))
        ranks, lines = deadlock_lines(recent, world.world_size, gone, now)
        if not lines:
            return
        self.said = True
        world.hang = "\n".join(lines)
        world.notices.changed()
        print(
            f"distcomp: {format_ranks(ranks)} of {world.name!r} hang while other ranks run: "
            f"{'; '.join(lines)}. The cell keeps waiting. To get out: interrupt the kernel, "
            f"then `%distcomp restart {world.name} --replay`.",
            file=sys.stderr,
            flush=True,
        )


def stuck_fix(world: World, still: list[int]) -> str:
    """What to do about ranks that did not stop on SIGINT: the one advice that works."""
    blocked = blocked_ranks(world, still)
    where = (
        "blocked inside a collective or point-to-point call, which SIGINT cannot end"
        if blocked
        else "blocked in C code, e.g. a collective another rank never entered"
    )
    return (
        f"{format_ranks(still)} did not stop on SIGINT ({where}). Fix: "
        f"{replay_advice(world.name)} (`%distcomp restart {world.name}` alone loses the "
        "ranks' variables)."
    )


def replay_advice(name: str) -> str:
    """The way out through a replay, with what a replay cannot undo."""
    return (
        f"`%distcomp restart {name} --replay` starts fresh ranks and runs again the cells "
        "that succeeded, after listing them and asking (files they wrote are written again; "
        "randomness, time and debugger edits are not restored)"
    )


def busy_message(world: World, busy: list[int], background: bool = False) -> str:
    """Ranks still busy with an earlier cell, and the way out that works for them."""
    name = world.name
    blocked = blocked_ranks(world, busy)
    if background:
        text = f"{format_ranks(busy)} of {name!r} are busy with a background cell."
        way = f"`%distcomp wait {name}` waits for it, `%distcomp interrupt {name}` stops it."
    else:
        text = (
            f"{format_ranks(busy)} of {name!r} are still busy with an earlier cell (it timed "
            "out or was interrupted)."
        )
        way = f"`%distcomp interrupt {name}` (SIGINT), or {replay_advice(name)}."
    if blocked:
        return text + (
            f" {format_ranks(blocked)} are blocked inside a collective or point-to-point "
            f"call, which SIGINT cannot end. Fix: {replay_advice(name)}."
        )
    return f"{text} Fix: {way}"
