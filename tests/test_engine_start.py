"""An engine's own start (rank_side/engine_start.py): under a real mpiexec, MPI as mpi4py
would start it (thread level, errors raised as exceptions, finalised at exit), and Python's
other threads run while the ranks meet; in a fresh interpreter, what the engine leaves out
of its imports until something asks for it."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from jupyter_distcomp.machine import mpi

SCRIPT = """
import threading, time
from jupyter_distcomp.rank_side import engine_start

ticks, stop = [], threading.Event()

def tick():
    while not stop.is_set():
        ticks.append(time.monotonic())
        time.sleep(0.001)

threading.Thread(target=tick, daemon=True).start()
time.sleep(0.05)
begin = time.monotonic()
assert engine_start.init_mpi(), "MPI was not initialised through the library"
end = time.monotonic()
stop.set()
from mpi4py import MPI
comm = MPI.COMM_WORLD
during = sum(begin < t < end for t in ticks)
print(f"rank {comm.Get_rank()} thread {MPI.Query_thread()} ticks {during} in {end - begin:.2f} s")
assert MPI.Query_thread() == MPI.THREAD_MULTIPLE
try:
    comm.send(1, dest=comm.Get_size() + 5)
except MPI.Exception as exc:
    print(f"rank {comm.Get_rank()} raised {exc.Get_error_class()}")
comm.Barrier()
"""


def run_ranks(code: str, ranks: int = 2) -> subprocess.CompletedProcess:
    return subprocess.run(
        [
            mpi.mpiexec_path(),
            *mpi.mpiexec_args(ranks),
            "-n",
            str(ranks),
            sys.executable,
            "-c",
            code,
        ],
        env=mpi.mpiexec_environment(dict(os.environ)),
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.slow
def test_ranks_start_mpi_as_mpi4py_would_while_other_threads_run():
    done = run_ranks(SCRIPT)
    said = done.stdout + done.stderr
    assert done.returncode == 0, said
    for rank in (0, 1):
        # an MPI error is an exception in the rank's code, not an abort of the job
        assert f"rank {rank} raised" in done.stdout, said
        line = next(ln for ln in done.stdout.splitlines() if ln.startswith(f"rank {rank} thread"))
        # other threads (the engine's imports) ran while MPI_Init waited for the other rank
        assert int(line.split()[5]) >= 100, said  # with the lock held: under 10
    assert "finalize" not in said.lower(), said  # each rank finalised MPI at exit


ON_DEMAND = """
import sys
from jupyter_distcomp.rank_side import engine_start
engine_start.package_init_on_demand("ipyparallel")
import ipyparallel.engine.app
engine_start.can_classes_once_imported()
from ipyparallel.serialize import canning
canning.can(1)  # as an engine's first reply: the canning map's names are resolved
heavy = ("numpy", "ipyparallel.client.client", "ipyparallel.cluster.cluster")
print("loaded", [name for name in heavy if name in sys.modules])
import ipyparallel
from ipyparallel import util
print("submodule", util.__name__, hasattr(ipyparallel, "no.such"))
print("name", ipyparallel.Client.__name__)
names = {}
exec("from ipyparallel import *", names)
print("star", "Cluster" in names and "dependent" in names)
import numpy
canned = canning.can(numpy.zeros(2)), canning.can(ipyparallel.dependent(len, len))
print("canned", [type(c).__name__ for c in canned])
"""


def test_an_engine_loads_ipyparallels_client_and_numpy_only_when_asked_for():
    """An engine's imports leave out ipyparallel's client and cluster modules and numpy,
    even through its first reply; code on the rank that asks for them gets all of them, and
    arrays and ``dependent`` objects are still sent as ipyparallel sends them."""
    done = subprocess.run(
        [sys.executable, "-c", ON_DEMAND], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "loaded []",
        "submodule ipyparallel.util False",
        "name Client",
        "star True",
        "canned ['CannedArray', 'CannedObject']",
    ], done.stdout + done.stderr
