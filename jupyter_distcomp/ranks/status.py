"""What the ranks are doing: ``%distcomp status`` (one row per rank), and the "ranks ready n of N"
line while a world starts (updated in place in a notebook, plain lines elsewhere)."""

from __future__ import annotations

import sys
import time
from html import escape
from typing import Any

_COLOURS = {
    "idle": "#2a7",
    "busy": "#c80",
    "dead": "#c33",
    "starting": "#888",
    "debugging": "#37c",
}


class StatusTable:
    header = ("component", "rank", "node", "local rank", "state", "pid")

    def __init__(self, records: list[dict]):
        self.records = records
        self.rows = [
            (
                r["name"],
                str(r["rank"]),
                str(r["node"]),
                str(r["local_rank"]),
                r["state"] + (f" ({r['death']})" if r.get("death") else ""),
                "" if r["pid"] is None else str(r["pid"]),
            )
            for r in records
        ]

    def __repr__(self) -> str:
        if not self.rows:
            return "No ranks running."
        widths = [
            max(len(h), *(len(row[i]) for row in self.rows)) for i, h in enumerate(self.header)
        ]
        fmt = "  ".join(f"{{:<{w}}}" for w in widths)
        return "\n".join([fmt.format(*self.header)] + [fmt.format(*row) for row in self.rows])

    def _repr_html_(self) -> str:
        if not self.rows:
            return "<div class='distcomp-status'>No ranks running.</div>"
        head = "".join(f"<th>{escape(h)}</th>" for h in self.header)
        body = ""
        for record, row in zip(self.records, self.rows, strict=True):
            colour = _COLOURS.get(record["state"], "#000")
            cells = [f"<td>{escape(c)}</td>" for c in row]
            cells[4] = f"<td style='color:{colour}'><b>{escape(row[4])}</b></td>"
            body += "<tr>" + "".join(cells) + "</tr>"
        return f"<table class='distcomp-status'><tr>{head}</tr>{body}</table>"


def _in_kernel() -> bool:
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    shell = get_ipython()
    return getattr(shell, "kernel", None) is not None


class StartProgress:
    def __init__(self, name: str, total: int, reason: str = ""):
        self.name, self.total = name, total
        self.tic = time.perf_counter()
        self._last: tuple | None = None
        self._handle: Any = None
        self._kernel = _in_kernel()
        if reason:
            print(reason, file=sys.stderr)

    def _bundle(self, text: str, ready: int) -> dict[str, str]:
        html = (
            f"<div class='distcomp-progress'><progress value='{ready}' max='{self.total}'>"
            f"</progress> <code>{self.name}</code>: {text}</div>"
        )
        return {"text/plain": f"{self.name}: {text}", "text/html": html}

    def update(self, ready: int) -> None:
        if self._last == (ready,):
            return
        self._last = (ready,)
        text = f"ranks ready {ready} of {self.total}"
        if self._kernel:
            from IPython.display import display

            if self._handle is None:
                self._handle = display(self._bundle(text, ready), raw=True, display_id=True)
            else:
                self._handle.update(self._bundle(text, ready), raw=True)
        elif ready == 0 or ready == self.total:
            print(f"{self.name}: {text}", file=sys.stderr)

    def done(self, summary: str) -> None:
        seconds = time.perf_counter() - self.tic
        text = f"{summary} ready in {seconds:.1f} s"
        if self._kernel and self._handle is not None:
            self._handle.update(self._bundle(text, self.total), raw=True)
        else:
            print(f"{self.name}: {text}", file=sys.stderr)
