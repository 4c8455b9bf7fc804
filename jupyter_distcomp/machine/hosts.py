"""Where the nodes of a layout run: this machine, or one host each.

With hosts (``%config DistComp.hosts``, a hostfile, ``%distcomp restart NAME --hosts``),
node ``i`` of a layout runs on host ``i``; ``mpiexec`` reaches them over ssh.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ..core.layout import PORT_AT_START, env_places
from ..errors import LayoutError
from .gpus import node_environments
from .network import LOOPBACK, listen_address, listener_ports, loopback_interface, node_address

if TYPE_CHECKING:
    from ..core.layout import RankEnv
    from ..core.model import Component


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

    def for_layout(self, instance_count: int) -> Placement:
        """The hosts of nodes 0..instance_count-1 (an error when there are fewer hosts)."""
        if not self.hosts:
            return self
        return Placement(tuple(hosts_for_layout(self.hosts, instance_count)), self.ssh_command)

    def describe(self) -> str:
        return f"hosts {', '.join(self.hosts)}" if self.hosts else "this machine"

    def rank_environments(
        self, component: Component, master_addr: str = LOOPBACK, *, chosen_at_start: bool = False
    ) -> list[RankEnv]:
        """Each rank's variables with the component's nodes on these hosts: MASTER_ADDR the
        first host unless the user set another address, NCCL on this machine's loopback
        interface, and the ports free on this machine now (a start takes them once per
        world; with hosts they are a guess, as the first host's ports cannot be checked from
        here). ``chosen_at_start``: ``PORT_AT_START`` in their place, as the views show the
        variables before a world holds its ports. Emulated nodes (no hosts) each get their share
        of this machine's GPUs (``gpus.node_environments``)."""
        nodes = component.runsettings.resource_layout.instance_count
        placed = self.for_layout(nodes)
        addr = placed.master_addr(master_addr)
        # emulated nodes: each on its own loopback address, node 0 at MASTER_ADDR
        emulated = not placed.hosts and nodes > 1 and addr in ("", LOOPBACK)
        node_hosts = list(placed.hosts) or (
            [node_address(n) for n in range(nodes)] if emulated else []
        )
        addr = node_hosts[0] if emulated else addr
        ports = (
            PORT_AT_START
            if chosen_at_start
            else listener_ports(LOOPBACK if placed.hosts else addr, component.ports_needed)
        )
        envs = component.rank_environments(
            addr, ports, node_hosts=node_hosts or None, socket_ifname=loopback_interface()
        )
        if placed.hosts:  # real hosts: each has its own GPUs
            return envs
        if emulated and component.launcher_type == "mpi":  # NCCL on loopback, as one node
            envs = [{**env, "NCCL_SOCKET_IFNAME": loopback_interface()} for env in envs]
        shares = node_environments(nodes)  # each emulated node its share of the GPUs
        return [
            {**env, **shares[node]} for env, (node, _) in zip(envs, env_places(envs), strict=True)
        ]


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
