"""The sections under a diagnosis's verdict: each failure's traceback (identical ones once,
with their ranks), the errors that only followed it, what the launchers said, and the
ranks whose logs show no error."""

from __future__ import annotations

from ...rank_side.ledger_words import format_ranks
from .classify import CONSEQUENCE, NONE, PEER_GONE, STOPPED, TIMEOUT, RankEnd, cpu_bytes, size_text
from .model import Layout, Section
from .reading import JobRead

#: distinct last lines listed for the ranks that show no error
_QUIET_GROUPS = 8
_WHY = {
    PEER_GONE: "lost a peer",
    TIMEOUT: "timed out waiting",
    STOPPED: "stopped by a signal",
}


def _what(end: RankEnd) -> str:
    if end.kind == "gpu-oom":
        return "CUDA out of memory"
    if end.kind == "cpu-oom":
        asked = cpu_bytes(end.traceback.full_text if end.traceback else end.evidence)
        return "CPU out of memory" + (f" (asked for {size_text(asked)})" if asked else "")
    return end.traceback.kind if end.traceback and end.traceback.kind else "failed"


def failure_sections(layout: Layout, job: JobRead, ordered: list[int]) -> list[Section]:
    """Each distinct failure (its traceback, the user's frames) once, headed by its ranks
    with their labels, in the order they failed."""
    groups: dict[tuple[str, ...], list[int]] = {}
    for rank in ordered:
        end = job.ranks[rank].end
        lines = end.traceback.shown() if end.traceback else [end.evidence]
        groups.setdefault(tuple(lines), []).append(rank)
    sections = []
    for shown, ranks in groups.items():
        end = job.ranks[ranks[0]].end
        labels = " ".join(layout.label(r) for r in ranks[:4]) + (" ..." if len(ranks) > 4 else "")
        heading = f"{format_ranks(ranks)}: {_what(end)}, its own error  {labels}"
        sections.append(Section(heading, list(shown)))
    return sections


def consequence_sections(job: JobRead, ranks: list[int], cause: str) -> list[Section]:
    """The errors that only followed another's, alike ones once (by what, where and the
    words that decided, an address or a port aside), each with one rank's exception:
    ``ranks 0-2: lost a peer in all_reduce at train.py:8: Connection closed by peer``."""
    alike: dict[str, list[int]] = {}
    for rank in ranks:
        end = job.ranks[rank].end
        where = ""
        if end.traceback is not None:
            call = end.traceback.library_function()
            where = f" in {call}" if call else ""
            where += f" at {end.place}" if end.place else ""
        words = end.words or end.error
        alike.setdefault(f"{_WHY.get(end.kind, end.kind)}{where}: {words}", []).append(rank)
    if not alike:
        return []
    heading = (
        f"{format_ranks(ranks)}: ended by {cause}'s failure"
        if cause
        else f"{format_ranks(ranks)}: errors that follow another rank's"
    )
    lines = []
    for words, alike_ranks in alike.items():
        lines.append(f"{format_ranks(alike_ranks)}: {words}")
        error = job.ranks[alike_ranks[0]].end.error
        if error and error != words:
            shown = error if len(error) < 240 else error[:237] + "..."
            lines.append(f"    rank {alike_ranks[0]}: {shown}")
    return [Section(heading, lines)]


def launcher_sections(job: JobRead, ends: dict[int, RankEnd]) -> list[Section]:
    """torchrun's table and Open MPI's words, with a warning where torchrun's "first
    observed failure" is only a rank that followed another's."""
    lines = []
    for exit_ in job.exits:
        code = f"exit code {exit_.code}" if exit_.code is not None else exit_.signal
        if exit_.signal and exit_.code is not None:
            code = f"{exit_.signal} (exit code {exit_.code})"
        if exit_.source == "torchrun":
            what = "first observed failure" if exit_.root_cause else "failure"
            line = f"torchrun, {what}: rank {exit_.rank} (local rank {exit_.local_rank}), {code}"
            line += f", host {exit_.host}" if exit_.host else ""
            end = ends.get(exit_.rank)
            if exit_.root_cause and end is not None and end.side == CONSEQUENCE:
                line += (
                    " - torchrun names the first exit it noticed; this rank only followed "
                    "another's failure"
                )
        else:
            line = f"Open MPI: rank {exit_.rank}, {code}"
        lines.append(line)
    return [Section("what the launchers said", lines)] if lines else []


def quiet_sections(job: JobRead) -> list[Section]:
    """The ranks whose logs show no error, by their last line (alike ones once)."""
    quiet = [r for r, read in sorted(job.ranks.items()) if read.end.side == NONE]
    if not quiet:
        return []
    by_last: dict[str, list[int]] = {}
    for rank in quiet:
        by_last.setdefault(job.ranks[rank].last_line[:160], []).append(rank)
    lines = [
        f"{format_ranks(ranks)}: last line {last!r}"
        if last
        else f"{format_ranks(ranks)}: no line of {'its' if len(ranks) == 1 else 'their'} own"
        for last, ranks in list(by_last.items())[:_QUIET_GROUPS]
    ]
    if len(by_last) > _QUIET_GROUPS:
        lines.append(f"... and {len(by_last) - _QUIET_GROUPS} more distinct last lines")
    whose = "its log" if len(quiet) == 1 else "their logs"
    return [Section(f"{format_ranks(quiet)}: no error in {whose}", lines)]
