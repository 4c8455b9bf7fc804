"""Each rank's GPU facts, as its torch thread writes them beside its ledger
(``<ledger>.gpu``, rank_side/torch_record.py ``gpu_facts``): the CUDA devices the rank holds
memory on, with the memory in use and its peak. Read here, with no message to the rank (a
rank blocked in a collective or out of memory still has them); a rank that never
initialised CUDA has none, and nothing of CUDA is initialised to get them.
"""

from __future__ import annotations

import json
import os
import time
from typing import TYPE_CHECKING

from ...machine.network import is_local_host

if TYPE_CHECKING:
    from .world import World

#: an error a rank raised that says it ran out of GPU memory
OUT_OF_MEMORY = ("OutOfMemoryError", "CUDA out of memory")


def _size(n: int) -> str:
    if n >= 1 << 30:
        return f"{n / (1 << 30):.2f} GiB"
    return f"{n / (1 << 20):.0f} MiB"


def fact_text(facts: dict) -> str:
    """``cuda:0 (NVIDIA H200): 256 MiB in use, peak 1.00 GiB, of 139.81 GiB``, one per
    device the rank holds memory on."""
    return "; ".join(
        f"cuda:{d['index']} ({d['name']}): {_size(d['allocated'])} in use, peak "
        f"{_size(d['peak'])}, of {_size(d['total'])}"
        for d in facts.get("devices", [])
    )


def short_text(facts: dict) -> str:
    """``cuda:0 256 MiB (peak 1.00 GiB)``: the status table's and ranks panel's cell."""
    return ", ".join(
        f"cuda:{d['index']} {_size(d['allocated'])} (peak {_size(d['peak'])})"
        for d in facts.get("devices", [])
    )


def read(world: World, ranks: list[int] | None = None) -> dict[int, dict]:
    """``{rank: facts}`` of the ranks on this machine that wrote any (``facts["age"]``:
    seconds since they were written)."""
    chosen = range(world.world_size) if ranks is None else ranks
    found = {}
    for rank in chosen:
        host = world.ranks[rank].host
        if host is not None and not is_local_host(host):
            continue
        path = world.ledger_path(rank) + ".gpu"
        try:
            with open(path, "rb") as handle:
                facts = json.loads(handle.read())
            facts["age"] = max(time.time() - os.path.getmtime(path), 0.0)
        except (OSError, ValueError):
            continue
        if facts.get("devices"):
            found[rank] = facts
    return found


def out_of_memory_lines(world: World, rank: int) -> list[str]:
    """What a rank that ran out of GPU memory held: its devices and memory (as of its last
    facts, at most a few seconds old)."""
    facts = read(world, [rank]).get(rank)
    if facts is None:
        return []
    return [f"GPU memory of rank {rank}, {facts['age']:.0f} s before: {fact_text(facts)}"]


def is_out_of_memory(ename: str | None, evalue: object) -> bool:
    return any(word in f"{ename} {evalue}" for word in OUT_OF_MEMORY)
