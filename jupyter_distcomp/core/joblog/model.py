"""What ``diagnose`` reads and what it answers, as data: each rank's log text in, a
:class:`Diagnosis` out (its verdict on top, then sections of details), in the words a
local run uses (``rank 3``, ``ranks 0-62``, ``[node 1 rank 3]``)."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..ranges import rank_label
from ..secrets import mask_secrets

#: how a diagnosis ends, for the views and the lead's follow summary
COMPLETED, FAILED, HUNG, NO_ERROR, NO_LOGS = "completed", "failed", "hung", "no-error", "no-logs"


@dataclass
class RankLog:
    """One process's log as ``diagnose`` reads it: all of it, or its head and tail
    (``skipped`` bytes between them were not read, the state lines among them were)."""

    rank: int
    text: str
    name: str = ""  # the file, as the job's folder names it
    skipped: int = 0
    role: str = ""  # a TensorFlow task: "worker 1", "ps 0"


@dataclass(frozen=True)
class Layout:
    """How the ranks sit on nodes, and where that came from."""

    world_size: int
    per_node: int | None = None  # None: not known
    source: str = "guessed: nothing in the logs tells the nodes apart"
    guessed: bool = True

    @property
    def nodes(self) -> int | None:
        if not self.per_node:
            return None
        return -(-self.world_size // self.per_node)

    def node(self, rank: int) -> int | None:
        return rank // self.per_node if self.per_node else None

    def label(self, rank: int) -> str:
        """``[node 1 rank 3]`` on several nodes, ``[rank 3]`` on one or when not known."""
        node = self.node(rank)
        return rank_label(rank, node or 0, self.nodes or 1)

    def text(self) -> str:
        if not self.per_node:
            return f"{self.world_size} rank(s), nodes not known ({self.source})"
        return (
            f"{self.nodes} node(s) x {self.per_node} process(es), {self.world_size} rank(s) "
            f"({self.source})"
        )


@dataclass
class Section:
    """A heading and its lines (a traceback, a stack, a table)."""

    heading: str
    lines: list[str] = field(default_factory=list)


@dataclass
class Diagnosis:
    """What ended a job, from its ranks' logs."""

    verdict: str
    outcome: str  # COMPLETED, FAILED, HUNG, NO_ERROR, NO_LOGS
    layout: Layout
    #: the ranks the verdict names as the cause (the first to fail, or those waited for)
    culprits: list[int] = field(default_factory=list)
    #: the ranks only ended by the cause
    ended: list[int] = field(default_factory=list)
    sections: list[Section] = field(default_factory=list)
    #: what the reading skipped or guessed
    notes: list[str] = field(default_factory=list)
    #: how the verdict was decided, one rule a line
    rules: list[str] = field(default_factory=list)

    def text(self) -> str:
        """The verdict on top, then each section, the notes and the rules (credentials a
        log printed masked: core/secrets.py)."""
        lines = [self.verdict]
        for section in self.sections:
            lines.append(f"--- {section.heading} ---")
            lines.extend(section.lines)
        if self.notes:
            lines.append("--- notes ---")
            lines.extend(self.notes)
        if self.rules:
            lines.append("--- how this was decided ---")
            lines.extend(f"- {rule}" for rule in self.rules)
        return mask_secrets("\n".join(lines))

    def __repr__(self) -> str:
        return self.text()
