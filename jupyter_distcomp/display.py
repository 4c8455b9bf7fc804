"""HTML and plain-text views of a component and of its per-rank variables (no IPython needed)."""

from __future__ import annotations

from html import escape
from typing import TYPE_CHECKING, Any

from .layout import layout_text, tensorflow_tasks

if TYPE_CHECKING:
    from .model import Component, Input

_STYLE = (
    "<style>.distcomp-summary table{border-collapse:collapse;margin:4px 0}"
    ".distcomp-summary td,.distcomp-summary th{padding:2px 8px;text-align:left;"
    "border-bottom:1px solid #ddd;vertical-align:top}"
    ".distcomp-env code{white-space:pre-wrap;word-break:break-all}"
    ".jp-RenderedHTMLCommon .distcomp-env td,.jp-RenderedHTMLCommon .distcomp-env th"
    "{text-align:left}"
    ".distcomp-summary code{white-space:pre-wrap}</style>"
)


def _type_text(value: Any) -> str:
    return " | ".join(value) if isinstance(value, tuple) else str(value)


def _input_attrs(inp: Input) -> str:
    parts = []
    if inp.optional:
        parts.append("optional")
    if inp.default is not None:
        parts.append(f"default {inp.default!r}")
    if inp.min is not None and inp.max is not None:
        parts.append(f"{inp.min} to {inp.max}")
    elif inp.min is not None:
        parts.append(f"at least {inp.min}")
    elif inp.max is not None:
        parts.append(f"at most {inp.max}")
    if inp.enum:
        parts.append("one of " + ", ".join(inp.enum))
    return "; ".join(parts)


def _environment_text(component: Component) -> str:
    env = component.environment
    if env is None:
        return "(none)"
    if env.name:
        return f"{env.name}" + (f":{env.version}" if env.version else "")
    bits = []
    if env.image:
        bits.append(f"image {env.image}")
    if env.dockerfile:
        bits.append(f"Dockerfile {env.dockerfile}")
    if env.conda_file:
        bits.append(f"conda {env.conda_file}")
    if env.user_managed:
        bits.append("user-managed dependencies")
    return ", ".join(bits) + f" ({env.os})"


def layout_caption(component: Component) -> str:
    """The layout as every view names it; TensorFlow's in workers and parameter servers."""
    layout = component.runsettings.resource_layout
    if component.launcher_type == "tensorflow":
        workers, ps = tensorflow_tasks(
            layout.instance_count, layout.worker_count, layout.parameter_server_count
        )
        return (
            f"{workers} worker(s) + {ps} parameter server(s) on {layout.instance_count} "
            f"node(s) = {workers + ps} rank(s)"
        )
    return (
        f"{layout_text(layout.instance_count, layout.process_count_per_node)} "
        f"= {layout.world_size} rank(s)"
    )


def component_text(component: Component) -> str:
    """Plain-text summary, for terminals and nbconvert."""
    launcher = component.launcher.type if component.launcher else "none (one process)"
    lines = [
        f"{component.display_name or component.name} ({component.name}"
        f"{' ' + component.version if component.version else ''}), {component.type}",
        f"  launcher:    {launcher}",
        f"  layout:      {layout_caption(component)}",
        f"  environment: {_environment_text(component)}",
    ]
    if component.inputs:
        lines.append("  inputs:")
    for inp in component.inputs.values():
        attrs = _input_attrs(inp)
        lines.append(f"    {inp.name}: {_type_text(inp.type)}" + (f" ({attrs})" if attrs else ""))
    if component.outputs:
        lines.append("  outputs:")
    for out in component.outputs.values():
        lines.append(f"    {out.name}: {_type_text(out.type)}")
    lines.append("  command:     " + " ".join(component.command_template.split()))
    for warning in component.warnings:
        lines.append(f"  warning: {warning}")
    return "\n".join(lines)


def component_html(component: Component) -> str:
    launcher = component.launcher.type if component.launcher else "none (one process)"
    rows = "".join(
        f"<tr><td><b>{escape(i.name)}</b></td><td>{escape(_type_text(i.type))}</td>"
        f"<td>{escape(_input_attrs(i))}</td><td>{escape(i.description or '')}</td></tr>"
        for i in component.inputs.values()
    )
    outs = "".join(
        f"<tr><td><b>{escape(o.name)}</b></td><td>{escape(_type_text(o.type))}</td>"
        f"<td></td><td>{escape(o.description or '')}</td></tr>"
        for o in component.outputs.values()
    )
    warnings = "".join(
        f"<div style='color:#a60'>&#9888; {escape(w)}</div>" for w in component.warnings
    )
    title = escape(component.display_name or component.name)
    sections = [("inputs", rows), ("outputs", outs)]
    ports = "".join(f"<tr><th colspan=4>{h}</th></tr>{r}" for h, r in sections if r)
    return (
        f"{_STYLE}<div class='distcomp-summary'>"
        f"<div><b>{title}</b> <code>{escape(component.name)}</code> "
        f"{escape(component.version or '')} &middot; {escape(component.type)} &middot; "
        f"launcher <b>{escape(launcher)}</b> &middot; {escape(layout_caption(component))}</div>"
        f"{warnings}{f'<table>{ports}</table>' if ports else ''}"
        f"<div>command: <code>{escape(' '.join(component.command_template.split()))}</code></div>"
        f"<div>environment: {escape(_environment_text(component))}</div></div>"
    )


def component_line(component: Component) -> str:
    """One line: name, type, launcher, layout, ports (for ``%distcomp list``)."""
    launcher = component.launcher.type if component.launcher else "no launcher"
    ports = [
        f"{what} {', '.join(names)}"
        for what, names in (("inputs", component.inputs), ("outputs", component.outputs))
        if names
    ]
    return f"{component.name} ({component.type}, {launcher}, {layout_caption(component)})" + (
        f"; {'; '.join(ports)}" if ports else ""
    )


def _breakable(name: str) -> str:
    """A variable name that may wrap after each underscore (a narrow output stays narrow)."""
    return escape(name).replace("_", "_<wbr>")


class EnvTable:
    """The variables each rank sees: those every rank shares once, then one compact row per
    rank (rank, node, local rank and what varies); TF_CONFIG in readable parts.

    ``envs`` come from ``Session.rank_values``; ``held`` says they are the running ranks' own
    (else the ports read ``PORT_AT_START``).
    """

    def __init__(self, component: Component, envs: list[dict[str, str]], held: bool = False):
        from .rankview import rank_view

        self.component = component
        self.envs = envs
        self.held = held
        self.view = rank_view(component.launcher_type or "mpi", envs)

    @property
    def caption(self) -> str:
        source = "held by the running ranks" if self.held else "ports chosen when the ranks start"
        return (
            f"{self.component.launcher_type or 'mpi'}: {layout_caption(self.component)}; {source}"
        )

    def __repr__(self) -> str:
        from .rankview import text_lines

        return "\n".join([self.caption, *text_lines(self.view)])

    def _repr_html_(self) -> str:
        view = self.view
        shared = "".join(
            f"<tr><th>{_breakable(k)}</th><td><code>{escape(v)}</code></td></tr>"
            for k, v in view.shared.items()
        )
        head = "".join(f"<th>{_breakable(h)}</th>" for h in view.header)
        body = "".join(
            "<tr>" + "".join(f"<td><code>{escape(c)}</code></td>" for c in row) + "</tr>"
            for row in view.rows
        )
        parts = [f"<div>{escape(self.caption)}</div>"]
        if shared:
            parts.append(
                f"<div>on every rank:</div><table class='distcomp-env-shared'>{shared}</table>"
            )
        if len(view.rows) > 1 or len(view.header) > 3:
            parts.append(f"<table class='distcomp-env-ranks'><tr>{head}</tr>{body}</table>")
        return f"{_STYLE}<div class='distcomp-summary distcomp-env'>{''.join(parts)}</div>"
