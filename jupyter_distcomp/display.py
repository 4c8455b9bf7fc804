"""HTML and plain-text views of a component and of its per-rank variables (no IPython needed)."""

from __future__ import annotations

from html import escape
from typing import TYPE_CHECKING, Any

from .layout import layout_text

if TYPE_CHECKING:
    from collections.abc import Sequence

    from .model import Component, Input

_STYLE = (
    "<style>.distcomp-summary table{border-collapse:collapse;margin:4px 0}"
    ".distcomp-summary td,.distcomp-summary th{padding:2px 8px;text-align:left;"
    "border-bottom:1px solid #ddd;vertical-align:top}"
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
    if inp.min is not None or inp.max is not None:
        parts.append(
            f"range [{'' if inp.min is None else inp.min}, {'' if inp.max is None else inp.max}]"
        )
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


def _layout_text(component: Component) -> str:
    layout = component.runsettings.resource_layout
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
        f"  layout:      {_layout_text(component)}",
        f"  environment: {_environment_text(component)}",
        "  inputs:",
    ]
    for inp in component.inputs.values():
        attrs = _input_attrs(inp)
        lines.append(f"    {inp.name}: {_type_text(inp.type)}" + (f" ({attrs})" if attrs else ""))
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
    return (
        f"{_STYLE}<div class='distcomp-summary'>"
        f"<div><b>{title}</b> <code>{escape(component.name)}</code> "
        f"{escape(component.version or '')} &middot; {escape(component.type)} &middot; "
        f"launcher <b>{escape(launcher)}</b> &middot; {escape(_layout_text(component))}</div>"
        f"{warnings}"
        f"<table><tr><th colspan=4>inputs</th></tr>{rows}"
        f"<tr><th colspan=4>outputs</th></tr>{outs}</table>"
        f"<div>command: <code>{escape(' '.join(component.command_template.split()))}</code></div>"
        f"<div>environment: {escape(_environment_text(component))}</div></div>"
    )


class EnvTable:
    """The variables each rank sees: rank, node, local rank, then the variables."""

    def __init__(
        self,
        component: Component,
        master_addr: str = "127.0.0.1",
        node_hosts: Sequence[str] | None = None,
    ):
        self.component = component
        self.envs = component.rank_environments(master_addr=master_addr, node_hosts=node_hosts)
        ppn = component.runsettings.resource_layout.process_count_per_node
        self.columns = list(dict.fromkeys(k for env in self.envs for k in env))
        self.rows = [
            [str(rank), str(rank // ppn), str(rank % ppn)] + [env.get(c, "") for c in self.columns]
            for rank, env in enumerate(self.envs)
        ]
        self.header = ["rank", "node", "local rank", *self.columns]

    def __repr__(self) -> str:
        widths = [max(len(h), *(len(r[i]) for r in self.rows)) for i, h in enumerate(self.header)]
        fmt = "  ".join(f"{{:<{w}}}" for w in widths)
        return "\n".join([fmt.format(*self.header)] + [fmt.format(*r) for r in self.rows])

    def _repr_html_(self) -> str:
        head = "".join(f"<th>{escape(h)}</th>" for h in self.header)
        body = "".join(
            "<tr>" + "".join(f"<td><code>{escape(c)}</code></td>" for c in row) + "</tr>"
            for row in self.rows
        )
        layout = self.component.runsettings.resource_layout
        launcher = self.component.launcher_type or "mpi"
        caption = escape(
            f"{launcher}: {layout_text(layout.instance_count, layout.process_count_per_node)}"
        )
        return (
            f"{_STYLE}<div class='distcomp-summary distcomp-env'><div>{caption}</div>"
            f"<table><tr>{head}</tr>{body}</table></div>"
        )
