"""One ``%%distcomp run`` cell: send the code to the ranks, stream, and end it well.

The cell ends when every chosen rank has answered, when a rank dies (within a few seconds,
saying why), at the time-out (naming the busy ranks with their stacks, then interrupting
them), or on a kernel interrupt (SIGINT to every busy rank, back within two seconds), or
when a rank failed while the others stay busy (failfast.py).
Each rank's output comes through :class:`~.feed.OutputFeed` as ipyparallel receives it; the
cell's thread wakes for each message and writes it (output.py).
"""

from __future__ import annotations

import signal
import sys
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ...contracts import RankState
from ...core.ranges import format_ranks
from ...core.tf_config import empty_ps_hint
from ...errors import RankError, RankInterrupt
from .. import cell_names
from ..debug.cells import CellDebug, cell_padding, cell_source
from ..stacks import stack_sections
from . import gpu, ipp, ledgers
from .failfast import FailFast
from .failures import death_reason, error_sections
from .feed import OutputFeed
from .options import CellOptions
from .output import RankOutput
from .silence import SilenceLine

if TYPE_CHECKING:
    from .world import World

INTERRUPT_GRACE = 1.5  # seconds the ranks get to answer SIGINT before the cell returns
PROMPT_GRACE = 3.0  # seconds more when the interrupt ended a debugger prompt
STACK_WAIT = 0.5  # seconds to wait for the busy ranks' stacks on an interrupt
DEATH_GRACE = 2.0  # seconds to let mpiexec report a death and stop the other ranks
OUTPUT_GRACE = 1.0  # seconds to wait for more output after a rank's reply (or its last output)
OUTPUT_LIMIT = 300.0  # seconds after a rank's reply its output may keep arriving
#: seconds a rank that waits for acknowledgements may send nothing before all it wrote is
#: acknowledged (text it counted that never reached the kernel does not stop it for good)
CATCH_UP = 1.0
ALIVE_CHECK = 0.2  # seconds between checks that every rank's process still exists
SEND_LIMIT = 30.0  # seconds ipyparallel's thread has to send a cell's requests
SAID_LINES = 40  # lines of mpiexec's output shown with a death
#: the heading of the stack of a rank still running after the interrupt (it did not stop)
STILL_AT = "did not stop; at the interrupt it was at"
REPORT_LINES = 2000  # lines of mpiexec's output searched for the cause of a death


def cell_name(shell: Any, code: str) -> str:
    """``Cell In[12]`` for the notebook's cell 12 that runs ``code`` (``Cell`` outside IPython).

    IPython counts past a cell it stores in its history before running it; a cell run
    without history (``run_cell(store_history=False)``) keeps the count.
    """
    count = getattr(shell, "execution_count", None)
    if not isinstance(count, int):
        return "Cell"
    history = getattr(getattr(shell, "history_manager", None), "input_hist_raw", None)
    if history and len(history) == count and code.strip() and code.strip() in history[-1]:
        count -= 1
    return f"Cell In[{count}]"


def lost_text(label: str, units: int, lines: int, displays: int) -> str:
    """What a cell says of a rank's output that it does not show."""
    parts = [f"{lines:,} line(s)"] if lines else []
    parts += [f"{displays:,} display(s)"] if displays else []
    what = " and ".join(parts) or f"{units:,} character(s)"
    return (
        f"distcomp: {label} {what} of output are not shown: the rank wrote them, and they "
        "were still on their way when the cell stopped waiting for them (the rank or the "
        "machine was busy, or the cell was stopped). Fix: run the cell again; output that "
        "must not be lost can go to a file."
    )


class CellRun:
    def __init__(
        self,
        world: World,
        ranks: list[int],
        code: str,
        options: CellOptions | None = None,
        *,
        shell: Any = None,
        stopping: list[int] | None = None,
    ) -> None:
        """``options``: how the cell runs; ``stopping``: the ranks whose ``breakpoint()``
        stops (None: every rank), parsed from ``options.debug_ranks``."""
        options = options or CellOptions()
        timeout, first_line = options.timeout, options.first_line
        self.world = world
        self.ranks = ranks
        # comment lines up to ``first_line`` (IPython drops leading blank lines), so the
        # ranks' line numbers are the cell's; a cell magic must stay the first line
        pad = 0 if code.lstrip().startswith("%%") else first_line - 1
        source = cell_source(shell, code)
        self.code = cell_padding(pad, source) + code
        #: how tracebacks name the cell: the notebook's own name for it
        self.cell = cell_name(shell, code)
        cell_names.remember(self.code, self.cell, source)
        self.timeout = timeout
        self.flows = world.flows
        self.out = RankOutput(
            world.label,
            group=options.group_output,
            shell=shell,
            acks=self.flows.ack if self.flows is not None else None,
        )
        self.wake = threading.Event()
        self.futures: dict[int, ipp.RankReply] = {}
        self.running: set[int] = set()
        self.feed = OutputFeed(ranks, self.wake.set, self._output_complete)
        self._replied_at: dict[int, float] = {}
        self._cut_short: set[int] = set()  # ranks that ended with their output incomplete
        self._started = time.monotonic()
        self.fail_fast = FailFast(
            world,
            self.code,
            options.fail_fast,
            self._errors_not_interrupts,
            self._settle,
            INTERRUPT_GRACE,
            self.cell,
            lambda: self.debug.quits,
        )
        self.debug = CellDebug(world, stopping, self.wake.set)
        self.check_collectives = options.check_collectives
        # a background cell, or one with a time-out, says nothing of a hang
        quiet = options.background or timeout is not None
        self.hang = ledgers.HangWatch(world, None if quiet else options.hang_notice)
        self.silence = SilenceLine(world, shell, self.code, self.cell)
        self._prompted = False  # a debugger prompt showed in the cell

    # -- main ---------------------------------------------------------------------------
    def run(self) -> None:
        """Run the cell (its output is written as it arrives; its errors are raised)."""
        try:
            self._run()
        except BaseException:
            if self.check_collectives:  # a rank may have left an exchange half done
                ledgers.void_checks(self.world)
            raise

    def _run(self) -> None:
        world = self.world
        self.log_offset = world.output_size()
        world.cell_code = self.code
        engine_ids = [world.ranks[r].engine_id for r in self.ranks]
        with world.notices.held():  # the panel hears of the cell once its requests are out
            execution = self._send(engine_ids)
        self.futures = dict(zip(self.ranks, execution.replies, strict=True))
        if self.flows is not None:
            for rank, reply in self.futures.items():
                self.flows.show(rank, reply.request_id)
        self.running = set(self.ranks)
        self._started = time.monotonic()
        try:
            self._loop()
        except KeyboardInterrupt:
            self._interrupt()  # raises RankInterrupt, saying where each rank was
        finally:
            for rank, kind, content in self.feed.drain():
                self.out.message(rank, kind, content)
            self.feed.close()
            if self.flows is not None:
                self.flows.release(self.ranks)
            self.silence.finish()
            self.out.finish()
            self._say_lost()
            self.debug.finish(self._errors())
            self.world.notices.flush()  # the panel has the ranks' states before the cell ends

    def _send(self, engine_ids: list[int | None]) -> ipp.Execution:
        """The cell's requests, sent; its ranks busy until they reply."""
        world = self.world
        world.set_state(self.ranks, RankState.BUSY)
        world.used = True
        try:
            if world.client is None:
                raise RankError(f"The ranks of {world.name!r} are stopped.")
            ledgers.set_check(world, self.check_collectives)
            self.debug.arm(self.code, self.out.shell, self.ranks, self.timeout)
            execution = ipp.Execution(
                world.client,
                [e for e in engine_ids if e is not None],
                self.code,
                self.feed.on_message,
                self._replied,
                cell=self.cell[self.cell.find("[") + 1 : -1] if "[" in self.cell else "",
            )
            if not execution.wait_sent(SEND_LIMIT):
                raise RankError(
                    f"the connection to the ranks of {world.name!r} does not answer "
                    f"(ipyparallel's client thread is stuck). Fix: `%distcomp restart "
                    f"{world.name}`."
                )
        except Exception:
            world.set_state(self.ranks, RankState.IDLE)
            raise
        return execution

    def _replied(self, index: int, reply: ipp.RankReply) -> None:
        """ipyparallel's thread: the rank at ``index`` (of the cell's ranks) answered (maybe
        long after the cell ended)."""
        rank = self.ranks[index]
        self._replied_at.setdefault(rank, time.monotonic())
        self.world.set_state([rank], RankState.IDLE)
        # the loop wakes for the last reply and for a failure (fail-fast); the other replies
        # wait for its next look, so that the busy ranks keep the processor
        if len(self._replied_at) >= len(self.ranks) or isinstance(reply.outcome(), BaseException):
            self.wake.set()

    def _output_complete(self, rank: int) -> None:
        """ipyparallel's thread: all of the rank's output is in. The loop wakes when this
        may end the cell, once every rank replied; until then the last reply wakes it."""
        if len(self._replied_at) >= len(self.ranks):
            self.wake.set()

    def _loop(self) -> None:
        deadline = time.monotonic() + self.timeout if self.timeout else None
        next_check = time.monotonic() + ALIVE_CHECK
        while self.running:
            self._wait(0.1)
            self._pump()
            if self.debug.channel is not None and self.debug.channel.pending():
                self.silence.finish()  # a rank stopped: its prompt, or JupyterLab's, speaks
            # the time-out waits while at a prompt
            paused = self.debug.serve(self._pump, self._shown)
            self._prompted = self._prompted or paused > 0
            if deadline is not None:
                deadline += paused
            if not self.running:
                break
            if time.monotonic() > next_check:  # psutil costs; a quick cell needs no check
                next_check = time.monotonic() + ALIVE_CHECK
                self.world.check_alive()
            if set(self.world.dead_ranks) & self.running:
                self._on_death()
            if deadline is not None and time.monotonic() > deadline:
                self._on_timeout()
            self.fail_fast.check(self.running)
            self.hang.check(self.running)
            self.silence.check(self.running, shown=bool(self.out.taken) or self._prompted)
        if self._engine_died() or set(self.world.dead_ranks) & set(self.ranks):
            self._on_death()
        self._raise_errors()

    def _wait(self, seconds: float) -> None:
        """Until a rank replies, sends output or ends its output (or ``seconds`` pass)."""
        self.wake.wait(seconds)
        self.wake.clear()

    def _engine_died(self) -> bool:
        """ipyparallel answered 'engine died' for some rank (its nanny told the hub)."""
        for reply in self.futures.values():
            value = reply.outcome()
            if isinstance(value, BaseException) and "EngineError" in (
                getattr(value, "ename", None) or type(value).__name__
            ):
                return True
        return False

    # -- output and completion ----------------------------------------------------------
    def _pump(self) -> None:
        # which ranks ended is decided before their output is read: output that completes
        # between the two is still read below
        now = time.monotonic()
        ended = [rank for rank in self.running if self._output_ended(rank, now)]
        for rank, kind, content in self.feed.drain():
            self.out.message(rank, kind, content)
        self._cut_short.update(r for r in ended if not self.futures[r].output_complete())
        self.running.difference_update(ended)
        self.out.flush_partial(force=not self.running)
        self.out.flush()
        self._catch_up(now)

    def _shown(self, rank: int, cell: str, units: int) -> bool:
        """Whether the cell has taken ``units`` of the output ``rank`` wrote for request
        ``cell`` (what a rank counted as it came to its debugger prompt)."""
        reply = self.futures.get(rank)
        if reply is None or reply.request_id != cell:
            return True
        return self.out.taken.get(rank, (0, 0, 0))[0] >= units

    def _catch_up(self, now: float) -> None:
        """A rank that waits for acknowledgements while nothing of it is on its way gets
        them (what it counted never came: it must not wait for it for ever)."""
        if self.flows is None or self.out.in_flight:
            return
        for rank in self.running:
            since = self.feed.last.get(rank, self._started)
            if now - since > CATCH_UP and self.flows.behind(rank):
                self.flows.catch_up(rank)

    def _say_lost(self) -> None:
        """Say, per rank, what of its output had not arrived when the cell ended here (it is
        not shown): exact where the rank counts what it wrote (flow.py), else that it may be
        incomplete."""
        unknown = []
        for rank in self.ranks:
            reply = self.futures.get(rank)
            if reply is None or reply.output_complete():
                continue
            written = None
            if self.flows is not None:
                written = self.flows.written(rank, reply.request_id)
            if written is None:
                if rank in self._cut_short:
                    unknown.append(rank)
                continue
            taken = self.out.taken.get(rank, (0, 0, 0))
            missing = [max(0, w - t) for w, t in zip(written, taken, strict=True)]
            if missing[0] > 0:
                print(lost_text(self.world.label(rank), *missing), file=sys.stderr)
        if unknown:
            print(
                f"distcomp: the output of {format_ranks(unknown)} may be incomplete: "
                f"its end had not arrived {OUTPUT_GRACE:g} s after its last output (or "
                f"{OUTPUT_LIMIT:g} s after the cell ended there).",
                file=sys.stderr,
            )

    def _output_ended(self, rank: int, now: float) -> bool:
        """The rank replied and all its output is in (or none came for OUTPUT_GRACE since
        the reply: a burst still arriving keeps the cell open until it is all in)."""
        reply = self.futures[rank]
        if not reply.replied():
            return False
        if reply.output_complete():
            return True
        replied = self._replied_at.get(rank, now)
        quiet_since = max(replied, self.feed.last.get(rank, 0.0))
        return now - quiet_since > OUTPUT_GRACE or now - replied > OUTPUT_LIMIT

    def _errors(self, skip_interrupts: bool = False) -> dict[int, Any]:
        """Each failed rank's RemoteError; deaths are reported apart."""
        errors: dict[int, Any] = {}
        for rank in self.ranks:
            err = self.futures[rank].outcome()  # None until the rank replied
            if isinstance(err, BaseException):
                ename = getattr(err, "ename", None) or type(err).__name__
                if ename == "EngineError":
                    continue  # a death, reported from mpiexec's side
                if skip_interrupts and ename == "KeyboardInterrupt":
                    continue
                errors[rank] = err
        return self.debug.drop_quits(errors)

    def _errors_not_interrupts(self) -> dict[int, Any]:
        return self._errors(skip_interrupts=True)

    def _gpu(self, rank: int) -> list[str]:
        """What a rank that ran out of GPU memory held (see gpu.py)."""
        return gpu.out_of_memory_lines(self.world, rank)

    def _raise_errors(self) -> None:
        errors = self._errors()
        if errors:
            raise RankError(
                f"the cell failed on {format_ranks(errors)} of {self.world.name!r}"
                + (
                    f" ({len(self.ranks) - len(errors)} rank(s) succeeded)"
                    if len(errors) < len(self.ranks)
                    else ""
                ),
                sections=error_sections(errors, self._gpu) + self.world.node_notices(list(errors)),
                fix="Output printed before the error is kept above. The ranks keep their state "
                "and are ready for the next cell.",
            )

    def _settle(self, seconds: float, until: Callable[[], bool]) -> None:
        """Keep streaming for up to ``seconds`` or until ``until()`` is true."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline and not until():
            self.wake.wait(0.05)
            self.wake.clear()
            self._pump()
            self.world.check_alive()
        self._pump()

    # -- the three bad endings ----------------------------------------------------------
    def _interrupt(self) -> None:
        """Ctrl-C: read where each busy rank is, SIGINT them, and raise a RankInterrupt that
        shows that and nothing of the package."""
        world = self.world
        busy = sorted(self.running)
        try:
            stacks = world.stacks(busy, wait=STACK_WAIT)
        except KeyboardInterrupt:
            stacks = {}  # a second Ctrl-C: no stacks
        world.signal(busy, signal.SIGINT)
        prompt = self.debug.interrupted_prompt()
        # ranks at a debugger prompt run Python: they answer, given the time
        grace = INTERRUPT_GRACE + (PROMPT_GRACE if prompt else 0.0)
        try:
            self._settle(grace, lambda: not self.running)
            if prompt and self.running and self.debug.channel is not None:
                # SIGINT ended a command typed at the prompt (pdb catches it), so those
                # ranks are back at their prompt: closing their sessions makes them quit
                self.debug.channel.end_sessions()
                self._settle(PROMPT_GRACE, lambda: not self.running)
        except KeyboardInterrupt:
            pass  # a second Ctrl-C: stop waiting
        self.out.finish()
        still = sorted(self.running)
        message = f"Interrupted: sent SIGINT to {format_ranks(busy)} of {world.name!r}"
        if prompt:
            message = f"Interrupted at {prompt}; sent SIGINT to {format_ranks(busy)}"
        stopped = [r for r in busy if r not in still]
        message += f"; {format_ranks(stopped)} stopped." if stopped else "."
        sections = ledgers.verdict_sections(world, busy, sorted(self._errors(skip_interrupts=True)))
        if still:
            fix = ledgers.stuck_fix(world, still)
        else:
            fix = "Output printed before the interrupt is kept above. The ranks are ready for the next cell."
            if prompt:
                fix = f"The debug session ended. {fix}"
        self.running.clear()
        # where each rank was at the interrupt: those still running did not stop there
        for ranks, label in ((stopped, "stopped at"), (still, STILL_AT)):
            chosen = {r: stacks[r] for r in ranks if r in stacks}
            sections += stack_sections(chosen, self.code, label, self.cell)
        raise RankInterrupt(message, sections=sections, fix=fix) from None

    def _on_death(self) -> None:
        world = self.world
        if world.stopped:
            self._on_stopped()
        self._settle(DEATH_GRACE, lambda: not self.running and not world.mpiexec_alive())
        world.check_alive()
        said, reasons = self._death_report()
        dead = [r for r in self.ranks if world.ranks[r].state == RankState.DEAD]
        culprits = [r for r, why in reasons.items() if why] or world.first_gone() or dead
        for rank in culprits:
            world.ranks[rank].death = reasons.get(rank) or "died"
        others = [r for r in world.dead_ranks if r not in culprits]
        sections = [
            (format_ranks([r]), [f"died: {reasons.get(r) or 'the process is gone'}"])
            for r in culprits
        ]
        if others:
            sections.append(
                (format_ranks(others), ["stopped by mpiexec because another rank died"])
            )
        sections += error_sections(self._errors(), self._gpu)
        if said:
            sections.append(("what mpiexec printed", said.splitlines()))
        why = "; ".join(f"{format_ranks([r])} {reasons[r] or 'died'}" for r in culprits)
        self.running.clear()
        hint = empty_ps_hint(world.envs, [reasons[r] or said for r in culprits])
        raise RankError(
            f"{why} while running the cell on {world.name!r}",
            sections=sections,
            fix=(f"{hint}\n" if hint else "")
            + f"Output of the other ranks is kept above. Fix: `%distcomp restart {world.name}` "
            "starts a fresh world (variables on the ranks are lost).",
        )

    def _death_report(self) -> tuple[str, dict[int, str]]:
        """What mpiexec printed since the cell began, and each rank's cause of death in it.

        mpiexec may print its report after the ranks are gone: while it names no rank, its
        output is read again for up to DEATH_GRACE more seconds.
        """
        world = self.world
        # only our own mpiexec reports; a user's cluster says nothing worth waiting for
        deadline = time.monotonic() + (DEATH_GRACE if world.cluster is not None else 0)
        while True:
            full = world.mpiexec_output(since=self.log_offset, limit=REPORT_LINES)
            reasons = {r: death_reason(r, full) for r in range(world.world_size)}
            if any(reasons.values()) or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        return "\n".join(full.splitlines()[-SAID_LINES:]), reasons

    def _on_stopped(self) -> None:
        """The world was stopped (``%distcomp stop``, the panel) while the cell ran."""
        self._pump()
        busy = sorted(self.running)
        self.running.clear()
        raise RankError(
            f"the ranks of {self.world.name!r} were stopped while the cell ran on "
            f"{format_ranks(busy or self.ranks)}",
            fix="Output printed before the stop is kept above. The next `%%distcomp run "
            f"{self.world.name}` starts fresh ranks (their variables are lost).",
        )

    def _on_timeout(self) -> None:
        world = self.world
        busy = sorted(self.running)
        stacks = world.stacks(busy)
        world.signal(busy, signal.SIGINT)
        self._settle(INTERRUPT_GRACE, lambda: not self.running)
        still = sorted(self.running)
        errors = self._errors(skip_interrupts=True)
        sections = ledgers.verdict_sections(world, busy, sorted(errors))
        sections += stack_sections(stacks, self.code, "busy, current stack", self.cell)
        sections += error_sections(errors, self._gpu)
        sections += world.node_notices(busy)
        if still:
            fix = ledgers.stuck_fix(world, still)
        else:
            fix = (
                f"Interrupted {format_ranks(busy)} (SIGINT); all ranks are ready for the next "
                "cell. Fix: the stacks show where they waited; or allow more time with --timeout."
            )
        self.running.clear()
        raise RankError(
            f"the cell timed out after {self.timeout:g} s on {world.name!r}: "
            f"{format_ranks(busy)} still busy",
            sections=sections,
            fix=fix,
        )
