"""What went wrong on the ranks, said once: failed cells and dead ranks.

Identical tracebacks from several ranks collapse into one section headed "ranks 1-3";
dead ranks say how they died (exit code or signal, and mpiexec's own words). Where a busy
rank is stuck comes from ``local/stacks.py``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Protocol

from ...core.ranges import format_ranks
from ...core.tracebacks import without_hook_frames
from ...errors import strip_ansi
from ...machine.gpus import no_gpu_notice
from ...machine.node_disks import user_text
from ..stacks import CELL_FILE
from .gpu import is_out_of_memory

_ENGINE_LOG = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d[.,]\d+ \[(IPEngine|KernelNanny)")
_MPI_INIT_ECHO = re.compile(r"^(from mpi4py import MPI|mpi_rank = |mpi_size = )")
_C_FRAME = re.compile(r"^\[[^\]]+:\d+\] \[\s*\d+\] ")

_CELL_COUNT = re.compile(r"(Cell |Input )?In ?\[\d*\]")
#: a context line of the comment lines that stand for the cell's magic line (CellRun's pad:
#: ``#``, or the ``%%distcomp run`` line as a comment)
_PAD_LINE = re.compile(r"^\s+\d+ #(%%distcomp\b.*)?$")


class RemoteErrorLike(Protocol):
    """What is read of an error a rank sent (ipyparallel's RemoteError)."""

    ename: str | None
    evalue: object
    traceback: str | None


#: ipyparallel's reply for a request the engine dropped: the cell before it failed while
#: this one was already queued (ipykernel aborts the queue after an error)
ABORTED = "TaskAborted"


def _ename(err: RemoteErrorLike) -> str:
    return getattr(err, "ename", None) or type(err).__name__


def _error_key(err: RemoteErrorLike) -> tuple[str, str, str]:
    text = user_text(strip_ansi(getattr(err, "traceback", None) or ""))
    text = _CELL_COUNT.sub("In[]", CELL_FILE.sub("<cell>", text))
    return (_ename(err), str(getattr(err, "evalue", "") or ""), text)


def group_errors(
    errors: Mapping[int, RemoteErrorLike],
) -> list[tuple[list[int], RemoteErrorLike]]:
    """``{rank: RemoteError}`` -> ``[(ranks, first error)]``, identical tracebacks merged."""
    groups: dict[tuple[str, str, str], tuple[list[int], RemoteErrorLike]] = {}
    for rank in sorted(errors):
        key = _error_key(errors[rank])
        groups.setdefault(key, ([], errors[rank]))[0].append(rank)
    return list(groups.values())


def error_sections(
    errors: Mapping[int, RemoteErrorLike],
    gpu: Callable[[int], list[str]] | None = None,
) -> list[tuple[str, list[str]]]:
    """One section per distinct traceback. The ranks name each cell as the notebook does
    (``Cell In[12]``, rank_setup's ``CELL_LABEL``): a function defined in an earlier cell
    keeps that cell's name. ``gpu(rank)``: the lines that say what a rank that ran out of GPU
    memory held (local/ranks/gpu.py), under its error. A CUDA call that failed for want of a
    GPU is named once, before the tracebacks, with the change for a check on CPU."""
    sections = []
    notice = no_gpu_notice(f"{_ename(e)}: {getattr(e, 'evalue', '')}" for e in errors.values())
    if notice:
        sections.append(("no usable GPU", [notice]))
    for ranks, err in group_errors(errors):
        if _ename(err) == ABORTED:
            body = [
                "Did not run this cell: still busy ending the cell before it, which failed or "
                "was interrupted. Run the cell again."
            ]
            sections.append((format_ranks(ranks), body))
            continue
        text = user_text(err.traceback or f"{err.ename}: {err.evalue}")  # the user's files
        body = without_hook_frames(text.splitlines())  # the user's frames only
        body = _without_padding(body)
        if not any(err.ename and err.ename in strip_ansi(line) for line in body):
            body.append(f"{err.ename}: {err.evalue}")
        if gpu is not None and is_out_of_memory(err.ename, err.evalue):
            body += [line for rank in ranks for line in gpu(rank)]
        sections.append((format_ranks(ranks), body))
    return sections


def _without_padding(lines: list[str]) -> list[str]:
    """The cell's frames without the ``#`` lines that keep its line numbers (they stand for
    the ``%%distcomp run`` line, which the ranks never see)."""
    kept: list[str] = []
    in_cell = False
    for line in lines:
        plain = strip_ansi(line)
        if plain.startswith(("File ", "Cell In[")):
            in_cell = plain.startswith("Cell In[")
        if not (in_cell and _PAD_LINE.match(plain)):
            kept.append(line)
    return kept


def death_reason(rank: int, mpiexec_text: str) -> str:
    """Why ``rank`` died, from what mpiexec printed (exit code, signal), or 'unknown'."""
    flat = " ".join(mpiexec_text.split())
    signal_match = re.search(
        rf"process rank {rank} with PID \d+ on node \S+ exited on signal (\d+) \(([^)]+)\)", flat
    )
    if signal_match:
        return f"killed by signal {signal_match.group(1)} ({signal_match.group(2)})"
    exit_match = re.search(rf"Process name: \[[^\]]*,{rank}\] Exit code: (-?\d+)", flat)
    if exit_match:
        return f"exited with code {exit_match.group(1)}"
    return ""


# -- mpiexec's own words ---------------------------------------------------------------
def mpiexec_messages(text: str, limit: int = 40) -> str:
    """mpiexec's output without the engines' log lines, C backtraces and shutdown noise."""
    keep: list[str] = []
    frames = 0
    for line in text.splitlines():
        if not line.strip() or _ENGINE_LOG.match(line) or _MPI_INIT_ECHO.match(line):
            continue
        if _C_FRAME.match(line):  # Open MPI's C backtrace of a crash: count, don't show
            frames += 1
            continue
        if frames:
            keep.append(f"[{frames} C stack frames omitted]")
            frames = 0
        keep.append(line)
    # mpiexec's own messages sit between dashed lines; ranks stopped after a death
    # print shutdown tracebacks that would only bury them
    blocks = [i for i, line in enumerate(keep) if line.startswith("-----")]
    if len(blocks) >= 2:
        keep = keep[blocks[0] : blocks[-1] + 1]
    return "\n".join(keep[-limit:])
