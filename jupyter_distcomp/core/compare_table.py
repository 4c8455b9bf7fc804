"""The table of ``%distcomp compare``: ranks grouped by the summary of one value.

Each rank sends a summary of the value (``rank_side/compare.py``); ranks with equal
summaries form a group, the largest group is the reference and the others are flagged with
their max |diff| when it is known. NaN counts as equal to NaN; arrays show their NaN and
Inf counts. Used for idle ranks (``local/inspect/compare.py``) and for ranks stopped at a
debugger prompt (``local/debug``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..errors import DistcompError
from .ranges import format_ranks


def _key(summary: dict) -> Any:
    kind = summary["kind"]
    if kind == "number":
        return (kind, summary["value"])
    if kind == "array":
        return (kind, tuple(summary["shape"]), summary["dtype"], summary["digest"])
    if kind == "dict":
        items = tuple((k, _key(v)) for k, v in summary["items"].items())
        return (kind, items, bool(summary.get("truncated")))
    return (kind, summary.get("digest") or summary.get("text"))


def describe(summary: dict) -> str:
    kind = summary["kind"]
    if kind == "number":
        value = summary["value"]
        if value == "nan":
            return "nan"
        return f"{value:.8g}" if isinstance(value, float) else repr(value)
    if kind == "array":
        shape = "x".join(map(str, summary["shape"])) or "scalar"
        text = f"{summary['type']} {summary['dtype']} {shape} sha1:{summary['digest'][:8]}"
        counts = [f"{summary['nan']} NaN"] if summary.get("nan") else []
        counts += [f"{summary['inf']} Inf"] if summary.get("inf") else []
        return text + (f" ({', '.join(counts)})" if counts else "")
    if kind == "dict":
        more = "more than " if summary.get("truncated") else ""
        return f"mapping of {more}{len(summary['items'])} entries"
    return str(summary["text"])


def _number_diff(value: Any, ref: Any, rtol: float | None) -> dict:
    if "nan" in (value, ref):  # NaN against a number: no difference to give
        return {"maxdiff": None, "close": False}
    try:
        diff = abs(value - ref)
    except TypeError:
        return {"maxdiff": None, "close": False}
    return {"maxdiff": float(diff), "close": rtol is not None and diff <= rtol * abs(ref)}


def _close(result: dict) -> bool:
    if "items" in result:
        items = result["items"].values()
        return all(i["close"] for i in items) and not result["missing"] and not result["extra"]
    return bool(result.get("close"))


def check_expression(name: str, expr: str) -> None:
    """A clear error unless ``expr`` is one Python expression."""
    try:
        compile(expr, "<compare>", "eval")
    except SyntaxError as exc:
        raise DistcompError(
            f"%distcomp compare {name}: {expr!r} is not a Python expression ({exc.msg}). "
            f"Fix: everything after {name} is the expression, e.g. "
            f"%distcomp compare {name} model.state_dict()"
        ) from None


def table(
    name: str,
    expr: str,
    summaries: dict[int, dict],
    rtol: float | None,
    diff_kept: Callable[[dict[int, Any], int], dict[int, dict]] | None = None,
) -> CompareTable:
    """The ranks grouped by their summaries; ``diff_kept(keys, ref)`` gives the max |diff|
    of the ranks whose kept arrays differ (None: none is computed)."""
    ranks = sorted(summaries)
    keys = {r: _key(s) for r, s in summaries.items()}
    sizes: dict[Any, list[int]] = {}
    for rank in ranks:
        sizes.setdefault(keys[rank], []).append(rank)
    ref = max(sizes.values(), key=lambda group: (len(group), -group[0]))[0]
    diffs: dict[int, dict] = {}
    for rank in ranks:
        if (
            keys[rank] != keys[ref]
            and summaries[rank]["kind"] == "number" == summaries[ref]["kind"]
        ):
            diffs[rank] = _number_diff(summaries[rank]["value"], summaries[ref]["value"], rtol)
    if diff_kept is not None:
        diffs.update(diff_kept(keys, ref))
    within = []
    for rank, result in diffs.items():
        if rtol is not None and _close(result):
            keys[rank] = keys[ref]
            within.append(rank)
    compared = CompareTable(name, expr, ranks, summaries, keys, ref, diffs, rtol)
    compared.within = sorted(within)
    return compared


class CompareTable:
    """The ranks grouped by value; the groups that differ from the reference flagged."""

    def __init__(
        self,
        name: str,
        expr: str,
        ranks: list[int],
        summaries: dict[int, dict],
        keys: dict[int, Any],
        ref: int,
        diffs: dict[int, dict],
        rtol: float | None,
    ) -> None:
        self.name, self.expr, self.ref, self.rtol = name, expr, ref, rtol
        self.summaries, self.diffs = summaries, diffs
        groups: dict[Any, list[int]] = {}
        for rank in ranks:
            groups.setdefault(keys[rank], []).append(rank)
        self.groups = list(groups.values())
        self.differing = [g for g in self.groups if keys[g[0]] != keys[ref]]
        #: ranks whose values differ from the reference's, within ``rtol``
        self.within: list[int] = []

    def max_diff(self, group: list[int]) -> float | None:
        values = [_max(self.diffs.get(r, {})) for r in group]
        found = [v for v in values if v is not None]
        return max(found) if found else None

    def details(self, group: list[int]) -> list[str]:
        """For a differing mapping: which entries differ, and by how much."""
        first = self.diffs.get(group[0], {})
        if "items" not in first:
            return [f"no max |diff|: {first['why']}"] if first.get("why") else []
        ref_items = self.summaries[self.ref].get("items", {})
        own = self.summaries[group[0]].get("items", {})
        entries = []
        for key in own:
            if key in ref_items and _key(own[key]) != _key(ref_items[key]):
                diffs = [self.diffs.get(r, {}).get("items", {}).get(key, {}) for r in group]
                found = [d["maxdiff"] for d in diffs if d.get("maxdiff") is not None]
                entries.append(f"{key} (max |diff| {max(found):.3g})" if found else key)
        lines = [f"differs in {len(entries)} of {len(own)} entries: " + ", ".join(entries)]
        if first["missing"]:
            lines.append("missing: " + ", ".join(first["missing"]))
        if first["extra"]:
            lines.append("extra: " + ", ".join(first["extra"]))
        return lines

    def text(self) -> str:
        rows = [("ranks", "value", "", f"max |diff| vs rank {self.ref}")]
        notes: list[tuple[int, list[str]]] = []
        for group in self.groups:
            differs = group in self.differing
            diff = self.max_diff(group) if differs else None
            summary = self.summaries[group[0]]
            flag = "ERROR" if summary["kind"] == "error" else ("DIFFERS" if differs else "")
            rows.append(
                (
                    format_ranks(group).split(" ", 1)[1].replace(", ", ","),
                    describe(summary),
                    flag,
                    "" if diff is None else f"{diff:.6g}",
                )
            )
            if differs:
                notes.append((len(rows) - 1, self.details(group)))
        widths = [max(len(row[i]) for row in rows) for i in range(4)]
        lines = [
            f"{self.name}: compare `{self.expr}` on {len(self.summaries)} rank(s)"
            + (f", rtol {self.rtol:g}" if self.rtol is not None else "")
        ]
        for index, row in enumerate(rows):
            lines.append("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())
            for at, extra in notes:
                if at == index:
                    lines.extend(f"    {line}" for line in extra)
        if self.within:
            diff = self.max_diff(self.within)
            by = f" by at most {diff:.3g}" if diff is not None else ""
            lines.append(
                f"{format_ranks(self.within)} differ{'s' if len(self.within) == 1 else ''} "
                f"from rank {self.ref}{by}, within rtol "
                f"{self.rtol:g}: counted with it, not equal."
            )
        if not self.differing:
            lines.append(
                f"All ranks agree within rtol {self.rtol:g} (not all equal)."
                if self.within
                else "All ranks agree."
            )
        return "\n".join(lines)

    def __repr__(self) -> str:
        return self.text()


def _max(result: dict) -> float | None:
    if "items" in result:
        found = [i["maxdiff"] for i in result["items"].values() if i.get("maxdiff") is not None]
        return max(found) if found else None
    return result.get("maxdiff")
