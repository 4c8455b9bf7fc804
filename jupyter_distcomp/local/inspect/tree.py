"""Stacks of many ranks as one prefix tree (as LLNL's STAT shows them): the frames the ranks
share once, then a branch per way they part, each headed by its ranks; a branch fewer ranks
took than a sibling is flagged, as it is most likely the rank the others wait for."""

from __future__ import annotations

from dataclasses import dataclass, field

from ...core.ranges import format_ranks
from ..stacks import Frame

ODD = "<- differs"


@dataclass
class _Node:
    ranks: set[int] = field(default_factory=set)
    children: dict[Frame, _Node] = field(default_factory=dict)


def stack_tree(stacks: dict[int, list[Frame]]) -> list[str]:
    """``stacks`` (each rank's frames, outermost first) merged by common prefix."""
    root = _Node(set(stacks))
    for rank, frames in stacks.items():
        node = root
        for frame in frames:
            node = node.children.setdefault(frame, _Node())
            node.ranks.add(rank)
    lines: list[str] = []
    _render(root, "", lines)
    return lines


def _render(node: _Node, pad: str, lines: list[str]) -> None:
    children = list(node.children.items())
    ended = node.ranks - set().union(*(child.ranks for _, child in children))
    if len(children) == 1 and not ended:  # no branch: the next frame, same indent
        frame, child = children[0]
        lines.extend(pad + line for line in frame.lines())
        _render(child, pad, lines)
        return
    if not children:
        return
    most = max(len(child.ranks) for _, child in children)
    if ended:
        lines.append(f"{pad}+ {format_ranks(ended)}: no deeper frame")
    for frame, child in sorted(children, key=lambda item: min(item[1].ranks)):
        odd = f"  {ODD}" if len(child.ranks) < most else ""
        lines.append(f"{pad}+ {format_ranks(child.ranks)}{odd}")
        lines.extend(f"{pad}  {line}" for line in frame.lines())
        _render(child, pad + "  ", lines)
