"""Put on ``PYTHONPATH`` of ``%distcomp command`` ranks: `%distcomp where` sees them, their
collectives are recorded in a ledger (`%distcomp collectives`), and ``pdb.set_trace()``
prompts in the notebook as ``breakpoint()`` does.

When ``DISTCOMP_STACK_DIR`` names a folder, every Python process of the run arms
faulthandler on SIGUSR1 to write its threads' stacks to ``<pid>-<main thread id>.stack``
there; the file's existence tells the kernel that this process may be sent SIGUSR1 (whose
default action would end it). Beside it, ``<pid>-<main thread id>.ledger`` is the process's
collectives ledger (``rank_side/ledger_hooks.py``). Then the next ``sitecustomize`` on ``sys.path``, if any, runs
as it would without this one. When ``PYTHONBREAKPOINT`` names the debugger hook (the kernel
set it), the first ``import pdb`` replaces ``pdb.set_trace`` with that module's ``set_trace``;
processes that never import pdb pay nothing. Standard library only.
"""

from __future__ import annotations

import os


def _arm() -> None:
    import faulthandler
    import signal
    import sys
    import threading

    folder = os.environ.get("DISTCOMP_STACK_DIR")
    if not folder or not os.path.isdir(folder):
        return
    name = f"{os.getpid()}-{threading.main_thread().ident}.stack"
    stack_file = open(os.path.join(folder, name), "a")  # noqa: SIM115 - must stay open
    faulthandler.register(signal.SIGUSR1, file=stack_file, all_threads=True)
    sys._distcomp_stack_file = stack_file  # type: ignore[attr-defined]  # kept alive
    _arm_ledger(os.path.join(folder, name[: -len(".stack")] + ".ledger"))


def _arm_ledger(path: str) -> None:
    """Record the process's torch.distributed and mpi4py calls in the ledger file ``path``
    (rank_side/ledger_hooks.py, loaded by path: it wraps those modules only when imported);
    ``DISTCOMP_CHECK_COLLECTIVES=1`` turns on check mode."""
    import importlib.util
    import sys

    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    spec = importlib.util.spec_from_file_location(
        "distcomp_ledger_hooks", os.path.join(here, "ledger_hooks.py")
    )
    if spec is None or spec.loader is None:
        return
    hooks = importlib.util.module_from_spec(spec)
    sys.modules["distcomp_ledger_hooks"] = hooks
    spec.loader.exec_module(hooks)
    hooks.install(path, check=os.environ.get("DISTCOMP_CHECK_COLLECTIVES") == "1")


class _PdbFinder:
    """``sys.meta_path`` entry: once ``pdb`` is loaded, its ``set_trace`` is ``hook``'s."""

    def __init__(self, hook: str) -> None:
        self.hook = hook

    def find_spec(self, name, path=None, target=None):
        if name != "pdb":  # before any import: an import here comes back to this finder
            return None
        import sys

        sys.meta_path.remove(self)  # one use; also keeps find_spec below from coming here
        import importlib.util

        spec = importlib.util.find_spec("pdb")
        if spec is None or spec.loader is None:
            return spec
        load = spec.loader.exec_module
        hook = self.hook

        def exec_module(module) -> None:
            load(module)
            module.set_trace = _forward(hook)

        spec.loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


def _forward(hook: str):
    """``pdb.set_trace`` that stops where it is called, with the hook's debugger (imported
    at the call: the hook module itself imports pdb)."""

    def set_trace(*, header=None) -> None:
        import importlib
        import sys

        importlib.import_module(hook).set_trace(header=header, frame=sys._getframe(1))

    return set_trace


def _hook_pdb() -> None:
    import sys

    hook = os.environ.get("PYTHONBREAKPOINT", "")
    if not (os.environ.get("DISTCOMP_DEBUG") and hook.endswith("debug_hook.breakpointhook")):
        return
    module = hook.rpartition(".")[0]
    if "pdb" in sys.modules:
        vars(sys.modules["pdb"])["set_trace"] = _forward(module)
    else:
        sys.meta_path.insert(0, _PdbFinder(module))


def _chain() -> None:
    """Run the sitecustomize this one hides (a distribution's or a virtualenv's):
    the next one on ``sys.path`` after this one's folder, so that a sitecustomize of ours
    earlier on the path, which chains to this one, is not run again from here."""
    import importlib.machinery
    import importlib.util
    import sys

    here = os.path.dirname(os.path.abspath(__file__))
    folders = [os.path.abspath(p or os.curdir) for p in sys.path]
    after = max((i + 1 for i, folder in enumerate(folders) if folder == here), default=0)
    path = sys.path[after:]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", path)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    sys.modules["sitecustomize"] = module
    spec.loader.exec_module(module)


try:
    _arm()
except Exception:  # never stop the user's program from starting
    pass
try:
    _hook_pdb()
except Exception:
    pass
_chain()
