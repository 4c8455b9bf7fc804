"""What went wrong on the ranks, said once: failed cells, dead ranks, stuck ranks.

Identical tracebacks from several ranks collapse into one section headed "ranks 1-3";
dead ranks say how they died (exit code or signal, and mpiexec's own words); ranks still
busy at a time-out show their current Python stack.
"""

from __future__ import annotations

import linecache
import os
import re
import time
from collections.abc import Callable, Mapping
from typing import Protocol

from ..errors import strip_ansi
from ..ranges import format_ranks

_ENGINE_LOG = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d[.,]\d+ \[(IPEngine|KernelNanny)")
_MPI_INIT_ECHO = re.compile(r"^(from mpi4py import MPI|mpi_rank = |mpi_size = )")
_C_FRAME = re.compile(r"^\[[^\]]+:\d+\] \[\s*\d+\] ")
_THREAD = re.compile(r"^(Current thread|Thread) (0x[0-9a-f]+)", re.M)

_CELL_FILE = re.compile(r"(/tmp/ipykernel_\d+/\d+\.py|<ipython-input-[^>]+>)")
_CELL_COUNT = re.compile(r"(Cell |Input )?In ?\[\d*\]")
_STACK_LINE = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+) in (?P<func>.*)$')


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
    text = strip_ansi(getattr(err, "traceback", None) or "")
    text = _CELL_COUNT.sub("In[]", _CELL_FILE.sub("<cell>", text))
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
    errors: Mapping[int, RemoteErrorLike], cell: str | None = None
) -> list[tuple[str, list[str]]]:
    """One section per distinct traceback; ``cell`` (``"Cell In[12]"``) renames the engine's
    ``Cell In[2]`` after the notebook's cell."""
    sections = []
    for ranks, err in group_errors(errors):
        if _ename(err) == ABORTED:
            body = [
                "Did not run this cell: still busy ending the cell before it, which failed or "
                "was interrupted. Run the cell again."
            ]
            sections.append((format_ranks(ranks), body))
            continue
        body = (err.traceback or f"{err.ename}: {err.evalue}").splitlines()
        if cell:
            body = [_rename_cell(line, cell) for line in body]
        if not any(err.ename and err.ename in strip_ansi(line) for line in body):
            body.append(f"{err.ename}: {err.evalue}")
        sections.append((format_ranks(ranks), body))
    return sections


def _rename_cell(line: str, cell: str) -> str:
    """``Cell In[2], line 3`` (coloured or not) with the notebook's cell name."""
    if not strip_ansi(line).startswith("Cell In["):
        return line
    number = cell[cell.find("[") :] if "[" in cell else "[]"
    return re.sub(r"In\[\d*\]", lambda _: "In" + number, line, count=1)


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


def render_stack(stack: str, code: str, cell: str = "Cell") -> list[str]:
    """A faulthandler stack (most recent call first) as a traceback, with source lines.

    Frames in the cell show the cell's own line (the cell's file name is the rank's);
    frames in files show the file's line, read here (same machine).
    """
    frames: list[list[str]] = []
    code_lines = code.splitlines()
    outer_cell = None
    for raw in stack.splitlines():
        match = _STACK_LINE.match(raw)
        if not match:
            if raw.strip():
                frames.append([raw.strip()])
            continue
        path, number = match["file"], int(match["line"])
        if _CELL_FILE.search(path):
            outer_cell = len(frames)
            where = f"  {cell}, line {number}, in {match['func']}"
            source = code_lines[number - 1] if 0 < number <= len(code_lines) else ""
        else:
            where = f'  File "{path}", line {number}, in {match["func"]}'
            source = linecache.getline(path, number)
        frames.append([where] + ([f"    {source.strip()}"] if source.strip() else []))
    frames.reverse()  # most recent call last, like a Python traceback
    if outer_cell is not None:  # drop the engine's own frames below the cell
        frames = frames[len(frames) - 1 - outer_cell :]
    if not frames:
        return ["  (empty stack)"]
    return ["Traceback (most recent call last):", *[line for f in frames for line in f]]


# -- mpiexec's own words, and a stuck rank's stack -----------------------------------


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


def file_size(path: str) -> int:
    try:
        return os.path.getsize(path)
    except OSError:
        return 0


def main_thread_stack(dump: str, main_thread: int | None) -> str:
    """The block of a faulthandler dump that belongs to the main thread."""
    blocks = _THREAD.split(dump)
    # split gives [prefix, kind, id, body, kind, id, body, ...]
    for i in range(1, len(blocks) - 2, 3):
        if main_thread is not None and int(blocks[i + 1], 16) == main_thread:
            return blocks[i + 2].split("\n", 1)[-1].rstrip()
    return dump.strip()


def collect_stacks(
    paths: dict[int, str],
    main_threads: dict[int, int | None],
    send_signal: Callable[[], None],
    wait: float = 1.0,
) -> dict[int, str]:
    """Signal the ranks, then read what faulthandler appended to each rank's stack file."""
    sizes = {r: file_size(p) for r, p in paths.items()}
    send_signal()
    deadline = time.monotonic() + wait
    result: dict[int, str] = {}
    pending = set(paths)
    while pending and time.monotonic() < deadline:
        time.sleep(0.02)
        grown = [rank for rank in pending if file_size(paths[rank]) > sizes[rank]]
        if grown:
            time.sleep(0.05)  # let faulthandler finish writing (once for all of them)
        for rank in grown:
            with open(paths[rank], errors="replace") as f:
                f.seek(sizes[rank])
                result[rank] = main_thread_stack(f.read(), main_threads[rank])
            pending.discard(rank)
    return result


def stack_sections(
    stacks: dict[int, str], code: str, label: str, cell: str = "Cell"
) -> list[tuple[str, list[str]]]:
    """One section per distinct stack, headed by the ranks that share it and ``label``.

    ``stacks`` maps a rank to its faulthandler stack; ranks without a stack are left out;
    ``cell`` names the cell's frames (``"Cell In[12]"``).
    """
    # grouped as shown: the raw stacks differ in each rank's own file name for the cell
    by_stack: dict[tuple[str, ...], list[int]] = {}
    for rank in sorted(stacks):
        by_stack.setdefault(tuple(render_stack(stacks[rank], code, cell)), []).append(rank)
    return [(f"{format_ranks(ranks)}: {label}", list(lines)) for lines, ranks in by_stack.items()]
