"""Nodes that are real hosts: two network namespaces with their own addresses, host names and
sshd, driven from a real kernel with ``%config DistComp.hosts``.

An MPI allreduce across 2 hosts x 2 ranks, each rank on the host of its node; TF_CONFIG
naming the hosts; a time-out showing the stacks taken on each host; a kill of one host's
ranks; DDP (gloo) across the hosts through ``%distcomp command``; and a stop that leaves
nothing behind on either host. Skipped, with the reason, where namespaces cannot be made.
"""

from __future__ import annotations

import json
import os
import re
import signal
import time

import psutil
import pytest

from jupyter_distcomp.network import is_loopback

from .netns_support import NamespaceHosts, unavailable
from .ranks_support import MPI_SPEC, TF_SPEC, wait_gone
from .test_ranks_kernel import Kernel

WHY_NOT = unavailable()
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(WHY_NOT is not None, reason=f"no namespaced hosts: {WHY_NOT}"),
]


@pytest.fixture(scope="module")
def hosts():
    with NamespaceHosts(2) as made:
        yield made


@pytest.fixture(scope="module")
def kernel(hosts):
    k = Kernel()
    try:
        reply, text, _ = k.run(
            "%load_ext jupyter_distcomp\n"
            f"%config DistComp.hosts = {hosts.addresses!r}\n"
            f"%config DistComp.ssh_command = {hosts.ssh_command!r}\n"
            "%config DistComp.prestart = False"
        )
        assert reply["status"] == "ok", text
        yield k
    finally:
        k.close()


def define(kernel, name: str, spec: str, nodes: int, per_node: int) -> None:
    reply, text, _ = kernel.run(f"%%distcomp {name}\n{spec}")
    assert reply["status"] == "ok", text
    reply, text, _ = kernel.run(
        f"{name}.runsettings.resource_layout.configure(instance_count={nodes}, "
        f"process_count_per_node={per_node})"
    )
    assert reply["status"] == "ok", text


def lines_of(text: str) -> dict[str, str]:
    """``{label: rest}`` of every labelled line, e.g. ``{"[node 1 rank 3]": "node1 6"}``."""
    return {m[1]: m[2] for m in re.finditer(r"(\[node \d+ rank \d+\]) ([^\n]*)", text)}


def test_an_allreduce_runs_across_two_hosts_each_rank_on_its_node(kernel, hosts):
    define(kernel, "across", MPI_SPEC, 2, 2)
    reply, text, _ = kernel.run(
        "%%distcomp run across\n"
        "import os, socket\n"
        "from mpi4py import MPI\n"
        "c = MPI.COMM_WORLD\n"
        "print(socket.gethostname(), c.allreduce(c.rank + 1), os.environ['AZ_BATCH_MASTER_NODE'])",
        timeout=240,
    )
    assert reply["status"] == "ok", text
    seen = lines_of(text)
    assert "[node 0 rank 0]" in seen, text
    master = seen["[node 0 rank 0]"].split()[2]
    assert master.startswith(f"{hosts.addresses[0]}:")
    assert seen == {
        "[node 0 rank 0]": f"node0 10 {master}",
        "[node 0 rank 1]": f"node0 10 {master}",
        "[node 1 rank 2]": f"node1 10 {master}",
        "[node 1 rank 3]": f"node1 10 {master}",
    }


def test_the_kernel_side_listens_only_on_the_address_that_reaches_the_hosts(kernel, hosts):
    listening = set()
    for proc in [psutil.Process(kernel.km.provisioner.process.pid), *kernel.processes()]:
        try:
            conns = proc.net_connections(kind="inet")
        except psutil.Error:
            continue
        listening |= {c.laddr.ip for c in conns if c.status == psutil.CONN_LISTEN}
    assert listening, "the controller listens somewhere"
    assert {ip for ip in listening if not is_loopback(ip)} <= {
        hosts.gateway,
        f"::ffff:{hosts.gateway}",
    }, listening


def test_tf_config_names_the_hosts_and_each_task_runs_on_its_own(kernel, hosts):
    define(kernel, "tf_across", TF_SPEC, 2, 1)
    reply, text, _ = kernel.run(
        "%%distcomp run tf_across\n"
        "import json, os, socket\n"
        "c = json.loads(os.environ['TF_CONFIG'])\n"
        "print(socket.gethostname(), json.dumps(c['cluster']['worker']), c['task']['index'])",
        timeout=240,
    )
    assert reply["status"] == "ok", text
    seen = lines_of(text)
    workers = json.loads(seen["[node 0 rank 0]"].split(" ", 1)[1].rsplit(" ", 1)[0])
    assert [w.rsplit(":", 1)[0] for w in workers] == hosts.addresses
    assert seen["[node 0 rank 0]"].startswith("node0 ") and seen["[node 0 rank 0]"].endswith(" 0")
    assert seen["[node 1 rank 1]"].startswith("node1 ") and seen["[node 1 rank 1]"].endswith(" 1")
    reply, text, _ = kernel.run("%distcomp env tf_across")
    assert reply["status"] == "ok" and all(f"{a}:" in text for a in hosts.addresses), text
    reply, text, _ = kernel.run("%distcomp stop tf_across")
    assert reply["status"] == "ok", text


def test_an_interrupt_reaches_the_ranks_on_every_host(kernel, hosts):
    define(kernel, "intr", MPI_SPEC, 2, 2)
    reply, text, _ = kernel.run("%%distcomp run intr\nprint('warm')", timeout=240)
    assert reply["status"] == "ok", text
    msg_id = kernel.send(
        "%%distcomp run intr\nimport time\nprint('sleeping', flush=True)\ntime.sleep(120)"
    )
    kernel.collect(msg_id, timeout=60, until=lambda t: t.count("sleeping") >= 4)
    kernel.km.interrupt_kernel()
    reply, text, _ = kernel.collect(msg_id, timeout=60)
    assert reply["status"] == "error" and reply["ename"] == "RankInterrupt", text
    assert "sent SIGINT to ranks 0-3" in text, text
    reply, text, _ = kernel.run("%%distcomp run intr\nprint('after')", timeout=120)
    assert reply["status"] == "ok" and "[node 1 rank 3] after" in text, text
    kernel.run("%distcomp stop intr")


def test_a_timeout_shows_each_ranks_stack_taken_on_its_host(kernel, hosts):
    define(kernel, "stuck", MPI_SPEC, 2, 2)
    reply, text, _ = kernel.run(
        "%%distcomp run stuck --timeout 6\nimport time\ndef wait_here():\n    time.sleep(600)\n"
        "wait_here()",
        timeout=240,
    )
    assert reply["status"] == "error", text
    assert "ranks 0-3" in text and "wait_here" in text and "time.sleep(600)" in text, text


def test_killing_one_hosts_ranks_marks_them_dead_and_restart_recovers(kernel, hosts):
    kernel.run("%distcomp stop")
    define(kernel, "victim", MPI_SPEC, 2, 2)
    reply, text, _ = kernel.run("%%distcomp run victim\nprint('up')", timeout=240)
    assert reply["status"] == "ok", text
    engines = [p for p in hosts.pids(1) if re.search(r"ipyparallel\.engine( |$)", _cmdline(p))]
    assert len(engines) == 2, hosts.processes(1)
    for pid in engines:
        os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        reply, text, _ = kernel.run("%distcomp status victim")
        if "dead" in text:
            break
        time.sleep(1)
    reply, text, _ = kernel.run("%%distcomp run victim\nprint('again')", timeout=120)
    assert reply["status"] == "error" and "dead" in text and "restart victim" in text, text
    swapped = f"{hosts.addresses[1]},{hosts.addresses[0]}"
    reply, text, _ = kernel.run(f"%distcomp restart victim --hosts {swapped}", timeout=240)
    assert reply["status"] == "ok", text
    reply, text, _ = kernel.run(
        "%%distcomp run victim\nimport socket\nprint(socket.gethostname())", timeout=240
    )
    assert reply["status"] == "ok", text
    assert "[node 0 rank 0] node1" in text and "[node 1 rank 3] node0" in text, text


DDP_SPEC = """\
name: ddp_across
type: DistributedComponent
code: {code}
launcher:
  type: torch.distributed
  additional_arguments: python ddp.py
"""

DDP_SCRIPT = """\
import os, socket
import torch, torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
dist.init_process_group("gloo")
torch.manual_seed(0)
model = DDP(torch.nn.Linear(4, 1))
x = torch.full((8, 4), float(dist.get_rank() + 1))
model(x).sum().backward()
grad = model.module.weight.grad.sum().item()
print(socket.gethostname(), os.environ["NODE_RANK"], os.environ["MASTER_ADDR"], grad)
dist.destroy_process_group()
"""


def test_ddp_with_gloo_runs_across_the_hosts_through_distcomp_command(kernel, hosts, tmp_path):
    code = tmp_path / "src"
    code.mkdir()
    (code / "ddp.py").write_text(DDP_SCRIPT)
    define(kernel, "ddp_across", DDP_SPEC.format(code=code), 2, 2)
    reply, text, _ = kernel.run("%distcomp command ddp_across --timeout 180", timeout=240)
    assert reply["status"] == "ok", text
    seen = lines_of(text)
    grads = {rest.split()[3] for rest in seen.values()}
    assert len(seen) == 4 and len(grads) == 1, text  # every rank holds the averaged gradient
    for label, rest in seen.items():
        host, node_rank, master = rest.split()[:3]
        node = label.split()[1]
        assert (host, node_rank, master) == (f"node{node}", node, hosts.addresses[0]), text


HANG_SPEC = """\
name: hang_across
type: DistributedComponent
code: {code}
launcher:
  type: torch.distributed
  additional_arguments: python hang.py
"""


def test_a_command_that_hangs_is_stopped_on_every_host_at_its_timeout(kernel, hosts, tmp_path):
    code = tmp_path / "src"
    code.mkdir()
    (code / "hang.py").write_text("import time\nprint('hanging', flush=True)\ntime.sleep(600)\n")
    define(kernel, "hang_across", HANG_SPEC.format(code=code), 2, 1)
    reply, text, _ = kernel.run("%distcomp command hang_across --timeout 8", timeout=240)
    assert reply["status"] == "error" and "[node 1 rank 1] hanging" in text, text
    assert "timed out" in text or "time-out" in text or "timeout" in text, text
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and any("hang.py" in p for p in hosts.processes(1)):
        time.sleep(0.5)
    assert not [p for i in (0, 1) for p in hosts.processes(i) if "hang.py" in p]


def test_stop_leaves_nothing_behind_on_any_host(kernel, hosts):
    ours = kernel.processes()
    reply, text, _ = kernel.run("%distcomp stop")
    assert reply["status"] == "ok", text
    assert wait_gone([p for p in ours if p.pid != kernel.km.provisioner.process.pid], 30) == []
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and (hosts.processes(0) or hosts.processes(1)):
        time.sleep(0.5)
    assert hosts.processes(0) == [] and hosts.processes(1) == []


def _cmdline(pid: int) -> str:
    try:
        return " ".join(psutil.Process(pid).cmdline())
    except psutil.Error:
        return ""


def test_a_killed_kernel_leaves_nothing_on_the_hosts(hosts):
    k = Kernel()
    try:
        reply, text, _ = k.run(
            "%load_ext jupyter_distcomp\n"
            f"%config DistComp.hosts = {hosts.addresses!r}\n"
            f"%config DistComp.ssh_command = {hosts.ssh_command!r}"
        )
        assert reply["status"] == "ok", text
        define(k, "doomed", MPI_SPEC, 2, 1)
        reply, text, _ = k.run("%%distcomp run doomed\nprint('up')", timeout=240)
        assert reply["status"] == "ok" and "[node 1 rank 1] up" in text, text
        assert hosts.processes(1), "the ranks run on the host"
        psutil.Process(k.km.provisioner.process.pid).kill()  # SIGKILL: no atexit hook, no stop
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and (hosts.processes(0) or hosts.processes(1)):
            time.sleep(0.5)
        assert hosts.processes(0) == [] and hosts.processes(1) == []
    finally:
        k.close()
