"""Rank output shown in the notebook: live, line by line, each line labelled with its rank.

Everything is written from the kernel's main thread (the cell's own thread), so the output
lands in the running cell; ipyparallel's receiving thread only wakes the main thread up.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any

#: a partial line (no newline yet) waits this long for its end before it is shown anyway
PARTIAL_LINE_SECONDS = 0.5


class RankOutput:
    """Turns per-rank stream text and rich outputs into labelled notebook output.

    ``group=True`` holds everything back and shows it rank by rank, in rank order, at
    :meth:`finish`; otherwise lines appear as soon as they are complete.
    """

    def __init__(self, label: Callable[[int], str], group: bool = False, shell: Any = None):
        self.label = label
        self.group = group
        self.shell = shell
        self._partial: dict[tuple[int, str], tuple[str, float]] = {}
        self._pending: list[tuple[str, str]] = []  # (stream name, text) not yet written
        self._groups: dict[int, list[tuple[str, Any]]] = {}
        self.lines = 0

    # -- input --------------------------------------------------------------------------
    def stream(self, rank: int, name: str, text: str) -> None:
        key = (rank, name)
        before, since = self._partial.pop(key, ("", time.monotonic()))
        text = before + text
        complete, newline, rest = text.rpartition("\n")
        if newline:
            self._emit_lines(rank, name, complete.split("\n"))
        if rest:
            self._partial[key] = (rest, since if before else time.monotonic())

    def rich(self, rank: int, content: dict, result: bool = False) -> None:
        """A display_data or execute_result message's content from ``rank``."""
        if self.group:
            self._groups.setdefault(rank, []).append(("rich", (content, result)))
            return
        self.flush()
        self._publish(rank, content, result)

    # -- output -------------------------------------------------------------------------
    def _emit_lines(self, rank: int, name: str, lines: list[str]) -> None:
        label = self.label(rank)
        text = "".join(f"{label} {line}\n" for line in lines)
        self.lines += len(lines)
        if self.group:
            self._groups.setdefault(rank, []).append((name, text))
        else:
            self._pending.append((name, text))

    def flush_partial(self, force: bool = False) -> None:
        """Show partial lines that waited long enough (all of them with ``force``)."""
        now = time.monotonic()
        for key, (text, since) in list(self._partial.items()):
            if force or now - since >= PARTIAL_LINE_SECONDS:
                del self._partial[key]
                self._emit_lines(key[0], key[1], [text])

    def flush(self) -> None:
        """Write what is pending, one write per stream in a row (40,000 lines stay cheap)."""
        if not self._pending:
            return
        pending, self._pending = self._pending, []
        run_name = pending[0][0]
        run: list[str] = []
        for name, text in pending:
            if name != run_name:
                _write(run_name, "".join(run))
                run_name, run = name, []
            run.append(text)
        _write(run_name, "".join(run))

    def finish(self) -> None:
        """End of the cell: partial lines, then (grouped mode) every rank in order."""
        self.flush_partial(force=True)
        self.flush()
        if not self.group:
            return
        for rank in sorted(self._groups):
            for name, item in self._groups[rank]:
                if name == "rich":
                    self._publish(rank, *item)
                else:
                    _write(name, item)
        self._groups.clear()

    def _publish(self, rank: int, content: dict, result: bool) -> None:
        data = content.get("data", {})
        label = self.label(rank) + (" Out:" if result else "")
        _write("stdout", label + "\n")
        if self.shell is None:
            _write("stdout", data.get("text/plain", "") + "\n")
            return
        metadata = dict(content.get("metadata") or {})
        metadata["distcomp_rank"] = rank
        self.shell.display_pub.publish(data=data, metadata=metadata)


def _write(name: str, text: str) -> None:
    if not text:
        return
    stream = sys.stderr if name == "stderr" else sys.stdout
    stream.write(text)
    stream.flush()
