"""The ledger's wrapper of mpi4py (see ledger_hooks.py): ``COMM_WORLD`` becomes an instance
of an ``Intracomm`` subclass whose collectives (upper and lower case) and point-to-point
methods record each call, and in check mode exchange signatures over the communicator
first; communicators made from it (Dup, Split, Create) are wrapped too.

Standard library only at import; ``core`` is ledger_hooks, set before :func:`wrap`.
"""

from __future__ import annotations

import functools
import os
from typing import Any

core: Any = None  # ledger_hooks (loaded by path on a rank, so not imported here)


#: method -> (data parameter index, op index, root or peer index, root default)
_MPI_COLLECTIVES = {
    "Barrier": (-1, -1, -1, None),
    "barrier": (-1, -1, -1, None),
    "Bcast": (0, -1, 1, 0),
    "bcast": (0, -1, 1, 0),
    "Gather": (0, -1, 2, 0),
    "gather": (0, -1, 1, 0),
    "Gatherv": (0, -1, 2, 0),
    "Scatter": (0, -1, 2, 0),
    "scatter": (0, -1, 1, 0),
    "Scatterv": (0, -1, 2, 0),
    "Allgather": (0, -1, -1, None),
    "allgather": (0, -1, -1, None),
    "Allgatherv": (0, -1, -1, None),
    "Alltoall": (0, -1, -1, None),
    "alltoall": (0, -1, -1, None),
    "Alltoallv": (0, -1, -1, None),
    "Reduce": (0, 2, 3, 0),
    "reduce": (0, 1, 2, 0),
    "Allreduce": (0, 2, -1, None),
    "allreduce": (0, 1, -1, None),
    "Reduce_scatter_block": (0, 2, -1, None),
    "Reduce_scatter": (0, 3, -1, None),
    "Scan": (0, 2, -1, None),
    "scan": (0, 1, -1, None),
    "Exscan": (0, 2, -1, None),
    "exscan": (0, 1, -1, None),
}
_MPI_P2P = {
    "Send": (0, 1, "to"),
    "send": (0, 1, "to"),
    "Ssend": (0, 1, "to"),
    "ssend": (0, 1, "to"),
    "Isend": (0, 1, "to"),
    "isend": (0, 1, "to"),
    "Recv": (0, 1, "from"),
    "recv": (0, 1, "from"),
    "Irecv": (0, 1, "from"),
    "irecv": (0, 1, "from"),
}
_CREATORS = ("Dup", "Split", "Create", "Create_group", "Split_type")


class _Mpi:
    def __init__(self, MPI) -> None:
        self.MPI = MPI
        self.prefix = os.path.dirname(MPI.__file__) + os.sep
        self.ops = {}
        for op_name in ("SUM", "PROD", "MAX", "MIN", "LAND", "LOR", "BAND", "BOR", "MAXLOC"):
            op = getattr(MPI, op_name, None)
            if op is not None:
                self.ops[op.py2f()] = op_name.lower()
        self.created = 0

    def buffer_text(self, value) -> str:
        if value is None:
            return ""
        if value is self.MPI.IN_PLACE:
            return "IN_PLACE"
        if isinstance(value, (list, tuple)) and value and not hasattr(value, "shape"):
            first = value[0]
            if hasattr(first, "shape") or isinstance(first, (bytes, bytearray, memoryview)):
                typed = value[-1]
                kind = f" as {typed.Get_name()}" if isinstance(typed, self.MPI.Datatype) else ""
                return self.buffer_text(first) + kind
        shape = getattr(value, "shape", None)
        if shape is not None:
            return f"[{', '.join(map(str, shape))}] {getattr(value, 'dtype', '')}"
        try:
            return f"{memoryview(value).nbytes} bytes"
        except TypeError:
            return "object"

    def label(self, comm) -> tuple[str, tuple[int, ...]]:
        known = getattr(comm, "_distcomp_label", None)
        if known is None:
            if comm == self.MPI.COMM_WORLD:
                known = ("COMM_WORLD", ())
            else:
                group = comm.Get_group()
                world = self.MPI.COMM_WORLD.Get_group()
                members = tuple(
                    self.MPI.Group.Translate_ranks(group, list(range(group.Get_size())), world)
                )
                self.created += 1
                known = (f"comm {self.created} (ranks {', '.join(map(str, members))})", members)
            comm._distcomp_label = known
        return known

    def collective(self, base, name: str, spec):
        fn = getattr(base, name)
        data_at, op_at, root_at, root_default = spec
        mpi = self
        buffers = name[0].isupper()

        @functools.wraps(fn)
        def call(comm, *args, **kwargs):
            __tracebackhide__ = True
            if core.STATE.ring is None:
                return fn(comm, *args, **kwargs)
            label, _members = mpi.label(comm)
            data = args[data_at] if 0 <= data_at < len(args) else None
            if data is None and data_at >= 0:
                data = kwargs.get("sendbuf", kwargs.get("buf", kwargs.get("sendobj")))
            if buffers:
                data_text = mpi.buffer_text(data)
                if data_text == "IN_PLACE" and len(args) > data_at + 1:
                    data_text = mpi.buffer_text(args[data_at + 1])
            else:
                data_text = type(data).__name__ if data_at >= 0 else ""
            op = kwargs.get("op", args[op_at] if 0 <= op_at < len(args) else None)
            reduce = ""
            if op_at >= 0:
                reduce = mpi.ops.get(op.py2f(), "op") if op is not None else "sum"
            root = kwargs.get("root", args[root_at] if 0 <= root_at < len(args) else root_default)
            root_text = f"root {root}" if root is not None else ""
            site = core.site(mpi.prefix)
            if core.STATE.check:
                mpi.check(comm, label, (name, data_text, reduce, root_text, *site))
            slot = core.record(
                core.ledger.COLLECTIVE, label, name, data_text, reduce, root_text, site
            )
            try:
                return fn(comm, *args, **kwargs)
            finally:
                if slot >= 0:
                    core.STATE.ring.end(slot)

        return call

    def p2p(self, base, name: str, spec):
        fn = getattr(base, name)
        data_at, peer_at, direction = spec
        mpi = self
        buffers = name[0].isupper()

        @functools.wraps(fn)
        def call(comm, *args, **kwargs):
            __tracebackhide__ = True
            if core.STATE.ring is None:
                return fn(comm, *args, **kwargs)
            label, _ = mpi.label(comm)
            data = args[data_at] if len(args) > data_at else None
            data_text = mpi.buffer_text(data) if buffers else type(data).__name__
            peer = kwargs.get(
                "dest" if direction == "to" else "source",
                args[peer_at] if len(args) > peer_at else None,
            )
            peer_text = f"{direction} rank {peer}" if peer is not None and peer >= 0 else ""
            if direction == "from" and not peer_text:
                peer_text = "from any rank"
            site = core.site(mpi.prefix)
            slot = core.record(core.ledger.P2P, label, name, data_text, "", peer_text, site)
            try:
                return fn(comm, *args, **kwargs)
            finally:
                if slot >= 0:
                    core.STATE.ring.end(slot)

        return call

    def creator(self, base, name: str):
        fn = getattr(base, name)

        @functools.wraps(fn)
        def call(comm, *args, **kwargs):
            __tracebackhide__ = True
            made = fn(comm, *args, **kwargs)
            if isinstance(made, base) and not isinstance(made, type(comm)):
                if made == self.MPI.COMM_NULL:
                    return made
                made = type(comm)(made)
            return made

        return call

    def check(self, comm, label: str, sig: tuple) -> None:
        """Exchange signatures with the communicator's own (unrecorded) allgather."""
        __tracebackhide__ = True
        seq = core.STATE.seqs.get(label, 0) + 1
        base = self.MPI.Intracomm
        posted = base.allgather(comm, sig)
        members = self.label(comm)[1] or tuple(range(len(posted)))
        core.mismatch(label, seq, dict(zip(members, posted, strict=False)), comm.Get_rank())


def wrap(MPI) -> None:
    world = MPI.COMM_WORLD
    if getattr(type(world), "__distcomp_ledger__", False):
        return
    base = MPI.Intracomm
    mpi = _Mpi(MPI)
    space: dict = {"__distcomp_ledger__": True, "__module__": "mpi4py.MPI"}
    for name, spec in _MPI_COLLECTIVES.items():
        if hasattr(base, name):
            space[name] = mpi.collective(base, name, spec)
    for name, p2p_spec in _MPI_P2P.items():
        if hasattr(base, name):
            space[name] = mpi.p2p(base, name, p2p_spec)
    for name in _CREATORS:
        if hasattr(base, name):
            space[name] = mpi.creator(base, name)
    cls = type("Intracomm", (base,), space)
    MPI.COMM_WORLD = cls(world)
