"""What the kernel does on the hosts of a world over ssh: take stacks, clean up.

A rank on another host cannot be signalled or read from here, so each host gets one ssh
session that does the work there: note the size of each rank's stack file, send SIGUSR1 to
the ranks' pids (faulthandler appends every thread's stack), wait, and print what was
appended. The ssh is the one mpiexec uses (``DistComp.ssh_command``).
"""

from __future__ import annotations

import shlex
import subprocess
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from .failures import main_thread_stack

MARK = "=== distcomp rank "


@dataclass(frozen=True)
class RemoteRank:
    rank: int
    host: str  # the host name mpiexec was given (what ssh reaches)
    pid: int
    stack_path: str
    main_thread: int | None


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


def stack_script(ranks: Sequence[RemoteRank], wait: float) -> str:
    """The sh script one host runs to take the stacks of its ``ranks``."""
    lines = []
    for r in ranks:
        path = shlex.quote(r.stack_path)
        lines.append(f"s{r.rank}=$(stat -c %s {path} 2>/dev/null || echo 0)")
    lines.append("kill -USR1 " + " ".join(str(r.pid) for r in ranks) + " 2>/dev/null")
    lines.append(f"sleep {wait:.2f}")
    for r in ranks:
        path = shlex.quote(r.stack_path)
        lines.append(f"echo '{MARK}{r.rank}'; tail -c +$((s{r.rank} + 1)) {path} 2>/dev/null")
    return "\n".join(lines)


def stacks(ssh_command: str, ranks: Sequence[RemoteRank], wait: float = 1.0) -> dict[int, str]:
    """Each rank's main-thread stack, taken on its own host (ranks that gave none left out)."""
    by_host: dict[str, list[RemoteRank]] = {}
    for r in ranks:
        by_host.setdefault(r.host, []).append(r)
    threads = {r.rank: r.main_thread for r in ranks}

    def on_host(host: str) -> str:
        return ssh(ssh_command, host, stack_script(by_host[host], wait), timeout=wait + 30)

    result: dict[int, str] = {}
    with ThreadPoolExecutor(max_workers=max(1, len(by_host))) as pool:
        for output in pool.map(on_host, list(by_host)):
            for block in output.split(MARK)[1:]:
                number, _, dump = block.partition("\n")
                if number.strip().isdigit() and dump.strip():
                    rank = int(number)
                    result[rank] = main_thread_stack(dump, threads.get(rank))
    return result


def remove(ssh_command: str, hosts: Sequence[str], path: str, timeout: float = 30) -> None:
    """Remove ``path`` (the world's folder of stack files) on every host."""
    script = f"rm -rf {shlex.quote(path)}"
    with ThreadPoolExecutor(max_workers=max(1, len(hosts))) as pool:
        list(pool.map(lambda host: ssh(ssh_command, host, script, timeout), hosts))
