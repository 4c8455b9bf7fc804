"""Where a rank is: its current Python stack, taken by faulthandler on SIGUSR1, and shown as
a traceback of the cell's own lines.

A rank's faulthandler writes every thread's stack to the rank's stack file even while the
rank waits in C code (an MPI or gloo collective), so this answers while a rank hangs. Ranks
on another host are read there, over ssh: each host gets one session that notes the size of
each rank's stack file, signals the ranks, waits, and prints what was appended. Identical
stacks are shown once, headed by the ranks that share them.
"""

from __future__ import annotations

import linecache
import os
import re
import shlex
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ..core.ranges import format_ranks
from ..machine.remote import on_hosts
from ..rank_side.ledger_words import CELL_FILE, cell_place, in_hooks
from .cell_names import cell_of

__all__ = [
    "CELL_FILE",
    "RemoteRank",
    "collect_stacks",
    "file_size",
    "main_thread_stack",
    "remote_stacks",
    "render_stack",
    "stack_script",
    "stack_sections",
]
_STACK_LINE = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+) in (?P<func>.*)$')
_THREAD = re.compile(r"^(Current thread|Thread) (0x[0-9a-f]+)", re.M)


#: files of the debugger a rank at a prompt waits in: shown as "at a debugger prompt"
_DEBUGGER_FILES = re.compile(r"(^|/)(bdb|pdb|cmd|distcomp_debug_hook|debug_hook)\.py$")
AT_PROMPT = "at a debugger prompt"
#: a process still in Python's start-up (site, our sitecustomize): none of its frames are the
#: user's yet
_STARTING = re.compile(r'^\s*File "<frozen site>"', re.M)
STARTING = "starting up: the program's first line has not run yet"


@dataclass(frozen=True)
class Frame:
    """One frame of a rank's stack, as shown: where (``Cell In[3], line 5, in f``, the cell
    that defined ``f``) and its source line."""

    where: str
    source: str = ""
    cell_line: int | None = None  # the cell's line, for a frame in the cell
    cell_place: str = ""  # ``In [5], line 7``, for a frame in a cell

    def lines(self) -> list[str]:
        return [self.where] + ([f"    {self.source}"] if self.source else [])

    def place(self) -> str:
        """``In [5], line 7`` or ``train.py:12``."""
        if self.cell_line is not None:
            return self.cell_place or cell_place("", self.cell_line)
        match = re.match(r'\s*File "(?P<file>[^"]+)", line (?P<line>\d+)', self.where)
        return f"{match['file']}:{match['line']}" if match else self.where.strip()


def stack_frames(stack: str, code: str, cell: str = "Cell") -> tuple[list[Frame], bool]:
    """A faulthandler stack (most recent call first) as the user's frames, outermost first,
    and whether the rank waits at a debugger prompt (the debugger's frames left out).

    Frames in a cell show the cell's own line, named as the notebook names the cell that
    ran that code (``cell``, with ``code``, when that is not known here);
    frames in files show the file's line, read here (same machine); the engine's frames
    below the cell are left out.
    """
    frames: list[Frame] = []
    if _STARTING.search(stack):
        return frames, False
    debugger_at: int | None = None  # index of the debugger's outermost frame (read last)
    code_lines = code.splitlines()
    outer_cell = None
    for raw in stack.splitlines():
        match = _STACK_LINE.match(raw)
        if not match:
            if raw.strip():
                frames.append(Frame(raw.strip()))
            continue
        path, number = match["file"], int(match["line"])
        if in_hooks(path):  # our wrappers around the user's call (ledger, output pacing)
            continue
        if _DEBUGGER_FILES.search(path):
            debugger_at = len(frames)
        if CELL_FILE.search(path):
            outer_cell = len(frames)
            known = cell_of(path)  # the cell that ran this code: this one, or an earlier
            name = f"Cell {known[0]}".replace(" [", "[") if known and known[0] else cell
            lines = known[1].splitlines() if known else code_lines
            where = f"  {name}, line {number}, in {match['func']}"
            source = lines[number - 1] if 0 < number <= len(lines) else ""
            place = cell_place(known[0] if known else "", number)
            frames.append(Frame(where, source.strip(), number, place))
        else:
            where = f'  File "{path}", line {number}, in {match["func"]}'
            frames.append(Frame(where, linecache.getline(path, number).strip()))
    at_prompt = debugger_at is not None
    if debugger_at is not None:  # the debugger and what it called: not the user's frames
        frames = frames[debugger_at + 1 :]
        if outer_cell is not None:
            outer_cell -= debugger_at + 1
    frames.reverse()  # most recent call last, like a Python traceback
    if outer_cell is not None and outer_cell >= 0:  # drop the engine's own frames
        frames = frames[len(frames) - 1 - outer_cell :]
    return frames, at_prompt


def render_stack(stack: str, code: str, cell: str = "Cell") -> list[str]:
    """A faulthandler stack as a traceback of the user's frames, with source lines; a rank
    at a debugger prompt ends with ``at a debugger prompt``, not the debugger's frames."""
    if _STARTING.search(stack):
        return [f"  ({STARTING})"]
    frames, at_prompt = stack_frames(stack, code, cell)
    if not frames:
        return [f"  ({AT_PROMPT})" if at_prompt else "  (empty stack)"]
    lines = ["Traceback (most recent call last):", *[line for f in frames for line in f.lines()]]
    return lines + ([f"  ({AT_PROMPT})"] if at_prompt else [])


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


# -- ranks on other hosts ----------------------------------------------------------------
MARK = "=== distcomp rank "


@dataclass(frozen=True)
class RemoteRank:
    rank: int
    host: str  # the host name mpiexec was given (what ssh reaches)
    pid: int
    stack_path: str
    main_thread: int | None


def stack_script(ranks: Sequence[RemoteRank], wait: float) -> str:
    """The sh script one host runs to take the stacks of its ``ranks``."""
    lines = []
    for r in ranks:
        path = shlex.quote(r.stack_path)
        lines.append(f"s{r.rank}=$(stat -c %s {path} 2>/dev/null || echo 0)")
    lines.append("kill -USR1 " + " ".join(str(r.pid) for r in ranks) + " 2>/dev/null")
    lines.append(f"sleep {wait:.2f}")
    for r in ranks:
        path = shlex.quote(r.stack_path)
        lines.append(f"echo '{MARK}{r.rank}'; tail -c +$((s{r.rank} + 1)) {path} 2>/dev/null")
    return "\n".join(lines)


def remote_stacks(
    ssh_command: str, ranks: Sequence[RemoteRank], wait: float = 1.0
) -> dict[int, str]:
    """Each rank's main-thread stack, taken on its own host (ranks that gave none left out)."""
    by_host: dict[str, list[RemoteRank]] = {}
    for r in ranks:
        by_host.setdefault(r.host, []).append(r)
    threads = {r.rank: r.main_thread for r in ranks}

    scripts = {host: stack_script(chosen, wait) for host, chosen in by_host.items()}
    result: dict[int, str] = {}
    for output in on_hosts(ssh_command, scripts, timeout=wait + 30).values():
        for block in output.split(MARK)[1:]:
            number, _, dump = block.partition("\n")
            if number.strip().isdigit() and dump.strip():
                rank = int(number)
                result[rank] = main_thread_stack(dump, threads.get(rank))
    return result
