"""``python -m jupyter_distcomp.rank_side.engine_start FILE [--mpi] ARGS ...``: an ipyparallel
engine that starts before its controller is ready.

A rank's own start-up (Python's imports, MPI's wire-up of the ranks) and the controller's
take about as long: run side by side, a world starts in about the longer of the two instead
of their sum. This process imports what the engine needs and, with ``--mpi``, initialises
MPI, then waits for FILE, the controller's connection file for engines (the controller
writes it once it listens), and runs ipyparallel's engine with ARGS and that connection.
Only a rank on the kernel's machine starts so: it sees the kernel's files.
"""

from __future__ import annotations

import importlib
import json
import os
import runpy
import sys
import time

#: seconds to wait for the connection file (the kernel stops a world that takes longer)
WAIT = 600.0
POLL = 0.05  # each of up to dozens of ranks looks this often: little load while waiting


def read_connection(path: str, wait: float = WAIT) -> str:
    """FILE's text, once it holds the whole connection (the controller writes it in place)."""
    deadline = time.monotonic() + wait
    while True:
        try:
            with open(path) as f:
                text = f.read()
            json.loads(text)
            return text
        except (OSError, ValueError):
            if time.monotonic() > deadline:
                raise SystemExit(
                    f"engine_start: no controller connection in {path} after {wait:g} s"
                )
            time.sleep(POLL)


def main(argv: list[str]) -> None:
    path, args = argv[0], argv[1:]
    if "--mpi" in args:
        importlib.import_module("mpi4py.MPI")  # MPI_Init: the ranks meet while we wait
    importlib.import_module("ipyparallel.engine.app")
    os.environ["IPP_CONNECTION_INFO"] = read_connection(path)
    sys.argv = ["ipengine", *args]
    runpy.run_module("ipyparallel.engine", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main(sys.argv[1:])
