"""A component pointed at the user's own ipyparallel cluster instead of local mpiexec.

The test starts that cluster itself (an MPI engine set in a temporary profile), as a user
would with ``ipcluster start``; the ranks still get the layout's variables, and stopping the
component leaves the user's cluster running.
"""

from __future__ import annotations

import os
import sys

import pytest

from .ranks_support import TORCH_SPEC, define, run_cell

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def own_cluster(tmp_path_factory):
    import ipyparallel as ipp

    profile_dir = tmp_path_factory.mktemp("own") / "profile_mine"
    cluster = ipp.Cluster(
        engines="mpi", n=2, profile_dir=str(profile_dir), cluster_id="mine", log_level=40
    )
    cluster.config.MPILauncher.mpi_cmd = [os.path.join(os.path.dirname(sys.executable), "mpiexec")]
    cluster.config.MPILauncher.mpi_args = ["--oversubscribe"]
    cluster.controller_args = ["--HeartMonitor.period=500"]  # a quicker start, nothing else
    cluster.config.MPIEngineSetLauncher.environment = {
        "OMPI_ALLOW_RUN_AS_ROOT": "1",
        "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
    }
    client = cluster.start_and_connect_sync(n=2)
    yield cluster, client, str(profile_dir)
    client.close()
    cluster.stop_cluster_sync()


@pytest.fixture(scope="module")
def ip():
    from IPython.testing.globalipapp import get_ipython

    shell = get_ipython()
    shell.run_line_magic("load_ext", "jupyter_distcomp")
    yield shell
    shell.run_line_magic("unload_ext", "jupyter_distcomp")


def test_component_runs_on_the_users_cluster_with_its_variables(ip, own_cluster):
    _, client, profile_dir = own_cluster
    engine_pids = sorted(client[:].apply_sync(os.getpid))
    define(ip, "own", TORCH_SPEC, nodes=2, per_node=1)
    cell = run_cell(ip, f"%distcomp connect own --profile-dir {profile_dir} --cluster-id mine")
    assert cell.ok and "your cluster" in cell.stdout
    code = "import os\nprint(os.getpid(), os.environ['RANK'], os.environ['NODE_RANK'], mpi_rank)"
    cell = run_cell(ip, f"%%distcomp run own\n{code}")
    assert cell.ok, cell.stdout + cell.stderr
    rows = sorted(line.split("] ")[1].split() for line in cell.stdout.splitlines() if "] " in line)
    assert sorted(int(r[0]) for r in rows) == engine_pids, "did not run on the user's engines"
    assert [r[1:] for r in sorted(rows, key=lambda r: r[1])] == [["0", "0", "0"], ["1", "1", "1"]]

    assert run_cell(ip, "%distcomp stop own").ok
    assert sorted(client[:].apply_sync(os.getpid)) == engine_pids, "stop killed the user's cluster"


def test_a_missing_cluster_is_a_clear_error(ip, tmp_path):
    define(ip, "nowhere", TORCH_SPEC, nodes=1, per_node=1)
    run_cell(ip, f"%distcomp connect nowhere --profile-dir {tmp_path} --cluster-id none")
    cell = run_cell(ip, "%%distcomp run nowhere\nprint(1)")
    assert not cell.ok
    assert "Cannot connect to your cluster" in str(cell.error) and "ipcluster start" in str(
        cell.error
    )
    assert run_cell(ip, "%distcomp connect nowhere --local").ok
