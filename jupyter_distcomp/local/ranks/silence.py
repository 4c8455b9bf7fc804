"""A ``%%distcomp run`` cell that has shown nothing for :data:`SILENCE` seconds says, in one
line that updates in place, what its ranks are doing: ``ranks 0-3: importing torch (8 s)``,
``rank 2: in all_reduce #3 (5 s)``. The line goes once the ranks show something, or the cell
ends (its display is emptied: JupyterLab then draws nothing for it).

It knows what ``%distcomp where`` knows, looked at every :data:`EVERY` seconds while the cell
is silent: the collectives ledger first (a file read: a rank waiting in a collective is not
disturbed), then, for the other busy ranks, their stacks (faulthandler on SIGUSR1: the rank
writes its stack and goes on). bench/bench_silence.py measures what that costs the ranks.
"""

from __future__ import annotations

import re
import time
import uuid
from typing import TYPE_CHECKING, Any

from ...contracts import RankState
from ...core.ranges import format_ranks
from ..stacks import AT_PROMPT, CELL_FILE, stack_frames
from . import ledgers

if TYPE_CHECKING:
    from .world import World

#: seconds a run cell shows nothing before its line appears (None: never)
SILENCE: float | None = 3.0
#: seconds between looks at the ranks while the cell stays silent
EVERY = 2.0
#: seconds a look waits for the ranks' stacks
STACK_WAIT = 0.3
_FRAME = re.compile(r'^\s*File "(?P<file>[^"]+)", line \d+ in (?P<func>.*)$')
_FROZEN = re.compile(r"^<frozen importlib\._bootstrap(_external)?>$")
_PACKAGES = re.compile(r"/(?:site|dist)-packages/([^/]+)")


def imported_module(stack: str) -> str | None:
    """The module a rank is importing, from its faulthandler stack (most recent call first):
    the outermost module that ``import`` runs, named by its package (``torch`` for
    ``.../site-packages/torch/__init__.py``); None when it imports nothing."""
    frames = [m["file"] for m in map(_FRAME.match, stack.splitlines()) if m]
    cells = [i for i, path in enumerate(frames) if CELL_FILE.search(path)]
    if cells:  # what the cell's innermost line called, not how the engine itself runs
        frames = frames[: cells[0]]
    for index in range(len(frames) - 1, 0, -1):  # from the outermost frame inwards
        if _FROZEN.match(frames[index]):
            inner = next((f for f in reversed(frames[:index]) if not _FROZEN.match(f)), None)
            return None if inner is None else _module_name(inner)
    return None


def _module_name(path: str) -> str:
    package = _PACKAGES.search(path)
    if package:
        return package[1].removesuffix(".py")
    parts = path.rsplit("/", 2)
    if parts[-1] == "__init__.py" and len(parts) > 1:
        return parts[-2]
    return parts[-1].removesuffix(".py")


def rank_activity(stack: str, code: str, cell: str = "Cell") -> str:
    """What a busy rank does, from its stack: ``importing torch``, ``at In [5], line 7, in
    step``, ``starting up``."""
    module = imported_module(stack)
    if module:
        return f"importing {module}"
    frames, at_prompt = stack_frames(stack, code, cell)
    if at_prompt:
        return AT_PROMPT
    if not frames:
        return "starting up" if "<frozen site>" in stack else "running"
    in_cell = [f for f in frames if f.cell_line is not None]
    where = (in_cell or frames)[-1].place()
    inner = frames[-1]
    function = inner.where.rsplit(", in ", 1)[-1] if ", in " in inner.where else ""
    return f"at {where}" + (f", in {function}" if function and function != "<module>" else "")


def status_text(doings: dict[int, tuple[str, float]]) -> str:
    """``ranks 0-3: importing torch (8 s); rank 2: in all_reduce #3 (5 s)``: the ranks of
    each doing (in order of their lowest rank), with the longest any of them has done it."""
    groups: dict[str, list[int]] = {}
    for rank in sorted(doings):
        groups.setdefault(doings[rank][0], []).append(rank)
    return "; ".join(
        f"{format_ranks(ranks)}: {doing} ({max(doings[r][1] for r in ranks):.0f} s)"
        for doing, ranks in groups.items()
    )


class SilenceLine:
    """The status line of one run cell (see the module's text)."""

    def __init__(self, world: World, shell: Any, code: str, cell: str) -> None:
        self.world = world
        self.shell = shell
        self.code = code
        self.cell = cell
        self.started = time.monotonic()
        self.seconds = SILENCE
        self.display_id: str | None = None
        self.drawn = ""
        self.over = False  # the ranks showed something: the line is gone for this cell
        self.looks = 0  # looks at the ranks taken (for the bench and tests)
        self._next = 0.0
        self._since: dict[int, tuple[str, float]] = {}  # rank -> (doing, since when)

    def check(self, running: set[int], shown: bool) -> None:
        """From the cell's loop: ``shown``, the cell has shown something of its ranks."""
        if self.over or self.seconds is None:
            return
        if shown:
            self.finish()
            return
        now = time.monotonic()
        if now < self.started + self.seconds or now < self._next or not running:
            return
        self._next = now + EVERY
        text = self.look(sorted(running))
        if text and text != self.drawn:
            self._publish({"text/plain": text})
            self.drawn = text

    def look(self, busy: list[int]) -> str:
        """What the busy ranks do now, as the line says it."""
        self.looks += 1
        states = self.world.states()
        busy = [r for r in busy if states.get(r) == RankState.BUSY]  # a prompt speaks itself
        doings: dict[int, tuple[str, float]] = {}
        try:
            last = ledgers.read(self.world, busy, last=1)
        except Exception:  # no ledger on this rank, or a file half written: the stacks say
            last = {}
        for rank in busy:
            entry = last[rank][-1] if last.get(rank) else None
            if entry is not None and entry.blocked:
                doings[rank] = (f"in {entry.op} #{entry.seq}", time.time() - entry.started)
        others = [r for r in busy if r not in doings]
        stacks = self.world.stacks(others, wait=STACK_WAIT) if others else {}
        now = time.monotonic()
        for rank in others:
            doing = rank_activity(stacks.get(rank, ""), self.code, self.cell)
            seen = self._since.get(rank)
            if seen is None or seen[0] != doing:  # the first look counts from the cell's start
                seen = self._since[rank] = (doing, self.started if seen is None else now)
            doings[rank] = (doing, now - seen[1])
        return status_text(doings)

    def finish(self) -> None:
        """The line goes (its display emptied); none comes again in this cell."""
        self.over = True
        if self.display_id is not None:
            self._publish({})

    def _publish(self, data: dict) -> None:
        """In a kernel, the line's display, shown or updated in place (a terminal's shell
        would print each update)."""
        if self.shell is None or getattr(self.shell, "kernel", None) is None:
            return
        update = self.display_id is not None
        self.display_id = self.display_id or f"distcomp-status-{uuid.uuid4().hex[:12]}"
        self.shell.display_pub.publish(
            data=data,
            metadata={"distcomp_status": True},
            transient={"display_id": self.display_id},
            update=update,
        )
