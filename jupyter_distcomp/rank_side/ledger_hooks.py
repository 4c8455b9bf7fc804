"""On a rank: record every ``torch.distributed``, mpi4py and Horovod call in the ledger
(ledger.py), and in check mode compare the call across the group before it runs.

:func:`install` opens the ledger file and wraps ``torch.distributed``'s functions, DDP
(ledger_torch.py), mpi4py's communicators (ledger_mpi.py) and Horovod's PyTorch operations
(ledger_horovod.py) as soon as each is imported
(an import hook: a rank that never imports torch never loads it). A wrapper records the
call (sequence number per group, operation, shapes and dtypes, reduce op, root or peer,
call site), runs it, and records its end (a non-blocking call's when its request or work
completes): about 2 microseconds, no message to any other rank. What a call costs is kept
small: its call site is the first frame outside the skipped folders, each code object
looked at once; the texts describing a call (shapes, ops, the slot's bytes) are built once
per distinct call and reused.

Check mode (:func:`configure`) adds one exchange before each collective: each rank posts
the call's signature on check mode's own channel (check_exchange.py: for torch a store
beside the process group's, so gloo and NCCL alike; for mpi4py a duplicate of COMM_WORLD),
and when the signatures differ every rank raises :class:`CollectiveMismatch` at the call,
before it runs, with the ledger's verdict.

Standard library only; loaded by path (``distcomp_ledger_hooks``), so a rank needs no
installed package.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from collections.abc import Callable
from typing import Any

_HERE = os.path.dirname(os.path.abspath(__file__))


def _load(name: str, file: str):
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, os.path.join(_HERE, file))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


try:
    from . import ledger
    from . import ledger_words as words
except ImportError:  # loaded by path on a rank
    words = _load("distcomp_ledger_words", "ledger_words.py")
    ledger = _load("distcomp_ledger", "ledger.py")


class CollectiveMismatch(RuntimeError):
    """Check mode: the ranks of a group call different collectives (or different data)."""


class _State:
    ring: Any = None
    path = ""
    check = False
    rank = 0
    seqs: dict = {}
    last_seq = 0  # the sequence number :func:`record` gave last
    in_buckets = False  # in DDP's comm hook (ledger_torch): its async calls block backward
    hooked = False  # the imports of _TARGETS are watched
    #: DDP's gradient buckets go through the ledger's comm hook (ledger_torch.wrap_ddp), in
    #: place of DDP's own C++ reduction; a submitted job's ranks leave DDP as it is
    #: (job_watch.py: the hook's cost is not negligible on a training step)
    buckets = True
    #: torch's record is read beside the ledger (torch_record.py): its thread started and
    #: its last dump worked; NCCL's collectives are then left to it (ledger_torch.py)
    torch_record = False
    #: a live rank (set up by rank_setup, before any code of the user's runs): check mode's
    #: own MPI channel is made at its set-up, whether check mode is on yet or not
    live = False
    #: check mode's epoch: the kernel moves it on after a checked cell that did not end
    #: well (an interrupt may leave a rank's exchange half done); exchanges of an older
    #: epoch are void, and the rounds of each group count again from 1
    epoch = 0
    rounds: dict = {}  # group -> check mode's exchanges on it in this epoch


STATE = _State()


def say(text: str) -> None:
    """What the ledger says about itself (a library it cannot wrap, no ledger file): on the
    rank's stderr, which a local run shows; a submitted job's ranks keep quiet
    (job_watch.py replaces this)."""
    print(text, file=sys.stderr)


#: folders whose frames are not the user's: the ledger's own, torch's, mpi4py's
_SKIP: tuple[str, ...] = (_HERE,)
#: code object -> whether its frames are skipped (a loop's call site is looked up once)
_SKIPPED: dict = {}
_NOWHERE = compile("", "", "exec")


def skip_files(folder: str) -> None:
    """Frames of files under ``folder`` are not call sites (a library's own)."""
    global _SKIP
    if folder not in _SKIP:
        _SKIP = (*_SKIP, folder)
        _SKIPPED.clear()


def site() -> tuple[Any, int]:
    """The call site of the wrapper that calls this: ``(code object, line)`` of the first
    frame outside the skipped folders."""
    frame: Any = sys._getframe(2)
    skipped = _SKIPPED
    while frame is not None:
        code = frame.f_code
        skip = skipped.get(code)
        if skip is None:
            if len(skipped) > 8192:
                skipped.clear()
            skip = skipped[code] = code.co_filename.startswith(_SKIP)
        if not skip:
            return code, frame.f_lineno
        frame = frame.f_back
    return _NOWHERE, 0


def check_round(group: str) -> tuple[int, int]:
    """Check mode's next exchange on ``group``: ``(epoch, round)``, alike on its ranks."""
    rounds = STATE.rounds
    round_ = rounds[group] = rounds.get(group, 0) + 1
    return STATE.epoch, round_


def record(seq_key: str, call: tuple, where: tuple[Any, int]) -> int:
    """Record a call that starts now: ``seq_key`` counts it (a group's collectives, or
    ``group + "\\x00p2p"``), ``call`` is ``(kind, group, op, data, reduce, root, posted)``
    (see ``Ring.begin``), ``where`` :func:`site`'s answer. The ring slot's offset, for
    ``Ring.end``; the call's sequence number is ``STATE.last_seq``."""
    seqs = STATE.seqs
    seq = seqs.get(seq_key, 0) + 1
    seqs[seq_key] = seq
    STATE.last_seq = seq
    return STATE.ring.begin(seq, call, where[0], where[1])


def mismatch(group: str, seq: int, sigs: dict[int, tuple], me: int) -> None:
    """Raise on this rank when the posted signatures differ (every rank computes the same)."""
    __tracebackhide__ = True
    calls = {}
    for rank, (op, data, reduce, root, file, line, function) in sigs.items():
        calls[rank] = words.Entry(
            seq, 0.0, 0.0, words.COLLECTIVE, group, op, data, reduce, root, file, line, function
        )
    split = words.sides(calls)
    if len(split) > 1:
        (callers, call), *others = split
        verdict = words.Verdict(group, seq, call, callers, others, now=None)
        raise CollectiveMismatch(
            f"check_collectives: {verdict.text()}. Nothing ran: every rank of the group "
            "stopped before this call."
        )


# -- installing ----------------------------------------------------------------------------
def _sibling(name: str):
    """ledger_torch.py, ledger_mpi.py, ledger_horovod.py, torch_record.py, after_import.py:
    from the package, or by path on a rank."""
    if __package__:
        return importlib.import_module(f"{__package__}.{name}")
    return _load(f"distcomp_{name}", f"{name}.py")


def _wrap_torch(dist) -> None:
    sibling = _sibling("ledger_torch")
    sibling.core = sys.modules[__name__]
    sibling.wrap(dist)


def start_torch_record(dist) -> None:
    """torch's own record of the calls and the rank's GPU facts, beside the ledger
    (torch_record.py); what stops it is said, and the ledger goes on without it."""
    try:
        _sibling("torch_record").start(dist, sys.modules[__name__])
        STATE.torch_record = True
    except Exception as exc:
        say(f"distcomp: torch's record of the collectives is not read: {exc!r}")


def _wrap_mpi(MPI) -> None:
    sibling = _sibling("ledger_mpi")
    sibling.core = sys.modules[__name__]
    sibling.wrap(MPI)


def _wrap_horovod(mpi_ops) -> None:
    sibling = _sibling("ledger_horovod")
    sibling.core = sys.modules[__name__]
    sibling.wrap(mpi_ops)


def _wrap_ddp(module) -> None:
    if not STATE.buckets:
        return
    sibling = _sibling("ledger_torch")
    sibling.core = sys.modules[__name__]
    sibling.wrap_ddp(module)


_TARGETS = {
    "torch.distributed": _wrap_torch,
    "torch.nn.parallel.distributed": _wrap_ddp,
    "mpi4py.MPI": _wrap_mpi,
    "horovod.torch.mpi_ops": _wrap_horovod,
}


def _after_import(name: str, wrap):
    def after(module) -> None:
        try:
            wrap(module)
        except Exception as exc:  # the user's import must work, ledger or not
            say(f"distcomp: no collectives ledger for {name}: {exc!r}")

    after.__name__ = wrap.__name__
    return after


def cell_namer(cells: dict[str, str]) -> Callable[[str, int], str]:
    """``(cell file, line) -> "In [12], line 7"`` by ``cells``, the notebook's number of each
    cell by the name of the file IPython ran it as; '' for a cell not in ``cells``."""

    def in_cell(file: str, line: int) -> str:
        number = cells.get(os.path.basename(file))
        return words.cell_place(f"In [{number}]", line) if number else ""

    return in_cell


def install(
    path: str, rank: int = 0, check: bool = False, cells: dict[str, str] | None = None
) -> None:
    """Record this process's calls in the ledger file ``path`` (idempotent). ``cells``:
    the notebook's number of each cell the rank ran (``"12"``), by the name of the file
    IPython ran it as, kept up to date by the rank's IPython (rank_setup.py): call sites in
    those cells, this rank's and the others', are named ``In [12], line 7``."""
    if cells is not None:
        words.name_cells(cell_namer(cells))
        STATE.live = True
    if STATE.ring is None:
        try:
            STATE.ring = ledger.Ring(path)
        except (OSError, ValueError) as exc:  # the rank runs on, without a ledger
            say(f"distcomp: no collectives ledger ({exc})")
            return
        STATE.path = path
        # torch's own record of each NCCL call (torch_record.py), before torch is imported:
        # a torch may read it when its library loads
        os.environ.setdefault("TORCH_FR_BUFFER_SIZE", "2000")
    STATE.rank = rank
    STATE.check = check
    for name, wrap in _TARGETS.items():
        if name in sys.modules:
            wrap(sys.modules[name])
    if not STATE.hooked:  # each import from now on
        STATE.hooked = True
        after_import = _sibling("after_import")
        for name, wrap in _TARGETS.items():
            after_import.when_imported(name, _after_import(name, wrap))


def configure(check: bool, epoch: int | None = None) -> None:
    """Check mode on or off for the calls that follow; a new ``epoch`` voids the exchanges
    of the earlier ones (see ``_State.epoch``)."""
    STATE.check = bool(check)
    if epoch is not None and epoch != STATE.epoch:
        STATE.epoch = epoch
        STATE.rounds = {}
    if check and "torch.distributed" in sys.modules:
        try:
            _sibling("ledger_torch").connect_check_store()
        except Exception as exc:  # its first checked call tries again, and says why
            print(f"distcomp: check mode's store not connected: {exc!r}", file=sys.stderr)
