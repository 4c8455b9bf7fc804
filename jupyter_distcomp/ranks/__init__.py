"""Local ranks: notebook cells run on real MPI ranks with Azure ML's per-rank variables.

Public API (used by the magics, the widget, the JupyterLab ranks panel, ``%distcomp
command``)::

    backend = get_backend()                        # one per kernel
    world = backend.start(name, component)         # or wait=False: start in the background
    backend.run_cell(name, component, code, ranks="0,2-3", timeout=60, group_output=False)
    backend.run_cell(..., background=True).wait()  # a BackgroundCell; backend.wait(name)
    backend.where(name, ranks) / compare(name, expr, ranks, rtol)   # reports with .text()
    backend.status(name) / stop(name) / restart(name) / interrupt(name) / shutdown()
    backend.add_listener(callback)                 # callback(event dict) on every state change
    world.envs, world.world_size, world.client, world.view

Importing this package is cheap: ipyparallel is imported only when a world starts.
"""

from __future__ import annotations

from typing import Any

__all__ = ["Connection", "RankBackend", "World", "get_backend"]

_LAZY = {
    "RankBackend": "backend",
    "get_backend": "backend",
    "World": "world",
    "Connection": "connection",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        value = getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
