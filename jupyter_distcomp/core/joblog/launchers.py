"""What the launchers say about their ranks: torchrun's (torch.distributed.elastic) failure
report and Open MPI's mpirun / prterun messages.

torchrun ends a failed run with ``ChildFailedError`` and a table: ``Failures:`` and ``Root
Cause (first observed failure):``, each entry ``rank : 3 (local_rank: 1)``, ``exitcode :
1 (pid: ...)``, ``host``, ``time`` (torch/distributed/elastic/multiprocessing/errors). Its
"first observed failure" is the first exit the agent noticed, which may be a rank that
only timed out waiting for the real culprit; the report says so when the ranks' own logs
disagree. Open MPI (4's mpirun and 5's prterun, same words): ``... detected that one or
more processes exited with non-zero status ... The first process to do so was: Process
name: [[x,y],3] Exit code: 1`` (5: ``[prterun-host-pid@1,3]``), ``MPI_ABORT was invoked on
rank 3``, ``... noticed that process rank 3 with PID ... exited on signal 9 (Killed)``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_ENTRY = re.compile(
    r"^\s*\[\d+\]:\s*\n(?P<body>(?:\s+\w[\w ]*?\s*:.*\n?)+)",
    re.M,
)
_FIELD = re.compile(r"^\s+(?P<key>\w[\w ]*?)\s*:\s?(?P<value>.*)$", re.M)
_RANK_FIELD = re.compile(r"(\d+) \(local_rank: (\d+)\)")
_EXIT_FIELD = re.compile(r"(-?\d+)")
#: on text whose runs of spaces and line breaks are one space each (Open MPI wraps its
#: messages at about 70 columns)
_FIRST = re.compile(
    r"The first process to do so was: Process name: \[(?:\[[\d,]+\]|[^\],]*),(?P<rank>\d+)\]"
    r" Exit code: (?P<code>-?\d+)"
)
_ABORT = re.compile(r"MPI_ABORT was invoked on rank (?P<rank>\d+) in communicator")
_SIGNAL = re.compile(
    r"(?:mpirun|prterun|mpiexec) noticed that process rank (?P<rank>\d+) with PID \d+ on node "
    r"(?P<node>\S+) exited on signal (?P<signal>\d+) \((?P<name>[^)]*)\)"
)
_KILLED = re.compile(r"^(?:.*line \d+:\s+)?\d+ Killed\s", re.M)
#: the kernel's words for its out-of-memory killer
OOM_WORDS = re.compile(
    r"Out of memory: Killed process|oom-kill|OOMKilled|oom_reaper|Memory cgroup out of memory"
)


@dataclass
class Exit:
    """One process's end as a launcher saw it."""

    rank: int
    code: int | None = None  # exit code; negative: the signal's number
    signal: str = ""  # "SIGTERM", "Killed"
    local_rank: int | None = None
    host: str = ""
    time: str = ""  # torchrun's "2026-11-29_03:09:22"
    root_cause: bool = False  # torchrun's "first observed failure"
    source: str = ""  # "torchrun", "mpirun"


def torchrun_exits(text: str) -> list[Exit]:
    """The entries of torchrun's failure table (its root cause marked)."""
    at = text.rfind("ChildFailedError")
    if at < 0:
        return []
    report = text[at:]
    root_at = report.find("Root Cause (first observed failure):")
    exits = []
    for match in _ENTRY.finditer(report):
        fields = {f["key"].strip(): f["value"].strip() for f in _FIELD.finditer(match["body"])}
        rank = _RANK_FIELD.match(fields.get("rank", ""))
        if not rank:
            continue
        code = _EXIT_FIELD.match(fields.get("exitcode", ""))
        value = int(code[1]) if code else None
        signal = ""
        if value is not None and value < 0:
            named = re.search(r"Signal \d+ \((\w+)\)", fields.get("traceback", ""))
            signal = named[1] if named else f"signal {-value}"
        exits.append(
            Exit(
                int(rank[1]),
                value,
                signal,
                int(rank[2]),
                fields.get("host", ""),
                fields.get("time", ""),
                root_at >= 0 and match.start() > root_at,
                "torchrun",
            )
        )
    return exits


def mpi_exits(text: str) -> list[Exit]:
    """What mpirun / prterun (and an aborting rank) said of the ranks' ends."""
    if "MPI_ABORT" not in text and "mpirun" not in text and "prterun" not in text:
        return []
    text = " ".join(text.split())
    exits = []
    for match in _ABORT.finditer(text):
        exits.append(Exit(int(match["rank"]), None, "MPI_ABORT", source="mpirun", root_cause=True))
    for match in _FIRST.finditer(text):
        exits.append(Exit(int(match["rank"]), int(match["code"]), source="mpirun", root_cause=True))
    for match in _SIGNAL.finditer(text):
        exits.append(
            Exit(
                int(match["rank"]),
                -int(match["signal"]),
                match["name"],
                host=match["node"],
                source="mpirun",
                root_cause=True,
            )
        )
    return exits


def per_node(exits: list[Exit]) -> int | None:
    """The processes per node that ``rank - local_rank`` of torchrun's entries allow: the
    smallest count above every local rank that divides each difference; None when the
    entries cannot tell (every local rank 0, or none)."""
    pairs = [(e.rank, e.local_rank) for e in exits if e.local_rank is not None]
    if not pairs or max(local for _, local in pairs) == 0:
        return None
    low = max(local for _, local in pairs) + 1
    for count in range(low, max(rank for rank, _ in pairs) + 2):
        if all((rank - local) % count == 0 for rank, local in pairs):
            return count
    return None


def killed_by_shell(text: str) -> bool:
    """A shell's ``Killed`` line (its child ended by SIGKILL)."""
    return bool(_KILLED.search(text))
