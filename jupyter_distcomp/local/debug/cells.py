"""Debugging ``%%distcomp run`` ranks: the hook on each engine, one cell's stops, the rank
post-mortem opens.

:func:`attach` is a world's start-up hook: it opens the world's
:class:`~.channel.DebugChannel` (its address and key) and ships
:mod:`~jupyter_distcomp.rank_side.debug_hook` to every engine as source, so a user's own
cluster needs no install of this package. While a cell runs, :class:`CellDebug` serves the
ranks that stop (the cell's time-out paused meanwhile), skips ranks outside
``--debug-ranks`` and turns ``q`` into one line per rank. A background cell's thread does
not prompt: it says once in the cell's output that a rank stopped, and ``%distcomp wait``
serves the prompts from the kernel's main thread.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ...contracts import RankState
from ...core.ranges import format_ranks
from ...errors import LayoutError, RankError
from ...machine.network import is_local_host, listen_address
from ...rank_side import dap_side, dap_values, debug_hook
from ...rank_side.dap_side import PAUSE_SIGNAL
from ...rank_side.rank_setup import arm_rank, load_hook
from . import dap
from .channel import DebugChannel
from .held import HeldStops
from .places import summary
from .serve import serve_stops

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable

    from ..ranks.world import World

HOOK_MODULE = "distcomp_debug_hook"
#: seconds the ranks have to take JupyterLab's breakpoints before a cell, at most (a cell's
#: --timeout, if shorter)
ARM_SECONDS = 60.0
POST_MORTEM = f"__import__('sys').modules[{HOOK_MODULE!r}].post_mortem()"


def cell_source(shell: Any, code: str) -> str:
    """The notebook cell's whole text (its ``%%distcomp run`` line too), as JupyterLab's
    ``dumpCell`` hashes it: the execute request's code; '' if that is not this cell."""
    parent = getattr(shell, "parent_header", None) or {}
    source = (parent.get("content") or {}).get("code")
    if not isinstance(source, str) or not source.lstrip().startswith("%%distcomp"):
        return ""
    body = code.lstrip("#\n").strip()
    return source if body in source else ""


def cell_padding(lines: int, source: str) -> str:
    """The comment lines before a cell's code that keep its line numbers the notebook's: the
    first holds the cell's ``%%distcomp run`` line from ``source`` (the notebook cell's whole
    text, '' if not known), which pdb's listings on the ranks show as written
    (``debug_hook.MAGIC_LINE``); the others are ``#``."""
    if lines < 1:
        return ""
    first = source.splitlines()[0].rstrip() if source.strip() else ""
    head = "#" + first if first.startswith("%%distcomp") else "#"
    return head + "\n" + "#\n" * (lines - 1)


def interrupt_ranks(world: World, ranks: list[int]) -> None:
    """SIGINT to the ranks' own processes (an evaluation past its time limit): not to the
    processes they started (a DataLoader's workers), as ``world.signal`` does."""
    elsewhere = []
    for rank in ranks:
        info = world.ranks[rank]
        if info.pid and is_local_host(info.host):
            with contextlib.suppress(ProcessLookupError):
                os.kill(info.pid, signal.SIGINT)
        else:
            elsewhere.append(rank)
    if elsewhere:
        world.signal(elsewhere, signal.SIGINT)


def channel_host(world: World) -> str:
    """The address the ranks already use: loopback for local ranks, else this machine's
    address on the way to the first rank on another host."""
    if world.placement.hosts:
        return world.placement.listen()
    remote = [i.host for i in world.ranks if i.host and not is_local_host(i.host)]
    if not remote:
        return "127.0.0.1"
    try:
        return listen_address(remote[:1])
    except LayoutError:  # a name only the ranks' own machines resolve
        return socket.gethostbyname(socket.gethostname())


def attach(world: World) -> None:
    """The world's start-up hook: its channel (one address and key per world), and the
    hook on every rank."""
    channel = DebugChannel(channel_host(world))
    channel.on_state = lambda rank, state: _restate(world, rank, state)
    source = Path(debug_hook.__file__).read_text(encoding="utf-8")
    dap = Path(dap_side.__file__).read_text(encoding="utf-8")
    values = Path(dap_values.__file__).read_text(encoding="utf-8")
    world.debugger = channel
    world.call_each(
        list(range(world.world_size)),
        load_hook,
        lambda info: (source, channel.host, channel.port, channel.key_hex, info.rank, dap, values),
    )


def _restate(world: World, rank: int, state: RankState) -> None:
    """busy -> debugging at a stop, debugging -> busy when it runs on; a rank that has
    already replied (idle) or died stays so."""
    before = RankState.BUSY if state == RankState.DEBUGGING else RankState.DEBUGGING
    world.change_state(rank, before, state)


class CellDebug:
    """What one ``%%distcomp run`` cell does with breakpoints on its ranks."""

    def __init__(self, world: World, debug_ranks: list[int] | None, wake: Callable[[], None]):
        self.world = world
        self.record = True  # the cell's failures become the post-mortem's targets
        self.channel: DebugChannel | None = getattr(world, "debugger", None)
        self.debug_ranks = debug_ranks
        self.quits: set[int] = set()
        self.interrupted: dict[int, dict] = {}  # ranks at the prompt an interrupt ended
        self.held: HeldStops | None = None  # a background cell's stops
        self.adapter: dap.Adapter | None = None  # JupyterLab's debugger, on for this cell
        if self.channel is not None:
            self.channel.allowed = set(debug_ranks) if debug_ranks is not None else None
            self.channel.skipped = set()
            self.channel.wake = wake
            self.channel.serving = True

    def serve(
        self, pump: Callable[[], None], shown: Callable[[int, str, int], bool] | None = None
    ) -> float:
        """Serve the ranks stopped now; seconds spent at prompts (the time-out adds them).
        ``pump`` shows the ranks' output; ``shown(rank, cell, units)``: whether it has shown
        that much of a rank's output (the prompt shows what a rank printed before it)."""
        if self.channel is None:
            return 0.0
        if self.held is not None:
            return self.held.hold()
        return serve_stops(
            self.channel,
            name=self.world.name,
            before_prompt=pump,
            label=self.world.label,
            quits=self.quits,
            states=self.world.states,
            interrupt=self._interrupt,
            interrupted=self.interrupted,
            shown=shown,
        )

    def _interrupt(self, ranks: list[int]) -> None:
        interrupt_ranks(self.world, ranks)

    def arm(self, code: str, shell: Any, ranks: list[int], timeout: float | None = None) -> None:
        """Before the cell: with JupyterLab's debugger on, the ranks get its breakpoints
        (those of this cell at the cell's lines) and trace the cell; with it off, ranks that
        had breakpoints lose them. Ranks that do not answer within the cell's ``timeout``
        are named (a RankError)."""
        adapter = dap.current()
        world = self.world
        if adapter is None:
            if world.dap_armed:
                everyone = list(range(world.world_size))
                _arm_each(world, everyone, (None, {}, {}), timeout)
                world.dap_armed = False
            return
        adapter.sync_threads()
        source = cell_source(shell, code)
        path = adapter.cell_path(source) if source else ""
        version = adapter.version
        cells, files = adapter.rank_breakpoints(path)
        names = _arm_each(world, ranks, (code, cells, files), timeout)
        adapter.ranks_version = version
        adapter.ran(str(names[0]) if names else "", path)
        world.dap_armed = True
        adapter.pausing = False
        adapter.pause_ranks = lambda: world.signal(
            [r for r, state in world.states().items() if state == RankState.BUSY],
            PAUSE_SIGNAL,
        )
        self.adapter = adapter

    def hold_in_background(self, running: Callable[[], Iterable[int]]) -> HeldStops | None:
        """The cell runs in a thread from now on: its stops wait for `%distcomp wait`;
        an interrupt at such a prompt sends SIGINT to the cell's ``running`` ranks."""
        if self.channel is None:
            return None
        world = self.world
        self.held = HeldStops(
            self.channel,
            world.name,
            world.label,
            self.quits,
            lambda: world.signal(sorted(running()), signal.SIGINT),
            world.states,
            self._interrupt,
        )
        return self.held

    def interrupted_prompt(self) -> str:
        """``the debugger prompt of ranks 0-2 at In [5], line 5, in work`` when an interrupt
        ended a prompt of this cell, else ''."""
        if not self.interrupted:
            return ""
        places = summary(self.interrupted)
        return f"the debugger prompt of {places}"

    def drop_quits(self, errors: dict[int, Any]) -> dict[int, Any]:
        """Errors without the ranks that quit in the debugger (pdb's BdbQuit)."""
        for rank, err in errors.items():
            if (getattr(err, "ename", None) or type(err).__name__) == "BdbQuit":
                self.quits.add(rank)
        return {r: e for r, e in errors.items() if r not in self.quits}

    def finish(self, errors: dict[int, Any]) -> None:
        """After the cell: one line per rank that quit, the skipped breakpoints once."""
        if self.record:
            self.world.failed_ranks = sorted(errors)
        for rank in sorted(self.quits):
            print(debug_hook.quit_line(rank), file=sys.stderr)
        if self.adapter is not None:
            self.adapter.pause_ranks = None
            self.adapter.pausing = False
        channel = self.channel
        if channel is None:
            return
        if channel.skipped:
            why = (
                f"--debug-ranks stops only {format_ranks(self.debug_ranks)}"
                if self.debug_ranks
                else "a replay does not stop at breakpoints"
            )
            print(
                f"breakpoint() skipped on {format_ranks(channel.skipped)}: {why}.", file=sys.stderr
            )
        channel.serving = False  # a stop from now on is answered "interrupted"
        channel.allowed = None
        channel.skipped = set()
        channel.end_sessions()  # a rank still at a prompt (interrupted) reads EOF and quits


def _arm_each(world: World, ranks: list[int], args: tuple, timeout: float | None) -> list:
    """``arm_rank(*args)`` on ``ranks``, within the cell's ``timeout`` (at most the world's
    set-up time): a RankError names the ranks still busy with something else."""
    limit = min(timeout, ARM_SECONDS) if timeout else ARM_SECONDS
    pending = world.send_each(ranks, arm_rank, lambda _: args)
    deadline = time.monotonic() + limit
    for result in pending:
        result.wait(max(0.0, deadline - time.monotonic()))
    late = [rank for rank, result in zip(ranks, pending, strict=True) if not result.ready()]
    if late:
        raise RankError(
            f"{format_ranks(late)} of {world.name!r} did not answer the debugger's set-up "
            f"within {limit:g} s: still busy with an earlier cell or debugger evaluation "
            f"(blocked in C code, such as a collective the other ranks left?). Fix: "
            f"`%distcomp where {world.name}` shows where; `%distcomp restart {world.name}`."
        )
    return [result.get() for result in pending]


def post_mortem_rank(world: World, rank: int | None) -> int:
    """The rank to debug post-mortem: ``rank``, or the lowest that failed the last cell."""
    failed = list(getattr(world, "failed_ranks", []))
    if rank is None:
        if not failed:
            raise RankError(
                f"No rank of {world.name!r} failed its last `%%distcomp run` cell, so there is "
                f"nothing to debug post-mortem. Fix: run the failing cell first, or put "
                f"breakpoint() in it."
            )
        return failed[0]
    if not 0 <= rank < world.world_size:
        raise RankError(
            f"--rank {rank}: {world.name!r} has ranks 0-{world.world_size - 1}. "
            f"Fix: --rank {failed[0] if failed else 0}."
        )
    if rank not in failed:
        where = f" (failed: {format_ranks(failed)})" if failed else ""
        raise RankError(
            f"Rank {rank} of {world.name!r} did not fail its last `%%distcomp run` cell{where}. "
            f"Fix: `%distcomp debug {world.name}` picks the lowest failed rank."
        )
    return rank
