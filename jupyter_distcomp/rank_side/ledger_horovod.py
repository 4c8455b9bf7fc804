"""The ledger's wrapper of Horovod's PyTorch API (see ledger_hooks.py).

Every Horovod operation of ``horovod.torch`` (allreduce, allgather, broadcast, alltoall,
reducescatter, their grouped, in-place and async forms, barrier, join, and what is built on
them: the DistributedOptimizer's gradient allreduces, ``broadcast_parameters``,
``broadcast_object``...) reaches Horovod's C++ library through one function of its module
``mpi_lib_v2`` that enqueues the operation and returns a handle, and every wait for a handle
goes through its ``horovod_torch_wait_and_clear`` (``synchronize``) or
``horovod_torch_poll``. Those functions are replaced in that module, where Horovod's Python
looks them up at each call, so each operation is recorded whatever name the program calls
it by: enqueued, it is a non-blocking call in its process set's group; a wait for it marks
the rank waiting in it; it ends when the wait returns or a poll sees it done.

A call is described as Horovod matches calls across ranks: by its tensor name (Horovod's
own ``allreduce.NAME``, or ``allreduce.noname.HANDLE`` where the program gives none, as its
stall inspector names them), shape, dtype and reduce op. The wait is Horovod's own (its C++
loop, where the notebook's interrupt lands only once the operation is done, as under a bare
mpiexec): an interrupted rank would leave its operation enqueued, for the next call of
another rank to meet by name.

Check mode compares each operation across its process set before it is enqueued, on check
mode's own MPI channel (check_exchange.MpiExchange, opened by ledger_mpi when mpi4py is
wrapped; ``hvd.init()`` imports mpi4py for it where check mode is on).

Standard library only at import; ``core`` is ledger_hooks, set before :func:`wrap`.
"""

from __future__ import annotations

import os
import sys
from typing import Any

core: Any = None  # ledger_hooks (loaded by path on a rank, so not imported here)
WRAPPED: Any = None  # the _Horovod that wraps horovod.torch

PREFIX = "horovod_torch_"
#: family -> where its mpi_lib_v2 function takes (the data, the name, the reduce op, the
#: root, the process set id), as horovod/torch/mpi_ops.py passes them; -1: it has none
FAMILIES = {
    "allreduce": (0, 3, 4, -1, 7),
    "grouped_allreduce": (0, 3, 4, -1, 7),
    "allgather": (0, 2, -1, -1, 3),
    "grouped_allgather": (0, 2, -1, -1, 3),
    "broadcast": (0, 3, -1, 2, 4),
    "alltoall": (0, 4, -1, -1, 5),
    "reducescatter": (0, 2, 3, -1, 4),
    "grouped_reducescatter": (0, 2, 3, -1, 4),
    "barrier": (-1, -1, -1, -1, 0),
    "join": (-1, -1, -1, -1, -1),
}
#: check mode's functions of mpi_ops, which enqueue each operation (all of them, through
#: mpi_ops' globals, which these replace): family and where they take the same arguments
#: (a ProcessSet for its id); a check raises here, outside Horovod's ``except
#: RuntimeError``, which would make the mismatch a HorovodInternalError
CHECKED = {
    "_allreduce_async": ("allreduce", (0, 2, 3, -1, 6)),
    "_grouped_allreduce_async": ("grouped_allreduce", (0, 2, 3, -1, 6)),
    "_allgather_async": ("allgather", (0, 2, -1, -1, 3)),
    "_grouped_allgather_async": ("grouped_allgather", (0, 2, -1, -1, 3)),
    "_broadcast_async": ("broadcast", (0, 3, -1, 2, 4)),
    "_alltoall_async": ("alltoall", (0, 4, -1, -1, 5)),
    "_reducescatter_async": ("reducescatter", (0, 2, 3, -1, 4)),
    "_grouped_reducescatter_async": ("grouped_reducescatter", (0, 2, 3, -1, 4)),
    "barrier": ("barrier", (-1, -1, -1, -1, 0)),
}
#: the keywords of those places, for a call that passes them so (``hvd.barrier(process_set=ps)``)
KEYWORDS = ("tensor", "name", "op", "root_rank", "process_set")
GLOBAL = "global process set"
JOINS = "joins"  # hvd.join's own group: a rank that joined skips the others' collectives
OP_NAMES = ("Average", "Sum", "Adasum", "Min", "Max", "Product")


def family_of(function: str) -> str:
    """``allreduce`` for ``horovod_torch_allreduce_async_torch_FloatTensor``, ``barrier``
    for ``horovod_torch_barrier``; '' for a function that is no operation (poll, reset...)."""
    if not function.startswith(PREFIX):
        return ""
    rest = function[len(PREFIX) :]
    family, enqueues, _ = rest.partition("_async_")
    if family not in FAMILIES or bool(enqueues) == (family in ("barrier", "join")):
        return ""
    return family


def tensor_name(family: str, name: Any, handle: Any) -> str:
    """Horovod's name of an operation (``GetOpName`` in horovod/torch/mpi_ops_v2.cc)."""
    if isinstance(name, bytes):
        name = name.decode(errors="replace")
    if name:
        return f"{family}.{name}"
    return f"{family}.noname.{handle}" if handle is not None else ""


class _Horovod:
    def __init__(self, mpi_ops) -> None:
        self.mpi_ops = mpi_ops
        self.lib = mpi_ops.mpi_lib
        self.basics = mpi_ops._basics
        self.ops = {}
        for name in OP_NAMES:
            value = getattr(mpi_ops, name, None)
            if value is not None:
                self.ops[value] = name.lower()
        self.sets: dict = {}  # process set id -> (label, ranks)
        #: what starts every group's count again, alike on every rank: a join completed
        #: (every rank has joined, whatever each did meanwhile), or hvd.init() once more
        #: after a shutdown (Horovod's own names start again too)
        self.after = ""
        self.joins = self.inits = 0
        self.marks: dict = {}  # handle -> (ring, slot, seq, family, group)
        self.said = False  # check mode's lack of a channel said once
        self.texts = core._sibling("ledger_torch")._tensor_text

    # -- describing a call ------------------------------------------------------------------
    def group(self, set_id: Any) -> tuple[str, tuple[int, ...]]:
        """The ledger's label of a process set and its ranks (() for the global one)."""
        after = self.after
        if not set_id:
            return GLOBAL + after, ()
        known = self.sets.get(set_id)
        if known is None:
            try:
                ranks = tuple(self.basics._get_process_set_ids_and_ranks().get(set_id, ()))
            except Exception:
                ranks = ()
            known = self.sets[set_id] = (f"process set {set_id}", ranks)
        label, ranks = known
        return f"{label}{after} (ranks {', '.join(map(str, ranks))})", ranks

    def describe(self, family: str, places: tuple, args: tuple, kwargs: dict) -> tuple:
        """``(op, data, reduce, root, group, members, name)`` of an operation's arguments,
        found at ``places`` (see FAMILIES)."""
        found = [
            args[at] if 0 <= at < len(args) else kwargs.get(key) if at >= 0 else None
            for at, key in zip(places, KEYWORDS)
        ]
        data, name, op, root, process_set = found
        members: tuple[int, ...] = ()
        if family == "join":
            group, members = JOINS, ()
        else:
            group, members = self.group(getattr(process_set, "process_set_id", process_set))
        return (
            f"hvd.{family}",
            self.texts(data) if data is not None else "",
            self.ops.get(op, str(op)) if op is not None else "",
            f"root {root}" if root is not None else "",
            group,
            members,
            name or "",
        )

    # -- wrappers ---------------------------------------------------------------------------
    def operation(self, function: str, family: str):
        """A function of mpi_lib_v2 that enqueues an operation: recorded, with its handle."""
        fn = getattr(self.lib, function)
        places = FAMILIES[family]
        horovod = self
        COLLECTIVE = core.words.COLLECTIVE
        marks = self.marks
        named = places[1] >= 0  # barrier and join have no name

        def call(*args):
            __tracebackhide__ = True
            state = core.STATE
            ring = state.ring
            if ring is None:
                return fn(*args)
            op, data, reduce, root, group, _, name = horovod.describe(family, places, args, {})
            where = core.site()
            handle = fn(*args)
            if named:
                root = ", ".join(
                    t for t in (root, f"name {tensor_name(family, name, handle)}") if t
                )
            slot = core.record(group, (COLLECTIVE, group, op, data, reduce, root, "nb"), where)
            if len(marks) > 4096:  # handles nobody waits for: their calls stay unfinished
                marks.clear()
            marks[handle] = (ring, slot, state.last_seq, family, group)
            return handle

        call.__name__ = function
        call.__distcomp_ledger__ = fn  # type: ignore[attr-defined]
        return call

    def checked(self, function: str):
        """A function of mpi_ops that enqueues an operation: in check mode, compared across
        its process set before it runs."""
        fn = getattr(self.mpi_ops, function)
        family, places = CHECKED[function]
        horovod = self

        def call(*args, **kwargs):
            __tracebackhide__ = True
            state = core.STATE
            if state.ring is not None and state.check:
                op, data, reduce, root, group, members, name = horovod.describe(
                    family, places, args, kwargs
                )
                given = tensor_name(family, name, None)
                root = ", ".join(t for t in (root, given and f"name {given}") if t)
                horovod.check(group, members, (op, data, reduce, root), core.site())
            return fn(*args, **kwargs)

        call.__name__ = fn.__name__
        call.__doc__ = fn.__doc__
        call.__distcomp_ledger__ = fn  # type: ignore[attr-defined]
        return call

    def wait(self):
        """``horovod_torch_wait_and_clear``: marks the call waited for, and ends it when
        the wait returns; Horovod's error (tensors that do not match, a shutdown) comes on
        every rank of the call, and the call ends refused (ledger_words.REFUSED)."""
        plain = self.lib.horovod_torch_wait_and_clear
        marks = self.marks
        horovod = self

        def horovod_torch_wait_and_clear(handle):
            __tracebackhide__ = True
            mark = marks.pop(handle, None)
            if mark is None:
                return plain(handle)
            mark[0].wait(mark[1], mark[2])
            try:
                result = plain(handle)
            except RuntimeError:  # Horovod's error
                horovod.refuse(mark)
                raise
            except BaseException:  # a SIGINT that came during the wait, raised once it is done
                horovod.finish(mark)
                raise
            horovod.finish(mark)
            return result

        horovod_torch_wait_and_clear.__distcomp_ledger__ = plain  # type: ignore[attr-defined]
        return horovod_torch_wait_and_clear

    def poll(self):
        """``horovod_torch_poll``: a call it sees done ends."""
        plain = self.lib.horovod_torch_poll
        marks = self.marks
        horovod = self

        def horovod_torch_poll(handle):
            done = plain(handle)
            if done and handle in marks:
                horovod.finish(marks.pop(handle))
            return done

        horovod_torch_poll.__distcomp_ledger__ = plain  # type: ignore[attr-defined]
        return horovod_torch_poll

    def finish(self, mark: tuple) -> None:
        """A call ends; a join that ends starts each group's count again."""
        ring, slot, seq, family, _ = mark
        ring.end(slot, seq)
        if family == "join":
            self.joins += 1
            self.after = f" after join {self.joins}"

    def refuse(self, mark: tuple) -> None:
        """Horovod refused a call (tensors that do not match, on every rank that made it;
        a shutdown): it never ran, and gives its sequence number back, so the group's
        counts stay alike on the ranks that made it and those that did not."""
        ring, slot, seq, _, group = mark
        ring.refuse(slot, seq)
        seqs = core.STATE.seqs
        if seqs.get(group) == seq:
            seqs[group] = seq - 1

    def init(self):
        """``hvd.init()``, then check mode's MPI channel, opened by every rank alike."""
        plain = self.basics.init
        horovod = self

        def init(*args, **kwargs):
            starts = not horovod.basics.is_initialized()  # else Horovod does nothing
            result = plain(*args, **kwargs)
            if starts:
                horovod.inits += 1
                if horovod.inits > 1:  # after a shutdown
                    horovod.after = f" after init {horovod.inits}"
            if core.STATE.check and "mpi4py.MPI" not in sys.modules:
                try:
                    from mpi4py import MPI  # noqa: F401  (wrapped on import: its channel)
                except Exception as exc:
                    core.say(f"distcomp: check mode has no channel for Horovod: {exc!r}")
            return result

        init.__distcomp_ledger__ = plain  # type: ignore[attr-defined]
        return init

    # -- check mode -------------------------------------------------------------------------
    def check(self, group: str, members: tuple[int, ...], sig: tuple, where) -> None:
        """Exchange the operation's signature with its process set on check mode's channel,
        and raise on every member when they differ."""
        __tracebackhide__ = True
        mpi = core._sibling("ledger_mpi").WRAPPED
        exchange = getattr(mpi, "exchange", None)
        size = self.basics.size()
        if mpi is None or exchange is None or mpi.MPI.COMM_WORLD.Get_size() != size:
            if not self.said:
                self.said = True
                core.say(
                    "distcomp: check mode does not compare Horovod's calls here: it needs "
                    "mpi4py and Horovod's ranks to be MPI's COMM_WORLD"
                )
            return
        code, line = where
        seq = core.STATE.seqs.get(group, 0) + 1
        sig = (*sig, code.co_filename, line, code.co_name)
        ranks = members or tuple(range(size))
        sigs = exchange.run(ranks, (group, *core.check_round(group)), sig)
        core.mismatch(group, seq, sigs, exchange.me)


def wrap(mpi_ops) -> None:
    """Record the operations of ``horovod.torch.mpi_ops`` (idempotent)."""
    lib = getattr(mpi_ops, "mpi_lib", None)
    if lib is None or getattr(lib, "__distcomp_ledger__", False):
        return
    global WRAPPED
    horovod = WRAPPED = _Horovod(mpi_ops)
    for function in dir(lib):
        family = family_of(function)
        if family:
            setattr(lib, function, horovod.operation(function, family))
    for function in CHECKED:
        if hasattr(mpi_ops, function):
            setattr(mpi_ops, function, horovod.checked(function))
    lib.horovod_torch_wait_and_clear = horovod.wait()
    lib.horovod_torch_poll = horovod.poll()
    horovod.basics.init = horovod.init()
    lib.__distcomp_ledger__ = True
    here = os.path.dirname(os.path.dirname(str(mpi_ops.__file__)))  # horovod/
    core.skip_files(here + os.sep)
    torch = sys.modules.get("torch")
    if torch is not None:  # autograd's frames between the user's and Horovod's
        core.skip_files(os.path.dirname(str(torch.__file__)) + os.sep)
