"""Rank output shown in the notebook: live, line by line, each line labelled with its rank.

Everything is written from the kernel's main thread (the cell's own thread), so the output
lands in the running cell; ipyparallel's receiving thread only hands messages over (feed.py).

A rank's unfinished line (no newline yet) is held until its newline, so text written in
pieces is one labelled line. A line that the rank redraws with ``\\r`` (a progress bar), or
that waits longer than PARTIAL_LINE_SECONDS for its end, is shown at once as a display of its
own that updates in place, one per rank and stream, and keeps its last state; with its newline
it stays there, finished. A line longer than LINE_LIMIT is shown as it is, in pieces.
"""

from __future__ import annotations

import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ...core.rank_text import OpenColours, label_safe
from ...rank_side.flow import RICH_KINDS, tally
from .flow import MESSAGE_CHARS, pace_iopub

#: What this module and flow.py use of ipykernel beyond its public API, to write the ranks'
#: output as the kernel's own stream messages (a test checks each exists; without a kernel
#: and its iopub thread, ``_write`` writes to the plain stream)
RELIES_ON = (
    "ipykernel.kernelbase.Kernel.iopub_thread",
    "ipykernel.kernelbase.Kernel.iopub_socket",
    "ipykernel.kernelbase.Kernel.session",
    "ipykernel.iostream.IOPubThread.schedule",
    "ipykernel.iostream.IOPubThread.socket",  # flow.pace_iopub sets its high-water mark
    "ipykernel.iostream.OutStream.topic",
    "ipykernel.iostream.OutStream.parent_header",
    "ipykernel.iostream.OutStream.flush",
)
#: a line without its newline is shown (in place, updated) after waiting this long
PARTIAL_LINE_SECONDS = 0.5
#: a line shown in place is redrawn at most this often
REDRAW_SECONDS = 0.05
#: characters of an unfinished line held back; beyond, they are shown as they are
LINE_LIMIT = 10_000


@dataclass
class _Line:
    """A rank's unfinished line on one stream."""

    text: str  # since the last newline; a redrawn line keeps "\r" + what shows
    since: float  # when the line began
    display_id: str | None = None  # shown in place under this display id
    drawn: str = ""  # what the display shows
    drawn_at: float = 0.0


def visible(line: str) -> str:
    """What a terminal shows of a line redrawn with ``\\r``: its last non-empty piece."""
    for piece in reversed(line.split("\r")):
        if piece:
            return piece
    return ""


def _held(text: str) -> str:
    """A redrawn line kept short: what shows, and whether the cursor is back at its start."""
    if "\r" not in text:
        return text
    return "\r" + visible(text) + ("\r" if text.endswith("\r") else "")


class RankOutput:
    """Turns per-rank stream text and rich outputs into labelled notebook output.

    ``group=True`` holds everything back and shows it rank by rank, in rank order, at
    :meth:`finish`; otherwise lines appear as soon as they are complete. Without a ``shell``
    (no displays to update), unfinished lines wait for their newline or the cell's end.
    """

    def __init__(
        self,
        label: Callable[[int], str],
        group: bool = False,
        shell: Any = None,
        acks: Callable[[dict[int, int]], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.label = label
        self._clock = clock  # when lines wait and are redrawn
        self.group = group
        self.shell = shell
        #: told each rank's units of output once they are handed to the notebook
        self.acks = acks
        self._owed: dict[int, int] = {}  # units taken in and not acknowledged yet
        #: rank -> (units, lines, displays) taken in (flow.tally)
        self.taken: dict[int, tuple[int, int, int]] = {}
        self._handed = 0  # batches given to the iopub thread (counted in this thread)
        self._sent = 0  # batches it sent on (counted in its thread)
        self._lines: dict[tuple[int, str], _Line] = {}
        self._pending: list[tuple[str, str]] = []  # (stream name, text) not yet written
        self._groups: dict[int, list[tuple[str, Any]]] = {}
        self._cell = ""  # names the cell's displays; made with the first one
        self._prefixes: dict[int, str] = {}  # rank -> its label and a space
        self._colours = OpenColours()  # no colour a rank leaves on reaches a label
        self._shown = 0  # lines shown in place so far
        #: the kernel whose iopub thread sends the output on (None outside a kernel)
        self._kernel = pace_iopub(shell)

    @property
    def live(self) -> bool:
        """Unfinished lines are shown in place (as displays that update)."""
        return self.shell is not None and not self.group

    # -- input --------------------------------------------------------------------------
    def message(self, rank: int, kind: str, content: dict) -> None:
        """One iopub message of ``rank``: stream text, a display, an update, a result."""
        if kind == "stream" or kind in RICH_KINDS:
            counts = tally(kind, content)
            self._owed[rank] = self._owed.get(rank, 0) + counts[0]
            before = self.taken.get(rank, (0, 0, 0))
            self.taken[rank] = (before[0] + counts[0], before[1] + counts[1], before[2] + counts[2])
        if kind == "stream":
            self.stream(rank, content.get("name", "stdout"), content.get("text", ""))
        elif kind == "display_data":
            self.rich(rank, content)
        elif kind == "execute_result":
            self.rich(rank, content, result=True)
        elif kind == "update_display_data":
            self.update(rank, content)
        # clear_output: a rank does not clear the other ranks' output; it is not passed on

    def stream(self, rank: int, name: str, text: str) -> None:
        text = label_safe(text)  # no line of it can pass for another rank's
        key = (rank, name)
        line = self._lines.pop(key, None)
        pieces = text.split("\n")
        if line is not None:
            pieces[0] = line.text + pieces[0]
        *complete, rest = pieces
        if complete:
            if line is not None and line.display_id is not None:
                self._draw(rank, name, line, visible(complete[0]))  # finished where it shows
                complete = complete[1:]
            if "\r" in text or (line is not None and "\r" in line.text):
                complete = [visible(raw) for raw in complete]
            if complete:
                self._emit_lines(rank, name, complete)
            line = None
        if not rest:
            return
        if line is None:
            line = _Line("", self._clock())
        line.text = _held(rest)
        while "\r" not in line.text and len(line.text) > LINE_LIMIT:
            self._emit_lines(rank, name, [line.text[:LINE_LIMIT]])
            line.text = line.text[LINE_LIMIT:]
        self._lines[key] = line

    def rich(self, rank: int, content: dict, result: bool = False) -> None:
        """A display_data or execute_result message's content from ``rank``."""
        if self.group:
            self._groups.setdefault(rank, []).append(("rich", (content, result)))
            return
        self.flush()
        self._publish(rank, content, result)

    def update(self, rank: int, content: dict) -> None:
        """An update_display_data of ``rank``: it updates that rank's display in place."""
        if self.shell is None or self.group:
            return  # the display it updates was shown as text, or at the end
        self.flush()
        self.shell.display_pub.publish(
            data=content.get("data", {}),
            metadata={**(content.get("metadata") or {}), "distcomp_rank": rank},
            transient=content.get("transient") or {},
            update=True,
        )

    # -- output -------------------------------------------------------------------------
    def _emit_lines(self, rank: int, name: str, lines: list[str]) -> None:
        prefix = self._prefixes.get(rank)
        if prefix is None:
            prefix = self._prefixes[rank] = self.label(rank) + " "
        lines = [self._colours.close((rank, name), line) for line in lines]
        text = prefix + ("\n" + prefix).join(lines) + "\n"
        if self.group:
            self._groups.setdefault(rank, []).append((name, text))
        else:
            self._pending.append((name, text))

    def flush_partial(self, force: bool = False) -> None:
        """Show unfinished lines that are redrawn or waited long enough, redraw those shown
        in place; with ``force`` (the cell's end) every one, for the last time."""
        now = self._clock()
        for key, line in list(self._lines.items()):
            rank, name = key
            if force:
                del self._lines[key]
                if line.display_id is not None:
                    self._draw(rank, name, line, visible(line.text))
                else:
                    self._emit_lines(rank, name, [visible(line.text)])
            elif self.live and (
                line.display_id is not None
                or "\r" in line.text
                or now - line.since >= PARTIAL_LINE_SECONDS
            ):
                shown = visible(line.text)
                if shown != line.drawn and now - line.drawn_at >= REDRAW_SECONDS:
                    self._draw(rank, name, line, shown)

    def _draw(self, rank: int, name: str, line: _Line, shown: str) -> None:
        """Show ``line`` as ``shown``, in place (a display that updates)."""
        if self.shell is None or self.group:
            self._emit_lines(rank, name, [shown])
            return
        self.flush()  # what came before it shows before it
        update = line.display_id is not None
        if line.display_id is None:
            self._shown += 1
            self._cell = self._cell or uuid.uuid4().hex[:12]
            line.display_id = f"distcomp-{self._cell}-{self._shown}"
        line.drawn, line.drawn_at = shown, self._clock()
        self.shell.display_pub.publish(
            data={"text/plain": f"{self.label(rank)} {shown}"},
            metadata={"distcomp_rank": rank, "distcomp_stream": name},
            transient={"display_id": line.display_id},
            update=update,
        )

    def flush(self) -> None:
        """Write what is pending, one write per stream in a row (40,000 lines stay cheap),
        then acknowledge what came in once the iopub thread sent it on (grouped mode, which
        holds the output itself, at once)."""
        if self._pending:
            self._write_pending()
        self._hand_on()

    @property
    def in_flight(self) -> bool:
        """Output written and not yet sent on by the kernel's iopub thread."""
        return self._sent < self._handed

    def _hand_on(self) -> None:
        if not self._owed or self.acks is None:
            self._owed.clear()
            return
        owed, self._owed = self._owed, {}
        if self._kernel is None or self.group:
            self.acks(owed)
            return
        acks = self.acks
        self._handed += 1

        def sent() -> None:  # the iopub thread: what came before is sent on
            acks(owed)
            self._sent += 1

        self._kernel.iopub_thread.schedule(sent)

    def _write_pending(self) -> None:
        pending, self._pending = self._pending, []
        run_name = pending[0][0]
        run: list[str] = []
        for name, text in pending:
            if name != run_name:
                _write(run_name, "".join(run), self._kernel)
                run_name, run = name, []
            run.append(text)
        _write(run_name, "".join(run), self._kernel)

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
                    _write(name, item, self._kernel)
        self._groups.clear()

    def _publish(self, rank: int, content: dict, result: bool) -> None:
        data = content.get("data", {})
        label = self.label(rank) + (" Out:" if result else "")
        _write("stdout", label + "\n", self._kernel)
        if self.shell is None:
            _write("stdout", data.get("text/plain", "") + "\n")
            return
        metadata = dict(content.get("metadata") or {})
        metadata["distcomp_rank"] = rank
        self.shell.display_pub.publish(
            data=data, metadata=metadata, transient=content.get("transient") or {}
        )


def _write(name: str, text: str, kernel: Any = None) -> None:
    """Write ``text`` to the cell's stream.

    In a ``kernel`` it goes as stream messages of MESSAGE_CHARS at most, after what the
    kernel printed before, without waiting for the iopub thread: the messages stay small, so
    that IOPUB_HWM of them is little memory. Elsewhere (or redirected, say by
    ``capture_output``) it is written."""
    if not text:
        return
    stream = sys.stderr if name == "stderr" else sys.stdout
    topic = getattr(stream, "topic", None)
    if kernel is None or topic is None or not hasattr(stream, "parent_header"):
        stream.write(text)
        stream.flush()
        return
    kernel.iopub_thread.schedule(stream.flush)  # the kernel's own text first
    parent = stream.parent_header
    for start in range(0, len(text), MESSAGE_CHARS):
        chunk = text[start : start + MESSAGE_CHARS]
        kernel.session.send(
            kernel.iopub_socket, "stream", {"name": name, "text": chunk}, parent=parent, ident=topic
        )
