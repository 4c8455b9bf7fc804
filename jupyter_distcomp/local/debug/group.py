"""One prompt for every rank stopped at a breakpoint: ``(Pdb ranks 0-3) ``.

A command goes to each focused rank at a prompt at once, so ``n`` over a collective
completes on all of them together. What the ranks printed meanwhile shows first, as it does
at pdb's own prompt (a rank says how much it wrote for the cell when it comes to its prompt,
and the cell's output is read until it holds that much); then the replies, equal ones once,
headed by their ranks: pdb's own lines name the new place after a step. ``rank 2`` or
``ranks 0,2-3`` narrow the focus, ``ranks all`` widens it again. Ranks that a step leaves
running (most likely blocked in a collective on a rank that did not step) are named with
the ranks they may wait for, and the prompt stays with the others. The ranks themselves
(their stops, messages and the commands sent to them) are ``stopped.py``'s.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable

from ...contracts import RankState
from ...core.compare_table import check_expression
from ...core.ranges import format_ranks, parse_ranks
from ...errors import DistcompError
from .channel import RankSession
from .places import cell_lines, describe_stops, group_label, summary
from .stopped import Member, StoppedRanks

#: seconds a command waits for ranks that run on (n, s, c, ...) to stop again before the
#: prompt returns to the ranks still stopped
STEP_WAIT = 1.0
_FOCUS = re.compile(r"^\s*ranks?\s+(all|\d+(?:\s*-\s*\d+)?(?:\s*,\s*\d+(?:\s*-\s*\d+)?)*)\s*$")
_PDB_PROMPT = re.compile(r"^\(Pdb rank \d+\) $")
_COMPARE = re.compile(r"^\s*compare\s+(?P<expr>\S.*?)\s*$")
#: seconds the prompt waits at most for the output a rank wrote before coming to it
OUTPUT_WAIT = 2.0
#: ... and, for a rank whose output nobody counts (no flow file: another host), how long
#: its flushed output has to arrive
UNCOUNTED_SETTLE = 0.05


class GroupPrompt:
    """The prompt for the stopped ranks of one channel, until none is at a prompt."""

    def __init__(
        self,
        *,
        stopped: StoppedRanks,
        ask: Callable[[RankSession, str], str],
        before_prompt: Callable[[], None] = lambda: None,
        label: Callable[[int], str] | None = None,
        refocus: bool = False,
        shown: Callable[[int, str, int], bool] | None = None,
        interrupted: dict[int, dict] | None = None,
        output_here: bool = True,
    ) -> None:
        """``ask(session, prompt)``: the next line typed for the focused ranks;
        ``before_prompt()`` shows what the ranks printed; ``label(rank)`` names a rank;
        ``refocus``: ``ask`` may change the focus (the visual debugger's);
        ``shown(rank, cell, units)``: whether the cell on show has shown ``units`` of the
        output ``rank`` wrote for request ``cell`` (None: nothing to wait for);
        ``interrupted`` is filled, when an interrupt ends the prompt, with where the ranks
        at the prompt stopped; ``output_here``: what the ranks print shows in this cell
        (False: it goes elsewhere, an attached job's logs, and the prompt waits for none)."""
        self.stopped = stopped
        self.ask = ask
        self.before_prompt = before_prompt
        self.label = label
        self.refocus = refocus
        self.shown = shown
        self.interrupted = interrupted if interrupted is not None else {}
        self.output_here = output_here
        self.focus: set[int] | None = None  # None: every rank at a prompt

    # -- the loop -------------------------------------------------------------------------
    def run(self) -> None:
        try:
            self._run()
        except KeyboardInterrupt:  # at the prompt, or while a command typed there runs
            self.interrupted.update(
                {
                    r: m.where
                    for r, m in self.stopped.members.items()
                    if m.state in ("prompt", "busy", "stuck")
                }
            )
            raise

    def _run(self) -> None:
        self.stopped.poll(0.0)
        self.stopped.gather()
        self.stopped.wait(list(self.stopped.members.values()), settle=0.0)
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
        at_prompt = [m for _, m in sorted(self.stopped.members.items()) if m.state == "prompt"]
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
        at_prompt = {r for r, m in self.stopped.members.items() if m.state == "prompt"}
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
            self.stopped.send(member, line)
        moved = self.stopped.wait(targets, settle=STEP_WAIT)
        if moved:  # ranks the step released from a collective stop again
            others = [m for m in self.stopped.members.values() if m not in targets]
            self.stopped.wait([m for m in others if m.state in ("running", "stopped")], settle=0.2)
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
        for rank in [r for r, m in self.stopped.members.items() if m.state == "ended"]:
            del self.stopped.members[rank]

    def _compare(self, targets: list[Member], expr: str) -> None:
        """``compare EXPR``: EXPR in each target's current frame, as compare's table."""
        try:
            check_expression(self.stopped.name, expr)
        except DistcompError as exc:
            print(exc, flush=True)
            return
        summaries = self.stopped.evaluate(targets, expr)
        self._show(targets)
        print(self.stopped.table(targets, expr, summaries, None).text(), flush=True)

    def _catch_up(self, members: list[Member]) -> None:
        """The output the members wrote before they came to their prompt, into the cell
        (``before_prompt``), before anything is said of them: read until the cell holds as
        much as each counted, for :data:`OUTPUT_WAIT` s at most."""
        owed = [m for m in members if m.owed]
        self.before_prompt()
        if not owed or not self.output_here:
            for member in owed:
                member.owed, member.written = False, None
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
        alone = len(members) == 1 and (len(self.stopped.members) <= 1 or not self.refocus)
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
        new = {r: m for r, m in self.stopped.members.items() if m.state == "prompt" and not m.told}
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
        running = [m for m in running if not self.stopped.over(m)]
        if not running:
            return
        ranks = {m.session.rank for m in running}
        at_prompt = sorted(r for r, m in self.stopped.members.items() if m.state == "prompt")
        states = self.stopped.states() if self.stopped.states is not None else {}
        elsewhere = sorted(
            r
            for r, state in states.items()
            if state == RankState.BUSY and r not in ranks and r not in self.stopped.members
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
