"""Horovod's stall inspector, read: which ranks never submitted which tensors.

Horovod's coordinator (rank 0 of each process set) logs, when tensors have waited longer
than ``HOROVOD_STALL_CHECK_TIME_SECONDS`` (60 by default) for some ranks to submit them,
one message over several lines (horovod/common/stall_inspector.cc, 0.28.1)::

    [2026-11-29 05:10:00.123456: W horovod/common/stall_inspector.cc:107] One or more
    tensors were submitted to be reduced, gathered or broadcasted by subset of ranks and are
    waiting for remainder of ranks for more than 60 seconds. This may indicate that ...
    Missing ranks:
    1: [allreduce.noname.12]
    2!: [allreduce.fc.weight, allreduce.fc.bias]
    One or more rank (marked by "!") is stalled for longer than 120 seconds. Will shutdown.

(the first line as one line, an ``E`` in place of the ``W`` when it shuts down; at most six
names a rank, then `` ...``). The lines may carry a rank label in front (``[rank 0]``, as our
command runs and Azure ML's logs show them). This reads them into :class:`Stall` and says
them in the words of the ledger's verdicts, with the place of each tensor's call where the
ledger knows it (ledger_horovod.py names calls as Horovod does).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from ..rank_side.ledger_words import Entry, format_ranks

_HEAD = re.compile(
    r"One or more tensors were submitted to be reduced, gathered or broadcasted by subset "
    r"of ranks and are waiting for remainder of ranks for more than (\d+) seconds"
)
_MISSING = re.compile(r"(?:^|\s)(\d+)(!?): \[([^\]]*)\]\s*$")
_SHUTDOWN = re.compile(r"stalled for longer than (\d+) seconds\. Will shutdown")
WHO = "Horovod's stall inspector"


@dataclass
class Stall:
    """One message of the stall inspector."""

    seconds: int  # the tensors waited longer than this
    #: rank -> the tensors it has not submitted (Horovod names at most six; "..." for more)
    missing: dict[int, list[str]] = field(default_factory=dict)
    shutdown: list[int] = field(default_factory=list)  # the ranks marked "!"
    shutdown_seconds: int = 0


def read_stalls(text: str) -> list[Stall]:
    """Every stall inspector message in ``text``, in order."""
    stalls: list[Stall] = []
    current: Stall | None = None
    listing = False
    for line in text.splitlines():
        head = _HEAD.search(line)
        if head:
            current = Stall(int(head.group(1)))
            stalls.append(current)
            listing = False
            continue
        if current is None:
            continue
        if line.rstrip().endswith("Missing ranks:"):
            listing = True
            continue
        if listing:
            found = _MISSING.search(line)
            if found:
                rank = int(found.group(1))
                listed = found.group(3)
                more = listed.endswith(" ...")
                names = [n.strip() for n in listed.removesuffix(" ...").split(",") if n.strip()]
                names += ["..."] if more else []
                current.missing[rank] = names
                if found.group(2):
                    current.shutdown.append(rank)
                continue
            listing = False
        shutdown = _SHUTDOWN.search(line)
        if shutdown:
            current.shutdown_seconds = int(shutdown.group(1))
            current = None
    return [s for s in stalls if s.missing]


def _places(ledgers: dict[int, list[Entry]]) -> dict[str, tuple[Entry, list[int]]]:
    """Horovod's tensor name -> one call of it in the ledgers and the ranks that made it."""
    places: dict[str, tuple[Entry, list[int]]] = {}
    for rank, entries in sorted(ledgers.items()):
        for entry in entries:
            _, _, name = entry.root.rpartition("name ")
            if not name or not entry.op.startswith("hvd."):
                continue
            known = places.get(name)
            if known is None:
                places[name] = (entry, [rank])
            elif rank not in known[1]:
                known[1].append(rank)
    return places


def stall_lines(stall: Stall, ledgers: dict[int, list[Entry]] | None = None) -> list[str]:
    """One line per set of tensors the same ranks have not submitted, e.g. ``rank 1 has not
    submitted allreduce.noname.12 for more than 60 s (ranks 0, 2-3 called it at
    train.py:14 in step)``, and the shutdown, if Horovod said one."""
    by_names: dict[tuple[str, ...], list[int]] = {}
    for rank, missing in sorted(stall.missing.items()):
        by_names.setdefault(tuple(missing), []).append(rank)
    places = _places(ledgers or {})
    lines = []
    for names, ranks in by_names.items():
        verb = "has" if len(ranks) == 1 else "have"
        line = (
            f"{WHO}: {format_ranks(ranks)} {verb} not submitted {', '.join(names)} "
            f"for more than {stall.seconds} s"
        )
        called = [places[n] for n in names if n in places]
        if called:
            entry, callers = called[0]
            line += f" ({format_ranks(callers)} called it at {entry.site()})"
        lines.append(line)
    if stall.shutdown:
        lines.append(
            f"{WHO}: Horovod shuts down, as {format_ranks(stall.shutdown)} stalled for longer "
            f"than {stall.shutdown_seconds} s (HOROVOD_STALL_SHUTDOWN_TIME_SECONDS)"
        )
    return lines


def last_stall_lines(text: str, ledgers: dict[int, list[Entry]] | None = None) -> list[str]:
    """The words of the last stall inspector message in ``text``; [] where it has none."""
    stalls = read_stalls(text)
    return stall_lines(stalls[-1], ledgers) if stalls else []


def pending_stall_lines(text: str, ledgers: dict[int, list[Entry]]) -> list[str]:
    """The last stall inspector message in ``text``, of the tensors that some rank's ledger
    shows still pending (a message about tensors done since is no longer true)."""
    stalls = read_stalls(text)
    if not stalls:
        return []
    pending = {
        entry.root.rpartition("name ")[2]
        for entries in ledgers.values()
        for entry in entries
        if entry.running and entry.op.startswith("hvd.")
    }
    last = stalls[-1]
    missing = {r: names for r, names in last.missing.items() if pending.intersection(names)}
    if not missing:
        return []
    shutdown = [r for r in last.shutdown if r in missing]
    return stall_lines(Stall(last.seconds, missing, shutdown, last.shutdown_seconds), ledgers)
