"""The rank side a submitted job carries (rank_side/job_watch.py), on real processes.

Each program runs as Azure ML runs a job's command: ``bash -c`` with the command's
diagnostics prefix, in the code snapshot submit builds (azureml/snapshot.py), with the
launcher's variables (PyTorch's from core/layout.py, one process a rank; Open MPI's from a
bare mpiexec). The lines are parsed back with json here; the job-log reader has its own
parser.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from jupyter_distcomp.core.layout import rank_environments
from jupyter_distcomp.machine.mpi import mpiexec_args, mpiexec_environment, mpiexec_path
from jupyter_distcomp.machine.network import free_ports

pytest.importorskip("torch")
pytest.importorskip("azure.ai.ml")
pytestmark = pytest.mark.slow

MARK = "[distcomp rank-state] "
COMMAND = "python {program}"

PASSING = """\
import multiprocessing, sys, threading, time
import torch
import torch.distributed as dist

def child():
    time.sleep(60)

def main():
    dist.init_process_group("gloo")
    t = torch.ones(3) * (dist.get_rank() + 1)
    dist.all_reduce(t)
    print("sum", t.tolist())
    print("on stderr", dist.get_rank(), file=sys.stderr)
    worker = threading.Thread(target=lambda: print("from a thread"))
    worker.start()
    worker.join()
    forked = multiprocessing.get_context("fork").Process(target=child)
    forked.start()
    forked.terminate()  # SIGTERM to a forked child: its own business
    forked.join()
    print("child ended", forked.exitcode)
    dist.barrier()
    dist.destroy_process_group()

main()
"""

SKIPS = """\
import time
import torch
import torch.distributed as dist

def step(t):
    dist.all_reduce(t)

dist.init_process_group("gloo")
t = torch.ones(4)
step(t)
if dist.get_rank() != 1:
    step(t)
time.sleep(120)
"""

DEADLOCK = """\
import numpy as np
from mpi4py import MPI

comm = MPI.COMM_WORLD
data = np.ones(4 * 1024 * 1024)  # 32 MiB: past Open MPI's eager limit, Send waits
comm.Send(data, dest=1 - comm.rank)
comm.Recv(data, source=1 - comm.rank)
"""

RAISES = """\
import threading

def load(path):
    raise FileNotFoundError(f"no such file: {path}")

def background():
    raise ValueError("bad shard 3")

thread = threading.Thread(target=background, name="loader")
thread.start()
thread.join()
load("/data/train.csv")
"""

TERMINATED = """\
import signal, sys
import torch
import torch.distributed as dist

def handler(signum, frame):
    print("saving a checkpoint", flush=True)
    sys.exit(3)

dist.init_process_group("gloo")
if dist.get_rank() == 1:
    signal.signal(signal.SIGTERM, handler)  # the user's own, in place of ours
print("ready", flush=True)
if dist.get_rank() == 0:  # the others never call it: rank 0 waits in C code
    dist.all_reduce(torch.ones(2))
while True:
    sum(range(1000))
"""

#: torch's record as the ledger's thread dumps it beside the ring on a GPU (torch_record.py;
#: the shape of test_collectives_units' dump): an NCCL all_reduce launched 5 s ago and still
#: running on the GPU, while the main thread waits elsewhere (here in a sleep)
NCCL_RECORD = """\
import json, sys, time

hooks = sys.modules["distcomp_ledger_hooks"]
entry = {
    "collective_seq_id": 7, "profiling_name": "nccl:all_reduce", "is_p2p": False,
    "process_group": ["0", "default_pg"], "input_sizes": [[1024]], "input_dtypes": ["Float"],
    "state": "started", "time_created_ns": time.time_ns() - 5 * 10**9,
    "time_discovered_completed_ns": None, "frames": [],
}
with open(hooks.STATE.path + ".torch", "w") as dump:
    json.dump({"entries": [entry], "pg_config": {"0": {"ranks": "[0, 1]"}}}, dump)
hooks.STATE.torch_record = True  # torch_record.py's thread: a dump worked
sys._distcomp_job_watch.start()  # as an import of torch.distributed starts it

def synchronize():
    time.sleep(60)

synchronize()
"""

PROGRAMS = {
    "passing.py": PASSING,
    "skips.py": SKIPS,
    "deadlock.py": DEADLOCK,
    "raises.py": RAISES,
    "terminated.py": TERMINATED,
    "nccl_record.py": NCCL_RECORD,
}


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    """The code snapshot a diagnosed submit uploads, as a job's node unpacks it."""
    from jupyter_distcomp.azureml.snapshot import diagnosed_snapshot

    code = tmp_path_factory.mktemp("code") / "src"
    code.mkdir()
    for name, text in PROGRAMS.items():
        (code / name).write_text(text)
    with diagnosed_snapshot(code) as folder:
        yield folder


class Rank:
    """One process of the job, its output read as it comes."""

    def __init__(self, argv: list[str], cwd: Path, env: dict[str, str]) -> None:
        self.proc = subprocess.Popen(
            argv,
            cwd=cwd,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
        self.out = bytearray()
        self.err = bytearray()
        self.readers = [
            threading.Thread(target=self._read, args=(pipe, buffer), daemon=True)
            for pipe, buffer in ((self.proc.stdout, self.out), (self.proc.stderr, self.err))
        ]
        for reader in self.readers:
            reader.start()

    @staticmethod
    def _read(pipe, buffer: bytearray) -> None:
        for chunk in iter(lambda: pipe.read1(65536), b""):
            buffer.extend(chunk)

    def wait(self, timeout: float = 120) -> int:
        code = self.proc.wait(timeout)
        for reader in self.readers:
            reader.join(10)
        return code

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.wait()

    def states(self) -> list[dict]:
        """Our lines in its stderr, parsed."""
        text = bytes(self.err).decode(errors="replace")
        return [json.loads(line[len(MARK) :]) for line in text.splitlines() if MARK in line]


def _base_env(tmp: Path, diagnose_env: dict[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OMPI_", "PMIX_"))}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["TMPDIR"] = str(tmp)
    env.update(diagnose_env or {})
    return env


def _command(program: str, diagnose: bool) -> str:
    from jupyter_distcomp.azureml.snapshot import diagnosed_command

    command = COMMAND.format(program=program)
    return diagnosed_command(command) if diagnose else command


def torch_ranks(job, program, size, tmp, diagnose=True, **extra) -> list[Rank]:
    """The PyTorch distribution's ranks on one node, each ``bash -c`` of the command."""
    tmp.mkdir(parents=True, exist_ok=True)
    (port,) = free_ports("127.0.0.1", 1)
    envs = rank_environments("torch.distributed", 1, size, master_port=port)
    base = _base_env(tmp, extra)
    return [Rank(["bash", "-c", _command(program, diagnose)], job, {**base, **env}) for env in envs]


def until(check, seconds: float = 60) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.05)
    return check()


def test_a_passing_job_prints_the_same_bytes_and_exits_the_same(job, tmp_path):
    runs = {}
    for diagnose in (False, True):
        ranks = torch_ranks(job, "passing.py", 2, tmp_path / str(diagnose), diagnose)
        codes = [rank.wait() for rank in ranks]
        runs[diagnose] = [
            (code, bytes(r.out), bytes(r.err)) for code, r in zip(codes, ranks, strict=True)
        ]
    assert runs[True] == runs[False]
    assert [code for code, _, _ in runs[True]] == [0, 0]
    assert b"child ended -15" in runs[True][0][1]  # the forked child ended by SIGTERM
    assert MARK.encode() not in b"".join(out + err for _, out, err in runs[True])
    # the ledger's ring lived in the rank's temp folder, gone once it ended, never in the code
    assert list((tmp_path / "True").iterdir()) == []
    assert not [p for p in job.rglob("*") if "ledger" in p.name and p.suffix != ".py"]


def _frame(state: dict) -> dict:
    (main,) = [t for t in state["threads"] if t["main"]]
    return main["frames"][-1]


def test_ranks_waiting_in_an_all_reduce_another_rank_skipped_say_so(job, tmp_path):
    ranks = torch_ranks(job, "skips.py", 3, tmp_path, DISTCOMP_STALL_SECONDS="2")
    try:
        waiting = [ranks[0], ranks[2]]
        assert until(lambda: all(r.states() for r in waiting)), [bytes(r.err) for r in ranks]
        for number, rank in zip((0, 2), waiting, strict=True):
            (state,) = rank.states()  # once per stalled call
            assert state["reason"] == "stall" and state["rank"] == number
            assert (state["size"], state["local_rank"], state["node"]) == (3, number, 0)
            assert state["v"] == 1 and state["pid"] == rank.proc.pid and state["error"] is None
            assert state["stalled"] >= 2
            last = state["calls"][-1]
            assert (last["op"], last["seq"], last["finished"]) == ("all_reduce", 2, 0.0)
            assert last["data"] == "[4] float32" and last["group"] == "default group"
            assert _frame(state) == {
                "file": "skips.py",
                "line": 6,
                "function": "step",
                "code": "dist.all_reduce(t)",
            }
            callers = [f["line"] for f in state["threads"][0]["frames"]]
            assert callers == [12, 6]  # outermost first, the user's frames only
        assert ranks[1].states() == []
    finally:
        for rank in ranks:
            rank.kill()


def test_an_mpi_send_send_deadlock_is_said_by_both_ranks(job, tmp_path):
    env = mpiexec_environment(_base_env(tmp_path, {"DISTCOMP_STALL_SECONDS": "2"}))
    argv = [mpiexec_path(), "-n", "2", *mpiexec_args(2), "-x", "DISTCOMP_STALL_SECONDS"]
    mpiexec = Rank([*argv, "bash", "-c", _command("deadlock.py", True)], job, env)
    try:
        assert until(lambda: len(mpiexec.states()) == 2), bytes(mpiexec.err)
        by_rank = {state["rank"]: state for state in mpiexec.states()}
        assert sorted(by_rank) == [0, 1]
        for rank, state in by_rank.items():
            assert state["reason"] == "stall" and state["size"] == 2
            (send,) = state["calls"]
            assert (send["op"], send["kind"], send["finished"]) == ("Send", "p", 0.0)
            assert send["root"] == f"to rank {1 - rank}"
            assert send["data"] == "[4194304] float64"
            assert _frame(state)["code"] == "comm.Send(data, dest=1 - comm.rank)"
    finally:
        mpiexec.kill()


def test_a_rank_that_raises_says_its_error_and_exits_as_before(job, tmp_path):
    env = {"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1", "AZUREML_CR_NODE_RANK": "0"}
    plain = Rank(["bash", "-c", _command("raises.py", False)], job, _base_env(tmp_path, env))
    ours = Rank(["bash", "-c", _command("raises.py", True)], job, _base_env(tmp_path, env))
    assert ours.wait() == plain.wait() == 1
    thread, main = ours.states()
    assert thread["reason"] == main["reason"] == "failure"
    assert thread["error"] == "ValueError: bad shard 3"
    assert thread["threads"][0]["name"] == "loader" and not thread["threads"][0]["main"]
    assert thread["threads"][0]["frames"][-1]["code"] == 'raise ValueError("bad shard 3")'
    assert main["error"] == "FileNotFoundError: no such file: /data/train.csv"
    assert (main["rank"], main["size"], main["local_rank"], main["node"]) == (1, 2, 1, 0)
    assert [f["function"] for f in main["threads"][0]["frames"]] == ["<module>", "load"]
    assert main["threads"][0]["frames"][0]["code"] == 'load("/data/train.csv")'
    # the user's tracebacks, as they were, around our lines
    lines = bytes(ours.err).decode().splitlines()
    assert [line for line in lines if MARK not in line] == bytes(plain.err).decode().splitlines()


def test_sigterm_is_said_and_then_does_what_it_did_before(job, tmp_path):
    """Rank 0 waits in C code (gloo), rank 1 has its own SIGTERM handler, rank 2 runs
    Python: each says it got SIGTERM, then ends as it would have without us."""
    ranks = torch_ranks(job, "terminated.py", 3, tmp_path, DISTCOMP_STALL_SECONDS="1")
    try:
        assert until(lambda: all(b"ready" in r.out for r in ranks))
        assert until(lambda: ranks[0].states())  # its stall line: it is in the all_reduce
        for rank in ranks:
            rank.proc.send_signal(signal.SIGTERM)
        codes = [rank.wait(60) for rank in ranks]
    finally:
        for rank in ranks:
            rank.kill()
    assert codes == [-signal.SIGTERM, 3, -signal.SIGTERM]  # the default's end; the handler's
    assert b"saving a checkpoint" in ranks[1].out
    stall, state = ranks[0].states()
    assert (stall["reason"], state["reason"], state["rank"]) == ("stall", "sigterm", 0)
    assert _frame(state)["code"] == "dist.all_reduce(torch.ones(2))"
    assert state["calls"][-1]["op"] == "all_reduce" and state["stalled"] >= 1
    (state,) = ranks[2].states()  # our handler, in its main thread
    assert state["reason"] == "sigterm" and state["rank"] == 2 and state["stalled"] is None
    assert _frame(state)["code"] == "sum(range(1000))"
    # the user's handler ran instead of ours: our thread said it, with the main thread's
    # stack if it got there before that handler ended the program
    (state,) = ranks[1].states()
    assert state["reason"] == "sigterm" and state["rank"] == 1
    assert state["threads"] == [] or state["threads"][0]["frames"][0]["line"] == 16


def test_an_nccl_call_still_running_on_the_gpu_in_torchs_record_is_a_stall(job, tmp_path):
    env = {"RANK": "1", "WORLD_SIZE": "2", "DISTCOMP_STALL_SECONDS": "2"}
    rank = Rank(["bash", "-c", _command("nccl_record.py", True)], job, _base_env(tmp_path, env))
    try:
        assert until(rank.states, 30), bytes(rank.err)
    finally:
        rank.kill()
    (state,) = rank.states()
    assert state["reason"] == "stall" and state["stalled"] >= 5
    (call,) = state["calls"]
    assert (call["op"], call["seq"], call["gpu"]) == ("all_reduce", 7, "started")
    assert call["group"] == "nccl group 0 (ranks 0, 1)" and call["data"] == "[1024] float32"
    assert _frame(state) == {
        "file": "nccl_record.py",
        "line": 16,
        "function": "synchronize",
        "code": "time.sleep(60)",
    }


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_a_hung_job_the_stand_in_runs_is_diagnosed_from_its_ranks_lines(tmp_path):
    """Submitted with diagnostics through azure-ai-ml to the stand-in, which runs it on
    local ranks as Azure ML would (jupyter_distcomp/standin/); cancelled once two ranks said
    they stall; downloaded; diagnosed from its logs (core/joblog) as the user would."""
    from jupyter_distcomp import load_component
    from jupyter_distcomp.azureml import submit
    from jupyter_distcomp.azureml.diagnose import diagnose_folder
    from jupyter_distcomp.standin import AzureStandIn
    from jupyter_distcomp.standin.jobs import log_prefix

    code = tmp_path / "project"
    code.mkdir()
    (code / "skips.py").write_text(SKIPS)
    (code / "spec.yaml").write_text(
        "name: train\ntype: DistributedComponent\nlauncher:\n  type: torch.distributed\n"
        "  additional_arguments: python skips.py\n"
        "environment_variables:\n  DISTCOMP_STALL_SECONDS: '2'\n"
    )
    component = load_component(code / "spec.yaml")
    component.runsettings.resource_layout.configure(instance_count=3, process_count_per_node=1)
    with AzureStandIn(root=tmp_path / "standin") as standin:
        ml_client = standin.ml_client(show_progress=False)
        job = submit(component, ml_client, compute="cpu", diagnose=True)

        def stalls() -> int:  # the lines of ranks 0 and 2, in the job's logs as written
            logs = [f"{log_prefix(job.name)}/user_logs/std_log_process_{r}.txt" for r in (0, 2)]
            return sum(b'"reason": "stall"' in (standin.store.read(log) or b"") for log in logs)

        assert until(lambda: stalls() == 2, 120), standin.job(job.name).statuses
        ml_client.jobs.begin_cancel(job.name).result(timeout=60)
        with standin.storage_proxy():
            ml_client.jobs.download(job.name, all=True, download_path=tmp_path / "job")
    diagnosis = diagnose_folder(tmp_path / "job")
    assert diagnosis.verdict.startswith(
        "The ranks hung: all_reduce #2 ([4] float32, sum, default group) at skips.py:6 in step:"
        " ranks 0, 2 wait since"
    ), diagnosis.text()
    assert "rank 1 has not called it" in diagnosis.verdict
    for log in (tmp_path / "job" / "artifacts" / "user_logs").iterdir():
        assert "Error in sitecustomize" not in log.read_text()
