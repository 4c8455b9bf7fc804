"""While ranks work, and when one fails: fail fast, background cells, where, compare.

One 1x4 MPI world shared by the module, driven through a real IPython shell, as a user
would: each test checks what the cell shows.
"""

from __future__ import annotations

import time

import pytest

from .ranks_support import MPI_SPEC, define, loaded_shell, run_cell
from .waiting import wait_for

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def ip():
    with loaded_shell() as shell:
        define(shell, "w", MPI_SPEC, nodes=1, per_node=4)
        assert run_cell(shell, "%%distcomp run w\nimport time\nfrom mpi4py import MPI").ok
        yield shell


def ready(ip) -> None:
    """The world is usable: restart it if an earlier test left it stuck."""
    if not run_cell(ip, "%%distcomp run w\nimport time\nfrom mpi4py import MPI").ok:
        assert run_cell(ip, "%distcomp restart w").ok
        assert run_cell(ip, "%%distcomp run w\nimport time\nfrom mpi4py import MPI").ok


def states(ip) -> list[str]:
    from jupyter_distcomp.local.ranks.backend import get_backend

    return [r["state"] for r in get_backend().status("w")]


# -- fail fast ----------------------------------------------------------------------------


def test_a_failed_rank_ends_a_barrier_cell_with_its_traceback_then_the_stuck_stacks(ip):
    ready(ip)
    code = (
        "def shard():\n"
        "    raise ValueError('shard 1 is empty')\n"
        "if mpi_rank == 1:\n"
        "    shard()\n"
        "MPI.COMM_WORLD.Barrier()"
    )
    cell = run_cell(ip, f"%%distcomp run w\n{code}")  # no --timeout: it must end by itself
    assert not cell.ok
    text = cell.traceback_text()
    assert "rank 1 of 'w' failed while ranks 0, 2-3 stayed busy for 3 s" in text
    error_at = text.index("ValueError: shard 1 is empty")
    stacks_at = text.index("ranks 0, 2-3: still busy, waiting here")
    assert error_at < stacks_at, "the failed rank's traceback must come first"
    assert "shard()" in text[:stacks_at], "the traceback shows the user's own line"
    assert text[stacks_at:].count("Barrier()") == 1, "identical stacks are shown once"
    assert "did not stop on SIGINT" in text and "`%distcomp restart w`" in text
    assert run_cell(ip, "%distcomp restart w").ok
    ready(ip)


def test_ranks_busy_in_python_are_interrupted_and_stay_usable(ip):
    ready(ip)
    ip.run_line_magic("config", "DistComp.fail_fast_grace = 1")
    try:
        code = "x = 41\nif mpi_rank == 2:\n    1 / 0\nwhile True:\n    time.sleep(0.05)"
        cell = run_cell(ip, f"%%distcomp run w\n{code}")
    finally:
        ip.run_line_magic("config", "DistComp.fail_fast_grace = 3.0")
    text = cell.traceback_text()
    assert "rank 2 of 'w' failed while ranks 0-1, 3 stayed busy for 1 s" in text
    assert "ZeroDivisionError" in text and "time.sleep(0.05)" in text
    assert "stopped on SIGINT: every rank keeps its state" in text
    after = run_cell(ip, "%%distcomp run w\nprint(x + 1)")
    assert after.ok and after.stdout.count("42") == 4, "the user's state was lost"


def test_without_fail_fast_the_cell_waits_for_every_rank(ip):
    ready(ip)
    ip.run_line_magic("config", "DistComp.fail_fast_grace = None")
    try:
        code = "if mpi_rank == 1:\n    raise ValueError('x')\ntime.sleep(4)"
        cell = run_cell(ip, f"%%distcomp run w\n{code}")
    finally:
        ip.run_line_magic("config", "DistComp.fail_fast_grace = 3.0")
    text = cell.traceback_text()
    assert "stayed busy" not in text
    assert "the cell failed on rank 1" in text  # after the others finished their sleep


def test_a_rank_at_a_debugger_prompt_is_not_counted_as_stuck(ip):
    from jupyter_distcomp.local.ranks.backend import get_backend

    ready(ip)
    ip.run_line_magic("config", "DistComp.fail_fast_grace = 2")
    try:
        code = "if mpi_rank == 1:\n    raise ValueError('x')\nif mpi_rank == 0:\n    time.sleep(5)"
        assert run_cell(ip, f"%%distcomp run w --background\n{code}").ok
        world = get_backend().world("w")
        while world.states()[1] != "idle":  # rank 1 failed; the grace starts now
            time.sleep(0.01)
        world.set_state([0], "debugging")  # what the debugger does while rank 0 is at a prompt
        with pytest.raises(Exception) as failure:
            ip.run_line_magic("distcomp", "wait w --timeout 60")
    finally:
        ip.run_line_magic("config", "DistComp.fail_fast_grace = 3.0")
    text = str(failure.value)
    assert "stayed busy" not in text, "fail-fast ended the cell of a rank being debugged"
    assert "the cell failed on rank 1" in text


# -- background cells, wait, status, where ---------------------------------------------------


def test_background_cell_returns_at_once_and_wait_collects_it(ip):
    ready(ip)
    code = "print('start', flush=True)\nfor i in range(30):\n    time.sleep(0.1)\nresult = mpi_rank"
    cell = run_cell(ip, f"%%distcomp run w --background\n{code}")
    assert cell.ok and "%distcomp wait w" in cell.stdout
    assert states(ip) == ["busy"] * 4, "the background cell ended before the magic returned"
    status = run_cell(ip, "%distcomp status w")
    assert "background cell on ranks 0-3, running" in status.stdout
    waited = run_cell(ip, "%distcomp wait w")
    assert waited.ok and "finished" in waited.stdout
    assert states(ip) == ["idle"] * 4
    assert run_cell(ip, "%%distcomp run w\nassert result == mpi_rank").ok


def test_wait_raises_the_background_cells_error(ip):
    ready(ip)
    code = "time.sleep(0.5)\nif mpi_rank == 3:\n    raise KeyError('rank three')"
    assert run_cell(ip, f"%%distcomp run w --background\n{code}").ok
    waited = run_cell(ip, "%distcomp wait w --timeout 60")
    assert not waited.ok
    text = waited.traceback_text()
    assert "the cell failed on rank 3" in text and "KeyError: 'rank three'" in text
    nothing = run_cell(ip, "%distcomp wait w")
    assert not nothing.ok and "has no background cell" in str(nothing.error)


def test_wait_timeout_leaves_the_cell_running(ip):
    ready(ip)
    assert run_cell(ip, "%%distcomp run w --background\ntime.sleep(3)").ok
    short = run_cell(ip, "%distcomp wait w --timeout 0.2")
    assert not short.ok and "still runs after 0.2 s" in str(short.error)
    busy = run_cell(ip, "%%distcomp run w\nprint(1)")
    assert not busy.ok and "busy with a background cell" in str(busy.error)
    compare = run_cell(ip, "%distcomp compare w mpi_rank")
    assert not compare.ok and "compare runs on idle ranks" in str(compare.error)
    assert run_cell(ip, "%distcomp wait w --timeout 60").ok


def test_where_groups_identical_stacks_also_inside_a_collective(ip):
    ready(ip)
    code = (
        "def train_step():\n"
        "    MPI.COMM_WORLD.Barrier()\n"
        "if mpi_rank == 3:\n"
        "    time.sleep(4)\n"
        "train_step()"
    )
    assert run_cell(ip, f"%%distcomp run w --background\n{code}").ok

    def in_the_barrier():  # ranks 0-2 reached it
        where = run_cell(ip, "%distcomp where w")
        assert where.ok
        return where.stdout if "+ ranks 0-2\n" in where.stdout else ""

    text = wait_for(in_the_barrier, 30, "ranks 0-2 in the barrier", every=0.2)
    # one tree: ranks 0-2 in the barrier, rank 3 (the odd one, flagged) asleep
    assert "ranks 0-3: busy, current stack" in text, text
    assert "+ ranks 0-2\n" in text and "+ rank 3  <- differs" in text, text
    assert text.count("MPI.COMM_WORLD.Barrier()") == 1 and "time.sleep(4)" in text
    assert "in train_step" in text
    only = run_cell(ip, "%distcomp where w --ranks 3")
    assert "rank 3: busy" in only.stdout and "Barrier" not in only.stdout
    assert run_cell(ip, "%distcomp wait w --timeout 60").ok
    idle = run_cell(ip, "%distcomp where w")
    assert "ranks 0-3: idle" in idle.stdout


# -- compare ------------------------------------------------------------------------------


def test_compare_numbers_flags_the_odd_rank_with_its_difference(ip):
    ready(ip)
    assert run_cell(ip, "%%distcomp run w\nloss = 0.5 + (0.25 if mpi_rank == 2 else 0.0)").ok
    cell = run_cell(ip, "%distcomp compare w loss")
    assert cell.ok
    lines = cell.stdout.splitlines()
    assert any(line.split()[:2] == ["0-1,3", "0.5"] for line in lines), cell.stdout
    odd = next(line for line in lines if line.startswith("2 "))
    assert "0.75" in odd and "DIFFERS" in odd and odd.rstrip().endswith("0.25")
    close = run_cell(ip, "%distcomp compare w loss --rtol 0.6")
    assert "rank 2 differs from rank 0 by at most 0.25, within rtol 0.6" in close.stdout
    assert "All ranks agree within rtol 0.6 (not all equal)." in close.stdout
    subset = run_cell(ip, "%distcomp compare w loss --ranks 0,1")
    assert "All ranks agree." in subset.stdout


def test_compare_strings_errors_and_bad_expressions(ip):
    ready(ip)
    assert run_cell(ip, "%%distcomp run w\nname = 'model-a'\nif mpi_rank == 3:\n    del name").ok
    cell = run_cell(ip, "%distcomp compare w name")
    assert "'model-a'" in cell.stdout
    err = next(line for line in cell.stdout.splitlines() if line.startswith("3 "))
    assert "NameError: name 'name' is not defined" in err and "ERROR" in err
    bad = run_cell(ip, "%distcomp compare w 'x ='")
    assert not bad.ok and "is not a Python expression" in str(bad.error)
    assert "Traceback" not in bad.stderr


def test_compare_arrays_tensors_and_state_dicts_without_shipping_them(ip):
    ready(ip)
    code = (
        "import numpy as np, torch\n"
        "torch.manual_seed(0)\n"
        "net = torch.nn.Sequential(torch.nn.Linear(8, 4), torch.nn.Linear(4, 1))\n"
        "if mpi_rank == 1:\n"
        "    with torch.no_grad():\n"
        "        net[1].bias += 0.5\n"
        "big = np.arange(1_000_000, dtype=np.float64)\n"
        "if mpi_rank == 3:\n"
        "    big[10] += 1e-9\n"
    )
    assert run_cell(ip, f"%%distcomp run w\n{code}").ok
    sd = run_cell(ip, "%distcomp compare w net.state_dict()")
    assert sd.ok
    text = sd.stdout
    assert "mapping of 4 entries" in text and "DIFFERS" in text
    assert "differs in 1 of 4 entries: 1.bias (max |diff| 0.5)" in text
    loss = run_cell(ip, "%distcomp compare w net(torch.ones(8)).sum()")
    odd = next(x for x in loss.stdout.splitlines() if x.startswith("1 "))
    assert "DIFFERS" in odd and float(odd.split()[-1]) == pytest.approx(0.5, rel=1e-5)
    tensor = run_cell(ip, "%distcomp compare w net[0].weight")
    assert "torch float32 4x8" in tensor.stdout and "All ranks agree." in tensor.stdout
    arrays = run_cell(ip, "%distcomp compare w big")
    line = next(x for x in arrays.stdout.splitlines() if x.startswith("3 "))
    assert "numpy float64 1000000" in line and "DIFFERS" in line
    assert float(line.split()[-1]) == pytest.approx(1e-9, rel=1e-3)
    within = run_cell(ip, "%distcomp compare w big --rtol 1e-6").stdout
    assert "All ranks agree within rtol 1e-06 (not all equal)." in within, within


def test_compare_says_why_a_differing_array_has_no_max_diff(ip):
    ready(ip)
    assert run_cell(
        ip, "%%distcomp run w\nimport numpy as np\nv = np.zeros(3 + (mpi_rank == 2))"
    ).ok
    cell = run_cell(ip, "%distcomp compare w v")
    assert cell.ok
    lines = cell.stdout.splitlines()
    odd = next(i for i, line in enumerate(lines) if line.startswith("2 "))
    assert "numpy float64 4" in lines[odd] and "DIFFERS" in lines[odd], cell.stdout
    assert lines[odd + 1].strip() == "no max |diff|: shape (4,) != (3,)", cell.stdout
