"""The variables each rank sees, per launcher and layout (jupyter_distcomp.core.layout)."""

from __future__ import annotations

import json
import os
import socket
from unittest import mock

import pytest

from jupyter_distcomp.core.layout import (
    LAUNCHER_VARIABLES,
    LOCAL_EXPERIMENT_ID,
    PORT_AT_START,
    RUNTIME_VARIABLES,
    rank_environments,
    rank_table,
    start_environment,
)
from jupyter_distcomp.errors import LayoutError
from jupyter_distcomp.machine.network import free_ports, listener_ports

LAYOUTS = [(1, 1), (1, 4), (2, 2), (3, 1)]
LAUNCHERS = ["torch.distributed", "mpi", "deepspeed", "tensorflow"]
PORT = 29511
LO = "lo"  # what the layout names unless given the interface of the machine running it


# -- test data: user code, copied unchanged (kept as text so no formatter touches it) ---------
# Azure ML docs, "Environment Variables from OpenMPI": a user script's helper
NCCL_HELPER = r"""
import os
def set_environment_variables_for_nccl_backend(master_port=6105, verbose=True):
    os.environ["RANK"] = os.environ["OMPI_COMM_WORLD_RANK"]
    os.environ["WORLD_SIZE"] = os.environ["OMPI_COMM_WORLD_SIZE"]
    single_node = int(os.environ["OMPI_COMM_WORLD_LOCAL_SIZE"]) == int(os.environ["WORLD_SIZE"])
    if not single_node:
        master_node_params = os.environ["AZ_BATCH_MASTER_NODE"].split(":")
        os.environ["MASTER_ADDR"] = master_node_params[0]
        # Do not overwrite master port with that defined in AZ_BATCH_MASTER_NODE
        if "MASTER_PORT" not in os.environ:
            os.environ["MASTER_PORT"] = str(master_port)
    else:
        os.environ["MASTER_ADDR"] = os.environ["AZ_BATCHAI_MPI_MASTER_NODE"]
        os.environ["MASTER_PORT"] = "54965"
    print("NCCL_SOCKET_IFNAME original value = {}".format(os.environ["NCCL_SOCKET_IFNAME"]))
    os.environ["NCCL_SOCKET_IFNAME"] = "^docker0,lo"
    if verbose:
        print("RANK = {}".format(os.environ["RANK"]))
        print("WORLD_SIZE = {}".format(os.environ["WORLD_SIZE"]))
        print("MASTER_ADDR = {}".format(os.environ["MASTER_ADDR"]))
        print("MASTER_PORT = {}".format(os.environ["MASTER_PORT"]))
        print("NCCL_SOCKET_IFNAME new value = {}".format(os.environ["NCCL_SOCKET_IFNAME"]))
"""

# microsoft/DeepSpeed deepspeed/comm/comm.py: what init_distributed does on Azure ML (the
# logger calls are prints here; the logic is unchanged)
DEEPSPEED_AML_PATH = r"""
import os
def deepspeed_init_distributed_env():
    required_env = ["RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "LOCAL_RANK"]
    if not all(v in os.environ for v in required_env):
        if "AZUREML_EXPERIMENT_ID" in os.environ and "DLTS_JOB_ID" not in os.environ:
            patch_aml_env_for_torch_nccl_backend()
        else:
            raise AssertionError("DeepSpeed would fall back to mpi4py discovery")


def patch_aml_env_for_torch_nccl_backend(master_port=6105, verbose=True):
    os.environ["RANK"] = os.environ["OMPI_COMM_WORLD_RANK"]
    os.environ["WORLD_SIZE"] = os.environ["OMPI_COMM_WORLD_SIZE"]
    single_node = int(os.environ["OMPI_COMM_WORLD_LOCAL_SIZE"]) == int(os.environ["WORLD_SIZE"])
    if not single_node:
        master_node_params = os.environ["AZ_BATCH_MASTER_NODE"].split(":")
        os.environ["MASTER_ADDR"] = master_node_params[0]
        # Do not overwrite master port with that defined in AZ_BATCH_MASTER_NODE
        if "MASTER_PORT" not in os.environ:
            os.environ["MASTER_PORT"] = str(master_port)
    else:
        os.environ["MASTER_ADDR"] = os.environ["AZ_BATCHAI_MPI_MASTER_NODE"]
        os.environ["MASTER_PORT"] = "54965"
    if verbose:
        print("NCCL_SOCKET_IFNAME original value = {}".format(os.environ["NCCL_SOCKET_IFNAME"]))
    os.environ["NCCL_SOCKET_IFNAME"] = "^docker0,lo"
    os.environ["LOCAL_RANK"] = os.environ["OMPI_COMM_WORLD_LOCAL_RANK"]
"""


def user_function(source: str, name: str):
    namespace: dict = {}
    exec(compile(source, name, "exec"), namespace)
    return namespace[name]


set_environment_variables_for_nccl_backend = user_function(
    NCCL_HELPER, "set_environment_variables_for_nccl_backend"
)
deepspeed_init_distributed_env = user_function(DEEPSPEED_AML_PATH, "deepspeed_init_distributed_env")


def run_in_env(env: dict[str, str], function) -> dict[str, str]:
    """Run user code with exactly ``env`` as the process environment; return what it leaves."""
    with mock.patch.dict(os.environ, env, clear=True):
        function()
        return dict(os.environ)


# -- every launcher and layout ----------------------------------------------------------------
@pytest.mark.parametrize("launcher", LAUNCHERS)
@pytest.mark.parametrize(("nodes", "ppn"), LAYOUTS, ids=[f"{n}x{p}" for n, p in LAYOUTS])
def test_invariants_for_every_rank(launcher, nodes, ppn):
    envs = rank_environments(launcher, nodes, ppn, master_port=PORT)
    world = nodes if launcher == "tensorflow" else nodes * ppn  # TF: one task per node
    assert len(envs) == world
    for rank, env in enumerate(envs):
        node, local = (rank, 0) if launcher == "tensorflow" else divmod(rank, ppn)
        assert all(isinstance(k, str) and isinstance(v, str) for k, v in env.items())
        assert set(env) == {*LAUNCHER_VARIABLES[launcher], *RUNTIME_VARIABLES} - (
            {"AZ_BATCH_MASTER_NODE"} if launcher == "mpi" and nodes == 1 else set()
        )
        assert env["AZUREML_EXPERIMENT_ID"] == LOCAL_EXPERIMENT_ID
        assert env["AZUREML_PROCESS_NAME"] == f"rank_{rank}"
        assert env["AZUREML_CR_NODE_RANK"] == str(node)
        assert env["AZ_BATCH_HOST_LIST"] == ",".join(["127.0.0.1"] * nodes)
        if launcher in ("torch.distributed", "deepspeed"):
            assert (env["RANK"], env["LOCAL_RANK"], env["NODE_RANK"]) == (
                str(rank),
                str(local),
                str(node),
            )
            assert (env["WORLD_SIZE"], env["MASTER_PORT"]) == (str(world), str(PORT))
        elif launcher == "mpi":
            assert env["OMPI_COMM_WORLD_RANK"] == str(rank)
            assert env["OMPI_COMM_WORLD_LOCAL_RANK"] == str(local)
            assert env["OMPI_COMM_WORLD_NODE_RANK"] == str(local)  # Open MPI's, not the node
            assert env["AZ_BATCHAI_MPI_MASTER_NODE"] == "127.0.0.1"
            assert env["NCCL_SOCKET_IFNAME"] == LO
        else:
            config = json.loads(env["TF_CONFIG"])
            assert config["task"] == {"type": "worker", "index": rank}
            assert config["environment"] == "cloud"
            assert len(config["cluster"]["worker"]) == world
            assert config["cluster"]["ps"] == []  # as Azure ML sends it
    if launcher == "tensorflow":
        clusters = {json.dumps(json.loads(e["TF_CONFIG"])["cluster"]) for e in envs}
        assert len(clusters) == 1, "every task must see the same cluster"


def test_pytorch_is_an_alias_of_torch_distributed():
    assert rank_environments("Pytorch", 1, 2, master_port=PORT) == rank_environments(
        "torch.distributed", 1, 2, master_port=PORT
    )


# -- user code that Azure ML users run, unchanged ---------------------------------------------
@pytest.mark.parametrize(("nodes", "ppn"), LAYOUTS, ids=[f"{n}x{p}" for n, p in LAYOUTS])
def test_azure_docs_nccl_helper_runs_unchanged_on_every_mpi_rank(nodes, ppn, capsys):
    envs = rank_environments("mpi", nodes, ppn, master_addr="127.0.0.1", master_port=PORT)
    results = [run_in_env(env, set_environment_variables_for_nccl_backend) for env in envs]
    assert [r["RANK"] for r in results] == [str(i) for i in range(nodes * ppn)]
    assert {r["WORLD_SIZE"] for r in results} == {str(nodes * ppn)}
    assert {r["MASTER_ADDR"] for r in results} == {"127.0.0.1"}
    # the helper's own port choice, the same on every rank (6105 multi-node, 54965 single)
    assert {r["MASTER_PORT"] for r in results} == {"6105" if nodes > 1 else "54965"}
    assert f"NCCL_SOCKET_IFNAME original value = {LO}" in capsys.readouterr().out


@pytest.mark.parametrize(("nodes", "ppn"), LAYOUTS, ids=[f"{n}x{p}" for n, p in LAYOUTS])
def test_deepspeed_reads_the_pytorch_variables_as_they_are(nodes, ppn):
    envs = rank_environments("deepspeed", nodes, ppn, master_port=PORT)
    results = [run_in_env(env, deepspeed_init_distributed_env) for env in envs]
    assert results == [{**env} for env in envs]  # all five present: no Azure patch runs


@pytest.mark.parametrize(("nodes", "ppn"), LAYOUTS, ids=[f"{n}x{p}" for n, p in LAYOUTS])
def test_deepspeed_under_an_mpi_launcher_takes_its_azure_path(nodes, ppn, capsys):
    # a spec asking for MPI explicitly (launcher: mpi): DeepSpeed maps the Open MPI variables
    envs = rank_environments("mpi", nodes, ppn, master_port=PORT)
    results = [run_in_env(env, deepspeed_init_distributed_env) for env in envs]
    for rank, result in enumerate(results):
        assert result["RANK"] == str(rank)
        assert result["WORLD_SIZE"] == str(nodes * ppn)
        assert result["LOCAL_RANK"] == str(rank % ppn)
        assert result["MASTER_ADDR"] == "127.0.0.1"
        # DeepSpeed's own fixed ports, as on Azure ML
        assert result["MASTER_PORT"] == ("6105" if nodes > 1 else "54965")


# -- TensorFlow -------------------------------------------------------------------------------
def test_tensorflow_with_parameter_servers():
    envs = rank_environments("tensorflow", 2, 2, parameter_server_count=1)
    configs = [json.loads(e["TF_CONFIG"]) for e in envs]
    cluster = configs[0]["cluster"]
    assert len(cluster["worker"]) == 2 and len(cluster["ps"]) == 1  # workers: one per node
    assert [c["task"] for c in configs] == [
        {"type": "worker", "index": 0},
        {"type": "worker", "index": 1},
        {"type": "ps", "index": 0},
    ]
    hosts = cluster["worker"] + cluster["ps"]
    assert len(set(hosts)) == 3, "every task needs its own host:port"
    assert all(h.startswith("127.0.0.1:") for h in hosts)
    assert all(c["cluster"] == cluster for c in configs)


def test_tensorflow_explicit_counts_and_master_port():
    envs = rank_environments(
        "tensorflow", 3, 1, master_port=PORT, worker_count=2, parameter_server_count=1
    )
    config = json.loads(envs[0]["TF_CONFIG"])
    assert config["cluster"]["worker"][0] == f"127.0.0.1:{PORT}"
    assert json.loads(envs[2]["TF_CONFIG"])["task"] == {"type": "ps", "index": 0}


def test_tensorflow_ignores_processes_per_node():
    assert rank_environments("tensorflow", 2, 4, master_port=PORT_AT_START) == (
        rank_environments("tensorflow", 2, 1, master_port=PORT_AT_START)
    )


def test_worker_counts_are_ignored_by_other_launchers():
    envs = rank_environments("mpi", 2, 1, master_port=PORT, worker_count=5)
    assert len(envs) == 2


# -- errors -----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("name", "suggestion"),
    [("torch", "torch.distributed"), ("mpii", "mpi"), ("tensorflw", "tensorflow"), ("ray", None)],
)
def test_unknown_launcher_names_the_closest(name, suggestion):
    with pytest.raises(LayoutError) as info:
        rank_environments(name, 1, 1)
    message = str(info.value)
    assert repr(name) in message and "Use one of: mpi, torch.distributed" in message
    if suggestion:
        assert f"Did you mean '{suggestion}'?" in message
    else:
        assert "Did you mean" not in message


@pytest.mark.parametrize(
    ("kwargs", "text"),
    [
        ({"instance_count": 0}, "instance_count must be at least 1, got 0"),
        ({"process_count_per_node": -2}, "process_count_per_node must be at least 1"),
        ({"instance_count": "two"}, "instance_count must be a whole number, got 'two'"),
        ({"worker_count": 0}, "worker_count must be at least 1"),
        ({"parameter_server_count": -1}, "parameter_server_count must be at least 0"),
    ],
)
def test_invalid_counts(kwargs, text):
    args = {"instance_count": 1, "process_count_per_node": 2, **kwargs}
    launcher = (
        "tensorflow" if "worker_count" in kwargs or "parameter_server_count" in kwargs else "mpi"
    )
    with pytest.raises(LayoutError, match=text):
        rank_environments(launcher, **args)


def test_counts_given_as_text_are_accepted():
    assert len(rank_environments("mpi", "2", " 3 ", master_port=PORT)) == 6


# -- ports ------------------------------------------------------------------------------------
@pytest.mark.parametrize("launcher", LAUNCHERS)
def test_the_layout_binds_nothing_and_gives_azure_ports_unless_given_others(launcher):
    with mock.patch("socket.socket.bind", side_effect=AssertionError("bound")):
        envs = rank_environments(launcher, 2, 1, master_addr="203.0.113.9")
        given = rank_environments(launcher, 2, 1, master_addr="203.0.113.9", master_port=PORT)
    text = json.dumps(envs)
    assert "203.0.113.9:2222" in text if launcher == "tensorflow" else "6105" in text
    assert str(PORT) in json.dumps(given)


def test_the_ports_a_world_takes_here_are_free_and_reach_every_rank():
    ports = listener_ports("127.0.0.1", 1)
    assert ports is not None
    envs = rank_environments("torch.distributed", 1, 2, master_port=ports)
    port = int(envs[0]["MASTER_PORT"])
    assert port != 6105 and {e["MASTER_PORT"] for e in envs} == {str(port)}
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))  # free: a rank 0 can listen on it
    tf = rank_environments("tensorflow", 3, 1, master_port=listener_ports("127.0.0.1", 3))
    hosts = json.loads(tf[0]["TF_CONFIG"])["cluster"]["worker"]
    assert len(set(hosts)) == 3 and "127.0.0.1:2222" not in hosts


def test_free_ports_are_distinct_and_bindable():
    ports = free_ports("127.0.0.1", 8)
    assert len(set(ports)) == 8
    for port in ports:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", port))


def test_no_port_is_taken_on_an_address_of_another_machine():
    with mock.patch("socket.socket.bind", side_effect=AssertionError("bound")):
        assert listener_ports("203.0.113.9", 2) is None


def test_a_layout_given_the_wrong_number_of_ports_says_so():
    with pytest.raises(ValueError, match=r"listens on 3 port\(s\), 1 given"):
        rank_environments("tensorflow", 3, 1, master_port=[1234])


def test_the_tensorflow_layout_of_the_issue_needs_no_local_port():
    envs = rank_environments("tensorflow", 2, 1, master_addr="10.0.0.4", master_port=6105)
    cluster = json.loads(envs[1]["TF_CONFIG"])["cluster"]
    assert cluster == {"worker": ["10.0.0.4:6105", "10.0.0.4:6106"], "ps": []}


def test_views_show_ports_as_chosen_at_start():
    envs = rank_environments("mpi", 2, 1, master_port=PORT_AT_START)
    assert envs[0]["AZ_BATCH_MASTER_NODE"] == f"127.0.0.1:{PORT_AT_START}"
    tf = rank_environments("tensorflow", 2, 1, master_port=PORT_AT_START)
    assert json.loads(tf[0]["TF_CONFIG"])["cluster"]["worker"] == [f"127.0.0.1:{PORT_AT_START}"] * 2


# -- display ----------------------------------------------------------------------------------
def test_rank_table_rows():
    envs = rank_environments("torch.distributed", 2, 2, master_port=PORT)
    rows = rank_table("torch.distributed", envs)
    assert list(rows[3]) == [
        "rank",
        "node",
        "local rank",
        "MASTER_ADDR",
        "MASTER_PORT",
        "WORLD_SIZE",
        "NODE_RANK",
        "RANK",
        "LOCAL_RANK",
        *RUNTIME_VARIABLES,
    ]
    assert (rows[3]["rank"], rows[3]["node"], rows[3]["local rank"]) == ("3", "1", "1")
    tf_rows = rank_table("tensorflow", rank_environments("tensorflow", 2, 3, worker_count=4))
    assert [(r["node"], r["local rank"]) for r in tf_rows] == [
        ("0", "0"),
        ("0", "1"),
        ("1", "0"),
        ("1", "1"),
    ]


def test_the_start_environment_is_the_specs_variables_every_rank_shares():
    envs = [
        {"PYTHONPATH": "/src", "RANK": "0", "MIXED": "a"},
        {"PYTHONPATH": "/src", "RANK": "1", "MIXED": "b"},
    ]
    # a launcher's own variable (RANK) is not the spec's; a spec's that differs per rank
    # (the launcher set it) stays with each rank's setup
    assert start_environment(envs, ["PYTHONPATH", "MIXED", "ABSENT"]) == {"PYTHONPATH": "/src"}
    assert start_environment([], ["PYTHONPATH"]) == {}
