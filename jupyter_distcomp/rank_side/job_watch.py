"""A rank of a submitted job watches itself, and says where it is when that matters.

``arm()`` runs in every Python process of a job submitted with diagnostics (from
``job_site/sitecustomize.py``, before the user's code): it records the process's
torch.distributed and mpi4py calls in the collectives ledger (ledger_hooks.py; the ring file
in a temporary folder of the process, removed at exit), and writes the line of job_line.py
into the process's stderr, which Azure ML keeps as the rank's log:

- ``stall``: the rank has waited in one collective or blocking point-to-point call (the
  ledger's blocked entry), or an NCCL collective of torch's record has not completed on the
  GPU, for ``DISTCOMP_STALL_SECONDS`` (default 300; 0: never); once per stalled call. A
  thread of ours looks every few seconds at the ring's last entries in memory (torch's
  record, which a thread of the ledger dumps beside it, every ``record_every`` seconds) and
  reads the main thread's stack with ``sys._current_frames()``, which works while that
  thread waits in C code with the GIL released (gloo, MPI).
- ``sigterm`` (Azure ML's cancel, or another process failed): the line, then what SIGTERM
  did before (job_sigterm.py).
- ``failure``: an uncaught exception (``sys.excepthook`` and ``threading.excepthook``, both
  chained), with the error and the traceback's frames.

The SIGTERM hook and the thread start when the process first imports torch.distributed or
mpi4py (a program of one thread that never does stays one thread); the exception hooks at
once. DDP's gradient buckets keep DDP's own C++ reduction (the ledger's comm hook costs a
CPU training step percents; ``DISTCOMP_LEDGER_DDP=1`` puts it back, and with it the stalls
in ``backward`` on gloo). Nothing else: no work per call beyond the ledger's, no output
unless one of these happens. A spawned child (multiprocessing) arms nothing, a forked one
keeps nothing that writes. ``DISTCOMP_DIAGNOSE=0`` in the job's environment turns it all
off.

Standard library only (Python 3.8 or newer); loaded by path, with its siblings.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from typing import Any

STALL_VARIABLE = "DISTCOMP_STALL_SECONDS"
#: ``1``: DDP's gradient buckets go through the ledger (its comm hook, see ledger_torch.py),
#: so that a rank waiting for one in ``backward`` is said to stall; off by default, as the
#: hook in place of DDP's own reduction costs a CPU training step several percent
BUCKETS_VARIABLE = "DISTCOMP_LEDGER_DDP"
DEFAULT_STALL_SECONDS = 300.0
_HERE = os.path.dirname(os.path.abspath(__file__))


def _sibling(name: str) -> Any:
    """A file of ours beside this one, loaded by path once (``distcomp_NAME``)."""
    import importlib.util

    key = f"distcomp_{name}"
    if key in sys.modules:
        return sys.modules[key]
    spec = importlib.util.spec_from_file_location(key, os.path.join(_HERE, f"{name}.py"))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[key] = module
    spec.loader.exec_module(module)
    return module


def _hooks() -> Any:
    """The process's ledger hooks: ours, or those of ``%distcomp command``'s stack_site."""
    return sys.modules.get("distcomp_ledger_hooks")


def _quiet(text: str) -> None:
    """The ledger's words about itself are not the job's output."""


def stall_seconds(env: Any = None) -> float:
    env = os.environ if env is None else env
    raw = env.get(STALL_VARIABLE, "")
    try:
        return float(raw) if raw.strip() else DEFAULT_STALL_SECONDS
    except ValueError:
        sys.stderr.write(
            f"distcomp: {STALL_VARIABLE}={raw!r} is not a number of seconds; stalls are "
            f"said after {DEFAULT_STALL_SECONDS:g} s. Fix: {STALL_VARIABLE}=600 (0: never).\n"
        )
        return DEFAULT_STALL_SECONDS


class Watch:
    """The process's watcher: its thread, its hooks, what it has said."""

    def __init__(self, code_dir: str, threshold: float) -> None:
        self.code_dir = code_dir
        self._frames: Any = None
        self.pid = os.getpid()
        self.threshold = threshold
        self.poll = min(2.0, max(0.1, threshold / 4)) if threshold > 0 else 5.0
        self.lock = threading.RLock()  # one line at a time; SIGTERM's said once
        self.sigterm = _sibling("job_sigterm").Sigterm(self.say_sigterm)
        self.said: set = set()  # the stalled calls said
        self.seen = -1  # ring.written when last looked at, with nothing blocked
        #: NCCL's calls in torch's record: (its dump's mtime, its entries), read every
        #: record_every s (torch_record.py dumps it as often)
        self.recorded: tuple = (0, [])
        self.record_every = min(30.0, max(2.0, threshold / 10))
        self.next_record = 0.0
        self.started = False

    @property
    def text(self) -> Any:
        """job_line.py, loaded when a line is first written."""
        return _sibling("job_line")

    @property
    def frames(self) -> Any:
        if self._frames is None:
            skipped = lambda: getattr(_hooks(), "_SKIP", ())  # noqa: E731
            self._frames = self.text.Frames(self.code_dir, _HERE, skipped)
        return self._frames

    @staticmethod
    def ring() -> Any:
        """The process's ledger, None while there is none."""
        hooks = _hooks()
        return hooks.STATE.ring if hooks is not None else None

    # -- what the rank says ------------------------------------------------------------
    def _calls(self, fresh: bool = True) -> list:
        """The rank's last calls: the ledger's, and NCCL's from torch's record (read again
        unless ``fresh`` is False), oldest first."""
        ring = self.ring()
        calls = ring.recent(self.text.MAX_CALLS) if ring is not None else []
        record = self.record() if fresh else self.recorded[1]
        if record:
            calls = sorted(calls + record, key=lambda e: e.started)
        return calls[-self.text.MAX_CALLS :]

    def record(self) -> list:
        """NCCL's calls in torch's record as the rank dumps it beside the ledger
        (torch_record.py, every FLIGHT_EVERY s), parsed again only once it changed."""
        hooks = _hooks()
        if hooks is None or not hooks.STATE.torch_record or not hooks.STATE.path:
            return []
        path = hooks.STATE.path + ".torch"
        try:
            changed = os.stat(path).st_mtime_ns
            if changed != self.recorded[0]:
                with open(path, "rb") as dump:
                    raw = dump.read()
                nccl = hooks.ledger.torch_record_entries(raw) if b'"nccl:' in raw else []
                self.recorded = (changed, nccl)
        except (OSError, ValueError):
            return []
        return self.recorded[1]

    @staticmethod
    def _waiting(calls: list) -> Any:
        """The oldest call the rank waits in, and since when; (None, 0) if none."""
        waits = [(-e.finished if e.finished < 0 else e.started, e) for e in calls if e.blocked]
        if not waits:
            return None, 0.0
        since, entry = min(waits, key=lambda pair: pair[0])
        return entry, since

    def say(
        self, reason: str, threads: list, stalled: Any = None, error: Any = None, calls=None
    ) -> None:
        calls = self._calls() if calls is None else calls
        if stalled is None:
            entry, since = self._waiting(calls)
            stalled = time.time() - since if entry is not None else None
        data = self.text.line(reason, threads, calls, stalled, error)
        with self.lock:
            self.text.write(data)

    # -- stalls ---------------------------------------------------------------------------
    def check_stall(self) -> None:
        """A stall in the ledger's last calls (each poll), or in NCCL's calls of torch's
        record (each time its dump may have changed)."""
        if self.threshold <= 0:
            return
        now = time.time()
        recent = self._ledger_waits()
        if now >= self.next_record:
            self.next_record = now + self.record_every
            recent += [e for e in self.record() if e.gpu != "completed"]
        entry, since = self._waiting(recent)
        if entry is None:
            return
        waited = now - since
        key = (entry.group, entry.kind, entry.seq, entry.started)
        if waited >= self.threshold and key not in self.said:
            self.said.add(key)
            threads = self.text.thread_stacks(self.frames)
            self.say("stall", threads, stalled=waited, calls=self._calls(fresh=False))

    def _ledger_waits(self) -> list:
        """The ledger's last calls while one of them runs, else [] (and nothing to look
        at until the next call)."""
        ring = self.ring()
        if ring is None or ring.written == self.seen:
            return []
        written = ring.written
        recent = ring.recent(8)
        if not any(e.running for e in recent):
            self.seen = written
            return []
        self.seen = -1  # a call runs: a Wait for it may start without a new call
        return recent

    def say_sigterm(self) -> None:
        self.say("sigterm", self.text.thread_stacks(self.frames))

    # -- failures -------------------------------------------------------------------------
    def failure(self, kind: type, value: BaseException, tb: Any, thread: Any) -> None:
        if os.getpid() != self.pid:
            return
        try:
            places = self.text.traceback_places(tb)
            threads = self.text.thread_stacks(self.frames, (thread, places))
            self.say("failure", threads, error=self.text.error_text(kind, value))
        except Exception:  # the user's own traceback comes all the same
            pass

    def hook_exceptions(self) -> None:
        previous = sys.excepthook

        def excepthook(kind, value, tb):
            self.failure(kind, value, tb, threading.main_thread())
            previous(kind, value, tb)

        sys.excepthook = excepthook
        previous_thread = threading.excepthook

        def thread_excepthook(args):
            if args.exc_type is not SystemExit:
                self.failure(args.exc_type, args.exc_value, args.exc_traceback, args.thread)
            previous_thread(args)

        threading.excepthook = thread_excepthook

    # -- the thread -----------------------------------------------------------------------
    def run(self) -> None:
        import select

        wakeup = self.sigterm.wakeup
        poller = select.poll()
        if wakeup >= 0:
            poller.register(wakeup, select.POLLIN)
        while True:
            try:
                if poller.poll(self.poll * 1000) and wakeup >= 0:
                    self.sigterm.take()
                self.check_stall()
            except Exception:  # never a busy loop, never the user's problem
                time.sleep(self.poll)

    def start(self, module: Any = None) -> None:
        """The SIGTERM hook and our thread, once: when the process first imports a library
        whose calls the ledger records (before that it has neither, so a program of one
        thread stays one thread)."""
        if self.started or os.getpid() != self.pid:
            return
        self.started = True
        if threading.current_thread() is threading.main_thread():
            self.sigterm.hook()  # Python sets signal handlers in the main thread only
        threading.Thread(target=self.run, name="distcomp-job-watch", daemon=True).start()


def _ledger_folder() -> str:
    import atexit
    import shutil
    import tempfile

    folder = tempfile.mkdtemp(prefix="distcomp-job-")
    atexit.register(shutil.rmtree, folder, True)
    return folder


def arm(site: str) -> Watch | None:
    """Watch this process (``site``: the folder of the sitecustomize that calls this); None
    where it is not a rank (a spawned child of one) or diagnostics are off."""
    if os.environ.get("DISTCOMP_DIAGNOSE") == "0" or "--multiprocessing-fork" in sys.argv:
        return None
    existing = getattr(sys, "_distcomp_job_watch", None)
    if existing is not None:
        return existing
    above = os.path.dirname(os.path.dirname(os.path.abspath(site)))  # CODE/.distcomp
    code_dir = os.path.dirname(above) if os.path.basename(above) == ".distcomp" else os.getcwd()
    watch = Watch(code_dir, stall_seconds())
    if not os.path.isdir(os.environ.get("DISTCOMP_STACK_DIR", "")):  # else stack_site's
        hooks = _sibling("ledger_hooks")
        hooks.say = _quiet
        hooks.STATE.buckets = os.environ.get(BUCKETS_VARIABLE) == "1"
        # torch's record (NCCL's calls with their GPU-side state) dumped as often as it is
        # read for stalls: a dump of a full record takes tens of ms of the rank's CPU
        _sibling("torch_record").FLIGHT_EVERY = watch.record_every
        hooks.install(os.path.join(_ledger_folder(), "ledger"))
    sys._distcomp_job_watch = watch  # type: ignore[attr-defined]
    watch.hook_exceptions()
    after_import = _sibling("after_import")
    for name in ("torch.distributed", "mpi4py.MPI"):
        after_import.when_imported(name, watch.start)
    return watch
