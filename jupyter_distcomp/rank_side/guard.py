"""``python -m jupyter_distcomp.rank_side.guard [--signal NAME] [--parent PID] CMD ...``: CMD,
and everything it starts, ends with the kernel.

The controller and ``mpiexec`` are started through this. On Linux the guard asks the kernel
(``prctl(PR_SET_PDEATHSIG, sig)``) to signal it when the Jupyter kernel that started it dies,
even by SIGKILL, when no atexit hook can run: SIGTERM by default. A Jupyter kernel that died while
the guard started (before that request) is noticed by its pid (``--parent``, the kernel's pid):
the guard then exits at once, CMD never runs. It runs CMD as its child and
passes every stop signal on to it, so that mpiexec stops its ranks and the controller its
schedulers. The guard is a child subreaper (see reaper.py): a process a rank starts and
leaves behind, even a daemon that detaches with ``setsid``, is adopted by the guard, not by
PID 1, and is killed when CMD ends, or ``GRACE`` seconds after a stop signal if CMD lingers.
The guard ends as CMD did (same exit code or signal), once it has unlinked the shared-memory
segments the ranks recorded and left (``segments.py``: ``DISTCOMP_SEGMENT_RECORDS`` in its
environment names the folder). Elsewhere it just runs CMD.
"""

from __future__ import annotations

import os
import signal
import sys
import threading

from . import reaper, segments

_FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2)
_STOPS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
#: seconds CMD has to end after a stop signal before all below the guard is killed
GRACE = 10.0


def _start(argv: list[str]) -> int:
    child = os.fork()
    if child:
        return child
    reaper.die_with_parent(signal.SIGKILL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, _FORWARDED)
    try:
        os.execvp(argv[0], argv)
    except OSError as exc:
        os.write(2, f"cannot run {argv[0]!r}: {exc.strerror}\n".encode())
    os._exit(127)


class _Forward:
    """The signal handler: passes each signal on to ``child``; the first stop signal starts
    the deadline. Signals arrive while it runs (a stop, then the kernel's death): it is
    marked as started before the timer is made, so one that comes meanwhile starts none."""

    def __init__(self, child: int):
        self.child = child
        self.started = False

    def __call__(self, signum: int, _frame: object) -> None:
        try:
            os.kill(self.child, signum)
        except ProcessLookupError:
            pass
        if signum in _STOPS and not self.started:
            self.started = True
            # the main thread's waitpid must see CMD end: the timer kills, it does not reap
            timer = threading.Timer(GRACE, reaper.kill_tree)
            timer.daemon = True
            timer.start()


def _supervise(child: int) -> int:
    """Pass stop signals on to ``child``, reap what we adopt, and return ``child``'s end."""
    forward = _Forward(child)
    for sig in _FORWARDED:
        signal.signal(sig, forward)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, _FORWARDED)
    return reaper.wait_for(child)


def _exit_like(code: int) -> None:
    if code < 0:
        if -code not in (signal.SIGKILL, signal.SIGSTOP):  # those two have no handler
            signal.signal(-code, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, [-code])
        os.kill(os.getpid(), -code)
    sys.exit(code if code >= 0 else 128 - code)


def _options(argv: list[str]) -> tuple[signal.Signals, int | None, list[str]]:
    """``--signal NAME`` and ``--parent PID`` (in any order), then CMD."""
    sig, parent = signal.SIGTERM, None
    while len(argv) > 2 and argv[0] in ("--signal", "--parent"):
        if argv[0] == "--signal":
            sig = signal.Signals[f"SIG{argv[1]}"]
        else:
            parent = int(argv[1])
        argv = argv[2:]
    return sig, parent, argv


def main(argv: list[str]) -> None:
    sig, parent, argv = _options(argv)
    if not argv:
        sys.exit(
            "usage: python -m jupyter_distcomp.rank_side.guard [--signal NAME] [--parent PID] "
            "CMD [ARGS...]"
        )
    if not sys.platform.startswith("linux"):
        os.execvp(argv[0], argv)
    # without --parent, the parent we see first; it may have died already (then we were
    # adopted and our parent is not the process that started us: --parent tells)
    parent = os.getppid() if parent is None else parent
    reaper.die_with_parent(sig)
    if os.getppid() != parent:  # the kernel died before the request took effect
        sys.exit(1)
    reaper.become_subreaper()
    signal.pthread_sigmask(signal.SIG_BLOCK, _FORWARDED)
    code = _supervise(_start(argv))
    records = os.environ.get(segments.RECORDS_VARIABLE)
    if records:  # what the ranks' resource trackers, killed with them, did not unlink
        segments.unlink_recorded(records)
    _exit_like(code)


if __name__ == "__main__":
    main(sys.argv[1:])
