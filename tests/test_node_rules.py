"""The rules of emulated nodes, without a process: the flags that give Open MPI a daemon per
node, the variables of a node's ranks, and where the ranks of run cells keep their files
(a copy of the notebook's folder per node, said once; the shared folder where it is over
Azure ML's limit, said with the fix)."""

from __future__ import annotations

import io
from contextlib import redirect_stderr

from jupyter_distcomp.core.layout import rank_environments
from jupyter_distcomp.local.ranks import backend
from jupyter_distcomp.machine import mpi, node_disks, shim
from jupyter_distcomp.machine.hosts import Placement
from jupyter_distcomp.machine.network import node_address
from jupyter_distcomp.notebook.views.env import files_text


def emulated(launcher: str, nodes: int, per_node: int, **tf) -> list[dict[str, str]]:
    hosts = [node_address(n) for n in range(nodes)]
    return rank_environments(launcher, nodes, per_node, hosts[0], 29500, node_hosts=hosts, **tf)


def test_open_mpi_gets_a_daemon_per_node_started_here_as_that_node():
    slots = shim.node_slots(emulated("mpi", 2, 3))
    assert slots == [3, 3]
    flags = mpi.mpiexec_host_args(Placement(), 3, nodes=slots)
    assert flags[flags.index("--host") + 1] == "distcomp-node-0:3,distcomp-node-1:3"
    assert flags[flags.index("plm_ssh_agent") + 1].endswith("rank_side/node_agent.py")
    assert flags[flags.index("prte_if_include") + 1] == "127.0.0.0/8"  # daemons on loopback
    assert flags[flags.index("btl_tcp_if_include") + 1] == "127.0.0.0/8"
    assert shim.launcher_environment(slots)["DISTCOMP_NODE_HOSTS"] == (
        "distcomp-node-0=127.0.0.2,distcomp-node-1=127.0.0.3"
    )
    # one node: one daemon, this machine, as before
    assert "--host" not in mpi.mpiexec_host_args(Placement(), 4, nodes=[4])
    assert shim.node_slots(rank_environments("mpi", 1, 4)) == []
    assert shim.launcher_environment([4]) == {}


def test_uneven_tensorflow_nodes_get_their_own_slots():
    envs = emulated("tensorflow", 2, 1, worker_count=3, parameter_server_count=0)
    assert shim.node_slots(envs) == [2, 1]


def test_a_nodes_ranks_carry_its_name_address_and_nccl_host_id():
    from jupyter_distcomp.rank_side.node_agent import node_environment

    envs = emulated("torch.distributed", 2, 2)
    made = shim.node_environment(envs[3])
    assert made["DISTCOMP_NODE"] == "1" and made["DISTCOMP_NODE_ADDR"] == "127.0.0.3"
    assert made["DISTCOMP_NODE_NAME"] == made["NCCL_HOSTID"] == "distcomp-node-1"
    assert made["DISTCOMP_NODE_PORTS"] == "29500"
    # the launch agent gives a node's daemon the same variables
    agent = node_environment("distcomp-node-1", made["DISTCOMP_NODE_HOSTS"])
    assert agent == {k: made[k] for k in agent}
    assert node_environment("elsewhere", made["DISTCOMP_NODE_HOSTS"]) == {}


def test_run_cells_of_several_nodes_run_in_copies_said_once(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "data.txt").write_text("x")
    monkeypatch.setattr(backend, "_node_files_said", [])
    said = io.StringIO()
    with redirect_stderr(said):
        assert backend._node_local_files("w") and backend._node_local_files("w")
    assert said.getvalue().count("its own copy of the notebook's folder") == 1
    assert "os.environ['DISTCOMP_NOTEBOOK_DIR']" in said.getvalue()
    text = files_text(2, True)
    assert text is not None and "$DISTCOMP_NOTEBOOK_DIR" in text


def test_a_notebook_folder_over_azure_mls_limit_is_shared_and_says_the_fix(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    data = tmp_path / "data"
    data.mkdir()
    for i in range(node_disks.SNAPSHOT_MAX_FILES + 1):
        (data / f"{i}.csv").write_text("x")
    said = io.StringIO()
    with redirect_stderr(said):
        assert not backend._node_local_files("w")
    text = said.getvalue()
    assert "2001 files" in text and "the ranks of w share it" in text
    assert ".amlignore" in text and "%distcomp restart w" in text
    (tmp_path / ".amlignore").write_text("data/\n")
    with redirect_stderr(io.StringIO()):
        assert backend._node_local_files("w")
