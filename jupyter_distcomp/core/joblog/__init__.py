"""Diagnose a distributed job from its ranks' logs, in the words of a local run: the first
rank to fail and its error, the ranks only ended by it, identical tracebacks once,
out-of-memory on which rank and node, the collective the ranks timed out in (PyTorch's
NCCL watchdog, gloo), what torchrun and Open MPI said, Flight Recorder dumps, and, where
our rank side wrote its state lines, the local verdicts: who is missing from which
collective, the wait-for cycle of a deadlock, the known hang patterns, each rank's stack.

Pure: text in, a :class:`Diagnosis` out (reading a job's folder is azureml/diagnose.py's).

- ``model``: what goes in (``RankLog``) and comes out (``Diagnosis``, ``Layout``)
- ``names``: which rank a log file is, by Azure ML's names
- ``tracebacks``: Python tracebacks in a log, torch's rank labels taken off
- ``classify``: how a rank's log ends; its own error or another's echo
- ``watchdog``: NCCL watchdog and gloo time-outs: the collective, who never came
- ``launchers``: torchrun's failure table, Open MPI's messages
- ``state``: our rank side's marked state lines (``parse_state_line``)
- ``stall``: the state lines' verdicts, deadlocks and stacks
- ``flight``: Flight Recorder dumps, read as plain data
- ``reading``: every log read once
- ``verdict``: ``diagnose``, the verdict and the details under it
- ``words``: the sections under the verdict
"""

from __future__ import annotations

from .model import Diagnosis, Layout, RankLog, Section
from .names import rank_files
from .state import MARK, parse_state_line
from .verdict import diagnose

__all__ = [
    "MARK",
    "Diagnosis",
    "Layout",
    "RankLog",
    "Section",
    "diagnose",
    "parse_state_line",
    "rank_files",
]
