"""``%%distcomp run NAME --job JOB``, end to end: a job submitted with ``--debug --cells``
through the real azure-ai-ml client to the local stand-in of Azure ML, its 2 nodes x 2 ranks
on two hosts (network namespaces with their own sshd, tests/netns_support.py; the fixtures
of test_attach_jobs.py), each rank an ipyparallel engine of a real kernel through the SSH
tunnels of attach.

A cell on the job's ranks prints each rank's variables and host and does an MPI allreduce,
its output labelled by node and rank; a failing cell shows each rank's error and the ranks
stay usable; nothing of ours listens beyond loopback; ``%distcomp stop JOB`` ends the job
Completed; a killed kernel leaves the job to end by its idle limit. Skipped, with the
reason, where namespaces cannot be made.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import psutil
import pytest

from . import test_attach_jobs as attach_jobs
from .debug_support import DebugKernel
from .test_attach_jobs import (  # noqa: F401  (fixtures)
    SPEC,
    hosts,
    kernel,
    keys,
    listeners,
    pointed_at,
    standin,
    wait_for,
)

pytest.importorskip("azure.ai.ml")
#: the attach tests' marks: slow, skipped (with the reason) without namespaced hosts
pytestmark = attach_jobs.pytestmark
#: what a cell on the job's ranks does: who it is, where, and an allreduce across nodes
CELL = """\
import os, socket
from mpi4py import MPI
c = MPI.COMM_WORLD
total = c.allreduce(c.rank + 1)
print("rank", os.environ["OMPI_COMM_WORLD_RANK"], "on", socket.gethostname(), "total", total)
"""


def submitted(kernel, folder: Path, keys, idle: str) -> str:  # noqa: F811
    """Define the component in ``folder`` and submit it with --debug --cells; the job."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "spec.yaml").write_text(SPEC.format(python=sys.executable))
    (folder / "train.py").write_text("print('the spec command: not run with --cells')\n")
    return attach_jobs.submitted(
        kernel,
        folder,
        keys,
        f"--cells --idle-limit {idle}",
        said=r"(\S+): its ranks wait for the notebook's cells",
    )


def logs(job) -> list[str]:
    return [job.log_text(f"user_logs/std_log_process_{r}.txt") for r in range(4)]


def test_cells_run_on_the_jobs_ranks_until_stop_ends_the_job(
    kernel,  # noqa: F811
    standin,  # noqa: F811
    keys,  # noqa: F811
    hosts,  # noqa: F811
    tmp_path,
):
    name = submitted(kernel, tmp_path / "proj", keys, "5")
    job = standin.job(name)

    out = kernel.run(f"%%distcomp run train --job {name}\n{CELL}", timeout=300)
    assert out.ok, out.text
    assert re.search(rf"Attached to job {name} in [\d.]+ s over SSH", out.text), out.text
    assert "the job ends after 5 min without a cell, also when this kernel is gone" in out.text
    for rank in range(4):  # each rank's own variables and host, labelled with its node
        node = rank // 2
        assert f"[node {node} rank {rank}] rank {rank} on node{node} total 10" in out.text, out.text
    assert "the spec command" not in "".join(logs(job))

    # a failing cell: each rank's error, then the ranks run the next cell
    failed = kernel.run(
        f"%%distcomp run train --job {name}\nraise ValueError(f'bad input on rank {{c.rank}}')\n"
    )
    assert not failed.ok
    for rank in range(4):
        assert f"bad input on rank {rank}" in failed.text, failed.text
    # a breakpoint() in a cell stops the job's ranks at the notebook's group prompt
    stopped = kernel.run(
        f"%%distcomp run train --job {name}\nx = c.rank * 10 + 1\nbreakpoint()\ny = c.allreduce(x)\n",
        ["p x", "n", "p y", "c"],
    )
    assert stopped.ok, stopped.text
    assert stopped.prompts[:3] == ["(Pdb ranks 0-3) "] * 3, stopped.transcript
    assert "[node 1 rank 2] 21\n" in stopped.transcript, stopped.transcript
    assert "[ranks 0-3] 64\n" in stopped.transcript, stopped.transcript  # n: the allreduce

    # a cell past its time-out: each rank's stack, taken on its node, then SIGINT over SSH
    slow = kernel.run(
        f"%%distcomp run train --job {name} --timeout 3\nimport time\ntime.sleep(120)\n"
    )
    assert not slow.ok
    assert f"the cell timed out after 3 s on {name!r}: ranks 0-3 still busy" in slow.text, slow.text
    assert "time.sleep(120)" in slow.text, slow.text
    assert "all ranks are ready for the next cell" in slow.text, slow.text
    # a kernel interrupt while a cell runs reaches the job's ranks (SIGINT over SSH)
    sleeping = kernel.kc.execute(
        f"%%distcomp run train --job {name}\nimport time\nprint('sleeping', flush=True)\n"
        "time.sleep(120)\n"
    )
    for rank in (0, 3):
        assert f"rank {rank}] sleeping" in kernel.output_until(sleeping, f"rank {rank}] sleeping")
    kernel.km.interrupt_kernel()
    reply = kernel.kc.get_shell_msg(timeout=60)
    while reply["parent_header"].get("msg_id") != sleeping:
        reply = kernel.kc.get_shell_msg(timeout=60)
    assert reply["content"]["status"] == "error", reply["content"]
    assert reply["content"]["ename"] == "RankInterrupt", reply["content"]
    again = kernel.run(f"%%distcomp run train --job {name} --ranks 0-3\nprint(c.allreduce(2))\n")
    assert again.ok, again.text
    assert "[node 1 rank 3] 8" in again.text, again.text

    # nothing of ours listens beyond loopback: the nodes' tunnels, the kernel's controller
    for node in (0, 1):
        for address, process in listeners(hosts, node):
            if process == "sshd" and not address.endswith(":22"):
                assert address.startswith("127.0.0.1:"), (node, address)
    kernel_process = psutil.Process(kernel.km.provisioner.process.pid)
    for process in [kernel_process, *kernel_process.children(recursive=True)]:
        for conn in process.net_connections(kind="inet"):
            if conn.status == psutil.CONN_LISTEN:
                assert conn.laddr.ip in ("127.0.0.1", "::1"), (process.name(), conn)

    status = kernel.run(f"%distcomp status {name}")
    assert "engines of this kernel: ranks 0-3" in status.text, status.text
    stopped = kernel.run(f"%distcomp stop {name}")
    assert f"Ended job {name}'s engines on ranks 0-3" in stopped.text, stopped.text
    assert job.wait(120) == "Completed", "\n".join(logs(job))
    said = "the notebook ended the job; the rank ends"  # the logs may lag the status
    wait_for(lambda: all(said in log for log in logs(job)), 30, "\n".join(logs(job)))


def test_a_killed_kernel_leaves_the_job_to_end_by_its_idle_limit(
    kernel,  # noqa: F811
    standin,  # noqa: F811
    keys,  # noqa: F811
    tmp_path,
):
    name = submitted(kernel, tmp_path / "proj", keys, "0.5")  # the attach comes within it
    job = standin.job(name)
    doomed = DebugKernel(cwd=str(tmp_path))
    try:
        assert doomed.run(pointed_at(standin, keys)).ok
        out = doomed.run(f"%distcomp attach {name}", timeout=300)
        assert out.ok, out.text
        assert "each rank an engine of this kernel" in out.text, out.text
        kernel_process = psutil.Process(doomed.km.provisioner.process.pid)
        kernel_process.kill()  # SIGKILL: no atexit hook, no detach, no stop
    finally:
        doomed.close()
    assert job.wait(180) == "Completed", job.error  # no cell for 0.5 min: the ranks end
    said = "no cell from the notebook for 0.5 min (DISTCOMP_IDLE_MINUTES); the rank ends"
    wait_for(lambda: all(said in log for log in logs(job)), 30, "\n".join(logs(job)))
