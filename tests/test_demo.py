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
    assert "Ranks (%distcomp status):" in said, said
    for warning in ("WARNING", "Warning", "without encryption", "Traceback"):
        assert warning not in said, said
