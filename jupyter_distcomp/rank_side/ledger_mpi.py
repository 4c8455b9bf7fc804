"""The ledger's wrapper of mpi4py (see ledger_hooks.py).

The collectives (blocking and non-blocking, upper and lower case) and point-to-point
methods of mpi4py's own communicator classes (``Comm``, ``Intracomm``, ``Cartcomm``, ...)
are replaced, in those classes, by recording ones, which record each call and in check
mode exchange signatures over the communicator first. Nothing else of mpi4py changes:
``MPI.COMM_WORLD``, ``MPI.COMM_SELF`` and ``MPI.Request`` stay mpi4py's own objects (still
predefined constants that ``free()`` leaves alone, still pickled by reference), and every
communicator keeps its own class, so a program sees mpi4py as it is without us. (mpi4py's
classes are immutable types: their dictionaries are written directly, see :func:`_put`.)

Each communicator has its own sequence numbers and its own label, given when it is made,
the same on all its ranks and kept by its handle until it is freed (``comm 2 (ranks 0,
2)``: the second communicator made from COMM_WORLD; ``comm 2.1 (ranks 0)``: the first made
from that one; ``comm g1 (ranks 0, 1)``: the first made by ``Create_group`` for ranks 0
and 1).

A non-blocking call (``Iallreduce``, ``Isend``, ``irecv``...) is finished in the ledger
when a Wait or Test (the request's own, or ``Request.Waitall`` and the other class
methods) sees its request complete.

Standard library only at import; ``core`` is ledger_hooks, set before :func:`wrap`.
"""

from __future__ import annotations

import ctypes
import functools
import gc
import os
import sys
from typing import Any

core: Any = None  # ledger_hooks (loaded by path on a rank, so not imported here)
WRAPPED: Any = None  # the _Mpi that wraps mpi4py (ledger_horovod checks on its channel)


_FAR = 1 << 30  # the index of a parameter a method does not have
#: method -> (data parameter index, op index, root index, root default); non-blocking
#: forms (``I...``) take the same parameters
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
    "Alltoallw": (0, -1, -1, None),
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
    "Neighbor_allgather": (0, -1, -1, None),
    "Neighbor_allgatherv": (0, -1, -1, None),
    "Neighbor_alltoall": (0, -1, -1, None),
    "Neighbor_alltoallv": (0, -1, -1, None),
    "Neighbor_alltoallw": (0, -1, -1, None),
}
_MPI_COLLECTIVES.update(
    {"I" + name.lower(): spec for name, spec in _MPI_COLLECTIVES.items() if name[0].isupper()}
)
#: method -> (data parameter index, peer parameter index, direction, peer keyword); the tag
#: follows the peer (``tag`` or ``sendtag``), ``_EXCHANGES`` name where an exchange's source is
_MPI_P2P = {
    name: (0, 1, "to", "dest")
    for name in (
        "Send",
        "send",
        "Ssend",
        "ssend",
        "Bsend",
        "bsend",
        "Rsend",
        "Isend",
        "isend",
        "Issend",
        "issend",
        "Ibsend",
        "ibsend",
        "Irsend",
        "Sendrecv",
        "sendrecv",
        "Sendrecv_replace",
        "Isendrecv",
        "Isendrecv_replace",
    )
}
_MPI_P2P.update({name: (0, 1, "from", "source") for name in ("Recv", "recv", "Irecv", "irecv")})
_MPI_P2P.update(
    {name: (_FAR, 0, "from", "source") for name in ("Probe", "probe", "Mprobe", "mprobe")}
)
#: exchange -> the index of its source parameter
_EXCHANGES = {
    "Sendrecv": 4,
    "sendrecv": 4,
    "Isendrecv": 4,
    "Sendrecv_replace": 3,
    "Isendrecv_replace": 3,
}
#: communicator constructors: collective over the communicator they are called on
#: (recorded as its calls), but Create_group (only the group's ranks call it) and
#: Create_intercomm (two groups) are not recorded
_CREATORS = (
    "Dup",
    "Clone",
    "Idup",
    "Split",
    "Split_type",
    "Create",
    "Create_cart",
    "Create_graph",
    "Create_dist_graph",
    "Create_dist_graph_adjacent",
    "Merge",
)
_UNRECORDED_CREATORS = ("Create_group", "Create_intercomm")
_COMM_CLASSES = (
    "Comm",
    "Intracomm",
    "Topocomm",
    "Cartcomm",
    "Graphcomm",
    "Distgraphcomm",
    "Intercomm",
)
#: methods that free a communicator: its label goes with it (its handle may be reused)
_FREES = ("Free", "free", "Disconnect")
#: Request class methods that complete requests of a list
_REQUEST_CLASS_METHODS = tuple(
    f"{verb}{what}" for verb in ("Wait", "Test", "wait", "test") for what in ("all", "any", "some")
)


class _Mpi:
    def __init__(self, MPI) -> None:
        self.MPI = MPI
        self.ops = {}
        for op_name in ("SUM", "PROD", "MAX", "MIN", "LAND", "LOR", "BAND", "BOR", "MAXLOC"):
            op = getattr(MPI, op_name, None)
            if op is not None:
                self.ops[op.py2f()] = op_name.lower()
        self.unnamed = 0
        self.texts: dict[Any, str] = {}
        self.labels: dict[int, tuple[str, tuple[int, ...]]] = {}  # comm handle -> label
        self.made: dict[int, dict] = {}  # comm handle -> counts of the comms made from it
        self.marks: dict[int, tuple] = {}  # pending request's handle -> (ring, slot, seq, it)
        # mpi4py's own allgather, for check mode's exchange (never recorded)
        self.allgather = vars(MPI.Comm)["allgather"]
        self.exchange: Any = None  # check mode's own channel (check_exchange.py), or None

    # -- describing a call ------------------------------------------------------------------
    def buffer_text(self, value) -> str:
        if value is None:
            return ""
        shape = getattr(value, "shape", None)
        if shape is not None:
            key = (shape, getattr(value, "dtype", ""))
            try:
                text = self.texts.get(key)
            except TypeError:  # a shape that is no tuple: described each time
                return f"[{', '.join(map(str, shape))}] {key[1]}"
            if text is None:
                if len(self.texts) > 4096:
                    self.texts.clear()
                text = self.texts[key] = f"[{', '.join(map(str, shape))}] {key[1]}"
            return text
        if value is self.MPI.IN_PLACE:
            return "IN_PLACE"
        if isinstance(value, (list, tuple)) and value:
            first = value[0]
            if hasattr(first, "shape") or isinstance(first, (bytes, bytearray, memoryview)):
                typed = value[-1]
                kind = f" as {typed.Get_name()}" if isinstance(typed, self.MPI.Datatype) else ""
                return self.buffer_text(first) + kind
        try:
            return f"{memoryview(value).nbytes} bytes"
        except TypeError:
            return "object"

    def label(self, comm) -> tuple[str, tuple[int, ...]]:
        """The communicator's label and its COMM_WORLD ranks (given when it was made)."""
        known = self.labels.get(_handle(comm))
        if known is None:
            self.unnamed += 1
            known = self.name(comm, f"comm ?{self.unnamed}")
        return known

    def members(self, comm) -> tuple[int, ...]:
        """The communicator's ranks in COMM_WORLD, in its own rank order."""
        MPI = self.MPI
        group, world = comm.Get_group(), MPI.COMM_WORLD.Get_group()
        try:
            size = group.Get_size()
            return tuple(MPI.Group.Translate_ranks(group, list(range(size)), world))
        finally:
            group.Free()
            world.Free()

    def name(self, comm, stem: str) -> tuple[str, tuple[int, ...]]:
        """Give ``comm`` the label ``stem (ranks ...)``, its ranks in COMM_WORLD."""
        members = self.members(comm)
        known = (f"{stem} (ranks {', '.join(map(str, members))})", members)
        handle = _handle(comm)
        self.labels[handle] = known
        self.made[handle] = {}
        return known

    def forget(self, handle: int) -> None:
        """A freed communicator's label goes (MPI may give its handle to a new one)."""
        self.labels.pop(handle, None)
        self.made.pop(handle, None)

    def adopt(self, parent, made, key: Any):
        """Label ``made`` (a communicator made from ``parent``) after its parent: ``key``
        counts the communicators made alike (every rank of the parent alike, or only those
        of one group). ``made`` is returned as it is."""
        MPI = self.MPI
        if not isinstance(made, MPI.Comm) or made == MPI.COMM_NULL:
            return made
        self.label(parent)
        counts = self.made.get(_handle(parent))
        if counts is None:
            return made
        counts[key] = number = counts.get(key, 0) + 1
        mark = "" if key == "" else "g"  # made by one group's ranks: numbered among those
        stem = self.label(parent)[0].split(" (ranks ")[0]
        stem = f"comm {mark}{number}" if stem == "COMM_WORLD" else f"{stem}.{mark}{number}"
        self.name(made, stem)
        return made

    # -- wrappers ---------------------------------------------------------------------------
    def collective(self, base, name: str, spec, creator: bool = False):
        fn = getattr(base, name)
        data_at, op_at, root_at, root_default = spec
        data_at = _FAR if data_at < 0 else data_at
        op_at = _FAR if op_at < 0 else op_at
        root_at = _FAR if root_at < 0 else root_at
        mpi = self
        buffers = name[0].isupper()
        reduces = op_at != _FAR
        nonblocking = name[0] == "I" and not creator
        posted = "nb" if nonblocking else ""
        idup = name == "Idup"
        roots: dict = {None: ""}
        COLLECTIVE = core.words.COLLECTIVE
        data_keys = ("sendbuf", "buf", "sendobj")
        labels = self.labels

        @functools.wraps(fn)
        def call(comm, *args, **kwargs):
            __tracebackhide__ = True
            state = core.STATE
            ring = state.ring
            if ring is None:
                return fn(comm, *args, **kwargs)
            known = labels.get(_handle(comm))
            label = known[0] if known is not None else mpi.label(comm)[0]
            n = len(args)
            data = args[data_at] if data_at < n else None
            if kwargs and data is None and data_at != _FAR:
                data = next((kwargs[k] for k in data_keys if k in kwargs), None)
            if not buffers:
                data_text = type(data).__name__ if data_at != _FAR else ""
            elif data is mpi.MPI.IN_PLACE and data_at + 1 < n:
                data_text = mpi.buffer_text(args[data_at + 1])
            else:
                data_text = mpi.buffer_text(data)
            reduce = ""
            if reduces:
                op = kwargs.get("op") if "op" in kwargs else (args[op_at] if op_at < n else None)
                reduce = mpi.ops.get(op.py2f(), "op") if op is not None else "sum"
            root = (
                kwargs["root"]
                if "root" in kwargs
                else (args[root_at] if root_at < n else root_default)
            )
            root_text = roots.get(root)
            if root_text is None:
                root_text = roots[root] = f"root {root}"
            where = core.site()
            if state.check and not nonblocking:  # an exchange would block an I... call
                mpi.check(comm, label, (name, data_text, reduce, root_text), where)
            call = (COLLECTIVE, label, name, data_text, reduce, root_text, posted)
            slot = core.record(label, call, where)
            try:
                result = fn(comm, *args, **kwargs)
            except BaseException:
                ring.end(slot)
                raise
            if nonblocking:
                return mpi.pending(result, ring, slot, state.last_seq)
            ring.end(slot)
            if creator:
                if idup:
                    return (mpi.adopt(comm, result[0], ""), result[1])
                return mpi.adopt(comm, result, "")
            return result

        return call

    def p2p(self, base, name: str, spec):
        fn = getattr(base, name)
        data_at, peer_at, direction, peer_key = spec
        mpi = self
        buffers = name[0].isupper()
        nonblocking = name[0] in "Ii"
        posted = "nb" if nonblocking else ""
        peers: dict = {}
        P2P = core.words.P2P
        labels = self.labels
        tag_at = peer_at + 1
        source_at = _EXCHANGES.get(name, _FAR)

        def peer_words(word: str, peer, tag) -> str:
            """``to rank 1``, ``from any rank``, ``from rank 0, tag 5`` (a tag given
            explicitly, ANY_TAG and 0 left out)."""
            key = (word, peer, tag)
            text = peers.get(key)
            if text is None:
                if isinstance(peer, int) and peer >= 0:
                    text = f"{word} rank {peer}"
                else:
                    text = "from any rank" if word == "from" else ""
                if isinstance(tag, int) and tag > 0:
                    text += f", tag {tag}"
                peers[key] = text
            return text

        @functools.wraps(fn)
        def call(comm, *args, **kwargs):
            __tracebackhide__ = True
            state = core.STATE
            ring = state.ring
            if ring is None:
                return fn(comm, *args, **kwargs)
            known = labels.get(_handle(comm))
            label = known[0] if known is not None else mpi.label(comm)[0]
            n = len(args)
            data = args[data_at] if data_at < n else kwargs.get("buf")
            if data_at == _FAR:
                data_text = ""
            elif buffers:
                data_text = mpi.buffer_text(data)
            else:  # an object's receive (buf None) gets one, of a type it does not know yet
                data_text = type(data).__name__ if data is not None else "object"
            peer = (
                kwargs[peer_key] if peer_key in kwargs else (args[peer_at] if peer_at < n else None)
            )
            if kwargs:
                tag = kwargs.get("tag", kwargs.get("sendtag", args[tag_at] if tag_at < n else 0))
            else:
                tag = args[tag_at] if tag_at < n else 0
            peer_text = peer_words(direction, peer, tag)
            if source_at != _FAR:
                source = kwargs.get("source", args[source_at] if source_at < n else None)
                peer_text += ", " + peer_words("from", source, None)
            where = core.site()
            slot = core.record(
                label + "\x00p2p", (P2P, label, name, data_text, "", peer_text, posted), where
            )
            try:
                result = fn(comm, *args, **kwargs)
            except BaseException:
                ring.end(slot)
                raise
            if nonblocking:
                return mpi.pending(result, ring, slot, state.last_seq)
            ring.end(slot)
            return result

        return call

    def unrecorded_creator(self, base, name: str):
        fn = getattr(base, name)
        mpi = self

        @functools.wraps(fn)
        def call(comm, *args, **kwargs):
            __tracebackhide__ = True
            made = fn(comm, *args, **kwargs)
            if name == "Create_group" and isinstance(made, mpi.MPI.Comm):
                if made == mpi.MPI.COMM_NULL:
                    return made
                key: Any = mpi.members(made)  # numbered among those made for it
                return mpi.adopt(comm, made, key)
            return mpi.adopt(comm, made, "intercomm")

        return call

    def freeing(self, base, name: str):
        """``Free`` and the like: a communicator really freed loses its label (``free()``
        of a predefined one leaves it as it is)."""
        fn = getattr(base, name)
        mpi = self

        @functools.wraps(fn)
        def call(comm, *args, **kwargs):
            __tracebackhide__ = True
            handle = _handle(comm)
            result = fn(comm, *args, **kwargs)
            if handle in mpi.labels and comm == mpi.MPI.COMM_NULL:
                mpi.forget(handle)
            return result

        return call

    def pending(self, request, ring, slot: int, seq: int):
        """A non-blocking call's request: its call ends when a Wait or Test sees it
        complete (marked by the request's handle, which every copy of it shares)."""
        if not isinstance(request, self.MPI.Request) or request == self.MPI.REQUEST_NULL:
            ring.end(slot)
            return request
        handle = _handle(request)
        self.marks[handle] = (ring, slot, seq, handle)
        return request

    def open_exchange(self) -> None:
        """Check mode's channel (check_exchange.py): a duplicate of COMM_WORLD, made now,
        while every rank wraps mpi4py (at the rank's set-up, or where the program imports
        it, as MPI_Init waits for every rank there anyway); none for one rank."""
        MPI = self.MPI
        if not MPI.Is_initialized() or MPI.Is_finalized() or MPI.COMM_WORLD.Get_size() < 2:
            return
        comm = vars(MPI.Comm)
        shadow = comm["Dup"](MPI.COMM_WORLD)
        shadow.Set_name("distcomp check mode")
        self.exchange = core._sibling("check_exchange").MpiExchange(
            MPI, shadow, comm["isend"], comm["improbe"]
        )

    def check(self, comm, label: str, sig: tuple, where) -> None:
        """Exchange signatures with the group's members: on check mode's own channel,
        which an interrupt gets through; else with the communicator's own (unrecorded,
        uninterruptible) allgather, where its members may name it otherwise."""
        __tracebackhide__ = True
        code, line = where
        seq = core.STATE.seqs.get(label, 0) + 1
        sig = (*sig, code.co_filename, line, code.co_name)
        members = self.label(comm)[1]
        exchange = self.exchange
        if (
            exchange is not None
            and not label.startswith("comm ?")  # labelled here only: maybe not alike
            and not isinstance(comm, self.MPI.Intercomm)
            and all(m >= 0 for m in members)  # every member in COMM_WORLD
        ):
            members = members or tuple(range(self.MPI.COMM_WORLD.Get_size()))
            sigs = exchange.run(members, (label, *core.check_round(label)), sig)
            core.mismatch(label, seq, sigs, exchange.me)
            return
        posted = self.allgather(comm, sig)
        members = members or tuple(range(len(posted)))
        core.mismatch(label, seq, dict(zip(members, posted)), comm.Get_rank())

    # -- classes ----------------------------------------------------------------------------
    def wrap_comms(self, base) -> None:
        """Record the calls of the methods that mpi4py's communicator class ``base`` itself
        defines (its subclasses inherit them)."""
        own = vars(base)
        for name, spec in _MPI_COLLECTIVES.items():
            if name in own:
                _put(base, name, self.collective(base, name, spec))
        for name, p2p_spec in _MPI_P2P.items():
            if name in own:
                _put(base, name, self.p2p(base, name, p2p_spec))
        for name in _CREATORS:
            if name in own:
                _put(base, name, self.collective(base, name, (-1, -1, -1, None), creator=True))
        for name in _UNRECORDED_CREATORS:
            if name in own:
                _put(base, name, self.unrecorded_creator(base, name))
        for name in _FREES:
            if name in own:
                _put(base, name, self.freeing(base, name))

    def wrap_requests(self) -> None:
        """``MPI.Request``'s completions (Wait, Test, their class methods over lists, Free,
        Cancel) end the ledger's call of each pending request they complete."""
        base = self.MPI.Request
        null = self.MPI.REQUEST_NULL
        marks = self.marks

        def instance_method(name: str):
            fn = getattr(base, name)
            waits = name.lower() == "wait"

            @functools.wraps(fn)
            def method(request, *args, **kwargs):
                __tracebackhide__ = True
                mark = marks.get(_handle(request)) if marks else None
                if mark is None:
                    return fn(request, *args, **kwargs)
                if waits:
                    mark[0].wait(mark[1], mark[2])
                try:
                    return fn(request, *args, **kwargs)
                finally:
                    if request == null:
                        marks.pop(mark[3], None)
                        mark[0].end(mark[1], mark[2])

            return method

        def class_method(name: str):
            fn = getattr(base, name)
            waits = name.lower().startswith("wait")

            @functools.wraps(fn)
            def method(cls, requests, *args, **kwargs):
                __tracebackhide__ = True
                if not marks:
                    return fn(requests, *args, **kwargs)
                watched = []
                for request in requests:
                    if isinstance(request, base):
                        mark = marks.get(_handle(request))
                        if mark is not None:
                            watched.append((request, mark))
                            if waits:
                                mark[0].wait(mark[1], mark[2])
                try:
                    return fn(requests, *args, **kwargs)
                finally:
                    for request, mark in watched:
                        if request == null:
                            marks.pop(mark[3], None)
                            mark[0].end(mark[1], mark[2])

            return classmethod(method)

        own = vars(base)
        for name in ("Wait", "Test", "wait", "test", "Free", "free", "Cancel", "cancel"):
            if name in own:
                _put(base, name, instance_method(name))
        for name in _REQUEST_CLASS_METHODS:
            if name in own:
                _put(base, name, class_method(name))


def _handle(obj) -> int:
    """An mpi4py object's MPI handle (``handle``; ``py2f()`` before mpi4py 4)."""
    try:
        return obj.handle
    except AttributeError:
        return obj.py2f()


def _put(cls: type, name: str, value) -> None:
    """``cls.name = value`` for one of mpi4py's classes. They are immutable types, which
    refuse ``setattr``: the value goes into the type's dictionary (the one object behind
    ``cls.__dict__``'s read-only proxy) and CPython is told the type changed (it caches
    attribute look-ups by type version)."""
    gc.get_referents(cls.__dict__)[0][name] = value
    modified = ctypes.pythonapi.PyType_Modified
    modified.argtypes = [ctypes.py_object]
    modified.restype = None
    modified(cls)


def wrap(MPI) -> None:
    if hasattr(vars(MPI.Comm).get("Barrier"), "__wrapped__"):
        return  # wrapped already (mpi4py's own methods have no __wrapped__)
    global WRAPPED
    mpi = WRAPPED = _Mpi(MPI)
    # a program of its own (``%distcomp command``) gets the extra communicator only when
    # it runs checked: unchecked, it runs exactly as under a bare mpiexec
    if core.STATE.check or core.STATE.live:
        try:
            mpi.open_exchange()
        except Exception as exc:  # check mode exchanges through each communicator instead
            print(f"distcomp: check mode's channel not opened: {exc!r}", file=sys.stderr)
    for name in _COMM_CLASSES:
        base = getattr(MPI, name, None)
        if base is not None:
            mpi.wrap_comms(base)
    mpi.wrap_requests()
    world, me = MPI.COMM_WORLD, MPI.COMM_SELF
    mpi.labels[_handle(world)] = ("COMM_WORLD", ())
    mpi.made[_handle(world)] = {}
    rank = world.Get_rank()
    mpi.labels[_handle(me)] = (f"COMM_SELF (ranks {rank})", (rank,))
    mpi.made[_handle(me)] = {}
    core.skip_files(os.path.dirname(MPI.__file__) + os.sep)
