"""Scratch folders (``/tmp/distcomp-*``) that a dead kernel does not leave behind for good.

Each folder holds an ``owner`` file naming the process that made it (pid and start time, so a
reused pid does not count). A kernel removes its folders itself when a run ends; one that was
SIGKILLed cannot, so the first scratch folder a kernel makes first sweeps the folders whose
owner is gone.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import threading
from pathlib import Path

OWNER = "owner"
_swept = threading.Event()


def _identity(pid: int) -> str | None:
    """``"PID STARTTIME"`` of a live process, or None when it is gone."""
    import psutil

    try:
        return f"{pid} {psutil.Process(pid).create_time():.2f}"
    except psutil.Error:
        return None


def make_folder(prefix: str) -> str:
    """A new folder under the temp dir, marked as this process's; sweeps dead ones first."""
    if not _swept.is_set():
        _swept.set()
        sweep()
    folder = tempfile.mkdtemp(prefix=prefix)
    Path(folder, OWNER).write_text(_identity(os.getpid()) or "", encoding="utf-8")
    return folder


def sweep(root: str | None = None) -> list[str]:
    """Remove the ``distcomp-*`` folders under ``root`` whose owner process is gone."""
    removed = []
    for folder in Path(root or tempfile.gettempdir()).glob("distcomp-*"):
        owner = folder / OWNER
        try:
            if folder.is_symlink() or folder.stat().st_uid != os.getuid():
                continue
            words = owner.read_text(encoding="utf-8").split()
        except OSError:  # not ours to judge: no owner file
            continue
        with contextlib.suppress(ValueError, IndexError):
            if _identity(int(words[0])) != " ".join(words[:2]):
                shutil.rmtree(folder, ignore_errors=True)
                removed.append(str(folder))
    return removed
