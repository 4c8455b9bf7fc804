"""On a rank: record every ``torch.distributed`` and mpi4py call in the ledger (ledger.py),
and in check mode compare the call across the group before it runs.

:func:`install` opens the ledger file and wraps ``torch.distributed``'s functions and
mpi4py's ``COMM_WORLD`` as soon as each is imported (an import hook: a rank that never
imports torch never loads it). A wrapper records the call (sequence number per group,
operation, shapes and dtypes, reduce op, root or peer, call site), runs it, and records its
end: a few microseconds, no message to any other rank.

Check mode (:func:`configure`) adds one exchange before each collective: each rank posts
the call's signature (for torch through the process group's store, so gloo and NCCL alike;
for mpi4py through the communicator itself), and when the signatures differ every rank
raises :class:`CollectiveMismatch` at the call, before it runs, with the ledger's verdict.

Standard library only; loaded by path (``distcomp_ledger_hooks``), so a rank needs no
installed package.
"""

from __future__ import annotations

import importlib.util
import os
import sys
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
except ImportError:  # loaded by path on a rank
    ledger = _load("distcomp_ledger", "ledger.py")


class CollectiveMismatch(RuntimeError):
    """Check mode: the ranks of a group call different collectives (or different data)."""


class _State:
    ring: Any = None
    path = ""
    check = False
    rank = 0
    seqs: dict = {}
    hooked = False  # the imports of _TARGETS are watched


STATE = _State()


def site(skip: str):
    """The first frame outside ``skip`` (a package folder) and the ledger's own files."""
    frame: Any = sys._getframe(2)
    while frame is not None and frame.f_code.co_filename.startswith((skip, _HERE)):
        frame = frame.f_back
    if frame is None:
        return "", 0, ""
    return frame.f_code.co_filename, frame.f_lineno, frame.f_code.co_name


def next_seq(key: str) -> int:
    seqs = STATE.seqs
    seq = seqs.get(key, 0) + 1
    seqs[key] = seq
    return seq


def record(kind: str, group: str, op: str, data: str, reduce: str, root: str, site) -> int:
    seq = next_seq(group if kind == ledger.COLLECTIVE else group + "\x00p2p")
    text = ledger.encode(kind, group, op, data, reduce, root)
    return STATE.ring.begin(seq, text, *site) if STATE.ring is not None else -1


def mismatch(group: str, seq: int, sigs: dict[int, tuple], me: int) -> None:
    """Raise on this rank when the posted signatures differ (every rank computes the same)."""
    __tracebackhide__ = True
    calls = {}
    for rank, (op, data, reduce, root, file, line, function) in sigs.items():
        calls[rank] = ledger.Entry(
            seq, 0.0, 0.0, ledger.COLLECTIVE, group, op, data, reduce, root, file, line, function
        )
    split = ledger.sides(calls)
    if len(split) > 1:
        (callers, call), *others = split
        verdict = ledger.Verdict(group, seq, call, callers, others, now=None)
        raise CollectiveMismatch(
            f"check_collectives: {verdict.text()}. Nothing ran: every rank of the group "
            "stopped before this call."
        )


# -- installing ----------------------------------------------------------------------------
def _sibling(name: str):
    """ledger_torch.py, ledger_mpi.py, after_import.py: from the package, or by path on a
    rank."""
    if __package__:
        return importlib.import_module(f"{__package__}.{name}")
    return _load(f"distcomp_{name}", f"{name}.py")


def _wrap_torch(dist) -> None:
    sibling = _sibling("ledger_torch")
    sibling.core = sys.modules[__name__]
    sibling.wrap(dist)


def _wrap_mpi(MPI) -> None:
    sibling = _sibling("ledger_mpi")
    sibling.core = sys.modules[__name__]
    sibling.wrap(MPI)


_TARGETS = {"torch.distributed": _wrap_torch, "mpi4py.MPI": _wrap_mpi}


def _after_import(name: str, wrap):
    def after(module) -> None:
        try:
            wrap(module)
        except Exception as exc:  # the user's import must work, ledger or not
            print(f"distcomp: no collectives ledger for {name}: {exc!r}", file=sys.stderr)

    after.__name__ = wrap.__name__
    return after


def install(path: str, rank: int = 0, check: bool = False) -> None:
    """Record this process's calls in the ledger file ``path`` (idempotent)."""
    if STATE.ring is None:
        STATE.ring = ledger.Ring(path)
        STATE.path = path
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


def configure(check: bool) -> None:
    """Check mode on or off for the calls that follow."""
    STATE.check = bool(check)
