"""SIGTERM in a rank of a submitted job: its line first, then what SIGTERM did before.

Azure ML sends SIGTERM to a job's processes when the job is cancelled or another of its
processes failed. :class:`Sigterm` puts a Python handler in front of SIGTERM's (unless
SIGTERM is ignored, or its handler is not Python's): the rank's line (``say``), then the
previous handler, or the default: the process ends by SIGTERM, its exit status as before.
A Python handler runs only when the main thread runs Python, and a rank that hangs waits in
C code (gloo, MPI, NCCL's synchronisation). So SIGTERM also reaches job_watch.py's thread,
through the signal wakeup fd (CPython's C-level handler writes the signal's number there
at once): the thread writes the line, reading the main thread's stack from outside, and
where the default applies and the main thread's handler has not run within a second, ends
the process as the default would.

A forked child is not the rank: around a fork it gets SIGTERM's handler and the wakeup fd
from before ours (a signal it got would otherwise be written into our pipe and taken for
the rank's; one it got before CPython's fork handling ran would be dropped rather than end
it).

Standard library only (Python 3.8 or newer); job_watch.py loads it by path.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable
from typing import Any

#: how long our thread leaves a SIGTERM to the main thread's handler before acting itself
MAIN_THREAD_GRACE = 1.0


class Sigterm:
    """The rank's SIGTERM hook; ``say()`` writes its line (once, whoever gets there first:
    the main thread's handler or the watcher's thread)."""

    def __init__(self, say: Callable[[], None]) -> None:
        self.say = say
        self.pid = os.getpid()
        self.lock = threading.RLock()
        self.said = False
        self.main_handled = threading.Event()  # the main thread's handler ran
        self.previous: Any = None  # SIGTERM's handler before ours
        self.wakeup = self.wakeup_write = -1  # the wakeup pipe's ends
        self.old_wakeup = -1  # the wakeup fd before ours
        self.handed = False  # handed back for a fork
        self.pending = False  # a SIGTERM was read from the wakeup pipe
        self.reading = threading.Lock()

    def hook(self) -> None:
        """Our handler in front of SIGTERM's, and the wakeup fd that tells our thread
        (main thread only, as Python sets signal handlers there only)."""
        previous = signal.getsignal(signal.SIGTERM)
        if previous is None or previous == signal.SIG_IGN:
            return
        self.previous = previous
        read, write = os.pipe()
        os.set_blocking(write, False)
        os.set_blocking(read, False)
        try:
            self.old_wakeup = signal.set_wakeup_fd(write, warn_on_full_buffer=False)
            self.wakeup, self.wakeup_write = read, write
        except (ValueError, OSError):  # the handler alone
            os.close(read)
            os.close(write)
        else:
            import atexit

            atexit.register(self.at_exit)
        signal.signal(signal.SIGTERM, self.on_sigterm)
        os.register_at_fork(
            before=self.before_fork, after_in_parent=self.after_fork, after_in_child=self.forked
        )

    def _say_once(self) -> None:
        with self.lock:  # the second comes here once the first's line is out
            if not self.said:
                self.said = True
                self.say()

    def on_sigterm(self, signum: int, frame: Any) -> None:
        """SIGTERM's Python handler (the main thread): the line once, then the previous
        handler, or the default: the process ends by SIGTERM."""
        if os.getpid() == self.pid:
            self.main_handled.set()
            self._say_once()
        previous = self.previous
        if callable(previous):
            previous(signum, frame)
            return
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)

    def take(self) -> None:
        """Read the wakeup pipe (our thread, once poll says it holds something): the signal
        numbers go on to the wakeup fd before ours, a SIGTERM is said, and where its default
        applies and the main thread cannot run its handler, the process ends by it."""
        data = self._read()
        if self.old_wakeup >= 0 and data:  # the wakeup fd set before ours hears of them
            try:
                os.write(self.old_wakeup, data)
            except OSError:
                pass
        if signal.SIGTERM not in data:
            return
        self._say_once()
        if signal.getsignal(signal.SIGTERM) != self.on_sigterm or callable(self.previous):
            return  # another handler's, or the previous one runs in the main thread
        if not self.main_handled.wait(MAIN_THREAD_GRACE):
            end_by_default(signal.SIGTERM)

    def _read(self) -> bytes:
        with self.reading:  # a SIGTERM read is pending before anyone else reads
            try:
                data = os.read(self.wakeup, 512)
            except OSError:  # nothing there (non-blocking)
                return b""
            if signal.SIGTERM in data:
                self.pending = True
            return data

    def at_exit(self) -> None:
        """A handler of the user's that ends the program at SIGTERM may do so before our
        thread's line is out: here, on the way out, the line is waited for, or written."""
        if os.getpid() == self.pid and self.wakeup >= 0:
            self._read()
            if self.pending:
                self._say_once()

    # -- forks ----------------------------------------------------------------------------
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
        """In a forked child: none of this is the child's (its SIGTERM does what it did;
        from a fork by another thread than the main one, from now on)."""
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
