"""The preloaded shim makes a process of an emulated node see that node as its host, and bind
as a host does (machine/listen_shim.c, host_shim.c, shim.py).

Each test runs small Python programs with the variables of a node's ranks
(``shim.node_environment``), as the ranks get them, and asks them what a program asks its
host: its name, its name's address, its interfaces, where its sockets listen and where its
connections come from. No ranks: plain processes, one per node.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys

import pytest

from jupyter_distcomp.core.layout import rank_environments
from jupyter_distcomp.machine import shim
from jupyter_distcomp.machine.network import LOOPBACK, is_local_host, node_address, node_name


@pytest.fixture(scope="module")
def listen_env():
    env = shim.listen_environment(LOOPBACK)
    if not env:
        pytest.skip("no C compiler: the shim cannot be built")
    return env


def node_env(listen_env, node: int, nodes: int = 2) -> dict[str, str]:
    """What a rank of ``node`` of a ``nodes`` x 1 torch.distributed layout runs with."""
    hosts = [node_address(n) for n in range(nodes)]
    envs = rank_environments("torch.distributed", nodes, 1, hosts[0], 29500, node_hosts=hosts)
    return {
        **listen_env,
        **envs[node],
        **shim.node_environment(envs[node]),
        "PATH": "/usr/bin:/bin",
    }


def run(code: str, env: dict[str, str], *args: str) -> dict:
    done = subprocess.run(
        [sys.executable, "-c", code, *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


IDENTITY = """
import json, os, platform, socket, psutil
name = socket.gethostname()
lo = [a for a in psutil.net_if_addrs()["lo"] if a.family == socket.AF_INET]
print(json.dumps({
    "hostname": name, "node": platform.node(), "uname": os.uname().nodename,
    "address": socket.gethostbyname(name),
    "ex": socket.gethostbyname_ex("distcomp-node-1"),
    "canonical": socket.getaddrinfo(name, 80, socket.AF_INET, socket.SOCK_STREAM,
                                    0, socket.AI_CANONNAME)[0][3],
    "other": socket.gethostbyname("distcomp-node-0"),
    "lo": [a.address for a in lo],
    "nccl": os.environ.get("NCCL_HOSTID"),
}))
"""


def test_a_node_is_its_own_host_by_name_address_and_interface(listen_env):
    seen = run(IDENTITY, node_env(listen_env, 1))
    assert seen["hostname"] == seen["node"] == seen["uname"] == "distcomp-node-1"
    assert seen["address"] == "127.0.0.3"  # gethostbyname(gethostname()): its own address
    assert seen["ex"] == ["distcomp-node-1", [], ["127.0.0.3"]]
    assert seen["canonical"] == "distcomp-node-1"
    assert seen["other"] == "127.0.0.2"  # node 0's name resolves, as a cluster's DNS does
    assert seen["lo"] == ["127.0.0.3"]  # its network interface holds its address
    assert seen["nccl"] == "distcomp-node-1"  # NCCL groups peers by host: not with node 0


MACHINE = """
import json, os, platform, socket, psutil
lo = [a for a in psutil.net_if_addrs()["lo"] if a.family == socket.AF_INET]
print(json.dumps([socket.gethostname(), platform.node(), [a.address for a in lo]]))
"""


def test_this_machine_and_one_node_stay_this_machine(listen_env):
    seen = run(MACHINE, {**listen_env, "PATH": "/usr/bin:/bin"})
    assert seen == [socket.gethostname(), socket.gethostname(), ["127.0.0.1"]]
    envs = rank_environments("torch.distributed", 1, 2, LOOPBACK, 29500)
    assert shim.node_environment(envs[1]) == {}  # one node: no emulated host
    assert is_local_host("distcomp-node-3") and is_local_host(node_name(0))
    assert not is_local_host("node-1")


BINDS = """
import json, socket, sys
port = int(sys.argv[1])
found = {}
tcp = socket.create_server(("0.0.0.0", port))                       # every interface
found["wildcard"] = tcp.getsockname()[0]
dual = socket.create_server(("::", port + 1), family=socket.AF_INET6, dualstack_ipv6=True)
found["dual"] = dual.getsockname()[0]
bare = socket.socket(); bare.listen()                                 # listen without bind
found["listen"] = bare.getsockname()[0]
udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); udp.bind(("0.0.0.0", port))
found["udp"] = udp.getsockname()[0]
sender = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)             # unbound sender
sender.sendto(b"x", ("127.0.0.1", 9))
found["sender"] = sender.getsockname()[0]
out = socket.create_connection(("127.0.0.1", int(sys.argv[2])))      # leaves from
found["source"] = out.getsockname()[0]
print(json.dumps(found))
"""


def test_a_node_binds_as_a_host_on_its_own_address_and_ports(listen_env):
    with socket.create_server((LOOPBACK, 0)) as machine:
        target = str(machine.getsockname()[1])
        port = str(_free_pair())
        # both nodes bind the same ports, as two hosts do: each on its own address
        seen = [run(BINDS, node_env(listen_env, node), port, target) for node in (0, 1)]
    for node, found in enumerate(seen):
        mine = node_address(node)
        assert found == {
            "wildcard": mine,
            "dual": f"::ffff:{mine}",
            "listen": mine,
            "udp": mine,
            "sender": mine,
            "source": mine,  # a connection to loopback leaves from the node's address
        }, node


def test_on_this_machine_nothing_listens_or_receives_beyond_loopback(listen_env):
    with socket.create_server((LOOPBACK, 0)) as machine:
        target = str(machine.getsockname()[1])
        found = run(BINDS, {**listen_env, "PATH": "/usr/bin:/bin"}, str(_free_pair()), target)
    assert found == {
        "wildcard": LOOPBACK,
        "dual": f"::ffff:{LOOPBACK}",
        "listen": LOOPBACK,
        "udp": LOOPBACK,
        "sender": LOOPBACK,
        "source": LOOPBACK,
    }


REACH = """
import json, socket, sys
server = socket.create_server(("0.0.0.0", int(sys.argv[1])))
print(json.dumps(server.getsockname()[0]), flush=True)
conn, peer = server.accept()
conn.sendall(peer[0].encode())
"""


def test_a_wildcard_listener_of_node_0_is_reached_at_its_address_from_node_1(listen_env):
    port = _free_pair()
    server = subprocess.Popen(
        [sys.executable, "-c", REACH, str(port)],
        env=node_env(listen_env, 0),
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert server.stdout is not None
        assert json.loads(server.stdout.readline()) == "127.0.0.2"
        client = "import socket; print(socket.create_connection(('127.0.0.2', %d)).recv(64))"
        done = subprocess.run(
            [sys.executable, "-c", client % port],
            env=node_env(listen_env, 1),
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.stdout.strip() == "b'127.0.0.3'", done.stderr  # node 0 saw node 1's address
    finally:
        server.kill()
        server.wait()


def _free_pair() -> int:
    """A port P with P and P+1 free on every address now."""
    for _ in range(50):
        with socket.socket() as probe:
            probe.bind(("", 0))
            port = probe.getsockname()[1]
        try:
            with socket.socket() as a, socket.socket() as b:
                a.bind(("", port))
                b.bind(("", port + 1))
            return port
        except OSError:
            continue
    raise RuntimeError("no two free ports")
