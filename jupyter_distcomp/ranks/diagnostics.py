"""Reading what went wrong: mpiexec's own messages, and a stuck rank's Python stack."""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable

_ENGINE_LOG = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d[.,]\d+ \[(IPEngine|KernelNanny)")
_MPI_INIT_ECHO = re.compile(r"^(from mpi4py import MPI|mpi_rank = |mpi_size = )")
_C_FRAME = re.compile(r"^\[[^\]]+:\d+\] \[\s*\d+\] ")
_THREAD = re.compile(r"^(Current thread|Thread) (0x[0-9a-f]+)", re.M)


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
        time.sleep(0.05)
        for rank in list(pending):
            if file_size(paths[rank]) > sizes[rank]:
                time.sleep(0.05)  # let faulthandler finish writing
                with open(paths[rank], errors="replace") as f:
                    f.seek(sizes[rank])
                    result[rank] = main_thread_stack(f.read(), main_threads[rank])
                pending.discard(rank)
    return result
