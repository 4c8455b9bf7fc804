"""Rank lists as users write them (``0,2-3``) and as messages show them (``ranks 1-3``), and
the label before each line a rank prints."""

from __future__ import annotations

from collections.abc import Iterable

from ..errors import RankError
from ..rank_side.ledger_words import format_ranks


def parse_ranks(text: str | Iterable[int] | None, world_size: int) -> list[int]:
    """``"0,2-3"`` -> ``[0, 2, 3]``; None means every rank. Checked against the world size."""
    if text is None:
        return list(range(world_size))
    if not isinstance(text, str):
        ranks = sorted({int(r) for r in text})
    else:
        ranks_set: set[int] = set()
        for part in (p.strip() for p in text.split(",")):
            if not part:
                continue
            first, sep, last = part.partition("-")
            try:
                lo = int(first)
                hi = int(last) if sep else lo
            except ValueError:
                raise RankError(
                    f"--ranks {text!r}: {part!r} is not a rank or a range of ranks. "
                    "Fix: write ranks like 0,2-3."
                ) from None
            if hi < lo:
                raise RankError(
                    f"--ranks {text!r}: the range {part!r} runs backwards. Fix: write {hi}-{lo}."
                )
            if hi >= world_size:  # checked before the range is built: it may be huge
                first_outside = max(lo, world_size)
                outside_text = (
                    f"rank {hi}" if first_outside == hi else f"ranks {first_outside}-{hi}"
                )
                raise _outside(outside_text, world_size)
            ranks_set.update(range(lo, hi + 1))
        ranks = sorted(ranks_set)
    if not ranks:
        raise RankError(f"--ranks {text!r} names no rank. Fix: write ranks like 0,2-3.")
    outside = [r for r in ranks if r < 0 or r >= world_size]
    if outside:
        raise _outside(format_ranks(outside), world_size)
    return ranks


def _outside(named: str, world_size: int) -> RankError:
    return RankError(
        f"--ranks: {named} outside the world of {world_size} rank(s) "
        f"(ranks 0-{world_size - 1}). Fix: pick ranks below {world_size}, or enlarge the "
        "layout with NAME.runsettings.resource_layout.configure(...)."
    )


def rank_label(rank: int, node: int, instance_count: int) -> str:
    """The label before each line a rank prints: ``[rank 3]``, ``[node 1 rank 3]``."""
    return f"[node {node} rank {rank}]" if instance_count > 1 else f"[rank {rank}]"
