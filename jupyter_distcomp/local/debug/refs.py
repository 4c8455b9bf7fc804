"""The shapes of the debug protocol the kernel checks, and the numbers it gives the ranks'
frames and variables.

Every request about a rank is checked before it is used: ``arguments`` an object, each id a
whole number (:func:`number`); one that is not gets an error reply (:func:`error_reply`), as
debugpy answers, never none.

A frame or variable of a rank gets a number of its own (:class:`References`), counted up
from :data:`REF_BASE` and never reused. It belongs to the rank's stop it was given at: once
that rank steps, continues, restarts or stops, the number is stale, and a request naming it
is refused as such, never answered from the rank's next stop. One exception: an open rich
view of a variable, which JupyterLab refreshes after each step with the frame it was opened
at, follows its rank's frame at the same depth (:meth:`References.past_frame`).
"""

from __future__ import annotations

import threading
from typing import Any

REF_BASE = 1 << 40  # a rank's frame or variable: REF_BASE and above
PAST_FRAMES = 4096  # the stale frames remembered for rich views: the newest ones


class Malformed(ValueError):
    """A request whose shape the protocol does not allow; its text is the error reply's."""


class Stale(LookupError):
    """A reference from an earlier stop, or one never given."""


def number(args: dict, key: str) -> int:
    """The id ``args[key]`` (0 if absent); Malformed for anything but a whole number."""
    value = args.get(key)
    if value is None:
        return 0
    if type(value) is not int:
        raise Malformed(f"{key} must be a whole number, not {value!r}")
    return value


def error_reply(message: Any, text: str) -> dict:
    """An error reply to ``message`` (as debugpy answers a request it cannot take)."""
    fields = message if isinstance(message, dict) else {}
    seq = fields.get("seq") if type(fields.get("seq")) is int else 0
    command = fields.get("command")
    return {
        "type": "response",
        "seq": seq,
        "request_seq": seq,
        "command": command if isinstance(command, str) else "",
        "success": False,
        "message": text,
    }


class References:
    """The frame and variable numbers given out, each with its thread and the rank's own
    number (a frame's index in pdb's stack, a variable's ``ref`` on the rank)."""

    def __init__(self) -> None:
        self._next = REF_BASE + 1
        self._live: dict[int, tuple[str, int, int]] = {}  # ref -> (kind, thread, number)
        self._given: dict[tuple[str, int, int], int] = {}
        self._past: dict[int, tuple[int, int]] = {}  # a stale frame -> (thread, number)
        self._lock = threading.Lock()

    def give(self, kind: str, thread: int, number: int) -> int:
        """The number JupyterLab gets for the rank's frame (``kind`` "frame") or variable
        ("variable") ``number`` on ``thread``: the same one while that stop lasts."""
        key = (kind, thread, number)
        with self._lock:
            ref = self._given.get(key)
            if ref is None:
                ref = self._given[key] = self._next
                self._live[ref] = key
                self._next += 1
            return ref

    def resolve(self, kind: str, ref: int, name: str) -> tuple[int, int]:
        """``(thread, number)`` of ``ref``; Stale if its stop is over or it was never given,
        Malformed if it names a variable where a frame is wanted, or the other way."""
        with self._lock:
            found = self._live.get(ref)
            given = REF_BASE < ref < self._next
        if found is None:
            if given:
                raise Stale(
                    f"{name} {ref} is stale: its rank ran on, restarted or stopped since it "
                    "was given; ask for the stopped ranks' frames again"
                )
            raise Stale(f"{name} {ref} was never given by this kernel")
        if found[0] != kind:
            raise Malformed(f"{name} {ref} is a {found[0]}, not a {kind}")
        return found[1], found[2]

    def forget(self, thread: int) -> None:
        """``thread``'s rank runs on: its frames and variables are stale from now on."""
        with self._lock:
            for key in [k for k in self._given if k[1] == thread]:
                ref = self._given.pop(key)
                del self._live[ref]
                if key[0] == "frame":
                    self._past[ref] = (key[1], key[2])
            while len(self._past) > PAST_FRAMES:
                del self._past[next(iter(self._past))]

    def past_frame(self, ref: int) -> tuple[int, int] | None:
        """``(thread, number)`` of the stale frame ``ref`` when it was given; None for a
        live one, a variable or one too old to be remembered."""
        with self._lock:
            return self._past.get(ref)
