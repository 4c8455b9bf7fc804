"""A process that owns everything started below it, even what detaches, and ends all of it.

Linux hands an orphan to its nearest ancestor marked as a *child subreaper*
(``prctl(PR_SET_CHILD_SUBREAPER)``) instead of to PID 1. A supervisor so marked keeps every
process its child starts, also daemons that ``setsid`` and double-fork, in its own process
tree, and can end them all when the child ends or the kernel dies. ``rank_exec`` (each rank
of ``%distcomp command``) and ``guard`` (mpiexec of ``%%distcomp run``, the controller) are
such supervisors. :func:`kill_tree` is the one way anything of this package ends a process
tree: the supervisors their own, the kernel those it started (``machine/processes.py``).

Standard library only; ``rank_exec`` runs it from its file, outside the package.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Iterable

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
_PROC = "/proc"


def _prctl(option: int, value: int) -> bool:
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(option, value, 0, 0, 0) == 0
    except (OSError, AttributeError):  # not Linux
        return False


def become_subreaper() -> bool:
    """Adopt the orphans of every descendant; False where the system cannot (not Linux)."""
    return _prctl(PR_SET_CHILD_SUBREAPER, 1)


def die_with_parent(sig: int = signal.SIGKILL) -> bool:
    """Have ``sig`` sent to this process when its parent dies (kept across ``exec``)."""
    return _prctl(PR_SET_PDEATHSIG, int(sig))


def processes() -> dict[int, tuple[int, int]]:
    """pid -> (parent pid, session id) of every live (not zombie) process, from /proc; {}
    without /proc."""
    table: dict[int, tuple[int, int]] = {}
    try:
        names = os.listdir(_PROC)
    except OSError:
        return table
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"{_PROC}/{name}/stat", "rb") as handle:
                fields = handle.read().rsplit(b")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if fields[0] != b"Z":
            table[int(name)] = (int(fields[1]), int(fields[3]))
    return table


def descendants(roots: Iterable[int], table: dict[int, tuple[int, int]] | None = None) -> list[int]:
    """Every live process below ``roots`` (not the roots themselves), parents first."""
    table = processes() if table is None else table
    children: dict[int, list[int]] = {}
    for pid, (ppid, _) in table.items():
        children.setdefault(ppid, []).append(pid)
    found: list[int] = []
    todo = list(roots)
    while todo:
        for child in children.get(todo.pop(), ()):
            if child not in found:
                found.append(child)
                todo.append(child)
    return found


def members(
    roots: Iterable[int] = (), sessions: Iterable[int] = (), include_roots: bool = False
) -> list[int]:
    """Every live process below ``roots`` (and the roots, with ``include_roots``), in one of
    ``sessions`` or below one of those, parents before their children."""
    table = processes()
    roots, wanted = list(roots), set(sessions)
    top = [pid for pid in roots if include_roots and pid in table]
    top += [pid for pid, (_, sid) in table.items() if sid in wanted and pid not in top]
    below = [pid for pid in descendants([*roots, *top], table) if pid not in top]
    return [*top, *below]


def reap() -> None:
    """Collect every child that has ended (adopted orphans included), without waiting."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def wait_for(child: int) -> int:
    """Reap whatever ends below this process until ``child`` does (orphans adopted as a
    subreaper included), then kill what it left; the child's exit code (-N: signal N)."""
    while True:
        try:
            pid, status = os.waitpid(-1, 0)
        except InterruptedError:
            continue
        if pid == child:
            kill_tree(collect=True)
            return os.waitstatus_to_exitcode(status)


#: how long a tree has, after SIGTERM, to end by itself before SIGKILL: Python's exit code
#: runs (atexit, multiprocessing's finalizers), and its resource tracker, once the processes
#: that used it are gone, unlinks the shared memory they left
TERM_GRACE = 1.0
SHARED_MEMORY = "/dev/shm"
#: shared-memory segments of Python's multiprocessing.shared_memory (``psm_<hex>``)
PYTHON_SEGMENT = "psm_"


def kill_tree(
    roots: Iterable[int] | None = None,
    *,
    sessions: Iterable[int] = (),
    include_roots: bool = False,
    timeout: float = 5.0,
    collect: bool = False,
    grace: float = TERM_GRACE,
) -> list[int]:
    """End every process below ``roots`` (default: this process), those roots too with
    ``include_roots``, and every process in ``sessions``: SIGTERM first, then, after
    ``grace`` seconds (0: at once), SIGKILL until none is left, leaves first, so nothing is
    orphaned on the way. Then Python shared-memory segments that only these processes had
    mapped, and that nothing unlinked, are unlinked (a SIGKILLed tree leaves them).

    Repeats, because a process may start another while a pass runs; a killed process that is
    a zombie no longer counts. Returns the pids that got SIGKILL. ``collect``: reap this
    process's ended children as well (a supervisor's own; the kernel's children belong to
    whoever started them).
    """
    roots = [os.getpid()] if roots is None else list(roots)
    sessions = list(sessions)
    left = members(roots, sessions, include_roots)
    segments = mapped_segments(left)
    if left and grace > 0:
        _signal(reversed(left), signal.SIGTERM)
        ends = time.monotonic() + grace
        while left and time.monotonic() < ends:
            time.sleep(0.02)
            if collect:
                reap()
            left = members(roots, sessions, include_roots)
    killed: list[int] = []
    deadline = time.monotonic() + timeout
    while True:
        if collect:
            reap()
        left = members(roots, sessions, include_roots)
        if not left or time.monotonic() > deadline:
            unlink_unused(segments)
            return killed
        killed += _signal(reversed(left), signal.SIGKILL)
        time.sleep(0.01)


def _signal(pids: Iterable[int], sig: int) -> list[int]:
    """Send ``sig`` to each of ``pids``, in order; those it reached."""
    reached = []
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)
            reached.append(pid)
    return reached


def end_gently(pids: Iterable[int], grace: float = TERM_GRACE) -> list[int]:
    """SIGTERM ``pids``, as a terminal's ``kill`` does, and wait up to ``grace`` seconds for
    them and every process below them to end (a Python process ends its pool's workers, and
    its resource tracker follows); the pids of those still there."""
    pids = list(pids)
    table = processes()
    watched = [pid for pid in pids if pid in table] + descendants(pids, table)
    _signal(pids, signal.SIGTERM)
    ends = time.monotonic() + grace
    while True:
        table = processes()
        left = [pid for pid in watched if pid in table]
        if not left or time.monotonic() >= ends:
            return left
        time.sleep(0.02)


def _mapped(pid: int, prefix: str = SHARED_MEMORY + "/") -> set[str]:
    """The shared-memory files (under ``prefix``) ``pid`` has mapped."""
    try:
        with open(f"{_PROC}/{pid}/maps", encoding="utf-8", errors="replace") as handle:
            return {
                line.split(None, 5)[5].strip()
                for line in handle
                if prefix in line and line.count(" ") >= 5
            }
    except (OSError, IndexError):
        return set()


def mapped_segments(pids: Iterable[int]) -> set[str]:
    """The Python shared-memory segments (not unlinked yet) that ``pids`` have mapped."""
    found: set[str] = set()
    for pid in pids:
        found |= _mapped(pid, os.path.join(SHARED_MEMORY, PYTHON_SEGMENT))
    return {path for path in found if not path.endswith(" (deleted)")}


def unlink_unused(segments: set[str]) -> None:
    """Unlink those of ``segments`` that still exist, are this user's, and that no live
    process maps any more."""
    uid = os.getuid()
    left = set()
    for path in segments:
        with contextlib.suppress(OSError):
            if os.stat(path, follow_symlinks=False).st_uid == uid:
                left.add(path)
    if not left:
        return
    for pid in processes():
        left -= _mapped(pid)
        if not left:
            return
    for path in left:
        with contextlib.suppress(OSError):
            os.unlink(path)
