"""jupyter-distcomp: distributed Azure ML components, written, run and debugged in a notebook.

``%load_ext jupyter_distcomp`` registers ``%%distcomp``. Heavy packages (ipyparallel, mpi4py,
azure-ai-ml, ipywidgets) are imported only when a feature needs them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from IPython.core.interactiveshell import InteractiveShell

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


def __getattr__(name: str) -> Any:
    if name == "__version__":  # read on demand: importlib.metadata is slow to import
        from importlib.metadata import version

        return version("jupyter-distcomp")
    if name in _LAZY:
        import importlib

        module, attr = _LAZY[name]
        value = getattr(importlib.import_module(f"{__name__}.{module}"), attr)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def load_ipython_extension(ipython: InteractiveShell) -> None:
    """``%load_ext jupyter_distcomp``: a session for this shell, its magics and settings."""
    import atexit

    from .magics import DistCompMagics
    from .session import Session

    session = Session(ipython)
    magics = DistCompMagics(ipython, session)
    ipython.register_magics(magics)
    configurables: list[Any] = ipython.configurables  # `%config` lists and sets these
    for configurable in session.configurables:
        if configurable not in configurables:
            configurables.append(configurable)
    atexit.register(session.shutdown)
    session.open_channel()  # the JupyterLab ranks panel's channel (a no-op outside a kernel)


def unload_ipython_extension(ipython: InteractiveShell) -> None:
    """``%unload_ext jupyter_distcomp``: stop the ranks, close the channel, drop the settings."""
    import atexit

    magics = ipython.magics_manager.registry.pop("DistCompMagics", None)
    if magics is None:
        return
    session = magics.session
    atexit.unregister(session.shutdown)
    session.close()
    configurables: list[Any] = ipython.configurables
    for configurable in (*session.configurables, magics):
        if configurable in configurables:
            configurables.remove(configurable)


def _jupyter_labextension_paths() -> list[dict[str, str]]:
    return [{"src": "labextension", "dest": "jupyter-distcomp"}]
