"""Keeps the listeners Open MPI starts on this machine on one address.

Open MPI 5's daemons and TCP transport bind to every interface whatever interfaces they are
told to use, so on this machine they run with a small preloaded shim (``listen_shim.c``,
built with the C compiler on first use) that binds them to the listen address instead.
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

from .network import LOOPBACK

SHIM_SOURCE = Path(__file__).with_name("listen_shim.c")


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


def node_environment(env: dict[str, str]) -> dict[str, str]:
    """Variables that make the shim keep a rank of an emulated node on its node's loopback
    address (see listen_shim.c): empty unless the layout's nodes are on loopback addresses
    of this machine (``hosts.node_address``)."""
    nodes = env.get("AZ_BATCH_HOST_LIST", "").split(",")
    if len(nodes) < 2 or not all(n.startswith("127.") and n != LOOPBACK for n in nodes):
        return {}
    node = int(env.get("AZUREML_CR_NODE_RANK", "0"))
    return {
        "DISTCOMP_NODE": str(node),
        "DISTCOMP_NODE_ADDR": nodes[node],
        "DISTCOMP_NODE_PORTS": ",".join(rendezvous_ports(env)),
        "DISTCOMP_MASTER_ADDR": nodes[0],
    }


_shim: list[str | None] = []


def listen_shim() -> str | None:
    """The built shim library (cached by its source's hash), or None without a compiler."""
    if _shim:
        return _shim[0]
    source = SHIM_SOURCE.read_bytes()
    digest = hashlib.sha1(source).hexdigest()[:12]
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "jupyter-distcomp"
    target = cache / f"listen-shim-{digest}.so"
    compiler = shutil.which("cc") or shutil.which("gcc")
    if not target.exists() and compiler and sys.platform.startswith("linux"):
        cache.mkdir(parents=True, exist_ok=True)
        partial = target.with_suffix(f".{os.getpid()}.tmp")
        built = subprocess.run(
            [compiler, "-shared", "-fPIC", "-O2", "-o", str(partial), str(SHIM_SOURCE), "-ldl"],
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
