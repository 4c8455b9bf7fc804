"""Python tracebacks in a rank's log, with the rank labels torch puts before them taken off,
and the user's own frames picked out.

torch.distributed prefixes what a rank prints on an uncaught exception with ``[rank3]: ``
(and its C++ log lines with ``[rank3]:[E1129 ...]``), so the lines of one traceback carry
their rank; a log that holds several ranks' lines (torchrun's, one per node) is split by
that label. A traceback starts at ``Traceback (most recent call last):`` and ends at its
exception line; chained ones (``During handling ...``) belong to it, and its exception is
the last one.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from ...rank_side.ledger_words import in_hooks

HEAD = "Traceback (most recent call last):"
CHAIN = (
    "During handling of the above exception, another exception occurred:",
    "The above exception was the direct cause of the following exception:",
)
#: ``[rank3]: `` (torch's label of a rank's exception output), ``[rank3]:[E1129 ...`` (its
#: C++ log lines)
RANK_LABEL = re.compile(r"^\[rank(\d+)\]: ?")
_FRAME = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+)(?:, in (?P<func>.*))?$')
#: frames of Python itself and of installed packages: not the user's
_LIBRARY = re.compile(r"(site-packages|dist-packages|/lib/python\d[\d.]*/|^<frozen )")
#: the names of decorators' inner functions: not the call a user made
_WRAPPERS = frozenset({"wrapper", "inner", "_fn", "decorate_context", "wrapped"})
#: the lines Python 3.11+ draws under a frame's code
_CARETS = re.compile(r"^\s*[\^~]+\s*$")


@dataclass(frozen=True)
class Frame:
    """One frame of a traceback or stack: ``train.py:12 in step`` and its code."""

    file: str
    line: int
    function: str = ""
    code: str = ""

    @property
    def mine(self) -> bool:
        """The user's own frame (not Python's, an installed package's, or one of the
        wrappers our rank side puts around the user's calls)."""
        return not _LIBRARY.search(self.file) and not in_hooks(self.file)

    def place(self) -> str:
        name = self.file.rsplit("/", 1)[-1]
        return f"{name}:{self.line}" + (f" in {self.function}" if self.function else "")

    def lines(self) -> list[str]:
        head = f'  File "{self.file}", line {self.line}' + (
            f", in {self.function}" if self.function else ""
        )
        return [head] + ([f"    {self.code}"] if self.code else [])


@dataclass
class Traceback:
    """One traceback as printed: every frame (outermost first), the exception line and the
    lines of its message after it."""

    frames: list[Frame] = field(default_factory=list)
    exception: str = ""
    message: list[str] = field(default_factory=list)
    #: the exception lines of the tracebacks chained before this one's
    causes: list[str] = field(default_factory=list)

    @property
    def kind(self) -> str:
        """``ValueError``, ``torch.OutOfMemoryError``."""
        head = self.exception.split(":", 1)[0].strip()
        return head if " " not in head else ""

    @property
    def full_text(self) -> str:
        """The exception's whole message (and those it was chained from)."""
        return "\n".join([*self.causes, self.exception, *self.message])

    def user_frames(self) -> list[Frame]:
        """The user's frames; the innermost frame when none is the user's."""
        mine = [f for f in self.frames if f.mine]
        return mine or self.frames[-1:]

    def place(self) -> str:
        """Where the user's code raised: its innermost own frame."""
        mine = self.user_frames()
        return mine[-1].place() if mine else ""

    def library_function(self) -> str:
        """The library function the user's code called that the error came out of
        (``all_reduce``): torch.distributed's own, else the first library frame below
        the user's innermost one that is not a decorator's wrapper."""
        innermost = max((i for i, f in enumerate(self.frames) if f.mine), default=-1)
        below = self.frames[innermost + 1 :] if innermost >= 0 else []
        for frame in below:
            if frame.file.endswith("distributed_c10d.py"):
                return frame.function
        for frame in below:
            if frame.function not in _WRAPPERS:
                return frame.function
        return ""

    def shown(self) -> list[str]:
        """As a user reads it: the user's frames, then the exception."""
        lines = [HEAD]
        for frame in self.user_frames():
            lines.extend(frame.lines())
        return [*lines, self.exception, *self.message[:8]]


def split_ranks(text: str) -> dict[int | None, list[str]]:
    """The lines of ``text`` by the rank label before them (None: unlabelled lines), the
    label taken off."""
    found: dict[int | None, list[str]] = {}
    for line in text.splitlines():
        match = RANK_LABEL.match(line)
        if match:
            found.setdefault(int(match[1]), []).append(line[match.end() :])
        else:
            found.setdefault(None, []).append(line)
    return found


def _is_exception_line(line: str) -> bool:
    return bool(line) and not line[0].isspace() and line != HEAD and line not in CHAIN


def tracebacks(lines: list[str]) -> list[Traceback]:
    """Every complete traceback in ``lines``, in order; chained ones as one."""
    found: list[Traceback] = []
    count = len(lines)
    starts = [i for i, line in enumerate(lines) if HEAD in line and line.strip() == HEAD]
    index = 0
    for start in starts:
        if start < index:  # inside the last traceback (a chained one's second head)
            continue
        index = start
        current = Traceback()
        index += 1
        while index < count:
            line = lines[index].rstrip()
            match = _FRAME.match(line)
            if match:
                current.frames.append(
                    Frame(match["file"], int(match["line"]), (match["func"] or "").strip())
                )
            elif _is_exception_line(line.lstrip()) and not line.startswith(" "):
                current.exception = line
                index += 1
                index = _message(lines, index, current)
                chained = _chained(lines, index)
                if chained is None:
                    break
                current.causes.append(current.exception)
                current.frames, current.exception, current.message = [], "", []
                index = chained
                continue
            elif current.frames and line.strip() and not _CARETS.match(line):
                last = current.frames[-1]
                if not last.code:
                    current.frames[-1] = Frame(last.file, last.line, last.function, line.strip())
            index += 1
        if current.exception:
            found.append(current)
    return found


def _message(lines: list[str], index: int, current: Traceback) -> int:
    """The lines that continue an exception's message (up to a blank line, a new
    traceback, or 12 lines)."""
    while index < len(lines) and len(current.message) < 12:
        line = lines[index].rstrip()
        if not line or line.strip() == HEAD or line in CHAIN:
            break
        current.message.append(line)
        index += 1
    return index


def _chained(lines: list[str], index: int) -> int | None:
    """The index after a ``During handling ...`` line that follows, if one does."""
    probe = index
    while probe < len(lines) and not lines[probe].strip():
        probe += 1
    if probe < len(lines) and lines[probe].strip() in CHAIN:
        probe += 1
        while probe < len(lines) and lines[probe].strip() != HEAD:
            if lines[probe].strip():
                return None
            probe += 1
        return probe + 1 if probe < len(lines) else None
    return None
