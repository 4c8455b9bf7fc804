"""The processes behind an embedded cluster, for a stop that leaves nothing behind."""

from __future__ import annotations

import time
from typing import Any


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
