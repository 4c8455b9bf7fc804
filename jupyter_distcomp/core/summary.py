"""A component as every view summarises it, as data: the views (``notebook/views``) lay it
out as text or HTML, so the definition's summary, ``%distcomp list`` and the panel agree."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .layout import layout_text, tensorflow_tasks
from .secrets import masked_variable_repr

if TYPE_CHECKING:
    from .model import Component, Input


@dataclass(frozen=True)
class PortRow:
    """One input or output: its name, type, attributes (optional, default, range, choices)
    and description."""

    name: str
    type: str
    attributes: str
    description: str


@dataclass(frozen=True)
class ComponentSummary:
    title: str  # the display name, else the name
    name: str
    version: str | None
    type: str
    launcher: str  # "none (one process)" for a component without launcher
    layout: str  # :func:`layout_caption`
    environment: str
    inputs: tuple[PortRow, ...]
    outputs: tuple[PortRow, ...]
    command: str  # the template on one line
    warnings: tuple[str, ...]


def component_summary(component: Component) -> ComponentSummary:
    return ComponentSummary(
        title=component.display_name or component.name,
        name=component.name,
        version=component.version,
        type=component.type,
        launcher=component.launcher.type if component.launcher else "none (one process)",
        layout=layout_caption(component),
        environment=environment_text(component),
        inputs=tuple(
            PortRow(i.name, type_text(i.type), input_attributes(i), i.description or "")
            for i in component.inputs.values()
        ),
        outputs=tuple(
            PortRow(o.name, type_text(o.type), "", o.description or "")
            for o in component.outputs.values()
        ),
        command=" ".join(component.command_template.split()),
        warnings=tuple(component.warnings),
    )


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


def pending_text(running: str, upcoming: str) -> str:
    """How every view says that the settings changed while ranks run (their layout, or their
    hosts or connection): the ranks keep running as they are until the next run."""
    if running == upcoming:
        return f"running {running}; next run restarts them (other hosts or connection)"
    return f"running {running}; next run restarts as {upcoming}"


def type_text(value: Any) -> str:
    """A port type as written; a list of types joined with ``|``."""
    return " | ".join(value) if isinstance(value, tuple) else str(value)


def input_attributes(inp: Input) -> str:
    parts = []
    if inp.optional:
        parts.append("optional")
    if inp.default is not None:
        parts.append(f"default {masked_variable_repr(inp.name, inp.default)}")
    if inp.min is not None or inp.max is not None:
        parts.append(bounds_text(inp.min, inp.max))
    if inp.enum:
        parts.append("one of " + ", ".join(inp.enum))
    return "; ".join(parts)


def same_words(a: str, b: str) -> bool:
    """``mpi_train``, ``MPI train`` and ``mpi-train`` say the same: a title that says what
    the name says is shown once."""

    def words(text: str) -> str:
        return " ".join(text.replace("_", " ").replace("-", " ").lower().split())

    return words(a) == words(b)


def bounds_text(low: object, high: object) -> str:
    """An input's range as people write it: ``>= 0``, ``<= 9``, ``1 to 4`` (None: no bound)."""
    if low is not None and high is not None:
        return f"{low} to {high}"
    return f">= {low}" if low is not None else f"<= {high}"


def environment_text(component: Component) -> str:
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


__all__ = ["ComponentSummary", "PortRow", "component_summary", "layout_caption", "pending_text"]
