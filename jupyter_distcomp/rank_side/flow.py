"""Back-pressure on a rank's output: a rank waits while too much of it is on its way.

Each rank of this machine has a small file in shared memory, mapped by the rank and by the
kernel (:data:`LAYOUT`): the kernel writes which cell it shows (the ``msg_id`` of the rank's
execute request), whether that cell still shows output, and how much of the cell's output
it has handed to the notebook's iopub; the rank writes how much it has written, for which
cell.

On the rank, every write to ``sys.stdout``/``sys.stderr`` and every display counts its
:func:`units` for the cell it belongs to (a write costs two additions and a look at its
parent header: a fifth of what ipykernel's own write costs). While more than
:data:`WINDOW` units of the cell the kernel shows are not handed on yet, the writing thread
flushes its stream and waits (a burst runs at the pace of the notebook instead of piling up
in memory); a write of text waits only after a line end (or a long open line), so no line
is left half-shown. Output of anything else (a cell the kernel no longer shows, an apply
request) never waits.

The rank's counts of lines and displays let a cell that stops waiting for a rank's output
say exactly what it does not show.

Standard library only; loaded by path on a rank (``distcomp_flow``), imported by the kernel.
"""

from __future__ import annotations

import mmap
import os
import struct
import sys
import threading
import time
from typing import Any

#: written by the kernel: token (the cell's execute msg_id, utf-8, zero-padded), open (the
#: kernel shows the cell's output), acked (units handed to the notebook); by the rank: the
#: cell it writes for (cell_key), and its units, lines and displays written for that cell
LAYOUT = struct.Struct("<96sqqqqqq")
TOKEN_BYTES, OPEN, ACKED, CELL, WRITTEN = 96, 96, 104, 112, 120
WRITTEN_FORMAT = "<qqq"  # units, lines, displays
_WRITTEN = struct.Struct(WRITTEN_FORMAT)
_KERNEL = struct.Struct("<96sqq")  # what the kernel writes: token, open, acked
#: units of one cell a rank may have on their way before its writes wait
WINDOW = 512 * 1024
#: what a display counts besides the length of its text data
RICH_UNITS = 256
#: messages other than stream text that carry output (and count)
RICH_KINDS = frozenset({"display_data", "update_display_data", "execute_result", "clear_output"})
#: those of them that are a display of their own
DISPLAY_KINDS = frozenset({"display_data", "execute_result"})
#: a waiting write looks at the kernel's acknowledgements this often at most (seconds)
POLL_MAX = 0.005
#: characters written without a line end, once past the limit, after which a write waits
#: all the same
OPEN_LINE = 10_000


def units(kind: str, content: dict) -> int:
    """What one output message counts: its characters of text (a display: its text data
    and RICH_UNITS). The same on the rank and in the kernel."""
    if kind == "stream":
        return len(content.get("text") or "")
    data = content.get("data") or {}
    return RICH_UNITS + sum(len(value) for value in data.values() if isinstance(value, str))


def tally(kind: str, content: dict) -> tuple[int, int, int]:
    """(units, lines, displays) of one output message."""
    if kind == "stream":
        return units(kind, content), (content.get("text") or "").count("\n"), 0
    return units(kind, content), 0, int(kind in DISPLAY_KINDS)


def token_of(msg_id: str) -> bytes:
    return msg_id.encode()[:TOKEN_BYTES]


def cell_key(msg_id: str) -> int:
    """A number for the cell ``msg_id`` (never 0: no cell)."""
    import zlib

    return zlib.crc32(msg_id.encode()) + 1


def parent_id(parent: Any) -> str | None:
    """The msg_id of a parent header (or of a whole parent message)."""
    if not isinstance(parent, dict):
        return None
    return parent.get("msg_id") or (parent.get("header") or {}).get("msg_id")


class Flow:
    """This rank's side of its flow file.

    A write of text adds to plain counters only (no lock, no system call, nothing looked up
    but its parent header): CPython (with its global lock) switches threads only at calls
    and loops, never between the read and the store of ``flow.sent += units``. The counters reach the flow file
    (:meth:`publish`) when a write takes the cell past :attr:`limit` (a window of text
    after the last look at the acknowledgements), when a stream is flushed (ipykernel
    flushes both before the rank replies: the cell's counts are complete then), and each
    time the iopub thread sends stream text (the kernel counts at least what is on its
    way)."""

    __slots__ = (
        "_lock", "cell", "displays", "forked", "iopub", "limit", "lines", "map", "open_line",
        "parent", "sent",
    )  # fmt: skip

    def __init__(self, path: str):
        fd = os.open(path, os.O_RDWR | getattr(os, "O_NOFOLLOW", 0))
        try:
            self.map = mmap.mmap(fd, LAYOUT.size)
        finally:
            os.close(fd)
        self.parent: Any = None  # the parent header of the last write (compared by identity)
        self.cell: str | None = None
        self.sent = self.lines = self.displays = 0
        #: units of the cell written before a write looks at the acks again (none: no cell)
        self.limit = sys.maxsize
        self.open_line = 0  # characters written without a line end since a write passed limit
        self.iopub: Any = None  # the thread that sends: it never waits
        self._lock = threading.Lock()
        self.forked = False  # in a process forked from the rank: it counts nothing
        os.register_at_fork(after_in_child=self._forked)

    def switch(self, parent: Any) -> None:
        """Writes now come with the header ``parent`` (of this cell or of another one)."""
        cell = parent_id(parent)
        with self._lock:
            if cell != self.cell:
                self._start(cell)
            self.parent = parent

    def _start(self, cell: str | None) -> None:
        """Counts of ``cell`` from zero (with the lock held)."""
        self.cell, self.parent = cell, None
        self.sent = self.lines = self.displays = self.open_line = 0
        self.limit = 0 if cell is not None else sys.maxsize  # no cell: nothing waits
        if not self.forked and cell is not None:
            struct.pack_into("<q", self.map, CELL, cell_key(cell))
            _WRITTEN.pack_into(self.map, WRITTEN, 0, 0, 0)

    def publish(self) -> None:
        """The counts into the flow file, where the kernel reads them."""
        if self.forked or self.cell is None:
            return
        with self._lock:
            _WRITTEN.pack_into(self.map, WRITTEN, self.sent, self.lines, self.displays)

    def charge(self, cell: str | None, written: tuple[int, int, int]) -> None:
        """``written`` (:func:`tally`, a display's) for ``cell``; waits while too many units
        are on their way."""
        count, lines, displays = written
        if cell is None or count <= 0 or self.forked:
            return
        with self._lock:
            if cell != self.cell:
                self._start(cell)
            self.sent += count
            self.lines += lines
            self.displays += displays
        if self.sent > self.limit and threading.current_thread() is not self.iopub:
            self._wait(cell, None)

    def due(self, stream: Any, string: str) -> None:
        """A write took the cell past :attr:`limit`: it waits, where a line ends (or after
        a long open line), while too many units are on their way."""
        if self.forked:
            self.limit = sys.maxsize
            return
        if threading.current_thread() is self.iopub or self.cell is None:
            return
        end = max(string.rfind("\n"), string.rfind("\r"))
        if end < 0:
            self.open_line += len(string)
            if self.open_line <= OPEN_LINE:
                return
        self.open_line = 0
        self._wait(self.cell, stream)

    def _forked(self) -> None:
        self.forked = True

    def _wait(self, cell: str, stream: Any) -> None:
        """Until no more than WINDOW of the units written are unacknowledged (or the kernel
        no longer shows ``cell``), flushing ``stream`` first so that its held text goes
        out; ``limit`` notes up to where writes need not look again."""
        self.publish()
        sent = self.sent
        acked = self._acked(cell)
        if acked is not None and sent - acked > WINDOW:
            if stream is not None:
                stream.flush()
            pause = 0.0002
            while acked is not None and sent - acked > WINDOW:
                time.sleep(pause)
                pause = min(pause * 2, POLL_MAX)
                acked = self._acked(cell)
        self.limit = sent + WINDOW if acked is None else acked + WINDOW

    def _acked(self, cell: str) -> int | None:
        """Units of ``cell`` the kernel handed on; None when it does not show ``cell``."""
        token, shown, acked = _KERNEL.unpack_from(self.map)
        if not shown or token.rstrip(b"\0") != token_of(cell):
            return None
        return acked


def install(path: str) -> bool:
    """Count and pace this rank's output through the flow file ``path``; False when this
    is no ipykernel engine (nothing is paced)."""
    from IPython import get_ipython

    shell = get_ipython()
    kernel = getattr(shell, "kernel", None)
    stream = sys.stdout
    thread = getattr(getattr(stream, "pub_thread", None), "thread", None)
    if kernel is None or thread is None or getattr(kernel, "_distcomp_flow", None):
        return False
    flow = Flow(path)
    flow.iopub = thread
    kernel._distcomp_flow = flow
    out_stream = type(stream)
    write, flush = out_stream.write, out_stream.flush

    def paced_write(self: Any, string: str) -> Any:
        result = write(self, string)  # raises for what is not a str
        parent = self.parent_header
        if parent is not flow.parent:
            flow.switch(parent)
        units, lines = len(string), string.count("\n")
        flow.sent += units  # no call between reading and storing: no other thread in between
        flow.lines += lines
        if flow.sent > flow.limit:
            flow.due(self, string)
        return result

    def paced_flush(self: Any) -> Any:
        flow.publish()  # before the flush, which may time out
        return flush(self)

    out_stream.write = paced_write  # type: ignore[method-assign]  # reopened streams too
    out_stream.flush = paced_flush  # type: ignore[method-assign]
    session = kernel.session
    send = session.send

    def paced_send(
        stream: Any,
        msg_or_type: Any,
        content: Any = None,
        parent: Any = None,
        *args: Any,
        **kwargs: Any,
    ) -> Any:
        if isinstance(msg_or_type, dict):
            kind = msg_or_type.get("header", {}).get("msg_type")
            body, cell = (
                msg_or_type.get("content") or {},
                parent_id(msg_or_type.get("parent_header")),
            )
        else:
            kind, body, cell = msg_or_type, content or {}, parent_id(parent)
        if kind in RICH_KINDS:
            flow.charge(cell, tally(kind, body))
        elif kind == "stream":
            flow.publish()  # the kernel counts at least what is on its way
        return send(stream, msg_or_type, content, parent, *args, **kwargs)

    session.send = paced_send
    return True
