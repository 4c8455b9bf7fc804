"""``python -m jupyter_distcomp.rank_side.engine_start FILE [--mpi] ARGS ...``: an ipyparallel
engine that starts before its controller is ready.

A rank's own start-up (Python's imports, MPI's wire-up of the ranks) and the controller's
take about as long: run side by side, a world starts in about the longer of the two instead
of their sum. This process imports what the engine needs and, with ``--mpi``, initialises
MPI, then waits for FILE, the controller's connection file for engines (the controller
writes it once it listens), and runs ipyparallel's engine with ARGS and that connection.
Only a rank on the kernel's machine starts so: it sees the kernel's files.

The imports run in a thread while the main thread initialises MPI: ``MPI_Init`` mostly
waits for the other ranks, and it is called without holding Python's lock (through
ctypes), so the imports go on meanwhile. mpi4py, imported after, finds MPI initialised and
sets it up as it would have (its error handlers); this process finalises MPI at exit, as
mpi4py does when it initialised MPI itself. Where the library cannot be called so, mpi4py
initialises MPI as usual. The engine imports numpy only once the rank's code does
(:func:`can_arrays_once_numpy_loads`), and debugpy never (:func:`without_kernel_debugger`).
"""

from __future__ import annotations

import atexit
import importlib
import json
import os
import runpy
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from types import ModuleType

#: seconds to wait for the connection file (the kernel stops a world that takes longer)
WAIT = 600.0
POLL = 0.05  # each of up to dozens of ranks looks this often: little load while waiting
ENGINE = "ipyparallel.engine.app"
NUMPY_ARRAY = "numpy.ndarray"  # the name ipyparallel's canning map knows arrays by
#: mpi4py's ``rc.thread_level`` names, and their values in every MPI library
THREAD_LEVELS = {"single": 0, "funneled": 1, "serialized": 2, "multiple": 3}


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


def init_mpi() -> bool:
    """``MPI_Init_thread`` as mpi4py would call it (its ``rc`` options), without holding
    Python's lock; False, with nothing done, where the library cannot be called so."""
    import ctypes

    try:
        import mpi4py
        from mpi4py import _mpiabi

        if "mpi4py.MPI" in sys.modules or not mpi4py.rc.initialize:
            return False
        level = THREAD_LEVELS.get(str(mpi4py.rc.thread_level), 3) if mpi4py.rc.threads else 0
        libmpi = _mpiabi._dlopen_libmpi()  # type: ignore[attr-defined]  # mpi4py's own way to it
        init = libmpi.MPI_Init_thread
    except Exception:  # another mpi4py: it initialises MPI itself
        return False
    provided = ctypes.c_int()
    if init(None, None, ctypes.c_int(level), ctypes.byref(provided)) != 0:
        return False  # mpi4py's own MPI_Init then reports the error
    atexit.register(_finalize)
    return True


def _finalize() -> None:
    from mpi4py import MPI

    if not MPI.Is_finalized():
        MPI.Finalize()


def can_arrays_once_numpy_loads() -> None:
    """ipyparallel sends numpy arrays without copying them: its canning map names
    ``numpy.ndarray``, and an engine's first reply imports every name of that map, numpy and
    all (a tenth of a second of each rank's start). No array exists before the rank's code
    imports numpy: the map gets numpy's entry then."""
    from ipyparallel.serialize import canning

    from . import after_import

    canner = canning.can_map.get(NUMPY_ARRAY)
    if canner is None or "numpy" in sys.modules:
        return
    del canning.can_map[NUMPY_ARRAY]

    def can_arrays(numpy: ModuleType) -> None:
        canning.can_map[numpy.ndarray] = canner

    after_import.when_imported("numpy", can_arrays)


def without_kernel_debugger() -> None:
    """The engine's kernel without ipykernel's debugger: ipyparallel gives an engine no
    channel for it (no debugpy stream), yet building the kernel imports debugpy and pydevd
    to make one (a tenth of a second of each rank's start). A stand-in for that module says
    debugpy is not available, as ipykernel says where it is not installed; breakpoints on
    ranks go through the package's own debugger."""
    if "ipykernel.debugger" in sys.modules:
        return
    stand_in = ModuleType("ipykernel.debugger")
    stand_in._is_debugpy_available = False  # type: ignore[attr-defined]
    stand_in.Debugger = type("Debugger", (), {})  # type: ignore[attr-defined]  # never made
    sys.modules["ipykernel.debugger"] = stand_in


def main(argv: list[str]) -> None:
    path, args = argv[0], argv[1:]
    if "--mpi" in args:
        with ThreadPoolExecutor(1, thread_name_prefix="distcomp-import") as pool:
            engine = pool.submit(importlib.import_module, ENGINE)
            init_mpi()  # the ranks meet while the engine's modules load
            importlib.import_module("mpi4py.MPI")
            engine.result()
    else:
        importlib.import_module(ENGINE)
    can_arrays_once_numpy_loads()
    without_kernel_debugger()
    os.environ["IPP_CONNECTION_INFO"] = read_connection(path)
    sys.argv = ["ipengine", *args]
    runpy.run_module("ipyparallel.engine", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main(sys.argv[1:])
