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

from .ranks_support import MPI_SPEC, define, run_cell

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
    """Two MPI ranks that each made a segment and a pool: rank -> (segment, pymp folder, pid)."""
    define(ip, "shm", MPI_SPEC.replace("ranks_demo", "shm"), 1, 2)
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
    found = _started(ip)
    assert run_cell(ip, "%distcomp stop shm").ok
    left = _gone([Path("/dev/shm", n) for n, _, _ in found.values()])
    left += _gone([Path(f) for _, f, _ in found.values()])
    assert left == [], left


def test_a_segment_of_a_killed_rank_is_unlinked_at_stop(ip):
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


# -- segments a rank names itself (issue 47, item 8) ----------------------------------------

NAMED_CELL = """\
%%distcomp run shm
import os
from multiprocessing import shared_memory
segment = shared_memory.SharedMemory(name=f"{PREFIX}_{mpi_rank}", create=True, size=4096)
print("segment", segment.name, "pid", os.getpid())
"""


def _named_segments(ip, prefix: str) -> dict[int, tuple[Path, int]]:
    """Two MPI ranks that each made a segment named by the user: rank -> (its file, pid)."""
    define(ip, "shm", MPI_SPEC.replace("ranks_demo", "shm"), 1, 2)
    cell = run_cell(ip, NAMED_CELL.replace("{PREFIX}", prefix))
    assert cell.ok, cell.error
    found = {}
    for line in cell.stdout.splitlines():
        if " segment " in line:
            words = line.split()
            found[int(words[1].rstrip("]"))] = (Path("/dev/shm", words[3]), int(words[5]))
    assert len(found) == 2 and all(path.exists() for path, _ in found.values()), cell.stdout
    return found


def test_named_segments_of_a_killed_rank_and_of_the_rank_mpiexec_ended_go_at_stop(ip):
    prefix = f"dctest_{os.getpid()}_stop"
    found = _named_segments(ip, prefix)
    try:
        os.kill(found[1][1], signal.SIGKILL)  # mpiexec then ends rank 0
        run_cell(ip, "%distcomp stop shm")
        assert _gone([path for path, _ in found.values()]) == []
    finally:
        for path in Path("/dev/shm").glob(f"{prefix}_*"):
            path.unlink()


def test_named_segments_of_a_killed_kernels_ranks_go(tmp_path):
    """After a kernel's SIGKILL no hook of its runs: its ranks' segments go all the same."""
    import psutil

    from .test_ranks_kernel import Kernel

    prefix = f"dctest_{os.getpid()}_kernel"
    k = Kernel()
    try:
        k.run("%load_ext jupyter_distcomp")
        k.run(f"%%distcomp shm\n{MPI_SPEC.replace('ranks_demo', 'shm')}")
        k.run("shm.runsettings.resource_layout.configure(process_count_per_node=2)")
        reply, text, _ = k.run(NAMED_CELL.replace("{PREFIX}", prefix))
        assert reply["status"] == "ok", text
        segments = sorted(Path("/dev/shm").glob(f"{prefix}_*"))
        assert len(segments) == 2, text
        psutil.Process(k.km.provisioner.process.pid).kill()
        assert _gone(segments, 20) == []
    finally:
        k.close()
        for path in Path("/dev/shm").glob(f"{prefix}_*"):
            path.unlink()


def test_a_recorded_segment_goes_once_its_tree_is_killed_and_a_sweep_finds_a_dead_folder(
    tmp_path,
):
    """A process that records its segments, SIGKILLed with its resource tracker: the record
    names the segment, and the sweep of a dead kernel's folder unlinks it."""
    import subprocess
    import sys

    from jupyter_distcomp.machine import scratch
    from jupyter_distcomp.rank_side import segments

    folder = tmp_path / "distcomp-dead-x"
    folder.mkdir()
    name = f"dctest_{os.getpid()}_sweep"
    program = (
        "import sys, time, importlib.util\n"
        f"spec = importlib.util.spec_from_file_location('rec', {segments.__file__!r})\n"
        "rec = importlib.util.module_from_spec(spec); spec.loader.exec_module(rec)\n"
        f"rec.install({str(folder / ('rank-0' + segments.SUFFIX))!r})\n"
        "from multiprocessing import shared_memory\n"
        f"gone = shared_memory.SharedMemory(name={name + '_gone'!r}, create=True, size=64)\n"
        "gone.close(); gone.unlink()\n"
        f"kept = shared_memory.SharedMemory(name={name!r}, create=True, size=64)\n"
        "print('made', flush=True)\ntime.sleep(60)\n"
    )
    child = subprocess.Popen(
        [sys.executable, "-c", program], stdout=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        assert child.stdout.readline().strip() == "made"
        reaper.kill_tree([child.pid], include_roots=True, grace=0, sessions=[child.pid])
        child.wait(10)
        assert Path("/dev/shm", name).exists()  # its tracker died with it
        assert segments.recorded_segments(str(folder)) == {f"/dev/shm/{name}"}
        (folder / scratch.OWNER).write_text(f"{child.pid} 0.00")  # its owner is gone
        assert scratch.sweep(str(tmp_path)) == [str(folder)]
        assert not Path("/dev/shm", name).exists()
    finally:
        child.kill()
        Path("/dev/shm", name).unlink(missing_ok=True)
