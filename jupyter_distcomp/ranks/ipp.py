"""ipyparallel, behind one adapter: the cluster's configuration, its processes, its start and stop.

Everything this package needs from ipyparallel goes through here, so an ipyparallel release
that changes what we rely on breaks one module (and its test), not the backend.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any

from .. import mpi

#: The hub pings engines every HEARTBEAT_MS. ipyparallel's default (3000 ms) is most of a
#: ~10 s start: registration only completes on a heartbeat cycle. 200 ms makes 4 ranks
#: ready in about a third of that time; the miss limits keep the same patience in seconds.
HEARTBEAT_MS = 200
HUB_MISSES = 50  # 10 s without an answer before the hub gives an engine up
ENGINE_MISSES = 150  # 30 s without the hub before an engine shuts itself down
#: run through this, the controller and mpiexec die with the kernel
GUARD = [sys.executable, "-m", "jupyter_distcomp.standalone.guard"]


def engine_environment() -> dict[str, str]:
    """Variables mpiexec and the engines need besides the kernel's own."""
    env = mpi.mpiexec_environment()
    if "MPLBACKEND" not in os.environ:
        # figures made on ranks come back as images, as in a notebook
        env["MPLBACKEND"] = "module://matplotlib_inline.backend_inline"
    env["PYTHONUNBUFFERED"] = "1"
    return env


def cluster_config(world_size: int) -> Any:
    """traitlets config for ``ipp.Cluster(engines="mpi")``: our mpiexec, flags, heartbeat."""
    from ipyparallel.cluster.launcher import ipcontroller_cmd_argv
    from traitlets.config import Config

    config = Config()
    config.MPILauncher.mpi_cmd = [*GUARD, mpi.mpiexec_path()]
    config.LocalControllerLauncher.controller_cmd = [*GUARD, *ipcontroller_cmd_argv]
    config.MPILauncher.mpi_args = mpi.mpiexec_args(world_size)
    config.MPIEngineSetLauncher.environment = engine_environment()
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


def quiet_log():
    """ipyparallel logs every engine line at exit; we report what matters ourselves."""
    import logging

    log = logging.getLogger("jupyter_distcomp.ranks.cluster")
    if not log.handlers:
        log.addHandler(logging.NullHandler())
        log.propagate = False
        log.setLevel(logging.CRITICAL)
    return log


def process_tree(cluster: Any) -> list:
    """mpiexec, its daemons, the ranks, their nannies and the controller, as psutil objects."""
    import psutil

    launchers = [cluster.controller, *cluster.engines.values()]
    procs = []
    for launcher in launchers:
        process = getattr(launcher, "process", None)
        if process is None:
            continue
        try:
            procs += [process, *process.children(recursive=True)]
        except psutil.Error:
            pass
    return procs


def kill(procs: list) -> None:
    """SIGKILL whatever of ``procs`` outlived a polite stop."""
    import psutil

    alive = []
    for proc in procs:
        try:
            if proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE:
                proc.kill()
                alive.append(proc)
        except psutil.Error:
            pass
    # not psutil.wait_procs: orphans stay zombies where PID 1 does not reap (containers)
    deadline = time.monotonic() + 3
    while alive and time.monotonic() < deadline:
        time.sleep(0.02)
        alive = [p for p in alive if _running(p)]


def _running(proc) -> bool:
    import psutil

    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False
