"""Run a component's command on local ranks, as Azure ML would: ``%distcomp command``.

One process per rank with that rank's variables (``rank_environments``), in its node's copy
of the component's code folder (``machine/node_disks.py``; one node too), under ``mpiexec``
for ``mpi`` / ``deepspeed`` launchers and as plain processes for ``torch.distributed`` /
``tensorflow`` (see launch.py). Output streams while the
ranks run, each line labelled with its rank; the first rank to fail stops the others, so a
crashed rank never leaves its peers hanging in a collective; Ctrl-C and ``timeout`` stop
every rank (SIGINT first, so Python ranks print where they were, SIGKILL after ``grace``).
"""

from __future__ import annotations

import queue
import shutil
import signal
import sys
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ...contracts import RankState
from ...core.bindings import local_inputs, local_outputs
from ...core.layout import MPI_LAUNCHERS, env_places
from ...core.ranges import format_ranks, rank_label
from ...core.rank_text import OpenColours, labelled_lines
from ...core.tf_config import empty_ps_hint
from ...core.tracebacks import HeldTracebacks, HookFrames, without_rank_prefix
from ...errors import RankError, SpecError
from ...machine.gpus import shortage_notice
from ...machine.hosts import Placement
from ...machine.node_disks import NodeDisks, make_node_disks, user_text
from ...machine.shim import listen_environment, node_environment
from ..debug.channel import DebugChannel
from ..debug.held import HeldStops
from ..debug.serve import serve
from . import launch as launch_mod
from .active import ActiveRun, registered
from .result import TAIL_LINES, CommandResult, RankResult, failure_message

if TYPE_CHECKING:
    from ...core.model import Component

#: after the ranks have exited, how long to wait for output still in flight
DRAIN_SECONDS = 1.0
BATCH_SECONDS = 0.02


def _check_program(argv: list[str], env: dict[str, str], cwd: Path) -> None:
    if not argv:
        raise SpecError("the component's command is empty. Fix: give the launcher a command.")
    program = argv[0]
    found = (cwd / program).exists() if "/" in program else shutil.which(program, path=env["PATH"])
    if not found:
        raise SpecError(
            f"the command starts with {program!r}, which is not found (in {cwd} or on PATH). "
            "Fix: install it in the kernel's environment or correct the spec's command."
        )


def _created(component: Component, paths: dict[str, Path]) -> dict[str, str]:
    """Output name -> path, each output's folder created (a file output's: its parent)."""
    for name, path in paths.items():
        out = component.outputs[name]
        folder = path.parent if out.data_type == "uri_file" else path
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise SpecError(
                f"output '{name}': cannot create the folder {folder}: {exc.strerror}. "
                f"Fix: --output {name}=a/writable/folder",
                line=out.line,
                path=f"outputs.{name}",
            ) from None
    return {name: str(path) for name, path in paths.items()}


def run_command(
    component: Component,
    inputs: dict[str, Any] | None = None,
    outputs: dict[str, Any] | None = None,
    timeout: float | None = None,
    stream: Callable[..., Any] | None = print,
    *,
    master_addr: str = "127.0.0.1",
    placement: Placement | None = None,
    grace: float = 3.0,
    cwd: str | Path | None = None,
    check: bool = True,
    background: Any = None,
    name: str | None = None,
    on_line: Callable[[int, str, str], Any] | None = None,
    debugger: bool = True,
) -> CommandResult:
    """Run the component's command on every rank of its current layout.

    ``stream`` is called like ``print(text, file=sys.stdout or sys.stderr, flush=True)`` with
    labelled lines as they arrive (None: quiet). Raises RankError (with ``.result``) if a rank
    fails or the run times out, unless ``check`` is False; re-raises KeyboardInterrupt after
    stopping every rank. ``inputs`` / ``outputs`` override the run settings for this run only.
    ``cwd`` is where relative input and output paths start (default: the current folder, the
    notebook's); the ranks themselves run in their node's copy of the component's code
    folder (on this machine; on hosts, in the code folder there), and what they print names
    the user's files, not the copies. ``placement``: the hosts the nodes run on (node i on
    host i, started by mpiexec over ssh, whatever the launcher; the code folder must exist
    at the same path there). ``background``: the
    BackgroundCell this run is the thread of; its ``wait`` serves the breakpoints. ``name``:
    what the notebook calls the component (default: the spec's name); ``%distcomp where`` and
    ``interrupt`` find the run by it. ``on_line(rank, stream, text)``: called with each line a
    rank prints, as it printed it (no label; ``stream`` is "stdout" or "stderr").
    ``debugger``: False leaves a rank's ``breakpoint()`` to the rank (pdb's own, as on Azure
    ML, where nothing of the notebook's waits for it).
    """
    cwd = Path(cwd or Path.cwd()).resolve()
    bound_inputs = local_inputs(component, inputs, cwd)
    bound_outputs = _created(component, local_outputs(component, outputs, cwd))
    argv = [str(a) for a in component.render_command(bound_inputs, bound_outputs)]
    code_dir = component.code_path
    problem = component.code_folder_problem(code_dir)
    if problem:
        raise SpecError(f"component '{component.name}': {problem}")
    layout = component.runsettings.resource_layout
    nodes = layout.instance_count
    launcher = component.launcher_type
    placement = (placement or Placement()).for_layout(nodes)
    if launcher is None:  # a CommandComponent: one process, no rank variables
        envs: list[dict[str, str]] = [{}]
        placement = Placement(placement.hosts[:1], placement.ssh_command)
    else:  # free ports, not Azure's fixed ones: local runs share one machine and would collide
        envs = placement.rank_environments(component, master_addr)
    base_env = launch_mod.base_environment(component.environment_variables)
    _check_program(argv, base_env, code_dir)
    short = placement.local and shortage_notice(
        launcher, nodes, layout.process_count_per_node if launcher else 1
    )
    if short and stream is not None:
        stream(short, file=sys.stderr, flush=True)
    # breakpoint() in a rank prompts here, through a channel on the ranks' address
    channel = DebugChannel(placement.listen()) if debugger else None
    if channel is not None:
        envs = [{**env, **channel.rank_environment(r, base_env)} for r, env in enumerate(envs)]
    ranks = [RankResult(rank=r, node=node) for r, (node, _) in enumerate(env_places(envs))]
    result = CommandResult(
        component=component.name,
        launcher=launcher or "none",
        argv=argv,
        cwd=code_dir,
        inputs=bound_inputs,
        outputs=bound_outputs,
        ranks=ranks,
        timeout=timeout,
        zero_or_greater=(component.successful_return_code or "").lower() == "zeroorgreater",
    )
    labels = [rank_label(r.rank, r.node, nodes) for r in ranks]
    run = _Run(result, labels, stream, timeout, grace)
    run.on_line = on_line
    run.debugger = channel
    if background is not None and channel is not None:  # `%distcomp wait` prompts
        run.held = HeldStops(
            channel,
            component.name,
            run._label,
            run.quits,
            run.interrupt_from_elsewhere,
            run._states,
            lambda ranks: run.started.signal(signal.SIGINT, ranks),
        )
        background.serve, background.stopped = run.held.serve_waiting, run.held.stopped
        background.asking = run.held.asking
    started = time.monotonic()
    active = ActiveRun(len(envs), code_dir)
    active.supervisors = lambda: run.launch.pids() if run.launch is not None else {}
    active.interrupt = run.interrupt_from_elsewhere
    base_env = active.environment(base_env)
    disks: NodeDisks | None = None
    with registered(name or component.name, active):
        try:
            envs = [{**env, **node_environment(env)} for env in envs]  # a host per node
            cwds = None
            if placement.local:  # a disk per node, one node too: never the user's folder
                outputs_inside = [Path(p) for p in bound_outputs.values()]
                nodes_of = [node for node, _ in env_places(envs)]
                disks = make_node_disks(code_dir, max(nodes_of) + 1, skip=outputs_inside)
                cwds = [disks.code[node] for node in nodes_of]
                envs = [{**e, **disks.environment(n)} for e, n in zip(envs, nodes_of, strict=True)]
            if launcher in MPI_LAUNCHERS or placement.hosts:  # mpiexec reaches the hosts
                run.launch = launch_mod.MpiLaunch(
                    argv,
                    envs,
                    code_dir,
                    run.events,
                    base_env,
                    placement,
                    layout.process_count_per_node if launcher else 1,
                    drop_mpi=launcher not in MPI_LAUNCHERS,
                    cwds=cwds,
                )
            else:
                listen = listen_environment()  # their servers (a rendezvous) on loopback only
                rank_envs = [{**base_env, **listen, **env} for env in envs]
                run.launch = launch_mod.DirectLaunch(argv, rank_envs, code_dir, run.events, cwds)
            run.wait()
        finally:
            run.finish()
            result.seconds = time.monotonic() - started
            if disks is not None:
                disks.remove()
    if result.interrupted:
        raise KeyboardInterrupt
    if check and not result.ok:
        hint = empty_ps_hint(envs, [r.returncode for r in result.failed])
        error = RankError(failure_message(result) + (f"\n{hint}" if hint else ""))
        error.result = result
        raise error
    return result


class _Run:
    """The kernel side of one run: events in, labelled output out, ranks stopped on failure."""

    def __init__(self, result: CommandResult, labels, stream, timeout, grace):
        self.result = result
        self.labels = labels
        self.stream = stream
        self.timeout = timeout
        self.grace = grace
        self.events: queue.Queue = queue.Queue()
        self.launch: launch_mod.DirectLaunch | launch_mod.MpiLaunch | None = None
        self.eofs: dict[int | None, int] = {r.rank: 0 for r in result.ranks}
        self.eofs[None] = 0
        self.exited: set[int] = set()
        self.stop_deadline: float | None = None
        self.killed = False
        self.launcher_tail: deque = deque(maxlen=TAIL_LINES)
        self.colours = OpenColours()  # no colour a rank leaves on reaches a label
        self.debugger: DebugChannel | None = None
        self.quits: set[int] = set()  # ranks whose user typed q at a prompt
        self.held: HeldStops | None = None  # a run in the background: its stops wait
        self.tracebacks = HeldTracebacks()  # shown once per distinct text at the end
        self.hook_frames = HookFrames()  # our wrappers' frames, left out of what is shown
        self.on_line: Callable[[int, str, str], Any] | None = None  # each rank's raw lines

    # -- output ---------------------------------------------------------------------------
    def _next(self, timeout: float):
        try:
            return self.events.get(timeout=timeout) if timeout > 0 else self.events.get_nowait()
        except queue.Empty:
            return None

    def drain(self, wait: float) -> None:
        """Handle the queued events; print consecutive lines of one stream in one call.

        Lines arriving within BATCH_SECONDS of the first go out together: a chatty rank then
        costs a notebook a few messages per second, not one per line, and nothing waits long.
        """
        batch: list[str] = []
        batch_stream = ""
        item = self._next(wait)
        until = time.monotonic() + BATCH_SECONDS
        while item is not None:
            if item[0] == "line" and item[1] is None:
                # mpiexec's own words: kept for the error message when no rank explains a
                # failure; not streamed, as after a rank failure they blame whichever rank
                # it saw stopping first, which is misleading next to our per-rank report
                self.launcher_tail.append(user_text(item[3]))
            elif item[0] == "line":
                _, rank, stream_name, raw = item
                if self.on_line is not None:
                    self.on_line(rank, stream_name, raw)
                text = user_text(raw)  # the user's files, not a node's copy of them
                if stream_name == "stderr":  # torch's [rankN]: says what our label says
                    text = without_rank_prefix(text)
                if stream_name == "stderr" and not self.hook_frames.keep(rank, text):
                    item = self._next(until - time.monotonic() if wait else 0)
                    continue  # a frame of our wrappers: the user sees their own frames
                line = self._record(rank, stream_name, text)
                released, held = self.tracebacks.take(rank, stream_name, text)
                if released:
                    if batch:
                        self._emit(batch, batch_stream)
                        batch = []
                    self._emit([self._labelled(rank, t, "stderr") for t in released], "stderr")
                if not held:
                    if batch and stream_name != batch_stream:
                        self._emit(batch, batch_stream)
                        batch = []
                    batch_stream = stream_name
                    batch.append(line)
            elif item[0] == "eof":
                self.eofs[item[1]] += 1
            elif item[0] == "exit":
                self._exited(item[1], item[2])
            item = self._next(until - time.monotonic() if wait else 0)
        if batch:
            self._emit(batch, batch_stream)

    def _record(self, rank: int, stream_name: str, text: str) -> str:
        outcome = self.result.ranks[rank]
        (outcome.stderr_tail if stream_name == "stderr" else outcome.stdout_tail).append(text)
        return self._labelled(rank, text, stream_name)

    def _labelled(self, rank: int, text: str, stream_name: str) -> str:
        return "\n".join(labelled_lines(self.labels[rank], text, self.colours, (rank, stream_name)))

    def _emit(self, lines: list[str], stream_name: str) -> None:
        if self.stream is not None:
            target = sys.stderr if stream_name == "stderr" else sys.stdout
            self.stream("\n".join(lines), file=target, flush=True)

    # -- rank states ----------------------------------------------------------------------
    def _exited(self, rank: int, code: int | None) -> None:
        self.exited.add(rank)
        outcome = self.result.ranks[rank]
        outcome.returncode = code
        if self.result.succeeded(code):
            return
        outcome.raised = self.tracebacks.raised(rank)
        if self.stop_deadline is not None:
            # ended while we (or mpiexec, after the first failure) were stopping the ranks:
            # by a signal, unless its last words were a traceback (it failed on its own)
            outcome.stopped = (code is None or code < 0) and not outcome.raised
            return
        self._stop(signal.SIGTERM)

    def _states(self) -> dict[int, RankState]:
        """Each rank's state as the debugger's prompt reads it: busy while its process runs."""
        return {
            r.rank: RankState.BUSY if r.returncode is None else RankState.IDLE
            for r in self.result.ranks
        }

    def _running(self) -> list[int]:
        return [r.rank for r in self.result.ranks if r.returncode is None]

    def _stop(self, sig: int) -> None:
        if self.stop_deadline is not None:
            return
        self.stop_deadline = time.monotonic() + self.grace
        running = self._running()
        for rank in running:
            self.result.ranks[rank].stopped = True
        if self.launch is not None:
            self.launch.signal(sig, running)

    def _kill(self) -> None:
        self.killed = True
        if self.launch is not None:
            launch_mod.kill_sessions(self.launch.sessions)

    @property
    def started(self) -> launch_mod.DirectLaunch | launch_mod.MpiLaunch:
        """The launch of the ranks, once :func:`run_command` has made it."""
        assert self.launch is not None, "the ranks have not been launched"
        return self.launch

    def _drained(self) -> bool:
        exited = self.exited
        ranks_done = all(self.eofs[r] >= 2 and r in exited for r in self.started.pids())
        return ranks_done and (
            self.eofs[None] >= 2 or isinstance(self.launch, launch_mod.DirectLaunch)
        )

    # -- main loop ------------------------------------------------------------------------
    def wait(self) -> None:
        start = time.monotonic()
        finished_at = None
        try:
            while True:
                self.drain(0.05)
                if self.held is not None:  # the time-out waits while a rank is stopped
                    start += self.held.hold()
                elif self.debugger is not None:  # the time-out waits while at a prompt
                    start += serve(
                        self.debugger,
                        before_prompt=lambda: self.drain(0),
                        label=self._label,
                        quits=self.quits,
                        states=self._states,
                        name=self.result.component,
                        interrupt=lambda ranks: self.started.signal(signal.SIGINT, ranks),
                    )
                for rank in self.quits:
                    self.result.ranks[rank].quit = True
                for rank, pid in self.started.pids().items():
                    self.result.ranks[rank].pid = pid
                now = time.monotonic()
                if self.started.poll():
                    finished_at = finished_at or now
                    self.drain(0)
                    if self._drained() or now - finished_at > DRAIN_SECONDS:
                        return
                if self.stop_deadline is not None and now > self.stop_deadline and not self.killed:
                    self._kill()
                late = self.timeout is not None and now - start > self.timeout
                if late and self.stop_deadline is None:
                    self.result.timed_out = self._running()
                    self._stop(signal.SIGINT)
        except KeyboardInterrupt:
            self.result.interrupted = True
            self._interrupt()

    def interrupt_from_elsewhere(self, sig: int = signal.SIGINT) -> None:
        """``%distcomp interrupt`` of a run in the background: end it as Ctrl-C would
        (``sig``: SIGTERM ends it as a cluster's cancel does)."""
        self.result.interrupted = True
        self._stop(sig)

    def _interrupt(self) -> None:
        self.stop_deadline = None
        self._stop(signal.SIGINT)
        deadline = self.stop_deadline or time.monotonic()
        try:
            while not self.started.poll() and time.monotonic() < deadline:
                self.drain(0.05)
        except KeyboardInterrupt:  # a second Ctrl-C: do not wait for the grace period
            pass

    def _show_tracebacks(self) -> None:
        """The tracebacks the ranks printed last: each distinct one once, every line
        labelled with all the ranks that printed it."""
        for ranks, lines in self.tracebacks.groups():
            label = self.labels[ranks[0]] if len(ranks) == 1 else f"[{format_ranks(ranks)}]"
            self._emit(["\n".join(labelled_lines(label, line)) for line in lines], "stderr")

    def _label(self, rank: int) -> str:
        return self.labels[rank]

    def finish(self) -> None:
        """Whatever happened: nothing of ours keeps running, and all output is shown."""
        if self.debugger is not None:
            self.debugger.close()
        if self.launch is None:
            return
        left = launch_mod.kill_sessions(self.launch.sessions)
        try:
            deadline = time.monotonic() + DRAIN_SECONDS
            for thread in self.launch.threads:
                thread.join(timeout=max(0.0, deadline - time.monotonic()))
            self.launch.poll()
            self.drain(0)
            self._show_tracebacks()
        except KeyboardInterrupt:  # impatience while the last lines come in: stop reading
            pass
        finally:
            for rank in self._running():
                if left:  # still running at the end: we killed it
                    self.result.ranks[rank].stopped = True
            self.result.launcher_tail = list(self.launcher_tail)
            self.launch.close()


__all__ = ["CommandResult", "RankResult", "run_command"]
