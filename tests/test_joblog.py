"""The job-log diagnosis engine on texts: state lines (damaged ones too), PyTorch's NCCL
watchdog lines and CUDA out-of-memory messages in the formats torch's source writes,
identical tracebacks once, the kernel's OOM killer, Azure ML's file names, a large log read
at its ends, and ``%distcomp diagnose`` in a real shell (its errors, its view).

The tests that run real jobs are in test_joblog_jobs.py.
"""

from __future__ import annotations

import dataclasses
import json
import pickle

import pytest

from jupyter_distcomp.azureml import flight_recorder
from jupyter_distcomp.azureml.diagnose import diagnose_folder, diagnose_texts, read_log
from jupyter_distcomp.core.joblog import MARK, RankLog, diagnose, parse_state_line, rank_files
from jupyter_distcomp.core.joblog.flight import read_dump
from jupyter_distcomp.core.joblog.model import FAILED, HUNG
from jupyter_distcomp.core.joblog.state import last_states, read_states
from jupyter_distcomp.errors import JobLogsError
from jupyter_distcomp.notebook.views.diagnosis import DiagnosisView
from jupyter_distcomp.rank_side.ledger_words import COLLECTIVE, Entry

from .test_magics import run_cell


def state(rank: int, reason: str = "stall", **extra) -> dict:
    base = {
        "v": 1,
        "rank": rank,
        "size": 2,
        "local_rank": rank,
        "node": 0,
        "host": "node-0",
        "pid": 100 + rank,
        "reason": reason,
        "time": 1000.0,
        "stalled": 30,
        "threads": [],
        "calls": [],
        "error": None,
    }
    return {**base, **extra}


def line(data: dict) -> str:
    return MARK + json.dumps(data)


# -- state lines ---------------------------------------------------------------------------
def test_a_state_line_parses_anywhere_in_a_line():
    data = state(3)
    assert parse_state_line(line(data)) == data
    assert parse_state_line("[rank3]: " + line(data) + "\nnext line") == data
    assert parse_state_line("no mark here") is None


@pytest.mark.parametrize(
    "text",
    [
        MARK + '{"v": 1, "rank": 2, "reason": "stall", "threads": [{"name": "Main',  # cut off
        MARK + "not json",
        MARK + json.dumps(state(1, v=2)),
        MARK + json.dumps(state(-1)),
        MARK + json.dumps(state(True)),
        MARK + json.dumps(state(1, reason="bored")),
        MARK + "[1, 2, 3]",
    ],
)
def test_a_damaged_state_line_is_none(text):
    assert parse_state_line(text) is None


def test_a_damaged_state_line_is_skipped_with_a_note_never_a_crash():
    text = "step 1\n" + MARK + '{"v": 1, "rank": 0, "reas\nstep 2\n'
    found, notes = read_states(text, "std_log_process_0.txt")
    assert found == {}
    assert len(notes) == 1 and "damaged state line in std_log_process_0.txt" in notes[0]
    diagnosis = diagnose([RankLog(0, text, "std_log_process_0.txt")])
    assert any("damaged state line" in note for note in diagnosis.notes)


def test_the_last_state_counts_but_a_stalls_stack_survives_a_later_sigterm_line():
    frames = [{"file": "train.py", "line": 12, "function": "step", "code": "dist.barrier()"}]
    stall = state(0, threads=[{"name": "MainThread", "main": True, "frames": frames}])
    sigterm = state(0, "sigterm", time=1010.0)
    found, _ = read_states(line(stall) + "\n" + line(sigterm) + "\n", "log")
    chosen = last_states(found)[0]
    assert chosen.reason == "sigterm" and chosen.frames == frames and chosen.stack_from_stall


def entry(seq: int, op: str, line_no: int, finished: float = 1.0, **extra) -> dict:
    return dataclasses.asdict(
        Entry(
            seq,
            900.0,
            finished,
            COLLECTIVE,
            "default group",
            op,
            "[4] float32",
            "sum",
            file="/mnt/azureml/cr/j/abc/exe/wd/train.py",
            line=line_no,
            function="step",
            **extra,
        )
    )


def test_state_lines_name_the_missing_rank_the_collective_and_the_place():
    waiting = state(0, calls=[entry(7, "all_reduce", 20), entry(8, "all_reduce", 20, 0.0)])
    other = state(
        1,
        calls=[entry(7, "all_reduce", 20)],
        threads=[
            {
                "name": "MainThread",
                "main": True,
                "frames": [
                    {"file": "train.py", "line": 31, "function": "<module>", "code": "evaluate()"},
                    {"file": "eval.py", "line": 4, "function": "evaluate", "code": "x = load()"},
                ],
            }
        ],
    )
    logs = [
        RankLog(r, f"epoch 1\n{line(s)}\n", f"std_log_process_{r}.txt")
        for r, s in enumerate([waiting, other])
    ]
    found = diagnose(logs)
    assert found.outcome == HUNG and found.culprits == [1]
    assert found.verdict == (
        "The ranks hung: all_reduce #8 ([4] float32, sum, default group) at train.py:20 in "
        "step: rank 0 waits since 100 s; rank 1 has not called it: it is at eval.py:4 in "
        "evaluate: x = load()"
    )
    assert found.layout.per_node == 2 and not found.layout.guessed


# -- NCCL's watchdog ---------------------------------------------------------------------------
def watchdog_log(rank: int, seq: int = 812, op: str = "ALLREDUCE") -> str:
    """A rank's log as torch 2.x's ProcessGroupNCCL writes it on a time-out: the formats of
    ``WorkNCCL::checkTimeout`` and ``operator<<(std::ostream&, const WorkNCCL&)`` and of the
    watchdog's "failure detected" line, torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp;
    the ``[rank3]:[E1129 ...]`` prefix is torch's C++ log prefix for a rank."""
    return (
        f"step 4000 loss 0.21\n"
        f"[rank{rank}]:[E1129 03:09:22.300000 812 ProcessGroupNCCL.cpp:632] [Rank {rank}] "
        f"Watchdog caught collective operation timeout: WorkNCCL(SeqNum={seq}, OpType={op}, "
        f"NumelIn=1259621, NumelOut=1259621, Timeout(ms)=600000) ran for 600031 milliseconds "
        f"before timing out.\n"
        f"[rank{rank}]:[E1129 03:09:22.300100 812 ProcessGroupNCCL.cpp:2271] [PG ID 0 PG GUID "
        f"0(default_pg) Rank {rank}]  failure detected by watchdog at work sequence id: {seq} "
        f"PG status: last enqueued work: {seq}, last completed work: {seq - 1}\n"
        f"[rank{rank}]:[E1129 03:09:22.300200 812 ProcessGroupNCCL.cpp:681] [Rank {rank}] Some "
        f"NCCL operations have failed or timed out. Due to the asynchronous nature of CUDA "
        f"kernels, subsequent GPU operations might run on corrupted/incomplete data.\n"
        f"terminate called after throwing an instance of 'c10::DistBackendError'\n"
    )


def test_the_nccl_watchdog_names_the_rank_that_never_reached_the_collective():
    logs = [RankLog(r, watchdog_log(r), f"std_log_process_{r}.txt") for r in range(63)]
    logs.append(RankLog(63, "step 4000 loss 0.21\nsaving checkpoint\n", "std_log_process_63.txt"))
    found = diagnose(logs, per_node=8)
    assert found.outcome == HUNG and found.culprits == [63]
    assert found.verdict == (
        "ranks 0-62 waited in ALLREDUCE #812 (default_pg) for 600 s (NCCL watchdog, time-out "
        "600 s); rank 63 never reached it"
    )
    assert "rank 63: last line 'saving checkpoint'" in found.text()


def test_the_nccl_watchdog_names_a_rank_in_another_collective():
    logs = [RankLog(r, watchdog_log(r), f"std_log_process_{r}.txt") for r in range(3)]
    logs.append(RankLog(3, watchdog_log(3, 811, "ALLGATHER"), "std_log_process_3.txt"))
    found = diagnose(logs)
    assert found.culprits == [3]
    assert found.verdict.endswith("; rank 3 timed out in ALLGATHER #811 instead")


# -- out of memory -------------------------------------------------------------------------------
CUDA_OOM = (
    # the message of c10/cuda/CUDACachingAllocator.cpp (torch 2.x), as Python prints it
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 1 has a total "
    "capacity of 79.15 GiB of which 1.06 GiB is free. Including non-PyTorch memory, this process "
    "has 78.08 GiB memory in use. Of the allocated memory 76.50 GiB is allocated by PyTorch, and "
    "1.10 GiB is reserved by PyTorch but unallocated. If reserved but unallocated memory is large "
    "try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See "
    "documentation for Memory Management  (https://pytorch.org/docs/stable/notes/cuda.html"
    "#environment-variables)"
)


def traceback_text(rank: int, error: str, line_no: int = 40) -> str:
    return (
        f"[rank{rank}]: Traceback (most recent call last):\n"
        f'[rank{rank}]:   File "/mnt/azureml/cr/j/abc/exe/wd/train.py", line {line_no}, in <module>\n'
        f"[rank{rank}]:     loss = model(batch)\n"
        f'[rank{rank}]:   File "/opt/conda/lib/python3.11/site-packages/torch/nn/modules/module.py", '
        "line 1775, in _wrapped_call_impl\n"
        f"[rank{rank}]:     return self._call_impl(*args, **kwargs)\n"
        f"[rank{rank}]: {error}\n"
    )


def test_cuda_out_of_memory_names_rank_node_and_gpu():
    logs = [RankLog(r, "step 10\n", f"std_log_process_{r}.txt") for r in range(8)]
    logs[5] = RankLog(5, traceback_text(5, CUDA_OOM), "std_log_process_5.txt")
    for r in (0, 1, 2):
        gone = "torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:3356, remote process exited or there was a network error"
        logs[r] = RankLog(r, traceback_text(r, gone, 52), f"std_log_process_{r}.txt")
    found = diagnose(logs, per_node=4)
    assert found.outcome == FAILED and found.culprits == [5]
    assert found.verdict == (
        "rank 5 ran out of GPU memory on node 1, GPU 1: tried to allocate 2.00 GiB with 1.06 GiB "
        "free of 79.15 GiB; ranks 0-2 were ended by it; ranks 3-4, 6-7 show no error of their own"
    )
    text = found.text()
    assert "rank 5: CUDA out of memory, its own error  [node 1 rank 5]" in text
    assert "site-packages" not in text


def test_a_kill_with_the_kernels_oom_words_is_cpu_out_of_memory():
    # the Linux kernel's words (mm/oom_kill.c: "Out of memory: Killed process %d (%s)") in a
    # system log, Open MPI 5's (prterun's) in mpi_log.txt
    texts = {
        "user_logs/std_log_process_0.txt": "epoch 1\n",
        "user_logs/std_log_process_1.txt": "epoch 1\nloading shard 3\n",
        "user_logs/mpi_log.txt": (
            "prterun noticed that process rank 1 with PID 2211 on node node-0 exited on\n"
            "signal 9 (Killed).\n"
        ),
        "system_logs/lifecycler/dmesg.txt": "Out of memory: Killed process 2211 (python)\n",
    }
    found = diagnose_texts(texts)
    assert found.culprits == [1]
    assert found.verdict.startswith(
        "rank 1 ran out of CPU memory: killed by SIGKILL (mpirun): the kernel's out-of-memory killer"
    )


# -- tracebacks ----------------------------------------------------------------------------------
def test_identical_tracebacks_are_shown_once_with_their_ranks():
    logs = [RankLog(0, "ok\n", "std_log_process_0.txt")]
    logs += [
        RankLog(r, traceback_text(r, "ValueError: bad shape (3, 4)"), f"std_log_process_{r}.txt")
        for r in (1, 2, 3)
    ]
    found = diagnose(logs)
    assert found.verdict.startswith(
        "ranks 1-3 failed: ValueError: bad shape (3, 4) at train.py:40 in <module>"
    )
    own = [s for s in found.sections if "its own error" in s.heading]
    assert len(own) == 1 and own[0].heading.startswith("ranks 1-3: ValueError")
    assert own[0].lines[-1] == "ValueError: bad shape (3, 4)"
    assert not any("order of the failures" in rule for rule in found.rules)


def test_a_chained_traceback_keeps_its_last_exception():
    text = (
        "Traceback (most recent call last):\n"
        '  File "train.py", line 3, in <module>\n'
        "    load()\n"
        "FileNotFoundError: [Errno 2] No such file or directory: 'data.bin'\n"
        "\n"
        "During handling of the above exception, another exception occurred:\n"
        "\n"
        "Traceback (most recent call last):\n"
        '  File "train.py", line 5, in <module>\n'
        "    raise RuntimeError('no data')\n"
        "RuntimeError: no data\n"
    )
    found = diagnose([RankLog(0, text, "std_log.txt")])
    assert found.verdict == "rank 0 failed: RuntimeError: no data at train.py:5 in <module>"


# -- files -------------------------------------------------------------------------------------
def test_azure_mls_log_names_give_the_ranks():
    ranks, others = rank_files(
        [
            "std_log_process_00.txt",
            "std_log_process_01.txt",
            "std_log_process_10.txt",
            "mpi_log.txt",
        ]
    )
    assert {r: n for r, (n, _) in ranks.items()} == {
        0: "std_log_process_00.txt",
        1: "std_log_process_01.txt",
        10: "std_log_process_10.txt",
    }
    assert others == ["mpi_log.txt"]
    ranks, _ = rank_files(
        ["std_log_node_00_ps.txt", "std_log_node_00_worker.txt", "std_log_node_01_worker.txt"]
    )
    assert ranks == {
        0: ("std_log_node_00_worker.txt", "worker 0"),
        1: ("std_log_node_01_worker.txt", "worker 1"),
        2: ("std_log_node_00_ps.txt", "ps 0"),
    }
    assert rank_files(["std_log.txt"])[0] == {0: ("std_log.txt", "")}


def test_a_large_log_is_read_at_its_ends_with_every_state_line(tmp_path):
    logs = tmp_path / "artifacts" / "user_logs"
    logs.mkdir(parents=True)
    frames = [{"file": "train.py", "line": 9, "function": "<module>", "code": "comm.Recv(a)"}]
    stall = state(0, size=1, threads=[{"name": "MainThread", "main": True, "frames": frames}])
    with open(logs / "std_log_process_0.txt", "w") as log:
        for step in range(60_000):
            log.write(f"step {step} loss 0.{step % 97:02d} throughput 1234.5 samples/s\n")
        log.write(line(stall) + "\n")
        for step in range(60_000):
            log.write(f"eval {step} accuracy 0.{step % 89:02d}\n")
        log.write(traceback_text(0, "KeyError: 'label'"))
    read = read_log(logs / "std_log_process_0.txt", 0)
    assert read.skipped > 3_000_000 and MARK in read.text and "KeyError" in read.text
    found = diagnose_folder(tmp_path)
    assert found.verdict == "rank 0 failed: KeyError: 'label' at train.py:40 in <module>"
    assert any("large logs, read at their start and end" in note for note in found.notes)
    assert any(s.heading == "rank 0: stack, stalled 30 s" for s in found.sections)


def test_a_dump_that_is_not_plain_data_is_refused_without_running_it(tmp_path):
    marker = tmp_path / "ran"

    class Payload:
        def __reduce__(self):
            return (open, (str(marker), "w"))

    assert read_dump(pickle.dumps(Payload())) is None
    assert not marker.exists()
    plain = {"version": "2.10", "entries": [], "pg_config": {}, "pg_status": {}}
    assert read_dump(pickle.dumps(plain)) == plain
    assert read_dump(json.dumps(plain).encode()) == plain


def test_without_torch_the_dumps_are_read_and_the_analyser_is_said_not_to_run(
    tmp_path, monkeypatch
):
    real = flight_recorder.importlib.util.find_spec
    monkeypatch.setattr(
        flight_recorder.importlib.util,
        "find_spec",
        lambda name, *a: None if name == "torch" else real(name, *a),
    )
    found = flight_recorder.FoundDumps({0: {"entries": []}}, tmp_path, "trace_")
    (said,) = flight_recorder.torch_analysis(found)
    assert (
        said.startswith("torch is not installed here, so torch's analyser")
        and "pip install torch" in said
    )


# -- the magic -------------------------------------------------------------------------------
def test_diagnose_prints_the_verdict_on_top_then_the_details(ip, tmp_path):
    logs = tmp_path / "job" / "artifacts" / "user_logs"
    logs.mkdir(parents=True)
    (logs / "std_log_process_0.txt").write_text("step 1\n")
    (logs / "std_log_process_1.txt").write_text(traceback_text(1, "ValueError: x < 0"))
    result, captured = run_cell(ip, f"diagnose {tmp_path / 'job'} --process-count-per-node 1")
    assert result.success, result.error_in_exec
    bundle = captured.outputs[0].data
    plain = bundle["text/plain"].splitlines()
    assert plain[1] == (
        "rank 1 failed on node 1: ValueError: x < 0 at train.py:40 in <module>; rank 0 shows "
        "no error of its own"
    )
    assert "[node 1 rank 1]" in bundle["text/plain"]
    assert "&lt;module&gt;" in bundle["text/html"] and "<module>" not in bundle["text/html"]


@pytest.mark.parametrize(
    "make, words",
    [
        (lambda p: p / "missing", "no such folder"),
        (lambda p: (p / "a.txt").write_text("x") and p / "a.txt", "is a file, not a job's folder"),
        (lambda p: (p / "empty").mkdir() or p / "empty", "holds no rank logs"),
    ],
)
def test_diagnose_of_a_folder_it_cannot_read_says_how_to_fetch_one(ip, tmp_path, make, words):
    target = make(tmp_path)
    result, captured = run_cell(ip, f"diagnose {target}")
    assert not result.success
    error = result.error_in_exec
    assert isinstance(error, JobLogsError)
    shown = "\n".join(error._render_traceback_())
    assert words in shown and str(target) in shown
    assert "az ml job download --name JOB --all --download-path FOLDER" in shown
    assert "Traceback" not in captured.stdout + captured.stderr


def test_the_view_renders_text_and_html_alike_with_credentials_masked():
    sas = "https://acct.blob.core.windows.net/data/x.bin?sv=2022-11-02&sig=abcdEFGH1234secret"
    error = f"ValueError: <bad> reading {sas}"
    found = diagnose([RankLog(0, traceback_text(0, error), "std_log.txt")])
    view = DiagnosisView(found)
    assert view.text() == found.text()
    html = view._repr_html_()
    assert "ValueError: &lt;bad&gt;" in html
    assert "abcdEFGH1234secret" not in html + view.text() + found.verdict
    assert "acct.blob.core.windows.net" in view.text()


def test_open_mpi_4s_wording_names_the_first_rank_to_exit():
    # Open MPI 4's help text as mpirun prints it (orte/tools/orterun/help-orterun.txt,
    # [orterun:non-zero-exit]: "%s detected that one or more processes exited with non-zero
    # status, ... Process name: %s Exit code: %d"; a process is named [[jobid,1],rank])
    texts = {
        "user_logs/std_log_process_0.txt": "epoch 1\n",
        "user_logs/std_log_process_1.txt": "epoch 1\n",
        "user_logs/std_log_process_2.txt": "epoch 1\nassert failed: shapes\n",
        "user_logs/mpi_log.txt": (
            "-------------------------------------------------------\n"
            "mpirun detected that one or more processes exited with non-zero status, thus causing\n"
            "the job to be terminated. The first process to do so was:\n\n"
            "  Process name: [[22319,1],2]\n"
            "  Exit code:    1\n"
            "-------------------------------------------------------\n"
        ),
    }
    found = diagnose_texts(texts)
    assert found.culprits == [2]
    assert found.verdict == (
        "rank 2 failed: exited with code 1 (mpirun); ranks 0-1 show no error of their own"
    )


def test_what_a_person_reads_of_a_log_leaves_the_state_lines_out():
    from jupyter_distcomp.core.joblog.state import MARK, without_state_lines

    text = f"step 1\n{MARK}{{}}\nError: {MARK}{{}}\nstep 2"
    assert without_state_lines(text) == "step 1\nError:\nstep 2"
    assert without_state_lines("no mark here\n") == "no mark here\n"
