"""``%distcomp command``: the spec's own command on local ranks, one process per rank.

- ``run``: follows a run: labelled output, the first failure stops the others, time-outs
- ``launch``: starts the processes (one ``mpiexec`` for MPI launchers, plain processes
  otherwise), reads their output, stops them
- ``result``: how each rank ended, and the words for it
- ``active``: the runs in progress, so that ``%distcomp where`` and ``interrupt`` find them

Values are bound by ``core/bindings.py``. The processes run
:mod:`jupyter_distcomp.rank_side.rank_exec`.
"""

from __future__ import annotations

from .result import CommandResult, RankResult
from .run import run_command

__all__ = ["CommandResult", "RankResult", "run_command"]
