"""The collective the ranks timed out in, from their logs alone: PyTorch's NCCL watchdog
lines, and gloo's time-out errors.

The NCCL lines come from torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp (torch 2.x):
``WorkNCCL::checkTimeout`` logs ``[Rank R] Watchdog caught collective operation timeout:
WorkNCCL(SeqNum=S, OpType=OP, NumelIn=N, NumelOut=N, Timeout(ms)=T) ran for M milliseconds
before timing out.`` (``operator<<(std::ostream&, const WorkNCCL&)`` writes the
``WorkNCCL(...)`` part), and the watchdog loop logs ``[PG ID 0 PG GUID 0(default_pg) Rank
R]  failure detected by watchdog at work sequence id: S PG status: last enqueued work: E,
last completed work: C``. A rank that has no such line, or whose sequence number or
operation differs from the others', is the one they waited for.

gloo's errors name no sequence number (``Timed out waiting 3000ms for recv operation to
complete``, ProcessGroupGloo's transport); the collective is the library function the
user's frame called, and its place is the user's frame.

Horovod has no time-out; its stall inspector (core/horovod_stall.py) names the ranks that
have not submitted a tensor the others wait with.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ...rank_side.ledger_words import format_ranks
from ..horovod_stall import read_stalls, stall_lines
from .classify import TIMEOUT, RankEnd

_WATCHDOG = re.compile(
    r"\[Rank (?P<rank>\d+)\] Watchdog caught collective operation timeout: "
    r"WorkNCCL\(SeqNum=(?P<seq>\d+), OpType=(?P<op>\w+), NumelIn=(?P<numel_in>-?\d+), "
    r"NumelOut=(?P<numel_out>-?\d+), Timeout\(ms\)=(?P<timeout>\d+)\) ran for "
    r"(?P<ran>\d+) milliseconds before timing out"
)
_FAILURE = re.compile(
    r"\[PG ID (?P<pg_id>\S+) PG GUID (?P<guid>[^\s(\]]+)(?:\((?P<desc>[^)]*)\))? "
    r"Rank (?P<rank>\d+)\]\s+failure detected by watchdog at work sequence id: (?P<seq>\d+)"
    r" PG status: last enqueued work: (?P<enqueued>-?\d+), last completed work: "
    r"(?P<completed>-?\d+)"
)
_GLOO_WAIT = re.compile(r"Timed out waiting (\d+)ms for (\w+) operation")


@dataclass
class Watchdog:
    """One rank's NCCL watchdog time-out."""

    rank: int
    seq: int
    op: str
    timeout_ms: int
    ran_ms: int
    numel: int
    group: str = ""  # "default_pg", from the "failure detected" line
    enqueued: int | None = None
    completed: int | None = None


def watchdog_lines(rank: int, lines: list[str]) -> Watchdog | None:
    """The first NCCL watchdog time-out in ``rank``'s lines, with its process group."""
    found: Watchdog | None = None
    for line in lines:
        if "Watchdog caught" in line and found is None:
            match = _WATCHDOG.search(line)
            if match:
                found = Watchdog(
                    rank,
                    int(match["seq"]),
                    match["op"],
                    int(match["timeout"]),
                    int(match["ran"]),
                    int(match["numel_in"]),
                )
        elif "failure detected by watchdog" in line and found is not None:
            match = _FAILURE.search(line)
            if match and int(match["seq"]) == found.seq:
                found.group = match["desc"] or f"process group {match['guid']}"
                found.enqueued = int(match["enqueued"])
                found.completed = int(match["completed"])
                break
    return found


def nccl_verdict(
    found: dict[int, Watchdog], world: list[int], ends: dict[int, RankEnd]
) -> tuple[str, list[int]]:
    """``ranks 0-62 waited in ALLREDUCE #812 (default_pg) for 600 s; rank 63 never reached
    it``, and the ranks named as the ones waited for."""
    sides: dict[tuple[str, int, str], list[int]] = {}
    for rank, watch in sorted(found.items()):
        sides.setdefault((watch.group, watch.seq, watch.op), []).append(rank)
    (group, seq, op), waiting = max(sides.items(), key=lambda item: (len(item[1]), -item[1][0]))
    first = found[waiting[0]]
    where = f" ({group})" if group else ""
    text = (
        f"{format_ranks(waiting)} waited in {op} #{seq}{where} for {first.ran_ms / 1000:.0f} s "
        f"(NCCL watchdog, time-out {first.timeout_ms / 1000:.0f} s)"
    )
    named: list[int] = []
    for (other_group, other_seq, other_op), ranks in sides.items():
        if (other_group, other_seq, other_op) == (group, seq, op):
            continue
        named += ranks
        earlier = "an earlier" if other_seq < seq else "a later"
        text += f"; {format_ranks(ranks)} timed out in {other_op} #{other_seq} instead" + (
            f" ({earlier} call)" if other_group == group and other_op == op else ""
        )
    absent = [r for r in world if r not in found]
    if absent:
        named += absent
        text += f"; {format_ranks(absent)} never reached it"
    return text, sorted(named)


@dataclass
class GlooWait:
    """A rank that timed out in a gloo collective."""

    rank: int
    call: str  # all_reduce
    place: str  # train.py:8 in step
    code: str  # dist.all_reduce(t)
    timeout_ms: int


def gloo_wait(end: RankEnd) -> GlooWait | None:
    """The collective a rank's gloo time-out came out of, from its traceback."""
    if end.kind != TIMEOUT or end.traceback is None:
        return None
    match = _GLOO_WAIT.search(end.traceback.full_text)
    if not match:
        return None
    mine = end.traceback.user_frames()
    code = mine[-1].code if mine else ""
    call = end.traceback.library_function() or "a collective"
    return GlooWait(end.rank, call, end.traceback.place(), code, int(match[1]))


def gloo_verdict(found: dict[int, GlooWait], world: list[int]) -> tuple[str, list[int]]:
    """``ranks 0, 2 timed out after 3 s in all_reduce at train.py:8 (gloo); rank 1 did not
    reach it``, and the ranks named as the ones waited for."""
    sides: dict[tuple[str, str], list[int]] = {}
    for rank, wait in sorted(found.items()):
        sides.setdefault((wait.call, wait.place), []).append(rank)
    parts = []
    for (call, place), ranks in sides.items():
        seconds = found[ranks[0]].timeout_ms / 1000
        parts.append(
            f"{format_ranks(ranks)} timed out after {seconds:g} s in {call} at {place} (gloo)"
        )
    absent = [r for r in world if r not in found]
    text = "; ".join(parts)
    if absent:
        text += f"; {format_ranks(absent)} did not time out: the one{'s' if len(absent) > 1 else ''} they waited for"
    return text, absent


def horovod_verdict(lines: dict[int, list[str]]) -> tuple[str, list[int]]:
    """The last message of Horovod's stall inspector in the ranks' ``lines`` (its
    coordinator writes it, rank 0 of the world or of a process set): its words, and the
    ranks it names as missing; ``("", [])`` where there is none."""
    for rank in sorted(lines):
        text = "\n".join(lines[rank][-2000:])
        stalls = read_stalls(text) if "Missing ranks:" in text else []
        if stalls:
            return "; ".join(stall_lines(stalls[-1])), sorted(stalls[-1].missing)
    return "", []
