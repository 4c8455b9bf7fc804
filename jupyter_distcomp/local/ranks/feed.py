"""A cell's rank output, handed over from ipyparallel's thread as each message arrives.

ipyparallel's receiving thread appends every output message to a queue and wakes the cell's
thread, which takes them all at once: a printed line is shown as soon as the cell's thread
runs, with nothing polled, and messages stay in the order each rank sent them. The end of a
rank's output goes to ``on_complete``, which decides whether it is worth a wake.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable


class OutputFeed:
    """The output messages of ``ranks`` (an ``ipp.Execution`` gives them by index)."""

    def __init__(
        self,
        ranks: list[int],
        wake: Callable[[], None],
        on_complete: Callable[[int], None] | None = None,
    ):
        self.ranks = ranks
        self._wake = wake
        #: called with the rank whose output is complete (instead of waking the cell)
        self._on_complete = on_complete
        self._items: deque[tuple[int, str, dict]] = deque()
        #: rank -> when its last message arrived (monotonic seconds)
        self.last: dict[int, float] = {}
        self.closed = False

    def on_message(self, index: int, kind: str, content: dict) -> None:
        """ipyparallel's thread: one message of the rank at ``index``."""
        if self.closed:
            return  # the cell ended: a rank it left running writes to nobody
        rank = self.ranks[index]
        self.last[rank] = time.monotonic()
        if kind == "status":
            if content.get("execution_state") != "idle":
                return
            # the idle status ends a rank's output: the cell's thread checks it
            if self._on_complete is not None:
                self._on_complete(rank)
                return
        else:
            self._items.append((rank, kind, content))
        self._wake()

    def drain(self) -> list[tuple[int, str, dict]]:
        """Every message that arrived since the last call, oldest first."""
        items = self._items
        taken = []
        while items:
            taken.append(items.popleft())
        return taken

    def close(self) -> None:
        """The cell ended: later messages are not kept."""
        self.closed = True
        self._items.clear()
