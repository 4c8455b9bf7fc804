"""Where ranks listen and which hosts they run on (jupyter_distcomp.machine: network, hosts,
mpi).

The rules (hostfiles, host lists, the listen address, mpiexec's flags) directly; then, with
real ranks on this machine, that no process the project starts listens beyond loopback:
the controller, mpiexec's daemon and the ranks of ``%%distcomp run``, and the ranks of
``%distcomp command`` with their own rendezvous servers (MPI and torch.distributed).
"""

from __future__ import annotations

import json
import socket
import threading
import time
from pathlib import Path

import psutil
import pytest

from jupyter_distcomp.errors import LayoutError
from jupyter_distcomp.machine.hosts import Placement, check_hosts, read_hostfile
from jupyter_distcomp.machine.mpi import mpiexec_host_args
from jupyter_distcomp.machine.network import (
    LOOPBACK,
    free_ports,
    is_loopback,
    listen_address,
    listener_ports,
)

from .ranks_support import MPI_SPEC, define, run_cell


def test_a_hostfile_gives_one_host_a_line_and_ignores_comments_and_slots(tmp_path):
    hostfile = tmp_path / "hosts"
    hostfile.write_text("# the cluster\nnode0 slots=4\n\nnode1   # second\n")
    assert read_hostfile(hostfile) == ["node0", "node1"]


def test_a_bad_hostfile_line_is_named_with_its_number(tmp_path):
    hostfile = tmp_path / "hosts"
    hostfile.write_text("node0\nnode1 four\n")
    with pytest.raises(LayoutError, match=r"line 2: 'node1 four' is not a host line.*Fix"):
        read_hostfile(hostfile)


def test_a_missing_hostfile_says_which_and_the_fix(tmp_path):
    with pytest.raises(LayoutError, match=r"cannot read the hostfile .*nope.*Fix"):
        read_hostfile(tmp_path / "nope")


@pytest.mark.parametrize(
    ("hosts", "message"),
    [(["node0", "node0"], "names a host twice"), (["node0", "a b"], "'a b' is not a host name")],
)
def test_a_bad_host_list_names_the_problem(hosts, message):
    with pytest.raises(LayoutError, match=message):
        check_hosts(hosts)


def test_a_layout_with_more_nodes_than_hosts_is_refused_with_the_fix():
    with pytest.raises(LayoutError, match=r"3 nodes but DistComp.hosts names 2.*Fix"):
        Placement(("node0", "node1")).for_layout(3)
    assert Placement(("node0", "node1", "node2")).for_layout(2).hosts == ("node0", "node1")


def test_master_addr_is_the_first_host_unless_the_user_set_one():
    assert Placement().master_addr() == LOOPBACK
    assert Placement(("node0", "node1")).master_addr() == "node0"
    assert Placement(("node0", "node1")).master_addr("10.0.0.4") == "10.0.0.4"


def test_the_ports_a_world_takes_are_outside_the_range_the_system_hands_out():
    """A port the system may give to the next bind(0) or outgoing connection (the ranks'
    controller starts after the choice) could be taken before the rank listens on it."""
    low, high = map(int, Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
    ports = [port for _ in range(20) for port in free_ports(LOOPBACK, 3)]
    assert not [port for port in ports if low <= port <= high]
    assert all(len(set(free_ports(LOOPBACK, 8))) == 8 for _ in range(5))


def test_every_view_and_world_of_a_component_on_this_machine_binds_here():
    from jupyter_distcomp import load_component

    component = load_component(MPI_SPEC.replace("type: mpi", "type: torch.distributed"))
    component.runsettings.resource_layout.configure(instance_count=2, process_count_per_node=1)
    held = Placement().rank_environments(component, LOOPBACK)
    port = held[0]["MASTER_PORT"]
    assert port.isdigit() and port != "6105" and {e["MASTER_PORT"] for e in held} == {port}
    shown = Placement().rank_environments(component, LOOPBACK, chosen_at_start=True)
    assert {e["MASTER_PORT"] for e in shown} == {"<chosen at start>"}
    assert listener_ports("203.0.113.9", 1) is None  # another machine's: nothing is bound


SHIM_PROBE = """
import errno, socket, sys
def bound(v6only, port=0):
    sock = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
    sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, v6only)
    try:
        sock.bind(("::", port))
    except OSError as exc:
        return errno.errorcode[exc.errno]
    return sock.getsockname()[0]
print(bound(0), bound(1), bound(0, int(sys.argv[1])))
"""


def test_the_shim_keeps_a_dual_stack_listener_where_ipv4_peers_reach_it():
    """With the shim, a listener on every interface listens on the loopback address instead:
    an IPv6 socket that accepts IPv4 as ``::ffff:127.0.0.1``, an IPv6-only one as ``::1``; a
    port taken on IPv4 is an error, as without the shim, not a listener on ``::1`` alone that
    the ranks (IPv4) would wait for forever."""
    import subprocess
    import sys

    from jupyter_distcomp.machine.shim import listen_environment

    env = listen_environment(LOOPBACK)
    if not env:
        pytest.skip("no C compiler: the shim cannot be built")
    with socket.create_server((LOOPBACK, 0)) as taken:
        port = taken.getsockname()[1]
        probe = subprocess.run(
            [sys.executable, "-c", SHIM_PROBE, str(port)],
            env={**env, "PATH": "/usr/bin:/bin"},
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert probe.stdout.split() == ["::ffff:127.0.0.1", "::1", "EADDRINUSE"], probe.stderr


def test_ranks_on_this_machine_listen_on_loopback_only():
    assert listen_address() == LOOPBACK
    assert listen_address(["127.0.0.1"]) == LOOPBACK
    flags = mpiexec_host_args(Placement(), 2)
    # TCP (for processes a rank spawns, which shared memory cannot reach) on loopback only
    assert flags[:2] == ["--mca", "btl"] and "tcp" not in flags[2]
    assert flags[flags.index("btl_tcp_if_include") + 1] == "127.0.0.0/8"


def test_the_listen_address_routes_to_the_first_host_that_is_not_this_machine():
    addresses = [
        a.address
        for addrs in psutil.net_if_addrs().values()
        for a in addrs
        if a.family == socket.AF_INET and not a.address.startswith("127.")
    ]
    if not addresses:
        pytest.skip("this machine has no address besides loopback")
    assert listen_address(["localhost", addresses[0]]) == addresses[0]


def test_with_hosts_mpiexec_gets_them_node_by_node_and_ssh():
    args = mpiexec_host_args(Placement(("127.0.0.1",), "ssh -F cfg"), 3, ["X"])
    assert args[args.index("--host") + 1] == "127.0.0.1:3"
    assert args[args.index("plm_ssh_agent") + 1] == "ssh -F cfg"
    assert args[args.index("btl_tcp_if_include") + 1] == "127.0.0.0/8"
    assert args[-2:] == ["-x", "X"]


def test_variables_follow_the_hosts_node_by_node():
    from jupyter_distcomp.core.layout import rank_environments

    tf = rank_environments("tensorflow", 2, 1, worker_count=4, node_hosts=["node0", "node1"])
    workers = json.loads(tf[0]["TF_CONFIG"])["cluster"]["worker"]
    assert [w.rsplit(":", 1)[0] for w in workers] == ["node0", "node0", "node1", "node1"]
    assert {e["AZ_BATCH_HOST_LIST"] for e in tf} == {"node0,node1"}
    torch = rank_environments("torch.distributed", 2, 2, "node0", node_hosts=["node0", "node1"])
    assert [(e["MASTER_ADDR"], e["NODE_RANK"]) for e in torch] == [
        ("node0", "0"),
        ("node0", "0"),
        ("node0", "1"),
        ("node0", "1"),
    ]
    mpi = rank_environments("mpi", 2, 1, "node0", node_hosts=["node0", "node1"])
    assert mpi[1]["AZ_BATCH_MASTER_NODE"].startswith("node0:")
    assert "NCCL_SOCKET_IFNAME" not in mpi[1]  # loopback would be wrong across hosts


def test_an_unknown_host_is_a_clear_error():
    with pytest.raises(LayoutError, match=r"cannot resolve the host 'no-such-host.invalid'"):
        listen_address(["no-such-host.invalid"])


# -- real processes ---------------------------------------------------------------------
def listening(pids: list[int]) -> dict[str, set[str]]:
    """``{process name: listening addresses}`` of the given processes."""
    found: dict[str, set[str]] = {}
    for pid in pids:
        try:
            proc = psutil.Process(pid)
            conns = proc.net_connections(kind="inet")
            name = proc.name()
        except psutil.Error:
            continue
        addrs = {c.laddr.ip for c in conns if c.status == psutil.CONN_LISTEN}
        if addrs:
            found.setdefault(name, set()).update(addrs)
    return found


def beyond_loopback(found: dict[str, set[str]]) -> dict[str, set[str]]:
    return {
        name: {a for a in addrs if not is_loopback(a)}
        for name, addrs in found.items()
        if any(not is_loopback(a) for a in addrs)
    }


def descendants() -> list[int]:
    return [p.pid for p in psutil.Process().children(recursive=True)]


@pytest.mark.slow
def test_nothing_the_ranks_of_a_run_start_listens_beyond_loopback(ip):
    define(ip, "quiet", MPI_SPEC, 2, 2)
    try:
        cell = run_cell(
            ip, "%%distcomp run quiet\nfrom mpi4py import MPI\nMPI.COMM_WORLD.Barrier()"
        )
        assert cell.ok, cell.error
        found = listening(descendants())
        assert "prterun" in found, found  # mpiexec's daemon always listens
        assert beyond_loopback(found) == {}, found
    finally:
        run_cell(ip, "%distcomp stop")


WAITING = """\
import os, sys, time
if sys.argv[1] == "mpi":
    from mpi4py import MPI
    MPI.COMM_WORLD.Barrier()
else:
    import torch.distributed as dist
    dist.init_process_group("gloo")
print("ready", flush=True)
while not os.path.exists(sys.argv[2]):
    time.sleep(0.05)
"""

COMMAND_SPEC = """\
name: waiting
type: DistributedComponent
code: {code}
launcher:
  type: {launcher}
  additional_arguments: python waiting.py {kind} {go}
"""


@pytest.mark.slow
@pytest.mark.parametrize(("launcher", "kind"), [("mpi", "mpi"), ("torch.distributed", "torch")])
def test_nothing_the_ranks_of_a_command_start_listens_beyond_loopback(tmp_path, launcher, kind):
    from jupyter_distcomp.core.spec_parsing import load_component
    from jupyter_distcomp.local.command import run_command

    code, go = tmp_path / "code", tmp_path / "go"
    code.mkdir()
    (code / "waiting.py").write_text(WAITING)
    spec = COMMAND_SPEC.format(code=code, launcher=launcher, kind=kind, go=go)
    component = load_component(spec, base_dir=tmp_path)
    component.runsettings.resource_layout.configure(instance_count=2, process_count_per_node=2)
    ready: list[str] = []
    results: list[object] = []

    def stream(text, file=None, flush=False):
        ready.extend(line for line in text.splitlines() if line.endswith("ready"))

    thread = threading.Thread(
        target=lambda: results.append(run_command(component, stream=stream, timeout=120))
    )
    thread.start()
    try:
        deadline = time.monotonic() + 120
        while len(ready) < 4 and thread.is_alive() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert len(ready) == 4, ready
        found = listening(descendants())
        assert found, "the rendezvous listens somewhere"
        assert beyond_loopback(found) == {}, found
    finally:
        Path(go).touch()
        thread.join(timeout=120)
    assert results and results[0].ok  # type: ignore[attr-defined]
