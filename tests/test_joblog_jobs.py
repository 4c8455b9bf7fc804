"""``%distcomp diagnose`` on the logs of real jobs run here (torch.distributed gloo
processes, a bare mpiexec, torchrun), laid out as ``az ml job download --all`` lays them
out: each test reads the verdict a user would read first, and the details under it.

State lines, where a test has them, are written from each rank's real collectives ledger
and real stack while the ranks stall (tests/joblog_support.py), as our rank side writes
them in a submitted job; the same job's logs without them are what a job without our rank
side leaves.
"""

from __future__ import annotations

import pytest

from jupyter_distcomp.azureml.diagnose import diagnose_folder
from jupyter_distcomp.core.joblog.model import COMPLETED, FAILED, HUNG, NO_ERROR

from . import joblog_support as jobs

pytestmark = pytest.mark.slow

TORCH_INIT = """\
import datetime, sys, time
import torch
import torch.distributed as dist

dist.init_process_group("gloo", timeout=datetime.timedelta(seconds={timeout}))
rank = dist.get_rank()
t = torch.ones(4)
"""


def torch_source(body: str, timeout: int = 20) -> str:
    return TORCH_INIT.format(timeout=timeout) + body


def test_a_passing_job_is_all_ranks_completed(tmp_path):
    job = jobs.mpi_job(
        tmp_path,
        "from mpi4py import MPI\n"
        "comm = MPI.COMM_WORLD\n"
        "print('sum', comm.allreduce(comm.rank), 'on rank', comm.rank)\n",
        2,
    )
    jobs.finish(job)
    assert "sum 1 on rank 1" in job.text(1)
    done = diagnose_folder(job.folder, status="Completed")
    assert done.outcome == COMPLETED
    assert done.verdict == "All ranks completed: no error in the logs of ranks 0-1."
    alone = diagnose_folder(job.folder)  # the folder alone does not say how the job ended
    assert alone.outcome == NO_ERROR and alone.verdict.startswith("No error in any rank's log")


def test_rank_3_raises_first_and_the_others_are_ended_by_it(tmp_path):
    body = (
        "def step(batch):\n"
        "    if rank == 3 and batch == 2:\n"
        "        raise ValueError(f'bad batch {batch}')\n"
        "    dist.all_reduce(t)\n"
        "\n"
        "for batch in range(5):\n"
        "    step(batch)\n"
    )
    job = jobs.torch_job(tmp_path, torch_source(body), 4, per_node=2)
    jobs.finish(job)
    found = diagnose_folder(job.folder, per_node=2)
    assert found.outcome == FAILED and found.culprits == [3]
    assert found.verdict.startswith(
        "rank 3 failed on node 1: ValueError: bad batch 2 at train.py:10 in step"
    )
    assert "ranks 0-2 were ended by it" in found.verdict
    text = found.text()
    assert "[node 1 rank 3]" in text
    assert (
        'raise ValueError(f"bad batch {batch}")' in text or "raise ValueError(f'bad batch" in text
    )
    # identical consequences once, with their ranks
    assert "ranks 0-2: lost a peer in all_reduce at train.py:11 in step" in text
    assert "site-packages" not in text  # the user's frames only


def test_a_rank_that_skips_an_all_reduce_is_named_from_the_logs_and_placed_by_state_lines(
    tmp_path,
):
    body = (
        "for step in range(3):\n"
        "    dist.all_reduce(t)\n"
        "if rank != 1:\n"
        "    dist.all_reduce(t)\n"
        "else:\n"
        "    time.sleep(7)\n"
        "print('rank', rank, 'done')\n"
    )
    job = jobs.torch_job(tmp_path, torch_source(body, timeout=4), 3, hooks=True)
    jobs.wait_blocked(job, [0, 2])
    jobs.write_states(job)
    jobs.finish(job)
    # gloo's own words, as the ranks that waited printed them
    assert "Timed out waiting 4000ms" in job.text(0)

    alone = diagnose_folder(jobs.logs_alone(job, tmp_path))
    assert alone.outcome == HUNG and alone.culprits == [1]
    assert alone.verdict == (
        "ranks 0, 2 timed out after 4 s in all_reduce at train.py:11 in <module> (gloo); "
        "rank 1 did not time out: the one they waited for"
    )

    placed = diagnose_folder(job.folder)
    assert placed.culprits == [1]
    assert placed.verdict.startswith(
        "The ranks hung: all_reduce #4 ([4] float32, sum, default group) at train.py:11 in "
        "<module>: ranks 0, 2 wait since"
    )
    assert placed.verdict.endswith(
        "rank 1 has not called it: it is at train.py:13 in <module>: time.sleep(7)"
    )
    stacks = [s for s in placed.sections if "stack" in s.heading]
    assert [s.heading.split(":")[0] for s in stacks] == ["ranks 0, 2", "rank 1"]
    assert stacks[1].lines == ['  File "train.py", line 13, in <module>', "    time.sleep(7)"]


DEADLOCK = """\
from mpi4py import MPI
import numpy as np
comm = MPI.COMM_WORLD
print("rank", comm.rank, "sends", flush=True)
big = np.zeros(4_000_000)
comm.Send(big, dest=1 - comm.rank)
comm.Recv(big, source=1 - comm.rank)
"""


def test_a_send_send_deadlock_is_a_stall_from_logs_and_a_cycle_from_state_lines(tmp_path):
    job = jobs.mpi_job(tmp_path, DEADLOCK, 2, hooks=True)
    try:
        jobs.wait_blocked(job, [0, 1])
        jobs.write_states(job)
    finally:
        jobs.stop(job)  # the job is cancelled: SIGTERM to every process

    alone = diagnose_folder(jobs.logs_alone(job, tmp_path), status="Canceled")
    assert alone.outcome == HUNG and alone.culprits == []
    assert alone.verdict.startswith(
        "The job canceled with no error in any rank's log: ranks 0-1 stalled or were stopped "
        "from outside, and the logs alone cannot say where."
    )

    cycle = diagnose_folder(job.folder, status="Canceled")
    assert cycle.outcome == HUNG and cycle.culprits == [0, 1]
    assert cycle.verdict.startswith(
        "The ranks hung: deadlock: rank 0 waits to send to rank 1, which waits to send to "
        "rank 0 (COMM_WORLD); ranks 0-1 in Send ([4000000] float64) at train.py:6 in <module>"
    )
    assert "Fix: let one side receive first" in cycle.verdict
    assert '  File "train.py", line 6, in <module>' in cycle.text()


def test_cpu_out_of_memory_on_one_rank_names_its_rank_and_node(tmp_path):
    body = (
        "dist.all_reduce(t)\nif rank == 3:\n    grads = torch.empty(10**13)\ndist.all_reduce(t)\n"
    )
    job = jobs.torch_job(tmp_path, torch_source(body), 4, per_node=2)
    jobs.finish(job)
    found = diagnose_folder(job.folder, per_node=2)
    assert found.outcome == FAILED and found.culprits == [3]
    assert found.verdict.startswith(
        "rank 3 ran out of CPU memory on node 1: RuntimeError: DefaultCPUAllocator: can't "
        "allocate memory: you tried to allocate 40000000000000 bytes"
    )
    assert "ranks 0-2 were ended by it" in found.verdict
    assert "CPU out of memory (asked for 36.4 TiB)" in found.text()


def test_torchrun_failure_text_is_read_from_one_log(tmp_path):
    body = (
        "dist.all_reduce(t)\n"
        "if rank == 1:\n"
        "    raise RuntimeError('loss is nan at step 2')\n"
        "dist.all_reduce(t)\n"
    )
    job = jobs.torchrun_job(tmp_path, torch_source(body), 2)
    jobs.finish(job, 120)
    text = (job.logs / "std_log.txt").read_text()
    assert "Root Cause (first observed failure):" in text
    found = diagnose_folder(job.folder)
    assert found.outcome == FAILED and found.culprits == [1]
    assert found.verdict.startswith(
        "rank 1 failed: RuntimeError: loss is nan at step 2 at train.py:10 in <module>"
    )
    launchers = next(s for s in found.sections if s.heading == "what the launchers said")
    (root,) = [line for line in launchers.lines if "first observed failure" in line]
    # torchrun names the first exit it noticed: rank 1's (exit code 1, or SIGABRT where
    # gloo's teardown aborts the raising process), or rank 0's that only followed it
    assert root.startswith("torchrun, first observed failure: rank 1 (local rank 1), ") or (
        root.startswith("torchrun, first observed failure: rank 0")
        and root.endswith("this rank only followed another's failure")
    ), root
    assert found.layout.per_node == 2 and not found.layout.guessed


def test_mpirun_first_failure_and_mpi_abort_are_read(tmp_path):
    exits = jobs.mpi_job(
        tmp_path / "exit",
        "import os, sys, time\n"
        "if os.environ['OMPI_COMM_WORLD_RANK'] == '1':\n"
        "    sys.exit(3)\n"
        "time.sleep(2)\n",
        3,
    )
    jobs.finish(exits)
    mpi_log = (exits.logs / "mpi_log.txt").read_text()
    assert "detected that one or more processes exited with non-zero status" in mpi_log
    found = diagnose_folder(exits.folder)
    assert found.outcome == FAILED and found.culprits == [1]
    assert found.verdict.startswith("rank 1 failed: exited with code 3 (mpirun)")

    aborts = jobs.mpi_job(
        tmp_path / "abort",
        "from mpi4py import MPI\n"
        "if MPI.COMM_WORLD.rank == 2:\n"
        "    raise KeyError('shard 7')\n"
        "MPI.COMM_WORLD.barrier()\n",
        3,
        python=("-m", "mpi4py"),
    )
    jobs.finish(aborts)
    found = diagnose_folder(aborts.folder)
    assert found.culprits == [2]
    assert found.verdict.startswith("rank 2 failed: KeyError: 'shard 7' at train.py:3 in <module>")
    launchers = next(s for s in found.sections if s.heading == "what the launchers said")
    assert "Open MPI: rank 2, MPI_ABORT" in launchers.lines

    killed = jobs.mpi_job(
        tmp_path / "kill",
        "import os, signal, time\n"
        "if os.environ['OMPI_COMM_WORLD_RANK'] == '2':\n"
        "    os.kill(os.getpid(), signal.SIGKILL)\n"
        "time.sleep(2)\n",
        3,
    )
    jobs.finish(killed)
    found = diagnose_folder(killed.folder)
    assert found.culprits == [2]
    assert found.verdict.startswith(
        "rank 2 failed: killed by SIGKILL (mpirun): out of memory, or killed from outside"
    )


FLIGHT = """\
import os
from torch._C._distributed_c10d import _dump_fr_trace

try:
    for step in range(3):
        dist.all_reduce(t)
    if rank != 1:
        dist.all_reduce(t)
    else:
        time.sleep(6)
finally:  # the job keeps torch's record of its collectives among its outputs
    os.makedirs("outputs/fr", exist_ok=True)
    with open(f"outputs/fr/trace_rank_{rank}", "wb") as dump:
        dump.write(_dump_fr_trace())
"""


def test_flight_recorder_dumps_of_a_gloo_job_are_read(tmp_path):
    job = jobs.torch_job(
        tmp_path, torch_source(FLIGHT, timeout=3), 3, env={"TORCH_FR_BUFFER_SIZE": "200"}
    )
    jobs.finish(job)
    outputs = job.folder / "artifacts" / "outputs"
    (job.code / "outputs").rename(outputs)  # where jobs.download(all=True) puts outputs/
    found = diagnose_folder(job.folder)
    record = next(s for s in found.sections if s.heading == "Flight Recorder dumps")
    assert record.lines[0] == (
        "all_reduce #4 ([4] float32, default group) at train.py:15 in <module>: ranks 0, 2 "
        "reached it; rank 1 never did (rank 1: last all_reduce #3)"
    ), record.lines
    assert "rank 1: process group 0: last enqueued #3, last completed #3" in record.lines
    analyser = next(s for s in found.sections if s.heading == "torch's Flight Recorder analyser")
    assert analyser.lines  # torch's own words, or why it could not read the dumps
