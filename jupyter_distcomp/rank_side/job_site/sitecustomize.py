"""Put on ``PYTHONPATH`` of a submitted job's processes by its command's prefix
(azureml/snapshot.py): each Python process of the job keeps its collectives ledger and
writes one line into its log on a stall, on SIGTERM or on a failure (``../job_watch.py``,
loaded by path: the job needs no package of ours). Then the next ``sitecustomize`` on
``sys.path``, if any (the image's, a virtualenv's), runs as it would without this one; in a
job submitted with ``--debug``, ``../job_attach.py`` after it.
Standard library only, Python 3.8 or newer.
"""

from __future__ import annotations

import os


def _arm() -> None:
    import importlib.util
    import sys

    here = os.path.dirname(os.path.abspath(__file__))
    path = os.path.join(os.path.dirname(here), "job_watch.py")
    spec = importlib.util.spec_from_file_location("distcomp_job_watch", path)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    sys.modules["distcomp_job_watch"] = module
    spec.loader.exec_module(module)
    module.arm(here)


def _chain() -> None:
    """Run the sitecustomize this one hides:
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


def _attach() -> None:
    """A job submitted with ``--debug``: ``breakpoint()`` waits for the notebook and
    ``%distcomp attach`` finds this process (``../job_attach.py``); after the sitecustomize
    this one hides, so that the stacks on SIGUSR1 are written where attach reads them."""
    import sys

    if os.environ.get("DISTCOMP_ATTACH_DIR") and "distcomp_job_watch" in sys.modules:
        sys.modules["distcomp_job_watch"]._sibling("job_attach").arm()


try:
    _arm()
except Exception:  # never stop the user's program from starting
    pass
_chain()
try:
    _attach()
except Exception:
    pass
