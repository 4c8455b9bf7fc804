"""The debugger channel: a TCP listener whose every connection proves it holds the key.

One channel per world (and per ``%distcomp command`` run): a random 32-byte key, a listener
on the ranks' address (loopback for local ranks). Each connection must pass
``multiprocessing.connection``'s HMAC challenge both ways within :data:`AUTH_SECONDS`, or it
is closed unread; no one without the key can drive a rank's debugger. The challenges run in
the listener's one thread (listener.py), which bounds what a peer without the key costs: no
thread, a capped number of pending connections, a deadline, small frames.

A rank that stops sends ``{"stop": ...}``; a reader thread per authenticated connection
answers at once (``go``, or ``skip`` for a rank outside ``--debug-ranks``) and queues the
stop. The kernel's main thread takes stops in order of arrival (:meth:`DebugChannel.take`),
see serve.py.
"""

from __future__ import annotations

import json
import os
import queue
import secrets
import socket
import threading
import time
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any

from ...contracts import RankState
from ...machine.node_disks import user_text
from .listener import AUTH_SECONDS, Listener

__all__ = ["AUTH_SECONDS", "DebugChannel", "RankSession"]


class RankSession:
    """One rank's connection: its messages after a stop, in order."""

    def __init__(self, conn: Connection, channel: DebugChannel):
        self.conn = conn
        self.channel = channel
        self.rank = -1
        self.messages: queue.Queue[dict] = queue.Queue()
        self.closed = False
        self._lock = threading.Lock()  # shutdown and close of the descriptor, one at a time
        self._released = False

    def send(self, **message: Any) -> None:
        try:
            self.conn.send_bytes(json.dumps(message).encode())
        except OSError:
            self.closed = True

    def close(self) -> None:
        """Shut the connection down: the reader thread wakes (or, about to read, reads)
        EOF and releases it. Closing it here could free its descriptor for the next rank's
        connection while the reader thread is about to read: that thread would read the
        new connection's bytes (its handshake, its stop)."""
        with self._lock:
            self.closed = True
            if not self._released:
                _shutdown(self.conn)

    def release(self) -> None:
        """Close the connection: by its reader thread once done, or where it has none."""
        with self._lock:
            self.closed = self._released = True
            try:
                self.conn.close()
            except OSError:
                pass

    def read_loop(self) -> None:
        """Reader thread: answer stops, queue everything else for the main thread."""
        try:
            while True:
                # what ranks say names the user's files, not their node's copies
                message = json.loads(user_text(self.conn.recv_bytes().decode()))
                if "hello" in message:
                    self.rank = int(message["hello"])
                elif "stop" in message:
                    if "out" in message:  # pdb's words before the stop (--Return--)
                        self.messages.put({"out": message["out"]})
                    self.channel.stopped(self, message["stop"])
                elif "ask" in message:
                    self.channel.asked(self, message["ask"])
                else:
                    self.messages.put(message)
                    self.channel.changed()
        except (OSError, EOFError, ValueError, TypeError):  # TypeError: closed under us
            pass
        self.release()
        self.messages.put({"end": "closed"})
        self.channel.changed()


class DebugChannel:
    """Listener, key and the queue of stopped ranks of one world."""

    def __init__(self, host: str = "127.0.0.1"):
        self.key = secrets.token_bytes(32)
        self.host = host
        self._server = socket.create_server((host, 0))
        self.port: int = self._server.getsockname()[1]
        self.refused = 0  # connections that failed the key challenge
        self.allowed: set[int] | None = None  # ranks that may stop (None: all)
        self.serving = True  # False between cells: a late stop is interrupted
        self.skipped: set[int] = set()  # ranks whose breakpoint was skipped
        self.on_state: Callable[[int, RankState], None] = lambda rank, state: None
        #: ranks that left the prompt with a step (or a continue to a breakpoint) and may
        #: stop again: pdb still traces them (stopped.py keeps it)
        self.stepping: set[int] = set()
        self.wake: Callable[[], None] = lambda: None
        self._stops: list[tuple[RankSession, dict]] = []
        self._cond = threading.Condition()
        self._sessions: list[RankSession] = []
        self._closed = False
        self.version = 0  # counts stops and messages: what a waiter has seen
        self._listener = Listener(self._server, self.key, self._admit, self._refuse)

    @property
    def key_hex(self) -> str:
        return self.key.hex()

    def rank_environment(self, rank: int, base: dict[str, str]) -> dict[str, str]:
        """Variables that make ``breakpoint()`` in a process of rank ``rank`` connect here
        (a ``PYTHONBREAKPOINT`` the user set in ``base`` wins)."""
        from ...rank_side.debug_hook import ENV_ADDRESS, ENV_KEY, HOOK

        env = {ENV_ADDRESS: f"{self.host}:{self.port}:{rank}", ENV_KEY: self.key_hex}
        if "PYTHONBREAKPOINT" not in base:
            env["PYTHONBREAKPOINT"] = HOOK
        return env

    @property
    def accept_errors(self) -> int:
        """Failed accept() calls the listener went on after."""
        return self._listener.accept_errors

    @property
    def pending_connections(self) -> int:
        """Connections in their key challenge now."""
        return len(self._listener.pending)

    # -- connections --------------------------------------------------------------------
    def _refuse(self) -> None:
        self.refused += 1

    def _admit(self, sock: socket.socket) -> None:
        """Listener thread: ``sock`` passed the challenge; its reader thread serves it."""
        session = RankSession(Connection(sock.detach()), self)
        with self._cond:
            if self._closed:
                session.release()
                return
            self._sessions.append(session)
        try:
            threading.Thread(target=session.read_loop, daemon=True).start()
        except RuntimeError:  # no thread to be had: this rank gets no prompt
            session.release()

    # -- stops --------------------------------------------------------------------------
    def stopped(self, session: RankSession, where: dict) -> None:
        """Reader thread: a rank stopped at ``where``; serve it, or tell it to go on."""
        if not self.serving:  # its cell ended (interrupted) before it stopped
            session.send(interrupt="the cell ended")
            return
        if self.allowed is not None and session.rank not in self.allowed:
            self.skipped.add(session.rank)
            session.send(skip="not in --debug-ranks")
            return
        self.on_state(session.rank, RankState.DEBUGGING)
        with self._cond:
            self._stops.append((session, where))
            self.version += 1
            self._cond.notify_all()
        session.send(go=True)
        self.wake()

    def changed(self) -> None:
        """A rank sent something: wake :meth:`wait_change`."""
        with self._cond:
            self.version += 1
            self._cond.notify_all()

    def wait_change(self, seen: int, timeout: float) -> None:
        """Until a stop or message arrives after ``version`` was ``seen``, or ``timeout`` s."""
        with self._cond:
            if self.version == seen:
                self._cond.wait(timeout)

    def asked(self, session: RankSession, ask: dict) -> None:
        """Reader thread: ``input()`` on a rank; queued with the stops (``{"ask": ...}``), so
        it is served where they are: in the cell, or at ``%distcomp wait``."""
        if not self.serving:
            session.send(interrupt="the cell ended")
            return
        with self._cond:
            self._stops.append((session, {"ask": ask}))
            self.version += 1
            self._cond.notify_all()
        self.wake()

    def pending(self) -> bool:
        return bool(self._stops)

    def stops(self) -> list[tuple[RankSession, dict]]:
        """The stops waiting for their prompt, left in the queue."""
        with self._cond:
            return list(self._stops)

    def stopped_ranks(self) -> dict[int, dict]:
        """The ranks waiting for their prompt, each with where it stopped."""
        with self._cond:
            return {session.rank: where for session, where in self._stops}

    def take(
        self, prefer: RankSession | None = None, wait: float = 0.0
    ) -> tuple[RankSession, dict] | None:
        """The next stop: ``prefer``'s if it stops within ``wait`` s, else the oldest."""
        deadline = time.monotonic() + wait
        with self._cond:
            while True:
                for index, (session, _) in enumerate(self._stops):
                    if session is prefer:
                        return self._stops.pop(index)
                left = deadline - time.monotonic()
                if prefer is None or prefer.closed or left <= 0:
                    break
                self._cond.wait(min(left, 0.05))
            return self._stops.pop(0) if self._stops else None

    def end_sessions(self) -> None:
        """Close every rank's connection: ranks at a prompt read EOF and quit pdb."""
        with self._cond:
            sessions, self._sessions, self._stops = self._sessions, [], []
        for session in sessions:
            session.close()

    def close(self) -> None:
        self._closed = True
        self._listener.close()  # its thread closes the pending connections and returns
        self._listener.thread.join(timeout=2)
        try:
            self._server.close()
        except OSError:
            pass
        self.end_sessions()


def _shutdown(conn: Any) -> None:
    """shutdown(2) a socket or a Connection's socket: a thread blocked reading it returns
    (close alone neither wakes it nor tells the peer while that read holds the socket)."""
    try:
        with socket.socket(fileno=os.dup(conn.fileno())) as sock:
            sock.shutdown(socket.SHUT_RDWR)
    except (OSError, ValueError, TypeError):
        pass
