"""Horovod's PyTorch operations in the collectives ledger, on 2 real ranks under mpiexec:
each form (blocking, in place, async with ``synchronize`` or ``poll``, grouped), each kind
(allreduce, allgather, broadcast, alltoall, reducescatter, barrier, join) and what is built
on them (the DistributedOptimizer's gradient allreduces), named as Horovod names them, at
the user's line, and finished once waited for; a join starts the groups' counts again.
Then a Horovod job's logs diagnosed, and the parts that need no ranks: reading Horovod's
function names, and its stall inspector's lines."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from jupyter_distcomp.azureml.diagnose import diagnose_folder
from jupyter_distcomp.core.horovod_stall import last_stall_lines, read_stalls
from jupyter_distcomp.core.joblog.model import HUNG
from jupyter_distcomp.machine import mpi
from jupyter_distcomp.rank_side import ledger, ledger_words
from jupyter_distcomp.rank_side.ledger_horovod import family_of, tensor_name

from . import joblog_support as jobs
from .horovod_support import horovod  # noqa: F401  (the fixture)

SCRIPT = Path(__file__).parent / "data" / "horovod_ops.py"
HOOKS = Path(ledger.__file__).with_name("ledger_hooks.py")


def _run(tmp_path: Path, check: bool, *extra: str) -> subprocess.CompletedProcess:
    env = mpi.mpiexec_environment(dict(os.environ))
    env["DISTCOMP_CHECK_COLLECTIVES"] = "1" if check else "0"
    argv = [mpi.mpiexec_path(), "--oversubscribe", "-n", "2", sys.executable, str(SCRIPT)]
    argv += [str(HOOKS), str(tmp_path / "rank-%d.ledger"), *extra]
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300, check=False)


def _line(mark: str) -> int:
    """The line of the script that ends with the comment ``# [mark]``."""
    lines = SCRIPT.read_text().splitlines()
    return next(i for i, text in enumerate(lines, 1) if text.endswith(f"# [{mark}]"))


@pytest.mark.slow
@pytest.mark.parametrize("check", [False, True], ids=["recorded", "checked"])
def test_every_kind_of_operation_is_recorded_at_the_users_line(horovod, tmp_path, check):  # noqa: F811
    done = _run(tmp_path, check)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    found = {}
    for line in done.stdout.splitlines():
        if line.startswith("LEDGER "):
            _, rank, rows = line.split(" ", 2)
            found[int(rank)] = json.loads(rows)
    assert set(found) == {0, 1}, done.stdout[-3000:]
    rows = found[0]
    shown = [tuple(row[:7]) for row in rows]
    world, first = "global process set", _line("first")
    # Horovod's names of calls given none: the operation and the handle (the n-th call)
    assert shown[:9] == [
        (1, "hvd.allreduce", "[3] float32", "average", "name allreduce.a", world, first),
        (2, "hvd.allreduce", "[3] float32", "sum", "name allreduce.noname.2", world, first + 1),
        (3, "hvd.allreduce", "[3] float32", "average", "name allreduce.noname.3", world, first + 2),
        (4, "hvd.allgather", "[1, 2] float32", "", "name allgather.noname.4", world, first + 4),
        (
            5,
            "hvd.broadcast",
            "[3] float32",
            "",
            "root 1, name broadcast.noname.5",
            world,
            first + 5,
        ),
        (6, "hvd.alltoall", "[4] float32", "", "name alltoall.noname.6", world, first + 6),
        (
            7,
            "hvd.reducescatter",
            "[4] float32",
            "sum",
            "name reducescatter.noname.7",
            world,
            first + 7,
        ),
        (
            8,
            "hvd.grouped_allreduce",
            "2 x [3] float32",
            "average",
            "name grouped_allreduce.noname.8",
            world,
            first + 8,
        ),
        (9, "hvd.allgather", "[3] float32", "", "name allgather.noname.9", world, first + 9),
    ]
    # the optimizer's gradient allreduces, at the line of backward(), named by parameter
    assert sorted(shown[9:11]) == [
        (
            10,
            "hvd.allreduce",
            "[1] float32",
            "average",
            "name allreduce.bias",
            world,
            _line("backward"),
        ),
        (
            11,
            "hvd.allreduce",
            "[1, 2] float32",
            "average",
            "name allreduce.weight",
            world,
            _line("backward"),
        ),
    ]
    assert shown[11] == (12, "hvd.barrier", "", "", "", world, _line("last barrier"))
    assert shown[12] == (1, "hvd.join", "", "", "", "joins", _line("join"))
    # every rank has joined: each group counts from 1 again, whatever each rank did meanwhile
    assert shown[13] == (
        1,
        "hvd.allreduce",
        "[3] float32",
        "average",
        "name allreduce.after",
        f"{world} after join 1",
        _line("after"),
    )
    assert all(row[7] for row in rows), "every call waited for has ended"
    # rank 1 made the same calls, with data of its own where Horovod allows it
    assert [row[1:2] + row[4:7] for row in found[1]] == [row[1:2] + row[4:7] for row in rows]
    assert found[1][3][2] == "[2, 2] float32"


@pytest.mark.slow
def test_check_mode_stops_a_program_whose_rank_skips_an_allreduce(horovod, tmp_path):  # noqa: F811
    done = _run(tmp_path, True, "skip")
    assert done.returncode != 0
    assert "not reached" not in done.stdout
    said = (
        "CollectiveMismatch: check_collectives: hvd.allreduce #1 ([4] float32, average, "
        "name allreduce.skipped, global process set): rank 0 calls it; rank 1 has not called "
        f"it: it is in hvd.barrier #1 at horovod_ops.py:{_line('barrier')} in <module>. "
        "Nothing ran"
    )
    assert done.stderr.count(said) == 2, done.stderr[-3000:]  # on both ranks
    assert "HorovodInternalError" not in done.stderr


def test_horovods_functions_are_read_by_kind():
    assert family_of("horovod_torch_allreduce_async_torch_FloatTensor") == "allreduce"
    assert (
        family_of("horovod_torch_grouped_allgather_async_torch_cuda_IntTensor")
        == "grouped_allgather"
    )
    assert family_of("horovod_torch_barrier") == "barrier"
    assert family_of("horovod_torch_join") == "join"
    for other in ("horovod_torch_poll", "horovod_torch_wait_and_clear", "horovod_torch_reset", "x"):
        assert family_of(other) == ""
    assert tensor_name("allreduce", b"grad.w", 7) == "allreduce.grad.w"
    assert tensor_name("allreduce", "", 7) == "allreduce.noname.7"
    assert tensor_name("broadcast", "", None) == ""


#: the stall inspector's message as Horovod 0.28.1 logs it (stall_inspector.cc), through a
#: rank label as a command run or an Azure ML log shows it
STALL = """\
[rank 0] [2026-11-29 05:10:00.123456: W /tmp/horovod/common/stall_inspector.cc:107] One or more tensors were submitted to be reduced, gathered or broadcasted by subset of ranks and are waiting for remainder of ranks for more than 60 seconds. This may indicate that different ranks are trying to submit different tensors or that only subset of ranks is submitting tensors, which will cause deadlock.
[rank 0] Missing ranks:
[rank 0] 1: [allreduce.skipped]
[rank 0] 2!: [allreduce.a, allreduce.b, allreduce.c, allreduce.d, allreduce.e, allreduce.f ...]
[rank 0] One or more rank (marked by "!") is stalled for longer than 120 seconds. Will shutdown.
[rank 1] step 12
"""


def test_the_stall_inspector_is_read_in_the_ledgers_words():
    (stall,) = read_stalls(STALL)
    assert stall.seconds == 60 and stall.shutdown == [2] and stall.shutdown_seconds == 120
    assert stall.missing[1] == ["allreduce.skipped"]
    assert stall.missing[2][-1] == "..." and len(stall.missing[2]) == 7
    called = ledger_words.Entry(
        3,
        1.0,
        0.0,
        ledger_words.COLLECTIVE,
        "global process set",
        "hvd.allreduce",
        "[4] float32",
        "average",
        "name allreduce.skipped",
        "/work/train.py",
        14,
        "step",
    )
    lines = last_stall_lines(STALL, {0: [called], 1: [], 2: []})
    assert lines[0] == (
        "Horovod's stall inspector: rank 1 has not submitted allreduce.skipped for more than "
        "60 s (rank 0 called it at train.py:14 in step)"
    )
    assert lines[1].startswith("Horovod's stall inspector: rank 2 has not submitted allreduce.a")
    assert lines[2] == (
        "Horovod's stall inspector: Horovod shuts down, as rank 2 stalled for longer than "
        "120 s (HOROVOD_STALL_SHUTDOWN_TIME_SECONDS)"
    )
    assert read_stalls("[rank 1] step 12\nMissing ranks:\n1: [x]\n") == []


SKIPPING = """\
import os, time
os.environ["HOROVOD_STALL_CHECK_TIME_SECONDS"] = "1"
import horovod.torch as hvd
import torch

hvd.init()
hvd.allreduce(torch.ones(4), name="warm")
if hvd.rank() != 1:
    hvd.allreduce(torch.ones(4), name="skipped")
else:
    time.sleep(60)
"""


@pytest.mark.slow
def test_a_horovod_job_that_hangs_is_diagnosed_from_its_logs(horovod, tmp_path):  # noqa: F811
    """A Horovod job under a bare mpiexec, its logs laid out as Azure ML's: its stall
    inspector names the missing rank from the logs alone; our rank side's state lines
    (ledger_horovod travels in a submitted job) name the call and its place too."""
    job = jobs.mpi_job(tmp_path, SKIPPING, 2, hooks=True)
    try:
        jobs.wait_blocked(job, [0], timeout=120)
        deadline = time.monotonic() + 60
        while "Missing ranks:" not in job.text(0) and time.monotonic() < deadline:
            time.sleep(0.2)
        jobs.write_states(job)
    finally:
        jobs.stop(job)  # the job is cancelled
    alone = diagnose_folder(jobs.logs_alone(job, tmp_path), status="Canceled")
    assert alone.outcome == HUNG and alone.culprits == [1], alone.text()
    assert alone.verdict.startswith(
        "Horovod's stall inspector: rank 1 has not submitted allreduce.skipped for more than 1 s"
    ), alone.verdict
    placed = diagnose_folder(job.folder, status="Canceled")
    assert placed.verdict.startswith(
        "The ranks hung: hvd.allreduce #2 ([4] float32, average, name allreduce.skipped, "
        "global process set) at train.py:9 in <module>: rank 0 waits since"
    ), placed.verdict
    assert "rank 1 has not called it" in placed.verdict
