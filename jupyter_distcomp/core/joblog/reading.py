"""Each rank's log read once: its lines (torch's rank labels taken off; a log holding
several ranks' lines, as torchrun's per node, split by them), its state lines, how it
ends, its watchdog or gloo time-out, and what the launchers said of the ranks."""

from __future__ import annotations

from dataclasses import dataclass, field

from .classify import RankEnd, classify
from .launchers import Exit, mpi_exits, torchrun_exits
from .model import RankLog
from .state import MARK, RankState, last_states, read_states
from .tracebacks import RANK_LABEL
from .watchdog import GlooWait, Watchdog, gloo_wait, watchdog_lines


@dataclass
class RankRead:
    """One rank, as its log tells it."""

    rank: int
    lines: list[str]
    name: str = ""
    role: str = ""
    end: RankEnd = field(default_factory=lambda: RankEnd(-1))
    watchdog: Watchdog | None = None
    gloo: GlooWait | None = None

    @property
    def last_line(self) -> str:
        """The last line it printed (not a state line)."""
        for line in reversed(self.lines):
            if line.strip() and MARK not in line:
                return line.strip()
        return ""


@dataclass
class JobRead:
    """Every rank read, with what the launchers and the state lines said."""

    ranks: dict[int, RankRead] = field(default_factory=dict)
    states: dict[int, RankState] = field(default_factory=dict)
    exits: list[Exit] = field(default_factory=list)
    #: the lines no rank printed: launchers' logs, a node log's unlabelled lines
    launcher_text: str = ""
    notes: list[str] = field(default_factory=list)
    skipped: list[int] = field(default_factory=list)
    size: int = 0


def _split(log: RankLog) -> tuple[dict[int, list[str]], list[str]]:
    """``{rank: lines}`` of a log and the lines that belong to no rank (a node log's)."""
    if "[rank" not in log.text:
        return {log.rank: log.text.splitlines()}, []
    labelled: dict[int, list[str]] = {}
    plain: list[str] = []
    in_order: list[str] = []
    for line in log.text.splitlines():
        match = RANK_LABEL.match(line) if line.startswith("[rank") else None
        if match:
            labelled.setdefault(int(match[1]), []).append(line[match.end() :])
            in_order.append(line[match.end() :])
        else:
            plain.append(line)
            in_order.append(line)
    if set(labelled) <= {log.rank}:  # one process's log: its own label, kept in order
        return {log.rank: in_order}, []
    return labelled, plain


def read_job(logs: list[RankLog], launcher_logs: dict[str, str] | None = None) -> JobRead:
    """Read every log (see the module's text)."""
    job = JobRead()
    found_states: dict[int, list[dict]] = {}
    launcher = [text for text in (launcher_logs or {}).values()]
    for log in logs:
        where = log.name or f"rank {log.rank}'s log"
        states, notes = read_states(log.text, where)
        job.notes += notes
        for rank, items in states.items():
            found_states.setdefault(rank, []).extend(items)
        if log.skipped:
            job.skipped.append(log.rank)
        by_rank, plain = _split(log)
        if plain:
            launcher.append("\n".join(plain))
        for rank, lines in by_rank.items():
            seen = job.ranks.get(rank)
            if seen is not None:  # a rank in two logs: both its parts, in file order
                seen.lines += lines
                continue
            job.ranks[rank] = RankRead(rank, lines, log.name, log.role)
    job.states = last_states(found_states)
    for rank, each in job.ranks.items():
        each.end = classify(rank, each.lines)
        each.watchdog = watchdog_lines(rank, each.lines[-2000:])
        each.gloo = gloo_wait(each.end)
    job.launcher_text = "\n".join(launcher)
    job.exits = torchrun_exits(job.launcher_text) + mpi_exits(job.launcher_text)
    for one in list(job.ranks.values()):
        job.exits += mpi_exits("\n".join(one.lines[-300:]))
    known: list[int] = [*job.ranks, *job.states, *(e.rank for e in job.exits)]
    sizes = [s.get_int("size") or 0 for s in job.states.values()]
    job.size = max([max(known) + 1, *sizes])
    for rank in range(job.size):  # a rank no log has lines of (a node log's silent rank)
        if rank not in job.ranks:
            job.ranks[rank] = RankRead(rank, [])
            job.ranks[rank].end = classify(rank, [])
    return job
