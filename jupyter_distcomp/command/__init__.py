"""``%distcomp command``: the spec's own command on local ranks, one process per rank.

``run`` follows a run (labelled output, the first failure stops the others, time-outs);
``launch`` starts the processes (one ``mpiexec`` for MPI launchers, plain processes
otherwise); ``bindings`` turns run settings and flags into values; ``report`` says how
each rank ended. The processes run :mod:`jupyter_distcomp.standalone.rank_exec`.
"""

from __future__ import annotations

from .report import CommandResult, RankResult
from .run import run_command

__all__ = ["CommandResult", "RankResult", "run_command"]
