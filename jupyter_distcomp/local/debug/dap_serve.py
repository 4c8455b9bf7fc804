"""The stopped ranks under JupyterLab's visual debugger, served from the cell's thread.

The same :class:`~.group.GroupPrompt` as the pdb prompt: a step or continue goes to every rank at
the prompt at once (stepping over a collective completes on all of them), or to the one rank
of the ranks panel's "this rank only" mode. Where the pdb prompt reads a line typed in the
notebook, :class:`Serving` takes the next request the adapter (dap.py) handed over: a step
becomes pdb's command, a question (frames, variables, an evaluation) is asked of the ranks
(debug_hook's ``distcomp_call``, answered by dap_side.py) and answered to the adapter. Each
rank that comes to the prompt is told to JupyterLab as a ``stopped`` event of its thread, each
that runs on as ``continued``.
"""

from __future__ import annotations

import concurrent.futures
import json
import queue
import time
from collections.abc import Callable
from typing import Any

from ...contracts import RankState
from ...core.ranges import format_ranks
from ..cell_names import cell_of
from .channel import DebugChannel, RankSession
from .dap import SLOT, STEPS, THREAD_BASE, Adapter, thread_of
from .group import GroupPrompt
from .stopped import Member, StoppedRanks, eval_seconds

#: what a rank whose prompt is gone is sent in place of a step (answers, changes nothing)
NOTHING = "distcomp_call noop"
#: a frame's number (refs.give's) is ``evaluations * FRAME_IDS + index``: an Evaluate gives the
#: frames new ids, so JupyterLab, which asks for the frames again after it, sees a new frame
#: and asks for its Variables (with the same ids it would keep showing none)
FRAME_IDS = 10_000
GENERATIONS = (1 << 24) // FRAME_IDS
POLL = 0.05


def settle(future: concurrent.futures.Future, value: Any) -> None:
    """Answer the adapter's request, unless it gave up waiting (its future is cancelled)."""
    try:
        future.set_result(value)
    except concurrent.futures.InvalidStateError:  # cancelled or answered meanwhile
        pass


class Serving:
    """The adapter's requests for one group of stopped ranks, until none is stopped."""

    def __init__(
        self, adapter: Adapter, world_name: str, channel: DebugChannel, pump: Callable[[], None]
    ):
        self.adapter = adapter
        self.slot = adapter.slot(world_name, channel)
        self.pump = pump
        self.jobs: queue.Queue[tuple[str, dict, concurrent.futures.Future]] = queue.Queue()
        self.announced: set[int] = set()  # ranks JupyterLab was told are stopped
        self.stepped: set[int] = set()  # ranks whose next stop ends a step
        self.stacks: dict[int, list[dict]] = {}  # each stopped rank's frames at its stop
        self.version = adapter.ranks_version  # the adapter's breakpoints the ranks have
        self.group: GroupPrompt | None = None
        self.open = True
        self.evaluations = 0  # Evaluate requests answered: part of each frame's id
        #: the rank whose frames came first in the last stackTrace (JupyterLab selects it)
        self.first: int | None = None

    # -- the adapter's side (control thread) --------------------------------------------
    def submit(self, command: str, args: dict) -> concurrent.futures.Future:
        future: concurrent.futures.Future = concurrent.futures.Future()
        if not self.open:
            settle(future, "the ranks are running, none is stopped")
        else:
            self.jobs.put((command, args, future))
        return future

    def announced_threads(self) -> set[int]:
        return {thread_of(self.slot, r) for r in self.announced}

    # -- the cell's thread -------------------------------------------------------------
    def run(self, group: GroupPrompt) -> None:
        self.group = group
        self.adapter.serving = self
        try:
            group.run()
        finally:
            self.open = False
            self.adapter.serving = None
            self._tell_continued(set(self.announced))
            for rank in group.stopped.members:  # their frames and variables are stale now
                self.adapter.refs.forget(thread_of(self.slot, rank))
            while True:
                try:
                    _, _, future = self.jobs.get_nowait()
                except queue.Empty:
                    break
                settle(future, "the ranks are running, none is stopped")

    def ask(self, session: RankSession, prompt: str) -> str:
        """The next line for the group's focused ranks: the next step JupyterLab asks for."""
        group = self.group
        assert group is not None
        while True:
            self._sync_breakpoints()
            self._tell_stops()
            try:
                command, args, future = self.jobs.get(timeout=POLL)
            except queue.Empty:
                self.pump()
                group.stopped.poll(0.0)
                if not self._at_prompt():
                    return NOTHING
                continue
            try:
                line = self._job(command, args, future)
            except Exception as exc:  # a rank that left while asked: say so, serve on
                settle(future, f"{type(exc).__name__}: {exc}")
                continue
            if line is not None:
                return line

    def _job(self, command: str, args: dict, future: concurrent.futures.Future) -> str | None:
        group = self.group
        assert group is not None
        if command in STEPS or command == "detach":
            at = self._at_prompt()
            refusal = self._refusal(args, at) if command != "detach" else None
            if refusal is not None:
                settle(future, refusal)
                return None
            only = self.adapter.only
            if command != "detach" and only is not None and only in at:
                group.focus = {only}
                targets = {only}
            else:
                group.focus = None
                targets = set(at)
            if command == "detach":
                self._ask(targets, "breaks", [{}, {}])
            self.stepped |= targets if command not in ("continue", "detach") else set()
            for rank in targets:
                self.stacks.pop(rank, None)
                self.adapter.refs.forget(thread_of(self.slot, rank))
            self._tell_continued(targets)
            settle(future, {"allThreadsContinued": targets == set(at)})
            return "c" if command == "detach" else STEPS[command]
        if command == "breakpoints":
            settle(future, {})
            return None
        settle(future, self._question(command, args))
        return None

    def _refusal(self, args: dict, at: set[int]) -> str | None:
        """Why a step may not go to the ranks at the prompt (``at``): the thread it names
        is a rank of another world, or a rank that is not stopped; None if it may.
        JupyterLab's Continue names thread 1 (see dap.py): that means the stopped ranks."""
        thread = int(args.get("_thread") or 0)
        if thread < THREAD_BASE:
            return None
        rank = thread - thread_of(self.slot, 0)
        if not 0 <= rank < SLOT:
            return f"threadId {thread} is a rank of another world, which is not stopped"
        if rank not in at:
            return f"threadId {thread}: rank {rank} is not stopped"
        return None

    def _question(self, command: str, args: dict) -> Any:
        if command == "stackTrace":
            return self._stack_trace(int(args["_thread"]))
        thread, number = int(args["_thread"]), int(args["_number"])
        if command != "variables":  # a frame's number: the rank's index of the frame
            number %= FRAME_IDS
        rank = thread - thread_of(self.slot, 0)
        if rank not in self._at_prompt():
            return f"rank {rank} is not stopped"
        if command == "scopes":
            if rank != self.first:  # the person chose another rank's frame
                self.adapter.selected = rank
            found = self._ask({rank}, "scopes", [number])[rank]
            return {
                "scopes": [
                    {
                        "name": s["name"],
                        "variablesReference": self._ref("variable", thread, s["ref"]),
                        "expensive": False,
                    }
                    for s in found
                ]
            }
        if command == "variables":
            found = self._ask({rank}, "variables", [number])[rank]
            return {"variables": [self._variable(thread, v) for v in found]}
        expression = str(args.get("expression", "") if command == "evaluate" else "")
        if command == "evaluate":
            found = self._ask({rank}, "evaluate", [number, expression])[rank]
            self.evaluations = (self.evaluations + 1) % GENERATIONS
            if "error" in found:
                return str(found["error"]) + self._late(rank)
            ref = self._ref("variable", thread, found["ref"])
            return {"result": found["result"], "type": found["type"], "variablesReference": ref}
        if command == "richInspectVariables":
            name = str(args.get("variableName", ""))
            found = self._ask({rank}, "rich", [number, name])[rank]
        elif command == "copyToGlobals":
            names = [str(args.get("srcVariableName", "")), str(args.get("dstVariableName", ""))]
            found = self._ask({rank}, "to_globals", [number, *names])[rank]
        else:
            return f"{command} is not available for a rank"
        return str(found["error"]) + self._late(rank) if "error" in found else found

    def _late(self, rank: int) -> str:
        """Words for an answer of ``rank`` that came after its time limit's interrupt."""
        member = self.group.stopped.members.get(rank) if self.group is not None else None
        if member is None or not member.timed_out:
            return ""
        return f" (past the time limit of {eval_seconds():g} s)"

    def _ref(self, kind: str, thread: int, number: int) -> int:
        """JupyterLab's number for the rank's frame or variable ``number`` (0: none)."""
        return self.adapter.refs.give(kind, thread, number) if number or kind == "frame" else 0

    def _variable(self, thread: int, found: dict) -> dict:
        """A rank's variable as debugpy words it: a string drawn unquoted (``rawString``); a
        line that is no value (how many more there are) without a type, so that JupyterLab's
        tree draws its text."""
        ref = self._ref("variable", thread, found["ref"])
        variable = {
            "name": found["name"],
            "value": found["value"],
            "variablesReference": ref,
            "evaluateName": found["name"],
        }
        if found.get("type") is not None:
            variable["type"] = found["type"]
        if found.get("hint"):
            variable["presentationHint"] = {"attributes": [found["hint"]]}
        return variable

    def _stack_trace(self, thread: int) -> dict:
        """The frames of every stopped rank, each naming its rank: first those of the rank
        the person chose (JupyterLab selects the first frame), else ``thread``'s own."""
        at = self._at_prompt()
        chosen = self.adapter.selected
        first = chosen if chosen in at else thread - thread_of(self.slot, 0)
        order = ([first] if first in at else []) + sorted(r for r in at if r != first)
        self.first = order[0] if order else None
        missing = {r for r in order if r not in self.stacks}
        if missing:  # JupyterLab asks at each stop; the rank's next step is then its own
            self.stacks.update(self._ask(missing, "stack", []))  # (dap_side.stack)
        frames = []
        for rank in order:
            for frame in self.stacks.get(rank, []):
                path = self.adapter.source_path(frame["file"])
                cell = cell_of(frame["file"])  # the cell that defined the frame's code
                frames.append(
                    {
                        "id": self._ref(
                            "frame",
                            thread_of(self.slot, rank),
                            self.evaluations * FRAME_IDS + frame["index"],
                        ),
                        "name": f"rank {rank}: {frame['name']}",
                        "line": frame["line"],
                        "column": 1,
                        "source": {
                            "name": cell[0] if cell and cell[0] else path.rsplit("/", 1)[-1],
                            "path": path,
                        },
                    }
                )
        return {"stackFrames": frames, "totalFrames": len(frames)}

    def _ask(self, ranks: set[int], name: str, args: list) -> dict[int, Any]:
        """``dap_side.NAME(*args)`` on each of ``ranks`` at its prompt; each one's value."""
        group = self.group
        assert group is not None
        members = {m: f"{'distcomp_call'} {name} {json.dumps(args)}" for m in self._members(ranks)}
        said = f"the debugger's {name} request"
        answers = group.stopped.ask_ranks(members, said)
        found: dict[int, Any] = {}
        for member, answer in answers.items():
            if "error" in answer:
                rank = member.session.rank
                raise RuntimeError(f"rank {rank}: {answer['error']}{self._late(rank)}")
            found[member.session.rank] = answer.get("value")
        missing = ranks - set(found)
        ended = {m.session.rank for m in members if m.state == "ended"} & missing
        if ended:
            raise RuntimeError(
                f"{format_ranks(ended)} ended while it answered {said} (its process exited: "
                "os._exit, a crash or a kill): it is stopped no longer. Fix: `%distcomp "
                "restart` brings its rank back."
            )
        if missing:
            raise RuntimeError(
                f"{format_ranks(missing)} did not answer within the time limit of "
                f"{eval_seconds():g} s, nor after an interrupt: blocked in C code (a "
                "collective the other ranks did not join?); `%distcomp restart` if it stays so"
            )
        return found

    def _members(self, ranks: set[int]) -> list[Member]:
        group = self.group
        assert group is not None
        return [
            m
            for r, m in sorted(group.stopped.members.items())
            if r in ranks and m.state == "prompt"
        ]

    def _at_prompt(self) -> set[int]:
        group = self.group
        assert group is not None
        return {r for r, m in group.stopped.members.items() if m.state == "prompt"}

    def _sync_breakpoints(self) -> None:
        """Ranks at the prompt get the breakpoints JupyterLab set since."""
        if self.version == self.adapter.version:
            return
        self.version = self.adapter.ranks_version = self.adapter.version
        cells, files = self.adapter.rank_breakpoints()
        at = self._at_prompt()
        if at:
            self._ask(at, "breaks", [cells, files])

    def _tell_stops(self) -> None:
        """A ``stopped`` event for each rank new at the prompt; the lowest (or the rank the
        person chose, or the "this rank only" rank) last, as JupyterLab shows the thread
        that stopped last."""
        new = self._at_prompt() - self.announced
        if not new:
            return
        order = sorted(new, reverse=True)
        for last in (self.adapter.selected, self.adapter.only):
            if last in new:
                order.remove(last)
                order.append(last)
        for rank in order:
            self.announced.add(rank)
            reason = "step" if rank in self.stepped else "breakpoint"
            if reason == "breakpoint" and self.adapter.pausing:
                reason = "pause"
            self.stepped.discard(rank)
            self.adapter.event(
                "stopped",
                {
                    "reason": reason,
                    "threadId": thread_of(self.slot, rank),
                    "allThreadsStopped": False,
                    "description": f"rank {rank}",
                },
            )

    def _tell_continued(self, ranks: set[int]) -> None:
        for rank in sorted(ranks & self.announced):
            self.announced.discard(rank)
            self.adapter.event(
                "continued",
                {"threadId": thread_of(self.slot, rank), "allThreadsContinued": False},
            )


def serve_visual(
    adapter: Adapter,
    channel: DebugChannel,
    *,
    world_name: str,
    before_prompt: Callable[[], None],
    label: Callable[[int], str] | None,
    quits: set[int] | None,
    states: Callable[[], dict[int, RankState]] | None,
    on_input: Callable[[RankSession, dict], None] | None,
    interrupt: Callable[[list[int]], None] | None = None,
    output_here: bool = True,
) -> float:
    """Serve the stopped ranks for JupyterLab's debugger; the seconds spent (0.0 if none).
    ``output_here``: False where the ranks' output shows elsewhere (an attached job's logs)."""
    if not channel.pending():
        return 0.0
    tic = time.monotonic()
    serving = Serving(adapter, world_name, channel, before_prompt)
    stopped = StoppedRanks(
        channel=channel,
        name=world_name,
        quits=quits,
        states=states,
        interrupt=interrupt,
        on_input=on_input,
    )
    group = GroupPrompt(
        stopped=stopped,
        ask=serving.ask,
        before_prompt=before_prompt,
        label=label,
        refocus=True,
        output_here=output_here,
    )
    serving.run(group)
    return time.monotonic() - tic
