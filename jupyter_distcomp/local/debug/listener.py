"""The debugger channel's listener: one thread, a selector, and every connection that has
not yet proved it holds the key.

What a peer without the key can cost the kernel is bounded here: no thread of its own (the
key challenge of every pending connection runs in this one thread, non-blocking), at most
:data:`MAX_PENDING` pending connections (a new one pushes out the oldest that has sent
nothing, else the oldest), :data:`AUTH_SECONDS` from accept to the end of the challenge,
frames of at most :data:`MAX_FRAME` bytes. A connection that passes becomes the channel's
(``admit``), which gives it a reader thread: only key holders (ranks) get one.

The challenge is ``multiprocessing.connection``'s, both ways, as the ranks' side speaks it
with ``answer_challenge`` then ``deliver_challenge`` (rank_side/debug_hook.py): the kernel
sends ``#CHALLENGE#{sha256}<40 random bytes>``, which Python 3.11 answers with a raw HMAC-MD5
and later versions with ``{sha256}`` and an HMAC-SHA256; both are checked. The listener
outlives any error of ``accept()`` (out of file descriptors: it drops the oldest pending
connection and pauses accepting a moment), so a later ``breakpoint()`` still connects.
"""

from __future__ import annotations

import contextlib
import hmac
import os
import selectors
import socket
import struct
import threading
import time
from collections.abc import Callable

AUTH_SECONDS = 5.0
#: connections in their key challenge at once, at most
MAX_PENDING = 64
#: the largest frame of the challenge (multiprocessing's own limit)
MAX_FRAME = 256
#: how long the listener pauses after a failed accept() (out of file descriptors) at most
ACCEPT_BACKOFF = 0.5

CHALLENGE = b"#CHALLENGE#"
WELCOME = b"#WELCOME#"
FAILURE = b"#FAILURE#"
#: the lengths of Python 3.11's challenge (20 random bytes) and answer (an MD5 digest)
LEGACY_LENGTHS = (20, 16)
DIGESTS = {"md5", "sha256", "sha384", "sha512", "sha3_256", "sha3_384", "sha3_512"}


def respond(key: bytes, message: bytes) -> bytes:
    """The answer to a peer's challenge ``message`` (after ``#CHALLENGE#``), as
    ``answer_challenge`` of the peer's Python expects it. Python 3.11 sends 20 random bytes
    (one in 256 of them starts with ``{``), later versions ``{digest}`` and more: told apart
    by length, as ``multiprocessing.connection`` does."""
    if len(message) not in LEGACY_LENGTHS:
        name = message[1 : message.find(b"}", 1, 20)].decode("ascii", "replace")
        if name not in DIGESTS:
            raise ValueError(f"unsupported digest {name!r}")
        return b"{%s}%s" % (name.encode(), hmac.new(key, message, name).digest())
    return hmac.new(key, message, "md5").digest()


def verified(key: bytes, message: bytes, response: bytes) -> bool:
    """Whether ``response`` answers our challenge ``message`` with ``key``: Python 3.11's
    raw HMAC-MD5 (16 bytes), or a later version's ``{sha256}`` HMAC-SHA256."""
    prefix = b"{sha256}"
    if len(response) not in LEGACY_LENGTHS and response.startswith(prefix):
        expected = hmac.new(key, message, "sha256").digest()
        return hmac.compare_digest(expected, response[len(prefix) :])
    return hmac.compare_digest(hmac.new(key, message, "md5").digest(), response)


class WrongKey(ValueError):
    """The peer answered our challenge without the key: it is told so (``#FAILURE#``, as
    ``deliver_challenge`` does, so its ``answer_challenge`` raises AuthenticationError)."""


def _frame(payload: bytes) -> bytes:
    return struct.pack("!i", len(payload)) + payload


class _Pending:
    """One connection in its challenge: its bytes in and out, its step and deadline."""

    def __init__(self, sock: socket.socket, key: bytes):
        self.sock = sock
        self.deadline = time.monotonic() + AUTH_SECONDS
        self.challenge = b"{sha256}" + os.urandom(40)
        self.inbox = bytearray()
        self.outbox = bytearray(_frame(CHALLENGE + self.challenge))
        self.step = "response"  # then "challenge" (theirs), then "welcome"
        self.heard = False
        self.key = key

    def missing(self) -> int:
        """The bytes to read for the frame under way: never more, so the first message
        after the challenge stays in the socket for the session that reads it."""
        if len(self.inbox) < 4:
            return 4 - len(self.inbox)
        (size,) = struct.unpack("!i", self.inbox[:4])
        if not 0 <= size <= MAX_FRAME:
            raise ValueError(f"frame of {size} bytes")
        return 4 + size - len(self.inbox)

    def frame(self) -> bytes | None:
        """The frame received whole, taken out of the inbox; None while it is incomplete."""
        if len(self.inbox) < 4 or self.missing():
            return None
        payload = bytes(self.inbox[4:])
        self.inbox.clear()
        return payload

    def advance(self, payload: bytes) -> bool:
        """Take one frame; True once the peer has passed both challenges."""
        if self.step == "response":
            if not verified(self.key, self.challenge, payload):
                raise WrongKey("wrong key")
            self.outbox += _frame(WELCOME)
            self.step = "challenge"
            return False
        if self.step == "challenge":
            if not payload.startswith(CHALLENGE) or len(payload) < len(CHALLENGE) + 20:
                raise ValueError("not a challenge")
            self.outbox += _frame(respond(self.key, payload[len(CHALLENGE) :]))
            self.step = "welcome"
            return False
        if payload != WELCOME:
            raise ValueError("our answer was refused")
        return True


class Listener:
    """Accepts connections on ``server`` and runs their challenges; ``admit`` gets each
    connection that passes (a blocking socket), ``refuse`` counts those that do not."""

    def __init__(
        self,
        server: socket.socket,
        key: bytes,
        admit: Callable[[socket.socket], None],
        refuse: Callable[[], None],
    ):
        self.server, self.key, self.admit, self.refuse = server, key, admit, refuse
        self.accept_errors = 0  # failed accept() calls the listener went on after
        self.pending: dict[socket.socket, _Pending] = {}  # in order of accept
        self._selector = selectors.DefaultSelector()
        self._wake_r, self._wake_w = socket.socketpair()
        self._closed = False
        self._resume = 0.0  # when accepting resumes after a failed accept()
        server.setblocking(False)
        self._selector.register(server, selectors.EVENT_READ)
        self._selector.register(self._wake_r, selectors.EVENT_READ)
        self.thread = threading.Thread(target=self._run, name="distcomp-debug", daemon=True)
        self.thread.start()

    def close(self) -> None:
        self._closed = True
        try:
            self._wake_w.send(b"x")
        except OSError:
            pass

    def _run(self) -> None:
        backoff = 0.01
        try:
            while not self._closed:
                now = time.monotonic()
                self._expire(now)
                waits = [1.0] + [p.deadline - now for p in list(self.pending.values())[:1]]
                if self._resume:
                    waits.append(self._resume - now)
                    if now >= self._resume:
                        self._selector.register(self.server, selectors.EVENT_READ)
                        self._resume = 0.0
                for key, events in self._selector.select(max(0.0, min(waits))):
                    if key.fileobj is self.server:
                        backoff = self._accept(backoff)
                    elif key.fileobj is not self._wake_r:
                        self._serve(self.pending.get(key.fileobj), events)  # type: ignore[call-overload]
        finally:
            for pending in list(self.pending.values()):
                self._drop(pending, refused=False)
            self._selector.close()
            self._wake_r.close()
            self._wake_w.close()

    def _accept(self, backoff: float) -> float:
        try:
            sock, _ = self.server.accept()
        except BlockingIOError:
            return backoff
        except OSError:
            if self._closed or self.server.fileno() < 0:
                self._closed = True
                return backoff
            self.accept_errors += 1  # out of descriptors: free one, pause a moment
            if self.pending:
                self._drop(self._oldest())
            self._selector.unregister(self.server)
            self._resume = time.monotonic() + backoff
            return min(backoff * 2, ACCEPT_BACKOFF)
        if len(self.pending) >= MAX_PENDING:
            self._drop(self._oldest())
        try:
            sock.setblocking(False)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # prompts are small
        except OSError:  # the client is gone already
            sock.close()
            return 0.01
        pending = _Pending(sock, self.key)
        self.pending[sock] = pending
        self._selector.register(sock, selectors.EVENT_READ | selectors.EVENT_WRITE)
        return 0.01

    def _oldest(self) -> _Pending:
        """The connection to push out: the oldest that has sent nothing, else the oldest."""
        quiet = [p for p in self.pending.values() if not p.heard]
        return (quiet or list(self.pending.values()))[0]

    def _expire(self, now: float) -> None:
        while self.pending:
            first = next(iter(self.pending.values()))
            if first.deadline > now:
                return
            self._drop(first)

    def _serve(self, pending: _Pending | None, events: int) -> None:
        if pending is None:
            return
        try:
            self._flush(pending)
            while events & selectors.EVENT_READ:
                data = pending.sock.recv(pending.missing())
                if not data:
                    raise EOFError("closed by the peer")
                pending.heard = True
                pending.inbox += data
                payload = pending.frame()
                if payload is not None and pending.advance(payload):
                    self._pass(pending)
                    return
                self._flush(pending)
        except BlockingIOError:
            pass
        except (OSError, EOFError, ValueError) as exc:
            if isinstance(exc, WrongKey):
                with contextlib.suppress(OSError):
                    pending.sock.send(_frame(FAILURE))
            self._drop(pending)
            return
        wanted = selectors.EVENT_READ | (selectors.EVENT_WRITE if pending.outbox else 0)
        self._selector.modify(pending.sock, wanted)

    @staticmethod
    def _flush(pending: _Pending) -> None:
        if pending.outbox:
            del pending.outbox[: pending.sock.send(pending.outbox)]

    def _pass(self, pending: _Pending) -> None:
        self._selector.unregister(pending.sock)
        del self.pending[pending.sock]
        pending.sock.setblocking(True)
        self.admit(pending.sock)

    def _drop(self, pending: _Pending, refused: bool = True) -> None:
        self._selector.unregister(pending.sock)
        del self.pending[pending.sock]
        pending.sock.close()
        if refused:
            self.refuse()
