"""Nodes that are real hosts: two network namespaces with their own addresses, host names and
sshd, driven from a real kernel with ``%config DistComp.hosts``.

An MPI allreduce across 2 hosts x 2 ranks, each rank on the host of its node; TF_CONFIG
naming the hosts; a time-out showing the stacks taken on each host; a kill of one host's
ranks; DDP (gloo) across the hosts through ``%distcomp command``; a stop that leaves
nothing behind on either host; and the debugging features on ranks of the second host
(``breakpoint()``, post-mortem, ``where``, ``compare`` with its max |diff|, fail-fast) in a
kernel whose stdin requests are answered. Skipped, with the reason, where namespaces cannot
be made.
"""

from __future__ import annotations

import json
import os
import re
import signal
import time

import psutil
import pytest

from jupyter_distcomp.machine.network import is_loopback

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
    # check mode's own channel (a duplicate of COMM_WORLD) reaches across the hosts
    reply, text, _ = kernel.run(
        "%%distcomp run across --check-collectives\nc.bcast(c.rank, root=0 if c.rank < 3 else 1)"
    )
    assert reply["status"] == "error", text
    assert "bcast #" in text and "ranks 0-2 root 0, rank 3 root 1" in text, text


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
print(socket.gethostname(), os.environ["NODE_RANK"], os.environ["MASTER_ADDR"], grad, flush=True)
dist.barrier()
dist.destroy_process_group()
os._exit(0)  # as notebooks/ddp/train.py: DDP's gloo threads outlive the group (torch 2.13)
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


# -- the debugging features across hosts: one world of 2 hosts x 2 ranks ---------------------


@pytest.fixture(scope="module")
def debugged(hosts, kernel):
    """A kernel whose stdin requests are answered, with world ``hdbg`` on both hosts."""
    from .debug_support import DebugKernel

    kernel.run("%distcomp stop")  # the other kernel's ranks leave the hosts
    k = DebugKernel()
    try:
        for code in (
            "%load_ext jupyter_distcomp\n"
            f"%config DistComp.hosts = {hosts.addresses!r}\n"
            f"%config DistComp.ssh_command = {hosts.ssh_command!r}\n"
            "%config DistComp.prestart = False",
            f"%%distcomp hdbg\n{MPI_SPEC}",
            "hdbg.runsettings.resource_layout.configure(instance_count=2, "
            "process_count_per_node=2)",
        ):
            out = k.run(code)
            assert out.ok, out.text
        out = k.run("%%distcomp run hdbg\nimport socket\nprint(socket.gethostname())", timeout=300)
        assert out.ok and "[node 1 rank 3] node1" in out.text, out.text
        yield k
    finally:
        k.run("%distcomp stop", timeout=120)
        k.close()


def test_a_breakpoint_on_the_second_host_prompts_in_the_notebook(debugged):
    out = debugged.run(
        "%%distcomp run hdbg\nimport socket\nx = 7\nif mpi_rank == 3:\n    breakpoint()\n"
        "print('after', socket.gethostname(), x)",
        ["p x", "p socket.gethostname()", "c"],
        timeout=240,
    )
    assert out.ok, out.text
    assert out.prompts == ["(Pdb rank 3) "] * 3, out.prompts
    # breakpoint() stops before the cell's next line, as in a plain cell
    assert f"rank 3] stopped at {out.cell}, line 6" in out.text, out.text
    assert "\n7\n" in out.text and "\n'node1'\n" in out.text, out.text
    assert "[node 1 rank 3] after node1 7" in out.text and "[node 0 rank 0] after node0 7" in (
        out.text
    )


def test_post_mortem_of_a_rank_on_the_second_host(debugged):
    out = debugged.run(
        "%%distcomp run hdbg\nimport socket\ndef pick(values):\n    return values[5]\n"
        "values = [mpi_rank]\nif mpi_rank == 2:\n    pick(values)\nprint('fine', mpi_rank)",
        timeout=240,
    )
    assert not out.ok and "IndexError" in out.text, out.text
    failed = out
    out = debugged.run("%distcomp debug hdbg", ["p values", "p socket.gethostname()", "c"])
    assert out.ok, out.text
    assert out.prompts == ["(Pdb rank 2) "] * 3, out.prompts
    assert f"rank 2] stopped at {failed.cell}, line 4, in pick" in out.text, out.text
    assert "\n[2]\n" in out.text and "\n'node1'\n" in out.text, out.text


def test_where_shows_the_stacks_of_busy_ranks_on_both_hosts(debugged):
    started = debugged.run(
        "%%distcomp run hdbg --background\nimport time\ndef wait_here():\n    time.sleep(90)\n"
        "wait_here()"
    )
    assert started.ok, started.text
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        out = debugged.run("%distcomp where hdbg", timeout=120)
        if out.text.count("in wait_here") >= 1 and "ranks 0-3" in out.text:
            break
        time.sleep(1)
    assert out.ok, out.text
    assert "ranks 0-3" in out.text and "current stack" in out.text, out.text
    assert "in wait_here" in out.text and "time.sleep(90)" in out.text, out.text
    assert "site-packages" not in out.text, out.text
    assert "Sent SIGINT to ranks 0-3" in debugged.run("%distcomp interrupt hdbg").text
    out = debugged.run("%distcomp wait hdbg --timeout 60", timeout=120)
    assert not out.ok and "KeyboardInterrupt" in out.text, out.text
    assert "----> 4     time.sleep(90)" in out.text, out.text  # the user's frame, on every rank


def test_compare_finds_the_array_that_differs_on_the_second_host(debugged):
    out = debugged.run(
        "%%distcomp run hdbg\nimport numpy as np, torch\n"
        "big = np.linspace(0.0, 1.0, 500_000)\nweights = torch.ones(64, 32)\n"
        "if mpi_rank == 3:\n    big[123] += 0.25\n    weights[1, 2] -= 0.5",
        timeout=240,
    )
    assert out.ok, out.text
    for expr, what, diff in (
        ("big", "numpy float64 500000", 0.25),
        ("weights", "torch float32 64x32", 0.5),
    ):
        out = debugged.run(f"%distcomp compare hdbg {expr}", timeout=180)
        assert out.ok, out.text
        lines = out.text.splitlines()
        assert any(line.split()[:1] == ["0-2"] for line in lines), out.text
        odd = next(line for line in lines if line.startswith("3 "))
        assert what in odd and "DIFFERS" in odd, out.text
        assert float(odd.split()[-1]) == pytest.approx(diff, rel=1e-6), out.text
    out = debugged.run("%distcomp compare hdbg weights --rtol 0.6", timeout=180)
    assert "All ranks agree within rtol 0.6 (not all equal)." in out.text, out.text


def test_a_failure_on_the_second_host_fails_fast_while_the_others_wait(debugged):
    out = debugged.run(
        "%%distcomp run hdbg\nfrom mpi4py import MPI\nif mpi_rank == 3:\n"
        "    raise ValueError('bad shard on rank 3')\nMPI.COMM_WORLD.Barrier()",
        timeout=240,
    )
    assert out.reply["status"] == "error" and out.reply["ename"] == "RankError", out.text
    shown = "\n".join(out.reply["traceback"])
    assert shown.index("bad shard on rank 3") < shown.index("still busy, waiting here"), shown
    assert "MPI.COMM_WORLD.Barrier()" in shown and "%distcomp restart hdbg" in shown, shown
    assert "site-packages" not in shown, shown
    out = debugged.run("%distcomp restart hdbg", timeout=300)
    assert out.ok, out.text
    out = debugged.run("%%distcomp run hdbg\nprint('back', mpi_rank)", timeout=240)
    assert out.ok and "[node 1 rank 3] back 3" in out.text, out.text
