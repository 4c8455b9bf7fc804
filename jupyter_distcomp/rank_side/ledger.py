"""The collectives ledger's ring file: each rank's recent collective and point-to-point
calls, and torch's own record of its NCCL calls read beside it.

Every process of a world writes its calls to a ring of fixed-size slots in a memory-mapped
file of its own (``Ring``); the kernel reads the files (``read_ring``, ``read_ledger``)
whenever it likes, also while the rank is blocked in C code, with no message to the rank. A
slot holds the call's sequence number in its group, its start and end times (end 0 while it
runs) and its description as text fields. What the calls mean across ranks is
ledger_words.py's.

Standard library only: the ranks load this file by path (see ledger_hooks.py), and then it
loads ledger_words.py beside it by path too.
"""

from __future__ import annotations

import mmap
import os
import re
import stat
import struct
import sys
import time

try:
    from .ledger_words import COLLECTIVE, REFUSED, TORCH_DTYPES, Entry
except ImportError:  # loaded by path on a rank: its sibling by path too
    import importlib.util

    def _words():
        name = "distcomp_ledger_words"
        if name not in sys.modules:
            here = os.path.dirname(os.path.abspath(__file__))
            spec = importlib.util.spec_from_file_location(
                name, os.path.join(here, "ledger_words.py")
            )
            assert spec is not None and spec.loader is not None
            module = importlib.util.module_from_spec(spec)
            sys.modules[name] = module
            spec.loader.exec_module(module)
        return sys.modules[name]

    COLLECTIVE, REFUSED = _words().COLLECTIVE, _words().REFUSED
    TORCH_DTYPES = _words().TORCH_DTYPES
    Entry = _words().Entry  # type: ignore[misc]


MAGIC = b"DCL1"
_HEADER = struct.Struct("<4sIIQ")  # magic, slot size, capacity, records written
#: sequence number, started, finished (0: running; -t: a Wait for it since t), text size
_SLOT = struct.Struct("<qddH")
SLOT_SIZE = 320
CAPACITY = 1024
SEP = "\x1f"


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
