"""The one line a rank of a submitted job writes about itself, into its own log.

Azure ML keeps each process's stdout and stderr as ``user_logs/std_log_process_N.txt``; a
rank of a job submitted with diagnostics (job_watch.py) writes there, on a stall, on SIGTERM
or on an uncaught exception, one line: ``[distcomp rank-state] `` and a JSON object::

    {"v": 1, "rank": 2, "size": 4, "local_rank": 0, "node": 1, "host": "...", "pid": 81,
     "reason": "stall", "time": 1767000000.5, "stalled": 301.2,
     "threads": [{"name": "MainThread", "main": true,
                  "frames": [{"file": "train.py", "line": 12, "function": "step",
                              "code": "dist.all_reduce(t)"}]}],
     "calls": [<the ledger's Entry of each of the rank's last calls, at most 64>],
     "error": null}

Frames are outermost first and the user's only: not ours, not the standard library's, not
those of the libraries whose calls the ledger records (torch, mpi4py); a file inside the
code folder is named relative to it. rank, size, local_rank and node come from the
variables Azure ML's launchers set (rank 0 of 1 where none says, as in a job of one
process; local_rank and node null where none says). The line reaches stderr in one
``os.write``, after what ``sys.stderr`` holds is flushed, so that it never lands inside
another line.

Standard library only; loaded by path in a job's processes (see job_watch.py).
"""

from __future__ import annotations

import dataclasses
import json
import linecache
import os
import sys
import sysconfig
import threading
import time
from typing import Any

MARK = "[distcomp rank-state] "
VERSION = 1
MAX_CALLS = 64
#: threads of ours, whose stacks are never shown (the watcher, torch's record's reader)
OUR_THREADS = "distcomp-"


def _number(env: Any, *names: str) -> int | None:
    for name in names:
        value = str(env.get(name, "")).strip()
        if value.isdigit():
            return int(value)
    return None


def _tf_task(env: Any) -> tuple[int | None, int | None]:
    """A TensorFlow task's place among all tasks (workers first, then parameter servers,
    as Azure ML orders them) and their count, from TF_CONFIG."""
    try:
        config = json.loads(env.get("TF_CONFIG", ""))
        cluster, task = config["cluster"], config["task"]
        workers = len(cluster.get("worker") or [])
        count = workers + len(cluster.get("ps") or []) + len(cluster.get("chief") or [])
        index = int(task["index"]) + (workers if task["type"] == "ps" else 0)
        return index, count
    except (ValueError, KeyError, TypeError, AttributeError):
        return None, None


def identity(env: Any = None) -> dict[str, Any]:
    """rank, size, local_rank and node of this process, from the launcher's variables:
    PyTorch's (RANK, ...), Open MPI's (OMPI_COMM_WORLD_*), TF_CONFIG, and Azure ML's
    runtime ones (AZUREML_CR_NODE_RANK, AZUREML_PROCESS_NAME=rank_N); rank 0 of 1 where
    none names a rank."""
    env = os.environ if env is None else env
    rank = _number(env, "RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK")
    size = _number(env, "WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE")
    if rank is None or size is None:
        task, tasks = _tf_task(env)
        rank = task if rank is None else rank
        size = tasks if size is None else size
    process = str(env.get("AZUREML_PROCESS_NAME", ""))
    if rank is None and process.startswith("rank_") and process[5:].isdigit():
        rank = int(process[5:])
    if rank is None:  # no launcher's variable: the job's one process
        rank, size = 0, 1 if size is None else size
    local = _number(env, "LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID")
    node = _number(env, "AZUREML_CR_NODE_RANK", "NODE_RANK", "GROUP_RANK")
    per_node = _number(env, "OMPI_COMM_WORLD_LOCAL_SIZE", "LOCAL_WORLD_SIZE")
    if node is None and rank is not None and per_node:
        node = rank // per_node
    return {"rank": rank, "size": size, "local_rank": local, "node": node}


class Frames:
    """Which frames are the user's, and how they are named: ``skipped()`` gives the
    folders of the libraries the ledger records (it learns them as they are imported)."""

    def __init__(self, code_dir: str, ours: str, skipped: Any = tuple) -> None:
        self.code_dir = os.path.join(os.path.abspath(code_dir), "")
        self.ours = os.path.join(os.path.abspath(ours), "")
        self.skipped = skipped
        paths = sysconfig.get_paths()
        self.stdlib = tuple(
            os.path.join(os.path.realpath(paths[key]), "") for key in ("stdlib", "platstdlib")
        )

    def users(self, file: str) -> bool:
        if file.startswith("<frozen") or file.startswith(self.ours):
            return False
        real = os.path.realpath(file) if os.path.isabs(file) else file
        if real.startswith(self.stdlib) and not any(
            part in real for part in ("site-packages", "dist-packages")
        ):
            return False
        return not file.startswith(tuple(self.skipped()))

    def named(self, places: list[tuple[str, int, str]]) -> list[dict[str, Any]]:
        """The user's frames of ``places`` (file, line, function; outermost first)."""
        frames = []
        for file, line, function in places:
            if not self.users(file):
                continue
            shown = file[len(self.code_dir) :] if file.startswith(self.code_dir) else file
            code = linecache.getline(file, line).strip()
            frames.append({"file": shown, "line": line, "function": function, "code": code})
        return frames


def frame_places(frame: Any) -> list[tuple[str, int, str]]:
    """A running frame's stack, outermost first."""
    places = []
    while frame is not None:
        places.append((frame.f_code.co_filename, frame.f_lineno, frame.f_code.co_name))
        frame = frame.f_back
    return places[::-1]


def traceback_places(tb: Any) -> list[tuple[str, int, str]]:
    """A traceback's frames, outermost first, each at the line it was at."""
    places = []
    while tb is not None:
        code = tb.tb_frame.f_code
        places.append((code.co_filename, tb.tb_lineno, code.co_name))
        tb = tb.tb_next
    return places


def thread_stacks(frames: Frames, first: tuple[Any, list] | None = None) -> list[dict[str, Any]]:
    """Each thread with frames of the user's (ours left out), the main thread first;
    ``first``: (a thread, its places) shown before all, in place of that thread's current
    stack (a failed thread's traceback)."""
    names = {t.ident: t for t in threading.enumerate()}
    main = threading.main_thread()
    stacks = []
    if first is not None:
        thread, places = first
        stacks.append((thread, places))
    current = sys._current_frames()
    for ident in sorted(current, key=lambda i: i != main.ident):
        thread = names.get(ident)
        if first is not None and thread is first[0]:
            continue
        if thread is not None and thread.name.startswith(OUR_THREADS):
            continue
        stacks.append((thread, frame_places(current[ident])))
    shown = []
    for thread, places in stacks:
        named = frames.named(places)
        if named:
            shown.append(
                {
                    "name": thread.name if thread is not None else "?",
                    "main": thread is main,
                    "frames": named,
                }
            )
    return shown


def error_text(kind: type, value: BaseException) -> str:
    """``ValueError: bad shape``, as a traceback's last line says it."""
    import traceback

    text = "".join(traceback.format_exception_only(kind, value)).strip()
    return text[:4000]


def line(
    reason: str,
    threads: list[dict[str, Any]],
    calls: list[Any],
    stalled: float | None = None,
    error: str | None = None,
) -> bytes:
    """The whole line, newline included, as bytes."""
    import socket

    state: dict[str, Any] = {"v": VERSION}
    state.update(identity())
    state.update(
        host=socket.gethostname(),
        pid=os.getpid(),
        reason=reason,
        time=round(time.time(), 3),
        stalled=None if stalled is None else round(stalled, 1),
        threads=threads,
        calls=[dataclasses.asdict(entry) for entry in calls[-MAX_CALLS:]],
        error=error,
    )
    text = MARK + json.dumps(state, ensure_ascii=True, separators=(", ", ": ")) + "\n"
    return text.encode("ascii")


def write(data: bytes) -> None:
    """``data`` to fd 2 in one write (the rest, should a pipe take less at once)."""
    try:
        sys.stderr.flush()
    except Exception:  # a closed or replaced stderr: the fd is still there
        pass
    while data:
        done = os.write(2, data)
        data = data[done:]
