"""Where the ranks listen and which hosts they run on: the one place for both.

Without hosts every rank runs on this machine and everything we start listens on loopback
only. With hosts (``%config DistComp.hosts``), node ``i`` of a layout runs on host ``i``;
``mpiexec`` reaches them over ssh, and the ranks' controller (and anything else that waits
for the ranks) listens on :func:`listen_address`, the address of this machine that routes to
the hosts, never on every interface.

Open MPI 5's daemons and TCP transport bind to every interface whatever interfaces they are
told to use, so on this machine they run with a small preloaded shim
(``standalone/listen_shim.c``, built with the C compiler on first use) that binds them to
the listen address instead. Standard library only (psutil on first use).
"""

from __future__ import annotations

import hashlib
import ipaddress
import os
import shutil
import socket
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from . import mpi
from .errors import LayoutError

LOOPBACK = "127.0.0.1"
SHIM_SOURCE = Path(__file__).parent / "standalone" / "listen_shim.c"


@dataclass(frozen=True)
class Placement:
    """Where the nodes of a layout run: ``hosts`` (node i on host i; none: this machine),
    reached with ``ssh_command``."""

    hosts: tuple[str, ...] = ()
    ssh_command: str = "ssh"

    @property
    def local(self) -> bool:
        return not self.hosts

    def listen(self) -> str:
        """:func:`listen_address` of these hosts."""
        return listen_address(self.hosts)

    def master_addr(self, configured: str = LOOPBACK) -> str:
        """MASTER_ADDR of the ranks: the first host unless the user set another address."""
        return self.hosts[0] if self.hosts and configured in ("", LOOPBACK) else configured

    def master_port(self, master_addr: str) -> int:
        """A port for the rendezvous: free on ``master_addr`` here; with hosts, free here (a
        guess: the first host's ports cannot be checked from this machine)."""
        return mpi.free_port(self.listen() if self.hosts else master_addr)

    def for_layout(self, instance_count: int) -> Placement:
        """The hosts of nodes 0..instance_count-1 (an error when there are fewer hosts)."""
        if not self.hosts:
            return self
        return Placement(tuple(hosts_for_layout(self.hosts, instance_count)), self.ssh_command)

    def describe(self) -> str:
        return f"hosts {', '.join(self.hosts)}" if self.hosts else "this machine"


# -- the hosts --------------------------------------------------------------------------
def read_hostfile(path: str | os.PathLike[str]) -> list[str]:
    """Host names of a hostfile: one a line (``node0`` or ``node0 slots=4``); ``#`` comments."""
    try:
        text = Path(path).expanduser().read_text()
    except OSError as exc:
        raise LayoutError(
            f"cannot read the hostfile {str(path)!r}: {exc.strerror or exc}. "
            "Fix: give an existing file with one host name a line."
        ) from None
    hosts = []
    for number, line in enumerate(text.splitlines(), 1):
        words = line.split("#", 1)[0].split()
        if not words:
            continue
        if any("=" not in word for word in words[1:]):
            raise LayoutError(
                f"{path}, line {number}: {line.strip()!r} is not a host line. "
                "Fix: one host a line, optionally followed by slots=N."
            )
        hosts.append(words[0])
    return check_hosts(hosts, f"the hostfile {path}")


def check_hosts(hosts: Sequence[str], where: str = "DistComp.hosts") -> list[str]:
    """``hosts`` as a clean list; an error naming the bad entry otherwise."""
    if isinstance(hosts, str):
        hosts = hosts.replace(",", " ").split()
    clean = []
    for host in hosts:
        name = str(host).strip()
        if not name or any(c.isspace() or c in ",:/" for c in name):
            raise LayoutError(
                f"{where}: {host!r} is not a host name. Fix: plain names or addresses, "
                'e.g. ["node0", "node1"].'
            )
        clean.append(name)
    if len(set(clean)) != len(clean):
        raise LayoutError(
            f"{where} names a host twice ({', '.join(clean)}): node i runs on host i. "
            "Fix: list each host once."
        )
    return clean


def hosts_for_layout(hosts: Sequence[str], instance_count: int) -> list[str]:
    """The hosts of nodes 0..instance_count-1; an error when there are fewer hosts."""
    if len(hosts) < instance_count:
        raise LayoutError(
            f"the layout has {instance_count} nodes but DistComp.hosts names "
            f"{len(hosts)} ({', '.join(hosts)}): node i runs on host i. Fix: add hosts, or "
            "set instance_count to at most the number of hosts."
        )
    return list(hosts[:instance_count])


# -- where we listen --------------------------------------------------------------------
def listen_address(hosts: Sequence[str] = ()) -> str:
    """The address the ranks' controller (and every other listener for the ranks) binds to:
    loopback for ranks on this machine; with hosts, this machine's address on the route to
    the first host that is not this machine."""
    targets = {host: _resolve(host) for host in hosts}
    remote = [
        (host, ip) for host, ip in targets.items() if not ipaddress.ip_address(ip).is_loopback
    ]
    if not remote:  # every host is this machine
        return LOOPBACK
    host, target = remote[0]
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect((target, 22))  # UDP: picks the route, sends nothing
        except OSError as exc:
            raise LayoutError(
                f"no route from this machine to the host {host} ({target}): {exc}. "
                "Fix: check the host's address and this machine's network."
            ) from None
        address: str = probe.getsockname()[0]
    return address


def _resolve(host: str) -> str:
    try:
        address = str(socket.getaddrinfo(host, 22, socket.AF_INET, socket.SOCK_DGRAM)[0][4][0])
    except OSError as exc:
        raise LayoutError(
            f"cannot resolve the host {host!r} ({exc}). Fix: a name this machine resolves "
            "(ssh config aliases do not count), or the host's address."
        ) from None
    return address


def network_of(address: str) -> str:
    """The network (CIDR) of this machine's interface that holds ``address``."""
    import psutil

    for addrs in psutil.net_if_addrs().values():
        for addr in addrs:
            if addr.family == socket.AF_INET and addr.address == address and addr.netmask:
                net = ipaddress.ip_network(f"{address}/{addr.netmask}", strict=False)
                return str(net)
    return f"{address}/32"


def is_loopback(address: str) -> bool:
    """True for loopback addresses, IPv4-mapped IPv6 ones included."""
    ip = ipaddress.ip_address(address.split("%")[0])
    mapped = getattr(ip, "ipv4_mapped", None)
    return bool(ip.is_loopback or (mapped is not None and mapped.is_loopback))


# -- Open MPI ---------------------------------------------------------------------------
def mpiexec_flags(
    placement: Placement, world_size: int, process_count_per_node: int, forward: Sequence[str] = ()
) -> list[str]:
    """Every flag of an mpiexec that starts ``world_size`` ranks so placed: on this machine,
    :func:`mpi.mpiexec_args` (oversubscription); on hosts, ``process_count_per_node`` slots
    each, so never oversubscribed. Then :func:`mpiexec_host_args`."""
    own = mpi.mpiexec_args(world_size) if placement.local else ["--bind-to", "none"]
    return [*own, *mpiexec_host_args(placement, process_count_per_node, forward)]


def mpiexec_host_args(
    placement: Placement, process_count_per_node: int, forward: Sequence[str] = ()
) -> list[str]:
    """mpiexec flags for ranks on the placement's hosts (node i = host i,
    ``process_count_per_node`` each; the variables named in ``forward`` passed on to them);
    without hosts, the flags that keep Open MPI's traffic on this machine."""
    hosts = placement.hosts
    if not hosts:
        # one machine: shared memory between ranks; no TCP transport listening at all
        return ["--mca", "btl", "^tcp"]
    network = network_of(listen_address(hosts))
    forwarded = [arg for key in forward for arg in ("-x", key)]
    return [
        "--host",
        ",".join(f"{host}:{process_count_per_node}" for host in hosts),
        "--map-by",
        "slot",  # fill host 0 first: rank r runs on host r // process_count_per_node
        "--prtemca",
        "plm_ssh_agent",
        placement.ssh_command,
        "--prtemca",
        "prte_if_include",
        network,
        "--mca",
        "btl_tcp_if_include",
        network,
        *forwarded,
    ]


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
