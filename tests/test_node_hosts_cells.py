"""The ranks of ``%%distcomp run`` on emulated nodes: each node a host of its own (its name,
address and Open MPI locality), each node in its own copy of the notebook's folder by
default (the folder itself at ``DISTCOMP_NOTEBOOK_DIR``), errors naming the user's files
and said once for the ranks of every node, and check mode's store reachable on 2 x 1 and
2 x 2 (it bound every interface and landed on loopback, where the ranks of node 1 waited
for it forever).
"""

from __future__ import annotations

import pytest

from jupyter_distcomp.local.ranks import backend

from .ranks_support import MPI_SPEC, TORCH_SPEC, define, loaded_shell, run_cell

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def ip():
    with loaded_shell() as shell:
        yield shell


IDENTITY = """
import os, socket
from mpi4py import MPI
local = MPI.COMM_WORLD.Split_type(MPI.COMM_TYPE_SHARED)
name = socket.gethostname()
print(local.Get_size(), local.Get_rank(), MPI.Get_processor_name() == name, name,
      socket.gethostbyname(name), os.getcwd().endswith("node-" + name[-1] + "/code"),
      os.environ["DISTCOMP_NOTEBOOK_DIR"] == THE_FOLDER, os.path.exists("data.txt"))
"""


def test_mpi_ranks_of_two_nodes_see_two_hosts_each_in_its_copy(ip, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the notebook's folder
    (tmp_path / "data.txt").write_text("prepared")
    (tmp_path / "helper.py").write_text("def boom():\n    raise ValueError('the same on all')\n")
    backend._node_files_said.clear()
    define(ip, "nodes", MPI_SPEC, nodes=2, per_node=2)
    try:
        code = IDENTITY.replace("THE_FOLDER", repr(str(tmp_path)))
        cell = run_cell(ip, f"%%distcomp run nodes\n{code}")
        assert cell.ok, cell.traceback_text() if cell.error else cell.stderr
        lines = sorted(line for line in cell.stdout.splitlines() if "rank" in line)
        assert lines == [
            f"[node {r // 2} rank {r}] 2 {r % 2} True distcomp-node-{r // 2} "
            f"127.0.0.{r // 2 + 2} True True True"
            for r in range(4)
        ]
        assert cell.stderr.count("its own copy of the notebook's folder") == 1
        assert "DistComp.node_local_files = False" in cell.stderr
        # the same error on every rank, from the user's own file: once, named as theirs
        failed = run_cell(ip, "%%distcomp run nodes\nimport helper\nhelper.boom()")
        assert not failed.ok
        text = failed.traceback_text()
        assert text.count("ValueError: the same on all") == 1, text
        assert "ranks 0-3" in text and str(tmp_path / "helper.py") in text, text
        assert "node-" not in text, text
        assert sorted(p.name for p in tmp_path.iterdir()) == ["data.txt", "helper.py"]
    finally:
        run_cell(ip, "%distcomp stop nodes")


INIT = (
    "%%distcomp run t --timeout 120\nimport socket, torch, torch.distributed as dist\n"
    'dist.init_process_group("gloo")\nname = socket.gethostname()'
)


@pytest.mark.parametrize("per_node", [1, 2])
def test_check_mode_on_two_nodes_reaches_its_store(ip, tmp_path, monkeypatch, per_node):
    pytest.importorskip("torch")
    monkeypatch.chdir(tmp_path)
    define(ip, "t", TORCH_SPEC, nodes=2, per_node=per_node)
    try:
        started = run_cell(ip, INIT)
        assert started.ok, started.traceback_text() if started.error else started.stderr
        code = (
            "%%distcomp run t --check-collectives --timeout 60\n"
            "x = torch.ones(4)\ndist.all_reduce(x)\n"
            "print(int(x[0]), name, socket.gethostbyname(name))"
        )
        cell = run_cell(ip, code)
        assert cell.ok, cell.traceback_text() if cell.error else cell.stderr
        size = 2 * per_node
        lines = sorted(line for line in cell.stdout.splitlines() if "rank" in line)
        assert lines == [
            f"[node {r // per_node} rank {r}] {size} distcomp-node-{r // per_node} "
            f"127.0.0.{r // per_node + 2}"
            for r in range(size)
        ]
    finally:
        run_cell(ip, "%distcomp stop t")
