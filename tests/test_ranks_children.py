"""Processes a rank starts (a multiprocessing pool, os.fork, a DataLoader's workers): what
they print shows in the cell that started them, labelled with the rank; ``where`` lists
them under their rank; interrupt reaches them.

One 1x2 MPI world shared by the module, driven through a real IPython shell.
"""

from __future__ import annotations

import os

import pytest

from .ranks_support import MPI_SPEC, define, loaded_shell, run_cell
from .waiting import wait_for

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def ip():
    # ipykernel's streams watch fds 1 and 2 (where a child's text goes) unless pytest's
    # variable is set: the ranks start without it, as they do in a notebook
    pytest_variable = os.environ.pop("PYTEST_CURRENT_TEST", None)
    with loaded_shell() as shell:
        define(shell, "kids", MPI_SPEC, nodes=1, per_node=2)
        setup = "import multiprocessing as mp, os, sys, time"
        try:
            assert run_cell(shell, f"%%distcomp run kids\n{setup}").ok
        finally:
            if pytest_variable is not None:
                os.environ["PYTEST_CURRENT_TEST"] = pytest_variable
        yield shell


def test_what_forked_and_spawned_children_print_shows_under_their_rank(ip, tmp_path):
    (tmp_path / "spawned.py").write_text("def hello(rank):\n    print('spawned', rank)\n")
    code = f"""
def hello(rank):
    print('pool child', rank)
    return rank
with mp.get_context('fork').Pool(1) as pool:
    pool.map(hello, [mpi_rank])
sys.path.insert(0, {str(tmp_path)!r})
import spawned
with mp.get_context('spawn').Pool(1) as pool:
    pool.map(spawned.hello, [mpi_rank])
pid = os.fork()
if pid == 0:
    print('forked', mpi_rank)
    sys.stderr.write(f'forked stderr {{mpi_rank}}\\n')
    os._exit(0)
os.waitpid(pid, 0)
from torch.utils.data import DataLoader
class Items:
    def __len__(self):
        return 4
    def __getitem__(self, i):
        print('worker item', i, 'of rank', mpi_rank)
        return i
batches = [int(b) for b in DataLoader(Items(), num_workers=2, batch_size=None)]
print('batches', batches)
"""
    cell = run_cell(ip, f"%%distcomp run kids\n{code}")
    assert cell.ok, cell.error
    lines = cell.stdout.splitlines()
    for rank in (0, 1):
        label = f"[rank {rank}]"
        for line in (f"pool child {rank}", f"spawned {rank}", f"forked {rank}"):
            assert f"{label} {line}" in lines, cell.stdout
        items = sorted(line for line in lines if line.startswith(f"{label} worker item"))
        assert items == [f"{label} worker item {i} of rank {rank}" for i in range(4)]
        assert f"{label} batches [0, 1, 2, 3]" in lines
        assert f"{label} forked stderr {rank}" in cell.stderr.splitlines(), cell.stderr


def test_where_lists_a_ranks_children_and_interrupt_reaches_them(ip, tmp_path):
    code = f"""
pid = os.fork()
if pid == 0:
    try:
        while True:
            time.sleep(0.05)
    except KeyboardInterrupt:
        open(os.path.join({str(tmp_path)!r}, f'child-of-{{mpi_rank}}'), 'w').close()
    os._exit(0)
try:
    while True:
        time.sleep(0.05)
except KeyboardInterrupt:
    os.waitpid(pid, 0)
    print('rank', mpi_rank, 'interrupted')
"""
    assert run_cell(ip, f"%%distcomp run kids --background\n{code}").ok

    def with_children():  # each rank has forked its child
        where = run_cell(ip, "%distcomp where kids")
        assert where.ok, where.error
        return where if where.stdout.count("forked from the rank") == 2 else None

    where = wait_for(with_children, 30, "each rank's child in where", every=0.2)
    for rank in (0, 1):
        assert f"--- rank {rank}: processes it started ---\npid " in where.stdout, where.stdout
    assert where.stdout.count("forked from the rank") == 2, where.stdout
    assert run_cell(ip, "%distcomp interrupt kids").ok
    assert run_cell(ip, "%distcomp wait kids --timeout 30").ok
    assert sorted(p.name for p in tmp_path.iterdir()) == ["child-of-0", "child-of-1"]
    idle = run_cell(ip, "%distcomp where kids")
    assert "processes it started" not in idle.stdout, idle.stdout
