"""``%distcomp follow JOB``: an Azure ML job's ranks in the cell, as a local run shows them.

Every rank's lines labelled as ``%distcomp command`` labels them, tracebacks once for all the
ranks that printed them (azureml/logs/follow.py), the job's state as one line updated in
place (an IPython display with a ``display_id``; where displays cannot update, a new line
per change), and at the end, for a failed job, the summary in the words of a local run's
failure (``local/command/result.failure_message``): which rank failed and how, which ranks
were only ended by it. Interrupting stops the following, never the job.

What the follow reads is kept in the kernel's folder for the job (``Session.job_logs``);
:func:`failure_summary` is the one place that turns it into that summary: the diagnosis of
every rank's whole log (core/joblog: which ranks failed on their own, first one first, which
were only ended by that, and what our rank side's state lines, out-of-memory and watchdog
lines add), in a local run's words, with Azure ML's error of the run.
"""

from __future__ import annotations

import re
import shlex
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..core.joblog.state import without_state_lines
from ..core.secrets import mask_secrets
from ..errors import AzureMLError
from ..local.command.result import failure_message, rank_status

#: Azure ML's error of a failed run names the process that failed first
_FIRST = re.compile(r"User process 'Rank (\d+)' exited with status code (-?\d+)")


@dataclass
class _Rank:
    """One rank as the summary words it (the shape ``failure_message`` reads)."""

    rank: int
    node: int
    returncode: int | None = None
    stopped: bool = False
    raised: bool = False
    pid: int | None = None
    stdout_tail: list[str] = field(default_factory=list)
    stderr_tail: list[str] = field(default_factory=list)
    tail_name: str = "its log"

    @property
    def status(self) -> str:
        if self.returncode is not None:
            return rank_status(self)
        return "raised an exception" if self.raised else "stopped"


@dataclass
class _Result:
    component: str
    ranks: list[_Rank]
    argv: list[str]
    cwd: str
    timed_out: list[int] = field(default_factory=list)
    launcher_tail: list[str] = field(default_factory=list)
    #: the job's inputs are not in its logs: its command line is masked by flag names only
    inputs: dict[str, Any] = field(default_factory=dict)

    @property
    def failed(self) -> list[_Rank]:
        return [r for r in self.ranks if not r.stopped]


def failure_summary(outcome: Any, diagnosis: Any = None) -> str:
    """What a failed job's logs say, in the words of a local ``%distcomp command`` failure.

    ``diagnosis`` (core/joblog, read from every rank's whole log) decides which ranks failed
    on their own (first one first) and which were only ended by that; without it, a rank
    whose last words were a traceback counts as failed. Azure ML's error of the run gives
    the exit code of the process it names."""
    facts = outcome.facts
    first = _FIRST.search(outcome.error or "")
    culprits = set(diagnosis.culprits) if diagnosis is not None and diagnosis.culprits else None
    ranks = []
    for rank in range(max(len(facts.places()), max(outcome.ranks, default=-1) + 1)):
        seen = outcome.ranks.get(rank)
        failed = rank in culprits if culprits is not None else seen is not None and seen.raised
        code = None
        if first is not None and int(first[1]) == rank:
            failed, code = True, int(first[2])
        ranks.append(
            _Rank(
                rank,
                facts.node_of(rank),
                returncode=code,
                stopped=not failed,
                raised=failed and code is None,
                stdout_tail=list(seen.tail) if seen is not None else [],
            )
        )
    failing = [r for r in ranks if not r.stopped]
    if culprits is not None and failing:  # the diagnosis's order: the first failure first
        order = {rank: i for i, rank in enumerate(diagnosis.culprits)}
        failing.sort(key=lambda r: order.get(r.rank, len(order)))
        ranks = failing + [r for r in ranks if r.stopped]
    lines = []
    if not failing:
        lines.append(f"`{facts.name}` failed; no rank's log ends with a traceback.")
    if first is not None and len(failing) > 1:
        lines.append(f"rank {first[1]} failed first (Azure ML names it in the run's error).")
    try:
        argv = shlex.split(facts.command)
    except ValueError:
        argv = [facts.command]
    result = _Result(facts.name, ranks, argv, f"compute {facts.compute or '?'}")
    text = failure_message(result) if failing else ""
    lines.extend(line for line in text.splitlines() if line)
    if diagnosis is not None:
        lines.extend(_more_than_the_tracebacks(diagnosis))
    error = without_state_lines(outcome.error or "").strip()
    if error:
        lines.append(f"Azure ML says: {error.splitlines()[0]}")
    if diagnosis is not None:
        lines.append(f"`%distcomp diagnose {facts.name}` shows the whole diagnosis.")
    if facts.studio_url:
        lines.append(f"studio: {facts.studio_url}")
    return mask_secrets("\n".join(lines))


#: the diagnosis's sections that add to a local run's failure words (its tracebacks and
#: layout are in them already)
_ADDING = ("state lines", "out of memory", "Flight Recorder", "launchers", "watchdog")


def _more_than_the_tracebacks(diagnosis: Any) -> list[str]:
    """The diagnosis's verdict and the sections that say more than the ranks' tracebacks:
    what the state lines of our rank side say, out of memory, the watchdogs, the launchers."""
    lines = [f"diagnosis: {diagnosis.verdict}"]
    for section in diagnosis.sections:
        if any(word in section.heading for word in _ADDING):
            lines.append(f"--- {section.heading} ---")
            lines.extend(section.lines)
    return lines


class StateLine:
    """One line of output that each change replaces (a display with a ``display_id``)."""

    def __init__(self) -> None:
        self.handle: Any = None
        self.text = ""

    def __call__(self, text: str) -> None:
        if text == self.text:
            return
        self.text = text
        from IPython.display import display

        if self.handle is None:
            self.handle = display({"text/plain": text}, raw=True, display_id=True)
        else:
            self.handle.update({"text/plain": text}, raw=True)


def _print(text: str, stream: str) -> None:
    print(text, file=sys.stderr if stream == "stderr" else sys.stdout, flush=True)


def follow_job(
    ml_client: Any,
    name: str,
    settings: Any = None,
    show: Callable[[str, str], None] = _print,
    state: Callable[[str], None] | None = None,
    folder: Path | None = None,
) -> Any:
    """Follow job ``name`` until it ends: its outcome; an AzureMLError with the summary when
    it failed; KeyboardInterrupt stops following (the job runs on) and says so. ``folder``:
    where what is read is kept (as ``jobs.download`` lays it out), for the diagnosis of a
    failed job's summary and a later ``%distcomp diagnose JOB``."""
    from ..azureml.logs import Follower

    spool = folder / "artifacts" if folder is not None else None
    try:
        follower = Follower(ml_client, name, show, state or StateLine(), settings, spool=spool)
        outcome = follower.run()
    except KeyboardInterrupt:
        show(
            f"Stopped following; job {name} keeps running on Azure ML; "
            f"`%distcomp follow {name}` picks it up again.",
            "stdout",
        )
        return None
    if outcome.status == "Failed":
        raise AzureMLError(failure_summary(outcome, _diagnosis(outcome, folder)))
    if outcome.status != "Completed":
        show(f"Job {name} ended {outcome.status}; its output above is complete.", "stdout")
    return outcome


def _diagnosis(outcome: Any, folder: Path | None) -> Any:
    """The diagnosis of the logs the follow kept in ``folder``; None where there are none."""
    from ..azureml.diagnose import diagnose_folder
    from ..errors import JobLogsError

    if folder is None:
        return None
    try:
        return diagnose_folder(folder, outcome.facts.per_node, outcome.status)
    except JobLogsError:  # no rank wrote a line
        return None


__all__ = ["StateLine", "failure_summary", "follow_job"]
