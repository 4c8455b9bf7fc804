"""The Python traceback each rank prints on stderr, held back while it may be the rank's
last words, so that ranks that fail the same way show it once.

A traceback starts at ``Traceback (most recent call last):`` and ends at its exception
line and the indented lines that continue its message (chained ones, with their ``During
handling ...`` lines, belong to it). While a rank
prints nothing else on stderr, its traceback is held; what it prints there after it (say
it caught and printed the traceback, then carried on) releases it, to be shown as printed
(its stdout, another pipe, arrives in no reliable order against stderr). At the run's
end the tracebacks still held are grouped: identical ones once, for all their ranks
(torch.distributed's ``[rankN]:`` before each line left out: the label names the ranks).
One rule for the ranks of ``%distcomp command`` and the logs of a followed Azure ML job.

A user sees their own frames only: :class:`HookFrames` leaves out the frames of our
wrappers around their calls (the collectives ledger's, the output pacing's: rank_side's
``HOOK_FILES``), in a run cell's error, a command's output and a followed job's logs alike,
also behind torch's ``[rankN]:`` prefix. (An Azure ML job's own log keeps them.)
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from ..errors import strip_ansi
from ..rank_side.ledger_words import in_hooks

HEAD = "Traceback (most recent call last):"
#: torch.distributed's prefix of what a rank prints at its end (``[rank1]: ``): the same
#: traceback on every rank, read without it
_RANK_PREFIX = re.compile(r"^\[rank\d+\]: ?")
CHAIN = (
    "During handling of the above exception, another exception occurred:",
    "The above exception was the direct cause of the following exception:",
)


@dataclass
class _Block:
    lines: list[str] = field(default_factory=list)
    complete: bool = False  # its exception line has come


def without_rank_prefix(text: str) -> str:
    """``text`` without torch.distributed's ``[rankN]: `` before it (a rank's label says
    which rank printed it)."""
    return _RANK_PREFIX.sub("", text, count=1)


def _exception_line(text: str) -> bool:
    return bool(text) and not text[0].isspace() and text != HEAD and text not in CHAIN


class HeldTracebacks:
    def __init__(self) -> None:
        self._blocks: dict[int, _Block] = {}

    def take(self, rank: int, stream: str, text: str) -> tuple[list[str], bool]:
        """(lines of ``rank``'s held traceback to show now, before ``text``; whether
        ``text`` is held itself)."""
        if stream != "stderr":  # stdout is another pipe: its order against stderr is lost
            return [], False
        text = without_rank_prefix(text)  # held as Python printed it
        block = self._blocks.get(rank)
        if block is not None:
            if not block.complete:
                block.lines.append(text)
                block.complete = _exception_line(text)
                return [], True
            if not text.strip() or text in CHAIN or text == HEAD:
                block.lines.append(text)
                block.complete = not (text in CHAIN or text == HEAD)
                return [], True
            if text[:1].isspace():  # the exception's message goes on over several lines
                block.lines.append(text)
                return [], True
        released = self.release(rank)
        if text == HEAD:
            self._blocks[rank] = _Block([text])
            return released, True
        return released, False

    def release(self, rank: int) -> list[str]:
        block = self._blocks.pop(rank, None)
        return block.lines if block is not None else []

    def raised(self, rank: int) -> bool:
        """``rank``'s last words are a traceback of an exception other than
        KeyboardInterrupt (how Python answers our SIGINT)."""
        block = self._blocks.get(rank)
        if block is None or not block.complete:
            return False
        last = [line for line in block.lines if line.strip()][-1]
        return not last.startswith("KeyboardInterrupt")

    def complete(self) -> list[int]:
        """The ranks whose held traceback has come to its exception line."""
        return sorted(rank for rank, block in self._blocks.items() if block.complete)

    def groups(self, ranks: list[int] | None = None) -> list[tuple[list[int], list[str]]]:
        """Every held traceback (of ``ranks`` only, if given), once per distinct text, with
        the ranks that printed it (in rank order); those are no longer held afterwards."""
        found: dict[tuple[str, ...], list[int]] = {}
        for rank in sorted(self._blocks if ranks is None else set(ranks) & set(self._blocks)):
            found.setdefault(tuple(self._blocks.pop(rank).lines), []).append(rank)
        return [(ranks_of, list(lines)) for lines, ranks_of in found.items()]


#: how IPython marks a frame's own line among its context lines (``--> 322``)
_MARKED = re.compile(r"-+> ")


class HookFrames:
    """Which lines of each rank's tracebacks are the user's: a frame in one of our wrapper
    files (its ``File`` line, its source and marker lines) is not, up to the next frame, a
    blank line or a line that is not indented (the exception, the next traceback)."""

    def __init__(self) -> None:
        self._skipping: dict[int, bool] = {}

    def keep(self, rank: int, text: str) -> bool:
        """Whether ``rank``'s next line ``text`` is shown."""
        line = _RANK_PREFIX.sub("", strip_ansi(text), count=1)
        if line.lstrip().startswith(("File ", "Cell In[")) or not line.strip():
            self._skipping[rank] = in_hooks(line)
        elif not line[:1].isspace() and not _MARKED.match(line):
            self._skipping[rank] = False
        return not self._skipping.get(rank, False)


def without_hook_frames(lines: list[str]) -> list[str]:
    """One traceback's lines without the frames of our wrappers (:class:`HookFrames`)."""
    frames = HookFrames()
    return [line for line in lines if frames.keep(0, line)]
