"""``%distcomp status``: what each rank is doing, one row per rank."""

from __future__ import annotations

from html import escape

from ...contracts import RankState

_COLOURS = {
    RankState.IDLE: "#2a7",
    RankState.BUSY: "#c80",
    RankState.DEAD: "#c33",
    RankState.STARTING: "#888",
    RankState.DEBUGGING: "#37c",
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
