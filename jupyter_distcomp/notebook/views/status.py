"""``%distcomp status``: what each rank is doing, one row per rank."""

from __future__ import annotations

from html import escape

from ...contracts import RankState
from .code_marks import plain, rich

_COLOURS = {
    RankState.IDLE: "#2a7",
    RankState.BUSY: "#c80",
    RankState.DEAD: "#c33",
    RankState.STARTING: "#888",
    RankState.DEBUGGING: "#37c",
}


class StatusTable:
    """``records`` from ``Session.status``; ``pending``: component -> what its next run changes
    (``Session.pending_changes``), said under the table."""

    def __init__(self, records: list[dict], pending: dict[str, str] | None = None):
        self.records = records
        self.pending = dict(pending or {})
        # each rank's cuda:LOCAL_RANK, where the ranks have GPUs
        devices = any(r.get("device", "cpu") != "cpu" for r in records)
        self.header: tuple[str, ...] = ("component", "rank", "node", "local rank", "state", "pid")
        self.header += ("device",) if devices else ()
        #: a GPU column where a rank holds GPU memory (its devices, memory in use and peak)
        self.gpu = any(r.get("gpu") for r in records)
        if self.gpu:
            self.header = (*self.header, "gpu")
        self.rows = [
            (
                r["name"],
                str(r["rank"]),
                str(r["node"]),
                str(r["local_rank"]),
                r["state"] + (f" ({r['death']})" if r.get("death") else ""),
                "" if r["pid"] is None else str(r["pid"]),
                *([r.get("device", "cpu")] if devices else []),
            )
            + ((r.get("gpu") or "",) if self.gpu else ())
            for r in records
        ]

    @property
    def notes(self) -> list[str]:
        return [f"{name}: {text}" for name, text in self.pending.items()]

    def __repr__(self) -> str:
        if not self.rows:
            return "No ranks running."
        widths = [
            max(len(h), *(len(row[i]) for row in self.rows)) for i, h in enumerate(self.header)
        ]
        fmt = "  ".join(f"{{:<{w}}}" for w in widths)
        rows = [fmt.format(*self.header)] + [fmt.format(*row) for row in self.rows]
        return "\n".join(rows + [plain(note) for note in self.notes])

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
        notes = "".join(f"<div class='distcomp-pending'>{rich(note)}</div>" for note in self.notes)
        return f"<table class='distcomp-status'><tr>{head}</tr>{body}</table>{notes}"
