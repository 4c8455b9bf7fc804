"""Nothing a kernel starts for its ranks outlives it, also when a world is replaced while it
is still starting: the controller, its schedulers, mpiexec, the ranks, the guards.

A tracker polls the kernel's process tree from the definition on and keeps every process it
ever saw there, so a process that was orphaned (reparented to PID 1) still counts. A
controller that does not end on SIGTERM at once (as under load: the stop signal finds it busy)
is made with SIGSTOP: then only the guard's own deadline ends it.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time

import psutil
import pytest

from .ranks_support import MPI_SPEC, TORCH_SPEC, alive, wait_gone
from .test_ranks_kernel import Kernel

pytestmark = pytest.mark.slow


class Tracker:
    """Every process seen below ``pid`` while it runs."""

    def __init__(self, pid: int):
        self.pid = pid
        self.seen: dict[int, psutil.Process] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)
        self._thread.start()

    def _poll(self) -> None:
        while not self._stop.is_set():
            try:
                for proc in psutil.Process(self.pid).children(recursive=True):
                    self.seen.setdefault(proc.pid, proc)
            except psutil.Error:
                pass
            time.sleep(0.01)

    def close(self) -> list[psutil.Process]:
        self._stop.set()
        self._thread.join()
        return list(self.seen.values())

    def controllers(self) -> list[psutil.Process]:
        """The controllers (the guard's child) seen so far."""
        found = []
        for proc in list(self.seen.values()):
            try:
                parent = proc.parent()
                command = " ".join(proc.cmdline())
                guarded = parent is not None and "rank_side.guard" in " ".join(parent.cmdline())
                if "ipyparallel.controller" in command and guarded:
                    found.append(proc)
            except psutil.Error:
                pass
        return found


def describe(procs: list[psutil.Process]) -> str:
    lines = []
    for proc in procs:
        try:
            lines.append(f"{proc.pid} (parent {proc.ppid()}): {' '.join(proc.cmdline())[:100]}")
        except psutil.Error:
            pass
    return "\n".join(lines)


def started_controller(tracker: Tracker, seconds: float = 60) -> psutil.Process:
    """The first controller once it has started its schedulers (its own children)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        for controller in tracker.controllers():
            try:
                if len(controller.children()) >= 2:
                    return controller
            except psutil.Error:
                pass
        time.sleep(0.02)
    raise AssertionError(f"no controller started within {seconds} s")


def end_kernel(kernel: Kernel, how: str) -> None:
    kernel.kc.stop_channels()
    if how == "kill":
        kernel.km.provisioner.process.kill()
    else:
        kernel.km.shutdown_wait_time = 60  # the kernel's own clean-up is what is tested
        kernel.km.shutdown_kernel(now=False)


CHANGES = {
    "redefinition": f"%%distcomp leaky\n{TORCH_SPEC}",  # another launcher: another world
    "layout": "leaky.runsettings.resource_layout.configure(1, 3)",
    "stop": "%distcomp stop leaky",
    "nothing": "pass",
}


@pytest.mark.parametrize(
    "change, how, busy",
    [
        *[(change, how, True) for change in CHANGES for how in ("shutdown", "kill")],
        ("layout", "shutdown", False),
        ("redefinition", "kill", False),
    ],
)
def test_a_world_replaced_or_stopped_while_starting_leaves_nothing_behind(change, how, busy):
    """The world's controller has started (its schedulers run), its engines may not have
    registered yet; ``busy``: the controller does not answer SIGTERM in time."""
    kernel = Kernel()
    tracker = Tracker(kernel.km.provisioner.process.pid)
    procs: list[psutil.Process] = []
    try:
        kernel.run(
            "%load_ext jupyter_distcomp\n%config DistComp.default_process_count_per_node = 2\n"
            '%config DistComp.prestart = "always"'  # the definition starts the world
        )
        reply, text, _ = kernel.run(f"%%distcomp leaky\n{MPI_SPEC}")
        assert reply["status"] == "ok", text
        controller = started_controller(tracker)
        if busy:
            controller.suspend()
        reply, text, _ = kernel.run(CHANGES[change])
        assert reply["status"] == "ok", text
        end_kernel(kernel, how)
        procs = tracker.close()
        assert len(procs) >= 4, describe(procs)  # a guard, a controller, its schedulers
        left = wait_gone(procs, 40)
        assert left == [], f"left running after the kernel ended:\n{describe(left)}"
    finally:
        procs = procs or tracker.close()
        for proc in alive(procs):
            proc.kill()
        kernel.close()


ORPHAN = """
import os, signal, subprocess, sys
from jupyter_distcomp.local.ranks import ipp
guard = ipp.cluster_config(1).MPILauncher.mpi_cmd[:-1]  # the guard, as mpiexec's
proc = subprocess.Popen(
    [*guard, "sleep", "31337"], start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
)
os.kill(proc.pid, signal.SIGSTOP)  # the guard has not asked to die with us yet
print(proc.pid, flush=True)
os._exit(0)  # the kernel dies while its guard starts
"""


def test_a_guard_whose_kernel_died_while_it_started_does_not_run_its_command():
    kernel = subprocess.run(
        [sys.executable, "-c", ORPHAN], capture_output=True, text=True, timeout=120
    )
    assert kernel.returncode == 0, kernel.stderr
    guard = psutil.Process(int(kernel.stdout))
    try:
        guard.send_signal(signal.SIGCONT)
        assert wait_gone([guard], 30) == [], "the guard runs on without its kernel"
    finally:
        leftovers = [guard, *guard.children(recursive=True)] if guard.is_running() else []
        for proc in alive(leftovers):
            proc.kill()
    sleeps = [
        p for p in psutil.process_iter(["cmdline"]) if p.info["cmdline"] == ["sleep", "31337"]
    ]
    for proc in sleeps:
        proc.kill()
    assert sleeps == [], "the guard ran its command for a kernel that was gone"


@pytest.mark.parametrize(
    "end, code", [("exit 3", 3), ("kill -TERM $$", -15), ("kill -KILL $$", -9)]
)
def test_the_guard_ends_as_its_command_did_and_says_nothing_of_its_own(end, code):
    """mpiexec's guard writes into the file whose text the user sees when ranks fail."""
    guard = subprocess.run(
        [sys.executable, "-m", "jupyter_distcomp.rank_side.guard", "sh", "-c", end],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (guard.returncode, guard.stderr, guard.stdout) == (code, "", "")


STUBBORN = """
import os, signal, subprocess, sys, time
for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
    signal.signal(sig, signal.SIG_IGN)
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
print(child.pid, flush=True)
time.sleep(600)
"""


def test_a_burst_of_stop_signals_leaves_the_guard_in_charge_of_its_whole_tree():
    """Stop signals that come while the guard handles one (a stop, then the kernel's death)
    must not break it: the command that ignores them, and what it started, end at the
    guard's deadline, and nothing is orphaned."""
    from jupyter_distcomp.rank_side.guard import GRACE

    guard = subprocess.Popen(
        [sys.executable, "-m", "jupyter_distcomp.rank_side.guard", sys.executable, "-c", STUBBORN],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    grandchild = psutil.Process(int(guard.stdout.readline()))
    try:
        for _ in range(300):
            for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
                guard.send_signal(sig)
        time.sleep(1)
        assert guard.poll() is None, f"the guard broke: {guard.stderr.read()}"
        assert alive([grandchild])
        guard.wait(timeout=GRACE + 20)
        assert wait_gone([grandchild], 5) == [], "orphaned: it outlived its guard"
    finally:
        for proc in alive([grandchild]):
            proc.kill()
        guard.kill()


def test_a_stop_signal_inside_the_guards_handler_starts_one_deadline_and_raises_nothing(
    monkeypatch,
):
    """The second stop signal runs the handler again while the first is making its timer
    (a signal interrupts Python code anywhere): the guard must not break, or its command
    dies with it and orphans what it started."""
    import threading

    from jupyter_distcomp.rank_side import guard

    started: list[object] = []
    handler = guard._Forward(child=2**22 + 7)  # no such process: the kill finds none

    class Timer(threading.Timer):
        def __init__(self, *args, **kwargs):
            if not started:
                started.append("nested")
                handler(signal.SIGTERM, None)  # the signal that comes meanwhile
            super().__init__(*args, **kwargs)

        def start(self):
            started.append(self)

    monkeypatch.setattr(guard.threading, "Timer", Timer)
    handler(signal.SIGTERM, None)
    assert [s for s in started if s != "nested"] and len(started) == 2, started
