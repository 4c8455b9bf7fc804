"""``%%distcomp run NAME --background``: the cell runs on the ranks while the kernel is free.

The cell's :class:`~.run.CellRun` runs in a thread that carries the starting cell's context
(``contextvars``), so ipykernel sends the ranks' labelled output to that cell's output area
for as long as the cell runs. ``%distcomp wait NAME`` joins the thread and raises the error
the cell collected; ``%distcomp status`` and the JupyterLab panel show that it runs. While it
waits, ``%distcomp wait`` serves the prompts of ranks stopped at a breakpoint (``serve``);
``%distcomp status`` names them (``stopped``).

:class:`BackgroundJobs` keeps them per component (a ``%distcomp command --background`` too):
one runs at a time, a second is refused with the fix, and ``wait`` raises every error that
was not shown yet.
"""

from __future__ import annotations

import contextvars
import sys
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

from ...core.ranges import format_ranks
from ...errors import RankError

#: how often ``wait`` looks for ranks stopped at a breakpoint
WAIT_STEP = 0.1


class BackgroundCell:
    """One cell running in the background on ``ranks`` of world ``name``."""

    def __init__(
        self, name: str, ranks: list[int], run: Callable[[], Any], kind: str = "cell"
    ) -> None:
        self.name = name
        self.ranks = ranks
        #: what runs: "cell" (``%%distcomp run --background``) or "command"
        self.kind = kind
        self.started = time.monotonic()
        self.ended: float | None = None
        self.error: BaseException | None = None
        #: ended by `%distcomp stop`: its end is no failure for `%distcomp wait`
        self.cancelled = False
        self._run = run
        #: serves the stopped ranks' prompts (the seconds spent), and names them
        self.serve: Callable[[], float] = lambda: 0.0
        self.stopped: Callable[[], list[int]] = list
        #: the ranks waiting in input() for an answer
        self.asking: Callable[[], list[int]] = list
        self._done = threading.Event()
        context = contextvars.copy_context()  # the starting cell's output area
        self._thread = threading.Thread(
            target=context.run, args=(self._main,), name=f"distcomp-background-{name}", daemon=True
        )

    def start(self) -> BackgroundCell:
        self._thread.start()
        return self

    def _main(self) -> None:
        try:
            self._run()
        except BaseException as exc:  # kept for `%distcomp wait`
            self.error = None if self.cancelled else exc
        finally:
            self.ended = time.monotonic()
            self._done.set()
        if self.cancelled:
            print(
                f"{self.name}: the {self.what} was stopped by `%distcomp stop` after "
                f"{self.seconds:.1f} s.",
                file=sys.stderr,
                flush=True,
            )
        elif self.error is None:
            print(f"{self.name}: the {self.what} finished ({self.seconds:.1f} s).", flush=True)
        else:
            summary = getattr(self.error, "summary", None) or str(self.error).split("\n")[0]
            print(
                f"{self.name}: the {self.what} failed: {summary}. "
                f"`%distcomp wait {self.name}` shows the error.",
                file=sys.stderr,
                flush=True,
            )

    def join(self, timeout: float) -> bool:
        """Wait up to ``timeout`` s for the job to end; whether it ended."""
        return self._done.wait(timeout)

    @property
    def what(self) -> str:
        """How messages name it: "background cell" or "background command"."""
        return f"background {self.kind}"

    @property
    def running(self) -> bool:
        return not self._done.is_set()

    @property
    def seconds(self) -> float:
        return (self.ended or time.monotonic()) - self.started

    def describe(self) -> str:
        state = (
            "running"
            if self.running
            else ("stopped" if self.cancelled else "failed" if self.error else "finished")
        )
        stopped = self.stopped() if self.running else []
        asking = self.asking() if self.running else []
        held = (
            f"; {format_ranks(stopped)} stopped at a breakpoint: `%distcomp wait {self.name}` "
            "opens its prompt"
            if stopped
            else ""
        )
        if asking:
            held += (
                f"; {format_ranks(asking)} waits for input(): `%distcomp wait {self.name}` asks you"
            )
        return (
            f"{self.name}: {self.what} on {format_ranks(self.ranks)}, {state} "
            f"({self.seconds:.1f} s){held}"
        )

    def wait(self, timeout: float | None = None, asked: float | None = None) -> None:
        """Block until the cell ends, serving the prompts of ranks that stop meanwhile (the
        time at a prompt does not count); raise its error. A time-out leaves it running;
        ``asked``: the time-out the user gave, as the message says it."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self._done.wait(WAIT_STEP):
            paused = self.serve()
            if deadline is None:
                continue
            deadline += paused
            if time.monotonic() > deadline:
                break
        if not self._done.is_set():
            raise RankError(
                f"the {self.what} of {self.name!r} still runs after {asked or timeout:g} s "
                f"({format_ranks(self.ranks)}). It keeps running: `%distcomp where {self.name}` "
                f"shows where each rank is, `%distcomp interrupt {self.name}` stops it."
            )
        if self.error is not None:
            raise self.error


class BackgroundJobs:
    """The background jobs (cells and commands) of each component not yet waited for: the
    one running or last finished, and the failed ones whose error `%distcomp wait` has not
    shown yet. One job runs per component at a time."""

    def __init__(self) -> None:
        self._jobs: dict[str, list[BackgroundCell]] = {}

    def items(self) -> Iterable[tuple[str, list[BackgroundCell]]]:
        return list(self._jobs.items())

    def running(self, name: str) -> BackgroundCell | None:
        """The background job (cell or command) of ``name`` that runs now, if any."""
        return next((cell for cell in self._jobs.get(name, ()) if cell.running), None)

    def refuse_beside(self, name: str, what: str, kinds: str = "cell command") -> None:
        """A RankError when a background job of ``name`` (of one of ``kinds``) runs: ``what``
        is not started beside it."""
        running = self.running(name)
        if running is not None and running.kind in kinds.split():
            raise RankError(
                f"{name!r} already runs a {running.what} ({running.seconds:.0f} s so far), so "
                f"this {what} was not started: a component runs one background job at a time. "
                f"Fix: `%distcomp wait {name}` waits for it and shows its error, "
                f"`%distcomp interrupt {name}` stops it; then start this one again."
            )

    def add(self, name: str, cell: BackgroundCell) -> BackgroundCell:
        """Keep ``cell`` as ``name``'s background job (a RankError while another runs);
        earlier jobs whose error was not waited for stay, for `%distcomp wait`."""
        self.refuse_beside(name, cell.what)
        failed = [earlier for earlier in self._jobs.get(name, ()) if earlier.error]
        self._jobs[name] = [*failed, cell]
        return cell

    def wait(self, name: str, timeout: float | None = None) -> BackgroundCell:
        """Block until the background jobs of ``name`` end; raise their errors (one
        RankError naming each when several failed). Returns the latest job."""
        cells = list(self._jobs.get(name, ()))
        if not cells:
            raise RankError(
                f"{name!r} has no background cell or command. Fix: start one with "
                f"`%%distcomp run {name} --background` or `%distcomp command {name} "
                "--background`."
            )
        deadline = None if timeout is None else time.monotonic() + timeout
        errors: list[tuple[BackgroundCell, BaseException]] = []
        for cell in cells:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            try:
                cell.wait(left, asked=timeout)
            except BaseException as exc:
                if cell.running:  # a time-out (or Ctrl-C): every job stays for the next wait
                    raise
                errors.append((cell, exc))
        kept = [cell for cell in self._jobs.get(name, ()) if cell not in cells]
        if kept:  # started meanwhile
            self._jobs[name] = kept
        else:
            self._jobs.pop(name, None)
        if len(errors) == 1:
            raise errors[0][1]
        if errors:
            parts = [f"{cell.what} ({cell.seconds:.1f} s): {exc}" for cell, exc in errors]
            raise RankError(
                f"{len(errors)} background jobs of {name!r} failed, oldest first:\n\n"
                + "\n\n".join(parts)
            )
        return cells[-1]
