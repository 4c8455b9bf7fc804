"""``%distcomp where JOB`` and ``%distcomp collectives JOB`` of an attached job: the stacks
taken on each node over its SSH connection (faulthandler on SIGUSR1, as for ranks on hosts:
local/stacks.py), the ledgers read there and judged here as a local world's are.
"""

from __future__ import annotations

import os
import tempfile
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING

from ...contracts import RankState
from ...core.ranges import format_ranks
from ...rank_side import ledger
from ..attached import nodes as node_side
from ..ranks.ledgers import AT_PROMPT
from ..stacks import RemoteRank, remote_stacks, stack_sections
from .collectives import report
from .where import WhereReport

if TYPE_CHECKING:
    from ..attached import AttachedJob

_WORDS = {
    RankState.STARTING: "not seen yet (starting)",
    RankState.DEAD: "ended, or its node out of reach",
}


def where_job(job: AttachedJob, ranks: list[int] | None = None) -> WhereReport:
    """Where each of ``ranks`` (default: all) of the job is now, grouped by stack."""
    chosen = list(range(job.world_size)) if ranks is None else ranks
    states = job.states()
    waiting = [r for r in job.waiting() if r in chosen and states[r] == RankState.BUSY]
    live = [r for r in chosen if states[r] in (RankState.BUSY, RankState.DEBUGGING)]
    remote = []
    for rank in live:
        process, node = job.procs[rank], job.node_of(rank)
        if rank not in waiting and node is not None:
            remote.append(
                RemoteRank(rank, node.destination, process.pid, process.stack, process.thread)
            )
    stacks = remote_stacks(job.ssh_command, remote) if remote else {}
    sections: list[tuple[str, list[str]]] = []
    running = {r: s for r, s in stacks.items() if states[r] == RankState.BUSY}
    prompt = {r: s for r, s in stacks.items() if states[r] == RankState.DEBUGGING}
    sections += stack_sections(running, "", "running, current stack")
    sections += stack_sections(prompt, "", "at the debugger prompt")
    if waiting:
        sections.append((f"{format_ranks(waiting)}: at breakpoint(), waiting for a notebook", []))
    silent = [r for r in live if r not in stacks and r not in waiting]
    if silent:
        sections.append((f"{format_ranks(silent)}: gave no stack (ending, or not Python)", []))
    rest: dict[str, list[int]] = {}
    for rank in chosen:
        if rank not in live:
            rest.setdefault(_WORDS.get(states[rank], str(states[rank])), []).append(rank)
    sections += [(f"{format_ranks(group)}: {word}", []) for word, group in rest.items()]
    title = f"{job.name}: where {format_ranks(chosen)} are (a job on Azure ML, attached)"
    return WhereReport(title, sections)


def collectives_job(job: AttachedJob, last: int = 10) -> WhereReport:
    """The recent collectives of every rank of the job, from the ledgers on its nodes."""
    title = f"{job.name}: the last {last} collective(s) of each group, by sequence number"
    states = job.states()
    busy = {r for r, s in states.items() if s in (RankState.BUSY, RankState.DEBUGGING)}
    besides = {r: AT_PROMPT for r, s in states.items() if s == RankState.DEBUGGING}
    raw = _ledger_bytes(job)
    with tempfile.TemporaryDirectory(prefix="distcomp-ledgers-") as folder:
        ledgers = {}
        for rank, (ring, record) in raw.items():
            path = os.path.join(folder, f"rank{rank}.ledger")
            with open(path, "wb") as handle:
                handle.write(ring)
            if record:
                with open(path + ".torch", "wb") as handle:
                    handle.write(record)
            ledgers[rank] = ledger.read_ledger(path)
    shown = report(title, ledgers, job.world_size, busy, last, dict(states), besides)
    away = [r for r in range(job.world_size) if r not in ledgers]
    if away:
        shown.sections.append(
            (f"{format_ranks(away)}: no ledger read (not seen, or its node out of reach)", [])
        )
    return shown


def _ledger_bytes(job: AttachedJob) -> dict[int, tuple[bytes, bytes]]:
    """rank -> (its ledger's bytes, its torch record's), read on each node at once."""
    by_node: dict[int, dict[str, str]] = {}
    for rank, process in job.procs.items():
        node = job.node_of(rank)
        if process.ledger and node is not None and node.state == "attached":
            files = by_node.setdefault(node.index, {})
            files[str(rank)] = process.ledger
            files[f"{rank}.torch"] = process.ledger + ".torch"

    def read(index: int) -> dict[str, bytes]:
        done = job.nodes[index].link.run(node_side.read_files_script(by_node[index]), 30)
        return node_side.parse_files(done.stdout) if done is not None else {}

    found: dict[str, bytes] = {}
    with ThreadPoolExecutor(max_workers=max(1, len(by_node))) as pool:
        for read_there in pool.map(read, list(by_node)):
            found.update(read_there)
    return {
        int(key): (data, found.get(f"{key}.torch", b""))
        for key, data in found.items()
        if key.isdigit() and data
    }
