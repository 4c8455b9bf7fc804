"""A rank of a submitted job watches itself, and says where it is when that matters.

``arm()`` runs in every Python process of a job submitted with diagnostics (from
``job_site/sitecustomize.py``, before the user's code): it records the process's
torch.distributed and mpi4py calls in the collectives ledger (ledger_hooks.py; the ring file
in a temporary folder of the process, removed at exit), and writes the line of job_line.py
into the process's stderr, which Azure ML keeps as the rank's log:

- ``stall``: the rank has been inside one collective or blocking point-to-point call (the
  ledger's blocked entry) for ``DISTCOMP_STALL_SECONDS`` (default 300; 0 turns it off);
  once per stalled call. A thread of ours looks every few seconds at the ring's last
  entries in memory and reads the main thread's stack with ``sys._current_frames()``, which
  works while that thread waits in C code with the GIL released (gloo, MPI).
- ``sigterm`` (Azure ML's cancel, or another process failed): the line, then what SIGTERM
  did before: the previous Python handler, else the default (the process ends by SIGTERM,
  its exit status unchanged). SIGTERM comes through Python's handler and, so that a main
  thread stuck in C code does not hide it, through the signal wakeup fd to our thread,
  which ends the process as the default would once the line is out.
- ``failure``: an uncaught exception (``sys.excepthook`` and ``threading.excepthook``, both
  chained), with the error and the traceback's frames.

The SIGTERM hook and the thread start when the process first imports torch.distributed or
mpi4py (a program of one thread that never does stays one thread); the exception hooks at
once. Nothing else: no work per call beyond the ledger's, no output unless one of these
happens. A forked child keeps none of it (it is not the rank); a spawned one
(multiprocessing) arms nothing. ``DISTCOMP_DIAGNOSE=0`` in the job's environment turns it
all off.

What it cannot do: a SIGTERM that arrives while the main thread holds the GIL in C code
(no Python handler nor thread of ours can run then) acts once that code returns, where the
default would have ended the process at once; a process whose own code replaced our
handler gets its line from our thread, with the main thread's stack as that thread finds it.

Standard library only (Python 3.8 or newer); loaded by path, with its siblings.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from typing import Any

STALL_VARIABLE = "DISTCOMP_STALL_SECONDS"
DEFAULT_STALL_SECONDS = 300.0
#: how long our thread leaves a SIGTERM to the main thread's handler before acting itself
MAIN_THREAD_GRACE = 1.0
_HERE = os.path.dirname(os.path.abspath(__file__))


def _sibling(name: str) -> Any:
    """ledger_hooks.py or job_line.py, loaded by path once (``distcomp_NAME``)."""
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
        self.sigterm_said = False
        self.main_handled = threading.Event()  # the main thread's SIGTERM handler ran
        self.previous: Any = None  # SIGTERM's handler before ours
        self.wakeup = self.wakeup_write = -1  # the signal wakeup pipe's ends
        self.old_wakeup = -1
        self.said: set = set()  # the stalled calls said
        self.seen = -1  # ring.written when last looked at, with nothing blocked
        self.started = False
        self.handed = False  # SIGTERM's handler handed back for a fork

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
    def _calls(self) -> list:
        ring = self.ring()
        return ring.recent(self.text.MAX_CALLS) if ring is not None else []

    @staticmethod
    def _waiting(calls: list) -> Any:
        """The oldest call the rank waits in, and since when; (None, 0) if none."""
        waits = [(-e.finished if e.finished < 0 else e.started, e) for e in calls if e.blocked]
        if not waits:
            return None, 0.0
        since, entry = min(waits, key=lambda pair: pair[0])
        return entry, since

    def say(self, reason: str, threads: list, stalled: Any = None, error: Any = None) -> None:
        calls = self._calls()
        if stalled is None:
            entry, since = self._waiting(calls)
            stalled = time.time() - since if entry is not None else None
        data = self.text.line(reason, threads, calls, stalled, error)
        with self.lock:
            self.text.write(data)

    # -- stalls ---------------------------------------------------------------------------
    def check_stall(self) -> None:
        ring = self.ring()
        if ring is None or self.threshold <= 0 or ring.written == self.seen:
            return
        written = ring.written
        recent = ring.recent(8)
        if not any(e.running for e in recent):
            self.seen = written  # nothing to look at again until the next call
            return
        self.seen = -1  # a call runs: a Wait for it may start without a new call
        entry, since = self._waiting(recent)
        if entry is None:
            return
        waited = time.time() - since
        key = (entry.group, entry.kind, entry.seq, entry.started)
        if waited >= self.threshold and key not in self.said:
            self.said.add(key)
            self.say("stall", self.text.thread_stacks(self.frames), stalled=waited)

    # -- SIGTERM --------------------------------------------------------------------------
    def hook_sigterm(self) -> None:
        """Our handler in front of SIGTERM's (left alone where it is ignored or not
        Python's), and the wakeup fd that tells our thread too."""
        previous = signal.getsignal(signal.SIGTERM)
        if previous is None or previous == signal.SIG_IGN:
            return
        self.previous = previous
        read, write = os.pipe()
        os.set_blocking(write, False)
        try:
            self.old_wakeup = signal.set_wakeup_fd(write, warn_on_full_buffer=False)
            self.wakeup, self.wakeup_write = read, write
        except (ValueError, OSError):  # not the main thread: the handler alone
            os.close(read)
            os.close(write)
        signal.signal(signal.SIGTERM, self.on_sigterm)

    def _say_sigterm(self, threads: Any) -> None:
        with self.lock:
            if self.sigterm_said:
                return
            self.sigterm_said = True
            self.say("sigterm", threads() if callable(threads) else threads)

    def on_sigterm(self, signum: int, frame: Any) -> None:
        """SIGTERM's Python handler (the main thread): the line once, then the previous
        handler, or the default: the process ends by SIGTERM."""
        if os.getpid() == self.pid:
            self.main_handled.set()
            self._say_sigterm(lambda: self.text.thread_stacks(self.frames))
        previous = self.previous
        if callable(previous):
            previous(signum, frame)
            return
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)

    def sigterm_in_thread(self) -> None:
        """SIGTERM seen by our thread: the line (the main thread's stack read from here), and
        where the main thread cannot run its handler (it waits in C code) and SIGTERM's
        default applies, the default: the process ends by SIGTERM."""
        self._say_sigterm(lambda: self.text.thread_stacks(self.frames))
        if signal.getsignal(signal.SIGTERM) != self.on_sigterm or callable(self.previous):
            return  # another handler's, or the previous one runs in the main thread
        if not self.main_handled.wait(MAIN_THREAD_GRACE):
            end_by_default(signal.SIGTERM)

    def signals(self, data: bytes) -> None:
        if self.old_wakeup >= 0:  # the wakeup fd set before ours still hears of them
            try:
                os.write(self.old_wakeup, data)
            except OSError:
                pass
        if signal.SIGTERM in data:
            self.sigterm_in_thread()

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

        poller = select.poll()
        if self.wakeup >= 0:
            poller.register(self.wakeup, select.POLLIN)
        while True:
            try:
                if poller.poll(self.poll * 1000) and self.wakeup >= 0:
                    self.signals(os.read(self.wakeup, 512))
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
            self.hook_sigterm()  # Python sets signal handlers in the main thread only
        os.register_at_fork(
            before=self.before_fork, after_in_parent=self.after_fork, after_in_child=self.forked
        )
        threading.Thread(target=self.run, name="distcomp-job-watch", daemon=True).start()

    # -- forks --------------------------------------------------------------------------
    # A forked child is not the rank: it starts with SIGTERM's handler and the wakeup fd
    # from before ours (a signal it got would otherwise land in our pipe, and one it got
    # before CPython's fork handling ran would be lost rather than end it). Where the main
    # thread forks, the parent hands them over before the fork; from another thread, the
    # child restores them as soon as it runs Python.
    def _hand_over(self, ours: bool) -> bool:
        """SIGTERM's handler and the wakeup fd: ours, or those from before ours; whether
        they changed (not from a thread other than the main one, nor where the user's own
        handler replaced ours)."""
        if threading.current_thread() is not threading.main_thread() or self.previous is None:
            return False
        if signal.getsignal(signal.SIGTERM) != (self.previous if ours else self.on_sigterm):
            return False
        signal.signal(signal.SIGTERM, self.on_sigterm if ours else self.previous)
        if self.wakeup >= 0:
            wake = self.wakeup_write if ours else self.old_wakeup
            signal.set_wakeup_fd(wake, warn_on_full_buffer=False)
        return True

    def before_fork(self) -> None:
        self.handed = self._hand_over(ours=False)

    def after_fork(self) -> None:
        if self.handed:
            self._hand_over(ours=True)

    def forked(self) -> None:
        """In a forked child: none of this is the child's (its SIGTERM does what it did)."""
        self._hand_over(ours=False)


def end_by_default(signum: int) -> None:
    """End the process as signal ``signum``'s default action does, from any thread: the
    C-level handler reset (Python's ``signal.signal`` is for the main thread only)."""
    try:
        import ctypes

        libc = ctypes.CDLL(None)
        libc.signal.restype = ctypes.c_void_p
        libc.signal.argtypes = (ctypes.c_int, ctypes.c_void_p)
        libc.signal(signum, None)  # SIG_DFL
    except Exception:
        os._exit(128 + signum)
    os.kill(os.getpid(), signum)


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
    if not os.path.isdir(os.environ.get("DISTCOMP_STACK_DIR", "")):  # else stack_site's
        hooks = _sibling("ledger_hooks")
        hooks.say = _quiet
        hooks.install(os.path.join(_ledger_folder(), "ledger"))
    above = os.path.dirname(os.path.dirname(os.path.abspath(site)))  # CODE/.distcomp
    code_dir = os.path.dirname(above) if os.path.basename(above) == ".distcomp" else os.getcwd()
    watch = Watch(code_dir, stall_seconds())
    sys._distcomp_job_watch = watch  # type: ignore[attr-defined]
    watch.hook_exceptions()
    after_import = _sibling("after_import")
    for name in ("torch.distributed", "mpi4py.MPI"):
        after_import.when_imported(name, watch.start)
    return watch
