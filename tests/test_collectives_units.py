"""The ledger's ring file and its verdicts, without ranks: what a reader gets back from what a
writer wrote, and the words each kind of divergence gets."""

from __future__ import annotations

import time

from jupyter_distcomp.rank_side import ledger
from jupyter_distcomp.rank_side.ledger import COLLECTIVE, Entry, Ring, read_ring


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


def test_the_ring_keeps_the_newest_calls_and_their_end(tmp_path):
    path = str(tmp_path / "r.ledger")
    ring = Ring(path, capacity=4)
    for seq in range(1, 7):
        text = ledger.encode(COLLECTIVE, "default group", "all_reduce", "[4] float32", "sum", "")
        slot = ring.begin(seq, text, "/tmp/ipykernel_1/2.py", 5, "<module>")
        if seq < 6:
            ring.end(slot)
    entries = read_ring(path)
    assert [e.seq for e in entries] == [3, 4, 5, 6], "the ring holds the newest 4"
    assert [e.running for e in entries] == [False, False, False, True]
    assert entries[-1].site() == "cell line 5"
    assert read_ring(str(tmp_path / "missing.ledger")) == []


def test_a_skipped_collective_names_who_waits_and_where_the_other_rank_is():
    ledgers = {r: [call(1), call(2, running=True)] for r in (0, 1, 3)}
    ledgers[2] = [call(1), call(2, op="barrier", data="", reduce="", running=True, line=5)]
    (verdict,) = ledger.verdicts(ledgers, 4)
    table = ledger.by_group(ledgers)["default group"][2]
    assert ledger.verdict_text(verdict, table) == (
        "all_reduce #2 ([4] float32, sum, default group): ranks 0-1, 3 wait since 12 s; "
        "rank 2 has not called it: it is in barrier #2 at cell line 5"
    )


def test_a_shape_mismatch_names_both_sides_and_who_went_on():
    ledgers = {r: [call(1, data="[4] float32")] for r in (0, 1)}
    ledgers |= {r: [call(1, data="[5] float32", running=True)] for r in (2, 3)}
    (verdict,) = ledger.verdicts(ledgers, 4)
    text = ledger.verdict_text(verdict, ledger.by_group(ledgers)["default group"][1])
    assert text.startswith(
        "all_reduce #1 (sum, default group): ranks 0-1 [4] float32, ranks 2-3 [5] float32"
    )
    assert "ranks 0-1 went on (their result may be wrong); ranks 2-3 wait since 12 s" in text


def test_a_rank_that_never_came_is_missing_with_what_it_does():
    ledgers = {0: [call(1, running=True)], 1: [call(1, running=True)], 2: []}
    (verdict,) = ledger.verdicts(ledgers, 3, busy={0, 1})
    assert verdict.ranks == [2]
    assert verdict.text().endswith("rank 2 has not called it: its cell has ended")


def test_agreeing_ranks_and_a_slow_collective_give_no_verdict():
    assert ledger.verdicts({r: [call(1), call(2)] for r in range(4)}, 4) == []
    everyone_in = {r: [call(1, running=True)] for r in range(4)}
    assert ledger.verdicts(everyone_in, 4) == []


def test_groups_are_aligned_separately():
    pair = "group 1 (ranks 0, 2)"
    ledgers = {
        0: [call(1), call(1, op="broadcast", group=pair, root="root 0", running=True)],
        1: [call(1)],
        2: [call(1), call(1, op="broadcast", group=pair, root="root 2", running=True)],
    }
    (verdict,) = ledger.verdicts(ledgers, 3)
    assert verdict.group == pair
    assert "rank 0 root 0, rank 2 root 2" in verdict.text()


def test_a_flight_recorder_dump_joins_the_ledger(tmp_path):
    """The shape torch's NCCL Flight Recorder dumps (``_dump_nccl_trace``), as the kernel
    reads it beside a rank's ledger."""
    import pickle

    entry = {
        "collective_seq_id": 5,
        "profiling_name": "nccl:all_reduce",
        "process_group": ("0", "default_pg"),
        "input_sizes": [[4]],
        "input_dtypes": ["Float"],
        "state": "started",
        "time_created_ns": 1_000_000_000,
        "time_discovered_started_ns": 2_000_000_000,
        "time_discovered_completed_ns": None,
        "is_p2p": False,
        "frames": [
            {"name": "all_reduce", "filename": "/x/torch/distributed/c10d.py", "line": 9},
            {"name": "step", "filename": "/work/train.py", "line": 12},
        ],
    }
    path = tmp_path / "rank-0.ledger"
    Ring(str(path))
    (tmp_path / "rank-0.ledger.nccl").write_bytes(pickle.dumps({"entries": [entry]}))
    (read,) = ledger.read_ledger(str(path))
    assert (read.seq, read.op, read.data, read.group) == (
        5,
        "all_reduce",
        "[4] Float",
        "nccl group 0",
    )
    assert read.running and read.started == 2.0 and read.site() == "train.py:12 in step"
