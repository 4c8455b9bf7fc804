"""Breakpoints of ranks whose cell or command runs in the background.

Only the kernel's main thread, inside a cell, can prompt. So the background thread does not
serve a rank that stops: it names it once in its own output area (and ``%distcomp status``
names it), and ``%distcomp wait NAME``, which runs on the main thread, serves the prompts
(or JupyterLab's debugger, while it is on). The ranks of an attached job are held so too.
The background run's time-out waits while a rank is stopped.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from ...contracts import RankState
from .channel import DebugChannel
from .serve import describe_stop, serve_stops


class HeldStops:
    """The stops of one background run on ``channel``; ``name`` is its component."""

    def __init__(
        self,
        channel: DebugChannel,
        name: str,
        label: Callable[[int], str],
        quits: set[int],
        interrupt: Callable[[], None],
        states: Callable[[], dict[int, RankState]] | None = None,
        interrupt_ranks: Callable[[list[int]], None] | None = None,
        before_prompt: Callable[[], None] = lambda: None,
        output_here: bool = True,
    ) -> None:
        self.channel = channel
        #: the ranks' output shows in the notebook (False: an attached job's, in its logs)
        self.output_here = output_here
        self.before_prompt = before_prompt  # what to show before each prompt
        #: SIGINT to some ranks: an evaluation at the prompt past its time limit
        self.interrupt_ranks = interrupt_ranks
        self.name = name
        self.label = label
        self.quits = quits  # ranks whose user typed q
        self.interrupt = interrupt  # an interrupt at a prompt: SIGINT to the run's ranks
        self.states = states  # the ranks' states, for a world's cell
        self._waiting = False  # `%distcomp wait` serves the stops now
        self._told: set[int] = set()  # stopped ranks already named in the output
        self._held_since: float | None = None  # a rank was stopped at the last check

    def hold(self) -> float:
        """The background thread: name each rank that stopped, once; the seconds since the
        last call during which a rank was stopped (the time-out adds them)."""
        now = time.monotonic()
        paused = now - self._held_since if self._held_since is not None else 0.0
        stopped = self.channel.stopped_ranks()
        if not self._waiting:
            for rank in sorted(set(stopped) - self._told):
                print(
                    f"{describe_stop(rank, stopped[rank], self.label)}: "
                    f"`%distcomp wait {self.name}` opens its prompt.",
                    flush=True,
                )
            self._told = set(stopped)
        self._held_since = now if stopped or self._waiting else None
        return paused

    def serve_waiting(self) -> float:
        """``%distcomp wait`` (the main thread): serve the stopped ranks; seconds spent. An
        interrupt at a prompt ends the debug session and interrupts the run; the wait goes
        on until the run ends."""
        if not self.channel.pending():
            return 0.0
        self._waiting = True
        tic = time.monotonic()
        try:
            self._serve()
        except KeyboardInterrupt:
            self.interrupt()
        finally:
            self._waiting = False
            self._told = set()
        return time.monotonic() - tic

    def _serve(self) -> None:
        """The stopped ranks at the group prompt, or, while JupyterLab's debugger is on,
        served to it as threads (dap_serve.py), as a cell's stops are."""
        serve_stops(
            self.channel,
            name=self.name,
            before_prompt=self.before_prompt,
            label=self.label,
            quits=self.quits,
            states=self.states,
            interrupt=self.interrupt_ranks,
            output_here=self.output_here,
        )

    def stopped(self) -> list[int]:
        """The ranks waiting for their prompt at a breakpoint."""
        return sorted(r for r, where in self.channel.stopped_ranks().items() if "ask" not in where)

    def asking(self) -> list[int]:
        """The ranks waiting in ``input()`` or ``getpass`` for an answer."""
        return sorted(r for r, where in self.channel.stopped_ranks().items() if "ask" in where)
