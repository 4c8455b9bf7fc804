"""Widgets made on ranks (a ``tqdm.notebook`` bar, an ``IntProgress``) survive a reload of
the page, as widgets of the kernel's own do.

ipyparallel relays a rank's widget messages to the notebook through the kernel, with a proxy
comm in the kernel for each widget; the widget itself lives on its rank. A page that loads
asks the kernel for every widget: ipywidgets 8 asks its control comm for their states
(``request_states``), older frontends list the ``jupyter.widget`` comms (``comm_info``) and
ask each for its state. The kernel knows its own widgets only, so a rank's widget showed
"model not found" after a reload. Here the kernel keeps the latest state of each rank widget
from the messages relayed (:func:`seen`), adds them to the control comm's answer, and names
the proxy comms' target so that ``comm_info`` lists them.
"""

from __future__ import annotations

import copy
from typing import Any

WIDGET_TARGET = "jupyter.widget"
#: rank widgets whose state the kernel keeps at most (the oldest are forgotten)
KEPT = 10_000

#: comm id -> {"model_name", "model_module", "model_module_version", "state"}; binary
#: buffers (rare in displays: images) stay beside as (paths, buffers)
_states: dict[str, dict[str, Any]] = {}
_buffers: dict[str, tuple[list, list]] = {}
_installed = False


def seen(kind: str, msg: dict) -> None:
    """One comm message a rank sent (relayed to the notebook by ipyparallel)."""
    content = msg.get("content") or {}
    comm_id = content.get("comm_id")
    if not comm_id:
        return
    data = content.get("data") or {}
    if kind == "comm_open" and content.get("target_name") == WIDGET_TARGET:
        state = dict(data.get("state") or {})
        _states[comm_id] = {
            "model_name": state.get("_model_name"),
            "model_module": state.get("_model_module"),
            "model_module_version": state.get("_model_module_version"),
            "state": state,
        }
        _keep_buffers(comm_id, data, msg)
        while len(_states) > KEPT:
            _forget(next(iter(_states)))
        _name_proxy(comm_id)
        install()
    elif (
        kind == "comm_msg"
        and comm_id in _states
        and data.get("method") in ("update", "echo_update")
    ):
        _states[comm_id]["state"].update(data.get("state") or {})
        _keep_buffers(comm_id, data, msg)
    elif kind == "comm_close":
        _forget(comm_id)


def _keep_buffers(comm_id: str, data: dict, msg: dict) -> None:
    paths = data.get("buffer_paths") or []
    if paths:
        _buffers[comm_id] = (list(paths), list(msg.get("buffers") or []))


def _forget(comm_id: str) -> None:
    _states.pop(comm_id, None)
    _buffers.pop(comm_id, None)


def _name_proxy(comm_id: str) -> None:
    """ipyparallel's proxy comm of a widget under the widgets' target, for ``comm_info``."""
    from IPython import get_ipython

    kernel = getattr(get_ipython(), "kernel", None)
    comms = getattr(getattr(kernel, "comm_manager", None), "comms", {})
    proxy = comms.get(comm_id)
    if proxy is not None and proxy.target_name in ("", "comm"):  # ipykernel's default name
        proxy.target_name = WIDGET_TARGET


def states() -> tuple[dict[str, dict], list, list]:
    """The rank widgets' states as ipywidgets' control comm sends them: ``(states,
    buffer_paths, buffers)``, paths from the widget's id."""
    found = copy.deepcopy(_states)
    paths: list = []
    buffers: list = []
    for comm_id, (own_paths, own_buffers) in _buffers.items():
        if comm_id in found:
            paths += [[comm_id, "state", *path] for path in own_paths]
            buffers += own_buffers
    return found, paths, buffers


def install() -> None:
    """Answer ipywidgets' ``request_states`` with the rank widgets too (once; a no-op
    without ipywidgets). Importing ipywidgets in a kernel registers its control comm."""
    global _installed
    if _installed:
        return
    try:
        from ipywidgets import Widget
    except ImportError:
        return
    original = Widget.__dict__["_handle_control_comm_msg"].__func__

    def handle(cls: Any, msg: dict) -> None:
        data = (msg.get("content") or {}).get("data") or {}
        control = cls._control_comm
        if data.get("method") != "request_states" or not _states or control is None:
            original(cls, msg)
            return
        sent: dict[str, Any] = {}

        def capture(data: Any = None, metadata: Any = None, buffers: Any = None) -> None:
            sent.update(data=data, metadata=metadata, buffers=buffers)

        control.send = capture  # the kernel's own widgets, as ipywidgets says them
        try:
            original(cls, msg)
        finally:
            del control.send
        reply = dict(sent.get("data") or {})
        ours, paths, buffers = states()
        reply["states"] = {**ours, **(reply.get("states") or {})}
        reply["buffer_paths"] = list(reply.get("buffer_paths") or []) + paths
        control.send(
            reply, metadata=sent.get("metadata"), buffers=[*(sent.get("buffers") or []), *buffers]
        )

    Widget._handle_control_comm_msg = classmethod(handle)
    _installed = True
