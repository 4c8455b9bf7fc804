"""jupyter-distcomp: distributed Azure ML components, written, run and debugged in a notebook.

``%load_ext jupyter_distcomp`` registers ``%%distcomp``. The public names below are imported
on first use, so ``import jupyter_distcomp`` stays cheap; heavy packages (ipyparallel,
mpi4py, azure-ai-ml, ipywidgets) are imported inside the functions that need them. The
layers, each a folder, import only the ones below them: ``notebook`` -> ``local`` |
``azureml`` -> ``machine`` -> ``core`` -> ``errors``, ``contracts``, ``rank_side``.

- ``notebook``: what wires the layers into IPython and JupyterLab (magics, session, views)
- ``standin``: a local Azure ML (a test double of its REST API) for tests and demos
- ``local``: notebook cells and the spec's command on real local ranks; their debugger
- ``azureml``: the component as an azure-ai-ml v2 job or component; submit, follow, diagnose
- ``machine``: this machine's mpiexec, addresses, ports, hosts, scratch folders
- ``core``: pure functions: spec -> Component -> each rank's command and variables
- ``rank_side``: code run in the processes we start, standard library only
- ``errors``: every error a user can see
- ``contracts``: names and comm messages shared with the JupyterLab extension
- ``demo``: ``python -m jupyter_distcomp.demo``, the MPI quickstart, headless
- ``horovod_install``: ``python -m jupyter_distcomp.horovod_install`` (``make horovod``):
  Horovod built against this environment's torch and Open MPI
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from IPython.core.interactiveshell import InteractiveShell

_LAZY = {
    "load_component": ("core.spec_parsing", "load_component"),
    "Component": ("core.model", "Component"),
    "rank_environments": ("core.layout", "rank_environments"),
    "run_command": ("local.command", "run_command"),
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
    from .notebook.extension import load

    load(ipython)


def unload_ipython_extension(ipython: InteractiveShell) -> None:
    """``%unload_ext jupyter_distcomp``: stop the ranks, close the channel, drop the settings."""
    from .notebook.extension import unload

    unload(ipython)


def _jupyter_labextension_paths() -> list[dict[str, str]]:
    return [{"src": "labextension", "dest": "jupyter-distcomp"}]
