"""The marked state lines our rank side writes into a rank's log, read back.

A line ``[distcomp rank-state] {json}`` says, at one moment, what one rank was doing:
``{"v": 1, "rank", "size", "local_rank", "node", "host", "pid", "reason": "stall" |
"sigterm" | "failure" | "exit", "time", "stalled", "threads": [{"name", "main", "frames":
[{"file", "line", "function", "code"}]}], "calls": [ledger Entry as a dict, ...],
"error"}`` (frames outermost first; ``calls`` are ``dataclasses.asdict`` of the rank's last
ledger entries, rank_side/ledger.py). A rank may write several: the last one counts, but a
stall's stack is kept when a later line (a SIGTERM's) has none. A line cut off or
damaged is skipped with a note, never an error.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from typing import Any

from ...rank_side.ledger_words import Entry

MARK = "[distcomp rank-state] "
REASONS = ("stall", "sigterm", "failure", "exit")
_ENTRY_FIELDS = {f.name for f in dataclasses.fields(Entry)}


def parse_state_line(text: str) -> dict | None:
    """The state a line (or any text holding one marked line) carries, as a dict; None when
    it holds no marked line, or the JSON after the mark is damaged or not a rank's state."""
    at = text.find(MARK)
    if at < 0:
        return None
    body = text[at + len(MARK) :].split("\n", 1)[0].strip()
    try:
        state = json.loads(body)
    except ValueError:
        return None
    if not isinstance(state, dict) or state.get("v") != 1:
        return None
    rank = state.get("rank")
    if not isinstance(rank, int) or isinstance(rank, bool) or rank < 0:
        return None
    if state.get("reason") not in REASONS:
        return None
    return state


def without_state_lines(text: str) -> str:
    """``text`` with every marked state line left out (what a person reads of a log): a line
    that is all state goes, text before a mark on its line stays."""
    if MARK not in text:
        return text
    kept = []
    for line in text.split("\n"):
        at = line.find(MARK)
        if at < 0:
            kept.append(line)
        elif line[:at].strip():
            kept.append(line[:at].rstrip())
    return "\n".join(kept)


@dataclass
class RankState:
    """A rank's last state, with the ledger entries and main-thread frames read from it."""

    rank: int
    raw: dict
    calls: list[Entry] = field(default_factory=list)
    #: the main thread's frames, outermost first (dicts as written)
    frames: list[dict] = field(default_factory=list)
    #: the stack came from an earlier stall line (the last line had none)
    stack_from_stall: bool = False

    @property
    def reason(self) -> str:
        return str(self.raw.get("reason"))

    @property
    def time(self) -> float:
        value = self.raw.get("time")
        return float(value) if isinstance(value, int | float) else 0.0

    @property
    def error(self) -> str:
        return str(self.raw.get("error") or "")

    def get_int(self, key: str) -> int | None:
        value = self.raw.get(key)
        return value if isinstance(value, int) and not isinstance(value, bool) else None


def _entry(call: Any) -> Entry | None:
    if not isinstance(call, dict):
        return None
    try:
        return Entry(**{k: v for k, v in call.items() if k in _ENTRY_FIELDS})
    except TypeError:
        return None


def _main_frames(state: dict) -> list[dict]:
    threads = state.get("threads")
    if not isinstance(threads, list):
        return []
    mains = [t for t in threads if isinstance(t, dict) and t.get("main")] or [
        t for t in threads if isinstance(t, dict)
    ][:1]
    frames = mains[0].get("frames") if mains else None
    return [f for f in frames if isinstance(f, dict)] if isinstance(frames, list) else []


def read_states(text: str, where: str) -> tuple[dict[int, list[dict]], list[str]]:
    """Every state line in ``text``, in order, by rank; and a note for each damaged one
    (``where`` names the log in it)."""
    found: dict[int, list[dict]] = {}
    notes: list[str] = []
    at = text.find(MARK)
    while at >= 0:
        end = text.find("\n", at)
        line = text[at : end if end >= 0 else len(text)]
        state = parse_state_line(line)
        if state is None:
            notes.append(
                f"a damaged state line in {where} was skipped ({line[len(MARK) :][:60]!r}...)"
            )
        else:
            found.setdefault(state["rank"], []).append(state)
        at = text.find(MARK, at + len(MARK))
    return found, notes


def last_states(found: dict[int, list[dict]]) -> dict[int, RankState]:
    """Each rank's last state; its stack and calls from an earlier line when the last has
    none (a SIGTERM line after a stall)."""
    result: dict[int, RankState] = {}
    for rank, states in found.items():
        states = sorted(states, key=lambda s: s.get("time") or 0)
        last = states[-1]
        chosen = RankState(rank, last)
        chosen.frames = _main_frames(last)
        if not chosen.frames:
            earlier = next((s for s in reversed(states[:-1]) if _main_frames(s)), None)
            if earlier is not None:
                chosen.frames = _main_frames(earlier)
                chosen.stack_from_stall = earlier.get("reason") == "stall"
        source = last if isinstance(last.get("calls"), list) and last["calls"] else None
        if source is None:
            source = next(
                (s for s in reversed(states) if isinstance(s.get("calls"), list) and s["calls"]),
                last,
            )
        chosen.calls = [e for e in map(_entry, source.get("calls") or []) if e is not None]
        result[rank] = chosen
    return result
