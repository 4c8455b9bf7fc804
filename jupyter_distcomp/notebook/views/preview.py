"""What a run with the current settings would be: world size, each rank's variables, and the
command rank 0 executes. Pure functions of the component (no widgets), so the panel's preview
and its text fallback (terminals, nbconvert) say the same thing.

A setting that cannot run yet (a TensorFlow worker count that does not add up, a required
input without value) is shown as a message in the preview: the user is mid-edit, so it is
information, never a traceback.
"""

from __future__ import annotations

from html import escape
from typing import TYPE_CHECKING, Any

from ...core.bindings import input_values, output_values
from ...core.layout import PORT_AT_START, layout_text, tensorflow_tasks
from ...core.rank_view import rank_view
from ...core.secrets import (
    mask_secrets,
    masked,
    masked_command,
    masked_variable_repr,
    secret_values,
)
from ...errors import DistcompError
from .code_marks import rich

if TYPE_CHECKING:
    from ...core.model import Component

#: ranks shown in the table; larger worlds show the first and last ones
MAX_ROWS = 8

Envs = list[dict[str, str]]


def _layout_line(component: Component) -> str:
    layout = component.runsettings.resource_layout
    if component.launcher_type != "tensorflow":
        shape = layout_text(layout.instance_count, layout.process_count_per_node)
        return f"world size {layout.world_size} = {shape} per node"
    workers, ps = tensorflow_tasks(
        layout.instance_count, layout.worker_count, layout.parameter_server_count
    )
    return (
        f"world size {workers + ps} = {workers} worker(s), {ps} parameter server(s) on "
        f"{layout.instance_count} node(s)"
    )


def rank_rows(component: Component, envs: Envs) -> tuple[list[str], list[list[str]], dict]:
    """(header, rows, variables equal on every rank) of ``envs`` (``Session.rank_values``);
    rows are cut to MAX_ROWS (with '...')."""
    launcher = component.launcher_type
    if launcher is None:
        return [], [], {}
    view = rank_view(launcher, envs).cut(MAX_ROWS)
    return view.header, view.rows, view.shared


def command_line(component: Component) -> str:
    """Rank 0's command line with the run settings (unset outputs at their default folder),
    or a DistcompError saying what is missing or invalid."""
    values = input_values(component)
    argv = component.render_command(values, output_values(component))
    return masked_command(argv, secret_values(values))


def _try(func: Any, *args: Any) -> tuple[Any, str]:
    try:
        return func(*args), ""
    except DistcompError as exc:
        return None, mask_secrets(str(exc))


def _envs(component: Component, envs: Envs | None) -> Envs:
    """``envs`` as given, else the layout's with ``PORT_AT_START`` (raises LayoutError)."""
    return envs if envs is not None else component.rank_environments(master_port=PORT_AT_START)


def preview_html(component: Component, envs: Envs | None = None) -> str:
    """The panel's preview of ``envs`` (``Session.rank_values``)."""
    parts = [f"<div><b>{escape(_layout_line(component))}</b></div>"]
    table, problem = _try(lambda: rank_rows(component, _envs(component, envs)))
    if problem:
        parts.append(
            f"<div class='distcomp-preview-error' style='color:#c00'>{rich(problem)}</div>"
        )
    elif table and table[0]:
        header, rows, same = table
        if len(rows) > 1:  # one rank: its variables are all in the line below
            head = "".join(f"<th>{escape(h)}</th>" for h in header)
            body = "".join(
                "<tr>" + "".join(f"<td>{escape(c)}</td>" for c in row) + "</tr>" for row in rows
            )
            parts.append(
                "<div class='distcomp-table-scroll'>"
                f"<table class='distcomp-rank-table'><tr>{head}</tr>{body}</table></div>"
            )
        if same:
            where = "on every rank" if len(rows) > 1 else "rank 0 (node 0, local rank 0) gets"
            shared = ", ".join(f"{k}={v}" for k, v in same.items())
            parts.append(f"<div><small>{where}: <code>{escape(shared)}</code></small></div>")
    command, problem = _try(command_line, component)
    if problem:
        parts.append(
            "<div class='distcomp-command-error' style='color:#a60'>command: cannot be "
            f"rendered yet: {rich(problem)}</div>"
        )
    else:
        parts.append(
            f"<div class='distcomp-command'>rank 0 runs: <code>{escape(command)}</code></div>"
        )
    # a wide table scrolls in its own box; long lines wrap: the panel never grows sideways.
    # Scoped to the preview: the ranks panel has a table of the same class
    style = (
        "<style>.distcomp-preview .distcomp-rank-table{border-collapse:collapse;font-size:90%;"
        "width:auto}"
        ".distcomp-preview .distcomp-rank-table td,.distcomp-preview .distcomp-rank-table th"
        "{padding:1px 8px;white-space:nowrap;"
        "line-height:1.4}"
        ".distcomp-table-scroll{overflow-x:auto;max-width:100%}"
        ".distcomp-preview>.widget-html-content{min-width:0;max-width:100%;line-height:1.4}"
        ".distcomp-preview code{white-space:pre-wrap;overflow-wrap:anywhere;line-height:1.4}"
        "</style>"
    )
    return style + "".join(parts)


def summary_text(component: Component, name: str, envs: Envs | None = None) -> str:
    """The panel as text: what a terminal or nbconvert shows instead of the controls."""
    settings = component.runsettings
    lines = [f"distcomp run settings of {name} ({component.launcher_type or 'no launcher'})"]
    lines.append(f"  layout:  {_layout_line(component)}")
    for inp in component.inputs.values():
        if inp.name in settings.inputs:
            shown = masked_variable_repr(inp.name, settings.inputs[inp.name])
        elif inp.is_parameter and inp.default is not None:
            shown = f"{masked_variable_repr(inp.name, inp.default)} (default)"
        else:
            shown = "unset" + ("" if inp.optional else " (required)")
        lines.append(f"  input   {inp.name} = {shown}")
    for out_name, path in output_values(component).items():
        lines.append(f"  output  {out_name} -> {masked(path)}")
    if settings.compute:
        lines.append(f"  compute: {settings.compute}")
    table, problem = _try(lambda: rank_rows(component, _envs(component, envs)))
    if problem:
        lines.append(f"  layout problem: {problem}")
    elif table and table[0]:
        header, rows, same = table
        rows = rows if len(rows) > 1 else []
        if rows:
            widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(header)]
            fmt = "    " + "  ".join(f"{{:<{n}}}" for n in widths)
            lines += [fmt.format(*header).rstrip()] + [fmt.format(*r).rstrip() for r in rows]
        if same:
            where = "on every rank" if rows else "rank 0 gets"
            lines.append(f"    {where}: " + ", ".join(f"{k}={v}" for k, v in same.items()))
    command, problem = _try(command_line, component)
    lines.append(f"  rank 0 runs: {command}" if command else f"  command: {problem}")
    return "\n".join(lines)
