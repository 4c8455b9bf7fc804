"""The "ranks ready n of N" line while a world starts: updated in place in a notebook, plain
lines elsewhere. The rank backend calls it (``RankBackend.progress``) while a cell waits for
its ranks; a restart first says in it what stopping the old ranks waits for."""

from __future__ import annotations

import sys
import time
from html import escape
from typing import Any


class StartProgress:
    """``name``'s ``total`` ranks starting; ``kernel``: shown as one line updated in place."""

    def __init__(self, name: str, total: int, kernel: bool):
        self.name, self.total = name, total
        self.tic = time.perf_counter()
        self._last: tuple | None = None
        self._handle: Any = None
        self._kernel = kernel

    def _bundle(self, text: str, ready: int) -> dict[str, str]:
        html = (
            f"<div class='distcomp-progress'><progress value='{ready}' max='{self.total}'>"
            f"</progress> <code>{self.name}</code>: {escape(text)}</div>"
        )
        return {"text/plain": f"{self.name}: {text}", "text/html": html}

    def phase(self, text: str) -> None:
        """What the start waits for before its ranks start (a restart's stop)."""
        self._show(text, 0)
        self._last = None

    def update(self, ready: int) -> None:
        if self._last == (ready,):
            return
        self._last = (ready,)
        self._show(f"ranks ready {ready} of {self.total}", ready)

    def _show(self, text: str, ready: int) -> None:
        if self._kernel:
            from IPython.display import display

            if self._handle is None:
                self._handle = display(self._bundle(text, ready), raw=True, display_id=True)
            else:
                self._handle.update(self._bundle(text, ready), raw=True)
        elif not text.startswith("ranks ready") or ready == 0 or ready == self.total:
            print(f"{self.name}: {text}", file=sys.stderr)

    def done(self, summary: str) -> None:
        seconds = time.perf_counter() - self.tic
        text = f"{summary} ready in {seconds:.1f} s"
        if self._kernel and self._handle is not None:
            self._handle.update(self._bundle(text, self.total), raw=True)
        else:
            print(f"{self.name}: {text}", file=sys.stderr)
