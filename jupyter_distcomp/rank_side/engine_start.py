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
(:func:`can_classes_once_imported`), debugpy never (:func:`without_kernel_debugger`), and
ipyparallel's client and cluster modules only when something asks for them
(:func:`package_init_on_demand`).
"""

from __future__ import annotations

import atexit
import importlib
import importlib.util
import json
import os
import runpy
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from types import ModuleType
from typing import Any

#: seconds to wait for the connection file (the kernel stops a world that takes longer)
WAIT = 600.0
POLL = 0.05  # each of up to dozens of ranks looks this often: little load while waiting
ENGINE = "ipyparallel.engine.app"
#: the package whose ``__init__`` the engine does not need (it imports ipyparallel's client,
#: its views and its cluster launchers: a third of the engine's imports)
PACKAGE = "ipyparallel"
#: what ipyparallel's canning map names by string: the module and name of each class
CANNED_LATER = {
    "numpy.ndarray": ("numpy", "ndarray"),
    "ipyparallel.dependent": ("ipyparallel.controller.dependency", "dependent"),
}
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


def can_classes_once_imported() -> None:
    """ipyparallel's canning map names some classes by string (:data:`CANNED_LATER`), and an
    engine's first reply imports every one of them: numpy, and through ``dependent``
    ipyparallel's client (a tenth of a second of each rank's start, each). No object of such
    a class exists before its module is imported: the map gets the class then."""
    from ipyparallel.serialize import canning

    from . import after_import

    for name, (module, attribute) in CANNED_LATER.items():
        canner = canning.can_map.get(name)
        if canner is None or module in sys.modules:
            continue
        del canning.can_map[name]

        def can_class(loaded: ModuleType, attribute: str = attribute, canner: Any = canner) -> None:
            canning.can_map[getattr(loaded, attribute)] = canner

        after_import.when_imported(module, can_class)


def package_init_on_demand(name: str) -> None:
    """The package ``name`` importable without running its ``__init__``: its submodules
    import as usual, and the ``__init__`` runs, once, when a name that is not a submodule is
    first asked of the package (``ipyparallel.Client``, ``from ipyparallel import *``)."""
    if name in sys.modules:
        return
    spec = importlib.util.find_spec(name)
    if spec is None or spec.loader is None or spec.submodule_search_locations is None:
        return  # not installed, or a module rather than a package
    loader = spec.loader
    package = importlib.util.module_from_spec(spec)
    running = threading.Lock()

    def __getattr__(attr: str) -> Any:
        submodule = attr.isidentifier() and not attr.startswith("__")
        if submodule and importlib.util.find_spec(f"{name}.{attr}"):
            return importlib.import_module(f"{name}.{attr}")
        with running:
            if package.__dict__.pop("__getattr__", None) is not None:
                loader.exec_module(package)
        return getattr(package, attr)

    package.__dict__["__getattr__"] = __getattr__
    sys.modules[name] = package


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
    package_init_on_demand(PACKAGE)
    if "--mpi" in args:
        with ThreadPoolExecutor(1, thread_name_prefix="distcomp-import") as pool:
            engine = pool.submit(importlib.import_module, ENGINE)
            init_mpi()  # the ranks meet while the engine's modules load
            importlib.import_module("mpi4py.MPI")
            engine.result()
    else:
        importlib.import_module(ENGINE)
    can_classes_once_imported()
    without_kernel_debugger()
    os.environ["IPP_CONNECTION_INFO"] = read_connection(path)
    sys.argv = ["ipengine", *args]
    runpy.run_module("ipyparallel.engine", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main(sys.argv[1:])
