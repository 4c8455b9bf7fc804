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
import stat
import struct
import sys
import time
from collections.abc import Callable, Iterable
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


_COUNT = struct.Struct("<Q")
_SEQ = struct.Struct("<q")
_FINISHED = struct.Struct("<d")


class LedgerDamaged(ValueError):
    """A ledger file that is not one: not a regular file, shorter than its header says, or
    not in the ledger's format."""


#: a ledger's path is opened as it is (no link followed), and a FIFO or device there opens
#: without blocking, so that it is refused rather than waited on
_OPEN_FLAGS = os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


def _regular(fd: int, path: str) -> os.stat_result:
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        raise LedgerDamaged(f"{path} is not a regular file")
    return info


class Ring:
    """This process's ledger file, written one slot per call. Its blocks are allocated when
    it is made (a full disk says so then, rather than killing the rank at a later call)."""

    def __init__(self, path: str, capacity: int = CAPACITY) -> None:
        size = _HEADER.size + SLOT_SIZE * capacity
        fd = os.open(path, os.O_RDWR | os.O_CREAT | _OPEN_FLAGS, 0o600)
        try:
            _regular(fd, path)
            os.ftruncate(fd, 0)
            os.posix_fallocate(fd, 0, size)
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

    def refuse(self, offset: int, seq: int) -> None:
        """The call in slot ``offset`` ended refused (see :data:`REFUSED`): it counts in no
        verdict, so the group's later calls are compared as they come."""
        if _SEQ.unpack_from(self.map, offset)[0] == seq:
            _FINISHED.pack_into(self.map, offset + 16, time.time())
            self.map[offset + _SLOT.size] = ord(REFUSED)

    def recent(self, last: int) -> list[Entry]:
        """This process's own ``last`` calls, oldest first, read from its map (another
        thread of the process reads them so, without opening the file)."""
        written = self.written
        entries = []
        for index in range(max(0, written - min(last, self.capacity)), written):
            place = _HEADER.size + SLOT_SIZE * (index % self.capacity)
            entry = _slot_entry(self.map[place : place + SLOT_SIZE])
            if entry is not None:
                entries.append(entry)
        return entries


def _slot_entry(raw: bytes) -> Entry | None:
    """The call in one slot's bytes; None for a slot being written while it was read."""
    seq, started, finished, size = _SLOT.unpack_from(raw, 0)
    return _entry(
        seq, started, finished, raw[_SLOT.size : _SLOT.size + size].decode(errors="replace")
    )


def read_ring(path: str, last: int | None = None) -> list[Entry]:
    """The calls in a ledger file, oldest first (only the ``last`` ones, when given: only
    their slots are read); [] when there is none (yet). LedgerDamaged for a file that is
    no ledger (never a block on a FIFO, never a read past its end)."""
    try:
        fd = os.open(path, os.O_RDONLY | _OPEN_FLAGS)
    except OSError:
        return []
    with open(fd, "rb") as handle:
        length = _regular(fd, path).st_size
        header = handle.read(_HEADER.size)
        if length == 0 or header == bytes(_HEADER.size):
            return []  # made, not written yet
        if len(header) < _HEADER.size:
            raise LedgerDamaged(f"{path} is truncated ({length:,} bytes)")
        magic, slot_size, capacity, written = _HEADER.unpack(header)
        if magic != MAGIC or slot_size != SLOT_SIZE:
            raise LedgerDamaged(f"{path} is not a collectives ledger")
        expected = _HEADER.size + slot_size * capacity
        if length < expected:
            raise LedgerDamaged(f"{path} is truncated ({length:,} of {expected:,} bytes)")
        try:
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
                entry = _slot_entry(raw)
                if entry is not None:
                    entries.append(entry)
            return entries
        except OSError:
            return []


#: the ledger's label of a torch process group: its name and ranks
_GROUP_LABEL = re.compile(r"group (\S+) \(ranks ([\d, ]+)\)$")
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


def torch_record_entries(raw: bytes, members: dict[str, str] | None = None) -> list[Entry]:
    """torch's own record of each NCCL collective (its Flight Recorder, as the rank's
    ledger_torch dumps it beside the ledger: JSON, ``{"entries": [...], "pg_config": {...}}``)
    as ledger entries: its group named ``nccl group NAME (ranks ...)``, finished once the GPU
    completed it, with the GPU-side state in ``gpu``. Entries of other backends (gloo's, on
    torch >= 2.13) are duplicates of the ledger's own rows and are left out here.
    ``members``: process group name -> its ranks' text (``0, 2``), from the ledger's own rows,
    for a group whose ranks torch's record does not give."""
    import json

    dump = json.loads(raw)
    configs = dump.get("pg_config") or {}
    entries = []
    for item in dump.get("entries", []):
        profile = str(item.get("profiling_name", ""))
        if item.get("is_p2p") or not profile.startswith("nccl:"):
            continue
        data = " ".join(
            f"[{', '.join(map(str, size))}] {TORCH_DTYPES.get(dtype, str(dtype).lower())}"
            for size, dtype in zip(item.get("input_sizes") or [], item.get("input_dtypes") or [])
        )
        created = item.get("time_created_ns") or 0
        state = str(item.get("state") or "")
        finished = (
            (item.get("time_discovered_completed_ns") or created) if state == "completed" else 0
        )
        name = str((item.get("process_group") or ("",))[0])
        ranks = str((configs.get(name) or {}).get("ranks") or "").strip("[]")
        ranks = ranks or (members or {}).get(name, "")
        label = f"nccl group {name}" + (f" (ranks {ranks})" if ranks else "")
        frames = [
            f for f in item.get("frames") or [] if "/torch/" not in str(f.get("filename", ""))
        ]
        top = frames[0] if frames else {}
        entries.append(
            Entry(
                int(item.get("collective_seq_id", 0)),
                created / 1e9,
                finished / 1e9,
                COLLECTIVE,
                label,
                profile.replace("nccl:", ""),
                data,
                "",
                "",
                str(top.get("filename", "")),
                int(top.get("line", 0) or 0),
                str(top.get("name", "")),
                gpu=state,
            )
        )
    return entries


_SAID: set[str] = set()


def read_ledger(path: str, last: int | None = None) -> list[Entry]:
    """A rank's ledger file (its ``last`` calls, when given), with torch's record of its
    NCCL calls (``PATH.torch``, see :func:`torch_record_entries`) if any. A damaged ledger is said once, on the kernel's stderr (the
    cell that reads it), and counts as empty."""
    try:
        entries = read_ring(path, last)
    except LedgerDamaged as exc:
        if str(exc) not in _SAID:
            _SAID.add(str(exc))
            print(
                f"distcomp: a collectives ledger is damaged: {exc}; its calls are not shown "
                "(its rank runs on).",
                file=sys.stderr,
            )
        return []
    try:
        fd = os.open(path + ".torch", os.O_RDONLY | _OPEN_FLAGS)
        with open(fd, "rb") as handle:
            _regular(fd, path + ".torch")
            raw = handle.read()
    except (OSError, LedgerDamaged):
        return entries
    members = {}  # "group 1 (ranks 0, 2)" -> {"1": "0, 2"}
    for entry in entries:
        found = _GROUP_LABEL.match(entry.group)
        if found:
            members[found.group(1)] = found.group(2)
    try:
        return entries + torch_record_entries(raw, members)
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
        bucket=posted == "ddp",
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
        return f"{ranks_text(ranks)} {verb}"
    return f"{ranks_text(ranks)} " + {"have": "has"}.get(verb, verb + "s")


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
        f"{ranks_text(ranks)} {_GPU_WORDS.get(state, state + ' on the GPU')}"
        for state, ranks in by_state.items()
    )


def _went_words(ranks: list[int], besides: dict[int, str]) -> list[str]:
    """What ranks out of a call did: ``besides``' words (``raised an error``), else they
    went on past it."""
    said: dict[str, list[int]] = {}
    for rank in ranks:
        said.setdefault(besides.get(rank, "went on (their result may be wrong)"), []).append(rank)
    return [f"{ranks_text(group)} {words}" for words, group in said.items()]


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
            f"{ranks_text(ranks)} {_shape_text(e, differ)}" for ranks, e in sides
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
