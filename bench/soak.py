"""Soak: many cells, command runs and rank deaths in one kernel; nothing may leak.

Run: make soak   (or .venv/bin/python bench/soak.py [--cells N] [--commands N] [--kills N])

In one IPython shell with the extension loaded (the kernel's side, as a notebook drives it):

1. ``--cells`` ``%%distcomp run`` cells on a world of ``--ranks`` MPI ranks;
2. ``--commands`` ``%distcomp command`` runs (mpi launcher: one mpiexec per run), each rank
   also leaving a child process behind that the run must end;
3. ``--kills`` faults: a random rank SIGKILLs itself at a random moment while every rank
   loops over ``allreduce``; the cell must fail naming that rank, ``%distcomp restart`` must
   bring the world back and the next cell must run.

Prints the faults injected and survived, the processes left (every pid the soak saw started,
checked by pid, so a process reparented to PID 1 still counts), and the growth of the
kernel's threads, open file descriptors and memory between the end of the warm-up and the
end. Memory is the resident size once the C allocator has handed its free pages back
(``malloc_trim``), so what it keeps for reuse is not counted as growth.

IPython itself keeps every cell's source and printed output for the session's history; any
kernel grows by that. The peer: a second kernel with the same warm-up runs plain IPython
cells that print the same text in the same writes, and their growth is IPython's share.

Targets: every fault survived, 0 processes left, threads and descriptors flat, and the
kernel's growth beyond IPython's share within MEMORY_SLACK_MIB: resident memory, or with
``--objects`` the memory the Python objects hold (tracemalloc: no allocator pages kept for
reuse, no fragmentation). The warm-up (300 cells, 2 command runs and 2 faults) starts the
long-lived threads and fills the bounded records first.
"""

from __future__ import annotations

import argparse
import ctypes
import ctypes.util
import gc
import io
import json
import os
import random
import re
import subprocess
import sys
import tempfile
import threading
import time
import tracemalloc
from array import array
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import psutil

SPEC = """\
name: soak
type: DistributedComponent
outputs:
  out: {type: path}
code: CODE
launcher:
  type: mpi
  additional_arguments: python leave.py {outputs.out}
"""
LEAVE = """\
import os, subprocess, sys
rank = os.environ["OMPI_COMM_WORLD_RANK"]
child = subprocess.Popen(["sleep", "313"])
with open(os.path.join(sys.argv[1], f"child{rank}-{child.pid}"), "w"):
    pass
print("ran", rank)
"""
KILL = """\
%%distcomp run soak
import os, signal, time
from mpi4py import MPI
deadline = time.time() + {delay}
while True:
    MPI.COMM_WORLD.allreduce(1)
    if mpi_rank == {victim} and time.time() > deadline:
        os.kill(os.getpid(), signal.SIGKILL)
"""


#: held while the soak scans /proc for the processes the kernel started
SCANNING = threading.Lock()
LEFT_AFTER = 5.0  # seconds after `%distcomp stop` a process still running counts as left
#: what "flat" allows the kernel to grow beyond IPython's own records: the Python objects of
#: the bounded records (message signatures, ids) as they cycle, and the allocator's noise
MEMORY_SLACK_MIB = {"rss_mib": 5.0, "heap_mib": 0.5}
#: a plain IPython cell that writes what a soak cell wrote, chunk by chunk
PEER = """\
import sys as _sys
def _soak_peer(writes):
    for stream, size in writes:
        getattr(_sys, stream).write("." * size)
"""


def culprits(text: str) -> list[int]:
    """The ranks a death report's headline blames ("rank 2 killed by signal 9 (Killed)
    while running the cell on 'soak'")."""
    match = re.search(
        r"((?:rank \d+ [^;\n]*?)(?:; rank \d+ [^;\n]*?)*) while running the cell", text
    )
    return [int(rank) for rank in re.findall(r"rank (\d+) ", match.group(1))] if match else []


def _trim() -> None:
    """Hand the C allocator's free pages back to the system (glibc; elsewhere nothing)."""
    name = ctypes.util.find_library("c")
    trim = getattr(ctypes.CDLL(name), "malloc_trim", None) if name else None
    if trim is not None:
        trim(0)


def figures() -> dict[str, float]:
    """The kernel's threads, descriptors, resident memory and (with ``--objects``) its
    Python objects' memory, traced by tracemalloc; both in MiB."""
    me = psutil.Process()
    gc.collect()
    _trim()
    with SCANNING:  # not the files the soak's own scan of /proc holds open
        fds = me.num_fds()
    return {
        "threads": me.num_threads(),
        "fds": fds,
        # what tracemalloc keeps for its traces is the soak's, not the kernel's
        "rss_mib": (me.memory_info().rss - tracemalloc.get_tracemalloc_memory()) / 2**20,
        "heap_mib": tracemalloc.get_traced_memory()[0] / 2**20,
    }


class Writes(io.StringIO):
    """A cell's captured output that also notes the size of each write, for the peer."""

    def __init__(self, name: str, sizes: array | None):
        super().__init__()
        self.name, self.sizes = name, sizes

    def write(self, text: str) -> int:
        if self.sizes is not None and text:
            self.sizes.extend((self.name == "stderr", len(text)))
        return super().write(text)


class Soak:
    def __init__(self, ranks: int, folder: Path):
        from IPython.testing.globalipapp import get_ipython

        self.ip = get_ipython()
        self.ip.run_line_magic("load_ext", "jupyter_distcomp")
        self.folder = folder
        self.seen: dict[int, float] = {}  # pid -> create time of every process we saw start
        self.ranks = ranks
        #: while recording: (stderr?, size) of every write; a cell's end: (2, its source's size)
        self.writes: array | None = None
        self.failures: list[str] = []  # what failed cells and command runs printed
        self._watching = True
        self._watcher = threading.Thread(target=self._watch, daemon=True)

    def _watch(self) -> None:
        while self._watching:
            with SCANNING:
                for proc in psutil.Process().children(recursive=True):
                    try:
                        self.seen.setdefault(proc.pid, proc.create_time())
                    except psutil.Error:
                        pass
            time.sleep(0.2)

    def cell(self, source: str) -> tuple[bool, str]:
        out, err = Writes("stdout", self.writes), Writes("stderr", self.writes)
        with redirect_stdout(out), redirect_stderr(err):
            result = self.ip.run_cell(source)
        if self.writes is not None:
            self.writes.extend((2, len(source)))
        error = result.error_in_exec or result.error_before_exec
        return result.success, f"{out.getvalue()}{err.getvalue()}{error or ''}"

    def peer(self, writes: array) -> None:
        """Plain IPython cells writing what the recorded cells wrote, write by write, each
        as long as the recorded cell and different from the others (IPython keeps each
        distinct cell's source)."""
        self.cell(PEER)
        cell: list[tuple[str, int]] = []
        for i in range(0, len(writes), 2):
            kind, size = writes[i], writes[i + 1]
            if kind == 2:
                self.ip.user_ns["_soak_writes"] = cell
                call = "_soak_peer(_soak_writes)\n#"
                self.cell(call + str(i).rjust(size - len(call), "."))
                cell = []
            else:
                cell.append(("stderr" if kind else "stdout", size))

    def define(self) -> None:
        code = self.folder / "code"
        code.mkdir(exist_ok=True)
        (code / "leave.py").write_text(LEAVE)
        ok, text = self.cell(f"%%distcomp soak\n{SPEC.replace('CODE', str(code))}")
        assert ok, text
        self.ip.user_ns["soak"].runsettings.resource_layout.configure(1, self.ranks)
        self._watcher.start()

    def failed(self, ok: bool, text: str) -> int:
        """1 for a failed cell, whose output is kept to be printed with the summary."""
        if not ok:
            self.failures.append(" ".join(text.split())[:400])
        return not ok

    def run_cells(self, count: int) -> int:
        failed = 0
        for i in range(count):
            failed += self.failed(
                *self.cell(f"%%distcomp run soak\nvalue = mpi_rank + {i}\nprint(value)")
            )
        return failed

    def run_commands(self, count: int) -> tuple[int, list[int]]:
        failed, children = 0, []
        for i in range(count):
            out = self.folder / f"out{i}"
            failed += self.failed(*self.cell(f"%distcomp command soak --output out={out}"))
            children += [int(p.name.split("-")[1]) for p in out.glob("child*")]
        return failed, children

    def kill_ranks(self, count: int) -> tuple[int, int, list[str]]:
        """(faults survived, faults whose report blamed the killed rank alone, notes on the rest).

        Survived: the cell failed with a RankError (the kernel lives on), ``%distcomp
        restart`` brought the world back and the next cell ran on every rank.
        """
        survived, named, notes = 0, 0, []
        for _ in range(count):
            victim = random.randrange(self.ranks)
            ok, text = self.cell(KILL.format(victim=victim, delay=random.uniform(0.05, 1.0)))
            failed = not ok and "RankError" in text
            restarted, _ = self.cell("%distcomp restart soak")
            after, back = self.cell("%%distcomp run soak\nprint('back', mpi_rank)")
            if failed and restarted and after and back.count("back") == self.ranks:
                survived += 1
            if culprits(text) == [victim]:
                named += 1
            else:
                said = " ".join(text.split())[:300]
                notes.append(f"victim {victim}: restart={restarted} after={after}: {said}")
        return survived, named, notes

    def stop(self) -> None:
        self.cell("%distcomp stop")
        self._watching = False
        self._watcher.join()

    def left(self, extra: list[int]) -> list[str]:
        """Processes the soak started that still run (a reused pid does not count)."""
        running = []
        for pid, created in [*self.seen.items(), *((p, None) for p in extra)]:
            try:
                proc = psutil.Process(pid)
                if proc.status() == psutil.STATUS_ZOMBIE:
                    continue
                if created is None and proc.name() != "sleep":
                    continue
                if created is not None and proc.create_time() != created:
                    continue
                running.append(f"{pid} {' '.join(proc.cmdline()[:3])}")
            except psutil.Error:
                pass
        return running


def progress(when: str, now: dict[str, float], tic: float) -> None:
    """The kernel's figures at a phase's end, on stderr (the summary is on stdout)."""
    said = ", ".join(f"{key} {value:.0f}" for key, value in now.items())
    print(f"  {when} ({time.monotonic() - tic:.0f} s): {said}", file=sys.stderr, flush=True)


def warm_up(soak: Soak) -> None:
    """The first world, command runs and faults start the kernel's long-lived threads; the
    cells after the last restart fill its client's bounded records."""
    soak.define()
    soak.run_cells(50)
    soak.run_commands(2)
    soak.kill_ranks(2)
    soak.run_cells(250)


def run_peer(args: argparse.Namespace, writes: array, path: Path) -> dict[str, float]:
    """The peer's growth, from a kernel of its own: the same warm-up (the same seed), then
    plain cells writing ``writes``. Its own kernel, so that its heap is the one the soak's
    kernel had before the phases, not one with the holes they left."""
    path.write_bytes(writes.tobytes())
    argv = [sys.executable, __file__, "--peer-of", str(path), "--seed", str(args.seed)]
    argv += ["--ranks", str(args.ranks)] + (["--objects"] if args.objects else [])
    said = subprocess.run(argv, capture_output=True, text=True, check=True).stdout
    return json.loads(said.splitlines()[-1])


def peer_process(args: argparse.Namespace) -> int:
    with tempfile.TemporaryDirectory(prefix="distcomp-soak-") as tmp:
        soak = Soak(args.ranks, Path(tmp))
        warm_up(soak)
        before = figures()
        soak.peer(array("q", args.peer_of.read_bytes()))
        after = figures()
        soak.stop()
    print(json.dumps({key: after[key] - before[key] for key in after}))
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cells", type=int, default=1000)
    parser.add_argument("--commands", type=int, default=100)
    parser.add_argument("--kills", type=int, default=50)
    parser.add_argument("--ranks", type=int, default=4)
    parser.add_argument("--seed", type=int, default=12)
    parser.add_argument(
        "--objects",
        action="store_true",
        help="also trace the Python objects' memory (tracemalloc; its own upkeep inflates "
        "the resident figure, so that target is not checked)",
    )
    parser.add_argument("--peer-of", type=Path, help=argparse.SUPPRESS)  # the peer's process
    args = parser.parse_args()
    random.seed(args.seed)
    if args.objects:
        # traced from the start: bounded records that replace entries as they go (message
        # signatures, ids) then count the same before and after
        tracemalloc.start()
    if args.peer_of:
        return peer_process(args)
    with tempfile.TemporaryDirectory(prefix="distcomp-soak-") as tmp:
        soak = Soak(args.ranks, Path(tmp))
        tic = time.monotonic()
        warm_up(soak)
        soak.writes = array("q")
        before = figures()
        progress("after the warm-up", before, tic)
        failed_cells = soak.run_cells(args.cells)
        progress(f"after {args.cells} cells", figures(), tic)
        failed_commands, children = soak.run_commands(args.commands)
        progress(f"after {args.commands} command runs", figures(), tic)
        survived, named, notes = soak.kill_ranks(args.kills)
        soak.run_cells(50)
        after = figures()
        progress(f"after {args.kills} rank kills", after, tic)
        soak.stop()
        stopped = time.monotonic()
        left = soak.left(children)
        while left and time.monotonic() - stopped < LEFT_AFTER:
            time.sleep(0.1)
            left = soak.left(children)
        lingered = time.monotonic() - stopped
        assert soak.writes is not None
        records = run_peer(args, soak.writes, Path(tmp) / "writes")
        progress("the peer's growth (plain cells, in a kernel of its own)", records, tic)
        seconds = time.monotonic() - tic
    print(f"soak: {args.cells} cells, {args.commands} command runs, {args.kills} rank kills "
          f"on {args.ranks} ranks in {seconds:.0f} s")  # fmt: skip
    print(f"cells failed: {failed_cells}; command runs failed: {failed_commands}")
    for failure in soak.failures:
        print(f"  failed: {failure}")
    print(f"faults injected: {args.kills}; survived: {survived}; killed rank named: {named}")
    for note in notes:
        print(f"  not named: {note}")
    print(f"processes left: {len(left)}, {LEFT_AFTER:.0f} s after the stop" if left else
          f"processes left: 0 (the last ended {lingered:.1f} s after the stop)")  # fmt: skip
    for line in left:
        print(f"  {line}")
    for key in ("threads", "fds"):
        print(f"growth of the kernel's {key}: {before[key]:.0f} -> {after[key]:.0f} "
              f"({after[key] - before[key]:+.0f})")  # fmt: skip
    beyond = {}
    measured = [("heap_mib", "Python objects")] if args.objects else [("rss_mib", "memory")]
    for key, what in measured:
        grown = after[key] - before[key]
        beyond[key] = grown - records[key]
        print(f"growth of the kernel's {what}: {before[key]:.1f} -> {after[key]:.1f} MiB "
              f"({grown:+.2f}); IPython's records (the peer's plain cells): "
              f"{records[key]:+.2f} MiB; "
              f"beyond them: {beyond[key]:+.2f} MiB (at most {MEMORY_SLACK_MIB[key]})")  # fmt: skip
    clean = not failed_cells and not failed_commands and survived == args.kills and not left
    flat = (
        after["threads"] <= before["threads"]
        and after["fds"] <= before["fds"]
        and all(beyond[key] <= MEMORY_SLACK_MIB[key] for key in beyond)
    )
    return 0 if clean and flat else 1


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
