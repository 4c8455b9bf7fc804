"""The kernel side of the JupyterLab ranks panel: a Jupyter comm named ``jupyter_distcomp``.

Why a comm, and why the kernel opens it: the ranks live in this kernel process, so only the
kernel knows their state; a comm rides the kernel's own websocket (no extra server route,
no port, works for remote kernels and through JupyterHub) and messages arrive as soon as a
rank changes state, even while a cell runs (rank-state events are sent from the backend's
watcher threads on the IOPub channel, which does not wait for the running cell). The kernel
opens the comm at ``%load_ext jupyter_distcomp`` because only then does the notebook use
distcomp: the frontend registers the target on every kernel and learns from the open that
this kernel has ranks to show. A browser reloaded later finds that comm with a
``comm_info_request`` and opens its own to the target registered here, so both directions
work. Actions from the panel (interrupt, restart, stop, refresh, where) come back as comm
messages; those are handled on the shell channel, i.e. after a running cell ends, which is
why the panel interrupts a busy kernel with a kernel interrupt instead (the magics turn that
into SIGINT on every rank).

Every message each way is defined once, in contracts.json's comm schema (the extension's
types are generated from it): requests ``{"action", "name"}`` (a ``RankRequest``), checked
here as they arrive; to the frontend a ``snapshot`` of every world on open and on refresh, a
``world`` on each change (its ``stopped`` when a component's ranks are gone) and a
``result`` after an action (for ``where``, its ``message`` is each rank's stack as text; the
panel offers it while a background cell runs, when the kernel is free to answer). A world
is :meth:`RankBackend.event`'s dict.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..contracts import COMM_SCHEMA, COMM_TARGET

if TYPE_CHECKING:
    from IPython.core.interactiveshell import InteractiveShell

    from ..local.ranks.backend import RankBackend


@functools.cache
def validator(definition: str) -> Callable[[Any], Any]:
    """A check of one message against contracts.json's comm schema (``RankRequest``,
    ``KernelMessage``, ...): raises ``fastjsonschema.JsonSchemaException`` saying what
    does not match."""
    import fastjsonschema

    return fastjsonschema.compile({**COMM_SCHEMA, "$ref": f"#/definitions/{definition}"})


def snapshot_message(worlds: list[dict]) -> dict:
    return {"type": "snapshot", "worlds": worlds}


def world_message(world: dict) -> dict:
    return {"type": "world", "world": world}


def result_message(action: Any, name: Any, ok: bool, message: str) -> dict:
    """How a request ended; ``action`` and ``name`` echo it, as text (None if absent)."""
    echo = [None if value is None else str(value) for value in (action, name)]
    return {"type": "result", "action": echo[0], "name": echo[1], "ok": ok, "message": message}


class RanksChannel:
    """Every open ``jupyter_distcomp`` comm of this kernel, fed by the rank backend."""

    def __init__(
        self, backend: RankBackend, stop: Callable[[str], list[str]] | None = None
    ) -> None:
        self.backend = backend
        #: the Stop button's action, the magic's own (`%distcomp stop NAME`: the ranks and a
        #: background command; what it stopped, one phrase each); None: the ranks only
        self.stop = stop
        self.comms: dict[str, Any] = {}
        self._lock = threading.Lock()

    # -- comms --------------------------------------------------------------------------
    def register(self) -> None:
        """Listen to the backend and accept comms that frontends open to our target."""
        from comm import get_comm_manager

        self.backend.add_listener(self.on_rank_event)
        get_comm_manager().register_target(COMM_TARGET, self.on_frontend_open)

    def announce(self) -> None:
        """Open a comm from the kernel: tells the frontend this kernel uses distcomp."""
        from comm import create_comm

        self._adopt(create_comm(target_name=COMM_TARGET, data=self.snapshot()))

    def on_frontend_open(self, comm: Any, msg: dict) -> None:
        """A frontend (e.g. after a page reload) opened a comm to our target."""
        self._adopt(comm)
        comm.send(self.snapshot())

    def _adopt(self, comm: Any) -> None:
        with self._lock:
            self.comms[comm.comm_id] = comm
        comm.on_msg(self.on_message)
        comm.on_close(lambda msg, comm_id=comm.comm_id: self._forget(comm_id))

    def _forget(self, comm_id: str) -> None:
        with self._lock:
            self.comms.pop(comm_id, None)

    def broadcast(self, data: dict) -> None:
        with self._lock:
            comms = list(self.comms.values())
        for comm in comms:
            try:
                comm.send(data)
            except Exception:  # a frontend that went away must not break the ranks
                self._forget(comm.comm_id)

    # -- state --------------------------------------------------------------------------
    def snapshot(self) -> dict:
        worlds = [self.backend.event(world) for world in list(self.backend.worlds.values())]
        return snapshot_message(worlds)

    def on_rank_event(self, event: dict) -> None:
        """Backend listener; may run on a watcher thread."""
        self.broadcast(world_message(event))

    # -- actions ------------------------------------------------------------------------
    def on_message(self, msg: dict) -> None:
        data = msg.get("content", {}).get("data") or {}
        try:
            validator("RankRequest")(data)
        except ValueError as exc:  # a frontend of another version: say so in its panel
            echo = data if isinstance(data, dict) else {}
            reason = f"unknown request {data!r}: {exc}"
            self._result(echo.get("action"), echo.get("name"), False, reason)
            return
        action, name = str(data["action"]), str(data["name"])
        if action == "refresh":
            self.broadcast(self.snapshot())
            return
        try:
            message = self.perform(action, name)
        except Exception as exc:  # shown in the panel, never a traceback in the log only
            self._result(action, name, False, str(exc))
        else:
            self._result(action, name, True, message)

    def perform(self, action: str, name: str) -> str:
        if action == "interrupt":
            ranks = self.backend.interrupt(name)
            return (
                f"SIGINT sent to {len(ranks)} busy rank(s) of {name}." if ranks else "No busy rank."
            )
        if action == "where":
            from ..local.inspect.where import where

            return where(self.backend.running_world(name)).text()
        if action == "restart":
            world = self.backend.restart(name)
            return f"{name}: {world.world_size} rank(s) restarted."
        if self.stop is None:
            self.backend.stop(name)
            return f"{name}: ranks stopped."
        stopped = self.stop(name)
        return f"Stopped {'; '.join(stopped)}." if stopped else f"Nothing of {name} was running."

    def _result(self, action: Any, name: Any, ok: bool, message: str) -> None:
        self.broadcast(result_message(action, name, ok, message))

    def close(self) -> None:
        """Close our comms and stop listening (``%unload_ext``)."""
        self.backend.remove_listener(self.on_rank_event)
        for comm in list(self.comms.values()):
            try:
                comm.close()
            except Exception:
                pass
        try:
            from comm import get_comm_manager

            get_comm_manager().unregister_target(COMM_TARGET, self.on_frontend_open)
        except Exception:
            pass


def install(
    shell: InteractiveShell | None,
    backend: RankBackend,
    stop: Callable[[str], list[str]] | None = None,
) -> RanksChannel | None:
    """Set up the channel in a kernel (``%load_ext``); ``None`` in a terminal IPython.

    Costs a comm-target registration and one comm open; the backend's module is stdlib
    only (about 10 ms) and ipyparallel is imported only when ranks start.
    """
    if getattr(shell, "kernel", None) is None:
        return None
    channel = RanksChannel(backend, stop)
    channel.register()
    channel.announce()
    return channel
