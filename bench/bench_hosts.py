"""Ranks on 2 hosts x 2 against the same layout on this machine, measured in one run.

Run: .venv/bin/python bench/bench_hosts.py   (not a test; prints its figures; needs root)

The hosts are the test suite's: two network namespaces with their own addresses and sshd on
a virtual bridge (tests/netns_support.py), so the figures show what ssh, the remote daemons
and TCP between the ranks cost, not a real network's latency.

1. start-up of 2 x 2 ranks: on the hosts vs on this machine (ratio)
2. a warm ``%%distcomp run`` round trip (``x = 1``) on the same worlds (ratio)
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from common import SPEC, hosts_shell, quiet

from tests.netns_support import NamespaceHosts


def measure(shell, backend, starts: int = 3, trips: int = 30) -> tuple[float, float]:
    """Median start-up and warm round trip of the component ``bench`` where it is placed."""
    component = shell.user_ns["bench"]
    start = []
    for _ in range(starts):
        tic = time.perf_counter()
        quiet(backend.start, "bench", component)
        start.append(time.perf_counter() - tic)
        backend.stop("bench")
    quiet(backend.start, "bench", component)
    trip = []
    for _ in range(trips):
        tic = time.perf_counter()
        result, _ = quiet(shell.run_cell, "%%distcomp run bench\nx = 1")
        trip.append(time.perf_counter() - tic)
        assert result.success, result.error_in_exec
    backend.stop("bench")
    return statistics.median(start), statistics.median(trip)


def main() -> None:
    shell = hosts_shell("bench_hosts")
    if shell is None:
        return
    from jupyter_distcomp.local.ranks.backend import get_backend
    from jupyter_distcomp.machine.hosts import Placement

    quiet(shell.run_cell, f"%%distcomp bench\n{SPEC}")
    shell.user_ns["bench"].runsettings.resource_layout.configure(
        instance_count=2, process_count_per_node=2
    )
    backend = get_backend()
    with NamespaceHosts(2) as hosts:
        print("jupyter-distcomp, 2 nodes x 2 ranks: 2 namespaced hosts over ssh vs this machine\n")
        one_start, one_trip = measure(shell, backend)
        backend.place("bench", Placement(tuple(hosts.addresses), hosts.ssh_command))
        try:
            two_start, two_trip = measure(shell, backend)
        finally:
            backend.place("bench", None)
            backend.shutdown()
    print(
        f"start-up:         2 hosts {two_start:6.2f} s   one machine {one_start:6.2f} s   "
        f"ratio {two_start / one_start:.2f}"
    )
    print(
        f"warm round trip:  2 hosts {two_trip * 1000:6.1f} ms  one machine "
        f"{one_trip * 1000:6.1f} ms  ratio {two_trip / one_trip:.2f}"
    )


if __name__ == "__main__":
    main()
