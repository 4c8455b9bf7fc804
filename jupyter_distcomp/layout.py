"""(launcher, instance_count, process_count_per_node) -> the variables Azure ML gives each rank.

Why: a local run is only a rehearsal of the Azure ML job if every rank sees exactly what it
would see there, so all variables are derived here, in one place, from the layout (and shown
to the user as a per-rank table). Ranks are laid out node by node: rank = node * ppn + local.

What each launcher gets (from Azure ML's documentation of distributed training):

- ``torch.distributed``: MASTER_ADDR, MASTER_PORT, WORLD_SIZE, NODE_RANK (per node), RANK,
  LOCAL_RANK, the six the Azure ML docs list ("Distributed GPU training guide"). No
  LOCAL_WORLD_SIZE: only torchrun sets that, and Azure ML's docs do not say it does, so a script relying on it must fail here as it would there.
- ``mpi``: OMPI_COMM_WORLD_RANK / _SIZE / _LOCAL_RANK / _LOCAL_SIZE; AZ_BATCH_MASTER_NODE =
  ``addr:port`` on more than one node, AZ_BATCHAI_MPI_MASTER_NODE = ``addr`` on one node
  (the docs' ``set_environment_variables_for_nccl_backend`` helper reads exactly one). OMPI_COMM_WORLD_NODE_RANK is included with
  the value Open MPI gives on Azure's nodes, one job per node: the rank *within the node*
  (= the local rank), NOT the node index (a trap for that helper, kept visible). Setting it also
  overrides the single-host value mpiexec would leak into an emulated multi-node layout.
  NCCL_SOCKET_IFNAME is set on Azure's images and that helper reads it
  unconditionally; locally it names the loopback interface (``lo``, ``lo0`` on macOS).
- ``deepspeed``: Azure runs DeepSpeed under the MPI distribution, so the mpi variables plus
  AZUREML_EXPERIMENT_ID, through which ``deepspeed.comm.init_distributed`` detects Azure ML
  and maps OMPI_* to RANK / WORLD_SIZE / LOCAL_RANK (``patch_aml_env_for_torch_nccl_backend``
  in microsoft/DeepSpeed deepspeed/comm/comm.py; it runs only when one of RANK, WORLD_SIZE,
  MASTER_ADDR, MASTER_PORT, LOCAL_RANK is missing). On more than one node that path keeps an
  existing MASTER_PORT (else 6105), so MASTER_PORT is set to our free port. On one node it
  forces MASTER_PORT=54965, a fixed port that would collide between local runs, so there we
  also set RANK, WORLD_SIZE, LOCAL_RANK and MASTER_ADDR to the values it would compute:
  DeepSpeed then skips it and uses our port (the one visible difference: a script reading
  RANK before ``deepspeed.init_distributed`` works locally on one node, not on Azure).
- ``tensorflow``: TF_CONFIG with a distinct ``host:port`` per task; workers take the first
  ranks, then parameter servers (``ps`` only when there are some); ``environment: cloud``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from .contracts import LAUNCHERS, launcher_name
from .errors import LayoutError, did_you_mean
from .mpi import free_ports, loopback_interface
from .settings import positive

RankEnv = dict[str, str]

#: launchers whose ranks form one MPI world: one mpiexec locally, the MPI distribution on Azure
MPI_LAUNCHERS = ("mpi", "deepspeed")

#: stands in for the id of an Azure ML experiment, which DeepSpeed only tests for presence
LOCAL_EXPERIMENT_ID = "jupyter-distcomp-local"

#: the variables of each launcher, in display order
LAUNCHER_VARIABLES: dict[str, tuple[str, ...]] = {
    "torch.distributed": (
        "MASTER_ADDR",
        "MASTER_PORT",
        "WORLD_SIZE",
        "NODE_RANK",
        "RANK",
        "LOCAL_RANK",
    ),
    "mpi": (
        "OMPI_COMM_WORLD_RANK",
        "OMPI_COMM_WORLD_SIZE",
        "OMPI_COMM_WORLD_LOCAL_RANK",
        "OMPI_COMM_WORLD_LOCAL_SIZE",
        "OMPI_COMM_WORLD_NODE_RANK",
        "AZ_BATCH_MASTER_NODE",
        "AZ_BATCHAI_MPI_MASTER_NODE",
        "NCCL_SOCKET_IFNAME",
    ),
    "tensorflow": ("TF_CONFIG",),
}
LAUNCHER_VARIABLES["deepspeed"] = (
    *LAUNCHER_VARIABLES["mpi"],
    "AZUREML_EXPERIMENT_ID",
    "MASTER_PORT",
    "MASTER_ADDR",
    "RANK",
    "WORLD_SIZE",
    "LOCAL_RANK",
)


def layout_text(instance_count: int, process_count_per_node: int) -> str:
    """How every message names a layout: ``2 node(s) x 4 process(es)``."""
    return f"{instance_count} node(s) x {process_count_per_node} process(es)"


def _launcher(launcher: str) -> str:
    name = launcher_name(launcher)
    if name is None:
        name = str(launcher).strip().lower()
        starts = [choice for choice in LAUNCHERS if name and choice.startswith(name)]
        hint = f" Did you mean '{starts[0]}'?" if starts else did_you_mean(name, LAUNCHERS)
        raise LayoutError(
            f"unknown launcher {launcher!r}.{hint} Use one of: {', '.join(LAUNCHERS)}."
        )
    return name


def rank_environments(
    launcher: str,
    instance_count: int,
    process_count_per_node: int,
    master_addr: str = "127.0.0.1",
    master_port: int | None = None,
    worker_count: int | None = None,
    parameter_server_count: int = 0,
    node_hosts: Sequence[str] | None = None,
) -> list[RankEnv]:
    """One dict of variables per global rank, in rank order (see the module docstring).

    ``node_hosts``: the host of each node when nodes are real hosts (``TF_CONFIG`` names
    them; NCCL then finds its interface itself); None: every node on ``master_addr``.

    ``master_port`` None picks a free port on ``master_addr``; TensorFlow gets one per task
    (the first is ``master_port`` when given). ``worker_count`` and
    ``parameter_server_count`` apply to TensorFlow only.
    """
    kind = _launcher(launcher)
    nodes = positive("instance_count", instance_count)
    ppn = positive("process_count_per_node", process_count_per_node)
    world = nodes * ppn
    if kind == "tensorflow":
        return _tensorflow(
            nodes, ppn, master_addr, master_port, worker_count, parameter_server_count, node_hosts
        )
    local = "127.0.0.1" if node_hosts else master_addr  # other hosts' ports: a guess from here
    port = str(master_port if master_port is not None else free_ports(local, 1)[0])
    if kind == "torch.distributed":
        return [
            {
                "MASTER_ADDR": master_addr,
                "MASTER_PORT": port,
                "WORLD_SIZE": str(world),
                "NODE_RANK": str(rank // ppn),
                "RANK": str(rank),
                "LOCAL_RANK": str(rank % ppn),
            }
            for rank in range(world)
        ]
    interface = loopback_interface()
    envs = []
    for rank in range(world):
        env = {
            "OMPI_COMM_WORLD_RANK": str(rank),
            "OMPI_COMM_WORLD_SIZE": str(world),
            "OMPI_COMM_WORLD_LOCAL_RANK": str(rank % ppn),
            "OMPI_COMM_WORLD_LOCAL_SIZE": str(ppn),
            "OMPI_COMM_WORLD_NODE_RANK": str(rank % ppn),
        }
        if nodes > 1:
            env["AZ_BATCH_MASTER_NODE"] = f"{master_addr}:{port}"
        else:
            env["AZ_BATCHAI_MPI_MASTER_NODE"] = master_addr
        if not node_hosts:
            env["NCCL_SOCKET_IFNAME"] = interface
        if kind == "deepspeed":
            env["AZUREML_EXPERIMENT_ID"] = LOCAL_EXPERIMENT_ID
            env["MASTER_PORT"] = port
            if nodes == 1:
                env.update(
                    MASTER_ADDR=master_addr,
                    RANK=str(rank),
                    WORLD_SIZE=str(world),
                    LOCAL_RANK=str(rank % ppn),
                )
        envs.append(env)
    return envs


def _tensorflow(
    nodes: int,
    ppn: int,
    addr: str,
    master_port: int | None,
    worker_count: int | None,
    parameter_server_count: int,
    node_hosts: Sequence[str] | None = None,
) -> list[RankEnv]:
    world = nodes * ppn
    ps = positive("parameter_server_count", parameter_server_count, minimum=0)
    workers = world - ps if worker_count is None else positive("worker_count", worker_count)
    if workers < 1 or workers + ps != world:
        fix = f"worker_count={world - ps}" if world - ps >= 1 else f"parameter_server_count<{world}"
        raise LayoutError(
            f"tensorflow: worker_count ({workers}) + parameter_server_count ({ps}) must equal "
            f"the number of ranks, {layout_text(nodes, ppn)} = {world}. "
            f"Fix: set {fix}, or change instance_count / process_count_per_node."
        )
    local = "127.0.0.1" if node_hosts else addr  # other hosts' ports: a guess from here
    fresh = free_ports(local, world - (master_port is not None))
    ports = ([master_port] if master_port is not None else []) + fresh
    hosts = [
        f"{node_hosts[rank // ppn] if node_hosts else addr}:{port}"
        for rank, port in enumerate(ports)
    ]
    cluster: dict[str, Any] = {"worker": hosts[:workers]}
    if ps:
        cluster["ps"] = hosts[workers:]
    envs = []
    for rank in range(world):
        task = (
            {"type": "worker", "index": rank}
            if rank < workers
            else {"type": "ps", "index": rank - workers}
        )
        config = {"cluster": cluster, "task": task, "environment": "cloud"}
        envs.append({"TF_CONFIG": json.dumps(config)})
    return envs


def rank_table(
    launcher: str, envs: list[RankEnv], process_count_per_node: int
) -> list[dict[str, str]]:
    """Rows for display: rank, node, local rank, then the launcher's variables in order."""
    ppn = positive("process_count_per_node", process_count_per_node)
    order = LAUNCHER_VARIABLES.get(_launcher(launcher), ())
    rows = []
    for rank, env in enumerate(envs):
        row = {"rank": str(rank), "node": str(rank // ppn), "local rank": str(rank % ppn)}
        row.update({name: env[name] for name in order if name in env})
        row.update({name: value for name, value in env.items() if name not in row})
        rows.append(row)
    return rows


__all__ = [
    "LAUNCHER_VARIABLES",
    "LOCAL_EXPERIMENT_ID",
    "RankEnv",
    "rank_environments",
    "rank_table",
]
