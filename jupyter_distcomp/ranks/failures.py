"""The error a failed ``%%distcomp run`` cell raises: every failing rank, said once.

Identical tracebacks from several ranks collapse into one section headed "ranks 1-3";
dead ranks say how they died (exit code or signal, and mpiexec's own words); ranks still
busy at a time-out show their current Python stack.
"""

from __future__ import annotations

import linecache
import re

from .ranges import format_ranks

_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_CELL_FILE = re.compile(r"(/tmp/ipykernel_\d+/\d+\.py|<ipython-input-[^>]+>)")
_CELL_COUNT = re.compile(r"(Cell |Input )?In ?\[\d*\]")
_STACK_LINE = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+) in (?P<func>.*)$')


def strip_ansi(text: str) -> str:
    return _ANSI.sub("", text)


def _error_key(err) -> tuple[str, str, str]:
    text = strip_ansi(err.traceback or "")
    text = _CELL_COUNT.sub("In[]", _CELL_FILE.sub("<cell>", text))
    return (err.ename or "", str(err.evalue or ""), text)


def group_errors(errors: dict[int, object]) -> list[tuple[list[int], object]]:
    """``{rank: RemoteError}`` -> ``[(ranks, first error)]``, identical tracebacks merged."""
    groups: dict[tuple, tuple[list[int], object]] = {}
    for rank in sorted(errors):
        key = _error_key(errors[rank])
        groups.setdefault(key, ([], errors[rank]))[0].append(rank)
    return list(groups.values())


def error_sections(errors: dict[int, object]) -> list[tuple[str, list[str]]]:
    sections = []
    for ranks, err in group_errors(errors):
        body = (err.traceback or f"{err.ename}: {err.evalue}").splitlines()
        if not any(err.ename and err.ename in strip_ansi(line) for line in body):
            body.append(f"{err.ename}: {err.evalue}")
        sections.append((format_ranks(ranks), body))
    return sections


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


def render_stack(stack: str, code: str) -> list[str]:
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
            where = f"  Cell, line {number}, in {match['func']}"
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
