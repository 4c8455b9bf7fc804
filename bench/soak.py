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
end. Targets: every fault survived, 0 processes left, threads and descriptors flat, memory
within MEMORY_SLACK_MIB (the warm-up runs 100 cells, 2 command runs and 2 faults first).
"""

from __future__ import annotations

import argparse
import io
import os
import random
import re
import sys
import tempfile
import threading
import time
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


MEMORY_SLACK_MIB = 5  # the allocator's noise: what "flat" allows the kernel's memory to grow


def culprits(text: str) -> list[int]:
    """The ranks a death report's headline blames ("rank 2 killed by signal 9 (Killed)
    while running the cell on 'soak'")."""
    match = re.search(
        r"((?:rank \d+ [^;\n]*?)(?:; rank \d+ [^;\n]*?)*) while running the cell", text
    )
    return [int(rank) for rank in re.findall(r"rank (\d+) ", match.group(1))] if match else []


def figures() -> dict[str, float]:
    me = psutil.Process()
    return {
        "threads": me.num_threads(),
        "fds": me.num_fds(),
        "rss_mib": me.memory_info().rss / 2**20,
    }


class Soak:
    def __init__(self, ranks: int, folder: Path):
        from IPython.testing.globalipapp import get_ipython

        self.ip = get_ipython()
        self.ip.run_line_magic("load_ext", "jupyter_distcomp")
        self.folder = folder
        self.seen: dict[int, float] = {}  # pid -> create time of every process we saw start
        self.ranks = ranks
        self._watching = True
        self._watcher = threading.Thread(target=self._watch, daemon=True)

    def _watch(self) -> None:
        while self._watching:
            for proc in psutil.Process().children(recursive=True):
                try:
                    self.seen.setdefault(proc.pid, proc.create_time())
                except psutil.Error:
                    pass
            time.sleep(0.2)

    def cell(self, source: str) -> tuple[bool, str]:
        out = io.StringIO()
        with redirect_stdout(out), redirect_stderr(out):
            result = self.ip.run_cell(source)
        error = result.error_in_exec or result.error_before_exec
        return result.success, f"{out.getvalue()}{error or ''}"

    def define(self) -> None:
        code = self.folder / "code"
        code.mkdir(exist_ok=True)
        (code / "leave.py").write_text(LEAVE)
        ok, text = self.cell(f"%%distcomp soak\n{SPEC.replace('CODE', str(code))}")
        assert ok, text
        self.ip.user_ns["soak"].runsettings.resource_layout.configure(1, self.ranks)
        self._watcher.start()

    def run_cells(self, count: int) -> int:
        failed = 0
        for i in range(count):
            ok, _ = self.cell(f"%%distcomp run soak\nvalue = mpi_rank + {i}\nprint(value)")
            failed += not ok
        return failed

    def run_commands(self, count: int) -> tuple[int, list[int]]:
        failed, children = 0, []
        for i in range(count):
            out = self.folder / f"out{i}"
            ok, _ = self.cell(f"%distcomp command soak --output out={out}")
            failed += not ok
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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cells", type=int, default=1000)
    parser.add_argument("--commands", type=int, default=100)
    parser.add_argument("--kills", type=int, default=50)
    parser.add_argument("--ranks", type=int, default=4)
    parser.add_argument("--seed", type=int, default=12)
    args = parser.parse_args()
    random.seed(args.seed)
    with tempfile.TemporaryDirectory(prefix="distcomp-soak-") as tmp:
        soak = Soak(args.ranks, Path(tmp))
        soak.define()
        tic = time.monotonic()
        # warm-up: the first world, command runs and faults start the kernel's long-lived
        # threads; the first cells fill the heap's arenas and ipyparallel's bounded records
        soak.run_cells(50)
        soak.run_commands(2)
        soak.kill_ranks(2)
        soak.run_cells(50)
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
        time.sleep(1)  # let the last processes end before they are counted
        left = soak.left(children)
        seconds = time.monotonic() - tic
    print(f"soak: {args.cells} cells, {args.commands} command runs, {args.kills} rank kills "
          f"on {args.ranks} ranks in {seconds:.0f} s")  # fmt: skip
    print(f"cells failed: {failed_cells}; command runs failed: {failed_commands}")
    print(f"faults injected: {args.kills}; survived: {survived}; killed rank named: {named}")
    for note in notes:
        print(f"  not named: {note}")
    print(f"processes left: {len(left)}")
    for line in left:
        print(f"  {line}")
    for key in before:
        print(f"growth of the kernel's {key}: {before[key]:.0f} -> {after[key]:.0f} "
              f"({after[key] - before[key]:+.0f})")  # fmt: skip
    clean = not failed_cells and not failed_commands and survived == args.kills and not left
    flat = (
        after["threads"] <= before["threads"]
        and after["fds"] <= before["fds"]
        and after["rss_mib"] - before["rss_mib"] <= MEMORY_SLACK_MIB
    )
    return 0 if clean and flat else 1


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
