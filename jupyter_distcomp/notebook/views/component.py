"""A component as the notebook shows it: the summary below its definition (HTML, and plain
text for terminals and nbconvert) and its line in ``%distcomp list``. ``%load_ext``
registers these as the component's formatters (``notebook/extension.py``)."""

from __future__ import annotations

from html import escape
from typing import TYPE_CHECKING, Any

from ...core.summary import ComponentSummary, component_summary, same_words
from .code_marks import plain, rich

if TYPE_CHECKING:
    from ...core.model import Component

STYLE = (
    "<style>.distcomp-summary table{border-collapse:collapse;margin:4px 0}"
    ".distcomp-summary td,.distcomp-summary th{padding:2px 8px;text-align:left;"
    "border-bottom:1px solid #ddd;vertical-align:top}"
    ".distcomp-env code{white-space:pre-wrap;word-break:break-all}"
    # JupyterLab right-aligns table cells of rendered HTML: headings stay above their column
    ".jp-RenderedHTMLCommon .distcomp-summary td,.jp-RenderedHTMLCommon .distcomp-summary th"
    "{text-align:left}"
    ".distcomp-summary code{white-space:pre-wrap}</style>"
)


def _title(summary: ComponentSummary) -> str:
    """The display name where it says more than the name ("MPI quickstart"), else ""."""
    return "" if same_words(summary.title, summary.name) else summary.title


def component_text(component: Component) -> str:
    """Plain-text summary, for terminals and nbconvert."""
    summary = component_summary(component)
    version = f" {summary.version}" if summary.version else ""
    title = _title(summary)
    head = f"{title} ({summary.name}{version})" if title else f"{summary.name}{version}"
    lines = [
        f"{head}, {summary.type}",
        f"  launcher:    {summary.launcher}",
        f"  layout:      {summary.layout}",
        f"  environment: {summary.environment}",
    ]
    if summary.inputs:
        lines.append("  inputs:")
    for row in summary.inputs:
        lines.append(
            f"    {row.name}: {row.type}" + (f" ({row.attributes})" if row.attributes else "")
        )
    if summary.outputs:
        lines.append("  outputs:")
    for row in summary.outputs:
        lines.append(f"    {row.name}: {row.type}")
    lines.append("  command:     " + summary.command)
    for warning in summary.warnings:
        lines.append(f"  warning: {plain(warning)}")
    return "\n".join(lines)


def component_html(component: Component) -> str:
    summary = component_summary(component)
    sections = [
        (
            heading,
            "".join(
                f"<tr><td><b>{escape(r.name)}</b></td><td>{escape(r.type)}</td>"
                f"<td>{escape(r.attributes)}</td><td>{escape(r.description)}</td></tr>"
                for r in rows
            ),
        )
        for heading, rows in (("inputs", summary.inputs), ("outputs", summary.outputs))
    ]
    warnings = "".join(f"<div style='color:#a60'>&#9888; {rich(w)}</div>" for w in summary.warnings)
    ports = "".join(f"<tr><th colspan=4>{h}</th></tr>{r}" for h, r in sections if r)
    return (
        f"{STYLE}<div class='distcomp-summary'>"
        f"<div>{f'<b>{escape(_title(summary))}</b> ' if _title(summary) else ''}"
        f"<code>{escape(summary.name)}</code> "
        f"{escape(summary.version or '')} &middot; {escape(summary.type)} &middot; "
        f"launcher <b>{escape(summary.launcher)}</b> &middot; {escape(summary.layout)}</div>"
        f"{warnings}{f'<table>{ports}</table>' if ports else ''}"
        f"<div>command: <code>{escape(summary.command)}</code></div>"
        f"<div>environment: {escape(summary.environment)}</div></div>"
    )


def component_line(component: Component) -> str:
    """One line: name, type, launcher, layout, ports (for ``%distcomp list``)."""
    summary = component_summary(component)
    launcher = summary.launcher if component.launcher else "no launcher"
    ports = [
        f"{what} {', '.join(row.name for row in rows)}"
        for what, rows in (("inputs", summary.inputs), ("outputs", summary.outputs))
        if rows
    ]
    return f"{summary.name} ({summary.type}, {launcher}, {summary.layout})" + (
        f"; {'; '.join(ports)}" if ports else ""
    )


def pretty(component: Component, printer: Any, cycle: bool) -> None:
    """IPython's plain-text formatter of a component."""
    printer.text(repr(component) if cycle else component_text(component))
