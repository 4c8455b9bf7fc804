"""jupyter-distcomp: distributed Azure ML components, written, run and debugged in a notebook.

``%load_ext jupyter_distcomp`` registers ``%%distcomp``. Heavy packages (ipyparallel, mpi4py,
azure-ai-ml, ipywidgets) are imported only when a feature needs them.
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"

_LAZY = {
    "load_component": ("spec", "load_component"),
    "Component": ("model", "Component"),
    "rank_environments": ("layout", "rank_environments"),
    "SpecError": ("errors", "SpecError"),
    "SpecWarning": ("errors", "SpecWarning"),
    "LayoutError": ("errors", "LayoutError"),
    "RankError": ("errors", "RankError"),
    "AzureMLError": ("errors", "AzureMLError"),
    "DistcompError": ("errors", "DistcompError"),
}

__all__ = [*_LAZY, "__version__", "load_ipython_extension", "unload_ipython_extension"]

_magics: Any = None


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        module, attr = _LAZY[name]
        value = getattr(importlib.import_module(f"{__name__}.{module}"), attr)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def load_ipython_extension(ipython: Any) -> None:
    global _magics
    from .magics import DistComp

    _magics = DistComp(shell=ipython)
    ipython.register_magics(_magics)
    if _magics not in ipython.configurables:
        ipython.configurables.append(_magics)
    import atexit

    atexit.register(_shutdown)
    from .comm import install

    install(ipython)  # the JupyterLab ranks panel's channel (a no-op outside a kernel)


def unload_ipython_extension(ipython: Any) -> None:
    _shutdown()
    from .comm import uninstall

    uninstall()


def _shutdown() -> None:
    global _magics
    if _magics is not None:
        _magics.shutdown()


def _jupyter_labextension_paths() -> list[dict[str, str]]:
    return [{"src": "labextension", "dest": "jupyter-distcomp"}]
