"""Nodes x processes per node (and TensorFlow's workers / parameter servers), linked to the
component's ``ResourceLayout`` with ``traitlets.link``: the layout object is the value, the
controls are only views of it, so ``configure()``, ``%distcomp env --instance-count`` and the
controls can never disagree."""

from __future__ import annotations

from html import escape
from typing import TYPE_CHECKING

import ipywidgets as w
from traitlets import link

if TYPE_CHECKING:
    from ...core.model import Component

#: no clamping of a layout set from Python (a BoundedIntText clamps to its max)
MAX_COUNT = 100_000
_STYLE = {"description_width": "initial"}
#: room for the value (up to 6 digits) beside its label
_FIELD_EM = 6


def _count(description: str, css: str, minimum: int, tooltip: str) -> w.BoundedIntText:
    # the box grows with its label, so a long label never squeezes the value out of view
    width = f"calc({len(description)}ch + {_FIELD_EM}em)"
    control = w.BoundedIntText(
        value=max(minimum, 1),
        min=minimum,
        max=MAX_COUNT,
        description=description,
        tooltip=tooltip,
        layout=w.Layout(width=width),
        style=_STYLE,
    )
    control.add_class(css)
    return control


class LayoutFields:
    def __init__(self, component: Component):
        self.layout = layout = component.runsettings.resource_layout
        self.launcher_type = component.launcher_type
        self.instance_count = _count(
            "nodes", "distcomp-instance-count", 1, "instance_count (Azure ML: node_count)"
        )
        self.process_count = _count(
            "processes per node",
            "distcomp-process-count",
            1,
            "process_count_per_node (Azure ML: process_count_per_instance)",
        )
        self.links = [
            link((layout, "instance_count"), (self.instance_count, "value")),
            link((layout, "process_count_per_node"), (self.process_count, "value")),
        ]
        launcher = component.launcher.raw_type if component.launcher else None
        shown = self.launcher_type or "none: one process (CommandComponent)"
        if launcher and launcher.lower() != (self.launcher_type or "").lower():
            shown += f" (spec: {launcher})"
        self.launcher = w.HTML(f"launcher <b>{escape(shown)}</b>")
        self.launcher.add_class("distcomp-launcher")
        controls: list[w.Widget] = [self.instance_count, self.process_count, self.launcher]
        self.worker_count = self.parameter_server_count = None
        if self.launcher_type == "tensorflow":
            self.worker_count = _count(
                "workers (0 = one per node)",
                "distcomp-worker-count",
                0,
                "worker_count; 0 leaves it unset: one worker per node, as on Azure ML",
            )
            self.parameter_server_count = _count(
                "parameter servers", "distcomp-ps-count", 0, "parameter_server_count"
            )
            self.links += [
                link(
                    (layout, "worker_count"),
                    (self.worker_count, "value"),
                    transform=(lambda v: 0 if v is None else v, lambda v: v or None),
                ),
                link((layout, "parameter_server_count"), (self.parameter_server_count, "value")),
            ]
            # Azure ML lays TensorFlow out in tasks: process_count_per_node does not apply
            controls[1:2] = [self.worker_count, self.parameter_server_count]
        self.box = w.HBox(controls, layout=w.Layout(flex_flow="row wrap", align_items="center"))
        self.box.add_class("distcomp-layout")

    def close(self) -> None:
        for each in self.links:
            each.unlink()
