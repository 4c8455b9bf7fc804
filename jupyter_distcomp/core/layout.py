"""(launcher, layout) -> the variables Azure ML gives each rank.

Why: a local run is only a rehearsal of the Azure ML job if every rank sees exactly what it
would see there, so all variables are derived here, in one place, from the layout (and shown
to the user as a per-rank table). Ranks are laid out node by node: rank = node * ppn + local.
docs/azureml-variables.md lists each variable with its source.

What each launcher gets:

- ``torch.distributed``: MASTER_ADDR, MASTER_PORT, WORLD_SIZE, NODE_RANK (per node), RANK,
  LOCAL_RANK, the six the Azure ML docs list ("Distributed GPU training guide"). No
  LOCAL_WORLD_SIZE: only torchrun sets that, so a script relying on it fails here as there.
- ``deepspeed``: Azure ML runs DeepSpeed under the PyTorch distribution (every DeepSpeed job
  in Azure/azureml-examples), so exactly the PyTorch variables; ``deepspeed.init_distributed``
  reads them (env://). A spec that wants DeepSpeed under MPI says ``launcher: {type: mpi}``
  (v2: ``distribution: {type: mpi}``).
- ``mpi``: OMPI_COMM_WORLD_RANK / _SIZE / _LOCAL_RANK / _LOCAL_SIZE; AZ_BATCHAI_MPI_MASTER_NODE
  = ``addr`` on every layout and AZ_BATCH_MASTER_NODE = ``addr:port`` on more than one node.
  OMPI_COMM_WORLD_NODE_RANK has the value Open MPI gives on Azure's nodes, one job per node:
  the rank *within the node*, NOT the node index (a trap of the docs' NCCL helper, kept
  visible). NCCL_SOCKET_IFNAME is set on Azure's images; locally it names the loopback
  interface (``lo``, ``lo0`` on macOS).
- ``tensorflow``: one task per rank, ``worker_count`` workers (default: the instance count,
  one per node, as azure-ai-ml's TensorFlowDistribution) then ``parameter_server_count``
  parameter servers, spread over the nodes in order; process_count_per_node does not apply.
  TF_CONFIG has Azure's shape, ``"ps": []`` included when there are no parameter servers.
- every launcher: the runtime variables AZUREML_EXPERIMENT_ID, AZUREML_PROCESS_NAME
  (``rank_N``), AZUREML_CR_NODE_RANK (the node index) and AZ_BATCH_HOST_LIST (the nodes'
  addresses, comma-separated).

Ports and interfaces are arguments, never looked up here: Azure ML uses fixed ports (6105,
TensorFlow 2222) on machines of their own, which ``master_port=None`` gives. Local runs
share one machine, so the layer that starts ranks takes free ports there once per world
(``machine.hosts.Placement.rank_environments``) and passes them in; every view shows those.
Before a world exists the views pass ``PORT_AT_START``, which stands in for every port.
``socket_ifname`` is the loopback interface of the machine that runs the ranks.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from ..contracts import LAUNCHERS, launcher_name
from ..errors import LayoutError, did_you_mean
from .run_settings import positive

RankEnv = dict[str, str]
Port = int | str

#: launchers whose ranks form one MPI world: one mpiexec locally, the MPI distribution on Azure
MPI_LAUNCHERS = ("mpi",)

#: stands in for the id of an Azure ML experiment, which scripts only test for presence
LOCAL_EXPERIMENT_ID = "jupyter-distcomp-local"

#: what the views show for a port before the ranks that hold it exist
PORT_AT_START = "<chosen at start>"

#: Azure ML's own ports (v1 docs: MASTER_PORT 6105; TF_CONFIG in the docs' example: 2222)
AZURE_MASTER_PORT = 6105
AZURE_TF_PORT = 2222

#: set by Azure ML's runtime on every rank of every launcher (see the module docstring)
RUNTIME_VARIABLES = (
    "AZUREML_EXPERIMENT_ID",
    "AZUREML_PROCESS_NAME",
    "AZUREML_CR_NODE_RANK",
    "AZ_BATCH_HOST_LIST",
)

_TORCH = ("MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "NODE_RANK", "RANK", "LOCAL_RANK")

#: the variables of each launcher, in display order (the runtime ones follow)
LAUNCHER_VARIABLES: dict[str, tuple[str, ...]] = {
    "torch.distributed": _TORCH,
    "deepspeed": _TORCH,
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


def tensorflow_tasks(
    instance_count: int, worker_count: int | None, parameter_server_count: int
) -> tuple[int, int]:
    """(workers, parameter servers) of a TensorFlow layout; workers default to one per node."""
    nodes = positive("instance_count", instance_count)
    workers = nodes if worker_count is None else positive("worker_count", worker_count)
    return workers, positive("parameter_server_count", parameter_server_count, minimum=0)


def rank_places(
    launcher: str,
    instance_count: int,
    process_count_per_node: int,
    worker_count: int | None = None,
    parameter_server_count: int = 0,
) -> list[tuple[int, int]]:
    """(node, local rank) of every rank, in rank order: the world's size and shape."""
    nodes = positive("instance_count", instance_count)
    if _launcher(launcher) == "tensorflow":
        workers, ps = tensorflow_tasks(nodes, worker_count, parameter_server_count)
        tasks = workers + ps
        node_of = [task * nodes // tasks for task in range(tasks)]
        return [(node, node_of[:task].count(node)) for task, node in enumerate(node_of)]
    ppn = positive("process_count_per_node", process_count_per_node)
    return [(rank // ppn, rank % ppn) for rank in range(nodes * ppn)]


def ports_needed(
    launcher: str,
    instance_count: int,
    process_count_per_node: int,
    worker_count: int | None = None,
    parameter_server_count: int = 0,
) -> int:
    """How many ports a layout listens on: one per TensorFlow task, else MASTER_PORT alone."""
    if _launcher(launcher) != "tensorflow":
        return 1
    workers, ps = tensorflow_tasks(instance_count, worker_count, parameter_server_count)
    return workers + ps


def _ports(count: int, master_port: Port | Sequence[int] | None, azure_port: int) -> list[Port]:
    """``count`` ports: the given ones, or ``master_port`` (else Azure's) and the ones after
    it; a placeholder (a string) stands for every port."""
    if isinstance(master_port, str):
        return [master_port] * count
    if master_port is None or isinstance(master_port, int):
        first = azure_port if master_port is None else master_port
        return [first + index for index in range(count)]
    ports: list[Port] = list(master_port)
    if len(ports) != count:
        raise ValueError(f"the layout listens on {count} port(s), {len(ports)} given")
    return ports


def rank_environments(
    launcher: str,
    instance_count: int,
    process_count_per_node: int,
    master_addr: str = "127.0.0.1",
    master_port: Port | Sequence[int] | None = None,
    worker_count: int | None = None,
    parameter_server_count: int = 0,
    node_hosts: Sequence[str] | None = None,
    socket_ifname: str = "lo",
) -> list[RankEnv]:
    """One dict of variables per global rank, in rank order (see the module docstring).

    ``node_hosts``: the host of each node when nodes are real hosts (``TF_CONFIG`` and
    ``AZ_BATCH_HOST_LIST`` name them; NCCL then finds its interface itself); None: every
    node on ``master_addr``, NCCL on ``socket_ifname``.

    ``master_port``: the ports in the order :func:`ports_needed` counts them (TensorFlow:
    one per task, MASTER_PORT otherwise); one port: it and the ones after it; None: Azure
    ML's; ``PORT_AT_START`` (any string) is shown in place of every port.
    ``worker_count`` and ``parameter_server_count`` apply to TensorFlow only.
    """
    kind = _launcher(launcher)
    places = rank_places(
        kind, instance_count, process_count_per_node, worker_count, parameter_server_count
    )
    nodes = positive("instance_count", instance_count)
    hosts = list(node_hosts[:nodes]) if node_hosts else [master_addr] * nodes
    runtime = [
        {
            "AZUREML_EXPERIMENT_ID": LOCAL_EXPERIMENT_ID,
            "AZUREML_PROCESS_NAME": f"rank_{rank}",
            "AZUREML_CR_NODE_RANK": str(node),
            "AZ_BATCH_HOST_LIST": ",".join(hosts),
        }
        for rank, (node, _) in enumerate(places)
    ]
    if kind == "tensorflow":
        workers, _ = tensorflow_tasks(nodes, worker_count, parameter_server_count)
        ports = _ports(len(places), master_port, AZURE_TF_PORT)
        addrs = [hosts[node] for node, _ in places]
        return [
            {**extra, **env}
            for env, extra in zip(runtime, _tf_configs(addrs, ports, workers), strict=True)
        ]
    port = str(_ports(1, master_port, AZURE_MASTER_PORT)[0])
    world, ppn = len(places), positive("process_count_per_node", process_count_per_node)
    envs = []
    for rank, (node, local) in enumerate(places):
        if kind == "mpi":
            env = {
                "OMPI_COMM_WORLD_RANK": str(rank),
                "OMPI_COMM_WORLD_SIZE": str(world),
                "OMPI_COMM_WORLD_LOCAL_RANK": str(local),
                "OMPI_COMM_WORLD_LOCAL_SIZE": str(ppn),
                "OMPI_COMM_WORLD_NODE_RANK": str(local),
            }
            if nodes > 1:
                env["AZ_BATCH_MASTER_NODE"] = f"{master_addr}:{port}"
            env["AZ_BATCHAI_MPI_MASTER_NODE"] = master_addr
            if not node_hosts:
                env["NCCL_SOCKET_IFNAME"] = socket_ifname
        else:  # torch.distributed and deepspeed: Azure ML's PyTorch distribution
            env = {
                "MASTER_ADDR": master_addr,
                "MASTER_PORT": port,
                "WORLD_SIZE": str(world),
                "NODE_RANK": str(node),
                "RANK": str(rank),
                "LOCAL_RANK": str(local),
            }
        envs.append({**env, **runtime[rank]})
    return envs


def _tf_configs(addrs: list[str], ports: list[Port], workers: int) -> list[RankEnv]:
    """TF_CONFIG of every task (``addrs``: the host of each): workers first, then parameter
    servers; ``"ps": []`` is there even without parameter servers, as Azure ML sends it."""
    hosts = [f"{addr}:{port}" for addr, port in zip(addrs, ports, strict=True)]
    cluster: dict[str, Any] = {"worker": hosts[:workers], "ps": hosts[workers:]}
    envs = []
    for task in range(len(hosts)):
        role = (
            {"type": "worker", "index": task}
            if task < workers
            else {
                "type": "ps",
                "index": task - workers,
            }
        )
        config = {"cluster": cluster, "task": role, "environment": "cloud"}
        envs.append({"TF_CONFIG": json.dumps(config)})
    return envs


def rank_table(launcher: str, envs: list[RankEnv]) -> list[dict[str, str]]:
    """Rows for display: rank, node, local rank, then the launcher's variables in order,
    then the runtime ones; node and local rank are read from the variables themselves."""
    order = (*LAUNCHER_VARIABLES.get(_launcher(launcher), ()), *RUNTIME_VARIABLES)
    rows = []
    for rank, (node, local) in enumerate(env_places(envs)):
        row = {"rank": str(rank), "node": str(node), "local rank": str(local)}
        row.update({name: envs[rank][name] for name in order if name in envs[rank]})
        row.update({name: value for name, value in envs[rank].items() if name not in row})
        rows.append(row)
    return rows


def env_places(envs: list[RankEnv]) -> list[tuple[int, int]]:
    """(node, local rank) of each rank, from its AZUREML_CR_NODE_RANK (node 0 without it)."""
    places: list[tuple[int, int]] = []
    for env in envs:
        node = int(env.get("AZUREML_CR_NODE_RANK", "0"))
        places.append((node, sum(1 for n, _ in places if n == node)))
    return places


def start_environment(envs: Sequence[RankEnv], names: Sequence[str]) -> RankEnv:
    """The variables of ``names`` (a spec's ``environment_variables``) that every rank has
    with one value, as the ranks have them: a process gets these from its start, as on
    Azure ML, so that what is read only then (PYTHONPATH, LD_PRELOAD, OMPI_MCA_*) holds."""
    if not envs:
        return {}
    first, *rest = envs
    return {
        name: first[name]
        for name in names
        if name in first and all(env.get(name) == first[name] for env in rest)
    }


__all__ = [
    "LAUNCHER_VARIABLES",
    "LOCAL_EXPERIMENT_ID",
    "PORT_AT_START",
    "RUNTIME_VARIABLES",
    "RankEnv",
    "env_places",
    "ports_needed",
    "rank_environments",
    "rank_places",
    "rank_table",
    "start_environment",
    "tensorflow_tasks",
]
