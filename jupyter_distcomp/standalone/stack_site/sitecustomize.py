"""Put on ``PYTHONPATH`` of ``%distcomp command`` ranks: lets `%distcomp where` see them.

When ``DISTCOMP_STACK_DIR`` names a folder, every Python process of the run arms
faulthandler on SIGUSR1 to write its threads' stacks to ``<pid>-<main thread id>.stack``
there; the file's existence tells the kernel that this process may be sent SIGUSR1 (whose
default action would end it). Then the next ``sitecustomize`` on ``sys.path``, if any, runs
as it would without this one. Standard library only.
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


def _chain() -> None:
    """Run the sitecustomize this one hides (a distribution's or a virtualenv's)."""
    import importlib.machinery
    import importlib.util
    import sys

    here = os.path.dirname(os.path.abspath(__file__))
    path = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
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
_chain()
