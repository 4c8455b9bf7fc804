"""How Open MPI reaches an emulated node: its launch agent, in place of ssh.

    python -I .../rank_side/node_agent.py NODE-NAME COMMAND...

Open MPI runs the ranks of a multi-node layout on this machine under one daemon per
emulated node (``mpiexec --host distcomp-node-0:2,distcomp-node-1:2``, this file as its
``plm_ssh_agent``), so that it sees the layout's nodes as a cluster's: each daemon is a node
of its own, its ranks local to each other and remote to the other nodes' ranks
(``MPI_Comm_split_type(COMM_TYPE_SHARED)``, local ranks, shared memory within a node only).
Where ssh would log in to the host, this runs the daemon's command here, as that node: with
its variables (its address, name and NCCL host id, which the preloaded shim reads; see
machine/shim.h) and, where the system permits (root), in a UTS namespace of its own whose
host name is the node's, for programs that do not ask the C library for it.

Standard library only, run as a file: it starts before every daemon.
"""

from __future__ import annotations

import os
import sys

#: every emulated node: ``name=address,...`` (the preloaded shim resolves the names so too)
HOSTS_VARIABLE = "DISTCOMP_NODE_HOSTS"
_CLONE_NEWUTS = 0x04000000


def node_environment(name: str, hosts: str) -> dict[str, str]:
    """The variables of the node called ``name`` among ``hosts`` (``name=address,...``);
    empty if it is not one of them."""
    nodes = [entry.split("=", 1) for entry in hosts.split(",") if "=" in entry]
    for index, (node, address) in enumerate(nodes):
        if node == name:
            return {
                "DISTCOMP_NODE": str(index),
                "DISTCOMP_NODE_ADDR": address,
                "DISTCOMP_NODE_NAME": name,
                "DISTCOMP_NIC_ADDR": address,
                "NCCL_HOSTID": name,
            }
    return {}


def become(name: str) -> bool:
    """This process (and what it starts) in a UTS namespace of its own named ``name``, where
    the system permits it (root, or CAP_SYS_ADMIN); False otherwise (the shim still answers
    the C library's gethostname and uname with the node's name)."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        if libc.unshare(_CLONE_NEWUTS) != 0:
            return False
        raw = name.encode()
        return bool(libc.sethostname(raw, len(raw)) == 0)
    except (OSError, AttributeError):
        return False


def main(args: list[str]) -> int:
    if len(args) < 2:
        print("usage: python -I node_agent.py NODE-NAME COMMAND...", file=sys.stderr)
        return 2
    name, command = args[0], " ".join(args[1:])
    env = node_environment(name, os.environ.get(HOSTS_VARIABLE, ""))
    if not env:
        print(f"distcomp: {name!r} is not an emulated node of this layout", file=sys.stderr)
        return 2
    os.environ.update(env)
    become(name)
    os.execv("/bin/sh", ["/bin/sh", "-c", command])
    return 127  # not reached: execv replaces this process or raises


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
