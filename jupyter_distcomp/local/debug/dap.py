"""JupyterLab's visual debugger on the ranks: the kernel answers for them in the Jupyter debug
protocol (``debug_request`` / ``debug_reply`` on control, ``debug_event`` on iopub).

:class:`Adapter` takes the kernel's ``do_debug_request``. A request about a rank (a thread,
frame or variable number of :data:`THREAD_BASE` / :data:`~.refs.REF_BASE` and above, far
above debugpy's; refs.py checks each) is answered here; every other request goes to ipykernel's own debugger unchanged,
so the kernel's own cells keep their debugging. ``setBreakpoints`` goes to both: the ranks
get the breakpoints of their cells (the path ``dumpCell`` gives a ``%%distcomp run`` cell's
whole text) and of files before each cell (:func:`arm`).

While ranks are stopped, the cell's thread serves them (dap_serve.py), with the same group
rule as the pdb prompt: a step or continue goes to every rank at the prompt (or, in the
ranks panel's "this rank only" mode, to that rank). This thread (ipykernel's control
thread) hands it each request and waits for the answer.

Each rank is a thread ``rank N``; JupyterLab shows the frames of the thread that stopped
last, so a rank thread's ``stackTrace`` lists the frames of every stopped rank, each named
with its rank: choosing one shows that rank's variables and evaluates there. JupyterLab
selects the first frame after each stop and refresh, so the rank the person chose
(:attr:`Adapter.selected`) comes first: the choice stays until the person makes another.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import os
import sys
import threading
import warnings
from collections.abc import Callable, Iterator
from typing import Any

from ...machine.node_disks import node_paths
from ..cell_names import notebook_path
from .refs import REF_BASE, Malformed, References, Stale, error_reply, number

THREAD_BASE = 1_000_000_000  # a rank's thread: THREAD_BASE + world slot * SLOT + rank
SLOT = 100_000
#: seconds a request waits for the stopped ranks' answer beyond the time limit of an
#: evaluation (stopped.py), which interrupts a rank that runs past it
ANSWER_GRACE = 15.0
#: requests answered for a rank thread (the threadId says whose)
THREAD_REQUESTS = {"stackTrace", "next", "stepIn", "stepOut", "continue"}
#: the ranks panel's request: steps and continue go to one rank only (``{"rank": N}``), or
#: to every stopped rank again (``{"rank": null}``)
STEP_ONLY = "distcompStepOnly"
#: pdb's command for each stepping request
STEPS = {"next": "n", "stepIn": "s", "stepOut": "r", "continue": "c"}

#: The ipykernel this module is written against, and what it uses of it beyond its public
#: API, as dotted names (a test checks each exists in the installed ipykernel; an attribute
#: ipykernel sets in ``__init__`` counts). :func:`install` checks the kernel's own.
IPYKERNEL = "ipykernel 6.29 or newer (7.x tested)"
RELIES_ON = (
    "ipykernel.kernelbase.Kernel.do_debug_request",  # replaced by Adapter.process
    "ipykernel.kernelbase.Kernel._publish_debug_event",  # the ranks' events on iopub
    "ipykernel.ipkernel.IPythonKernel.debugger",  # None without debugpy
    "ipykernel.debugger.Debugger.is_started",
    "ipykernel.debugger.Debugger.breakpoint_list",  # set before %load_ext
    "ipykernel.debugger.Debugger.stopped_threads",  # the kernel's own threads stopped
    "ipykernel.compiler.get_tmp_directory",  # where dumpCell writes a cell
    "ipykernel.compiler.get_file_name",  # and under which name
)
#: what :func:`install` finds on the kernel and its debugger (RELIES_ON's attributes)
KERNEL_NEEDS = ("do_debug_request", "_publish_debug_event", "debugger")
DEBUGGER_NEEDS = ("is_started", "breakpoint_list", "stopped_threads")

_adapter: Adapter | None = None


def missing_internals(kernel: Any) -> list[str]:
    """What of :data:`RELIES_ON` this kernel (an ipykernel kernel with its debugger) lacks."""
    missing = [f"Kernel.{name}" for name in KERNEL_NEEDS if not hasattr(kernel, name)]
    debugger = getattr(kernel, "debugger", None)
    if debugger is not None:
        missing += [f"Debugger.{n}" for n in DEBUGGER_NEEDS if not hasattr(debugger, n)]
    return missing


def internals_message(missing: list[str]) -> str:
    try:
        from importlib.metadata import version

        installed = f"ipykernel {version('ipykernel')}"
    except Exception:  # not installed as a distribution
        installed = "this ipykernel"
    return (
        f"JupyterLab's debugger cannot reach the ranks: {installed} lacks "
        f"{', '.join(missing)}, which jupyter-distcomp relies on (local/debug/dap.py). "
        f"Breakpoints at the pdb prompt still work. Fix: install {IPYKERNEL} "
        "(`pip install -U ipykernel`) and restart the kernel."
    )


def current() -> Adapter | None:
    """The kernel's adapter while JupyterLab's debugger is on, else None."""
    return _adapter if _adapter is not None and _adapter.on else None


@contextlib.contextmanager
def pausing(pause: Callable[[], object]) -> Iterator[bool]:
    """While a cell serves ranks it does not run (an attached job's, in ``%distcomp wait``):
    JupyterLab's Pause calls ``pause``. A cell's own ranks are armed for it by
    ``CellDebug.arm``. Yields whether JupyterLab's debugger is on now."""
    adapter = _adapter
    if adapter is None:
        yield False
        return
    adapter.pausing, adapter.pause_ranks = False, pause
    try:
        yield adapter.on
    finally:
        adapter.pause_ranks, adapter.pausing = None, False


def install(kernel: Any, worlds: Callable[[], dict[str, Any]]) -> Adapter | None:
    """Answer the kernel's debug requests for the ranks (ipykernel with debugpy only)."""
    global _adapter
    if _adapter is not None or not hasattr(kernel, "do_debug_request"):
        return _adapter
    if getattr(kernel, "debugger", None) is None:
        return None
    missing = missing_internals(kernel)
    if missing:
        warnings.warn(internals_message(missing), RuntimeWarning, stacklevel=2)
        return None
    _adapter = Adapter(kernel, worlds)
    return _adapter


def uninstall() -> None:
    global _adapter
    if _adapter is not None:
        _adapter.close()
    _adapter = None


def _no_subprocesses() -> None:
    """debugpy, once it listens in the kernel, would put itself into every Python process
    the kernel starts (``subProcess``): the ranks' controller and engines would wait for a
    debugger that never comes. Configured before ipykernel's ``debugpy.listen``."""
    try:
        import debugpy

        debugpy.configure(subProcess=False)
    except Exception:  # listening already (on before %load_ext): debugpy_out_of_children
        pass


#: pydevd's module that puts debugpy into each Python process a debugged process starts
PYDEVD_CHILDREN = "_pydev_bundle.pydev_monkey"


@contextlib.contextmanager
def debugpy_out_of_children() -> Iterator[None]:
    """The processes this thread starts in the block run without debugpy. debugpy that
    listened in the kernel before %load_ext (``subProcess`` on) puts itself into every
    Python process the kernel starts: the ranks' controller and mpiexec's guard would wait
    for a debugger that never comes. pydevd's own switch, per thread."""
    monkey = sys.modules.get(PYDEVD_CHILDREN)
    if monkey is None:
        yield
        return
    with monkey.skip_subprocess_arg_patch():
        yield


def thread_of(slot: int, rank: int) -> int:
    return THREAD_BASE + slot * SLOT + rank


class Adapter:
    def __init__(self, kernel: Any, worlds: Callable[[], dict[str, Any]]):
        self.kernel = kernel
        self.worlds = worlds
        self.on = bool(getattr(kernel.debugger, "is_started", False))
        self.breakpoints: dict[str, list[int]] = {}  # source path -> lines
        self.rank_files: dict[str, str] = {}  # a rank's cell file (base name) -> the cell's path
        #: (world name, its channel) -> its slot in the thread numbers: a restarted world
        #: (a new channel) gets new thread numbers
        self.slots: dict[tuple[str, Any], int] = {}
        self.refs = References()  # the stopped ranks' frames and variables
        self.threads: dict[int, str] = {}  # rank threads JupyterLab was told of
        self.serving: Any = None  # the stopped ranks' server (dap_serve.Serving), if any
        self.only: int | None = None  # "this rank only": steps go to this rank
        #: the rank the person chose in the Call Stack (or as "this rank only"): its frames
        #: stay first, so JupyterLab keeps it selected across steps and refreshes
        self.selected: int | None = None
        #: while a %%distcomp run cell runs (or %distcomp wait serves an attached job):
        #: sends the running ranks the Pause signal
        self.pause_ranks: Callable[[], object] | None = None
        self.pausing = False  # a Pause was asked for in this cell: its stops say "pause"
        self.version = 0  # counts changes of the breakpoints
        self.ranks_version = -1  # the version the ranks of the running cell have
        self._lock = threading.Lock()
        self._seq = 0
        self._original = kernel.do_debug_request
        kernel.do_debug_request = self.process
        # JupyterLab's debugger on before %load_ext: the breakpoints it set by then
        for path, points in dict(getattr(kernel.debugger, "breakpoint_list", None) or {}).items():
            self._record_breakpoints({"source": {"path": path}, "breakpoints": points})

    def close(self) -> None:
        if self.kernel.do_debug_request == self.process:
            self.kernel.do_debug_request = self._original

    # -- the protocol -------------------------------------------------------------------
    async def process(self, message: dict) -> dict:
        """The reply to one request; an error reply, never none, for one that is malformed."""
        try:
            return await self._process(message)
        except Malformed as exc:
            return error_reply(message, str(exc))
        except Exception as exc:  # what the request's shape broke: said, never swallowed
            return error_reply(message, f"{type(exc).__name__}: {exc}")

    async def _process(self, message: dict) -> dict:
        if not isinstance(message, dict):
            raise Malformed(f"a request must be an object, not {type(message).__name__}")
        command = message.get("command", "")
        if "arguments" in message and message["arguments"] is None:  # debugpy never answers
            raise Malformed(
                f"request {command!r}: 'arguments' is null; send an object, or leave it out "
                "where the request takes none"
            )
        args = message.get("arguments", {})
        if not isinstance(command, str) or not isinstance(args, dict):
            raise Malformed(
                f"request {command!r}: 'command' must be a string and 'arguments' an object"
            )
        if command == STEP_ONLY:
            return self._step_only(message, args)
        if self.on and self._is_ranks(command, args):
            return await self._for_ranks(message, command, args)
        if command == "initialize":
            _no_subprocesses()
        if command == "attach":  # debugpy must not enter the processes ranks start from
            message = {**message, "arguments": {**args, "subProcess": False}}
        reply = await self._original(message)
        if not isinstance(reply, dict):
            return reply
        if command == "attach" and reply.get("success"):
            self.on = True
            self.sync_threads()
        elif command == "disconnect":
            self._off()
        elif command == "setBreakpoints":
            self._record_breakpoints(args)
        elif command == "threads" and self.on:
            body = reply.setdefault("body", {})
            body["threads"] = list(body.get("threads", [])) + [
                {"id": t, "name": n} for t, n in sorted(self._rank_threads().items())
            ]
        elif command == "debugInfo" and self.on and self.serving is not None:
            body = reply.setdefault("body", {})
            body["stoppedThreads"] = list(body.get("stoppedThreads", [])) + sorted(
                self.serving.announced_threads()
            )
        return reply

    def _step_only(self, message: dict, args: dict) -> dict:
        """The ranks panel's "this rank only": steps go to that rank (None: to all)."""
        rank = args.get("rank")
        self.only = int(rank) if isinstance(rank, int) and rank >= 0 else None
        if self.only is not None:
            self.selected = self.only
        return {
            "type": "response",
            "seq": message.get("seq", 0),
            "request_seq": message.get("seq", 0),
            "command": STEP_ONLY,
            "success": True,
            "body": {"rank": self.only},
        }

    def _is_ranks(self, command: str, args: dict) -> bool:
        if command in THREAD_REQUESTS:
            thread = number(args, "threadId")
            if thread >= THREAD_BASE:
                return True
            # JupyterLab's Continue forgets the stopped thread before it asks, and names
            # thread 1 then: while ranks are stopped and no thread of the kernel is, it
            # means the ranks
            stopped = getattr(self.kernel.debugger, "stopped_threads", ())
            return command in STEPS and self.serving is not None and thread not in stopped
        if command == "pause":  # the kernel's thread runs the cell's magic: the ranks pause
            return self.pause_ranks is not None
        if command in ("scopes", "evaluate", "richInspectVariables"):
            return number(args, "frameId") >= REF_BASE
        if command == "copyToGlobals":
            return number(args, "srcFrameId") >= REF_BASE
        if command == "variables":
            return number(args, "variablesReference") >= REF_BASE
        return False

    async def _for_ranks(self, message: dict, command: str, args: dict) -> dict:
        reply = {
            "type": "response",
            "seq": message.get("seq", 0),
            "request_seq": message.get("seq", 0),
            "command": command,
            "success": True,
        }
        if command == "pause":
            self.pausing = True
            pause = self.pause_ranks
            if pause is not None:
                pause()
            return reply
        try:
            args = self._checked(command, args)
        except (Malformed, Stale) as exc:
            reply.update(success=False, message=str(exc))
            return reply
        serving = self.serving
        if serving is None:
            if command == "stackTrace":
                reply["body"] = {"stackFrames": [], "totalFrames": 0}
                return reply
            reply.update(success=False, message="the ranks are running, none is stopped")
            return reply
        future: concurrent.futures.Future = serving.submit(command, args)
        try:
            from .stopped import eval_seconds

            waited = eval_seconds() + ANSWER_GRACE
            body = await asyncio.wait_for(asyncio.wrap_future(future), waited)
        except Exception as exc:
            reply.update(success=False, message=str(exc) or type(exc).__name__)
            return reply
        if isinstance(body, str):  # the ranks' words why not
            reply.update(success=False, message=body)
        else:
            reply["body"] = body
        return reply

    def _checked(self, command: str, args: dict) -> dict:
        """``args`` with the rank's thread and own number of the frame or variable it
        names (``_thread``, ``_number``); Stale for a thread of ranks that restarted or
        stopped, or a frame or variable of a stop that is over."""
        if command in THREAD_REQUESTS:
            thread = number(args, "threadId")
            if thread >= THREAD_BASE and thread not in self._rank_threads():
                raise Stale(
                    f"threadId {thread} is not a rank of a running world (its ranks "
                    "restarted or stopped since, or it never was one)"
                )
            return {**args, "_thread": thread}
        key, kind = {
            "variables": ("variablesReference", "variable"),
            "copyToGlobals": ("srcFrameId", "frame"),
        }.get(command, ("frameId", "frame"))
        try:
            thread, found = self.refs.resolve(kind, number(args, key), key)
        except Stale:
            # an open rich view, which JupyterLab refreshes after a step with the frame it
            # was opened at: the variable in its rank's frame at the same depth now
            past = self.refs.past_frame(number(args, key))
            if command != "richInspectVariables" or past is None:
                raise
            thread, found = past
        return {**args, "_thread": thread, "_number": found}

    def _record_breakpoints(self, args: dict) -> None:
        path = str((args.get("source") or {}).get("path") or "")
        if not path:
            return
        points = args.get("breakpoints") or []
        lines = sorted(
            {b["line"] for b in points if isinstance(b, dict) and type(b.get("line")) is int}
        )
        with self._lock:
            if lines:
                self.breakpoints[path] = lines
            else:
                self.breakpoints.pop(path, None)
            self.version += 1
        if self.serving is not None:
            self.serving.submit("breakpoints", {})

    def _off(self) -> None:
        """The debugger is switched off: the ranks detach and run at full speed."""
        self.on = False
        with self._lock:
            self.breakpoints = {}
            self.version += 1
        self.only = self.selected = None
        if self.serving is not None:
            self.serving.submit("detach", {})
        for thread in sorted(self.threads):
            self.event("thread", {"reason": "exited", "threadId": thread})
        self.threads = {}

    # -- breakpoints for the ranks -------------------------------------------------------
    def is_cell(self, path: str) -> bool:
        from ipykernel.compiler import get_tmp_directory

        return os.path.dirname(path) == get_tmp_directory()

    def rank_breakpoints(self, cell_path: str = "") -> tuple[dict, dict]:
        """``(cells, files)`` as the ranks take them: the lines of the cell at ``cell_path``
        under "", of earlier rank cells by their rank file's base name, and of files (each
        also in every node's copy of it, where nodes run copies of the user's folder)."""
        by_path = {path: name for name, path in self.rank_files.items()}
        cells: dict[str, list[int]] = {}
        files: dict[str, list[int]] = {}
        with self._lock:
            for path, lines in self.breakpoints.items():
                if path == cell_path:
                    cells[""] = lines
                elif path in by_path:
                    cells[by_path[path]] = lines
                elif not self.is_cell(path):
                    for each in (path, *node_paths(path)):
                        files[each] = lines
        return cells, files

    def cell_path(self, source: str) -> str:
        """The path JupyterLab's ``dumpCell`` gives the cell of ``source``."""
        from ipykernel.compiler import get_file_name

        return str(get_file_name(source))

    def ran(self, rank_file: str, cell_path: str) -> None:
        """The ranks ran the cell at ``cell_path`` as ``rank_file``."""
        if rank_file and cell_path:
            self.rank_files[os.path.basename(rank_file)] = cell_path
            while len(self.rank_files) > 1000:  # a long session: the oldest cells go
                self.rank_files.pop(next(iter(self.rank_files)))

    def source_path(self, rank_path: str) -> str:
        """The notebook's path for a rank's file: its cell's, or the file itself."""
        known = self.rank_files.get(os.path.basename(rank_path))
        return known or notebook_path(rank_path) or rank_path

    # -- threads and events ----------------------------------------------------------------
    def slot(self, name: str, channel: Any) -> int:
        """The slot of world ``name`` whose debugger channel is ``channel``."""
        with self._lock:
            return self.slots.setdefault((name, channel), len(self.slots))

    def _rank_threads(self) -> dict[int, str]:
        worlds = {n: w for n, w in self.worlds().items() if getattr(w, "started", False)}
        threads = {}
        for name, world in worlds.items():
            dead = set(getattr(world, "dead_ranks", ()) or ())
            for rank in range(world.world_size):
                if rank not in dead and not getattr(world, "stopped", False):
                    title = f"rank {rank}" if len(worlds) == 1 else f"rank {rank} ({name})"
                    slot = self.slot(name, getattr(world, "debugger", None))
                    threads[thread_of(slot, rank)] = title
        return threads

    def sync_threads(self, *_event: object) -> None:
        """``thread`` events for ranks that started or left since JupyterLab was told."""
        if not self.on:
            return
        now = self._rank_threads()
        with self._lock:
            started = sorted(set(now) - set(self.threads))
            exited = sorted(set(self.threads) - set(now))
            self.threads = now
        for thread in exited:
            self.event("thread", {"reason": "exited", "threadId": thread})
        for thread in started:
            self.event("thread", {"reason": "started", "threadId": thread})

    def event(self, name: str, body: dict) -> None:
        with self._lock:
            self._seq += 1
            seq = self._seq
        self.kernel._publish_debug_event({"seq": seq, "type": "event", "event": name, "body": body})
