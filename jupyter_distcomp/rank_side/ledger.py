"""The collectives ledger: each rank's recent collective and point-to-point calls, and the
words that say what does not match across ranks.

Every process of a world writes its calls to a ring of fixed-size slots in a memory-mapped
file of its own (``Ring``); the kernel reads the files (``read_ring``) whenever it likes,
also while the rank is blocked in C code, with no message to the rank. A slot holds the
call's sequence number in its group, its start and end times (end 0 while it runs) and
its description as text fields. ``verdicts`` aligns the ranks' calls of each group by
sequence number and names what blocks or diverges; ``verdict_text`` is the one wording
every report uses (time-out, fail-fast, interrupt, ``where``, check mode on the ranks).

Standard library only: the ranks load this file by path (see ledger_hooks.py).
"""

from __future__ import annotations

import mmap
import os
import re
import struct
import time
from collections.abc import Iterable
from dataclasses import dataclass, field

MAGIC = b"DCL1"
_HEADER = struct.Struct("<4sIIQ")  # magic, slot size, capacity, records written
#: sequence number, started, finished (0: running; -t: a Wait for it since t), text size
_SLOT = struct.Struct("<qddH")
SLOT_SIZE = 320
CAPACITY = 1024
SEP = "\x1f"
#: the wrappers around a user's calls: those that record each collective, and flow.py's
#: around print and display (their frames are not the user's)
HOOK_FILES = tuple(
    os.path.join("rank_side", name)
    for name in ("ledger_hooks.py", "ledger_torch.py", "ledger_mpi.py", "flow.py")
)


def in_hooks(text: str) -> bool:
    """A stack or traceback line names one of our wrapper files."""
    return any(name in text for name in HOOK_FILES)


#: the file a rank's IPython runs a cell as
CELL_FILE = re.compile(r"(/tmp/ipykernel_\d+/\d+\.py|<ipython-input-[^>]+>)")
COLLECTIVE, P2P = "c", "p"


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
        """What must agree across the group's ranks for the call to be the same call."""
        return (self.op, self.data, self.reduce, self.root)

    def site(self) -> str:
        """``cell line 5``, or ``train.py:12 in step``."""
        if CELL_FILE.search(self.file):
            return f"cell line {self.line}"
        return f"{os.path.basename(self.file)}:{self.line} in {self.function}"


_COUNT = struct.Struct("<Q")
_SEQ = struct.Struct("<q")
_FINISHED = struct.Struct("<d")


class Ring:
    """This process's ledger file, written one slot per call."""

    def __init__(self, path: str, capacity: int = CAPACITY) -> None:
        size = _HEADER.size + SLOT_SIZE * capacity
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.ftruncate(fd, size)
            self.map = mmap.mmap(fd, size)
        finally:
            os.close(fd)
        self.capacity = capacity
        self.written = 0
        self._texts: dict[tuple, tuple] = {}  # a loop's calls repeat: encoded once
        _HEADER.pack_into(self.map, 0, MAGIC, SLOT_SIZE, capacity, 0)

    def begin(self, seq: int, call: tuple, code, line: int) -> int:
        """Record a call that starts now; its slot's offset, for :meth:`end`.

        ``call``: ``(kind, group, op, data, reduce, root, posted)`` (posted: ``"nb"`` for a
        non-blocking call, ``"ddp"`` for a DDP gradient bucket's, else ``""``); ``code``: the
        calling frame's code object (anything with ``co_filename`` and ``co_name``),
        ``line`` its line.
        """
        key = (call, code, line)
        known = self._texts.get(key)
        if known is None:
            text = SEP.join((*call, code.co_filename, str(line), code.co_name))
            raw = text.encode(errors="replace")[: SLOT_SIZE - _SLOT.size]
            if len(self._texts) > 4096:
                self._texts.clear()
            # the slot's fields and its text, written in one go
            known = self._texts[key] = (struct.Struct(f"{_SLOT.format}{len(raw)}s"), len(raw), raw)
        offset = _HEADER.size + SLOT_SIZE * (self.written % self.capacity)
        known[0].pack_into(self.map, offset, seq, time.time(), 0.0, known[1], known[2])
        self.written += 1
        _COUNT.pack_into(self.map, 12, self.written)
        return offset

    def end(self, offset: int, seq: int | None = None) -> None:
        """The call in slot ``offset`` has finished; with ``seq``: only if the slot still
        holds that call (a call that ends late, e.g. a request completed after the ring
        went round)."""
        if seq is not None and _SEQ.unpack_from(self.map, offset)[0] != seq:
            return
        _FINISHED.pack_into(self.map, offset + 16, time.time())

    def wait(self, offset: int, seq: int) -> None:
        """A Wait for the non-blocking call in slot ``offset`` starts now."""
        same = _SEQ.unpack_from(self.map, offset)[0] == seq
        if same and _FINISHED.unpack_from(self.map, offset + 16)[0] == 0.0:
            _FINISHED.pack_into(self.map, offset + 16, -time.time())


def read_ring(path: str, last: int | None = None) -> list[Entry]:
    """The calls in a ledger file, oldest first (only the ``last`` ones, when given: only
    their slots are read); [] when there is none (yet)."""
    try:
        with open(path, "rb") as handle:
            header = handle.read(_HEADER.size)
            if len(header) < _HEADER.size:
                return []
            magic, slot_size, capacity, written = _HEADER.unpack(header)
            if magic != MAGIC or slot_size != SLOT_SIZE:
                return []
            first = max(0, written - capacity, 0 if last is None else written - last)
            body = handle.read() if last is None else b""
            entries = []
            for index in range(first, written):
                place = slot_size * (index % capacity)
                if last is None:
                    raw = body[place : place + slot_size]
                else:
                    raw = os.pread(handle.fileno(), slot_size, _HEADER.size + place)
                if len(raw) < slot_size:
                    break
                seq, started, finished, size = _SLOT.unpack_from(raw, 0)
                text = raw[_SLOT.size : _SLOT.size + size].decode(errors="replace")
                entry = _entry(seq, started, finished, text)
                if entry is not None:
                    entries.append(entry)
            return entries
    except OSError:
        return []


def flight_recorder_entries(raw: bytes) -> list[Entry]:
    """torch's NCCL Flight Recorder dump (pickled, as ``_dump_nccl_trace`` gives it) as
    ledger entries: one per collective, its group named ``nccl group NAME``, finished once
    the GPU completed it."""
    import pickle

    dump = pickle.loads(raw)
    entries = []
    for item in dump.get("entries", []):
        if item.get("is_p2p"):
            continue
        data = " ".join(
            f"[{', '.join(map(str, size))}] {dtype}"
            for size, dtype in zip(
                item.get("input_sizes") or [], item.get("input_dtypes") or [], strict=False
            )
        )
        started = item.get("time_discovered_started_ns") or item.get("time_created_ns") or 0
        completed = item.get("state") == "completed"
        finished = (item.get("time_discovered_completed_ns") or started) if completed else 0
        group = item.get("process_group") or ("", "")
        frames = [
            f for f in item.get("frames") or [] if "/torch/" not in str(f.get("filename", ""))
        ]
        top = frames[0] if frames else {}
        entries.append(
            Entry(
                int(item.get("collective_seq_id", 0)),
                started / 1e9,
                finished / 1e9,
                COLLECTIVE,
                f"nccl group {group[0]}",
                str(item.get("profiling_name", "")).replace("nccl:", ""),
                data,
                "",
                "",
                str(top.get("filename", "")),
                int(top.get("line", 0) or 0),
                str(top.get("name", "")),
            )
        )
    return entries


def read_ledger(path: str, last: int | None = None) -> list[Entry]:
    """A rank's ledger file (its ``last`` calls, when given), with its NCCL Flight Recorder
    dump (``PATH.nccl``) if any."""
    entries = read_ring(path, last)
    try:
        with open(path + ".nccl", "rb") as handle:
            raw = handle.read()
    except OSError:
        return entries
    try:
        return entries + flight_recorder_entries(raw)
    except Exception:  # a dump torch changed the shape of: the ledger alone
        return entries


def _entry(seq: int, started: float, finished: float, text: str) -> Entry | None:
    parts = text.split(SEP)
    if len(parts) != 10:
        return None  # a slot being written while it was read
    kind, group, op, data, reduce, root, posted, file, line, function = parts
    return Entry(
        seq,
        started,
        finished,
        kind,
        group,
        op,
        data,
        reduce,
        root,
        file,
        int(line) if line.isdigit() else 0,
        function,
        posted == "nb",
        posted == "ddp",
    )


# -- words ---------------------------------------------------------------------------------
def ranks_text(ranks: Iterable[int]) -> str:
    """``[0, 1, 3]`` -> ``ranks 0-1, 3``; one rank -> ``rank 2`` (core.ranges.format_ranks
    is this, for the kernel)."""
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
    return ", ".join(d for d, shown in zip(fields, differ, strict=True) if d and shown) or "no data"


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
        return f"{ranks_text(ranks)} {verb}"
    return f"{ranks_text(ranks)} " + {"have": "has"}.get(verb, verb + "s")


def _wait_words(ranks: list[int], entries: dict[int, Entry], now: float | None) -> str:
    running = [r for r in ranks if entries[r].running]
    if now is None:
        return f"{_says(ranks, 'call')} it"
    if not running:
        return f"{ranks_text(ranks)} went on (their result may be wrong)"
    since = now - min(entries[r].started for r in running)
    done = [r for r in ranks if r not in running]
    words = f"{_says(running, 'wait')} since {since:.0f} s"
    if done:
        words += f", {ranks_text(done)} went on (their result may be wrong)"
    return words


def verdict_text(verdict: Verdict, entries: dict[int, Entry] | None = None) -> str:
    """The one wording of a verdict, e.g. ``all_reduce #37 ([4] float32, sum, default
    group): ranks 0-1, 3 wait since 12 s; rank 2 has not called it: it is in barrier #37 at
    cell line 5``, or for a mismatch of data ``all_reduce #12: ranks 0-1 [4] float32, ranks
    2-3 [5] float32``."""
    call = verdict.call
    same_op = [(ranks, e) for ranks, e in verdict.others if e.op == call.op]
    other_op = [(ranks, e) for ranks, e in verdict.others if e.op != call.op]
    state = entries or {}
    if same_op and not other_op and not verdict.missing:
        sides = [(verdict.callers, call), *same_op]
        differ = _differ([e for _, e in sides])
        common = [
            d
            for d, shown in zip((call.data, call.reduce, call.root), differ, strict=False)
            if d and not shown
        ]
        text = f"{call.op} #{call.seq} ({', '.join([*common, call.group])}): " + ", ".join(
            f"{ranks_text(ranks)} {_shape_text(e, differ)}" for ranks, e in sides
        )
        if verdict.now is not None and state:
            waiting = [r for ranks, _ in sides for r in ranks if r in state and state[r].running]
            went = [r for ranks, _ in sides for r in ranks if r in state and not state[r].running]
            if went:
                text += f"; {ranks_text(went)} went on (their result may be wrong)"
            if waiting:
                since = verdict.now - min(state[r].started for r in waiting)
                text += f"; {_says(waiting, 'wait')} since {since:.0f} s"
        return text
    text = f"{call_text(call)}: "
    if state and all(r in state for r in verdict.callers):
        text += _wait_words(verdict.callers, state, verdict.now)
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


def _doing(rank: int, ledgers: dict[int, list[Entry]], group: str, busy: set[int] | None) -> str:
    """What a rank that did not reach a call does instead."""
    entries = ledgers.get(rank, [])
    running = [e for e in entries if e.blocked]
    if running:
        e = running[-1]
        where = call_text(e, group=e.group != group)
        return f"it is in {where} at {e.site()}"
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
) -> list[Verdict]:
    """What blocks or diverges, per group: the first sequence number where the ranks'
    calls differ, else the call some ranks wait in that others have not reached.

    ``busy``: the ranks still running their cell (None: unknown); ``groups``: the ledgers'
    ``by_group``, when known. Only sequence numbers that every member still holds in its
    ring are compared.
    """
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
                    r: _doing(r, ledgers, group, busy) for r in members if r not in calls
                }
                break
            pending = [r for r, e in calls.items() if e.running]
            absent = [r for r in members if r not in calls]
            if pending and absent:
                (callers, call), *_ = split
                verdict = Verdict(group, seq, call, callers, now=now)
                verdict.missing = {r: _doing(r, ledgers, group, busy) for r in absent}
                break
        if verdict is not None:
            found.append(verdict)
    return found
