"""The ranks of a running Azure ML job, attached from the notebook through each node's SSH
service: ``%distcomp attach JOB``.

- ``job``: :class:`AttachedJob`: one SSH master connection a node, a tunnel from each
  node's loopback to the kernel's debugger channel, the job's ranks served at the group
  prompt (local/debug) as local ranks are; a watcher names a node whose connection ends.
- ``nodes``: the sh scripts run on a node and what they answer: the job's processes, the
  file their ``breakpoint()`` waits for, signals, the ranks' files.

The rank side is :mod:`jupyter_distcomp.rank_side.job_attach`; ``where`` and
``collectives`` of an attached job are in ``local/inspect/attached.py``.
"""

from __future__ import annotations

from .job import AttachedJob
from .nodes import JobProcess

__all__ = ["AttachedJob", "JobProcess"]
