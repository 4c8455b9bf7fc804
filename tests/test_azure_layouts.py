"""Each rank's variables and the submitted job, per launcher and layout, against tables
written by hand from the reference (shared/reference/azureml.md sections 3 and 4, and
docs/azureml-variables.md).

The master address 10.0.0.4 is not this machine's, so nothing is bound and the ports are
Azure ML's own: 6105 (PyTorch, MPI) and 2222 onwards (one per TensorFlow task on that host).
"""

from __future__ import annotations

import json

import pytest

from jupyter_distcomp import load_component
from jupyter_distcomp.azureml import submit
from jupyter_distcomp.core.layout import rank_environments

from .azure_standin import AzureStandIn

ADDR = "10.0.0.4"
LAYOUTS = ["1x1", "1x4", "2x2", "3x1"]
EXP = "jupyter-distcomp-local"  # AZUREML_EXPERIMENT_ID: Azure's id, present on every rank

TORCH_COLUMNS = (
    "MASTER_ADDR MASTER_PORT WORLD_SIZE NODE_RANK RANK LOCAL_RANK "
    "AZUREML_PROCESS_NAME AZUREML_CR_NODE_RANK AZ_BATCH_HOST_LIST"
)
TORCH = {
    "1x1": """
        10.0.0.4 6105 1 0 0 0 rank_0 0 10.0.0.4
    """,
    "1x4": """
        10.0.0.4 6105 4 0 0 0 rank_0 0 10.0.0.4
        10.0.0.4 6105 4 0 1 1 rank_1 0 10.0.0.4
        10.0.0.4 6105 4 0 2 2 rank_2 0 10.0.0.4
        10.0.0.4 6105 4 0 3 3 rank_3 0 10.0.0.4
    """,
    "2x2": """
        10.0.0.4 6105 4 0 0 0 rank_0 0 10.0.0.4,10.0.0.4
        10.0.0.4 6105 4 0 1 1 rank_1 0 10.0.0.4,10.0.0.4
        10.0.0.4 6105 4 1 2 0 rank_2 1 10.0.0.4,10.0.0.4
        10.0.0.4 6105 4 1 3 1 rank_3 1 10.0.0.4,10.0.0.4
    """,
    "3x1": """
        10.0.0.4 6105 3 0 0 0 rank_0 0 10.0.0.4,10.0.0.4,10.0.0.4
        10.0.0.4 6105 3 1 1 0 rank_1 1 10.0.0.4,10.0.0.4,10.0.0.4
        10.0.0.4 6105 3 2 2 0 rank_2 2 10.0.0.4,10.0.0.4,10.0.0.4
    """,
}

# OMPI_COMM_WORLD_NODE_RANK is the rank within the node (Open MPI), not the node index;
# AZ_BATCH_MASTER_NODE only on several nodes, AZ_BATCHAI_MPI_MASTER_NODE on every layout
MPI_COLUMNS = (
    "OMPI_COMM_WORLD_RANK OMPI_COMM_WORLD_SIZE OMPI_COMM_WORLD_LOCAL_RANK "
    "OMPI_COMM_WORLD_LOCAL_SIZE OMPI_COMM_WORLD_NODE_RANK AZ_BATCH_MASTER_NODE "
    "AZ_BATCHAI_MPI_MASTER_NODE NCCL_SOCKET_IFNAME "
    "AZUREML_PROCESS_NAME AZUREML_CR_NODE_RANK AZ_BATCH_HOST_LIST"
)
MPI = {
    "1x1": """
        0 1 0 1 0 - 10.0.0.4 LO rank_0 0 10.0.0.4
    """,
    "1x4": """
        0 4 0 4 0 - 10.0.0.4 LO rank_0 0 10.0.0.4
        1 4 1 4 1 - 10.0.0.4 LO rank_1 0 10.0.0.4
        2 4 2 4 2 - 10.0.0.4 LO rank_2 0 10.0.0.4
        3 4 3 4 3 - 10.0.0.4 LO rank_3 0 10.0.0.4
    """,
    "2x2": """
        0 4 0 2 0 10.0.0.4:6105 10.0.0.4 LO rank_0 0 10.0.0.4,10.0.0.4
        1 4 1 2 1 10.0.0.4:6105 10.0.0.4 LO rank_1 0 10.0.0.4,10.0.0.4
        2 4 0 2 0 10.0.0.4:6105 10.0.0.4 LO rank_2 1 10.0.0.4,10.0.0.4
        3 4 1 2 1 10.0.0.4:6105 10.0.0.4 LO rank_3 1 10.0.0.4,10.0.0.4
    """,
    "3x1": """
        0 3 0 1 0 10.0.0.4:6105 10.0.0.4 LO rank_0 0 10.0.0.4,10.0.0.4,10.0.0.4
        1 3 0 1 0 10.0.0.4:6105 10.0.0.4 LO rank_1 1 10.0.0.4,10.0.0.4,10.0.0.4
        2 3 0 1 0 10.0.0.4:6105 10.0.0.4 LO rank_2 2 10.0.0.4,10.0.0.4,10.0.0.4
    """,
}

# TensorFlow: worker_count defaults to the instance count (one task per node);
# process_count_per_node does not apply; "ps": [] is there as Azure sends it
TF_COLUMNS = "TASK AZUREML_PROCESS_NAME AZUREML_CR_NODE_RANK AZ_BATCH_HOST_LIST"
TF_WORKERS = {
    "1x1": ["10.0.0.4:2222"],
    "1x4": ["10.0.0.4:2222"],
    "2x2": ["10.0.0.4:2222", "10.0.0.4:2223"],
    "3x1": ["10.0.0.4:2222", "10.0.0.4:2223", "10.0.0.4:2224"],
}
TF = {
    "1x1": """
        worker:0 rank_0 0 10.0.0.4
    """,
    "1x4": """
        worker:0 rank_0 0 10.0.0.4
    """,
    "2x2": """
        worker:0 rank_0 0 10.0.0.4,10.0.0.4
        worker:1 rank_1 1 10.0.0.4,10.0.0.4
    """,
    "3x1": """
        worker:0 rank_0 0 10.0.0.4,10.0.0.4,10.0.0.4
        worker:1 rank_1 1 10.0.0.4,10.0.0.4,10.0.0.4
        worker:2 rank_2 2 10.0.0.4,10.0.0.4,10.0.0.4
    """,
}


def table(columns: str, rows: str) -> list[dict[str, str]]:
    """The hand-written rows as dicts; ``-`` is an absent variable, LO the loopback interface
    the layout is given (``lo`` unless told otherwise)."""
    names = columns.split()
    envs = []
    for line in rows.strip().splitlines():
        values = line.split()
        assert len(values) == len(names), line
        env = {n: v for n, v in zip(names, values, strict=True) if v != "-"}
        if env.get("NCCL_SOCKET_IFNAME") == "LO":
            env["NCCL_SOCKET_IFNAME"] = "lo"
        envs.append({**env, "AZUREML_EXPERIMENT_ID": EXP})
    return envs


def tf_table(layout: str) -> list[dict[str, str]]:
    envs = []
    for env in table(TF_COLUMNS, TF[layout]):
        kind, index = env.pop("TASK").split(":")
        config = {
            "cluster": {"worker": TF_WORKERS[layout], "ps": []},
            "task": {"type": kind, "index": int(index)},
            "environment": "cloud",
        }
        envs.append({**env, "TF_CONFIG": config})
    return envs


def layout_of(name: str) -> tuple[int, int]:
    nodes, ppn = name.split("x")
    return int(nodes), int(ppn)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("launcher", ["torch.distributed", "deepspeed"])
def test_pytorch_distribution_ranks_match_the_reference(launcher, layout):
    # DeepSpeed runs under Azure's PyTorch distribution: exactly the same variables
    envs = rank_environments(launcher, *layout_of(layout), master_addr=ADDR)
    assert envs == table(TORCH_COLUMNS, TORCH[layout])


@pytest.mark.parametrize("layout", LAYOUTS)
def test_mpi_ranks_match_the_reference(layout):
    envs = rank_environments("mpi", *layout_of(layout), master_addr=ADDR)
    assert envs == table(MPI_COLUMNS, MPI[layout])


@pytest.mark.parametrize("layout", LAYOUTS)
def test_tensorflow_tasks_match_the_reference(layout):
    envs = rank_environments("tensorflow", *layout_of(layout), master_addr=ADDR)
    parsed = [{**env, "TF_CONFIG": json.loads(env["TF_CONFIG"])} for env in envs]
    assert parsed == tf_table(layout)


def test_tensorflow_parameter_servers_follow_the_workers():
    envs = rank_environments(
        "tensorflow", 2, 1, master_addr=ADDR, worker_count=3, parameter_server_count=1
    )
    configs = [json.loads(env["TF_CONFIG"]) for env in envs]
    assert configs[0]["cluster"] == {
        "worker": ["10.0.0.4:2222", "10.0.0.4:2223", "10.0.0.4:2224"],
        "ps": ["10.0.0.4:2225"],
    }
    assert [c["task"] for c in configs] == [
        {"type": "worker", "index": 0},
        {"type": "worker", "index": 1},
        {"type": "worker", "index": 2},
        {"type": "ps", "index": 0},
    ]
    # four tasks on two nodes, in order: two on each
    assert [env["AZUREML_CR_NODE_RANK"] for env in envs] == ["0", "0", "1", "1"]


# -- the submitted job --------------------------------------------------------------------
SPEC = """\
name: layout_job
type: DistributedComponent
inputs: {}
outputs: {}
launcher:
  type: LAUNCHER
  additional_arguments: python train.py
environment:
  name: AzureML-Minimal
"""

#: the REST ``distribution`` Azure ML receives, by launcher (nodes, ppn filled in)
DISTRIBUTIONS = {
    "mpi": lambda nodes, ppn: {"distributionType": "Mpi", "processCountPerInstance": ppn},
    "torch.distributed": lambda nodes, ppn: {
        "distributionType": "PyTorch",
        "processCountPerInstance": ppn,
    },
    "deepspeed": lambda nodes, ppn: {"distributionType": "PyTorch", "processCountPerInstance": ppn},
    "tensorflow": lambda nodes, ppn: {
        "distributionType": "TensorFlow",
        "workerCount": nodes,
        "parameterServerCount": 0,
    },
}


@pytest.fixture(scope="module")
def standin():
    with AzureStandIn() as server:
        yield server


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:The `context` parameter is deprecated")
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("launcher", list(DISTRIBUTIONS))
def test_the_submitted_job_carries_the_layout(standin, tmp_path, launcher, layout):
    (tmp_path / "train.py").write_text("print('training')\n")
    spec = tmp_path / "spec.yaml"
    spec.write_text(SPEC.replace("LAUNCHER", launcher))
    component = load_component(spec)
    nodes, ppn = layout_of(layout)
    component.runsettings.resource_layout.configure(
        instance_count=nodes, process_count_per_node=ppn
    )
    before = len(standin.job_puts())
    submit(component, standin.ml_client(show_progress=False), compute="cpu-cluster")
    put = standin.job_puts()[before]
    body = put.body["properties"]
    assert body["resources"]["instanceCount"] == nodes
    assert body["distribution"] == DISTRIBUTIONS[launcher](nodes, ppn)
