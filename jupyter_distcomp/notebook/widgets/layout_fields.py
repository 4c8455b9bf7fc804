"""Nodes x processes per node (and TensorFlow's workers / parameter servers), bound to the
component's ``ResourceLayout``: the layout object is the value, the controls are only views
of it, so ``configure()``, ``%distcomp layout`` and the controls can never disagree. An edit
the layout refuses (2000 nodes) puts the control back to the value the layout holds and says
why beside the controls."""

from __future__ import annotations

from collections.abc import Callable
from html import escape
from typing import TYPE_CHECKING, Any

import ipywidgets as w
from traitlets import TraitError

from ...errors import LayoutError

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


class _Binding:
    """``control.value`` shows ``layout.<attr>`` (through ``shown``); an edit of the control
    sets it (through ``stored``), and one the layout refuses is undone and reported."""

    def __init__(
        self,
        layout: Any,
        attr: str,
        control: w.ValueWidget,
        refused: Callable[[str], None],
        shown: Callable[[Any], Any] = lambda v: v,
        stored: Callable[[Any], Any] = lambda v: v,
    ):
        self.layout, self.attr, self.control = layout, attr, control
        self.refused, self.shown, self.stored = refused, shown, stored
        self._syncing = False
        control.value = shown(getattr(layout, attr))
        layout.observe(self._from_layout, names=attr)
        control.observe(self._from_control, names="value")

    def _from_layout(self, change: Any = None) -> None:
        self._syncing = True
        try:
            self.control.value = self.shown(getattr(self.layout, self.attr))
        finally:
            self._syncing = False

    def _from_control(self, change: Any) -> None:
        if self._syncing:
            return
        try:
            setattr(self.layout, self.attr, self.stored(change["new"]))
        except (LayoutError, TraitError) as exc:
            self._from_layout()  # the control shows what the settings hold
            self.refused(str(exc))
        else:
            self.refused("")

    def unlink(self) -> None:
        self.layout.unobserve(self._from_layout, names=self.attr)
        self.control.unobserve(self._from_control, names="value")


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
        #: why the last edit was refused (empty after one the layout took)
        self.message = w.HTML("")
        self.message.add_class("distcomp-layout-message")
        self.links = [
            _Binding(layout, "instance_count", self.instance_count, self._refused),
            _Binding(layout, "process_count_per_node", self.process_count, self._refused),
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
                _Binding(
                    layout,
                    "worker_count",
                    self.worker_count,
                    self._refused,
                    shown=lambda v: 0 if v is None else v,
                    stored=lambda v: v or None,
                ),
                _Binding(
                    layout, "parameter_server_count", self.parameter_server_count, self._refused
                ),
            ]
            # Azure ML lays TensorFlow out in tasks: process_count_per_node does not apply
            controls[1:2] = [self.worker_count, self.parameter_server_count]
        controls.append(self.message)
        self.box = w.HBox(controls, layout=w.Layout(flex_flow="row wrap", align_items="center"))
        self.box.add_class("distcomp-layout")

    def _refused(self, reason: str) -> None:
        self.message.value = (
            f"<span style='color:#c00'>&#10007; not applied: {escape(reason)}</span>"
            if reason
            else ""
        )

    def close(self) -> None:
        for each in self.links:
            each.unlink()
