"""A rank's shared memory and multiprocessing's temp folders do not outlive its ranks:
``%distcomp stop`` and restart end a rank tree with SIGTERM first, so Python's resource
tracker unlinks the segments and the rank's exit code removes its ``pymp-*`` folder; a
segment left by a SIGKILLed rank is unlinked by the tree's kill, and its temp folder is in
the world's scratch folder, which goes with the world (issue 39, item 8)."""

from __future__ import annotations

import os
import signal
import tempfile
import time
from pathlib import Path

import pytest

from jupyter_distcomp.rank_side import reaper

from .ranks_support import define, run_cell

pytestmark = pytest.mark.slow

CELL = """\
%%distcomp run shm
import multiprocessing, os, tempfile
from multiprocessing import shared_memory
segment = shared_memory.SharedMemory(create=True, size=4096)
pool = multiprocessing.Pool(2)
print(pool.map(abs, [-1, -2]))
print("segment", segment.name, "pymp", multiprocessing.util.get_temp_dir(), "pid", os.getpid())
"""


def _started(ip) -> dict[int, tuple[str, str, int]]:
    cell = run_cell(ip, CELL)
    assert cell.ok, cell.error
    found = {}
    for line in cell.stdout.splitlines():
        if " segment " in line:
            words = line.split()
            found[int(words[1].rstrip("]"))] = (words[3], words[5], int(words[7]))
    assert len(found) == 2, cell.stdout
    for name, folder, _ in found.values():
        assert Path("/dev/shm", name).exists() and Path(folder).is_dir()
    return found


def _gone(paths: list[Path], seconds: float = 10) -> list[Path]:
    deadline = time.monotonic() + seconds
    while [p for p in paths if p.exists()] and time.monotonic() < deadline:
        time.sleep(0.1)
    return [p for p in paths if p.exists()]


def test_stop_leaves_no_segment_and_no_temp_folder(ip):
    define(
        ip,
        "shm",
        "name: shm\ntype: DistributedComponent\nlauncher:\n  type: mpi\n"
        "  additional_arguments: python x.py\n",
        1,
        2,
    )
    found = _started(ip)
    assert run_cell(ip, "%distcomp stop shm").ok
    left = _gone([Path("/dev/shm", n) for n, _, _ in found.values()])
    left += _gone([Path(f) for _, f, _ in found.values()])
    assert left == [], left


def test_a_segment_of_a_killed_rank_is_unlinked_at_stop(ip):
    define(
        ip,
        "shm",
        "name: shm\ntype: DistributedComponent\nlauncher:\n  type: mpi\n"
        "  additional_arguments: python x.py\n",
        1,
        2,
    )
    found = _started(ip)
    name, folder, pid = found[1]
    assert Path(folder).parent.parent.name.startswith("distcomp-shm-")  # the world's scratch
    os.kill(pid, signal.SIGKILL)
    run_cell(ip, "%distcomp stop shm")
    assert _gone([Path("/dev/shm", name), Path(folder)]) == []


def test_the_tree_killer_unlinks_only_segments_no_one_maps(tmp_path):
    """A SIGKILLed tree's own segment goes; one that a live process still maps stays."""
    import subprocess
    import sys
    from multiprocessing import shared_memory

    kept = shared_memory.SharedMemory(create=True, size=4096)  # this process maps it
    try:
        program = (
            "import sys, time\nfrom multiprocessing import shared_memory\n"
            "own = shared_memory.SharedMemory(create=True, size=4096)\n"
            f"other = shared_memory.SharedMemory(name={kept.name!r})\n"
            "print(own.name, flush=True)\ntime.sleep(60)\n"
        )
        child = subprocess.Popen(
            [sys.executable, "-c", program],
            stdout=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        own = child.stdout.readline().strip()
        assert Path("/dev/shm", own).exists()
        # SIGKILL at once (no grace): the child's resource tracker dies with it
        reaper.kill_tree([child.pid], include_roots=True, grace=0, sessions=[child.pid])
        child.wait(10)
        assert not Path("/dev/shm", own).exists()
        assert Path("/dev/shm", kept.name).exists()
    finally:
        kept.close()
        kept.unlink()
    assert tempfile.gettempdir()  # the test made no folder of its own
