"""Point-to-point deadlocks and known hang patterns, named on real ranks: 3 mpi4py ranks and 2
torch.distributed ranks on gloo, each deadlock shape made for real in a cell, then read by
`%distcomp collectives`, `where`, `compare`, `interrupt`, the hang notice and the time-out.

A rank's helper thread ends each deadlock once its report is read (it makes the missing
matching call outside the ledger when a flag file appears, or after some seconds), so the
two worlds serve every test without a restart.
"""

from __future__ import annotations

import time

import pytest

from .ranks_support import MPI_SPEC, TORCH_SPEC, define, label, loaded_shell, run_cell
from .waiting import wait_for

pytestmark = pytest.mark.slow

RESCUE = """\
import os, threading, time
def rescue(action, flag=None, after=None):
    started = time.time()
    def run():
        while not ((flag and os.path.exists(flag)) or (after and time.time() - started > after)):
            time.sleep(0.05)
        action()
    threading.Thread(target=run, daemon=True).start()
"""
MPI_INIT = "%%distcomp run w\nfrom mpi4py import MPI\nimport numpy as np\ncomm = MPI.COMM_WORLD\n"
MPI_INIT += "rank = comm.rank\nRecv = MPI.Comm.Recv.__wrapped__\nSend = MPI.Comm.Send.__wrapped__\n"
MPI_INIT += RESCUE
TORCH_INIT = (
    "%%distcomp run g\nimport datetime, torch, torch.distributed as dist\n"
    "if not dist.is_initialized():\n    dist.init_process_group('gloo')\n"
    "rank = dist.get_rank()\n" + RESCUE
)


@pytest.fixture(scope="module")
def ip():
    with loaded_shell() as shell:
        define(shell, "w", MPI_SPEC, nodes=1, per_node=3)
        define(shell, "g", TORCH_SPEC, nodes=1, per_node=2)
        for init in (MPI_INIT, TORCH_INIT):
            cell = run_cell(shell, init)
            assert cell.ok, cell.traceback_text()
        yield shell
        run_cell(shell, "%distcomp stop")


def settle(ip, name: str, seconds: float = 20) -> None:
    """Until the world runs a cell again (a rescued cell may still be ending)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if run_cell(ip, f"%%distcomp run {name}\npass").ok:
            return
        time.sleep(0.5)
    raise AssertionError(f"{name} stayed busy")


def hang(ip, name: str, code: str, blocked: list[int], ended: tuple[int, ...] = ()) -> None:
    """Run ``code`` in the background until ``blocked`` wait in the calls their ledgers show
    and the ranks ``ended`` have ended their cell."""
    from jupyter_distcomp.contracts import RankState
    from jupyter_distcomp.local.ranks.backend import get_backend
    from jupyter_distcomp.local.ranks.ledgers import blocked_ranks

    started = run_cell(ip, f"%%distcomp run {name} --background\n{code}")
    assert started.ok, started.traceback_text()
    world = get_backend().world(name)

    def hung() -> bool:
        ended_ok = all(world.ranks[r].state == RankState.IDLE for r in ended)
        return ended_ok and blocked_ranks(world, blocked) == blocked

    wait_for(hung, 60, f"ranks {blocked} of {name} blocked, {list(ended)} ended", every=0.1)


def release(ip, name: str, flag) -> None:
    flag.write_text("")
    run_cell(ip, f"%distcomp wait {name}")
    settle(ip, name)


def test_send_send_of_large_messages_is_named_in_collectives_where_compare_interrupt(ip, tmp_path):
    flag = tmp_path / "go"
    # the sends are in a function of an earlier cell: the chain names that cell
    defining = label(ip)
    send = "%%distcomp run w\ndef send_big(peer):\n    comm.Send(np.ones(4_000_000), dest=peer)"
    assert run_cell(ip, send, store_history=True).ok
    hang(
        ip,
        "w",
        f"if rank < 2:\n"
        f"    peer = 1 - rank\n"
        f"    rescue(lambda: Recv(comm, np.empty(4_000_000), source=peer), flag={str(flag)!r})\n"
        f"    send_big(peer)\n"
        f"while rank == 2 and not os.path.exists({str(flag)!r}):\n"
        f"    MPI.COMM_SELF.Barrier()\n"
        f"    time.sleep(0.01)",
        blocked=[0, 1],
    )
    try:
        text = run_cell(ip, "%distcomp collectives w").stdout
        chain = (
            "deadlock: rank 0 waits to send to rank 1, which waits to send to rank 0 (COMM_WORLD)"
        )
        assert chain in text, text
        sends = f"ranks 0-1 in Send ([4000000] float64) at {defining}, line 3, since"
        assert sends in text, text
        assert "agree" not in text
        where = run_cell(ip, "%distcomp where w").stdout
        assert chain in where and sends in where, where

        def moved() -> str:  # a later look, once rank 2 has moved since the one before
            text = run_cell(ip, "%distcomp where w").stdout
            return text if "rank 2: progressed" in text else ""

        again = wait_for(moved, 30, "rank 2 to progress between two looks", every=0.1)
        assert "--- since the last look, " in again, again
        assert "rank 2: progressed (stack or newest call changed)" in again
        assert "ranks 0-1: did not move (same stack, same call)" in again
        compared = run_cell(ip, "%distcomp compare w rank")
        assert not compared.ok
        said = compared.traceback_text()
        assert chain in said and "`%distcomp restart w --replay`" in said, said
        assert "Fix: `%distcomp wait" not in said
        interrupted = run_cell(ip, "%distcomp interrupt w").stdout
        assert "Sent SIGINT to ranks 0-2 of w: rank 2 stopped." in interrupted, interrupted
        assert chain in interrupted and "ranks 0-1 did not stop on SIGINT" in interrupted
    finally:
        release(ip, "w", flag)


def test_recv_recv_and_an_object_receive_whose_peer_ended_its_cell(ip, tmp_path):
    flag = tmp_path / "go"
    hang(
        ip,
        "w",
        f"if rank < 2:\n"
        f"    peer = 1 - rank\n"
        f"    rescue(lambda: Send(comm, np.ones(3), dest=peer), flag={str(flag)!r})\n"
        f"    comm.Recv(np.empty(3), source=peer)",
        blocked=[0, 1],
    )
    try:
        text = run_cell(ip, "%distcomp collectives w").stdout
        assert (
            "deadlock: rank 0 waits to receive from rank 1, which waits to receive from rank 0 "
            "(COMM_WORLD)" in text
        ), text
    finally:
        release(ip, "w", flag)
    flag = tmp_path / "go2"
    hang(
        ip,
        "w",
        f"if rank == 1:\n"
        f"    rescue(lambda: MPI.Comm.send.__wrapped__(comm, 'late', dest=0), flag={str(flag)!r})\n"
        f"if rank == 0:\n"
        f"    got = comm.recv(source=1)",
        blocked=[0],
        ended=(1,),
    )
    try:
        text = run_cell(ip, "%distcomp collectives w").stdout
        assert "rank 0 waits to receive from rank 1, whose cell has ended (COMM_WORLD)" in text, (
            text
        )
        assert (
            "rank 0: recv #" in text
            and f"(object, from rank 1, COMM_WORLD) at {label(ip)}, line 5" in text
        )
    finally:
        release(ip, "w", flag)


def test_a_receive_from_a_rank_inside_a_collective(ip, tmp_path):
    flag = tmp_path / "go"
    hang(
        ip,
        "w",
        f"if rank == 1:\n"
        f"    rescue(lambda: MPI.Comm.send.__wrapped__(comm, 'late', dest=0), flag={str(flag)!r})\n"
        f"if rank == 0:\n"
        f"    comm.recv(source=1)\n"
        f"comm.Barrier()",
        blocked=[0, 1, 2],
    )
    try:
        text = run_cell(ip, "%distcomp collectives w").stdout
        assert "deadlock: rank 0 waits to receive from rank 1, which waits in Barrier #" in text, (
            text
        )
        assert "rank 0 is in a point-to-point call while the others are in the collective" in text
    finally:
        release(ip, "w", flag)


def test_an_ssend_ring_of_three_is_named_in_the_hang_notice_and_the_time_out(ip):
    ring = (
        "right, left = (rank + 1) % 3, (rank - 1) % 3\n"
        "rescue(lambda: Recv(comm, np.empty(2), source=left), after={after})\n"
        "comm.Ssend(np.ones(2), dest=right)"
    )
    chain = (
        "deadlock: rank 0 waits to send to rank 1, which waits to send to rank 2, which waits "
        "to send to rank 0 (COMM_WORLD)"
    )
    from jupyter_distcomp.local.ranks.backend import get_backend

    events: list[dict] = []  # what the ranks panel hears
    ip.run_line_magic("config", "DistComp.hang_notice = 2")
    get_backend().add_listener(events.append)
    try:
        cell = run_cell(ip, "%%distcomp run w\n" + ring.format(after=6))
    finally:
        get_backend().remove_listener(events.append)
        ip.run_line_magic("config", "DistComp.hang_notice = 30")
    assert cell.ok, cell.traceback_text()
    hung = [e["hang"] for e in events if e["name"] == "w" and e["hang"]]
    assert hung and chain in hung[-1], events
    assert events[-1]["hang"] is None, "the panel's hang goes when the ranks are idle"
    notice = [line for line in cell.stderr.splitlines() if "have waited in" in line]
    assert len(notice) == 1 and chain in notice[0], cell.stderr
    assert (
        "ranks 0-2 of 'w' have waited in collectives and point-to-point calls for 2 s" in notice[0]
    )
    timed = run_cell(ip, "%%distcomp run w --timeout 2\n" + ring.format(after=5))
    assert not timed.ok
    assert chain in timed.traceback_text(), timed.traceback_text()
    settle(ip, "w")


def test_torch_recv_on_both_sides(ip, tmp_path):
    flag = tmp_path / "go"
    hang(
        ip,
        "g",
        f"peer = 1 - rank\n"
        f"send = dist.send.__distcomp_ledger__\n"
        f"rescue(lambda: send(torch.ones(4), dst=peer), flag={str(flag)!r})\n"
        f"dist.recv(torch.empty(4), src=peer)",
        blocked=[0, 1],
    )
    try:
        text = run_cell(ip, "%distcomp collectives g").stdout
        assert (
            "deadlock: rank 0 waits to receive from rank 1, which waits to receive from rank 0 "
            f"(default group); ranks 0-1 in recv ([4] float32) at {label(ip)}, line 5" in text
        ), text
        assert "dist.batch_isend_irecv" in text
    finally:
        release(ip, "g", flag)


def test_ddp_with_uneven_inputs_is_named_with_join_and_drop_last(ip):
    code = (
        "%%distcomp run g\n"
        "short = dist.new_group(timeout=datetime.timedelta(seconds=8))\n"
        "model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 1), "
        "process_group=short)\n"
        "for batch in range(3 - rank):\n"
        "    model(torch.ones(2, 4)).sum().backward()"
    )
    ip.run_line_magic("config", "DistComp.hang_notice = 2")
    try:
        cell = run_cell(ip, code)
    finally:
        ip.run_line_magic("config", "DistComp.hang_notice = 30")
    notice = [line for line in cell.stderr.splitlines() if "have waited in" in line]
    assert len(notice) == 1, cell.stderr
    assert "rank 0 of 'g' have waited in collectives" in notice[0]
    assert "rank 1 has not called it: its cell has ended" in notice[0]
    assert "Uneven inputs under DDP: rank 1 ran out of batches" in notice[0]
    assert "`with model.join():`" in notice[0] and "drop_last=True" in notice[0]
    assert not cell.ok, "gloo's time-out ends the cell"
    settle(ip, "g")


def test_torch_batch_isend_irecv_waits_are_named(ip, tmp_path):
    flag = tmp_path / "go"
    hang(
        ip,
        "g",
        f"peer = 1 - rank\n"
        f"send = dist.send.__distcomp_ledger__\n"
        f"rescue(lambda: send(torch.ones(2), dst=peer), flag={str(flag)!r})\n"
        f"ops = [dist.P2POp(dist.irecv, torch.empty(2), peer)]\n"
        f"for request in dist.batch_isend_irecv(ops):\n"
        f"    request.wait()",
        blocked=[0, 1],
    )
    try:
        text = run_cell(ip, "%distcomp collectives g").stdout
        assert (
            "deadlock: rank 0 waits to receive from rank 1, which waits to receive from rank 0 "
            "(default group); ranks 0-1 in irecv ([2] float32)" in text
        ), text
    finally:
        release(ip, "g", flag)
    text = run_cell(ip, "%distcomp collectives g").stdout
    assert "rank 0: irecv #" in text and "from rank 1, default group) at " in text, text
    assert "waiting" not in text.split("--- point-to-point ---")[1], "the waits ended"


def test_the_hang_notice_names_a_deadlock_while_another_rank_still_runs(ip):
    code = (
        "%%distcomp run w\n"
        "if rank < 2:\n"
        "    peer = 1 - rank\n"
        "    rescue(lambda: Recv(comm, np.empty(4_000_000), source=peer), after=6)\n"
        "    comm.Send(np.ones(4_000_000), dest=peer)\n"
        "started = time.time()\n"
        "while rank == 2 and time.time() - started < 6:\n"
        "    MPI.COMM_SELF.Barrier()\n"
        "    time.sleep(0.01)"
    )
    ip.run_line_magic("config", "DistComp.hang_notice = 2")
    try:
        cell = run_cell(ip, code)
    finally:
        ip.run_line_magic("config", "DistComp.hang_notice = 30")
    assert cell.ok, cell.traceback_text()
    notice = [line for line in cell.stderr.splitlines() if "hang while other ranks run" in line]
    assert len(notice) == 1, cell.stderr
    assert notice[0].startswith(
        "distcomp: ranks 0-1 of 'w' hang while other ranks run: deadlock: rank 0 waits to send "
        "to rank 1, which waits to send to rank 0 (COMM_WORLD)"
    ), notice[0]
