"""The summary a ``%%distcomp NAME`` cell shows above its panel, kept true: in a kernel it is
redrawn (through its display id) whenever the layout changes, whether the panel, a
``configure()`` call or a ``%distcomp`` flag changed it."""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING, Any

from IPython.display import display

if TYPE_CHECKING:
    from ...core.model import Component

#: layout -> the observer of its live summary (one: the newest definition's)
_live_summaries: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()


def show_summary(component: Component, live: bool) -> None:
    """Display the component's summary; ``live``: it follows the component's layout."""
    if not live:
        display(component)
        return
    handle = display(component, display_id=True)

    def update(change: Any) -> None:
        handle.update(component)

    layout = component.runsettings.resource_layout
    previous = _live_summaries.get(layout)
    if previous is not None:  # a redefinition carried the layout over: follow it from here
        layout.unobserve(previous)
    layout.observe(update)
    _live_summaries[layout] = update


__all__ = ["show_summary"]
