"""Nothing a run starts outlives it or its kernel: a rank's children, daemons that ``setsid``,
the threads of a run, scratch folders of a killed kernel; and what a killed mpiexec left
behind does not stop the next one.

Each rank here starts a child (``sleep 311``) and a daemon that detaches (fork, ``setsid``,
fork again, ``sleep 312``) and writes their pids to a file; the test then checks those exact
pids, so it sees a leaked process even after it was reparented to PID 1.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest

from jupyter_distcomp.core.spec_parsing import load_component
from jupyter_distcomp.local.command import run_command
from jupyter_distcomp.machine import scratch

SPAWN = r"""
import json, os, subprocess, sys, time
out, mode = sys.argv[1], sys.argv[2]
rank = os.environ.get("RANK") or os.environ.get("OMPI_COMM_WORLD_RANK")
child = subprocess.Popen(["sleep", "311"])
read, write = os.pipe()
if os.fork() == 0:
    os.setsid()
    pid = os.fork()
    if pid:
        os.write(write, str(pid).encode())
        os._exit(0)
    os.execvp("sleep", ["sleep", "312"])
os.wait()
daemon = int(os.read(read, 64))
with open(os.path.join(out, f"pids{rank}.json"), "w") as handle:
    json.dump([child.pid, daemon], handle)
print("spawned", flush=True)
if mode == "hang":
    time.sleep(120)
"""

SPEC = """
name: spawner
type: DistributedComponent
inputs:
  mode: {type: Enum, enum: [hang, leave], default: leave}
outputs:
  out: {type: path}
code: CODE
launcher:
  type: LAUNCHER
  additional_arguments: python spawn.py {outputs.out} {inputs.mode}
"""

KERNEL = """
import sys
from jupyter_distcomp.local.command import run_command
from jupyter_distcomp.core.spec_parsing import load_component
component = load_component(sys.argv[1], base_dir=sys.argv[2])
component.runsettings.resource_layout.configure(1, 2)
run_command(component, inputs={"mode": "hang"}, outputs={"out": sys.argv[3]}, cwd=sys.argv[2])
"""


def spawner(tmp_path: Path, launcher: str) -> str:
    code = tmp_path / "code"
    code.mkdir(exist_ok=True)
    (code / "spawn.py").write_text(SPAWN)
    return SPEC.replace("CODE", str(code)).replace("LAUNCHER", launcher)


def spawned_pids(out: Path, ranks: int) -> list[int]:
    pids: list[int] = []
    for rank in range(ranks):
        pids += json.loads((out / f"pids{rank}.json").read_text())
    return pids


def alive(pids: list[int]) -> list[int]:
    """The pids still running a ``sleep`` we started (not zombies, not a reused pid)."""
    running = []
    for pid in pids:
        try:
            proc = psutil.Process(pid)
            if proc.status() != psutil.STATUS_ZOMBIE and proc.name() == "sleep":
                running.append(pid)
        except psutil.Error:
            pass
    return running


def wait_running(pids: list[int], seconds: float = 30) -> list[int]:
    """The pids running ``sleep`` once all do (a forked child may not have exec'd yet)."""
    deadline = time.monotonic() + seconds
    while len(alive(pids)) < len(pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    return alive(pids)


def wait_gone(pids: list[int], seconds: float = 20) -> list[int]:
    deadline = time.monotonic() + seconds
    while alive(pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    return alive(pids)


def kill_all(pids: list[int]) -> None:
    for pid in alive(pids):
        os.kill(pid, signal.SIGKILL)


@pytest.mark.slow
@pytest.mark.parametrize("launcher", ["torch.distributed", "mpi"])
def test_what_ranks_start_ends_with_the_run(tmp_path, launcher):
    component = load_component(spawner(tmp_path, launcher), base_dir=tmp_path)
    component.runsettings.resource_layout.configure(1, 2)
    out = tmp_path / "out"
    result = run_command(component, outputs={"out": str(out)}, cwd=tmp_path, stream=None)
    assert result.ok
    pids = spawned_pids(out, 2)
    try:
        assert len(pids) == 4
        assert wait_gone(pids) == []
    finally:
        kill_all(pids)


@pytest.mark.slow
@pytest.mark.parametrize("launcher", ["torch.distributed", "mpi"])
def test_what_ranks_start_ends_with_a_killed_kernel(tmp_path, launcher):
    out = tmp_path / "out"
    temp = tmp_path / "temp"  # the kernel's temp dir: what it leaves there is seen
    temp.mkdir()
    kernel = subprocess.Popen(
        [sys.executable, "-c", KERNEL, spawner(tmp_path, launcher), str(tmp_path), str(out)],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "TMPDIR": str(temp)},
    )
    pids: list[int] = []
    try:
        assert kernel.stdout is not None
        assert "spawned" in kernel.stdout.readline()
        assert "spawned" in kernel.stdout.readline()
        pids = spawned_pids(out, 2)
        assert len(wait_running(pids)) == 4, "the children run while the kernel does"
    finally:
        kernel.kill()
        kernel.wait()
    try:
        assert wait_gone(pids) == []
    finally:
        kill_all(pids)
    # the run's scratch folders (its stack files among them) outlive the killed kernel
    # until the next kernel sweeps them
    left = sorted(str(folder) for folder in temp.glob("distcomp-*"))
    assert left, "the run made no scratch folder in its temp dir"
    assert sorted(scratch.sweep(str(temp))) == left


def command_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "distcomp-command"]


@pytest.mark.slow
def test_mpi_runs_leave_no_thread_behind(tmp_path):
    code = tmp_path / "code"
    code.mkdir()
    (code / "hello.py").write_text("print('hello')\n")
    spec = spawner(tmp_path, "mpi").replace(
        "python spawn.py {outputs.out} {inputs.mode}", "python hello.py"
    )
    component = load_component(spec.replace(str(tmp_path / "code"), str(code)), base_dir=tmp_path)
    component.runsettings.resource_layout.configure(1, 2)
    before = len(command_threads())
    for _ in range(5):
        assert run_command(component, cwd=tmp_path, stream=None).ok
    assert len(command_threads()) == before


def test_scratch_folders_of_a_dead_owner_are_swept(tmp_path):
    make = (
        "import sys; from jupyter_distcomp.machine import scratch; "
        "print(scratch.make_folder('distcomp-test-'), flush=True); "
        "sys.stdin.read()"
    )
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    dead = subprocess.Popen(
        [sys.executable, "-c", make],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    live = subprocess.Popen(
        [sys.executable, "-c", make],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert dead.stdout is not None and live.stdout is not None
        dead_folder, live_folder = dead.stdout.readline().strip(), live.stdout.readline().strip()
        dead.kill()
        dead.wait()
        foreign = tmp_path / "distcomp-not-ours"
        foreign.mkdir()
        removed = scratch.sweep(str(tmp_path))
        assert removed == [dead_folder]
        assert Path(live_folder).is_dir() and foreign.is_dir()
    finally:
        live.kill()
        live.wait()


ENGINE_SPAWN = """\
%%distcomp run keeper
import os, subprocess
child = subprocess.Popen(["sleep", "311"])
read, write = os.pipe()
first = os.fork()
if first == 0:
    os.setsid()
    pid = os.fork()
    if pid:
        os.write(write, str(pid).encode())
        os._exit(0)
    os.execvp("sleep", ["sleep", "312"])
os.waitpid(first, 0)
print("PIDS", child.pid, int(os.read(read, 64)))
"""


def open_mpi_files() -> set[Path]:
    """Open MPI's session folders in the temp dir and its shared-memory segments."""
    temp = Path(os.environ.get("TMPDIR") or "/tmp")
    return {*temp.glob("ompi.*"), *Path(scratch.SHARED_MEMORY).glob("sm_segment.*")}


def scratch_folders() -> list[Path]:
    temp = Path(os.environ.get("TMPDIR") or "/tmp")
    return [*temp.glob("distcomp-*"), *Path(scratch.SHARED_MEMORY).glob("distcomp-*")]


def printed_pids(text: str) -> list[int]:
    return [int(word) for line in text.splitlines() if "PIDS" in line for word in line.split()[-2:]]


@pytest.mark.slow
def test_what_engines_start_ends_with_stop_and_with_a_killed_kernel():
    from .ranks_support import MPI_SPEC
    from .ranks_support import wait_gone as processes_gone
    from .test_ranks_kernel import Kernel

    kernel = Kernel()
    pids: list[int] = []
    files_before = open_mpi_files()
    try:
        kernel.run(
            "%load_ext jupyter_distcomp\n%config DistComp.default_process_count_per_node = 2"
        )
        kernel.run(f"%%distcomp keeper\n{MPI_SPEC}")
        reply, text, _ = kernel.run(ENGINE_SPAWN)
        assert reply["status"] == "ok", text
        stopped = printed_pids(text)
        pids += stopped
        assert len(wait_running(stopped)) == 4, text
        reply, text, _ = kernel.run("%distcomp stop keeper")
        assert reply["status"] == "ok", text
        assert wait_gone(stopped) == []

        reply, text, _ = kernel.run(ENGINE_SPAWN)
        assert reply["status"] == "ok", text
        orphaned = printed_pids(text)
        pids += orphaned
        assert len(wait_running(orphaned)) == 4, text
        started = kernel.processes()  # the guards, the controller and its schedulers, mpiexec
        commands = [" ".join(proc.cmdline()) for proc in started]
        assert any("ipyparallel.controller" in command for command in commands), commands
        psutil.Process(kernel.km.provisioner.process.pid).kill()
        assert wait_gone(orphaned, 30) == []
        assert processes_gone(started, 30) == [], "left running after the kernel was killed"
        # mpiexec's session folder and the ranks' shared-memory segments are in the kernel's
        # scratch folders, which the next kernel sweeps
        assert open_mpi_files() - files_before == set()
        left = [str(folder) for folder in scratch_folders() if "distcomp-keeper-" in folder.name]
        assert left and set(left) <= set(scratch.sweep())
    finally:
        kernel.close()
        kill_all(pids)


@pytest.mark.slow
def test_stop_from_another_thread_says_the_ranks_were_stopped(ip, tmp_path):
    from .ranks_support import MPI_SPEC, define, run_cell

    define(ip, "stoppee", MPI_SPEC, nodes=1, per_node=2)
    flags = [tmp_path / f"busy-{rank}" for rank in range(2)]

    def stop_once_busy() -> None:  # once every rank has printed all and sleeps
        deadline = time.monotonic() + 120
        while not all(f.exists() for f in flags) and time.monotonic() < deadline:
            time.sleep(0.001)
        ip.run_line_magic("distcomp", "stop stoppee")

    stopper = threading.Thread(target=stop_once_busy)
    stopper.start()
    try:
        cell = run_cell(
            ip,
            "%%distcomp run stoppee\nimport os, pathlib, sys, time\n"
            "for i in range(20000):\n    print('working', i)\n"
            "sys.stdout.flush()\n"
            f"pathlib.Path({str(tmp_path)!r}, 'busy-' + os.environ['OMPI_COMM_WORLD_RANK']).touch()\n"
            "time.sleep(120)",
        )
    finally:
        stopper.join()
    assert not cell.ok
    message = str(cell.error)
    assert "were stopped while the cell ran" in message, message
    assert "died" not in message and "the process is gone" not in message
    # what the ranks printed before the stop is all shown
    for rank in range(2):
        shown = [line for line in cell.stdout.splitlines() if line.startswith(f"[rank {rank}]")]
        assert len(shown) == 20000 and shown[-1] == f"[rank {rank}] working 19999", shown[-3:]


STALE_PIDS = 300  # more than the processes a run starts before mpiexec


def plant_stale_sessions(root: Path) -> tuple[int, list[Path]]:
    """What a killed mpiexec leaves in the temp dir, planted for each of the next
    :data:`STALE_PIDS` pids: its session folder, named after its pid, with the rendezvous
    file that Open MPI's PMIx server creates exclusively. Returns the last pid used before
    and the folders planted."""
    last = int(Path("/proc/sys/kernel/ns_last_pid").read_text())
    pid_max = int(Path("/proc/sys/kernel/pid_max").read_text())
    planted = []
    for pid in range(last + 1, last + 1 + STALE_PIDS):
        pid = pid if pid < pid_max else pid - pid_max + 300  # Linux wraps above its first 300
        folder = root / f"ompi.{pid}"
        if folder.exists():
            continue
        folder.mkdir()
        (folder / f"pmix.{socket.gethostname()}.tool").write_text("stale\n")
        planted.append(folder)
    return last, planted


def pids_used_since(last: int) -> int:
    now = int(Path("/proc/sys/kernel/ns_last_pid").read_text())
    pid_max = int(Path("/proc/sys/kernel/pid_max").read_text())
    return now - last if now >= last else now + pid_max - 300 - last


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/sys/kernel/ns_last_pid").exists(), reason="Linux pids")
@pytest.mark.parametrize("how", ["command", "run"])
def test_mpiexec_starts_beside_what_a_killed_mpiexec_left(tmp_path, ip, how):
    """Open MPI names mpiexec's session folder after its pid, and pids are reused: a folder a
    killed mpiexec left behind made a later mpiexec with that pid fail ("The PMIx server's
    listener thread failed to start"). Every pid the run can get has such a folder here."""
    from .ranks_support import MPI_SPEC, define, run_cell

    temp = Path(os.environ.get("TMPDIR") or "/tmp")
    if how == "command":
        code = tmp_path / "code"
        code.mkdir()
        (code / "hello.py").write_text("print('hello')\n")
        spec = spawner(tmp_path, "mpi").replace(
            "python spawn.py {outputs.out} {inputs.mode}", "python hello.py"
        )
        component = load_component(spec, base_dir=tmp_path)
        component.runsettings.resource_layout.configure(1, 2)
    else:
        define(ip, "beside", MPI_SPEC, nodes=1, per_node=2)
    last, planted = plant_stale_sessions(temp)
    try:
        if how == "command":
            result = run_command(component, cwd=tmp_path, stream=None)
            assert result.ok, [outcome.status for outcome in result.ranks]
        else:
            cell = run_cell(ip, "%%distcomp run beside\nprint('up', mpi_rank)")
            assert cell.ok, cell.error
            assert sorted(cell.stdout.split()).count("up") == 2, cell.stdout
            shared = Path(scratch.SHARED_MEMORY)
            assert list(shared.glob("distcomp-beside-*/sm_segment.*")), "segments elsewhere"
            run_cell(ip, "%distcomp stop beside")
            assert not list(shared.glob("distcomp-beside-*")), "left after the stop"
        used = pids_used_since(last)
        assert used < STALE_PIDS, (
            f"{used} processes started: mpiexec may have missed the stale pids"
        )
    finally:
        for folder in planted:
            shutil.rmtree(folder, ignore_errors=True)
