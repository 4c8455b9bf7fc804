"""Scratch folders (``/tmp/distcomp-*``, and ``/dev/shm/distcomp-*`` for the ranks'
shared-memory segments) that a dead kernel does not leave behind for good.

Each folder holds an ``owner`` file naming the process that made it (pid and start time, so a
reused pid does not count). A kernel removes its folders itself when a run ends; one that was
SIGKILLed cannot, so the first scratch folder a kernel makes first sweeps the folders whose
owner is gone, with the shared-memory segments that the ranks recorded there and left
(``rank_side/segments.py``).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import threading
from pathlib import Path

from ..rank_side import segments

OWNER = "owner"
#: a file system in memory (Linux), where Open MPI keeps the ranks' shared-memory segments
SHARED_MEMORY = "/dev/shm"
_swept = threading.Event()


def _identity(pid: int) -> str | None:
    """``"PID STARTTIME"`` of a live process, or None when it is gone (a zombie, dead but
    not yet waited for by its parent, is gone)."""
    import psutil

    try:
        process = psutil.Process(pid)
        if process.status() == psutil.STATUS_ZOMBIE:
            return None
        return f"{pid} {process.create_time():.2f}"
    except psutil.Error:
        return None


def make_folder(prefix: str, root: str | None = None) -> str:
    """A new folder under ``root`` (the temp dir), marked as this process's; sweeps dead
    ones first."""
    if not _swept.is_set():
        _swept.set()
        sweep()
    folder = tempfile.mkdtemp(prefix=prefix, dir=root)
    Path(folder, OWNER).write_text(_identity(os.getpid()) or "", encoding="utf-8")
    return folder


def shared_memory_folder(prefix: str) -> str | None:
    """A new folder in :data:`SHARED_MEMORY`, or None where there is none to write to."""
    if not os.access(SHARED_MEMORY, os.W_OK | os.X_OK):
        return None
    return make_folder(prefix, SHARED_MEMORY)


def sweep(root: str | None = None) -> list[str]:
    """Remove the ``distcomp-*`` folders under ``root`` (the temp dir and
    :data:`SHARED_MEMORY`) whose owner process is gone."""
    removed = []
    roots = [root] if root else [tempfile.gettempdir(), SHARED_MEMORY]
    for folder in (folder for base in roots for folder in Path(base).glob("distcomp-*")):
        owner = folder / OWNER
        try:
            if folder.is_symlink() or folder.stat().st_uid != os.getuid():
                continue
            words = owner.read_text(encoding="utf-8").split()
        except OSError:  # not ours to judge: no owner file
            continue
        with contextlib.suppress(ValueError, IndexError):
            if _identity(int(words[0])) != " ".join(words[:2]):
                segments.unlink_recorded(str(folder))  # what its ranks made and left
                shutil.rmtree(folder, ignore_errors=True)
                removed.append(str(folder))
    return removed


def remove(*folders: str | None) -> None:
    """Remove these scratch folders (None: no folder) and all they hold."""
    for folder in folders:
        if folder is not None:
            shutil.rmtree(folder, ignore_errors=True)
