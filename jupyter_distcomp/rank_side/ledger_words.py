"""The collectives ledger's words: one call on one rank (``Entry``), the verdicts on what
blocks or diverges across ranks, and how every report says them.

``verdicts`` aligns the ranks' calls of each group by sequence number and names what blocks
or diverges; ``verdict_text`` is the one wording every report uses (time-out, fail-fast,
interrupt, ``where``, check mode on the ranks); ``format_ranks`` is the one way a message
names ranks (``ranks 0-1, 3``). The calls come from each rank's ring file (ledger.py), or from
a job's logs (core/joblog).

Standard library only, no sibling imported: the ranks load this file by path (see
ledger_hooks.py), and the kernel's core/ imports it alone.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

#: the wrappers around a user's calls: those that record each collective, and flow.py's
#: around print and display (their frames are not the user's)
HOOK_FILES = tuple(
    os.path.join("rank_side", name)
    for name in (
        "ledger_hooks.py",
        "ledger_torch.py",
        "ledger_mpi.py",
        "ledger_horovod.py",
        "check_exchange.py",
        "flow.py",
    )
)


def in_hooks(text: str) -> bool:
    """A stack or traceback line names one of our wrapper files."""
    return any(name in text for name in HOOK_FILES)


#: the file a rank's IPython runs a cell as
CELL_FILE = re.compile(r"(/tmp/ipykernel_\d+/\d+\.py|<ipython-input-[^>]+>)")
COLLECTIVE, P2P = "c", "p"
#: a call its library refused on every rank before it ran (Horovod's error for tensors that
#: do not match): kept in the ring, in no group's calls
REFUSED = "r"


def cell_place(label: str, line: int | str) -> str:
    """``In [5], line 7`` for a line of the notebook's cell ``In [5]``; ``cell line 7`` for a
    cell whose label is not known."""
    return f"{label}, line {line}" if label else f"cell line {line}"


def _unlabelled(file: str, line: int) -> str:
    return ""


#: ``(cell file, line) -> "In [5], line 7"`` ('' for a cell it does not know): how
#: :meth:`Entry.site` names a call site in a cell (see :func:`name_cells`)
_cell_namer: Callable[[str, int], str] = _unlabelled


def name_cells(namer: Callable[[str, int], str]) -> None:
    """Name call sites in cells with ``namer(cell file, line)`` from now on: the kernel
    with the notebook's labels of the cells it sent (local/ranks/ledgers.py), a rank with
    the labels its IPython ran them under (ledger_hooks.install); a cell ``namer`` does not
    know (it returns '') is ``cell line 7``."""
    global _cell_namer
    _cell_namer = namer


#: collectives whose data may differ between the ranks of one call, by MPI's, torch's and
#: Horovod's own rules: mpi4py's object collectives (any picklable object, ``None`` off the
#: root), per-rank counts (the ``v``/``w`` forms), root-only send buffers (``Scatter``),
#: torch's object collectives and uneven all-to-alls, and Horovod's allgathers (first
#: dimensions of their own) and all-to-alls (splits of their own)
_OWN_DATA_MPI = [
    "bcast",
    "gather",
    "scatter",
    "allgather",
    "alltoall",
    "reduce",
    "allreduce",
    "scan",
    "exscan",
    "Gatherv",
    "Scatterv",
    "Allgatherv",
    "Alltoallv",
    "Alltoallw",
    "Reduce_scatter",
    "Scatter",
    "Neighbor_allgatherv",
    "Neighbor_alltoallv",
    "Neighbor_alltoallw",
]
RANK_OWN_DATA = frozenset(
    _OWN_DATA_MPI
    + ["I" + name.lower() for name in _OWN_DATA_MPI if name[0].isupper()]
    + [
        "all_gather_object",
        "gather_object",
        "scatter_object_list",
        "all_to_all",
        "all_to_all_single",
        "hvd.allgather",
        "hvd.grouped_allgather",
        "hvd.alltoall",
    ]
)


@dataclass
class Entry:
    """One call on one rank."""

    seq: int
    started: float
    finished: float  # 0 while the call runs
    kind: str  # COLLECTIVE or P2P
    group: str  # "default group", "COMM_WORLD", "group 1 (ranks 0, 2)"
    op: str  # "all_reduce", "Allreduce", "send"
    data: str  # "[4] float32", "object", ""
    reduce: str = ""  # "sum"
    root: str = ""  # "root 0", "to rank 2"
    file: str = ""
    line: int = 0
    function: str = ""
    #: a non-blocking call (``Iallreduce``, ``isend``, ``async_op=True``): it runs until its
    #: request or work completes, while the rank goes on
    posted: bool = False
    #: the GPU's own state of an NCCL call, from torch's Flight Recorder: "scheduled" (not
    #: launched on the GPU yet), "started" (its kernel runs), "completed"; "" elsewhere
    gpu: str = ""
    #: a reduction of DDP's gradient buckets (in ``backward``)
    bucket: bool = False

    @property
    def members(self) -> tuple[int, ...]:
        """The group's ranks, from its label ``... (ranks 0, 2)``; empty: every rank."""
        group = self.group
        if not (group.endswith(")") and "(ranks " in group):
            return ()
        inside = group[group.rindex("(ranks ") + 7 : -1]
        return tuple(int(r) for r in inside.split(",") if r.strip().isdigit())

    @property
    def running(self) -> bool:
        """Not finished: a blocking call still in it, a non-blocking one not complete."""
        return self.finished <= 0.0

    @property
    def blocked(self) -> bool:
        """The rank waits in this call: a blocking call that runs, or a non-blocking one
        whose request a Wait waits for (``finished`` is then minus the Wait's start)."""
        return self.finished < 0.0 or (self.finished == 0.0 and not self.posted)

    @property
    def signature(self) -> tuple[str, str, str, str]:
        """What must agree across the group's ranks for the call to be the same call: the
        operation, reduce op and root always; the data only where MPI and torch require
        equal data on every rank (see :data:`RANK_OWN_DATA`)."""
        if self.op in RANK_OWN_DATA:
            return (self.op, "", self.reduce, self.root)
        return (self.op, self.data, self.reduce, self.root)

    def site(self) -> str:
        """``In [5], line 7`` (the cell that defined the code; ``cell line 7`` where that
        cell is not known), or ``train.py:12 in step``."""
        if CELL_FILE.search(self.file):
            return _cell_namer(self.file, self.line) or cell_place("", self.line)
        if not self.file:  # a call of torch's record without its stack
            return "a call site torch's record does not give"
        return f"{os.path.basename(self.file)}:{self.line} in {self.function}"


#: the dtype names of torch's C++ record -> torch's Python names, as the ledger writes them
TORCH_DTYPES = {
    "Float": "float32",
    "Double": "float64",
    "Half": "float16",
    "BFloat16": "bfloat16",
    "Long": "int64",
    "Int": "int32",
    "Short": "int16",
    "Char": "int8",
    "Byte": "uint8",
    "Bool": "bool",
}


# -- words ---------------------------------------------------------------------------------
def format_ranks(ranks: Iterable[int]) -> str:
    """``[0, 1, 3]`` -> ``ranks 0-1, 3``; one rank -> ``rank 2``."""
    ordered = sorted(set(ranks))
    if not ordered:
        return "no rank"
    spans: list[str] = []
    start = prev = ordered[0]
    for rank in [*ordered[1:], None]:
        if rank is not None and rank == prev + 1:
            prev = rank
            continue
        spans.append(str(start) if start == prev else f"{start}-{prev}")
        if rank is not None:
            start = prev = rank
    return f"{'rank' if len(ordered) == 1 else 'ranks'} {', '.join(spans)}"


def call_text(entry: Entry, group: bool = True, seq: bool = True) -> str:
    """``all_reduce #37 ([4] float32, sum, default group)``."""
    details = [d for d in (entry.data, entry.reduce, entry.root) if d]
    if group:
        details.append(entry.group)
    name = f"{entry.op} #{entry.seq}" if seq else entry.op
    return name + (f" ({', '.join(details)})" if details else "")


def _shape_text(entry: Entry, differ: tuple[bool, ...] = (True, True, True)) -> str:
    fields = (entry.data, entry.reduce, entry.root)
    return ", ".join(d for d, shown in zip(fields, differ) if d and shown) or "no data"


def _differ(entries: list[Entry]) -> tuple[bool, ...]:
    """Which of data, reduce op and root differ among ``entries``."""
    rows = [(e.data, e.reduce, e.root) for e in entries]
    return tuple(len({row[i] for row in rows}) > 1 for i in range(3))


@dataclass
class Verdict:
    """What blocks or diverges in one group, as data; :meth:`text` says it."""

    group: str
    seq: int
    #: ranks that agree on the call (the most ranks; ties: the lowest rank's side)
    call: Entry
    callers: list[int]
    #: other calls at the same sequence number: [(ranks, their call)]
    others: list[tuple[list[int], Entry]] = field(default_factory=list)
    #: ranks of the group with no call at this sequence number, and what they do instead
    missing: dict[int, str] = field(default_factory=dict)
    now: float | None = None  # when read; None: said before the call (check mode)

    @property
    def ranks(self) -> list[int]:
        """Every rank the verdict names as diverging."""
        return sorted({r for ranks, _ in self.others for r in ranks} | set(self.missing))

    def text(self) -> str:
        return verdict_text(self)


def _says(ranks: list[int], verb: str) -> str:
    """``rank 2 waits`` / ``ranks 0-1 wait`` (``verb`` in the plural)."""
    if len(set(ranks)) != 1:
        return f"{format_ranks(ranks)} {verb}"
    return f"{format_ranks(ranks)} " + {"have": "has"}.get(verb, verb + "s")


#: an NCCL call's GPU-side state (Entry.gpu) in words
_GPU_WORDS = {
    "scheduled": "not started on the GPU",
    "started": "running on the GPU",
    "completed": "completed on the GPU",
}


def gpu_text(entries: dict[int, Entry]) -> str:
    """``ranks 0-1 completed on the GPU, rank 2 not started on the GPU``: the GPU-side
    state of NCCL calls (torch's record); "" when no entry has one."""
    by_state: dict[str, list[int]] = {}
    for rank, entry in sorted(entries.items()):
        if entry.gpu:
            by_state.setdefault(entry.gpu, []).append(rank)
    return ", ".join(
        f"{format_ranks(ranks)} {_GPU_WORDS.get(state, state + ' on the GPU')}"
        for state, ranks in by_state.items()
    )


def _went_words(ranks: list[int], besides: dict[int, str]) -> list[str]:
    """What ranks out of a call did: ``besides``' words (``raised an error``), else they
    went on past it."""
    said: dict[str, list[int]] = {}
    for rank in ranks:
        said.setdefault(besides.get(rank, "went on (their result may be wrong)"), []).append(rank)
    return [f"{format_ranks(group)} {words}" for words, group in said.items()]


def _wait_words(
    ranks: list[int], entries: dict[int, Entry], now: float | None, besides: dict[int, str]
) -> str:
    running = [r for r in ranks if entries[r].running]
    if now is None:
        return f"{_says(ranks, 'call')} it"
    if not running:
        return "; ".join(_went_words(ranks, besides))
    since = now - min(entries[r].started for r in running)
    done = [r for r in ranks if r not in running]
    words = f"{_says(running, 'wait')} since {since:.0f} s"
    gpu = gpu_text({r: entries[r] for r in ranks})
    if gpu:
        words += f" ({gpu})"
    return ", ".join([words, *_went_words(done, besides)])


def verdict_text(
    verdict: Verdict, entries: dict[int, Entry] | None = None, besides: dict[int, str] | None = None
) -> str:
    """The one wording of a verdict, e.g. ``all_reduce #37 ([4] float32, sum, default
    group): ranks 0-1, 3 wait since 12 s; rank 2 has not called it: it is in barrier #37 at
    In [5], line 7``, or for a mismatch of data ``all_reduce #12: ranks 0-1 [4] float32, ranks
    2-3 [5] float32``. ``besides``: what ranks out of the call did, as the caller knows it
    (``{2: "raised an error"}``)."""
    besides = besides or {}
    call = verdict.call
    same_op = [(ranks, e) for ranks, e in verdict.others if e.op == call.op]
    other_op = [(ranks, e) for ranks, e in verdict.others if e.op != call.op]
    state = entries or {}
    if same_op and not other_op and not verdict.missing:
        sides = [(verdict.callers, call), *same_op]
        differ = _differ([e for _, e in sides])
        common = [
            d for d, shown in zip((call.data, call.reduce, call.root), differ) if d and not shown
        ]
        text = f"{call.op} #{call.seq} ({', '.join([*common, call.group])}): " + ", ".join(
            f"{format_ranks(ranks)} {_shape_text(e, differ)}" for ranks, e in sides
        )
        if verdict.now is not None and state:
            waiting = [r for ranks, _ in sides for r in ranks if r in state and state[r].running]
            went = [r for ranks, _ in sides for r in ranks if r in state and not state[r].running]
            if went:
                text += "; " + "; ".join(_went_words(went, besides))
            if waiting:
                since = verdict.now - min(state[r].started for r in waiting)
                text += f"; {_says(waiting, 'wait')} since {since:.0f} s"
        return text
    text = f"{call_text(call)}: "
    if state and all(r in state for r in verdict.callers):
        text += _wait_words(verdict.callers, state, verdict.now, besides)
    else:
        text += _says(verdict.callers, "call") + " it" if verdict.now is None else ""
        text += _says(verdict.callers, "wait") if verdict.now is not None else ""
    for ranks, e in same_op:
        text += f"; {_says(ranks, 'call')} it with {_shape_text(e)}"
    for ranks, e in other_op:
        text += (
            f"; {_says(ranks, 'have')} not called it: "
            f"{'it is' if len(ranks) == 1 else 'they are'} in {call_text(e, group=False)} "
            f"at {e.site()}"
        )
    by_doing: dict[str, list[int]] = {}
    for rank, doing in sorted(verdict.missing.items()):
        by_doing.setdefault(doing, []).append(rank)
    for doing, ranks in by_doing.items():
        text += f"; {_says(ranks, 'have')} not called it"
        text += f": {doing}" if doing else ""
    return text


def sides(calls: dict[int, Entry]) -> list[tuple[list[int], Entry]]:
    """The ranks' calls at one sequence number grouped by signature, largest group first
    (ties: the group with the lowest rank)."""
    groups: dict[tuple, tuple[list[int], Entry]] = {}
    for rank in sorted(calls):
        groups.setdefault(calls[rank].signature, ([], calls[rank]))[0].append(rank)
    return sorted(groups.values(), key=lambda side: (-len(side[0]), side[0][0]))


def by_group(ledgers: dict[int, list[Entry]]) -> dict[str, dict[int, dict[int, Entry]]]:
    """``{group: {seq: {rank: entry}}}`` of the collective calls."""
    groups: dict[str, dict[int, dict[int, Entry]]] = {}
    for rank, entries in ledgers.items():
        group, table = None, {}
        for entry in entries:
            if entry.kind != COLLECTIVE:
                continue
            if entry.group != group:
                group = entry.group
                table = groups.setdefault(group, {})
            calls = table.get(entry.seq)
            if calls is None:
                calls = table[entry.seq] = {}
            calls[rank] = entry
    return groups


def _doing(
    rank: int,
    ledgers: dict[int, list[Entry]],
    group: str,
    busy: set[int] | None,
    besides: dict[int, str],
) -> str:
    """What a rank that did not reach a call does instead."""
    entries = ledgers.get(rank, [])
    running = [e for e in entries if e.blocked]
    if running:
        e = running[-1]
        where = call_text(e, group=e.group != group)
        return f"it is in {where} at {e.site()}"
    if rank in besides:
        return f"it {besides[rank]}"
    if busy is not None and rank not in busy:
        return "its cell has ended"
    last = [e for e in entries if e.group == group and e.kind == COLLECTIVE]
    if last:
        return f"it runs other code (its last call here: {last[-1].op} #{last[-1].seq})"
    return "it runs other code"


def verdicts(
    ledgers: dict[int, list[Entry]],
    world_size: int,
    busy: set[int] | None = None,
    now: float | None = None,
    groups: dict[str, dict[int, dict[int, Entry]]] | None = None,
    besides: dict[int, str] | None = None,
) -> list[Verdict]:
    """What blocks or diverges, per group: the first sequence number where the ranks'
    calls differ, else the call some ranks wait in that others have not reached.

    ``busy``: the ranks still running their cell (None: unknown); ``groups``: the ledgers'
    ``by_group``, when known; ``besides``: what ranks do that their ledger does not say
    (``{1: "stopped at a breakpoint prompt"}``). Only sequence numbers that every member
    still holds in its ring are compared.
    """
    besides = besides or {}
    now = time.time() if now is None else now
    found: list[Verdict] = []
    for group, table in (by_group(ledgers) if groups is None else groups).items():
        any_entry = next(iter(next(iter(table.values())).values()))
        members = list(any_entry.members) or list(range(world_size))
        members = [r for r in members if r in ledgers]
        if not members:
            continue
        firsts: dict[int, int] = {}  # each rank's oldest call of the group in its ring
        for seq in sorted(table):
            for rank in table[seq]:
                firsts.setdefault(rank, seq)
            if len(firsts) == len(members):
                break
        low = max((firsts[r] for r in members if r in firsts), default=0)
        verdict = None
        for seq in sorted(s for s in table if s >= low):
            calls = table[seq]
            split = sides(calls)
            if len(split) > 1:
                (callers, call), *others = split
                verdict = Verdict(group, seq, call, callers, others, now=now)
                verdict.missing = {
                    r: _doing(r, ledgers, group, busy, besides) for r in members if r not in calls
                }
                break
            pending = [r for r, e in calls.items() if e.running]
            absent = [r for r in members if r not in calls]
            if pending and absent:
                (callers, call), *_ = split
                verdict = Verdict(group, seq, call, callers, now=now)
                verdict.missing = {r: _doing(r, ledgers, group, busy, besides) for r in absent}
                break
        if verdict is not None:
            found.append(verdict)
    return found
