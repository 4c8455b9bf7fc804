"""The real job's failures, diagnosed from the notebook: jobs submitted with the rank side
(``submit --diagnose``) run on the stand-in's emulated nodes (jupyter_distcomp/standin/),
and ``%distcomp diagnose JOB`` / ``follow`` read every rank's log through the real
azure-ai-ml client, as they would read an Azure ML job's."""

from __future__ import annotations

import time

import pytest
from IPython.utils.capture import capture_output

from jupyter_distcomp import AzureMLError
from jupyter_distcomp.core.joblog.state import MARK
from jupyter_distcomp.standin import AzureStandIn

from .azure_standin import session_on

pytest.importorskip("azure.ai.ml")
pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore::UserWarning")]

TORCH_SPEC = """\
name: train
type: DistributedComponent
launcher:
  type: torch.distributed
  additional_arguments: python train.py
environment:
  name: AzureML-Minimal
environment_variables:
  DISTCOMP_STALL_SECONDS: '2'
"""
MPI_SPEC = TORCH_SPEC.replace("torch.distributed", "mpi")

PASSING = """\
import os
rank = int(os.environ["RANK"])
for step in range(3):
    print(f"rank {rank} step {step}", flush=True)
"""
RAISING = """\
import os
rank = int(os.environ["RANK"])
print(f"rank {rank} starts", flush=True)
if rank == 3:
    raise ValueError("rank 3 read an empty shard")
import time; time.sleep(60)
"""
SKIPPING = """\
import datetime, os, time
import torch
import torch.distributed as dist

dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=8))
rank = dist.get_rank()
t = torch.ones(4)
dist.all_reduce(t)
if rank == 1:
    time.sleep(120)
dist.all_reduce(t)
print("done", rank, flush=True)
"""
DEADLOCK = """\
from mpi4py import MPI
import numpy as np

comm = MPI.COMM_WORLD
rank = comm.Get_rank()
data = np.zeros(1 << 22)
comm.Send(data, dest=1 - rank, tag=7)
comm.Recv(data, source=1 - rank, tag=7)
"""


@pytest.fixture
def standin(tmp_path):
    with AzureStandIn(root=tmp_path / "standin") as server:
        yield server


@pytest.fixture
def shell(ip, standin, tmp_path, monkeypatch):
    """The shell, its session pointed at the stand-in."""
    monkeypatch.chdir(tmp_path)
    with session_on(ip, standin):
        yield ip


def submit(ip, standin, tmp_path, program, spec=TORCH_SPEC, nodes=2, ppn=1, *flags):
    (tmp_path / "train.py").write_text(program)
    assert ip.run_cell(f"%%distcomp train\n{spec}").success
    ip.user_ns["train"].runsettings.resource_layout.configure(
        instance_count=nodes, process_count_per_node=ppn
    )
    result = ip.run_cell("%distcomp submit train --compute cpu " + " ".join(flags))
    assert result.success, result.error_in_exec
    return standin.job_puts()[-1].path.rsplit("/", 1)[-1]


def diagnose(ip, job) -> str:
    with capture_output() as captured:
        result = ip.run_cell(f"%distcomp diagnose {job}")
    assert result.success, result.error_in_exec
    return "\n".join(o.data.get("text/plain", "") for o in captured.outputs) + captured.stdout


def wait_for(condition, timeout=120.0, what=""):
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def test_a_passing_job_prints_nothing_of_ours_and_is_diagnosed_completed(shell, standin, tmp_path):
    plain = submit(shell, standin, tmp_path, PASSING, TORCH_SPEC, 2, 2, "--no-diagnose")
    ours = submit(shell, standin, tmp_path, PASSING, TORCH_SPEC, 2, 2, "--diagnose")
    assert standin.job(plain).wait(120) == standin.job(ours).wait(120) == "Completed"
    for rank in range(4):
        log = f"user_logs/std_log_process_{rank}.txt"
        assert standin.job(ours).log_text(log) == standin.job(plain).log_text(log)
        assert MARK not in standin.job(ours).log_text(log)
    text = diagnose(shell, ours)
    assert f"job {ours} ended Completed" in text
    assert "All ranks completed" in text


def test_rank_3_raises_and_the_follow_names_it_with_its_state_line(shell, standin, tmp_path):
    job = submit(shell, standin, tmp_path, RAISING, TORCH_SPEC, 2, 2, "--diagnose")
    with capture_output() as captured:
        result = shell.run_cell(f"%distcomp follow {job}")
    assert isinstance(result.error_in_exec, AzureMLError)
    message = str(result.error_in_exec)
    assert f"`{job}` failed on rank 3:" in message, message
    assert "ranks 0-2 stopped because of the failure." in message
    assert captured.stderr.count("ValueError: rank 3 read an empty shard") == 1
    # the state line is ours, not the user's: it is in the log, never in what follow shows
    assert MARK in standin.job(job).log_text("user_logs/std_log_process_3.txt")
    assert MARK not in captured.stdout + captured.stderr
    text = diagnose(shell, job)
    assert "rank 3 failed on node 1: ValueError: rank 3 read an empty shard" in text, text
    assert "train.py:5" in text


def test_a_rank_that_skips_an_all_reduce_is_named_with_its_place(shell, standin, tmp_path):
    job = submit(shell, standin, tmp_path, SKIPPING, TORCH_SPEC, 2, 1, "--diagnose")
    assert standin.job(job).wait(180) == "Failed"
    text = diagnose(shell, job)
    assert "all_reduce #2" in text, text
    assert "train.py:11" in text  # where rank 0 waits
    assert "rank 1" in text and "train.py:10" in text, text  # where rank 1 is instead


def test_a_send_send_deadlock_is_named_while_the_job_hangs(shell, standin, tmp_path):
    job = submit(shell, standin, tmp_path, DEADLOCK, MPI_SPEC, 2, 1, "--diagnose")
    run = standin.job(job)
    wait_for(
        lambda: all(MARK in run.log_text(f"user_logs/std_log_process_{r}.txt") for r in range(2)),
        what="both ranks' stall lines",
    )
    text = diagnose(shell, job)
    assert f"job {job} is Running: what its ranks' logs say so far" in text
    assert (
        "deadlock: rank 0 waits to send to rank 1 (tag 7), which waits to send to rank 0 (tag 7)"
        in text
    ), text
    assert "Send ([4194304] float64) at train.py:7" in text
    assert "Fix: let one side receive first" in text
    standin.ml_client().jobs.begin_cancel(job)
    assert run.wait(60) == "Canceled"
    for rank in range(2):
        assert '"reason": "sigterm"' in run.log_text(f"user_logs/std_log_process_{rank}.txt")
