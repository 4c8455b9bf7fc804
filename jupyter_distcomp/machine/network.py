"""Addresses and ports of this machine, and where the listeners for the ranks bind.

Without hosts every rank runs on this machine and everything we start listens on loopback
only. With hosts (``%config DistComp.hosts``), the ranks' controller (and anything else that
waits for the ranks) listens on :func:`listen_address`, the address of this machine that
routes to the hosts, never on every interface. Standard library only (psutil on first use).
"""

from __future__ import annotations

import errno
import ipaddress
import random
import re
import socket
from collections.abc import Sequence
from contextlib import ExitStack
from pathlib import Path

from ..errors import LayoutError

LOOPBACK = "127.0.0.1"


#: Linux's range of ports for bind(0) and outgoing connections
LOCAL_PORT_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")
#: the ports below that range that a world may take (above it: all up to 65535)
BELOW_LOCAL_RANGE = 12768


def _local_port_range() -> tuple[int, int]:
    """The ports the system hands out itself, to a bind to port 0 and to an outgoing
    connection (IANA's dynamic range where the system does not say)."""
    try:
        low, high = map(int, LOCAL_PORT_RANGE.read_text().split())
    except (OSError, ValueError):
        return 49152, 65535
    return low, high


def _outside_local_range(tries: int) -> list[int]:
    """Up to ``tries`` distinct ports, at random, outside the system's own range."""
    low, high = _local_port_range()
    spans = [range(max(1024, low - BELOW_LOCAL_RANGE), low), range(high + 1, 65536)]
    picks = random.sample(range(sum(map(len, spans))), min(tries, sum(map(len, spans))))
    return [spans[0][i] if i < len(spans[0]) else spans[1][i - len(spans[0])] for i in picks]


def free_ports(addr: str, count: int) -> list[int]:
    """``count`` distinct TCP ports free on ``addr`` now, held by nothing and outside the range
    the system hands out itself: a process that starts after the choice (the ranks'
    controller, an outgoing connection) is never given one of them before a rank listens
    there. Bound at once, then freed; where none of those is free, any free port."""
    with ExitStack() as stack:
        ports: list[int] = []
        for port in [*_outside_local_range(count + 64), *[0] * count]:
            if len(ports) == count:
                break
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            try:
                sock.bind((addr, port))
            except OSError as exc:
                sock.close()
                if port and exc.errno == errno.EADDRINUSE:  # taken: the next one
                    continue
                raise LayoutError(
                    f"cannot open a port on master_addr {addr!r} ({exc.strerror or exc}). "
                    "Fix: %config DistComp.master_addr = '127.0.0.1' (an address of this "
                    "machine)."
                ) from None
            ports.append(stack.enter_context(sock).getsockname()[1])
        return ports


def loopback_interface() -> str:
    """The name of the loopback network interface (``lo`` on Linux, ``lo0`` on macOS)."""
    try:
        names = [name for _, name in socket.if_nameindex()]
    except OSError:
        names = []
    return next((n for n in ("lo", "lo0") if n in names), "lo")


#: the host name of emulated node N of a multi-node layout on this machine
NODE_NAME = "distcomp-node-{}"
_NODE_NAME = re.compile(r"distcomp-node-\d+")


def node_name(node: int) -> str:
    """The host name of emulated node ``node`` (what ``socket.gethostname()`` says there)."""
    return NODE_NAME.format(node)


def node_address(node: int) -> str:
    """The loopback address of emulated node ``node`` of a multi-node layout: 127.0.0.2 for
    node 0, 127.0.0.3 for node 1, ... (Linux routes all of 127.0.0.0/8 to loopback); a
    one-node layout stays on 127.0.0.1. Not 127.0.0.1 for node 0, so that ``localhost`` (node
    1 itself, on Azure ML) and node 0's address differ."""
    if not 0 <= node < 250:
        raise LayoutError(f"{node + 1} emulated nodes: at most 250. Fix: fewer nodes.")
    return f"127.0.0.{node + 2}"


def is_local_host(host: str | None) -> bool:
    """True for this machine's names (a rank whose pid can be signalled from here), the
    names of the emulated nodes on it included."""
    if host in (None, "", socket.gethostname(), "localhost", "127.0.0.1"):
        return True
    return bool(_NODE_NAME.fullmatch(host or ""))


def is_this_machine(addr: str) -> bool:
    """True when ``addr`` is this machine's: a loopback address, its host name, or the
    address of one of its network interfaces (nothing is bound or resolved to tell)."""
    if is_local_host(addr):
        return True
    try:
        if ipaddress.ip_address(addr).is_loopback:
            return True
    except ValueError:
        return False  # another machine's name
    import psutil

    return any(
        entry.address == addr for entries in psutil.net_if_addrs().values() for entry in entries
    )


def listener_ports(addr: str, count: int) -> list[int] | None:
    """Ports for ``count`` listeners of the ranks on ``addr``: free ones now when ``addr`` is
    this machine's (local runs share it); None for another machine, whose ports are not ours
    to check (the layout then uses Azure ML's own)."""
    return free_ports(addr, count) if is_this_machine(addr) else None


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
