"""The ledger's ring file and its verdicts, without ranks: what a reader gets back from what a
writer wrote, and the words each kind of divergence gets."""

from __future__ import annotations

import os
import time
from dataclasses import replace

from jupyter_distcomp.rank_side import ledger, ledger_words
from jupyter_distcomp.rank_side.ledger import Ring, read_ring
from jupyter_distcomp.rank_side.ledger_words import COLLECTIVE, Entry


def call(seq, op="all_reduce", data="[4] float32", reduce="sum", running=False, line=3, **kw):
    now = time.time()
    return Entry(
        seq,
        now - 12,
        0.0 if running else now - 11,
        COLLECTIVE,
        kw.get("group", "default group"),
        op,
        data,
        reduce,
        kw.get("root", ""),
        "/tmp/ipykernel_42/123.py",
        line,
        "<module>",
    )


CELL = compile("", "/tmp/ipykernel_1/2.py", "exec")  # a cell's code object


def test_the_ring_keeps_the_newest_calls_and_their_end(tmp_path):
    path = str(tmp_path / "r.ledger")
    ring = Ring(path, capacity=4)
    for seq in range(1, 7):
        call = (COLLECTIVE, "default group", "all_reduce", "[4] float32", "sum", "", "")
        slot = ring.begin(seq, call, CELL, 5)
        if seq < 6:
            ring.end(slot)
    entries = read_ring(path)
    assert [e.seq for e in entries] == [3, 4, 5, 6], "the ring holds the newest 4"
    assert [e.running for e in entries] == [False, False, False, True]
    assert entries[-1].site() == "cell line 5"
    assert [e.seq for e in read_ring(path, last=2)] == [5, 6]
    assert [e.seq for e in read_ring(path, last=9)] == [3, 4, 5, 6]
    assert read_ring(str(tmp_path / "missing.ledger")) == []


def test_a_skipped_collective_names_who_waits_and_where_the_other_rank_is():
    ledgers = {r: [call(1), call(2, running=True)] for r in (0, 1, 3)}
    ledgers[2] = [call(1), call(2, op="barrier", data="", reduce="", running=True, line=5)]
    (verdict,) = ledger_words.verdicts(ledgers, 4)
    table = ledger_words.by_group(ledgers)["default group"][2]
    assert ledger_words.verdict_text(verdict, table) == (
        "all_reduce #2 ([4] float32, sum, default group): ranks 0-1, 3 wait since 12 s; "
        "rank 2 has not called it: it is in barrier #2 at cell line 5"
    )


def test_the_kernel_names_a_call_site_by_the_cell_that_defined_it():
    from ipykernel.compiler import get_file_name

    from jupyter_distcomp.local import cell_names
    from jupyter_distcomp.local.ranks import ledgers

    ledgers.name_cells()  # what a world does as it starts

    defining = "%%distcomp run t\ndef step():\n    dist.barrier()\n"
    cell_names.remember(defining, "Cell In[5]")
    cell_names.remember("%%distcomp run t\nstep()\n", "Cell In[9]")  # the cell that calls it
    rank_file = f"/tmp/ipykernel_42/{os.path.basename(get_file_name(defining))}"
    calls = {r: [call(1, running=True)] for r in (0, 1)}
    barrier = call(1, op="barrier", data="", reduce="", running=True)
    calls[2] = [replace(barrier, file=rank_file)]
    (verdict,) = ledger_words.verdicts(calls, 3)
    assert verdict.text().endswith(
        "rank 2 has not called it: it is in barrier #1 at In [5], line 3"
    )
    assert calls[0][0].site() == "cell line 3", "a cell the kernel did not send"


def test_a_rank_names_call_sites_by_the_labels_its_ipython_ran_the_cells_under():
    from jupyter_distcomp.rank_side.ledger_hooks import cell_namer

    named = cell_namer({"3266.py": "5", "1177.py": ""})
    assert named("/tmp/x/tmp/ipykernel_8/3266.py", 7) == "In [5], line 7"
    assert named("/tmp/ipykernel_9/3266.py", 2) == "In [5], line 2", "another rank's file"
    assert named("/tmp/ipykernel_8/1177.py", 7) == "", "a cell without the notebook's number"
    assert named("/tmp/ipykernel_8/99.py", 7) == ""


def test_a_shape_mismatch_names_both_sides_and_who_went_on():
    ledgers = {r: [call(1, data="[4] float32")] for r in (0, 1)}
    ledgers |= {r: [call(1, data="[5] float32", running=True)] for r in (2, 3)}
    (verdict,) = ledger_words.verdicts(ledgers, 4)
    text = ledger_words.verdict_text(verdict, ledger_words.by_group(ledgers)["default group"][1])
    assert text.startswith(
        "all_reduce #1 (sum, default group): ranks 0-1 [4] float32, ranks 2-3 [5] float32"
    )
    assert "ranks 0-1 went on (their result may be wrong); ranks 2-3 wait since 12 s" in text


def test_a_rank_that_never_came_is_missing_with_what_it_does():
    ledgers = {0: [call(1, running=True)], 1: [call(1, running=True)], 2: []}
    (verdict,) = ledger_words.verdicts(ledgers, 3, busy={0, 1})
    assert verdict.ranks == [2]
    assert verdict.text().endswith("rank 2 has not called it: its cell has ended")


def test_a_rank_that_raised_or_sits_at_a_prompt_is_said_so_not_to_have_gone_on():
    ledgers = {0: [call(1, data="[4] float32")], 1: [call(1, data="[4] float32")]}
    ledgers |= {r: [call(1, data="[5] float32", running=True)] for r in (2, 3)}
    ledgers[4] = []
    besides = {0: "raised an error", 4: "is stopped at a breakpoint prompt"}
    (verdict,) = ledger_words.verdicts(ledgers, 5, busy={1, 2, 3, 4}, besides=besides)
    table = ledger_words.by_group(ledgers)["default group"][1]
    text = ledger_words.verdict_text(verdict, table, besides)
    assert "rank 0 raised an error; rank 1 went on (their result may be wrong)" in text, text
    assert "went on" not in text.split("rank 1")[0], text
    assert "rank 4 has not called it: it is stopped at a breakpoint prompt" in text, text
    assert "runs other code" not in text


def test_agreeing_ranks_and_a_slow_collective_give_no_verdict():
    assert ledger_words.verdicts({r: [call(1), call(2)] for r in range(4)}, 4) == []
    everyone_in = {r: [call(1, running=True)] for r in range(4)}
    assert ledger_words.verdicts(everyone_in, 4) == []


def test_groups_are_aligned_separately():
    pair = "group 1 (ranks 0, 2)"
    ledgers = {
        0: [call(1), call(1, op="broadcast", group=pair, root="root 0", running=True)],
        1: [call(1)],
        2: [call(1), call(1, op="broadcast", group=pair, root="root 2", running=True)],
    }
    (verdict,) = ledger_words.verdicts(ledgers, 3)
    assert verdict.group == pair
    assert "rank 0 root 0, rank 2 root 2" in verdict.text()


def test_a_flight_recorder_dump_joins_the_ledger(tmp_path):
    """The shape torch's NCCL Flight Recorder dumps (``_dump_nccl_trace_json``), as the
    kernel reads it beside a rank's ledger: NCCL's calls with their GPU-side state, gloo's
    left out (the ledger's own rows record them)."""
    import json

    entry = {
        "collective_seq_id": 5,
        "profiling_name": "nccl:all_reduce",
        "process_group": ("0", "default_pg"),
        "input_sizes": [[4]],
        "input_dtypes": ["Float"],
        "state": "started",
        "time_created_ns": 1_000_000_000,
        "time_discovered_started_ns": 2_000_000_000,
        "pg_id": 0,
        "time_discovered_completed_ns": None,
        "is_p2p": False,
        "frames": [
            {"name": "all_reduce", "filename": "/x/torch/distributed/c10d.py", "line": 9},
            {"name": "step", "filename": "/work/train.py", "line": 12},
        ],
    }
    path = tmp_path / "rank-0.ledger"
    Ring(str(path))
    gloo = {**entry, "profiling_name": "gloo:all_reduce", "state": "scheduled"}
    dump = {"entries": [entry, gloo], "pg_config": {"0": {"ranks": "[0, 1]"}}}
    (tmp_path / "rank-0.ledger.torch").write_text(json.dumps(dump))
    (read,) = ledger.read_ledger(str(path))
    assert (read.seq, read.op, read.data, read.group, read.gpu) == (
        5,
        "all_reduce",
        "[4] float32",
        "nccl group 0 (ranks 0, 1)",
        "started",
    )
    assert read.running and read.started == 1.0 and read.site() == "train.py:12 in step"
    assert read.members == (0, 1)
    # a group torch's record gives no ranks for: those of the ledger's group of that name
    ring = Ring(str(path))
    ring.begin(1, (COLLECTIVE, "group 3 (ranks 0, 2)", "barrier", "", "", "", ""), CELL, 2)
    third = {**entry, "process_group": ("3", "undefined")}
    (tmp_path / "rank-0.ledger.torch").write_text(json.dumps({"entries": [third]}))
    assert [e.group for e in ledger.read_ledger(str(path))] == [
        "group 3 (ranks 0, 2)",
        "nccl group 3 (ranks 0, 2)",
    ]


def test_a_non_blocking_call_runs_until_complete_and_blocks_only_in_a_wait(tmp_path):
    path = str(tmp_path / "r.ledger")
    ring = Ring(path)
    slot = ring.begin(
        7, (COLLECTIVE, "COMM_WORLD", "Iallreduce", "[3] float64", "sum", "", "nb"), CELL, 3
    )
    (posted,) = read_ring(path)
    assert posted.posted and posted.running and not posted.blocked, "posted: the rank goes on"
    ring.wait(slot, 7)
    (waited,) = read_ring(path)
    assert waited.running and waited.blocked, "a Wait for it: the rank waits in it"
    ring.end(slot, 7)
    (done,) = read_ring(path)
    assert not done.running and not done.blocked and done.finished >= done.started


def test_a_late_end_leaves_a_slot_the_ring_gave_to_a_newer_call(tmp_path):
    path = str(tmp_path / "r.ledger")
    ring = Ring(path, capacity=2)
    call = (COLLECTIVE, "default group", "all_reduce", "[4] float32", "sum", "", "nb")
    first = ring.begin(1, call, CELL, 3)
    ring.begin(2, call, CELL, 4)
    again = ring.begin(3, call, CELL, 5)  # slot of call 1, reused
    assert again == first
    ring.end(first, 1)  # call 1's request completes late
    ring.wait(first, 1)
    assert [(e.seq, e.running) for e in read_ring(path)] == [(2, True), (3, True)]


def test_a_rank_with_only_a_posted_call_is_not_said_to_be_in_it():
    posted = call(1, op="Ibarrier", data="", reduce="", running=True)
    posted.posted = True
    ledgers = {0: [call(1, running=True)], 1: [call(1, running=True)], 2: [posted]}
    ledgers[2][0].group = "COMM_SELF (ranks 2)"  # its own group: no verdict there
    (verdict,) = ledger_words.verdicts(ledgers, 3, busy={0, 1, 2})
    assert verdict.missing == {2: "it runs other code"}


def test_the_torch_wrapper_reads_each_argument_form_and_the_callers_line(tmp_path, monkeypatch):
    """torch.distributed's wrapper on a function with all_reduce's signature: group, op and
    async_op by keyword or by position, the call site the caller's own line."""
    import os
    import sys
    import types

    import torch
    import torch.distributed as dist

    from jupyter_distcomp.rank_side import ledger_hooks, ledger_torch

    def all_reduce(tensor, op=dist.ReduceOp.SUM, group=None, async_op=False):
        return None

    fake = types.SimpleNamespace(__file__=dist.__file__, GroupMember=dist.GroupMember)
    fake.all_reduce = all_reduce
    monkeypatch.setattr(ledger_torch, "core", ledger_hooks)
    monkeypatch.setattr(ledger_hooks.STATE, "ring", Ring(str(tmp_path / "r.ledger")))
    monkeypatch.setattr(ledger_hooks.STATE, "seqs", {})
    wrapped = ledger_torch._Torch(fake).wrap("all_reduce", "tensor", COLLECTIVE)
    line = sys._getframe().f_lineno
    wrapped(torch.ones(4))
    wrapped(torch.ones(2, 3, dtype=torch.float64), op=dist.ReduceOp.MAX)
    wrapped(torch.ones(4), dist.ReduceOp.MIN, None, True)  # async: no work returned
    entries = read_ring(str(tmp_path / "r.ledger"))
    assert [(e.seq, e.op, e.data, e.reduce, e.group) for e in entries] == [
        (1, "all_reduce", "[4] float32", "sum", "default group"),
        (2, "all_reduce", "[2, 3] float64", "max", "default group"),
        (3, "all_reduce", "[4] float32", "min", "default group"),
    ]
    assert [e.line for e in entries] == [line + 1, line + 2, line + 3]
    assert {os.path.basename(e.file) for e in entries} == {"test_collectives_units.py"}
    assert not any(e.running for e in entries)


def test_collectives_say_each_nccl_calls_state_on_the_gpu():
    from jupyter_distcomp.local.inspect.collectives import report

    def nccl(rank: int, seq: int, gpu: str) -> Entry:
        done = 2.0 if gpu == "completed" else 0.0
        entry = Entry(
            seq, 1.0, done, COLLECTIVE, "nccl group 0 (ranks 0, 1)", "all_reduce", "[4] float32"
        )
        entry.gpu = gpu
        return entry

    ledgers = {0: [nccl(0, 1, "completed"), nccl(0, 2, "started")], 1: [nccl(1, 1, "completed")]}
    text = report("t", ledgers, 2, {0, 1}, 10).text()
    assert "ranks 0-1 done (ranks 0-1 completed on the GPU)" in text, text
    assert "rank 0 waits since" in text and "(rank 0 running on the GPU)" in text, text
    assert "rank 1 has not called it" in text, text


RECORD_FAILS = """\
import os, sys, time
from jupyter_distcomp.rank_side import ledger_hooks, torch_record
torch_record.FLIGHT_EVERY = 0.1
ledger_hooks.install(sys.argv[1])
os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=sys.argv[2], RANK="0", WORLD_SIZE="1")
import torch, torch.distributed as dist
c10d = torch._C._distributed_c10d
def fails(*args):
    raise RuntimeError("no record here")
for name in torch_record._DUMPS:
    if hasattr(c10d, name[0]):
        setattr(c10d, name[0], fails)
dist.init_process_group("gloo")
dist.all_reduce(torch.ones(2))
time.sleep(1.0)
print("record read:", ledger_hooks.STATE.torch_record)  # NCCL's calls back to the ledger
dist.destroy_process_group()
"""


def test_a_record_torch_cannot_dump_is_said_once_on_the_ranks_stderr(tmp_path):
    import os
    import socket
    import subprocess
    import sys
    from pathlib import Path

    root = str(Path(__file__).resolve().parents[1])
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    done = subprocess.run(
        [sys.executable, "-c", RECORD_FAILS, str(tmp_path / "r.ledger"), str(port)],
        capture_output=True,
        text=True,
        timeout=120,
        env={
            **os.environ,
            "PYTHONPATH": root + os.pathsep + os.environ.get("PYTHONPATH", ""),
        },
    )
    assert done.returncode == 0, done.stderr
    said = [x for x in done.stderr.splitlines() if "cannot be read" in x]
    assert said and len(said) == len(set(said)), done.stderr  # each failing dump once
    assert "RuntimeError: no record here" in said[0], done.stderr
    assert "record read: False" in done.stdout, "the ledger records NCCL's calls itself"
    assert [r.op for r in ledger.read_ledger(str(tmp_path / "r.ledger"))] == ["all_reduce"]


def test_an_nccl_groups_collectives_are_left_to_torchs_record_outside_check_mode(
    tmp_path, monkeypatch
):
    """The wrapper's decision per group: a gloo group's all_reduce is recorded in the ledger;
    one on a group whose backend is NCCL is not (torch's record gives its row, without the
    call site), unless check mode is on; its point-to-point calls stay recorded."""
    import json
    import types
    import weakref

    import torch
    import torch.distributed as dist

    from jupyter_distcomp.rank_side import ledger_hooks, ledger_torch

    class Group:  # a process group as the wrapper sees it: an object with a weak reference
        pass

    gloo, nccl = Group(), Group()

    def all_reduce(tensor, op=dist.ReduceOp.SUM, group=None, async_op=False):
        return None

    def send(tensor, dst=None, group=None, tag=0):
        return None

    fake = types.SimpleNamespace(__file__=dist.__file__, GroupMember=dist.GroupMember)
    fake.all_reduce, fake.send = all_reduce, send
    fake.get_backend = lambda group: {id(gloo): "gloo"}[id(group)]
    fake.get_process_group_ranks = lambda group: [0, 1]
    fake.distributed_c10d = types.SimpleNamespace(
        _get_process_group_name=lambda group: "1" if group is gloo else "2"
    )
    path = str(tmp_path / "rank-0.ledger")
    monkeypatch.setattr(ledger_torch, "core", ledger_hooks)
    monkeypatch.setattr(ledger_hooks.STATE, "ring", Ring(path))
    monkeypatch.setattr(ledger_hooks.STATE, "seqs", {})
    monkeypatch.setattr(ledger_hooks.STATE, "check", False)
    monkeypatch.setattr(ledger_hooks.STATE, "torch_record", True)
    monkeypatch.setenv("TORCH_FR_BUFFER_SIZE", "2000")
    recorder = ledger_torch._Torch(fake)
    recorder.nccl[id(nccl)] = (weakref.ref(nccl), True)  # get_backend said "nccl"
    wrapped = recorder.wrap("all_reduce", "tensor", COLLECTIVE)
    wrapped_send = recorder.wrap("send", "tensor", ledger_words.P2P)
    wrapped(torch.ones(4), group=gloo)
    wrapped(torch.ones(4), group=nccl)
    wrapped(torch.ones(3), dist.ReduceOp.SUM, nccl)
    wrapped_send(torch.ones(2), 1, nccl)
    assert recorder.nccl[id(gloo)][1] is False, "gloo's backend, asked once and kept"
    assert [(e.op, e.data, e.group) for e in read_ring(path)] == [
        ("all_reduce", "[4] float32", "group 1 (ranks 0, 1)"),
        ("send", "[2] float32", "group 2 (ranks 0, 1)"),
    ]
    checked = []
    recorder.check = lambda label, members, sig, where, wait=True: checked.append(sig)
    ledger_hooks.STATE.check = True  # check mode: every group's calls are compared, NCCL's too
    wrapped(torch.ones(5), group=nccl)
    assert checked == [("all_reduce", "[5] float32", "sum", "")]
    assert read_ring(path)[-1].group == "group 2 (ranks 0, 1)"
    # the NCCL calls the ledger left out: torch's record of them, as the rank dumps it
    dump = {
        "entries": [
            {
                "collective_seq_id": seq,
                "profiling_name": "nccl:all_reduce",
                "process_group": ("2", "undefined"),
                "input_sizes": [[size]],
                "input_dtypes": ["Float"],
                "state": "completed",
                "time_created_ns": 1_000_000_000,
                "time_discovered_completed_ns": 2_000_000_000,
                "is_p2p": False,
            }
            for seq, size in ((1, 4), (2, 3))
        ],
        "pg_config": {"2": {"ranks": "[0, 1]"}},
    }
    (tmp_path / "rank-0.ledger.torch").write_text(json.dumps(dump))
    rows = [(e.op, e.data, e.group) for e in ledger.read_ledger(path) if e.gpu]
    assert rows == [
        ("all_reduce", "[4] float32", "nccl group 2 (ranks 0, 1)"),
        ("all_reduce", "[3] float32", "nccl group 2 (ranks 0, 1)"),
    ]


def test_a_hang_in_an_nccl_call_is_named_from_torchs_record():
    """With the ledger leaving NCCL's collectives to torch's record, a rank that waits in one
    while another never called it gets its verdict from torch's rows alone."""

    def nccl(seq: int, gpu: str) -> Entry:
        done = 2.0 if gpu == "completed" else 0.0
        entry = Entry(
            seq,
            time.time() - 9,
            done,
            COLLECTIVE,
            "nccl group 0 (ranks 0, 1)",
            "all_reduce",
            "[4] float32",
        )
        entry.gpu = gpu
        return entry

    ledgers = {0: [nccl(1, "completed"), nccl(2, "started")], 1: [nccl(1, "completed")]}
    (verdict,) = ledger_words.verdicts(ledgers, 2, busy={0, 1})
    table = ledger_words.by_group(ledgers)[verdict.group][verdict.seq]
    assert ledger_words.verdict_text(verdict, table) == (
        "all_reduce #2 ([4] float32, nccl group 0 (ranks 0, 1)): rank 0 waits since 9 s "
        "(rank 0 running on the GPU); rank 1 has not called it: it runs other code "
        "(its last call here: all_reduce #1)"
    )


def test_the_verdict_never_says_the_ranks_agree_above_a_row_that_diverges():
    """Rank 1's ledger is damaged (read as empty) or cut short: no rank waits, and the
    verdict says the ledgers differ, not that the ranks agree (issue 47, item 13)."""
    from jupyter_distcomp.local.inspect.collectives import DIVERGES, report

    idle = {0: "idle", 1: "idle"}
    for ledgers in ({0: [call(1), call(2)], 1: []}, {0: [call(1), call(2)], 1: [call(1)]}):
        text = report("t", ledgers, 2, set(), 10, idle).text()
        assert DIVERGES in text, text
        assert "agree" not in text, text
        assert "the ranks' ledgers do not hold the same calls" in text, text
    text = report("t", {0: [call(1), call(2)], 1: []}, 2, set(), 10, idle).text()
    assert "rank 1: no call in its ledger (a damaged ledger counts as empty" in text, text
    agreeing = report("t", {0: [call(1)], 1: [call(1)]}, 2, set(), 10, idle).text()
    assert "every group's ranks agree on their calls" in agreeing
