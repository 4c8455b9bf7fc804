"""A cell's round trip on the ranks of an attached job (``%%distcomp run NAME --job JOB``)
against the same cell on local ranks, measured in one run.

Run: .venv/bin/python bench/bench_job_cells.py   (not a test; prints its figures; needs root)

A 2 x 2 job submitted with ``--debug --cells`` through azure-ai-ml to the local stand-in of
Azure ML, its nodes on two network namespaces with their own sshd (tests/netns_support.py):
each rank an engine of this process's kernel through the SSH tunnels of attach. The peer is
the same layout of local ranks on this machine (2 emulated nodes x 2). Both through the
notebook's magic, warm (the first cell, which attaches and starts, is left out), alternated.
The figures
show what the tunnels and the hops cost, not a real network's latency.
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench_attach import SPEC  # a 2 x 2 MPI component whose command names this Python
from common import hosts_shell, quiet

from tests.netns_support import NamespaceHosts

TRIPS = 60


def trips(shell, cells: list[str]) -> list[list[float]]:
    """Seconds of each of TRIPS runs of each cell (after one that warms up), alternated so
    that the machine's load falls on both alike."""
    for cell in cells:
        result, _ = quiet(shell.run_cell, cell)
        assert result.success, result.error_in_exec
    found: list[list[float]] = [[] for _ in cells]
    for _ in range(TRIPS):
        for cell, times in zip(cells, found, strict=True):
            tic = time.perf_counter()
            result, _ = quiet(shell.run_cell, cell)
            times.append(time.perf_counter() - tic)
            assert result.success, result.error_in_exec
    return found


def main() -> None:
    shell = hosts_shell("bench_job_cells")
    if shell is None:
        return
    import tempfile

    from jupyter_distcomp.local.ranks.backend import get_backend
    from jupyter_distcomp.standin import AzureStandIn

    folder = Path(tempfile.mkdtemp(prefix="bench-job-cells-"))
    (folder / "train.py").write_text("print('not run')\n")
    spec = SPEC.format(python=sys.executable)
    quiet(shell.run_cell, f"%%distcomp bench\n{spec}code: {folder}\n")
    shell.user_ns["bench"].runsettings.resource_layout.configure(
        instance_count=2, process_count_per_node=2
    )
    session = shell.magics_manager.registry["DistCompMagics"].session
    with (
        NamespaceHosts(2) as hosts,
        AzureStandIn(
            root=folder / "standin",
            hosts=tuple(hosts.addresses),
            ssh_command=hosts.ssh_command,
            authorized_keys=hosts.dir / "authorized_keys",
            delays={"Queued": 0.0, "Preparing": 0.0},
        ) as standin,
    ):
        for key, value in standin.session_settings().items():
            setattr(session.azureml, key, value)
        session.azureml.ssh_command = hosts.ssh_command
        session.azureml.ssh_user = "root"
        result, _ = quiet(
            shell.run_cell,
            "%distcomp submit bench --compute cpu --no-environment --debug --cells "
            f"--ssh-key {hosts.dir / 'user_key.pub'}",
        )
        assert result.success, result.error_in_exec
        job = session.last_job
        print("jupyter-distcomp, 2 nodes x 2 ranks: a job's ranks over SSH vs local ranks\n")
        on_job, local = trips(
            shell, [f"%%distcomp run bench --job {job}\nx = 1", "%%distcomp run bench\nx = 1"]
        )
        quiet(shell.run_cell, f"%distcomp stop {job}")
        assert standin.job(job).wait(120) == "Completed", standin.job(job).error
        get_backend().shutdown()
    job_ms, local_ms = statistics.median(on_job) * 1000, statistics.median(local) * 1000
    print(
        f"warm round trip (x = 1):  job ranks {job_ms:6.1f} ms   local ranks {local_ms:6.1f} ms"
        f"   ratio {job_ms / local_ms:.2f}"
    )


if __name__ == "__main__":
    main()
