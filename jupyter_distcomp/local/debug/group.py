"""One prompt for every rank stopped at a breakpoint: ``(Pdb ranks 0-3) ``.

A command goes to each focused rank at a prompt at once, so ``n`` over a collective
completes on all of them together. What the ranks printed meanwhile shows first, as it does
at pdb's own prompt (a rank says how much it wrote for the cell when it comes to its prompt,
and the cell's output is read until it holds that much); then the replies, equal ones once,
headed by their ranks: pdb's own lines name the new place after a step. ``rank 2`` or
``ranks 0,2-3`` narrow the focus, ``ranks all`` widens it again. Ranks that a step leaves
running (most likely blocked in a collective on a rank that did not step) are named with
the ranks they may wait for, and the prompt stays with the others.
"""

from __future__ import annotations

import json
import os
import queue
import re
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ...contracts import RankState
from ...core.compare_table import CompareTable, check_expression, table
from ...core.ranges import format_ranks, parse_ranks
from ...errors import DistcompError
from .channel import DebugChannel, RankSession
from .places import cell_lines, describe_stops, group_label, summary

#: seconds a command waits for ranks that run on (n, s, c, ...) to stop again before the
#: prompt returns to the ranks still stopped
STEP_WAIT = 1.0
#: seconds the prompt waits, when it opens, for more ranks of the cell to stop
GATHER = 1.5
_FOCUS = re.compile(r"^\s*ranks?\s+(all|\d+(?:\s*-\s*\d+)?(?:\s*,\s*\d+(?:\s*-\s*\d+)?)*)\s*$")
_PDB_PROMPT = re.compile(r"^\(Pdb rank \d+\) $")
_COMPARE = re.compile(r"^\s*compare\s+(?P<expr>\S.*?)\s*$")
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
#: seconds the prompt waits at most for the output a rank wrote before coming to it
OUTPUT_WAIT = 2.0
#: ... and, for a rank whose output nobody counts (no flow file: another host), how long
#: its flushed output has to arrive
UNCOUNTED_SETTLE = 0.05
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


class Group:
    """The prompt for the stopped ranks of one channel, until none is at a prompt."""

    def __init__(
        self,
        channel: DebugChannel,
        ask: Callable[[RankSession, str], str],
        before_prompt: Callable[[], None],
        label: Callable[[int], str] | None,
        quits: set[int] | None,
        states: Callable[[], dict[int, RankState]] | None,
        name: str = "ranks",
    ) -> None:
        self.channel = channel
        self.name = name  # the world's, in compare's table
        self.taking = True  # False: the stops stay queued (see hold)
        self.refocus = False  # True: ``ask`` may change the focus (the visual debugger's)
        self.ask = ask
        self.before_prompt = before_prompt
        self.label = label
        self.quits = quits if quits is not None else set()
        self.states = states
        self.members: dict[int, Member] = {}
        self.focus: set[int] | None = None  # None: every rank at a prompt
        #: where the ranks at the prompt stopped, filled when an interrupt ends the prompt
        self.interrupted: dict[int, dict] = {}
        #: answers ``input()`` on a rank (queued with the stops as ``{"ask": ...}``)
        self.on_input: Callable[[RankSession, dict], None] | None = None
        #: sends SIGINT to ranks: what ends an evaluation past its time limit
        self.interrupt: Callable[[list[int]], None] | None = None
        #: ``shown(rank, cell, units)``: whether the cell on show has shown ``units`` of the
        #: output ``rank`` wrote for request ``cell`` (None: nothing to wait for)
        self.shown: Callable[[int, str, int], bool] | None = None

    # -- the loop -------------------------------------------------------------------------
    def run(self) -> None:
        try:
            self._run()
        except KeyboardInterrupt:  # at the prompt, or while a command typed there runs
            self.interrupted.update(
                {
                    r: m.where
                    for r, m in self.members.items()
                    if m.state in ("prompt", "busy", "stuck")
                }
            )
            raise

    def _run(self) -> None:
        self._poll(0.0)
        self._gather()
        self._wait(list(self.members.values()), settle=0.0)
        self._tell_new_stops(joins=False)
        while True:
            focused = self._focused()
            if not focused:
                break
            self._catch_up(focused)
            line = self.ask(focused[0].session, self._prompt(focused))
            if self._refocus(line):
                continue
            if self.refocus:  # the focus, or who is at the prompt, moved meanwhile
                focused = self._focused() or focused
            compare = _COMPARE.match(line)
            if compare:
                self._compare(focused, compare["expr"])
                continue
            self._command(focused, line)
            self._tell_new_stops()

    def _focused(self) -> list[Member]:
        """The members at a prompt that commands go to; the focus widens to every rank at a
        prompt once none of its own is left there."""
        at_prompt = [m for _, m in sorted(self.members.items()) if m.state == "prompt"]
        chosen = [m for m in at_prompt if self.focus is None or m.session.rank in self.focus]
        if not chosen and at_prompt and self.focus is not None:
            self.focus = None
            print(f"The prompt goes to {self._ranks(at_prompt)}, still stopped.", flush=True)
            return at_prompt
        return chosen

    def _prompt(self, focused: list[Member]) -> str:
        ranks = [m.session.rank for m in focused]
        if all(_PDB_PROMPT.match(m.prompt) for m in focused):
            return f"(Pdb {format_ranks(ranks)}) "
        return f"{group_label(ranks, self.label)} {focused[0].prompt}"  # interact's prompt

    def _refocus(self, line: str) -> bool:
        """``rank 2``, ``ranks 0,2-3``, ``ranks all``: the ranks the next commands go to."""
        match = _FOCUS.match(line)
        if not match:
            return False
        at_prompt = {r for r, m in self.members.items() if m.state == "prompt"}
        if match[1] == "all":
            self.focus = None
            print(f"Commands go to {format_ranks(at_prompt)}.", flush=True)
            return True
        wanted = set(parse_ranks(match[1].replace(" ", ""), 1 << 30))
        chosen = wanted & at_prompt
        missing = wanted - at_prompt
        if not chosen:
            print(
                f"{format_ranks(missing)} not at a prompt (stopped: {format_ranks(at_prompt)}); "
                "the focus stays.",
                flush=True,
            )
            return True
        self.focus = chosen
        note = f" ({format_ranks(missing)} not at a prompt)" if missing else ""
        print(f"Commands go to {format_ranks(chosen)}{note}; `ranks all` for all.", flush=True)
        return True

    def _command(self, targets: list[Member], line: str) -> None:
        """Send ``line`` to every target at once; show their replies and where they went."""
        for member in targets:
            member.state, member.ran = "busy", False
            self._send(member, line)
        moved = self._wait(targets, settle=STEP_WAIT)
        if moved:  # ranks the step released from a collective stop again
            others = [m for m in self.members.values() if m not in targets]
            self._wait([m for m in others if m.state in ("running", "stopped")], settle=0.2)
        # pdb's own lines name a rank's new place (``> In [5], line 6, in step()``); the
        # places of those whose reply does not are summed up
        unplaced = {
            m.session.rank: m.where
            for m in targets
            if m.state == "prompt" and "\n> " not in "\n" + m.text
        }
        self._show(targets)
        if len(targets) > 1 and moved and unplaced:
            print(summary(unplaced), flush=True)
        for member in targets:
            if member.state == "prompt":
                member.told = True
        self._say_running([m for m in targets if m.state == "running"], line)
        for rank in [r for r, m in self.members.items() if m.state == "ended"]:
            del self.members[rank]

    def _compare(self, targets: list[Member], expr: str) -> None:
        """``compare EXPR``: EXPR in each target's current frame, as compare's table."""
        try:
            check_expression(self.name, expr)
        except DistcompError as exc:
            print(exc, flush=True)
            return
        summaries = self.evaluate(targets, expr)
        self._show(targets)
        print(self.table(targets, expr, summaries, None).text(), flush=True)

    def evaluate(self, targets: list[Member], expr: str) -> dict[int, dict]:
        """Each target's summary of ``expr`` in its current frame; they stay at the prompt
        (an array or mapping kept there for :meth:`table`)."""
        lost = {"kind": "error", "text": "no answer (the rank left its prompt)"}
        answers = self._ask_ranks({m: f"{RANK_COMPARE} {expr}" for m in targets})
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
                served = self._ask_ranks({reference: f"{RANK_SERVE} {args}"}).get(reference)
                where = (served or {}).get("served")
                if isinstance(where, list):
                    source = [*where, token]
            lines = {
                m: f"{RANK_DIFF} "
                + json.dumps([source if m in differing else None, rtol, DIFF_SECONDS])
                for m in kept
            }
            answers = self._ask_ranks(lines)
            return {m.session.rank: answers[m] for m in differing if answers.get(m)}

        return table(self.name, expr, summaries, rtol, diff_kept)

    def _ask_ranks(self, lines: dict[Member, str], said: str = "") -> dict[Member, dict]:
        """Send each member its own command (at once); the data each answered. ``said``:
        the commands as the notebook names them (the visual debugger's requests)."""
        for member, line in lines.items():
            member.data, member.state = None, "busy"
            self._send(member, line)
            member.said = said
        self._wait(list(lines), settle=0.0)
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
        self._wait(members, settle=0.0)
        return members

    @staticmethod
    def release(members: list[Member]) -> None:
        for member in members:
            member.session.messages.put({"out": member.text + member.prompt, "read": True})
            member.session.channel.changed()

    @staticmethod
    def _send(member: Member, line: str) -> None:
        member.line, member.since, member.timed_out = line, time.monotonic(), False
        member.said = ""
        member.session.send(line=line)

    # -- waiting for the ranks -----------------------------------------------------------
    def _wait(self, targets: list[Member], settle: float) -> bool:
        """Until each target is at a prompt or ended; ranks that run on get ``settle`` s
        since the last news to stop again. Whether any target ran."""
        last = time.monotonic()
        while True:
            moved = any(m.ran for m in targets)
            waiting = [m for m in targets if m.state in ("busy", "stopped")]
            running = [m for m in targets if m.state == "running" and not self._over(m)]
            if not waiting and (not running or time.monotonic() - last > settle):
                return moved
            if self._poll(0.05):
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

    def _gather(self) -> None:
        """Ranks that stop at about the same time open the prompt together: wait while
        ranks that may stop still run, until none stopped for GATHER s."""
        last = time.monotonic()
        while time.monotonic() - last < GATHER and self._may_stop():
            if self._poll(0.05):
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

    def _over(self, member: Member) -> bool:
        if self.states is None:
            return False
        return self.states().get(member.session.rank) in _OVER

    def _poll(self, timeout: float) -> bool:
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
                # its "running" before a new stop may be read after that stop said debugging
                self.channel.on_state(member.session.rank, RankState.DEBUGGING)
            elif "running" in message or "end" in message:
                member.state = "running" if "running" in message else "ended"
                member.ran = True
                if message.get("end") == "quit":
                    self.quits.add(member.session.rank)
                self.channel.on_state(member.session.rank, RankState.BUSY)

    # -- what is shown -------------------------------------------------------------------
    def _catch_up(self, members: list[Member]) -> None:
        """The output the members wrote before they came to their prompt, into the cell
        (``before_prompt``), before anything is said of them: read until the cell holds as
        much as each counted, for :data:`OUTPUT_WAIT` s at most."""
        owed = [m for m in members if m.owed]
        self.before_prompt()
        if not owed:
            return
        if any(m.written is None for m in owed):
            time.sleep(UNCOUNTED_SETTLE)
            self.before_prompt()
        counted = [(m.session.rank, *m.written) for m in owed if m.written is not None]
        shown = self.shown
        if shown is not None and counted:
            deadline = time.monotonic() + OUTPUT_WAIT
            while not all(shown(*each) for each in counted) and time.monotonic() < deadline:
                time.sleep(0.01)
                self.before_prompt()
        for member in owed:
            member.owed, member.written = False, None

    def _show(self, members: list[Member]) -> None:
        """Each member's new text, after what the ranks printed before it; equal texts once,
        headed by their ranks (one rank's alone as pdb shows it, but under the visual
        debugger, where no prompt names it, a rank stepped alone in "this rank only" mode is
        named)."""
        self._catch_up(members)
        texts: dict[str, list[int]] = {}
        for member in members:
            if member.text:
                texts.setdefault(cell_lines(member.text), []).append(member.session.rank)
            member.text = ""
        alone = len(members) == 1 and (len(self.members) <= 1 or not self.refocus)
        for text, ranks in texts.items():
            body = text.rstrip("\n")
            if alone:
                print(body, flush=True)
            elif "\n" in body:
                print(f"{group_label(ranks, self.label)}\n{body}", flush=True)
            else:
                print(f"{group_label(ranks, self.label)} {body}", flush=True)

    def _tell_new_stops(self, joins: bool = True) -> None:
        """Ranks that came to a prompt since they were last shown: where, and that they
        join (outside the focus: how to include them)."""
        new = {r: m for r, m in self.members.items() if m.state == "prompt" and not m.told}
        if not new:
            return
        self._catch_up(list(new.values()))
        for line in describe_stops({r: m.where for r, m in new.items()}, self.label):
            print(f"{line}: joins the prompt" if joins else line, flush=True)
        self._show(list(new.values()))
        outside = sorted(r for r in new if self.focus is not None and r not in self.focus)
        if outside:
            print(
                f"{format_ranks(outside)} joined the prompt outside the focus: "
                f"`ranks all` includes {'it' if len(outside) == 1 else 'them'}.",
                flush=True,
            )
        for member in new.values():
            member.told = True

    def _say_running(self, running: list[Member], line: str) -> None:
        """Ranks a command left running: which, and for whom they most likely wait."""
        running = [m for m in running if not self._over(m)]
        if not running:
            return
        ranks = {m.session.rank for m in running}
        at_prompt = sorted(r for r, m in self.members.items() if m.state == "prompt")
        states = self.states() if self.states is not None else {}
        elsewhere = sorted(
            r
            for r, state in states.items()
            if state == RankState.BUSY and r not in ranks and r not in self.members
        )
        if not at_prompt and line.split()[:1] in (["c"], ["cont"], ["continue"]):
            return  # ranks that continue run on; nobody at a prompt holds them
        whom = []
        if at_prompt:
            whom.append(f"{format_ranks(at_prompt)} (at this prompt)")
        if elsewhere:
            whom.append(f"{format_ranks(elsewhere)} (running, not stopped)")
        waits = f": waiting for {' and '.join(whom)}?" if whom else ""
        print(
            f"{format_ranks(ranks)} still running after {line.strip()!r}{waits} "
            f"They rejoin the prompt when they stop.",
            flush=True,
        )

    def _ranks(self, members: list[Member]) -> str:
        return format_ranks(m.session.rank for m in members)
