"""Commands on the hosts of a layout, over the ssh ``mpiexec`` uses (``DistComp.ssh_command``):
a rank on another host cannot be signalled or read from here."""

from __future__ import annotations

import shlex
import subprocess
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor


def ssh(ssh_command: str, host: str, script: str, timeout: float) -> str:
    """Run ``script`` with sh on ``host``; its stdout ('' when ssh fails)."""
    argv = [*shlex.split(ssh_command), host, script]
    try:
        done = subprocess.run(
            argv, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL
        )
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return done.stdout


def on_hosts(ssh_command: str, scripts: dict[str, str], timeout: float) -> dict[str, str]:
    """Run each host's script there, all at once; each host's stdout."""
    hosts = list(scripts)
    with ThreadPoolExecutor(max_workers=max(1, len(hosts))) as pool:
        outputs = pool.map(lambda host: ssh(ssh_command, host, scripts[host], timeout), hosts)
        return dict(zip(hosts, outputs, strict=True))


def remove(ssh_command: str, hosts: Sequence[str], path: str, timeout: float = 30) -> None:
    """Remove ``path`` (a world's folder of stack files) on every host."""
    on_hosts(ssh_command, {host: f"rm -rf {shlex.quote(path)}" for host in hosts}, timeout)
