"""Each rank's variables as a person reads them: what every rank shares, once; then one
compact row per rank with only what varies. TF_CONFIG is split into its parts (the cluster
is shared, the task varies) instead of raw JSON.

Used by ``%distcomp env`` (views.env.EnvTable) and the run-settings panel's preview, so both
lay the same values out the same way, credentials masked (by the variable's name or the
value's shape: ``core/secrets.py``), so no view or saved widget state holds one. Pure: no
IPython, no widgets.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from .layout import rank_table
from .secrets import masked_variable

FIXED = ("rank", "node", "local rank")


@dataclass(frozen=True)
class RankView:
    """``shared``: name -> value equal on every rank; ``header`` / ``rows``: the rest."""

    shared: dict[str, str]
    header: list[str]
    rows: list[list[str]]

    def cut(self, limit: int) -> RankView:
        """At most ``limit`` rows: the first ones, a row of '...', the last one."""
        if len(self.rows) <= limit:
            return self
        rows = [*self.rows[: limit - 2], ["..."] * len(self.header), self.rows[-1]]
        return RankView(self.shared, self.header, rows)


def rank_view(launcher: str, envs: Sequence[Mapping[str, str]]) -> RankView:
    """The view of ``envs`` (one mapping per rank, in rank order)."""
    shown = [{k: masked_variable(k, v) for k, v in e.items()} for e in envs]
    table = [_readable(row) for row in rank_table(launcher, shown)]
    names = list(dict.fromkeys(k for row in table for k in row if k not in FIXED))
    shared = {
        k: table[0][k] for k in names if len({row.get(k) for row in table}) == 1 and len(table)
    }
    varying = [k for k in names if k not in shared]
    header = [*FIXED, *varying]
    rows = [[row.get(k, "") for k in header] for row in table]
    return RankView(shared, header, rows)


def _readable(row: dict[str, str]) -> dict[str, str]:
    """TF_CONFIG's JSON as its parts: ``TF_CONFIG task`` ("worker 0"), ``TF_CONFIG
    cluster`` ("worker: h:p, h:p; ps: h:p") and the other keys."""
    raw = row.get("TF_CONFIG")
    if raw is None:
        return row
    try:
        config = json.loads(raw)
        task = config["task"]
        cluster = config["cluster"]
    except (ValueError, KeyError, TypeError):
        return row
    parts = {
        "TF_CONFIG task": f"{task.get('type')} {task.get('index')}",
        "TF_CONFIG cluster": "; ".join(
            f"{kind}: {', '.join(map(str, hosts))}" for kind, hosts in cluster.items()
        ),
    }
    for key, value in config.items():
        if key not in ("task", "cluster"):
            parts[f"TF_CONFIG {key}"] = str(value)
    result = {k: v for k, v in row.items() if k != "TF_CONFIG"}
    result.update(parts)
    return result


def text_lines(view: RankView, indent: str = "") -> list[str]:
    """The view as plain text: shared values one per line, then the rank table."""
    lines = []
    if view.shared:
        width = max(map(len, view.shared))
        lines.append(f"{indent}on every rank:")
        lines += [f"{indent}  {k:<{width}}  {v}" for k, v in view.shared.items()]
    if view.rows:
        widths = [max(len(h), *(len(r[i]) for r in view.rows)) for i, h in enumerate(view.header)]
        fmt = indent + "  ".join(f"{{:<{n}}}" for n in widths)
        lines += [fmt.format(*view.header).rstrip()]
        lines += [fmt.format(*r).rstrip() for r in view.rows]
    return lines


__all__ = ["RankView", "rank_view", "text_lines"]
