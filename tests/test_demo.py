"""`make demo`'s program, as a user runs it: the MPI quickstart's results and no warnings."""

from __future__ import annotations

import subprocess
import sys

import pytest

pytestmark = pytest.mark.slow


def test_demo_prints_the_quickstart_results_and_no_warning():
    # run to the end of every process that writes to its streams: a kernel left running
    # after the demo exits would print its own warning here
    done = subprocess.run(
        [sys.executable, "-m", "jupyter_distcomp.demo"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    said = done.stdout + done.stderr
    assert done.returncode == 0, said
    assert said.startswith("MPI quickstart: 2 nodes x 2 processes"), said
    assert said.count("allreduce sum = 10") == 4, said
    # each rank's variables, as the quickstart's layout cell shows them
    table = said.partition("Variables each rank sees")[2].partition("Ranks (%distcomp status):")[0]
    assert "AZ_BATCH_MASTER_NODE" in table and "OMPI_COMM_WORLD_LOCAL_RANK" in table, said
    assert "Ranks (%distcomp status):" in said, said
    for warning in ("WARNING", "Warning", "without encryption", "Traceback"):
        assert warning not in said, said
