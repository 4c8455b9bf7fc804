"""The kernel's side of the ranks' back-pressure (rank_side/flow.py): one flow file per rank,
and the kernel's iopub made to wait for a slow notebook instead of dropping.

A cell says which request of each rank it shows (:meth:`Flows.show`), acknowledges each
rank's output once the kernel's iopub thread has sent it on (:meth:`Flows.ack`), and lets the
ranks write freely when it ends (:meth:`Flows.release`). With the iopub socket waiting for
the notebook (:func:`pace_iopub`), a burst of output waits on the rank: the kernel holds
at most a window per rank and IOPUB_HWM messages of MESSAGE_CHARS.
"""

from __future__ import annotations

import mmap
import os
import struct
import threading
import time
from typing import Any

from ...rank_side.flow import (
    ACKED,
    CELL,
    LAYOUT,
    OPEN,
    TOKEN_BYTES,
    WRITTEN,
    WRITTEN_FORMAT,
    cell_key,
    token_of,
)

#: messages the kernel's iopub socket queues for a notebook that reads slower than the ranks
#: write (ZMQ's default, which ipykernel keeps); beyond, its thread waits (ZMQ's XPUB_NODROP)
#: and the ranks with it. Lowering it on a connected socket would stall it for good: the
#: reading end of a connection wakes the writer every half of the limit it was made with.
IOPUB_HWM = 1000
#: characters of rank output in one iopub message at most (the queue above stays small)
MESSAGE_CHARS = 8 * 1024


class Flows:
    """The flow files of a world's ranks, in ``folder`` (on this machine)."""

    def __init__(self, folder: str, world_size: int):
        self.paths = [os.path.join(folder, f"rank-{rank}.flow") for rank in range(world_size)]
        self._maps: dict[int, mmap.mmap] = {}
        self._lock = threading.Lock()
        for rank, path in enumerate(self.paths):
            flags = os.O_RDWR | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
            fd = os.open(path, flags, 0o600)
            try:
                os.write(fd, bytes(LAYOUT.size))
                self._maps[rank] = mmap.mmap(fd, LAYOUT.size)
            finally:
                os.close(fd)

    def show(self, rank: int, msg_id: str) -> None:
        """The kernel shows the output of ``rank``'s request ``msg_id``: none acknowledged."""
        view = self._maps.get(rank)
        if view is None:
            return
        with self._lock:
            struct.pack_into("<q", view, OPEN, 0)
            struct.pack_into("<q", view, ACKED, 0)
            view[:TOKEN_BYTES] = token_of(msg_id).ljust(TOKEN_BYTES, b"\0")
            struct.pack_into("<q", view, OPEN, 1)

    def ack(self, counts: dict[int, int]) -> None:
        """Each rank's ``counts`` more units were handed to the notebook."""
        with self._lock:
            for rank, count in counts.items():
                view = self._maps.get(rank)
                if view is not None and count:
                    (acked,) = struct.unpack_from("<q", view, ACKED)
                    struct.pack_into("<q", view, ACKED, acked + count)

    def catch_up(self, rank: int) -> None:
        """Acknowledge all that ``rank`` says it wrote (what it counted and the kernel did
        not see, say text it wrote past ipykernel's streams, never blocks it for good)."""
        view = self._maps.get(rank)
        if view is None:
            return
        with self._lock:
            acked, sent = _acked_and_sent(view)
            if sent > acked:
                struct.pack_into("<q", view, ACKED, sent)

    def behind(self, rank: int) -> int:
        """Units ``rank`` wrote that are not acknowledged yet."""
        with self._lock:
            view = self._maps.get(rank)
            if view is None:
                return 0
            acked, sent = _acked_and_sent(view)
        return max(0, sent - acked)

    def written(self, rank: int, msg_id: str) -> tuple[int, int, int] | None:
        """(units, lines, displays) ``rank`` wrote for its request ``msg_id`` so far; None
        when that is not known (no flow file, or the rank's counts are of another request)."""
        with self._lock:
            view = self._maps.get(rank)
            if view is None:
                return None
            (cell,) = struct.unpack_from("<q", view, CELL)
            written = struct.unpack_from(WRITTEN_FORMAT, view, WRITTEN)
        return written if cell == cell_key(msg_id) else None

    def shown_behind(self) -> int:
        """Units the ranks wrote for the cells on show that are not acknowledged yet."""
        total = 0
        with self._lock:
            for view in self._maps.values():
                token, shown = view[:TOKEN_BYTES], struct.unpack_from("<q", view, OPEN)[0]
                (cell,) = struct.unpack_from("<q", view, CELL)
                if shown and cell == cell_key(token.rstrip(b"\0").decode(errors="replace")):
                    acked, sent = _acked_and_sent(view)
                    total += max(0, sent - acked)
        return total

    def settle(self, limit: float, stall: float = 0.25) -> None:
        """Wait up to ``limit`` seconds until the cells on show have all the ranks wrote for
        them, giving up once nothing more arrives for ``stall`` seconds."""
        now = time.monotonic()
        deadline, last, moved = now + limit, None, now
        while now < deadline and now - moved < stall:
            behind = self.shown_behind()
            if not behind:
                return
            if behind != last:
                last, moved = behind, now
            time.sleep(0.01)
            now = time.monotonic()

    def release(self, ranks: list[int]) -> None:
        """The cell no longer shows the output of ``ranks``: they write without waiting."""
        with self._lock:
            for rank in ranks:
                view = self._maps.get(rank)
                if view is not None:
                    struct.pack_into("<q", view, OPEN, 0)

    def close(self) -> None:
        with self._lock:
            maps, self._maps = self._maps, {}
        for view in maps.values():
            try:
                view.close()
            except (BufferError, ValueError):
                pass


def _acked_and_sent(view: mmap.mmap) -> tuple[int, int]:
    (acked,) = struct.unpack_from("<q", view, ACKED)
    (sent,) = struct.unpack_from("<q", view, WRITTEN)
    return acked, sent


_paced: set[int] = set()  # the iopub threads already set


def pace_iopub(shell: Any) -> Any:
    """The kernel of ``shell`` when it has an iopub thread (None outside a kernel).

    Its iopub socket, set once in that thread (a ZMQ socket is used from one thread), queues
    IOPUB_HWM messages for a notebook that reads slower than the ranks write and then waits
    instead of dropping what follows. A socket that cannot wait (no XPUB) keeps every
    message instead."""
    kernel = getattr(shell, "kernel", None)
    thread = getattr(kernel, "iopub_thread", None)
    socket = getattr(thread, "socket", None)
    if thread is None or socket is None:
        return None
    if id(thread) in _paced:
        return kernel
    _paced.add(id(thread))

    def pace() -> None:
        import zmq

        try:
            socket.setsockopt(zmq.XPUB_NODROP, 1)
        except Exception:
            try:  # a PUB socket drops past its limit: keep every message instead
                socket.setsockopt(zmq.SNDHWM, 0)
            except Exception:  # a closed socket: nothing to keep
                pass

    thread.schedule(pace)
    return kernel
