"""The ledger's wrappers of ``torch.distributed`` (see ledger_hooks.py): each collective and
point-to-point function records its call, and in check mode posts its signature in the
process group's store (gloo and NCCL alike) and compares before the call runs. With CUDA,
torch's NCCL Flight Recorder is dumped beside the ledger.

Standard library only at import; ``core`` is ledger_hooks, set before :func:`wrap`.
"""

from __future__ import annotations

import functools
import os
import sys
import threading
from typing import Any

core: Any = None  # ledger_hooks (loaded by path on a rank, so not imported here)


#: function -> the parameter that carries the data described, "" for none
_TORCH_COLLECTIVES = {
    "all_reduce": "tensor",
    "broadcast": "tensor",
    "reduce": "tensor",
    "all_gather": "tensor",
    "all_gather_into_tensor": "input_tensor",
    "reduce_scatter": "input_list",
    "reduce_scatter_tensor": "input",
    "all_to_all": "input_tensor_list",
    "all_to_all_single": "input",
    "gather": "tensor",
    "scatter": "tensor",
    "barrier": "",
    "monitored_barrier": "",
    "all_gather_object": "obj",
    "broadcast_object_list": "object_list",
    "gather_object": "obj",
    "scatter_object_list": "scatter_object_input_list",
}
_TORCH_P2P = {"send": "tensor", "recv": "tensor", "isend": "tensor", "irecv": "tensor"}


_SHAPES: dict[tuple, str] = {}


def _tensor_text(value) -> str:
    shape = getattr(value, "shape", None)
    if shape is not None:
        key = (shape, getattr(value, "dtype", ""))
        text = _SHAPES.get(key)
        if text is None:
            if len(_SHAPES) > 4096:
                _SHAPES.clear()
            dtype = str(key[1]).replace("torch.", "")
            text = _SHAPES[key] = f"[{', '.join(map(str, shape))}] {dtype}"
        return text
    if isinstance(value, (list, tuple)):
        if value and getattr(value[0], "shape", None) is not None:
            return f"{len(value)} x {_tensor_text(value[0])}"
        return f"{len(value)} object(s)"
    return "object" if value is not None else ""


class _Torch:
    def __init__(self, dist) -> None:
        self.dist = dist
        self.prefix = os.path.dirname(os.path.dirname(dist.__file__)) + os.sep
        self.groups: dict[int, tuple[str, tuple[int, ...]]] = {}
        self.ops: dict = {}

    def group(self, group) -> tuple[str, tuple[int, ...]]:
        dist = self.dist
        if group is None or group is dist.GroupMember.WORLD:
            return "default group", ()
        known = self.groups.get(id(group))
        if known is None:
            members = tuple(dist.get_process_group_ranks(group))
            try:
                name = dist.distributed_c10d._get_process_group_name(group)
            except Exception:
                name = str(len(self.groups) + 1)
            label = f"group {name} (ranks {', '.join(map(str, members))})"
            known = self.groups[id(group)] = (label, members)
        return known

    def reduce_name(self, op) -> str:
        name = self.ops.get(op)
        if name is None:
            name = self.ops[op] = (getattr(op, "name", None) or str(op)).rsplit(".")[-1].lower()
        return name

    def wrap(self, name: str, data_name: str, kind: str):
        import inspect

        fn = getattr(self.dist, name)
        params = list(inspect.signature(fn).parameters)

        def position(*names: str) -> tuple[str, int]:
            for n in names:
                if n in params:
                    return n, params.index(n)
            return "", -1

        data = position(data_name) if data_name else ("", -1)
        group = position("group")
        op = position("op")
        root = position("src", "dst")
        torch = self

        def arg(args, kwargs, where, default=None):
            key, index = where
            if not key:
                return default
            if key in kwargs:
                return kwargs[key]
            return args[index] if len(args) > index else default

        @functools.wraps(fn)
        def call(*args, **kwargs):
            __tracebackhide__ = True
            if core.STATE.ring is None:
                return fn(*args, **kwargs)
            label, members = torch.group(arg(args, kwargs, group))
            reduce = arg(args, kwargs, op)
            peer = arg(args, kwargs, root)
            reduce_text = torch.reduce_name(reduce) if reduce is not None else ""
            if kind == core.ledger.COLLECTIVE and name in ("all_reduce", "reduce"):
                reduce_text = reduce_text or "sum"
            if peer is None:
                root_text = ""
            elif kind == core.ledger.P2P:
                root_text = f"{'to' if name in ('send', 'isend') else 'from'} rank {peer}"
            else:
                root_text = f"root {peer}"
            data_text = _tensor_text(arg(args, kwargs, data)) if data[0] else ""
            site = core.site(torch.prefix)
            if core.STATE.check and kind == core.ledger.COLLECTIVE:
                torch.check(label, members, (name, data_text, reduce_text, root_text, *site))
            slot = core.record(kind, label, name, data_text, reduce_text, root_text, site)
            try:
                return fn(*args, **kwargs)
            finally:
                if slot >= 0:
                    core.STATE.ring.end(slot)

        call.__distcomp_ledger__ = fn  # type: ignore[attr-defined]
        return call

    def check(self, label: str, members: tuple[int, ...], sig: tuple) -> None:
        """Post this call's signature in the store; compare with the group's."""
        __tracebackhide__ = True
        import datetime

        dist = self.dist
        seq = core.STATE.seqs.get(label, 0) + 1
        round_ = core.next_seq(label + "\x00check")  # one per exchange, failed ones too
        me = dist.get_rank()
        ranks = members or tuple(range(dist.get_world_size()))
        store = dist.distributed_c10d._get_default_store()
        prefix = f"distcomp-check/{label}/"
        store.set(f"{prefix}{round_}/{me}", core.ledger.SEP.join(map(str, sig)))
        keys = [f"{prefix}{round_}/{r}" for r in ranks]
        while True:  # in steps, so that an interrupt (SIGINT) gets through
            try:
                store.wait(keys, datetime.timedelta(seconds=1))
                break
            except RuntimeError as exc:
                if "timeout" not in str(exc).lower() and "timed out" not in str(exc).lower():
                    raise
        if round_ > 2:  # every rank has read round - 2: it posted round - 1 after reading
            try:
                store.delete_key(f"{prefix}{round_ - 2}/{me}")
            except Exception:
                pass
        sigs = {}
        for rank, key in zip(ranks, keys, strict=True):
            op, data, reduce, root, file, line, function = (
                store.get(key).decode().split(core.ledger.SEP)
            )
            sigs[rank] = (op, data, reduce, root, file, int(line or 0), function)
        core.mismatch(label, seq, sigs, me)


def wrap(dist) -> None:
    if getattr(dist.all_reduce, "__distcomp_ledger__", None) is not None:
        return
    if not dist.is_available():
        return
    torch = _Torch(dist)
    for table, kind in (
        (_TORCH_COLLECTIVES, core.ledger.COLLECTIVE),
        (_TORCH_P2P, core.ledger.P2P),
    ):
        for name, data in table.items():
            if hasattr(dist, name):
                setattr(dist, name, torch.wrap(name, data, kind))
    try:
        _flight_recorder(dist)
    except Exception:
        pass


def _flight_recorder(dist) -> None:
    """With CUDA: turn on torch's NCCL Flight Recorder, and keep its dump beside the ledger
    (``<ledger>.nccl``, rewritten every FLIGHT_EVERY seconds by a daemon thread) where the
    kernel merges it (``core.ledger.flight_recorder_entries``): the GPU's own view of each NCCL
    collective (scheduled, started, completed), which the Python call's return does not
    give."""
    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_available() or core.STATE.ring is None:
        return
    os.environ.setdefault("TORCH_FR_BUFFER_SIZE", "2000")
    path = core.STATE.path + ".nccl"

    def dump_now() -> None:
        c10d = torch._C._distributed_c10d
        if not (dist.is_initialized() and hasattr(c10d, "_dump_nccl_trace")):
            return
        raw = c10d._dump_nccl_trace(True, True, False)
        with open(path + ".tmp", "wb") as handle:
            handle.write(raw)
        os.replace(path + ".tmp", path)

    def loop() -> None:
        import time

        while True:
            time.sleep(FLIGHT_EVERY)
            try:
                dump_now()
            except Exception:
                pass

    threading.Thread(target=loop, name="distcomp-flight-recorder", daemon=True).start()


FLIGHT_EVERY = 2.0
