"""The shared-memory segments each rank makes (``multiprocessing.shared_memory``), written
down as it makes them, so that they go with the rank even when nothing of it is left to
unlink them.

Python's resource tracker, a process the rank starts, unlinks what the rank leaves when the
rank ends. A SIGKILL of the rank's tree (mpiexec ending the other ranks after one died, the
guard after the kernel's death) ends the tracker too, and a segment's name is the user's
choice, so no pattern finds it afterwards. So a rank appends ``+NAME`` to its record file
in the world's scratch folder when it registers a segment with its tracker, and ``-NAME``
when it unregisters it (its unlink). :func:`unlink_recorded` unlinks the segments a
folder's records still hold that are this user's and that no live process maps: the kernel
at a world's stop, the guard when the kernel died, the next kernel's sweep of a dead
kernel's folders.

Standard library only: a rank loads it by path.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from pathlib import Path

#: a rank's record file is ``rank-N`` and this
SUFFIX = ".segments"
#: names the folder of the records, in the environment of the guard that runs mpiexec
RECORDS_VARIABLE = "DISTCOMP_SEGMENT_RECORDS"
SHARED_MEMORY = "/dev/shm"


def install(path: str) -> None:
    """Record in ``path`` each segment this process (and what it forks) registers with its
    resource tracker, and each it unregisters."""
    from multiprocessing import resource_tracker

    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0)
    fd = os.open(path, flags, 0o600)
    if getattr(resource_tracker.register, "distcomp_record", None) is not None:
        resource_tracker.register.distcomp_record[0] = fd  # type: ignore[attr-defined]
        return
    record = [fd]

    def recorded(call: Callable, mark: str) -> Callable:
        def note(name: object, rtype: str) -> object:
            if rtype == "shared_memory" and isinstance(name, str) and "\n" not in name:
                with contextlib.suppress(OSError):  # one write a line: appends stay whole
                    os.write(record[0], f"{mark}{name}\n".encode("utf-8", "surrogateescape"))
            return call(name, rtype)

        note.distcomp_record = record  # type: ignore[attr-defined]
        return note

    resource_tracker.register = recorded(resource_tracker.register, "+")
    resource_tracker.unregister = recorded(resource_tracker.unregister, "-")


def recorded_segments(folder: str) -> set[str]:
    """The paths of the segments the record files in ``folder`` hold: registered and not
    unregistered since."""
    counts: dict[str, int] = {}
    for record in Path(folder).glob(f"*{SUFFIX}"):
        with contextlib.suppress(OSError):
            text = record.read_bytes().decode("utf-8", "surrogateescape")
            for line in text.splitlines():
                mark, name = line[:1], line[1:]
                if mark in "+-" and mark and _plain(name):
                    counts[name] = counts.get(name, 0) + (1 if mark == "+" else -1)
    return {SHARED_MEMORY + name for name, count in counts.items() if count > 0}


def _plain(name: str) -> bool:
    """A segment's name as POSIX names one: ``/NAME``, no other slash."""
    rest = name[1:]
    return name.startswith("/") and 0 < len(rest) < 256 and "/" not in rest and rest != ".."


def unlink_recorded(folder: str) -> None:
    """Unlink the segments the records in ``folder`` hold, where this user's and no live
    process maps them."""
    segments = recorded_segments(folder)
    if segments:
        from .reaper import unlink_unused

        unlink_unused(segments)
