"""Every log of a job into a folder, laid out as ``jobs.download(name, all=True)`` lays it out.

``jobs.download`` refuses a job that has not ended; this reads through run history instead
(the log files' SAS URLs of ``get_run_details``), so a running job's logs come as far as they
are written. Each log is read in chunks straight to its file, whatever its size:
``FOLDER/artifacts/user_logs/std_log_process_N.txt``, ``FOLDER/artifacts/system_logs/...``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ...errors import AzureMLError
from ..failures import explain
from .job import read_job
from .reader import LogReader, keep, spool_path


def fetch_logs(ml_client: Any, job_name: str, folder: str | Path) -> list[Path]:
    """Write job ``job_name``'s logs under ``folder``/artifacts; the files written, in order.

    A log already in the folder (an earlier fetch, or a follow that kept what it read) is
    read on from its size: logs only grow, so only their new bytes are fetched."""
    read_job(ml_client, job_name)  # an unknown job, a pipeline: said clearly
    reader = LogReader(ml_client, lambda name: None)
    try:
        run = reader.run_state(job_name)
    except Exception as exc:
        raise explain(exc, ml_client, f"read the logs of job '{job_name}'") from None
    root = Path(folder).expanduser() / "artifacts"
    written = []
    try:
        for name, url in sorted(run.urls.items()):
            target = spool_path(root, name)
            if target is None:
                continue  # a name that would leave the folder
            offset = target.stat().st_size if target.is_file() else 0
            try:
                more = True
                while more:
                    data, more = reader.read_chunk(url, offset)
                    keep(root, name, offset, data)
                    offset += len(data)
            except OSError as exc:
                raise AzureMLError(
                    f"could not write {target}: {exc.strerror}. Fix: pick a writable folder."
                ) from None
            except Exception as exc:
                raise explain(exc, ml_client, f"read log '{name}' of job '{job_name}'") from None
            written.append(target)
    finally:
        reader.close()
    return written


__all__ = ["fetch_logs"]
