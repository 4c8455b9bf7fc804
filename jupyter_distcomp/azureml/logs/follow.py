"""Following a job: every rank's output as it arrives, in the words of a local run.

:class:`Follower` polls the job (reader.py) and hands on what a local ``%distcomp command``
shows: each line labelled ``[node N rank R]`` (``core/rank_text``: a rank's text cannot
forge a label), a traceback held while it may be a rank's last words so that ranks failing
alike show it once for all of them (``core/tracebacks``), and one line of state that the
caller shows in place ("Queued", "Running: 3 of 4 ranks have written", ...). The state lines
our rank side writes into a job's logs (core/joblog/state.py) are not the user's output: they
are not shown, and a stall they report is said in the state line. Polls back off
while nothing changes, as ``jobs.stream`` does (``poll`` up to ``poll_max`` seconds); the
end comes only from the job's status, never from a log that stopped growing. A network
error is retried with backoff (after azure-core's own retries) and reported in the state
line; after ``give_up`` seconds of them, an AzureMLError says what, where and the fix.
Nothing is shown twice and nothing skipped: a log is read on from where its last successful
read ended. With a ``spool`` folder, what is read is also kept there (reader.py), for the
diagnosis of the job once it ends.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ...core.joblog.state import MARK, parse_state_line
from ...core.ranges import format_ranks
from ...core.rank_text import OpenColours, labelled_lines
from ...core.tracebacks import HeldTracebacks, HookFrames
from ...errors import AzureMLError
from ..failures import explain, scrub
from .job import JobFacts, read_job
from .reader import LogReader, RunState

TERMINAL = ("Completed", "Failed", "Canceled", "NotResponding", "Paused")
TAIL_LINES = 20


@dataclass
class FollowSettings:
    poll: float = 2.0  # seconds between polls while logs grow
    poll_max: float = 30.0  # the longest wait between polls while nothing changes
    give_up: float = 300.0  # seconds of network errors in a row before following stops
    traceback_hold: float = 5.0  # seconds a complete traceback waits for identical ones


@dataclass
class RankSeen:
    """What the logs told of one rank."""

    rank: int
    node: int
    tail: deque = field(default_factory=lambda: deque(maxlen=TAIL_LINES))
    raised: bool = False  # its last words were a traceback
    lines: int = 0


@dataclass
class FollowOutcome:
    """How a followed job ended, and what its logs showed of each rank."""

    facts: JobFacts
    status: str
    error: str
    ranks: dict[int, RankSeen]
    seconds: float


class Follower:
    """Follow job ``name``: ``show(text, stream)`` with labelled output ("stdout" /
    "stderr"), ``state(text)`` with the one line of state; :meth:`run` returns the outcome."""

    def __init__(
        self,
        ml_client: Any,
        name: str,
        show: Callable[[str, str], None],
        state: Callable[[str], None],
        settings: FollowSettings | None = None,
        sleep: Callable[[float], None] = time.sleep,
        spool: Path | None = None,
    ) -> None:
        self.ml_client = ml_client
        self.name = name
        self.show = show
        self.state = state
        self.settings = settings or FollowSettings()
        self.sleep = sleep
        self.facts = read_job(ml_client, name)
        self.reader = LogReader(ml_client, self.facts.rank_of, spool=spool)
        self.tracebacks = HeldTracebacks()
        self.colours = OpenColours()  # no colour a rank leaves on reaches a label
        self.hook_frames = HookFrames()
        self.completed_at: dict[int, float] = {}  # rank -> when its held traceback completed
        self.ranks: dict[int, RankSeen] = {}
        self.stalled: set[int] = set()  # ranks whose last state line says they stall
        self.status = self.facts.status

    # -- output -------------------------------------------------------------------------
    def _rank(self, rank: int) -> RankSeen:
        seen = self.ranks.get(rank)
        if seen is None:
            seen = self.ranks[rank] = RankSeen(rank, self.facts.node_of(rank))
        return seen

    def _emit(self, lines: list[tuple[int, str]]) -> None:
        out: list[str] = []
        for rank, text in lines:
            if MARK in text and self._state_line(rank, text):
                continue
            seen = self._rank(rank)
            seen.lines += 1
            seen.tail.append(text)
            if not self.hook_frames.keep(rank, text):  # our wrappers' frames: not the user's
                continue
            released, held = self.tracebacks.take(rank, "stderr", text)
            if released:
                out.extend(self._labelled(rank, line) for line in released)
            if not held:
                out.append(self._labelled(rank, text))
            if rank in self.tracebacks.complete():
                self.completed_at.setdefault(rank, time.monotonic())
            else:
                self.completed_at.pop(rank, None)
        if out:
            self.show("\n".join(out), "stdout")

    def _state_line(self, rank: int, text: str) -> bool:
        """A state line of our rank side: not the user's output, so not shown; a stall is
        said in the state line (``%distcomp diagnose`` reads the lines in full). Whether
        ``text`` was one."""
        state = parse_state_line(text)
        if state is None:
            return False
        if state["reason"] == "stall":
            self.stalled.add(rank)
        else:
            self.stalled.discard(rank)
        return True

    def _labelled(self, rank: int, text: str) -> str:
        return "\n".join(labelled_lines(self.facts.label(rank), text, self.colours, rank))

    def _release_tracebacks(self, ranks: list[int] | None) -> None:
        """Show the held tracebacks of ``ranks`` (all: None), identical ones once."""
        for rank in ranks if ranks is not None else list(self.completed_at):
            self.completed_at.pop(rank, None)
        for rank in self.tracebacks.complete():
            if ranks is None or rank in ranks:
                self._rank(rank).raised = self.tracebacks.raised(rank)
        out: list[str] = []
        for group, lines in self.tracebacks.groups(ranks):
            label = self.facts.label(group[0]) if len(group) == 1 else f"[{format_ranks(group)}]"
            out.extend("\n".join(labelled_lines(label, line)) for line in lines)
        if out:
            self.show("\n".join(out), "stderr")

    # -- state --------------------------------------------------------------------------
    def _state_text(self, run: RunState, note: str = "") -> str:
        world = len(self.facts.places())
        text = f"Azure ML job {self.name}: {run.status or self.status}"
        if run.status == "Running":
            written = len(self.ranks)
            if written == 0:
                text += ": no rank has written yet; waiting..."
            elif written < world:
                text += f": {written} of {world} ranks have written"
            if self.stalled:
                text += (
                    f"; {format_ranks(sorted(self.stalled))} stalled in a call "
                    f"(`%distcomp diagnose {self.name}` says where and who they wait for)"
                )
        return text + (f" ({note})" if note else "")

    # -- the loop -----------------------------------------------------------------------
    def _look(self) -> tuple[RunState, bool]:
        """One poll: run history, then every log's new bytes; whether anything came."""
        run = self.reader.run_state(self.name)
        self.status = run.status
        lines, more, error = self.reader.poll(run)
        self._emit(lines)
        while more and error is None:
            lines, more, error = self.reader.poll(run)
            self._emit(lines)
        if error is not None:
            raise error
        return run, bool(lines)

    def run(self) -> FollowOutcome:
        started = time.monotonic()
        settings = self.settings
        interval = settings.poll
        failing_since: float | None = None
        run = RunState(self.status, "")
        try:
            while True:
                try:
                    run, fresh = self._look()
                except Exception as exc:
                    failing_since = failing_since or time.monotonic()
                    wait = self._trouble(exc, failing_since, run)
                    self.sleep(wait)
                    continue
                failing_since = None
                now = time.monotonic()
                old = [
                    r for r, t in self.completed_at.items() if now - t >= settings.traceback_hold
                ]
                if old:
                    self._release_tracebacks(old)
                self.state(self._state_text(run))
                if run.status in TERMINAL:
                    break
                interval = settings.poll if fresh else min(interval * 1.5, settings.poll_max)
                self.sleep(interval)
            self._emit(self.reader.rest())
            self._release_tracebacks(None)
        finally:
            self.reader.close()
        return FollowOutcome(
            self.facts, run.status, scrub(run.error), self.ranks, time.monotonic() - started
        )

    def _trouble(self, exc: Exception, since: float, run: RunState) -> float:
        """Seconds to wait before the next try after ``exc``; raise when it is no network
        error or they have lasted too long."""
        from azure.core.exceptions import (
            ClientAuthenticationError,
            HttpResponseError,
            ServiceRequestError,
            ServiceResponseError,
        )

        status = getattr(getattr(exc, "response", None), "status_code", None)
        network = isinstance(exc, (ServiceRequestError, ServiceResponseError)) or (
            isinstance(exc, HttpResponseError)
            and not isinstance(exc, ClientAuthenticationError)
            and (status in (408, 429) or (status or 0) >= 500)
        )
        if not network:
            raise explain(exc, self.ml_client, f"read the logs of job '{self.name}'") from None
        lasted = time.monotonic() - since
        first = (scrub(str(exc)).splitlines() or [type(exc).__name__])[0]
        if lasted >= self.settings.give_up:
            raise AzureMLError(
                f"could not read the logs of job '{self.name}' from Azure ML (run history and "
                f"the workspace's storage) for {lasted:.0f} s: {first}. The job keeps running "
                "on Azure ML. Fix: check the network connection and any proxy (HTTPS_PROXY), "
                f"then `%distcomp follow {self.name}` shows its logs again."
            ) from None
        wait = min(self.settings.poll * 2 ** max(0, int(lasted // self.settings.poll)), 30.0)
        wait = min(wait, self.settings.poll_max)
        self.state(self._state_text(run, f"network error, retrying in {wait:.0f} s: {first}"))
        return wait


__all__ = ["FollowOutcome", "FollowSettings", "Follower", "RankSeen"]
