"""Horovod through the ``mpi`` launcher, as the Component SDK promises: a Horovod PyTorch
program as the spec's command (``%distcomp command``) and in live ranks (``%%distcomp
run``), on 1 node x 2 processes and on 2 x 2, each rank seeing what it would see on Azure
ML (rank, size, local_rank, local_size = processes per node, cross_size = nodes) and the
allreduce's sum; then what the ledger makes of a Horovod program: ``collectives`` at the
user's lines, check mode naming a missing rank or a mismatched tensor before anything runs,
and a rank that never calls an allreduce named in the time-out, with Horovod's stall
inspector read, and in the interrupt.

Real ranks, a real IPython shell; Horovod built by the project's installer once (or the
tests skipped, saying why, where it cannot be built).
"""

from __future__ import annotations

import re
import time

import pytest

from .horovod_support import PROBE_CODE, expected, horovod, probes  # noqa: F401
from .ranks_support import define, label, loaded_shell, run_cell

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]  # a first build included

SPEC = """\
name: hvd
type: DistributedComponent
code: {code}
launcher:
  type: mpi
  additional_arguments: python train.py
environment_variables:
  HOROVOD_STALL_CHECK_TIME_SECONDS: '2'
"""


@pytest.fixture(scope="module")
def ip(horovod):  # noqa: F811
    with loaded_shell() as shell:
        yield shell
        run_cell(shell, "%distcomp stop")


@pytest.fixture(scope="module")
def world(ip, tmp_path_factory):
    """A live 1 x 2 world with Horovod initialised in it, named ``h``."""
    code = tmp_path_factory.mktemp("hvd")
    define(ip, "h", SPEC.format(code=code), nodes=1, per_node=2)
    cell = run_cell(ip, "%%distcomp run h\nimport horovod.torch as hvd\nimport torch\nhvd.init()")
    assert cell.ok, cell.traceback_text()
    return "h"


@pytest.mark.parametrize(("nodes", "per_node"), [(1, 2), (2, 2)], ids=["1x2", "2x2"])
def test_a_horovod_program_as_the_specs_command(ip, tmp_path, nodes, per_node):
    (tmp_path / "train.py").write_text(PROBE_CODE)
    name = f"cmd{nodes}x{per_node}"
    define(
        ip, name, SPEC.format(code=tmp_path).replace("name: hvd", f"name: {name}"), nodes, per_node
    )
    cell = run_cell(ip, f"%distcomp command {name} --timeout 240")
    assert cell.ok, cell.stdout + cell.stderr
    assert probes(cell.stdout) == expected(nodes, per_node), cell.stdout


def test_horovod_in_live_ranks_of_2_nodes_x_2(ip, tmp_path):
    define(ip, "h4", SPEC.format(code=tmp_path), nodes=2, per_node=2)
    try:
        cell = run_cell(ip, f"%%distcomp run h4\n{PROBE_CODE}")
        assert cell.ok, cell.traceback_text()
        assert probes(cell.stdout) == expected(2, 2), cell.stdout
    finally:
        run_cell(ip, "%distcomp stop h4")


OPS = """\
%%distcomp run h
x = torch.ones(4)
total = hvd.allreduce(torch.tensor([float(hvd.rank() + 1)]), op=hvd.Sum)
gathered = hvd.allgather(torch.ones(hvd.rank() + 1, 2))
hvd.broadcast_(x, root_rank=1)
model = torch.nn.Linear(4, 1)
optimizer = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1), named_parameters=model.named_parameters())
model(x).sum().backward()
optimizer.step()
print('rows', gathered.shape[0], 'sum', total.item())
"""


def test_horovod_in_live_ranks_and_its_calls_in_collectives(ip, world):
    probe = run_cell(ip, f"%%distcomp run h\n{PROBE_CODE}")
    assert probe.ok, probe.traceback_text()
    assert probes(probe.stdout) == expected(1, 2), probe.stdout
    here = label(ip)
    cell = run_cell(ip, OPS)
    assert cell.ok, cell.traceback_text()
    assert cell.stdout.count("rows 3 sum 3.0") == 2, cell.stdout
    text = run_cell(ip, "%distcomp collectives h").stdout
    assert "--- global process set ---" in text, text
    assert "every group's ranks agree on their calls" in text
    assert re.search(
        rf"hvd\.allreduce \(\[1\] float32, sum, name allreduce\.noname\.\d+\) at {re.escape(here)}, line 3: ranks 0-1 done",
        text,
    ), text
    assert re.search(rf"hvd\.allgather \(.*\) at {re.escape(here)}, line 4: ranks 0-1 done", text)
    assert "root 1, name broadcast.noname." in text and f"{here}, line 5" in text
    assert f"hvd.allreduce ([1] float32, average, name allreduce.bias) at {here}, line 8" in text


def test_check_mode_names_the_rank_that_skips_an_allreduce_before_anything_runs(ip, world):
    here = label(ip)
    code = (
        "%%distcomp run h --check-collectives\n"
        "t = torch.ones(4)\n"
        "if hvd.rank() != 1:\n"
        "    hvd.allreduce(t, name='skipped')\n"
        "hvd.barrier()\n"
        "print('not', 'reached')"
    )
    cell = run_cell(ip, code)
    assert not cell.ok
    text = cell.traceback_text()
    assert "not reached" not in cell.stdout
    assert "the cell failed on ranks 0-1" in text, text
    assert "CollectiveMismatch: check_collectives: hvd.allreduce #" in text, text
    assert (
        "([4] float32, average, name allreduce.skipped, global process set): rank 0 calls it"
        in text
    )
    assert re.search(
        rf"rank 1 has not called it: it is in hvd\.barrier #\d+ at {re.escape(here)}, line 5", text
    )
    assert "ledger_horovod" not in text, "the user sees their own frames only"
    after = run_cell(ip, f"%%distcomp run h\n{PROBE_CODE}")
    assert after.ok and probes(after.stdout) == expected(1, 2), "nothing ran: the ranks go on"


def test_a_mismatched_tensor_is_named_by_check_mode_and_by_horovod(ip, world):
    code = "t = torch.ones(4 if hvd.rank() == 0 else 5)\nhvd.allreduce(t, name='uneven')\nprint('went', 'on')"
    checked = run_cell(ip, f"%%distcomp run h --check-collectives\n{code}")
    assert not checked.ok
    text = checked.traceback_text()
    assert (
        "name allreduce.uneven, global process set): rank 0 [4] float32, rank 1 [5] float32" in text
    ), text
    assert "went on" not in checked.stdout
    plain = run_cell(ip, f"%%distcomp run h\n{code}")
    assert not plain.ok
    text = plain.traceback_text()
    assert "the cell failed on ranks 0-1" in text, text
    assert "Mismatched ALLREDUCE tensor shapes" in text, text  # Horovod's own refusal
    # a call Horovod refused on every rank ran nowhere: no verdict holds on to it
    listing = run_cell(ip, "%distcomp collectives h").stdout
    assert "every group's ranks agree on their calls" in listing, listing
    assert "allreduce.uneven" not in listing


def test_a_rank_that_never_calls_the_allreduce_is_named_in_the_time_out(ip, world):
    here = label(ip)
    code = (
        "%%distcomp run h --timeout 10\n"
        "t = torch.ones(4)\n"
        "if hvd.rank() != 1:\n"
        "    hvd.allreduce(t, name='never')"
    )
    cell = run_cell(ip, code)
    assert not cell.ok
    text = cell.traceback_text()
    waits = "name allreduce.never, global process set): rank 0 waits since"
    assert "hvd.allreduce #" in text and waits in text, text
    assert "rank 1 has not called it: its cell has ended" in text
    # Horovod's own word (its stall inspector, after 2 s here), read from rank 0's log
    said = (
        "Horovod's stall inspector: rank 1 has not submitted allreduce.never for more than 2 s "
        f"(rank 0 called it at {here}, line 4)"
    )
    assert said in text, text
    # Horovod's wait lets SIGINT in only once its operation is done, as without us
    assert "did not stop on SIGINT" in text and "`%distcomp restart h --replay`" in text
    _release(ip, "never", 4)


def test_the_hang_notice_names_the_missing_rank_before_horovod_shuts_down(ip, world):
    shutdown = "os.environ['HOROVOD_STALL_SHUTDOWN_TIME_SECONDS']"
    again = f"%%distcomp run h\nimport os\nhvd.shutdown()\n{shutdown} = '6'\nhvd.init()"
    assert run_cell(ip, again).ok
    ip.run_line_magic("config", "DistComp.hang_notice = 3")
    try:
        code = (
            "%%distcomp run h\nif hvd.rank() != 1:\n    hvd.allreduce(torch.ones(4), name='late')"
        )
        cell = run_cell(ip, code)
    finally:
        ip.run_line_magic("config", "DistComp.hang_notice = 30")
    notice = [line for line in cell.stderr.splitlines() if "have waited in collectives" in line]
    assert len(notice) == 1, cell.stderr
    assert "rank 0 of 'h' have waited in collectives for 3 s: hvd.allreduce #" in notice[0]
    assert "rank 1 has not called it: its cell has ended" in notice[0]
    # then Horovod's stall inspector shuts Horovod down (6 s), which ends the wait
    assert not cell.ok and "Horovod has been shut down" in cell.traceback_text()
    plain = f"%%distcomp run h\nhvd.shutdown()\ndel {shutdown}\nhvd.init()\n{PROBE_CODE}"
    back = run_cell(ip, plain)
    assert back.ok and probes(back.stdout) == expected(1, 2), back.traceback_text()


def _release(ip, name: str, size: int) -> None:
    """Rank 1 makes the call rank 0 waits in: both go on."""
    late = run_cell(
        ip, f"%%distcomp run h --ranks 1\nhvd.allreduce(torch.ones({size}), name={name!r})"
    )
    assert late.ok, late.traceback_text()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        probe = run_cell(ip, f"%%distcomp run h\n{PROBE_CODE}")
        if probe.ok:
            break
        time.sleep(0.5)
    assert probe.ok and probes(probe.stdout) == expected(1, 2), probe.traceback_text()


def test_the_interrupt_names_the_missing_rank(ip, world):
    from jupyter_distcomp.contracts import RankState
    from jupyter_distcomp.local.ranks.backend import get_backend

    here = label(ip)
    started = run_cell(
        ip,
        "%%distcomp run h --background\nif hvd.rank() != 1:\n    hvd.allreduce(torch.ones(2), name='pending')",
    )
    assert started.ok
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:  # rank 0 waits, and the notebook has rank 1's result
        listing = run_cell(ip, "%distcomp collectives h").stdout
        idle = [r["state"] for r in get_backend().status("h")][1] == RankState.IDLE
        if "name allreduce.pending) at" in listing and "waiting" in listing and idle:
            break
        time.sleep(0.5)
    assert (
        f"rank 0: hvd.allreduce ([2] float32, average, name allreduce.pending) at {here}, line 3, waiting"
        in listing
    ), listing
    said = run_cell(ip, "%distcomp interrupt h")
    assert said.ok
    text = said.stdout
    assert "Sent SIGINT to rank 0 of h: none stopped" in text, text
    # (the hang notice's test started Horovod again: its groups count again from there)
    assert re.search(
        r"name allreduce\.pending, global process set[^)]*\): rank 0 waits since", text
    )
    assert "rank 1 has not called it: its cell has ended" in text
    assert "`%distcomp restart h --replay`" in text
    _release(ip, "pending", 2)
