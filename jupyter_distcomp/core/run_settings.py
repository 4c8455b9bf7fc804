"""The run settings of one component: the single source of truth.

The widget, ``NAME.runsettings.resource_layout.configure(...)``, the ``%distcomp`` flags and
the ``%config`` defaults all read and write these objects; nothing keeps a copy. They are
traitlets objects so that observers (the widget, the ranks backend) hear about every change.
"""

from __future__ import annotations

from typing import Any

from traitlets import Dict, HasTraits, Int, TraitError, Unicode, validate

from ..errors import LayoutError

#: the largest layout a component may have: Azure ML's largest clusters fit, a typo does not
MAXIMUM = {
    "instance_count": 1024,
    "process_count_per_node": 1024,
    "worker_count": 65536,
    "parameter_server_count": 1024,
}
MAX_WORLD_SIZE = 65536


def positive(name: str, value: Any, minimum: int = 1) -> int:
    """``value`` as a whole number of at least ``minimum`` and at most ``MAXIMUM[name]``;
    a LayoutError naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, int):
        try:
            as_int = int(str(value).strip())
        except ValueError:
            raise LayoutError(
                f"{name} must be a whole number, got {value!r}. Fix: pass an integer such as "
                f"{name}={max(minimum, 1)}."
            ) from None
        value = as_int
    if value < minimum:
        raise LayoutError(
            f"{name} must be at least {minimum}, got {value}. Fix: pass {name}={max(minimum, 1)} "
            "or more."
        )
    maximum = MAXIMUM.get(name)
    if maximum is not None and value > maximum:
        raise LayoutError(
            f"{name} must be at most {maximum:,}, got {value:,}. Fix: pass a smaller {name}."
        )
    return value


def check_world(instance_count: int, process_count_per_node: int) -> None:
    """A LayoutError if nodes x processes per node is more ranks than a layout may have."""
    if instance_count * process_count_per_node > MAX_WORLD_SIZE:
        raise LayoutError(
            f"instance_count={instance_count:,} x process_count_per_node="
            f"{process_count_per_node:,} makes {instance_count * process_count_per_node:,} "
            f"ranks; a layout has at most {MAX_WORLD_SIZE:,}. Fix: fewer nodes or processes "
            "per node."
        )


class ResourceLayout(HasTraits):
    """Nodes, processes per node and, for TensorFlow, workers and parameter servers."""

    instance_count = Int(1, help="Number of nodes (Azure ML instance_count, alias node_count).")
    process_count_per_node = Int(1, help="Processes per node (Azure process_count_per_instance).")
    worker_count = Int(None, allow_none=True, help="TensorFlow workers (default: all ranks).")
    parameter_server_count = Int(0, help="TensorFlow parameter servers.")

    @validate("instance_count", "process_count_per_node")
    def _check_positive(self, proposal):
        name = proposal["trait"].name
        value = positive(name, proposal["value"])
        if name == "instance_count":
            check_world(value, self.process_count_per_node)
        else:
            check_world(self.instance_count, value)
        return value

    @validate("worker_count")
    def _check_workers(self, proposal):
        value = proposal["value"]
        return None if value is None else positive("worker_count", value)

    @validate("parameter_server_count")
    def _check_ps(self, proposal):
        return positive("parameter_server_count", proposal["value"], minimum=0)

    @property
    def node_count(self) -> int:
        return self.instance_count

    @node_count.setter
    def node_count(self, value: int) -> None:
        self.instance_count = value

    @property
    def world_size(self) -> int:
        return self.instance_count * self.process_count_per_node

    def configure(
        self,
        instance_count: int | None = None,
        process_count_per_node: int | None = None,
        *,
        node_count: int | None = None,
        worker_count: int | None = None,
        parameter_server_count: int | None = None,
    ) -> ResourceLayout:
        """Set the layout as the Component SDK does; all values are checked before any is set."""
        if node_count is not None and instance_count is not None and node_count != instance_count:
            raise LayoutError(
                f"node_count={node_count} and instance_count={instance_count} disagree: they are "
                "the same setting. Fix: pass only one of them."
            )
        if node_count is not None:
            instance_count = node_count
        changes: dict[str, Any] = {}
        if instance_count is not None:
            changes["instance_count"] = positive("instance_count", instance_count)
        if process_count_per_node is not None:
            changes["process_count_per_node"] = positive(
                "process_count_per_node", process_count_per_node
            )
        if worker_count is not None:
            changes["worker_count"] = positive("worker_count", worker_count)
        if parameter_server_count is not None:
            changes["parameter_server_count"] = positive(
                "parameter_server_count", parameter_server_count, minimum=0
            )
        check_world(
            changes.get("instance_count", self.instance_count),
            changes.get("process_count_per_node", self.process_count_per_node),
        )
        with self.hold_trait_notifications():
            for key, value in changes.items():
                setattr(self, key, value)
        return self

    def as_dict(self) -> dict[str, Any]:
        return {
            "instance_count": self.instance_count,
            "process_count_per_node": self.process_count_per_node,
            "worker_count": self.worker_count,
            "parameter_server_count": self.parameter_server_count,
        }

    def __repr__(self) -> str:
        extra = ""
        if self.worker_count is not None or self.parameter_server_count:
            extra = (
                f", worker_count={self.worker_count}, "
                f"parameter_server_count={self.parameter_server_count}"
            )
        return (
            f"ResourceLayout(instance_count={self.instance_count}, "
            f"process_count_per_node={self.process_count_per_node}{extra})"
        )


class RunSettings(HasTraits):
    """Everything a run needs besides the spec: layout, input and output bindings, target."""

    inputs = Dict(help="Input name -> value (parameters) or path/URI (data inputs).")
    outputs = Dict(help="Output name -> local folder or URI.")
    compute = Unicode(None, allow_none=True, help="Azure ML compute target for submission.")

    def __init__(self, **kwargs: Any):
        super().__init__(**kwargs)
        self.resource_layout = ResourceLayout()

    def copy(self) -> RunSettings:
        """Settings equal to these, unbound from them (a preview changes the copy only)."""
        other = RunSettings(inputs=dict(self.inputs), outputs=dict(self.outputs))
        other.compute = self.compute
        layout = self.resource_layout
        other.resource_layout.configure(
            layout.instance_count,
            layout.process_count_per_node,
            worker_count=layout.worker_count,
            parameter_server_count=layout.parameter_server_count,
        )
        return other

    def set_input(self, name: str, value: Any) -> None:
        """Bind (or with None, unbind) one input; observers see a new dict."""
        updated = dict(self.inputs)
        if value is None:
            updated.pop(name, None)
        else:
            updated[name] = value
        self.inputs = updated

    def set_output(self, name: str, value: Any) -> None:
        updated = dict(self.outputs)
        if value is None:
            updated.pop(name, None)
        else:
            updated[name] = value
        self.outputs = updated

    def __repr__(self) -> str:
        return (
            f"RunSettings(resource_layout={self.resource_layout!r}, inputs={self.inputs!r}, "
            f"outputs={self.outputs!r}, compute={self.compute!r})"
        )


__all__ = ["ResourceLayout", "RunSettings", "TraitError"]
