"""Horovod for the tests: installed once per session by the project's own installer (``make
horovod`` runs the same), or the tests are skipped with its reason where it cannot be built
(no C++ compiler or cmake: exit status 3); any other failure of the install fails them."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from jupyter_distcomp.horovod_install import MISSING

#: what each rank of the Horovod program prints: what Horovod sees, and an allreduce's sum
PROBE = re.compile(
    r"hvd rank=(?P<rank>\d+) size=(?P<size>\d+) local_rank=(?P<local_rank>\d+) "
    r"local_size=(?P<local_size>\d+) cross_size=(?P<cross_size>\d+) sum=(?P<sum>[\d.]+)"
)

PROBE_CODE = """\
import horovod.torch as hvd
import torch

hvd.init()
total = hvd.allreduce(torch.tensor([float(hvd.rank() + 1)]), op=hvd.Sum, name="probe")
print(
    f"hvd rank={hvd.rank()} size={hvd.size()} local_rank={hvd.local_rank()} "
    f"local_size={hvd.local_size()} cross_size={hvd.cross_size()} sum={total.item()}",
    flush=True,
)
"""


@pytest.fixture(scope="session")
def horovod() -> None:
    """Horovod with PyTorch and MPI in this environment (built here once if missing)."""
    done = subprocess.run(
        [sys.executable, "-m", "jupyter_distcomp.horovod_install", "--quiet"],
        capture_output=True,
        text=True,
        timeout=1700,
        check=False,
    )
    if done.returncode == MISSING:
        pytest.skip(f"Horovod cannot be built on this machine: {done.stderr.strip()}")
    assert done.returncode == 0, done.stdout + done.stderr


def probes(text: str) -> dict[int, dict[str, int | float]]:
    """Each rank's probe line in ``text``: rank -> what it printed."""
    found: dict[int, dict[str, int | float]] = {}
    for match in PROBE.finditer(text):
        values = {k: int(v) for k, v in match.groupdict().items() if k != "sum"}
        found[int(match["rank"])] = {**values, "sum": float(match["sum"])}
    return found


def expected(nodes: int, per_node: int) -> dict[int, dict[str, int | float]]:
    """What each rank of ``nodes`` x ``per_node`` must see, as on Azure ML: the ranks of a
    node are consecutive, local_size is the processes per node, cross_size the nodes."""
    size = nodes * per_node
    total = float(size * (size + 1) // 2)
    return {
        rank: {
            "rank": rank,
            "size": size,
            "local_rank": rank % per_node,
            "local_size": per_node,
            "cross_size": nodes,
            "sum": total,
        }
        for rank in range(size)
    }
