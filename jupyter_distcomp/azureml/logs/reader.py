"""Every log of a running job, read a little at a time through run history.

Each poll asks run history for the run (``RunOperations.get_run_details``, the call
``jobs.stream`` polls: status, error and ``logFiles``, name -> SAS URL) through the client's
own operations object, then reads each log from where the last read ended: an HTTP range
request (``x-ms-range: bytes=OFFSET-``, at most :data:`CHUNK` bytes) through azure-ai-ml's
requests pipeline with its retry policy (``create_requests_pipeline_with_retry``, as
``jobs.stream`` reads its logs). So a poll costs one small request per log with nothing new
(Blob Storage answers 416), no log is read twice, and memory stays bounded whatever the logs'
size: a chunk is split into lines at once, only an unfinished last line is held until its
newline comes. ``\\r`` stays in the text (progress bars redraw in place when shown).

With a ``spool`` folder, each log's bytes are also written there as they are read, at the
offset they were read from, laid out as ``jobs.download`` lays them out: a followed job can
then be diagnosed (``%distcomp diagnose JOB``, follow's summary) without reading its logs
again, and writing at the read offset keeps the copy exact when a log is read twice.
"""

from __future__ import annotations

import os
import re
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

CHUNK = 4 * 1024 * 1024
#: logs read at once (a job of 128 ranks has 128 logs)
READERS = 8
_TOTAL = re.compile(r"/(\d+)$")


@dataclass
class LogState:
    """How far one log has been read, and its unfinished last line."""

    name: str
    rank: int | None
    offset: int = 0
    pending: bytes = b""


@dataclass
class RunState:
    """What one look at run history said."""

    status: str
    error: str  # the run's error message, empty when it has none
    urls: dict[str, str] = field(default_factory=dict)  # log name -> SAS URL (a secret)


class LogReader:
    """The logs of one job; :meth:`poll` returns each rank's new complete lines."""

    def __init__(
        self, ml_client: Any, rank_of: Any, retries: int = 3, spool: Path | None = None
    ) -> None:
        from azure.ai.ml._utils.utils import create_requests_pipeline_with_retry

        self.ml_client = ml_client
        self.rank_of = rank_of  # log name -> rank, or None for the job's other logs
        self.spool = spool  # the folder each log's bytes are also kept in (None: not kept)
        self.pipeline = create_requests_pipeline_with_retry(
            requests_pipeline=ml_client.jobs._requests_pipeline, retries=retries
        )
        self.logs: dict[str, LogState] = {}
        self._pool: ThreadPoolExecutor | None = None

    def run_state(self, name: str) -> RunState:
        """Status, error and log URLs of run ``name`` (azure-core errors propagate)."""
        details = self.ml_client.jobs._runs_operations.get_run_details(name)
        error = getattr(getattr(details, "error", None), "error", None)
        message = str(getattr(error, "message", "") or "")
        return RunState(str(details.status or ""), message, dict(details.log_files or {}))

    def read_chunk(self, url: str, offset: int, size: int = CHUNK) -> tuple[bytes, bool]:
        """(bytes from ``offset``, at most ``size``; whether the blob has more after them)."""
        from azure.core.exceptions import HttpResponseError

        end = offset + size - 1
        response = self.pipeline.get(
            url, headers={"x-ms-range": f"bytes={offset}-{end}", "x-ms-version": "2021-08-06"}
        )
        status = response.status_code
        if status in (404, 416):  # not written yet / nothing new
            return b"", False
        if status == 206:
            data = response.body()
            total = _TOTAL.search(response.headers.get("Content-Range", ""))
            more = total is not None and offset + len(data) < int(total[1])
            return data, more
        if status == 200:  # a server that ignores ranges: the whole blob came
            return response.body()[offset:], False
        raise HttpResponseError(response=response)

    def _read(
        self, state: LogState, url: str
    ) -> tuple[LogState, list[str], bool, Exception | None]:
        try:
            data, more = self.read_chunk(url, state.offset)
        except Exception as exc:  # left where it was: the next poll reads it again
            return state, [], False, exc
        if not data:
            return state, [], False, None
        if self.spool is not None:
            keep(self.spool, state.name, state.offset, data)
        state.offset += len(data)
        *lines, state.pending = (state.pending + data).split(b"\n")
        return state, [_text(line) for line in lines], more, None

    def poll(self, run: RunState) -> tuple[list[tuple[int, str]], bool, Exception | None]:
        """Each rank's new complete lines, ``(rank, text)`` in rank order; whether some log
        has more to read right away; the first error of a read that failed (its log stays
        where it was, so nothing is skipped or read twice once reads work again)."""
        reads = []
        for name, url in run.urls.items():
            rank = self.rank_of(name)
            if rank is None:
                continue
            state = self.logs.setdefault(name, LogState(name, rank))
            reads.append((state, url))
        if self._pool is None:
            self._pool = ThreadPoolExecutor(READERS, thread_name_prefix="distcomp-logs")
        results = list(self._pool.map(lambda pair: self._read(*pair), reads))
        lines: list[tuple[int, str]] = []
        more = False
        error = None
        for state, texts, has_more, exc in sorted(results, key=lambda r: r[0].rank or 0):
            assert state.rank is not None
            lines.extend((state.rank, text) for text in texts)
            more = more or has_more
            error = error or exc
        return lines, more, error

    def rest(self) -> list[tuple[int, str]]:
        """The unfinished last lines, once the job has ended."""
        found = []
        for state in sorted(self.logs.values(), key=lambda s: s.rank or 0):
            if state.pending and state.rank is not None:
                found.append((state.rank, _text(state.pending)))
                state.pending = b""
        return found

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None


def spool_path(spool: Path, name: str) -> Path | None:
    """Where log ``name`` (``user_logs/std_log_process_3.txt``) is kept under ``spool``;
    None for a name that would leave the folder."""
    relative = PurePosixPath(name)
    if relative.is_absolute() or ".." in relative.parts or not relative.parts:
        return None
    return spool.joinpath(*relative.parts)


def keep(spool: Path, name: str, offset: int, data: bytes) -> None:
    """Write ``data``, read from log ``name`` at ``offset``, at that offset of its copy."""
    target = spool_path(spool, name)
    if target is None:
        return
    target.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        os.pwrite(fd, data, offset)
    finally:
        os.close(fd)


def _text(raw: bytes) -> str:
    """A line's text: UTF-8 (bad bytes replaced), a CRLF's ``\\r`` dropped, others kept."""
    text = raw.decode("utf-8", errors="replace")
    return text[:-1] if text.endswith("\r") else text


__all__ = ["CHUNK", "LogReader", "LogState", "RunState", "keep", "spool_path"]
