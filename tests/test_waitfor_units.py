"""The wait-for graph and the hang patterns on hand-made ledgers, without ranks: each deadlock
shape is named with its chain, matched calls and ended peers get their words, and the
verdict never says the ranks agree while a cycle exists."""

from __future__ import annotations

import time

from jupyter_distcomp.contracts import RankState
from jupyter_distcomp.core.hangs import hang_lines
from jupyter_distcomp.core.waitfor import peers
from jupyter_distcomp.local.inspect.collectives import report
from jupyter_distcomp.rank_side.ledger_words import COLLECTIVE, P2P, Entry

CELL = "/tmp/ipykernel_1/2.py"


def p2p(root, op="Send", group="COMM_WORLD", data="[4000000] float64", running=True, **kw):
    now = time.time()
    return Entry(
        kw.get("seq", 1),
        now - 6,
        0.0 if running else now - 5,
        P2P,
        group,
        op,
        data,
        "",
        root,
        CELL,
        kw.get("line", 3),
        "<module>",
        kw.get("posted", False),
    )


def coll(op="Barrier", group="COMM_WORLD", seq=1, running=True, bucket=False, data=""):
    now = time.time()
    return Entry(
        seq,
        now - 5,
        0.0 if running else now - 4,
        COLLECTIVE,
        group,
        op,
        data,
        "sum" if data else "",
        "",
        CELL,
        7,
        "<module>",
        False,
        bucket=bucket,
    )


def test_send_send_is_a_deadlock_with_its_chain_and_fix():
    ledgers = {0: [p2p("to rank 1")], 1: [p2p("to rank 0")], 2: []}
    (line,) = hang_lines(ledgers, 3, {0, 1})
    assert line.startswith(
        "deadlock: rank 0 waits to send to rank 1, which waits to send to rank 0 (COMM_WORLD); "
        "ranks 0-1 in Send ([4000000] float64) at cell line 3, since 6 s. Fix: "
    ), line
    assert "Sendrecv" in line


def test_recv_recv_and_an_ssend_ring_of_three():
    (line,) = hang_lines({0: [p2p("from rank 1", "Recv")], 1: [p2p("from rank 0", "Recv")]}, 2)
    assert line.startswith("deadlock: rank 0 waits to receive from rank 1, which waits to receive")
    ring = {r: [p2p(f"to rank {(r + 1) % 3}", "Ssend")] for r in range(3)}
    (line,) = hang_lines(ring, 3, {0, 1, 2})
    assert (
        "rank 0 waits to send to rank 1, which waits to send to rank 2, which waits to send "
        "to rank 0 (COMM_WORLD)" in line
    )
    assert "ranks 0-2 in Ssend" in line


def test_a_send_that_meets_its_receive_or_a_completed_eager_send_is_no_wait():
    assert hang_lines({0: [p2p("to rank 1")], 1: [p2p("from rank 0", "Recv")]}, 2) == []
    any_source = {0: [p2p("to rank 1")], 1: [p2p("from any rank", "Recv")]}
    assert hang_lines(any_source, 2) == []
    eager = {
        0: [p2p("to rank 1", running=False), p2p("from rank 1", "Recv", seq=2)],
        1: [p2p("to rank 0", running=False), p2p("from rank 0", "Recv", seq=2)],
    }
    (line,) = hang_lines(eager, 2)
    assert "rank 0 waits to receive from rank 1, which waits to receive from rank 0" in line
    posted = {
        0: [p2p("to rank 1", "Isend", posted=True), p2p("from rank 1", "Recv", seq=2)],
        1: [p2p("to rank 0", "Isend", posted=True), p2p("from rank 0", "Recv", seq=2)],
    }
    assert hang_lines(posted, 2) == [], "a posted Isend meets the peer's Recv"


def test_tags_must_fit():
    ledgers = {0: [p2p("to rank 1, tag 5")], 1: [p2p("from rank 0, tag 6", "Recv")]}
    (line,) = hang_lines(ledgers, 2)
    assert (
        "rank 0 waits to send to rank 1 (tag 5), which waits to receive from rank 0 (tag 6)" in line
    )


def test_sub_communicator_peers_are_mapped_to_world_ranks():
    group = "comm 2 (ranks 1, 3)"
    ledgers = {1: [p2p("to rank 1", group=group)], 3: [p2p("to rank 0", group=group)]}
    (line,) = hang_lines(ledgers, 4)
    assert "deadlock: rank 1 waits to send to rank 3, which waits to send to rank 1 (comm 2" in line
    assert peers(p2p("to rank 1, from rank 0", "Sendrecv", group=group)) == [
        ("send", 3, 0),
        ("recv", 1, None),
    ]


def test_a_peer_that_ended_its_cell_exited_or_sits_in_a_collective_is_named():
    ledgers = {0: [p2p("from rank 1", "recv", data="object")], 1: []}
    (line,) = hang_lines(ledgers, 2, {0})
    assert line.startswith("rank 0 waits to receive from rank 1, whose cell has ended (COMM_WORLD)")
    assert "rank 0 in recv (object)" in line
    (line,) = hang_lines(ledgers, 2, {0}, {0: RankState.BUSY, 1: RankState.DEAD})
    assert "rank 0 waits to receive from rank 1, which has exited" in line
    mixed = {0: [p2p("from rank 1", "recv", data="object")], 1: [coll()], 2: [coll()]}
    lines = hang_lines(mixed, 3, {0, 1, 2})
    assert lines[0].startswith(
        "deadlock: rank 0 waits to receive from rank 1, which waits in Barrier #1 for rank 0"
    ), lines
    assert "rank 0 is in a point-to-point call while the others are in the collective" in lines[1]


def test_a_rank_that_computes_is_no_deadlock():
    assert hang_lines({0: [p2p("from rank 1", "Recv")], 1: []}, 2, {0, 1}) == []


def test_the_patterns_ddp_uneven_inputs_and_a_debugger_prompt():
    ddp = {
        r: [coll("all_reduce", "default group", 1, False, True, "[5] float32")] for r in range(3)
    }
    for r in (0, 1):
        ddp[r].append(coll("all_reduce", "default group", 2, True, True, "[5] float32"))
    (line,) = hang_lines(ddp, 3, {0, 1})
    assert "rank 2 has not called it: its cell has ended" in line
    assert "Uneven inputs under DDP" in line and "model.join()" in line and "drop_last=True" in line
    at_prompt = {0: [coll()], 1: []}
    states = {0: RankState.BUSY, 1: RankState.DEBUGGING}
    (line,) = hang_lines(at_prompt, 2, {0, 1}, states)
    assert "rank 1 is at a debugger prompt" in line


def test_the_verdict_never_says_the_ranks_agree_while_a_cycle_exists():
    ledgers = {0: [p2p("to rank 1")], 1: [p2p("to rank 0")]}
    text = report("t", ledgers, 2, {0, 1}, 10).text()
    assert "agree" not in text
    assert "deadlock: rank 0 waits to send to rank 1" in text
    assert "rank 0: Send #1 ([4000000] float64, to rank 1, COMM_WORLD) at cell line 3" in text
    objects = report("t", {0: [p2p("from rank 1", "recv", data="object")]}, 2, {0}, 10).text()
    assert "recv #1 (object, from rank 1, COMM_WORLD)" in objects


def test_ranks_in_different_collectives_are_told_to_keep_one_order():
    ledgers = {0: [coll("all_reduce", "default group", 5, data="[4] float32")], 1: [coll()]}
    ledgers[1][0].group = "default group"
    ledgers[1][0].seq = 5
    (line,) = hang_lines(ledgers, 2, {0, 1})
    assert "rank 1 has not called it: it is in Barrier #5 at cell line 7" in line, line
    assert (
        "The ranks are in different collectives of default group. Fix: every rank of a group "
        "must call its collectives in the same order" in line
    )


def test_a_non_blocking_call_is_a_wait_while_a_wait_waits_for_it():
    waited = {r: [p2p(f"from rank {1 - r}", "Irecv", posted=True)] for r in (0, 1)}
    assert hang_lines(waited, 2, {0, 1}) == [], "posted, nobody waits yet"
    for r in (0, 1):
        waited[r][0].finished = -(time.time() - 3)  # a Wait for it since 3 s
    (line,) = hang_lines(waited, 2, {0, 1})
    assert line.startswith("deadlock: rank 0 waits to receive from rank 1, which waits")


def test_an_exchange_needs_both_its_peers():
    exchange = {
        0: [p2p("to rank 1, from rank 1", "Sendrecv")],
        1: [p2p("to rank 0, from rank 0", "Sendrecv")],
    }
    assert hang_lines(exchange, 2, {0, 1}) == [], "each meets the other: no wait"
    other_tag = {
        0: [p2p("to rank 1, from rank 1", "Sendrecv")],
        1: [p2p("from rank 0, tag 7", "Recv")],
    }
    (line,) = hang_lines(other_tag, 2, {0, 1})
    assert (
        "deadlock: rank 0 waits to send to rank 1, which waits to receive from rank 0 (tag 7)"
        in line
    )
