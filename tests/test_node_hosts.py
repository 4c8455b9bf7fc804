"""Each emulated node of ``%distcomp command`` is a host of its own, as Azure ML's nodes are:
its own name (which resolves to its address), its own address for what listens on every
interface and for its connections, its own ports, and Open MPI's locality per node. A single
node stays this machine.

Real ranks (mpiexec with a daemon per node; plain processes for torch.distributed) run the
programs a user would, unchanged, and report what they saw through the shared output folder.
"""

from __future__ import annotations

import json
import socket

import pytest

from jupyter_distcomp.core.spec_parsing import load_component
from jupyter_distcomp.local.command import run_command

pytestmark = pytest.mark.slow

#: what each rank sees of its host, then where it listens and who reaches it (MPI)
MPI_PROGRAM = r"""
import errno, json, os, platform, socket, sys
from mpi4py import MPI
out, port = sys.argv[1], int(sys.argv[2])
world = MPI.COMM_WORLD
local = world.Split_type(MPI.COMM_TYPE_SHARED)
name = socket.gethostname()
seen = {
    "hostname": name, "node": platform.node(), "processor": MPI.Get_processor_name(),
    "address": socket.gethostbyname(name), "local": [local.Get_rank(), local.Get_size()],
    "nccl": os.environ.get("NCCL_HOSTID"),
}
master = os.environ["AZ_BATCHAI_MPI_MASTER_NODE"]
server = None
if world.rank == 0:  # a server on every interface of node 0, as a user's would be
    server = socket.create_server(("0.0.0.0", port))
world.Barrier()
if world.rank == 2:  # node 1 finds it at node 0's address
    seen["reached"] = socket.create_connection((master, port), timeout=10).getsockname()[0]
if world.rank == 0:
    conn, peer = server.accept()
    seen["peer"] = peer[0]
world.Barrier()
# each node has its own ports: every node binds port + 1 + its local rank, as hosts can
own = socket.create_server(("0.0.0.0", port + 1 + local.Get_rank()))
seen["own"] = own.getsockname()[0]
world.Barrier()
try:  # within a node a port is taken, as on a host
    socket.create_server(("0.0.0.0", port + 1))
    seen["taken"] = "bound"
except OSError as exc:
    seen["taken"] = errno.errorcode[exc.errno]
world.Barrier()
with open(os.path.join(out, f"rank{world.rank}.json"), "w") as f:
    json.dump(seen, f)
"""

TORCH_PROGRAM = r"""
import json, os, platform, socket, sys
import torch, torch.distributed as dist
dist.init_process_group("gloo", init_method="env://")
name = socket.gethostname()
total = torch.tensor([float(dist.get_rank() + 1)])
dist.all_reduce(total)
seen = {"hostname": name, "node": platform.node(), "address": socket.gethostbyname(name),
        "total": total.item(), "nccl": os.environ.get("NCCL_HOSTID")}
with open(os.path.join(sys.argv[1], f"rank{dist.get_rank()}.json"), "w") as f:
    json.dump(seen, f)
dist.destroy_process_group()
"""

SPEC = """
name: hosts
type: DistributedComponent
inputs:
  port: {{type: Integer, default: 0}}
outputs:
  out: {{type: path}}
code: {code}
launcher:
  type: {launcher}
  additional_arguments: python prog.py {{outputs.out}} {{inputs.port}}
"""


def component(tmp_path, launcher: str, program: str, nodes: int, per_node: int):
    code = tmp_path / "code"
    code.mkdir(exist_ok=True)
    (code / "prog.py").write_text(program)
    made = load_component(SPEC.format(code=code, launcher=launcher), base_dir=tmp_path)
    made.runsettings.resource_layout.configure(
        instance_count=nodes, process_count_per_node=per_node
    )
    return made


def run_seen(
    tmp_path,
    launcher: str,
    program: str,
    nodes: int,
    per_node: int,
    inputs: dict | None = None,
    timeout: float = 120,
) -> list[dict]:
    """Run ``program`` as the command of a ``nodes`` x ``per_node`` layout; what each rank
    wrote to the output ``out`` (``rankN.json``), in rank order."""
    out = tmp_path / "out"
    run_command(
        component(tmp_path, launcher, program, nodes, per_node),
        inputs=inputs,
        outputs={"out": str(out)},
        stream=None,
        cwd=tmp_path,
        timeout=timeout,
    )
    return [json.loads((out / f"rank{r}.json").read_text()) for r in range(nodes * per_node)]


def free_ports(count: int) -> int:
    """A first port of ``count`` consecutive ports free on every address now."""
    for _ in range(50):
        with socket.socket() as probe:
            probe.bind(("", 0))
            first = probe.getsockname()[1]
        held = []
        try:
            for port in range(first, first + count):
                sock = socket.socket()
                held.append(sock)
                sock.bind(("", port))
            return first
        except OSError:
            continue
        finally:
            for sock in held:
                sock.close()
    raise RuntimeError("no free ports")


def test_mpi_ranks_of_two_nodes_see_two_hosts(tmp_path):
    seen = run_seen(tmp_path, "mpi", MPI_PROGRAM, 2, 2, inputs={"port": free_ports(3)})
    for rank, facts in enumerate(seen):
        node = rank // 2
        name, address = f"distcomp-node-{node}", f"127.0.0.{node + 2}"
        assert [facts["hostname"], facts["node"], facts["processor"]] == [name] * 3, rank
        assert facts["address"] == address and facts["nccl"] == name, rank
        # Open MPI sees the nodes: COMM_TYPE_SHARED is the node's ranks, as on Azure ML
        assert facts["local"] == [rank % 2, 2], rank
        assert facts["own"] == address and facts["taken"] == "EADDRINUSE", rank
    assert seen[2]["reached"] == "127.0.0.3"  # node 1's connection leaves from its address
    assert seen[0]["peer"] == "127.0.0.3"


def test_torch_ranks_of_two_nodes_see_two_hosts_and_rendezvous(tmp_path):
    pytest.importorskip("torch")
    seen = run_seen(tmp_path, "torch.distributed", TORCH_PROGRAM, 2, 2, timeout=180)
    for rank, facts in enumerate(seen):
        name = f"distcomp-node-{rank // 2}"
        assert facts == {
            "hostname": name,
            "node": name,
            "address": f"127.0.0.{rank // 2 + 2}",
            "total": 10.0,
            "nccl": name,
        }, rank


def test_one_node_is_this_machine(tmp_path):
    seen = run_seen(tmp_path, "mpi", MPI_PROGRAM, 1, 4, inputs={"port": free_ports(5)})
    for rank, facts in enumerate(seen):
        assert facts["hostname"] == facts["processor"] == socket.gethostname(), rank
        assert facts["local"] == [rank, 4] and facts["nccl"] is None, rank
        assert facts["own"] == "127.0.0.1", rank  # this machine: loopback only
