"""Run settings: configure() as in the Component SDK, validation, and change notifications."""

from __future__ import annotations

import pytest

from jupyter_distcomp import LayoutError, load_component

from .test_spec import BASE


def test_configure_like_the_component_sdk():
    component = load_component(BASE)
    layout = component.runsettings.resource_layout
    assert (layout.instance_count, layout.process_count_per_node) == (1, 1)
    layout.configure(instance_count=2, process_count_per_node=3)
    assert layout.world_size == 6
    layout.configure(node_count=4)  # the Component SDK's spelling
    assert (layout.instance_count, layout.node_count, layout.process_count_per_node) == (4, 4, 3)
    layout.configure(worker_count=2, parameter_server_count=1)
    assert (layout.worker_count, layout.parameter_server_count) == (2, 1)
    assert "4x3" in repr(component)
    assert "instance_count=4" in repr(component.runsettings)


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        ({"instance_count": 0}, "instance_count must be at least 1"),
        ({"process_count_per_node": -2}, "process_count_per_node must be at least 1"),
        ({"instance_count": "two"}, "must be a whole number"),
        ({"instance_count": 2.5}, "must be a whole number"),
        ({"node_count": 2, "instance_count": 3}, "disagree"),
        ({"parameter_server_count": -1}, "at least 0"),
    ],
)
def test_invalid_values_are_refused_and_nothing_changes(kwargs, words):
    layout = load_component(BASE).runsettings.resource_layout
    layout.configure(instance_count=2, process_count_per_node=2)
    with pytest.raises(LayoutError, match=words):
        layout.configure(**{"process_count_per_node": 5, **kwargs})
    assert (layout.instance_count, layout.process_count_per_node) == (2, 2)


def test_assignment_is_validated_and_observed():
    settings = load_component(BASE).runsettings
    seen = []
    settings.resource_layout.observe(lambda change: seen.append(change["name"]), names=None)
    settings.observe(lambda change: seen.append(change["name"]), names=["inputs"])
    settings.resource_layout.instance_count = 3
    with pytest.raises(LayoutError):
        settings.resource_layout.process_count_per_node = 0
    settings.set_input("lr", 0.5)
    settings.set_input("lr", None)
    assert seen == ["instance_count", "inputs", "inputs"]
    assert settings.inputs == {}
