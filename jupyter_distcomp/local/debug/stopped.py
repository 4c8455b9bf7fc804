"""The ranks of one channel stopped at a breakpoint: who is stopped, what each said, and
commands sent to them.

:class:`StoppedRanks` takes the stops a channel queues and each rank's messages (its output,
its prompt, its answers), sends commands to ranks at once and waits until they come back to
a prompt, interrupting an evaluation past its time limit. The prompt over them (``group.py``)
reads and types; ``%distcomp compare`` on a background cell's stops (``evaluate.py``) asks
them without a prompt.
"""

from __future__ import annotations

import json
import os
import queue
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ...contracts import RankState
from ...core.compare_table import CompareTable, table
from ...core.ranges import format_ranks
from .channel import DebugChannel, RankSession

#: seconds the prompt waits, when it opens, for more ranks of the cell to stop
GATHER = 1.5
#: seconds a command at the prompt that does not leave it (``p``, ``!``, ``compare``, an
#: ``interact`` line, JupyterLab's evaluations and Variables views) may run on a rank before
#: that rank is interrupted (SIGINT); ``DISTCOMP_DEBUG_EVAL_SECONDS`` in the kernel's
#: environment sets another
EVAL_SECONDS = 15.0
#: seconds after that interrupt before a rank that still does not answer is named and
#: leaves the prompt (blocked in C code: a collective the others did not join)
INTERRUPT_GRACE = 3.0
#: the rank's pdb command that answers ``compare EXPR`` (debug_hook.RankPdb)
RANK_COMPARE = "distcomp_compare"
RANK_SERVE = "distcomp_serve"
RANK_DIFF = "distcomp_diff"
DIFF_SECONDS = 60.0  # the most a rank waits for the reference value of compare
#: states of a rank whose cell is over: it will not stop again in this cell
_OVER = {RankState.IDLE, RankState.DEAD}


@dataclass(eq=False)  # each member is itself: a key of the commands sent to ranks
class Member:
    """One stopped rank of the group."""

    session: RankSession
    where: dict
    state: str = "stopped"  # stopped -> prompt -> busy -> prompt | running | ended
    text: str = ""  # the rank's output not shown yet
    prompt: str = ""
    told: bool = False  # its current stop was shown
    data: dict | None = None  # the rank's answer to RANK_COMPARE
    ran: bool = False  # it ran on since the last command was sent
    line: str = ""  # the command it was sent last
    said: str = ""  # that command as the notebook names it (else the line, quoted)
    since: float = 0.0  # when it was sent
    timed_out: bool = False  # the command ran past the time limit: the rank was interrupted
    owed: bool = False  # it came to its prompt since its output was last caught up with
    written: list | None = None  # [cell, units] it had written then (None: not counted)


def _named(member: Member) -> str:
    """The command a member was sent, as the notebook names it."""
    return member.said or repr(member.line.strip())


def eval_seconds() -> float:
    """The time limit of an evaluation at the prompt (see :data:`EVAL_SECONDS`)."""
    try:
        return float(os.environ.get("DISTCOMP_DEBUG_EVAL_SECONDS", EVAL_SECONDS))
    except ValueError:
        return EVAL_SECONDS


class StoppedRanks:
    """The stopped ranks of one channel, until their cell ends."""

    def __init__(
        self,
        *,
        channel: DebugChannel,
        name: str = "ranks",
        quits: set[int] | None = None,
        states: Callable[[], dict[int, RankState]] | None = None,
        interrupt: Callable[[list[int]], None] | None = None,
        on_input: Callable[[RankSession, dict], None] | None = None,
    ) -> None:
        """``name``: the world's, in compare's table; ``quits`` collects the ranks whose
        user typed ``q``; ``states``: the world's rank states (None: unknown);
        ``interrupt`` sends SIGINT to ranks (what ends an evaluation past its time limit);
        ``on_input`` answers ``input()`` on a rank (queued with the stops as
        ``{"ask": ...}``)."""
        self.channel = channel
        self.name = name
        self.taking = True  # False: the stops stay queued (see hold)
        self.quits = quits if quits is not None else set()
        self.states = states
        self.interrupt = interrupt
        self.on_input = on_input
        self.members: dict[int, Member] = {}

    def evaluate(self, targets: list[Member], expr: str) -> dict[int, dict]:
        """Each target's summary of ``expr`` in its current frame; they stay at the prompt
        (an array or mapping kept there for :meth:`table`)."""
        lost = {"kind": "error", "text": "no answer (the rank left its prompt)"}
        answers = self.ask_ranks({m: f"{RANK_COMPARE} {expr}" for m in targets})
        return {m.session.rank: answers.get(m) or lost for m in targets}

    def table(
        self, targets: list[Member], expr: str, summaries: dict[int, dict], rtol: float | None
    ) -> CompareTable:
        """compare's table of ``summaries``; the ranks whose kept values differ from the
        reference get their max |diff| from it (served by the reference rank at its prompt,
        on loopback), and every rank forgets its kept value."""

        def diff_kept(keys: dict[int, Any], ref: int) -> dict[int, dict]:
            kept = [m for m in targets if summaries[m.session.rank]["kind"] in ("array", "dict")]
            differing = [m for m in kept if keys[m.session.rank] != keys[ref]]
            source = None
            reference = next((m for m in kept if m.session.rank == ref), None)
            if differing and reference is not None:
                token = secrets.token_hex(16)
                args = json.dumps([None, len(differing), token, DIFF_SECONDS])
                served = self.ask_ranks({reference: f"{RANK_SERVE} {args}"}).get(reference)
                where = (served or {}).get("served")
                if isinstance(where, list):
                    source = [*where, token]
            lines = {
                m: f"{RANK_DIFF} "
                + json.dumps([source if m in differing else None, rtol, DIFF_SECONDS])
                for m in kept
            }
            answers = self.ask_ranks(lines)
            return {m.session.rank: answers[m] for m in differing if answers.get(m)}

        return table(self.name, expr, summaries, rtol, diff_kept)

    def ask_ranks(self, lines: dict[Member, str], said: str = "") -> dict[Member, dict]:
        """Send each member its own command (at once); the data each answered. ``said``:
        the commands as the notebook names them (the visual debugger's requests)."""
        for member, line in lines.items():
            member.data, member.state = None, "busy"
            self.send(member, line)
            member.said = said
        self.wait(list(lines), settle=0.0)
        return {m: m.data for m in lines if m.data is not None}

    def hold(self, stops: list[tuple[RankSession, dict]]) -> list[Member]:
        """Members for stops that stay queued (a background cell's): at their prompt once
        their queued messages are read; :meth:`release` puts those messages back."""
        self.taking = False
        members = []
        for session, where in stops:
            member = self.members[session.rank] = Member(session, where)
            members.append(member)
        for member in members:
            self._drain(member)
        self.wait(members, settle=0.0)
        return members

    @staticmethod
    def release(members: list[Member]) -> None:
        for member in members:
            member.session.messages.put({"out": member.text + member.prompt, "read": True})
            member.session.channel.changed()

    @staticmethod
    def send(member: Member, line: str) -> None:
        member.line, member.since, member.timed_out = line, time.monotonic(), False
        member.said = ""
        member.session.send(line=line)

    def wait(self, targets: list[Member], settle: float) -> bool:
        """Until each target is at a prompt or ended; ranks that run on get ``settle`` s
        since the last news to stop again. Whether any target ran."""
        last = time.monotonic()
        while True:
            moved = any(m.ran for m in targets)
            waiting = [m for m in targets if m.state in ("busy", "stopped")]
            running = [m for m in targets if m.state == "running" and not self.over(m)]
            if not waiting and (not running or time.monotonic() - last > settle):
                return moved
            if self.poll(0.05):
                last = time.monotonic()
            else:
                self._time_limit([m for m in waiting if m.state == "busy"])

    def _time_limit(self, busy: list[Member]) -> None:
        """A command at the prompt past :func:`eval_seconds`: its rank is interrupted; one
        that still does not answer :data:`INTERRUPT_GRACE` s later leaves the prompt,
        named (it rejoins if it answers)."""
        limit = eval_seconds()
        now = time.monotonic()
        late = [m for m in busy if not m.timed_out and now - m.since > limit]
        if late:
            ranks = [m.session.rank for m in late]
            for member in late:
                member.timed_out = True
            if self.interrupt is not None:
                self.interrupt(ranks)
            said = "interrupted" if self.interrupt is not None else "not interrupted here"
            print(
                f"{format_ranks(ranks)}: {_named(late[0])} ran past the debugger's time "
                f"limit of {limit:g} s for an evaluation: {said}.",
                flush=True,
            )
        stuck = [m for m in busy if m.timed_out and now - m.since > limit + INTERRUPT_GRACE]
        if stuck:
            for member in stuck:
                member.state = "stuck"
            print(
                f"{format_ranks(m.session.rank for m in stuck)} did not answer "
                f"{_named(stuck[0])} after the interrupt (blocked in C code, such as "
                "a collective the other ranks did not join): it leaves the prompt, and "
                "rejoins if it answers. Fix: `%distcomp restart` if it stays so.",
                flush=True,
            )

    def gather(self) -> None:
        """Ranks that stop at about the same time open the prompt together: wait while
        ranks that may stop still run, until none stopped for GATHER s."""
        last = time.monotonic()
        while time.monotonic() - last < GATHER and self._may_stop():
            if self.poll(0.05):
                last = time.monotonic()

    def _may_stop(self) -> set[int]:
        """Ranks of the cell that run, may stop (``--debug-ranks``) and have not (or
        whose stop is on its way)."""
        if self.states is None:
            return set()
        allowed = self.channel.allowed
        return {
            rank
            for rank, state in self.states().items()
            if state in (RankState.BUSY, RankState.DEBUGGING)
            and rank not in self.members
            and (allowed is None or rank in allowed)
        }

    def over(self, member: Member) -> bool:
        if self.states is None:
            return False
        return self.states().get(member.session.rank) in _OVER

    def poll(self, timeout: float) -> bool:
        """New stops and messages, waiting up to ``timeout`` s for one; whether any came."""
        seen = self.channel.version
        news = self._take_stops()
        for member in list(self.members.values()):
            news |= self._drain(member)
        if not news and timeout > 0:
            self.channel.wait_change(seen, timeout)
        return news

    def _take_stops(self) -> bool:
        news = False
        if not self.taking:
            return news
        while (stop := self.channel.take()) is not None:
            news = True
            session, where = stop
            if "ask" in where:
                if self.on_input is not None:
                    self.on_input(session, where["ask"])
                continue
            member = self.members.get(session.rank)
            if member is None or member.session is not session:
                text = member.text if member else ""
                member = self.members[session.rank] = Member(session, where, text=text)
            member.where, member.state, member.told = where, "stopped", False
        return news

    def _drain(self, member: Member) -> bool:
        news = False
        while True:
            try:
                message = member.session.messages.get_nowait()
            except queue.Empty:
                return news
            news = True
            if "out" in message:
                member.text += message["out"]
            if "data" in message:
                member.data = message["data"]
            if "read" in message:
                if member.state == "running":  # its stop is queued just before its read
                    self._take_stops()
                text, _, member.prompt = member.text.rpartition("\n")
                member.text = text + "\n" if text else ""
                member.state = "prompt"
                member.owed, member.written = True, message.get("written")
                self.channel.stepping.discard(member.session.rank)
                # its "running" before a new stop may be read after that stop said debugging
                self.channel.on_state(member.session.rank, RankState.DEBUGGING)
            elif "running" in message or "end" in message:
                member.state = "running" if "running" in message else "ended"
                member.ran = True
                if message.get("end") == "quit":
                    self.quits.add(member.session.rank)
                if member.state == "running":
                    self.channel.stepping.add(member.session.rank)
                else:
                    self.channel.stepping.discard(member.session.rank)
                self.channel.on_state(member.session.rank, RankState.BUSY)
