"""The preloaded shim: listeners on one address, and each emulated node a host of its own.

Open MPI 5's daemons and TCP transport bind to every interface whatever interfaces they are
told to use, so on this machine they run with a small preloaded shim (``listen_shim.c``,
built with the C compiler on first use) that binds them to the listen address instead.

On an emulated node of a multi-node layout the same shim makes the node a host as Azure
ML's nodes are (``listen_shim.c``, ``host_shim.c``): its own address for what listens on
every interface and for its connections, its own ports, its own host name (which resolves
to its address), its own network interface, and an NCCL host id of its own.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from .network import LOOPBACK, node_address, node_name

SHIM_SOURCES = tuple(Path(__file__).with_name(name) for name in ("listen_shim.c", "host_shim.c"))
SHIM_HEADER = Path(__file__).with_name("shim.h")
#: every emulated node of a layout, ``name=address,...``: node_agent.HOSTS_VARIABLE
HOSTS_VARIABLE = "DISTCOMP_NODE_HOSTS"


def listen_environment(address: str = LOOPBACK) -> dict[str, str]:
    """Variables that make the processes Open MPI starts on this machine listen on
    ``address`` only (empty where the shim cannot be built: no C compiler)."""
    shim = listen_shim()
    if shim is None:
        return {}
    preload = os.environ.get("LD_PRELOAD", "")
    return {
        "LD_PRELOAD": f"{shim} {preload}".strip(),
        "DISTCOMP_LISTEN_ADDR": address,
    }


def rendezvous_ports(env: dict[str, str]) -> list[str]:
    """The ports a rank's layout listens on: MASTER_PORT, AZ_BATCH_MASTER_NODE's, TF_CONFIG's."""
    ports = [env.get("MASTER_PORT", "")]
    ports.append(env.get("AZ_BATCH_MASTER_NODE", "").rpartition(":")[2])
    with contextlib.suppress(ValueError, AttributeError, TypeError):
        cluster = json.loads(env.get("TF_CONFIG") or "{}").get("cluster", {})
        ports += [str(a).rpartition(":")[2] for tasks in cluster.values() for a in tasks]
    return list(dict.fromkeys(p for p in ports if p.isdigit()))


def emulated_addresses(env: dict[str, str]) -> list[str]:
    """The addresses of the layout's emulated nodes (``network.node_address``) as a rank's
    variables name them; empty unless it has several, on loopback addresses of this
    machine."""
    nodes = env.get("AZ_BATCH_HOST_LIST", "").split(",")
    if len(nodes) < 2 or not all(n.startswith("127.") and n != LOOPBACK for n in nodes):
        return []
    return nodes


def node_hosts(addresses: list[str]) -> str:
    """:data:`HOSTS_VARIABLE` of nodes at ``addresses``: each node's name and address."""
    return ",".join(f"{node_name(n)}={address}" for n, address in enumerate(addresses))


def node_environment(env: dict[str, str]) -> dict[str, str]:
    """Variables that make the shim run a rank of an emulated node as a process of that
    node (see shim.h): its address, name, network interface, the layout's host names, and
    NCCL's host id; empty unless the layout's nodes are on loopback addresses of this
    machine (``network.node_address``)."""
    nodes = emulated_addresses(env)
    if not nodes:
        return {}
    node = int(env.get("AZUREML_CR_NODE_RANK", "0"))
    return {
        "DISTCOMP_NODE": str(node),
        "DISTCOMP_NODE_ADDR": nodes[node],
        "DISTCOMP_NODE_NAME": node_name(node),
        "DISTCOMP_NIC_ADDR": nodes[node],
        HOSTS_VARIABLE: node_hosts(nodes),
        "DISTCOMP_NODE_PORTS": ",".join(rendezvous_ports(env)),
        "DISTCOMP_MASTER_ADDR": nodes[0],
        "NCCL_HOSTID": node_name(node),
    }


def node_slots(envs: list[dict[str, str]]) -> list[int]:
    """How many ranks each emulated node of ``envs`` runs; empty for ranks on one node (or
    on hosts)."""
    nodes = emulated_addresses(envs[0]) if envs else []
    ranks = [int(env.get("AZUREML_CR_NODE_RANK", "0")) for env in envs]
    return [ranks.count(node) for node in range(len(nodes))]


def launcher_environment(slots: list[int]) -> dict[str, str]:
    """What the mpiexec of ranks on emulated nodes needs (with :func:`listen_environment`):
    the nodes' names and addresses for its launch agent (rank_side/node_agent.py), and the
    loopback interface as its network, where Open MPI's daemons find each other."""
    if len(slots) < 2:
        return {}
    addresses = [node_address(node) for node in range(len(slots))]
    return {HOSTS_VARIABLE: node_hosts(addresses), "DISTCOMP_NIC_ADDR": LOOPBACK}


_shim: list[str | None] = []


def listen_shim() -> str | None:
    """The built shim library (cached by its source's hash), or None without a compiler."""
    if _shim:
        return _shim[0]
    source = b"".join(path.read_bytes() for path in (SHIM_HEADER, *SHIM_SOURCES))
    digest = hashlib.sha1(source).hexdigest()[:12]
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "jupyter-distcomp"
    target = cache / f"listen-shim-{digest}.so"
    compiler = shutil.which("cc") or shutil.which("gcc")
    if not target.exists() and compiler and sys.platform.startswith("linux"):
        cache.mkdir(parents=True, exist_ok=True)
        partial = target.with_suffix(f".{os.getpid()}.tmp")
        sources = [str(path) for path in SHIM_SOURCES]
        built = subprocess.run(
            [compiler, "-shared", "-fPIC", "-O2", "-o", str(partial), *sources, "-ldl"],
            capture_output=True,
        )
        if built.returncode == 0:
            os.replace(partial, target)
    _shim.append(str(target) if target.exists() else None)
    if _shim[0] is None and sys.platform.startswith("linux"):
        print(
            "distcomp: Open MPI's daemons of the local ranks will listen on every interface, "
            "not loopback only: the small library that keeps them on loopback needs a C "
            "compiler. Fix: install one (`apt-get install gcc`) and restart the kernel.",
            file=sys.stderr,
        )
    return _shim[0]
