"""Flight Recorder dumps a job left among its outputs, found, read, and given to torch's
own analyser.

A job that sets ``TORCH_FR_DUMP_TEMP_FILE`` (older ``TORCH_NCCL_DEBUG_INFO_TEMP_FILE``) to
a path under ``outputs/`` (or a named output) gets one file per rank there,
``<prefix><rank>``, which ``jobs.download(all=True)`` brings back under ``artifacts/`` or
``named-outputs/``. Each is read as plain data (core/joblog/flight.py); where torch is
installed, ``python -m torch.distributed.flight_recorder.fr_trace`` (torch's analyser,
torch/distributed/flight_recorder/fr_trace.py) runs on them in a subprocess of its own,
and what it prints is shown as it is. The analyser unpickles the dumps: it runs only on
the files of the user's own job, and only in that subprocess.
"""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from ..core.joblog.flight import read_dump

#: ``nccl_trace_rank_3``, ``fr_dump_12``: a prefix, then the rank
_DUMP_NAME = re.compile(r"^(?P<prefix>[^.]*?\D)(?P<rank>\d+)$")
#: what is looked at: at most this many files, none larger
_FILES, _LARGEST = 20_000, 512 << 20
#: the analyser's seconds, and the lines of its output kept
ANALYSER_TIMEOUT, ANALYSER_LINES = 120, 60
_SKIPPED = {"user_logs", "system_logs", "azureml-logs", "logs"}


@dataclass
class FoundDumps:
    """The dumps of one prefix in one folder, by rank."""

    dumps: dict[int, dict] = field(default_factory=dict)
    folder: Path | None = None
    prefix: str = ""
    notes: list[str] = field(default_factory=list)


def _candidates(root: Path) -> dict[tuple[Path, str], dict[int, Path]]:
    groups: dict[tuple[Path, str], dict[int, Path]] = {}
    seen = 0
    for path in sorted(root.rglob("*")):
        if any(part in _SKIPPED for part in path.relative_to(root).parts[:-1]):
            continue
        seen += 1
        if seen > _FILES:
            break
        match = _DUMP_NAME.match(path.name)
        if not match or not path.is_file() or path.stat().st_size > _LARGEST:
            continue
        with open(path, "rb") as handle:
            start = handle.read(2)
        if start[:1] not in (b"\x80", b"{"):
            continue
        groups.setdefault((path.parent, match["prefix"]), {})[int(match["rank"])] = path
    return groups


def find_dumps(root: Path) -> FoundDumps:
    """The largest set of Flight Recorder dumps under ``root`` (none: empty)."""
    found = FoundDumps()
    for (folder, prefix), paths in sorted(
        _candidates(root).items(), key=lambda item: -len(item[1])
    ):
        dumps = {}
        for rank, path in sorted(paths.items()):
            dump = read_dump(path.read_bytes())
            if dump is not None:
                dumps[rank] = dump
        if dumps:
            found.dumps, found.folder, found.prefix = dumps, folder, prefix
            found.notes.append(f"Flight Recorder dumps of {len(dumps)} rank(s): {folder / prefix}N")
            break
    return found


def torch_analysis(found: FoundDumps) -> list[str]:
    """What torch's own analyser says of the dumps, or why it did not run."""
    if found.folder is None:
        return []
    if importlib.util.find_spec("torch") is None:
        return [
            "torch is not installed here, so torch's analyser (python -m "
            "torch.distributed.flight_recorder.fr_trace) did not run; the dumps were read "
            "as plain data above. Fix: pip install torch, then run it again."
        ]
    command = [
        sys.executable,
        "-m",
        "torch.distributed.flight_recorder.fr_trace",
        str(found.folder),
        "--prefix",
        found.prefix,
    ]
    try:
        done = subprocess.run(
            command, capture_output=True, text=True, timeout=ANALYSER_TIMEOUT, check=False
        )
    except subprocess.TimeoutExpired:
        return [f"torch's analyser did not finish in {ANALYSER_TIMEOUT} s; it was stopped."]
    output = [line for line in (done.stdout + done.stderr).splitlines() if line.strip()]
    if done.returncode != 0:
        last = output[-1] if output else f"exit code {done.returncode}"
        return [
            f"torch's analyser could not read these dumps ({last}); the dumps were read as "
            "plain data above."
        ]
    return output[-ANALYSER_LINES:] or ["torch's analyser found nothing to report."]
