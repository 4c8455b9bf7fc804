"""``%distcomp diagnose``: a finished job's logs, as ``az ml job download --all`` (or
``ml_client.jobs.download(name, all=True)``) lays them out, read and diagnosed.

The folder holds ``artifacts/user_logs/std_log_process_N.txt`` (one per process; see
core/joblog/names.py), ``artifacts/system_logs/...``, the job's ``outputs/`` under
``artifacts/`` and its named outputs under ``named-outputs/``; a folder that is itself
``user_logs/``, or holds the ``std_log*.txt`` files directly, is read the same way. Other
files in ``user_logs`` (Open MPI's ``mpi_log.txt``) and the system logs are read as the
launchers' words; Flight Recorder dumps anywhere among the outputs are read too
(flight_recorder.py).

A log of a few megabytes is read whole. A larger one is read at its start and its end,
where a failure is, and searched for our state lines with one byte scan of the memory
mapped file: a night of 64 ranks' logs (gigabytes) is diagnosed in about a second.

Two entry points: :func:`diagnose_folder` (a folder on disk) and :func:`diagnose_texts`
(the texts a caller already holds, by file name: what ``%distcomp diagnose JOB`` and
``follow``'s summary pass after fetching).
"""

from __future__ import annotations

import mmap
import os
from pathlib import Path

from ..core.joblog import Diagnosis, RankLog, Section, diagnose, rank_files
from ..core.joblog.names import USER_LOG
from ..core.joblog.state import MARK
from ..errors import JobLogsError
from .flight_recorder import find_dumps, torch_analysis

#: logs up to this size are read whole
WHOLE = 4 << 20
#: the start and the end read of a larger log
HEAD, TAIL = 64 << 10, 512 << 10
#: a state line longer than this is cut (and then skipped as damaged)
LINE_MAX = 1 << 20
#: the launchers' logs (system logs, mpi_log.txt): their last bytes, at most this many files
LAUNCHER_TAIL, LAUNCHER_FILES = 256 << 10, 64
_MARK = MARK.encode()
FETCH_FIX = (
    "Fix: download the job's logs with `az ml job download --name JOB --all --download-path "
    "FOLDER` (or `ml_client.jobs.download(JOB, all=True, download_path=FOLDER)`), then "
    "`%distcomp diagnose FOLDER`."
)


def user_logs(folder: Path) -> Path:
    """The folder that holds the rank logs: ``artifacts/user_logs``, ``user_logs``, or the
    folder itself. JobLogsError when there is none."""
    if not folder.exists():
        raise JobLogsError(f"{folder}: no such folder. {FETCH_FIX}")
    if not folder.is_dir():
        raise JobLogsError(
            f"{folder} is a file, not a job's folder. Pass the folder the job was downloaded "
            f"to (it holds artifacts/user_logs/). {FETCH_FIX}"
        )
    for candidate in (folder / "artifacts" / "user_logs", folder / "user_logs", folder):
        if candidate.is_dir() and any(USER_LOG.match(p.name) for p in candidate.iterdir()):
            return candidate
    raise JobLogsError(
        f"{folder} holds no rank logs (no artifacts/user_logs/std_log_process_N.txt, "
        f"user_logs/ or std_log*.txt in it). {FETCH_FIX}"
    )


def _state_lines(view: mmap.mmap | bytes, start: int, stop: int) -> list[bytes]:
    """The marked state lines between ``start`` and ``stop``, each whole."""
    lines = []
    at = view.find(_MARK, start, stop)
    while at >= 0:
        begin = view.rfind(b"\n", max(0, at - LINE_MAX), at) + 1
        end = view.find(b"\n", at, at + LINE_MAX)
        end = end if end >= 0 else min(len(view), at + LINE_MAX)
        lines.append(view[begin:end])
        at = view.find(_MARK, end, stop)
    return lines


def read_log(path: Path, rank: int, role: str = "") -> RankLog:
    """One rank's log (see the module's text for how a large one is read)."""
    size = path.stat().st_size
    with open(path, "rb") as handle:
        if size <= WHOLE:
            raw = handle.read()
            return RankLog(rank, raw.decode(errors="replace"), path.name, role=role)
        with mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as view:
            head_end = view.rfind(b"\n", 0, HEAD) + 1 or HEAD
            tail_start = view.find(b"\n", size - TAIL) + 1 or size - TAIL
            middle = _state_lines(view, head_end, tail_start)
            parts = [view[:head_end], *(line + b"\n" for line in middle), view[tail_start:]]
    text = b"".join(parts).decode(errors="replace")
    return RankLog(rank, text, path.name, tail_start - head_end, role)


def _launcher_logs(folder: Path, logs: Path, rank_names: set[str]) -> dict[str, str]:
    """The last bytes of the logs no rank wrote: the other files beside the rank logs, and
    the system logs."""
    paths = [p for p in sorted(logs.iterdir()) if p.is_file() and p.name not in rank_names]
    for system in (logs.parent / "system_logs", folder / "artifacts" / "system_logs"):
        if system.is_dir() and system != logs:
            paths += sorted(p for p in system.rglob("*") if p.is_file())
            break
    texts = {}
    for path in paths[:LAUNCHER_FILES]:
        try:
            with open(path, "rb") as handle:
                handle.seek(max(0, path.stat().st_size - LAUNCHER_TAIL))
                texts[str(path.relative_to(folder))] = handle.read().decode(errors="replace")
        except OSError:
            continue
    return texts


def diagnose_folder(
    folder: str | os.PathLike, per_node: int | None = None, status: str | None = None
) -> Diagnosis:
    """The diagnosis of the job downloaded to ``folder`` (``per_node``: processes per
    node, when known; ``status``: the job's final status, when known)."""
    root = Path(folder).expanduser()
    logs = user_logs(root)
    ranks, _ = rank_files([p.name for p in logs.iterdir() if p.is_file()])
    read = [read_log(logs / name, rank, role) for rank, (name, role) in sorted(ranks.items())]
    launchers = _launcher_logs(root, logs, {name for name, _ in ranks.values()})
    found = find_dumps(root)
    diagnosis = diagnose(read, per_node, status, launchers, found.dumps or None, found.notes)
    if found.dumps:  # after the dumps' own section, before the layout
        analysis = Section("torch's Flight Recorder analyser", torch_analysis(found))
        diagnosis.sections.insert(len(diagnosis.sections) - 1, analysis)
    return diagnosis


def diagnose_texts(
    texts: dict[str, str],
    per_node: int | None = None,
    status: str | None = None,
) -> Diagnosis:
    """The diagnosis of a job whose logs a caller holds: ``{file name or path: text}``
    (``user_logs/std_log_process_3.txt``); names that are no rank's log are read as the
    launchers' words."""
    by_name = {name.rsplit("/", 1)[-1]: name for name in texts}
    ranks, others = rank_files(list(by_name))
    logs = [
        RankLog(rank, texts[by_name[name]], name, role=role)
        for rank, (name, role) in sorted(ranks.items())
    ]
    if not logs:
        raise JobLogsError(
            f"none of {sorted(texts)[:5]} is a rank's log (std_log_process_N.txt, "
            f"std_log.txt). {FETCH_FIX}"
        )
    launchers = {by_name[name]: texts[by_name[name]] for name in others}
    return diagnose(logs, per_node, status, launchers)
