"""``%load_ext jupyter_distcomp``: a session for the shell, its magics, its ``%config``
settings, how a component displays, and the JupyterLab ranks panel's channel;
``%unload_ext`` undoes each of them."""

from __future__ import annotations

import atexit
from typing import TYPE_CHECKING, Any

from . import completion
from .magics import DistCompMagics
from .session import Session

if TYPE_CHECKING:
    from IPython.core.interactiveshell import InteractiveShell

    from ..core.model import Component

#: the component's class, as IPython finds a formatter for it before the class is imported
COMPONENT = ("jupyter_distcomp.core.model", "Component")


def _html(component: Component) -> str:
    from .views.component import component_html

    return component_html(component)


def _text(component: Component, printer: Any, cycle: bool) -> None:
    from .views.component import pretty

    pretty(component, printer, cycle)


def load(ipython: InteractiveShell) -> None:
    session = Session(ipython)
    magics = DistCompMagics(ipython, session)
    ipython.register_magics(magics)
    configurables: list[Any] = ipython.configurables  # `%config` lists and sets these
    for configurable in session.configurables:
        if configurable not in configurables:
            configurables.append(configurable)
    if ipython.display_formatter is not None:  # how a component shows (core has no display)
        formatters = ipython.display_formatter.formatters
        formatters["text/html"].for_type_by_name(*COMPONENT, _html)
        formatters["text/plain"].for_type_by_name(*COMPONENT, _text)
    completion.install(ipython)  # Tab in a `%%distcomp NAME` cell: the spec's keys
    atexit.register(session.shutdown)
    session.open_channel()  # the JupyterLab ranks panel's channel (a no-op outside a kernel)


def unload(ipython: InteractiveShell) -> None:
    magics = ipython.magics_manager.registry.pop("DistCompMagics", None)
    if magics is None:
        return
    session = magics.session
    completion.uninstall(ipython)
    atexit.unregister(session.shutdown)
    session.close()
    configurables: list[Any] = ipython.configurables
    for configurable in (*session.configurables, magics):
        if configurable in configurables:
            configurables.remove(configurable)
    if ipython.display_formatter is not None:
        for formatter in ("text/html", "text/plain"):
            ipython.display_formatter.formatters[formatter].pop(".".join(COMPONENT), None)
