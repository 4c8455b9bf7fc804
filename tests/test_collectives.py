"""Collectives made visible: the ledger on every rank, `%distcomp collectives`, the verdict in
the cell's reports, check mode, the hang notice, honest interrupts and `restart --replay`.

Real worlds: 1x4 torch.distributed ranks on gloo, and 1x4 MPI ranks with mpi4py, driven
through a real IPython shell; each test checks what the user sees.
"""

from __future__ import annotations

import re
import time

import pytest

from .ranks_support import MPI_SPEC, TORCH_SPEC, define, label, loaded_shell, run_cell
from .waiting import wait_for

pytestmark = pytest.mark.slow

INIT = (
    "%%distcomp run t\n"
    "import torch, torch.distributed as dist\n"
    "if not dist.is_initialized():\n"
    "    dist.init_process_group('gloo')\n"
    "rank = dist.get_rank()"
)


@pytest.fixture(scope="module")
def ip():
    with loaded_shell() as shell:
        define(shell, "t", TORCH_SPEC, nodes=1, per_node=4)
        define(shell, "m", MPI_SPEC, nodes=1, per_node=4)
        cell = run_cell(shell, INIT)
        assert cell.ok, cell.traceback_text()
        cell = run_cell(shell, "%%distcomp run m\nfrom mpi4py import MPI\nimport numpy as np")
        assert cell.ok, cell.traceback_text()
        yield shell
        run_cell(shell, "%distcomp stop")


def ready(ip, name: str = "t") -> None:
    """A usable world: restarted when an earlier test left it blocked."""
    probe = INIT if name == "t" else "%%distcomp run m\nfrom mpi4py import MPI\nimport numpy as np"
    if not run_cell(ip, probe).ok:
        assert run_cell(ip, f"%distcomp restart {name}").ok
        assert run_cell(ip, probe).ok


def test_collectives_lists_each_groups_calls_aligned_across_ranks(ip):
    ready(ip)
    here = label(ip)  # the notebook's name of the cells run here
    code = (
        "%%distcomp run t\n"
        "x = torch.ones(4)\n"
        "for _ in range(3):\n"
        "    dist.all_reduce(x)\n"
        "pair = dist.new_group([0, 2])\n"
        "if rank in (0, 2):\n"
        "    dist.broadcast(x, src=0, group=pair)\n"
        "dist.barrier()"
    )
    assert run_cell(ip, code).ok
    cell = run_cell(ip, "%distcomp collectives t --last 3")
    assert cell.ok, cell.traceback_text()
    text = cell.stdout
    assert "every group's ranks agree on their calls" in text
    assert f"all_reduce ([4] float32, sum) at {here}, line 4: ranks 0-3 done" in text
    assert f"barrier at {here}, line 8: ranks 0-3 done" in text
    assert "--- group 1 (ranks 0, 2) ---" in text
    assert f"broadcast ([4] float32, root 0) at {here}, line 7: ranks 0, 2 done" in text
    assert text.count("all_reduce") == 2, "--last 3 shows the last three of the group"


def test_a_comm_hook_the_user_registers_is_recorded_in_place_of_the_ledgers(ip):
    ready(ip)
    here = label(ip)  # the notebook's name of the cells run here
    code = (
        "%%distcomp run t\n"
        "from torch.distributed.algorithms.ddp_comm_hooks import default_hooks\n"
        "torch.manual_seed(0)\n"
        "model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 1))\n"
        "model.register_comm_hook(None, default_hooks.allreduce_hook)\n"
        "model(torch.ones(2, 4)).sum().backward()"
    )
    cell = run_cell(ip, code)
    assert cell.ok, cell.traceback_text()
    text = run_cell(ip, "%distcomp collectives t --last 2").stdout
    assert f"all_reduce ([5] float32, sum) at {here}, line 6: ranks 0-3 done" in text, text


def test_ddp_gradient_buckets_are_recorded_without_a_comm_hook(ip):
    ready(ip)
    here = label(ip)  # the notebook's name of the cells run here
    code = (
        "%%distcomp run t\n"
        "torch.manual_seed(0)\n"
        "model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 1))\n"
        "model(torch.ones(2, 4) * (rank + 1)).sum().backward()\n"
        "print('grad', model.module.weight.grad.tolist())"
    )
    cell = run_cell(ip, code)
    assert cell.ok, cell.traceback_text()
    assert cell.stdout.count("grad [[5.0, 5.0, 5.0, 5.0]]") == 4, "DDP's mean of the gradients"
    text = run_cell(ip, "%distcomp collectives t --last 2").stdout
    assert f"all_reduce ([5] float32, sum) at {here}, line 4: ranks 0-3 done" in text, text


def test_a_rank_that_skips_ddp_backward_is_named_by_the_bucket_it_never_reduced(ip):
    ready(ip)
    here = label(ip)  # the notebook's name of the cells run here
    code = (
        "%%distcomp run t --timeout 8\n"
        "import datetime\n"
        "short = dist.new_group(timeout=datetime.timedelta(seconds=12))\n"
        "model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 1), "
        "process_group=short)\n"
        "loss = model(torch.ones(2, 4)).sum()\n"
        "if rank != 2:\n"
        "    loss.backward()\n"
        "dist.barrier(group=short)"
    )
    cell = run_cell(ip, code)
    assert not cell.ok
    text = cell.traceback_text()
    assert "all_reduce #" in text and "([5] float32, sum, group " in text, text
    assert "(ranks 0, 1, 2, 3)): ranks 0-1, 3 wait since" in text
    assert "rank 2 has not called it: it is in barrier #" in text and f"at {here}, line 8" in text


def test_a_skipped_collective_is_named_in_the_time_out_with_who_is_missing(ip):
    ready(ip)
    # the calls are in a function of one cell, run by a later cell: each place names the
    # cell that defined the function, as the notebook numbers it
    defining = label(ip)
    step = "%%distcomp run t\ndef step(t):\n    if rank != 2:\n        dist.all_reduce(t)\n    dist.barrier()"
    assert run_cell(ip, step, store_history=True).ok
    assert label(ip) != defining
    code = "%%distcomp run t --timeout 6\nt = torch.ones(4)\nstep(t)"
    cell = run_cell(ip, code, store_history=True)
    assert not cell.ok
    text = cell.traceback_text()
    assert "--- collectives ---" in text
    assert (
        "all_reduce #" in text
        and "([4] float32, sum, default group): ranks 0-1, 3 wait since" in text
    )
    skipped = rf"rank 2 has not called it: it is in barrier #\d+ at {re.escape(defining)}, line 5"
    assert re.search(skipped, text), text
    assert "did not stop on SIGINT" in text and "`%distcomp restart t --replay`" in text
    listing = run_cell(ip, "%distcomp collectives t").stdout
    assert re.search(skipped, listing), listing  # the verdict
    assert "<-- diverges" in listing and f"rank 2: barrier at {defining}, line 5" in listing
    assert f"all_reduce ([4] float32, sum) at {defining}, line 4, waiting" in listing, listing
    where = run_cell(ip, "%distcomp where t").stdout
    assert re.search(skipped, where), where


def test_a_shape_mismatch_is_named_with_both_sides(ip):
    ready(ip)
    code = (
        "%%distcomp run t --timeout 6\n"
        "t = torch.ones(4 if rank < 2 else 5)\n"
        "dist.all_reduce(t)\n"
        "print('after', t.tolist())"
    )
    cell = run_cell(ip, code)
    assert not cell.ok
    text = cell.traceback_text()
    assert "(sum, default group): ranks 0-1 [4] float32, ranks 2-3 [5] float32" in text
    assert "ranks 0-1 went on (their result may be wrong)" in text
    assert "ranks 2-3 wait since" in text


STORE_KEYS = """
for _ in range(3):
    dist.all_reduce(torch.ones(2))
if rank < 2:
    dist.broadcast(torch.ones(2), src=0, group=pair)
dist.barrier()
print('keys', store.num_keys() - before)
"""


def test_check_mode_keeps_its_keys_out_of_the_users_store(ip):
    ready(ip)
    made = "%%distcomp run t\nstore = dist.distributed_c10d._get_default_store()\n"
    made += "pair = dist.new_group([0, 1])\ndist.barrier()\nbefore = store.num_keys()"
    assert run_cell(ip, made).ok
    plain = run_cell(ip, f"%%distcomp run t{STORE_KEYS}")
    assert plain.ok, plain.traceback_text()
    assert plain.stdout.count("keys 0") == 4, plain.stdout
    checked = run_cell(ip, f"%%distcomp run t --check-collectives{STORE_KEYS}")
    assert checked.ok, checked.traceback_text()
    # the store counts the same keys after the program as it does without check mode
    assert sorted(checked.stdout.splitlines()) == sorted(plain.stdout.splitlines()), (
        plain.stdout,
        checked.stdout,
    )


def test_check_mode_raises_on_every_rank_before_a_wrong_result(ip):
    ready(ip)
    code = (
        "%%distcomp run t --check-collectives\n"
        "t = torch.ones(4 if rank < 2 else 5)\n"
        "dist.all_reduce(t)\n"
        "print('after', t.tolist())"
    )
    cell = run_cell(ip, code)
    assert not cell.ok
    text = cell.traceback_text()
    assert "after [" not in cell.stdout, "a rank went on with a result"
    assert "the cell failed on ranks 0-3" in text
    assert "CollectiveMismatch: check_collectives: all_reduce #" in text
    assert "ranks 0-1 [4] float32, ranks 2-3 [5] float32" in text
    assert "dist.all_reduce(t)" in text
    assert "ledger_hooks" not in text, "the user sees their own frames only"
    ok = run_cell(ip, "%%distcomp run t\nt = torch.ones(3)\ndist.all_reduce(t)\nprint(t[0].item())")
    assert ok.ok and ok.stdout.count("4.0") == 4, "the ranks stay in step after the check"


def test_a_value_another_process_writes_to_check_modes_store_is_refused(ip, tmp_path):
    """Anyone on this machine can reach check mode's store: ranks 0, 2 and 3 wait for rank
    1's signature while a stranger writes one for it (an op rank 1 never called); they
    refuse it as written by no rank of the world, and never compare it (issue 47, item 9)."""
    import threading

    import torch.distributed as dist

    ready(ip)
    where = run_cell(
        ip,
        "%%distcomp run t --check-collectives\ndist.all_reduce(torch.ones(1))\n"
        "import sys\nif rank == 0:\n"
        "    s = sys.modules['distcomp_ledger_torch'].WRAPPED.store.store\n"
        "    print('store', s.host, s.port)",
    )
    assert where.ok, where.traceback_text()
    host, port = next(line for line in where.stdout.splitlines() if " store " in line).split()[-2:]
    go = tmp_path / "go"
    stranger = dist.TCPStore(host, int(port), is_master=False)
    seen = set(stranger.list_keys())
    forged: list[str] = []
    value = "\x1f".join(["broadcast", "[9] int8", "", "0", "x.py", "1", "f"])

    def forge() -> None:  # what another local user can do: list the keys, write one
        deadline = time.monotonic() + 60
        while not forged and time.monotonic() < deadline:
            for key in stranger.list_keys():
                if key.endswith("/0") and key not in seen:
                    forged.append(key[: -len("/0")] + "/1")
                    stranger.set(forged[0], value)
                    break
            time.sleep(0.01)
        go.touch()

    attacker = threading.Thread(target=forge)
    attacker.start()
    cell = run_cell(
        ip,
        "%%distcomp run t --check-collectives\nimport os, time\nif rank == 1:\n"
        f"    while not os.path.exists({str(go)!r}): time.sleep(0.01)\n"
        "else:\n    dist.all_reduce(torch.ones(2))",
    )
    attacker.join()
    assert forged, "the stranger found no key of rank 0 to answer"
    assert not cell.ok
    text = cell.traceback_text()
    assert "was not written by a rank of this world" in text, text
    assert "[9] int8" not in text and "broadcast" not in text, "a rank compared its value"
    assert run_cell(ip, "%distcomp restart t").ok  # rank 1 missed this exchange


def test_check_mode_setting_catches_a_skipped_collective_on_gloo(ip):
    ready(ip)
    # the calls are in a function of an earlier cell: the ranks name that cell
    defining = label(ip)
    step = (
        "%%distcomp run t\ndef step():\n    if rank != 2:\n        dist.all_reduce(torch.ones(4))\n"
        "    dist.barrier()"
    )
    assert run_cell(ip, step, store_history=True).ok
    ip.run_line_magic("config", "DistComp.check_collectives = True")
    try:
        cell = run_cell(ip, "%%distcomp run t\nstep()", store_history=True)
    finally:
        ip.run_line_magic("config", "DistComp.check_collectives = False")
    assert not cell.ok
    text = cell.traceback_text()
    assert "the cell failed on ranks 0-3" in text
    said = rf"ranks 0-1, 3 call it; rank 2 has not called it: it is in barrier #\d+ at {re.escape(defining)}, line 5\."
    # ranks 0-1, 3 (at the all_reduce) name rank 2's place as rank 2 (at the barrier) does
    assert len(re.findall(said, text)) == 2, text


def test_check_mode_on_mpi4py_names_both_operations(ip):
    ready(ip, "m")
    code = (
        "%%distcomp run m --check-collectives\n"
        "comm = MPI.COMM_WORLD\n"
        "if comm.rank != 1:\n"
        "    comm.Allreduce(np.ones(3), np.zeros(3))\n"
        "comm.Barrier()"
    )
    cell = run_cell(ip, code)
    assert not cell.ok
    text = cell.traceback_text()
    assert "the cell failed on ranks 0-3" in text
    assert "Allreduce #" in text and "([3] float64, sum, COMM_WORLD)" in text
    assert "rank 1 has not called it: it is in Barrier #" in text


def test_an_mpi4py_check_exchange_that_waits_for_ranks_that_never_come_stops_on_interrupt(ip):
    """Rank 0 calls bcast on COMM_WORLD, the others Barrier on its duplicate: each waits in
    check mode's exchange for signatures that never come."""
    import os
    import signal
    import threading

    ready(ip, "m")
    assert run_cell(ip, "%%distcomp run m\ncomm = MPI.COMM_WORLD\ntwin = comm.Dup()").ok
    code = (
        "%%distcomp run m --check-collectives\n"
        "print('calling', flush=True)\n"
        "if comm.rank == 0:\n"
        "    comm.bcast('x', root=0)\n"
        "else:\n"
        "    twin.Barrier()\n"
        "print('went on')"
    )
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)  # as in a kernel
    timer = threading.Timer(4, os.kill, (os.getpid(), signal.SIGINT))  # the notebook's stop
    timer.start()
    try:
        cell = run_cell(ip, code)
    finally:
        timer.cancel()
        signal.signal(signal.SIGINT, previous)
    assert not cell.ok and "went on" not in cell.stdout
    assert cell.stdout.count("calling") == 4, "every rank reached its call before the interrupt"
    text = cell.traceback_text()
    assert "sent SIGINT to ranks 0-3 of 'm'; ranks 0-3 stopped." in text, text
    assert "The ranks are ready for the next cell." in text, text
    # the half-done exchanges are void: the next checked calls compare with each other
    both = "print('after', comm.allreduce(1), twin.allreduce(2))"
    after = run_cell(ip, f"%%distcomp run m --check-collectives\n{both}")
    assert after.ok, after.traceback_text()
    assert after.stdout.count("after 4 8") == 4, after.stdout


MPI_RIGHT = """%%distcomp run m --check-collectives
comm = MPI.COMM_WORLD
r, n = comm.Get_rank(), comm.Get_size()
a = comm.bcast({'x': 1} if r == 0 else None, root=0)
b = comm.scatter(list(range(n)) if r == 0 else None, root=0)
part = np.empty(2, 'i')
comm.Scatter(np.arange(2 * n, dtype='i') if r == 0 else None, part, root=0)
counts = [i + 1 for i in range(n)]
every = np.empty(sum(counts))
comm.Allgatherv(np.full(r + 1, float(r)), [every, counts])
total = comm.allreduce(1 if r % 2 else 1.5)
sends = [comm.issend(r, dest=(r + 1) % n, tag=7)]  # a sparse exchange (NBX)
got, barrier = [], None
while True:
    if comm.iprobe(source=MPI.ANY_SOURCE, tag=7):
        got.append(comm.recv(source=MPI.ANY_SOURCE, tag=7))
    if barrier is None:
        if MPI.Request.Testall(sends):
            barrier = comm.Ibarrier()
    elif barrier.Test():
        break
print('right', a, b, part.tolist(), int(every.sum()), total, got)
"""

MPI_WRONG = """%%distcomp run m --check-collectives
from jupyter_distcomp.rank_side.ledger_hooks import CollectiveMismatch as _Mismatch
import sys
comm = MPI.COMM_WORLD
r = comm.Get_rank()
wrongs = [
    lambda: comm.bcast(r, root=0 if r < 2 else 1),
    lambda: comm.Allgatherv(np.ones(r + 1), [np.empty(10), [1, 2, 3, 4]])
    if r != 3 else comm.Allgather(np.ones(1), np.empty(4)),
    lambda: comm.allreduce(1, op=MPI.SUM if r else MPI.MAX),
]
for number, wrong in enumerate(wrongs):
    try:
        wrong()
        print('wrong', number, 'ran')
    except Exception as exc:
        print('wrong', number, type(exc).__name__, str(exc).split(': ', 1)[1].split('. Nothing')[0])
"""


def test_check_mode_on_mpi4py_follows_mpis_rules_and_never_blocks_a_sparse_exchange(ip):
    ready(ip, "m")
    run_cell(ip, "%distcomp collectives m")  # the ledger so far, whatever earlier tests left
    right = run_cell(ip, MPI_RIGHT)
    assert right.ok, right.traceback_text()
    assert right.stdout.count("right {'x': 1}") == 4, right.stdout
    assert "[rank 3] right {'x': 1} 3 [6, 7] 20 5.0 [2]" in right.stdout, right.stdout
    listing = run_cell(ip, "%distcomp collectives m --last 8").stdout
    assert "<-- diverges" not in listing, listing
    wrong = run_cell(ip, MPI_WRONG)
    assert wrong.ok, wrong.traceback_text()
    out = wrong.stdout
    assert " ran\n" not in out, out
    assert out.count("CollectiveMismatch") == 12, "every rank raised at each wrong call"
    assert "[rank 3] wrong 0 CollectiveMismatch bcast #" in out
    assert "ranks 0-1 root 0, ranks 2-3 root 1" in out, out
    assert "[rank 0] wrong 1 CollectiveMismatch Allgatherv #" in out
    assert "rank 3 has not called it: it is in Allgather #" in out, out
    assert "[rank 1] wrong 2 CollectiveMismatch allreduce #" in out
    assert "ranks 1-3 sum, rank 0 max" in out, out


TORCH_RIGHT = """%%distcomp run t --check-collectives
import gc
lists = [None] * 4
dist.all_gather_object(lists, list(range(rank)))
got = [None]
dist.scatter_object_list(got, [i * 10 for i in range(4)] if rank == 0 else None, src=0)
out = torch.empty(10)
dist.all_to_all_single(out, torch.full((4 * (rank + 1),), float(rank)), [1, 2, 3, 4], [rank + 1] * 4)
t = torch.ones(1)
work = dist.all_reduce(t, async_op=True) if rank == 0 else None
if rank == 0:
    dist.send(torch.ones(1), dst=1)
elif rank == 1:
    dist.recv(torch.zeros(1), src=0)
if work is not None:
    work.wait()
else:
    dist.all_reduce(t)
pair = dist.new_group([0, 1])
dist.all_reduce(torch.ones(1), group=pair)  # ranks 2-3 are no members: torch skips it
for i in range(4):
    members = [0, 1] if i % 2 == 0 else [1, 2, 3]
    g = dist.new_group(members)
    if rank in members:
        dist.all_reduce(torch.ones(1), group=g)
        dist.destroy_process_group(g)
    del g
    gc.collect()
print('right', len(lists[3]), got[0], out.tolist()[:2], t.item())
"""


def test_check_mode_on_torch_follows_torchs_rules_and_never_blocks_async_or_groups(ip):
    ready(ip)
    right = run_cell(ip, TORCH_RIGHT)
    assert right.ok, right.traceback_text()
    assert "[rank 2] right 3 20 [0.0, 1.0] 4.0" in right.stdout, right.stdout
    listing = run_cell(ip, "%distcomp collectives t --last 6").stdout
    assert "<-- diverges" not in listing, listing
    wrong = run_cell(
        ip,
        "%%distcomp run t --check-collectives\n"
        "got = [None]\n"
        "dist.scatter_object_list(got, [1, 2, 3, 4] if rank == 0 else None, src=rank // 2)",
    )
    assert not wrong.ok
    text = wrong.traceback_text()
    assert "CollectiveMismatch: check_collectives: scatter_object_list #" in text, text
    assert "root 0" in text and "root 1" in text, text


def test_fail_fast_names_the_collective_the_failed_rank_never_entered(ip):
    ready(ip, "m")
    code = (
        "%%distcomp run m\n"
        "comm = MPI.COMM_WORLD\n"
        "if comm.rank == 1:\n"
        "    raise ValueError('bad shard')\n"
        "comm.Barrier()"
    )
    cell = run_cell(ip, code)
    assert not cell.ok
    text = cell.traceback_text()
    assert "ValueError: bad shard" in text
    assert "Barrier #" in text and "(COMM_WORLD): ranks 0, 2-3 wait since" in text
    assert "rank 1 has not called it: it raised an error" in text
    assert run_cell(ip, "%distcomp restart m").ok


def test_mpi4py_calls_are_recorded_upper_and_lower_case_and_point_to_point(ip):
    ready(ip, "m")
    here = label(ip)  # the notebook's name of the cells run here
    code = (
        "%%distcomp run m\n"
        "comm = MPI.COMM_WORLD\n"
        "comm.Allreduce(np.ones(3), np.zeros(3))\n"
        "total = comm.allreduce(1)\n"
        "if comm.rank == 0:\n"
        "    comm.send('hi', dest=1)\n"
        "elif comm.rank == 1:\n"
        "    comm.recv(source=0)\n"
        "sub = comm.Split(comm.rank % 2)\n"
        "sub.Barrier()"
    )
    assert run_cell(ip, code).ok
    text = run_cell(ip, "%distcomp collectives m").stdout
    assert f"Allreduce ([3] float64, sum) at {here}, line 3: ranks 0-3 done" in text
    assert f"allreduce (int, sum) at {here}, line 4: ranks 0-3 done" in text
    assert "rank 0: send #" in text and "to rank 1" in text
    assert "rank 1: recv #" in text and "from rank 0" in text
    assert "(ranks 0, 2) ---" in text and f"Barrier at {here}, line 10: ranks 0, 2 done" in text


def test_mpi4py_communicators_each_have_their_own_group(ip):
    ready(ip, "m")
    here = label(ip)  # the notebook's name of the cells run here
    code = (
        "%%distcomp run m\n"
        "comm = MPI.COMM_WORLD\n"
        "half = comm.Split(comm.rank % 2)\n"
        "half.Barrier()\n"
        "twin = half.Dup()\n"
        "twin.Allreduce(np.ones(2), np.zeros(2))\n"
        "ring = comm.Create_cart([comm.size], periods=[True])\n"
        "ring.Barrier()\n"
        "pair = comm.Create_group(comm.Get_group().Incl([0, 1])) if comm.rank < 2 else None\n"
        "if pair:\n"
        "    pair.Bcast(np.ones(1), root=1)\n"
        "print('cart', type(ring).__name__, ring.Get_topo()[0])"
    )
    cell = run_cell(ip, code)
    assert cell.ok, cell.traceback_text()
    assert cell.stdout.count("cart Cartcomm [4]") == 4, "a Cartcomm stays a Cartcomm"
    text = run_cell(ip, "%distcomp collectives m").stdout
    assert "every group's ranks agree on their calls" in text, text
    # each communicator its own group, named alike on its ranks, with its own numbers
    for pair in ("0, 2", "1, 3"):
        head = next(line for line in text.splitlines() if f"(ranks {pair}) ---" in line)
        assert head.startswith("--- comm ") and "." not in head, head
        assert f"Barrier at {here}, line 4: ranks {pair} done" in text
        twin = next(
            line for line in text.splitlines() if f"(ranks {pair}) ---" in line and "." in line
        )
        assert twin.startswith("--- comm ") and ".1 (" in twin, twin
    assert f"#1     Allreduce ([2] float64, sum) at {here}, line 6: ranks 0, 2 done" in text
    assert "(ranks 0, 1, 2, 3) ---" in text
    assert f"#1     Barrier at {here}, line 8: ranks 0-3 done" in text
    assert "--- comm g1 (ranks 0, 1) ---" in text
    assert f"#1     Bcast ([1] float64, root 1) at {here}, line 11: ranks 0-1 done" in text
    assert (
        f"Split at {here}, line 3: ranks 0-3 done" in text
        and f"Create_cart at {here}, line 7" in text
    )


def test_mpi4py_non_blocking_calls_end_when_their_request_completes(ip):
    ready(ip, "m")
    here = label(ip)  # the notebook's name of the cells run here
    code = (
        "%%distcomp run m\n"
        "comm = MPI.COMM_WORLD\n"
        "req = comm.Iallreduce(np.ones(3), np.zeros(3))\n"
        "MPI.Request.Waitall([req])\n"
        "right, left = (comm.rank + 1) % comm.size, (comm.rank - 1) % comm.size\n"
        "reqs = [comm.Isend(np.ones(2), right), comm.Irecv(np.zeros(2), left)]\n"
        "MPI.Request.Waitall(reqs)\n"
        "pending = comm.Ibarrier()\n"
        "print('request', isinstance(req, MPI.Request), req == MPI.REQUEST_NULL)"
    )
    cell = run_cell(ip, code)
    assert cell.ok, cell.traceback_text()
    assert cell.stdout.count("request True True") == 4
    text = run_cell(ip, "%distcomp collectives m").stdout
    assert f"Iallreduce ([3] float64, sum) at {here}, line 3: ranks 0-3 done" in text, text
    assert "rank 0: Isend #" in text and f"to rank 1, COMM_WORLD) at {here}, line 6, done" in text
    assert "rank 0: Irecv #" in text and f"from rank 3, COMM_WORLD) at {here}, line 6, done" in text
    assert f"Ibarrier at {here}, line 8: ranks 0-3 not complete, posted" in text
    assert run_cell(ip, "%%distcomp run m\npending.Wait()").ok
    text = run_cell(ip, "%distcomp collectives m").stdout
    assert f"Ibarrier at {here}, line 8: ranks 0-3 done" in text, text


def test_a_skipped_call_on_a_sub_communicator_is_named_with_its_group(ip):
    ready(ip, "m")
    code = (
        "%%distcomp run m --timeout 6\n"
        "comm = MPI.COMM_WORLD\n"
        "half = comm.Split(comm.rank % 2)\n"
        "if comm.rank != 2:\n"
        "    half.Ibarrier().Wait()"
    )
    cell = run_cell(ip, code)
    assert not cell.ok
    text = cell.traceback_text()
    assert "Ibarrier #1 (comm " in text and "(ranks 0, 2)): rank 0 waits since" in text, text
    assert "rank 2 has not called it: its cell has ended" in text
    assert run_cell(ip, "%distcomp restart m").ok


def test_the_hang_notice_names_the_verdict_and_kills_nothing(ip):
    ready(ip)
    ip.run_line_magic("config", "DistComp.hang_notice = 3")
    try:
        # ranks 0-1, 3 wait for rank 2, which never comes; the group's own time-out (gloo's,
        # 10 s) ends the cell: the notice before it stops nothing
        code = (
            "%%distcomp run t\n"
            "import datetime\n"
            "short = dist.new_group(timeout=datetime.timedelta(seconds=10))\n"
            "if rank != 2:\n"
            "    dist.all_reduce(torch.ones(4), group=short)"
        )
        cell = run_cell(ip, code)
    finally:
        ip.run_line_magic("config", "DistComp.hang_notice = 30")
    notice = [line for line in cell.stderr.splitlines() if "have waited in collectives" in line]
    assert len(notice) == 1, cell.stderr
    assert "ranks 0-1, 3 of 't' have waited in collectives for 3 s" in notice[0]
    assert "rank 2 has not called it: its cell has ended" in notice[0]
    assert "The cell keeps waiting" in notice[0]
    assert not cell.ok and "the cell failed on ranks 0-1, 3" in cell.traceback_text()
    assert cell.seconds > 9, "the cell waited for gloo's own time-out"


def test_interrupt_says_which_ranks_stopped_and_replay_brings_the_state_back(ip):
    ready(ip)
    assert run_cell(ip, "%%distcomp run t\nkept = rank * 10").ok
    started = run_cell(
        ip, "%%distcomp run t --background\nif rank != 2:\n    dist.all_reduce(torch.ones(4))"
    )
    assert started.ok
    from jupyter_distcomp.local.ranks.backend import get_backend
    from jupyter_distcomp.local.ranks.ledgers import blocked_ranks

    world = get_backend().world("t")
    wait_for(lambda: blocked_ranks(world, [0, 1, 3]) == [0, 1, 3], 60, "ranks in all_reduce")
    said = run_cell(ip, "%distcomp interrupt t")
    assert said.ok
    assert "Sent SIGINT to ranks 0-1, 3 of t: none stopped." in said.stdout
    assert "blocked inside a collective" in said.stdout
    assert "`%distcomp restart t --replay`" in said.stdout
    busy = run_cell(ip, "%%distcomp run t\nprint(1)")
    assert not busy.ok
    assert "are blocked inside a collective" in busy.traceback_text()
    assert "`%distcomp interrupt t`" not in busy.traceback_text()
    replay = run_cell(ip, "%distcomp restart t --replay --yes")
    assert replay.ok, replay.traceback_text()
    assert "replaying 1 of" in replay.stdout and "kept = rank * 10" in replay.stdout
    back = run_cell(ip, "%%distcomp run t\nprint('kept', kept, dist.get_world_size())")
    assert back.ok and "kept 30 4" in back.stdout, "the state and process group came back"


def test_a_replay_that_fails_stops_there_with_its_error(ip):
    ready(ip)
    assert run_cell(ip, "%%distcomp run t\nimport os\nflag = '/tmp/distcomp-replay-flag'").ok
    assert run_cell(ip, "%%distcomp run t\nif os.path.exists(flag):\n    raise OSError('gone')").ok
    assert run_cell(ip, "%%distcomp run t\nthird = 3").ok
    open("/tmp/distcomp-replay-flag", "w").close()
    try:
        replay = run_cell(ip, "%distcomp restart t --replay --yes")
    finally:
        import os

        os.remove("/tmp/distcomp-replay-flag")
    assert not replay.ok
    replayed = [line for line in replay.stdout.splitlines() if line.startswith("replaying")]
    assert "if os.path.exists(flag):" in replayed[-1], "the replay stops at the failing cell"
    assert not any("third = 3" in line for line in replayed)
    assert "OSError: gone" in replay.traceback_text()


COMMAND_TRAIN = """\
from mpi4py import MPI
import numpy as np
comm = MPI.COMM_WORLD
if comm.rank != 1:
    comm.Allreduce(np.ones(2), np.zeros(2))
comm.Barrier()
"""

COMMAND_SPEC = """\
name: stuck
type: DistributedComponent
code: {code}
launcher:
  type: mpi
  additional_arguments: python train.py
"""


def test_command_processes_keep_a_ledger_too(ip, tmp_path):
    import time

    (tmp_path / "train.py").write_text(COMMAND_TRAIN)
    assert run_cell(ip, f"%%distcomp stuck\n{COMMAND_SPEC.format(code=tmp_path)}").ok
    ip.user_ns["stuck"].runsettings.resource_layout.configure(
        instance_count=1, process_count_per_node=3
    )
    assert run_cell(ip, "%distcomp command stuck --background --timeout 120").ok
    try:
        waiting = "Allreduce #1 ([2] float64, sum, COMM_WORLD): ranks 0, 2 wait since"
        # the ranks start under load, and one at a time: rank 1 can be in its Barrier while
        # ranks 0 and 2 are still importing, so the wait is for the state they all reach
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            text = run_cell(ip, "%distcomp collectives stuck").stdout
            if waiting in text:
                break
            time.sleep(0.5)
        assert waiting in text, text
        assert "rank 1 has not called it: it is in Barrier #1 at train.py:6 in <module>" in text
    finally:
        run_cell(ip, "%distcomp interrupt stuck")
        run_cell(ip, "%distcomp wait stuck --timeout 60")


CHECKED_TRAIN = """\
from mpi4py import MPI
comm = MPI.COMM_WORLD
if comm.rank == 1:
    comm.Barrier()
else:
    comm.bcast(comm.rank, root=0)
print("not reached", flush=True)
"""


def test_a_program_of_its_own_runs_checked_with_the_variable_set(ip, tmp_path):
    (tmp_path / "train.py").write_text(CHECKED_TRAIN)
    spec = COMMAND_SPEC.format(code=tmp_path).replace("name: stuck", "name: checked")
    spec += "environment_variables:\n  DISTCOMP_CHECK_COLLECTIVES: '1'\n"
    assert run_cell(ip, f"%%distcomp checked\n{spec}").ok
    ip.user_ns["checked"].runsettings.resource_layout.configure(
        instance_count=1, process_count_per_node=3
    )
    cell = run_cell(ip, "%distcomp command checked --timeout 120")
    text = cell.stdout + cell.stderr
    assert not cell.ok, text  # every rank raises before the call, none hangs in it
    assert "CollectiveMismatch" in text, text
    assert "Barrier" in text and "bcast" in text, text
    assert "not reached" not in text, text
