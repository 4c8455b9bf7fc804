"""torch's own record of each collective, read beside the ledger, and the rank's GPU facts.

torch keeps its own record of each collective (the Flight Recorder, in C++, on when
TORCH_FR_BUFFER_SIZE is set before a process group starts): NCCL's on every torch this
supports (with the GPU-side state of each call: scheduled, started, completed), gloo's too
from torch 2.13. It cannot replace the ledger's wrappers (ledger_torch.py), which stay for
every backend for what that record lacks: the user's call site (its stack frames are
captured only at a cost, and hold torch's frames), gloo's end of a call (its state stays
"scheduled"), check mode (a hook before the call runs), and a record the kernel reads at any
time from the ledger's memory-mapped file without the rank's help (torch's is read only by a
call in the rank: this module's thread, as fresh as FLIGHT_EVERY, and none while a call
holds the GIL). So the ledger turns the record on where CUDA is (NCCL's GPU-side state is
what the wrappers cannot see; torch 2.13 keeps it by default), and the kernel takes from it
the NCCL calls, as rows of their own with that state (ledger.torch_record_entries); outside
check mode the wrappers leave an NCCL group's collectives to it (ledger_torch.py). gloo's
entries (torch 2.13 records them by default: about 1.5 us of CPU a call, measured against
TORCH_FR_BUFFER_SIZE=0) are dumped but not shown: they say what the ledger's rows say, DDP's
gradient buckets included (the ledger's comm hook records them).

Standard library only at import; loaded by path on a rank (see ledger_hooks.py).
"""

from __future__ import annotations

import os
import sys
import threading

FLIGHT_EVERY = 2.0
#: torch's dump functions, JSON first: (name, arguments, format; a pickled one is read only
#: where no JSON one worked); torch 2.11 keeps NCCL's record only in _dump_nccl_trace*,
#: torch 2.13 gloo's (and NCCL's) in _dump_fr_trace*. Arguments: the collectives, no stack
#: traces (pickled ones only), and every entry, not only the active ones (onlyActive=False:
#: a completed call is what tells a rank that finished from one that never launched)
_DUMPS = (
    ("_dump_fr_trace_json", (True, False), "json"),
    ("_dump_nccl_trace_json", (True, False), "json"),
    ("_dump_nccl_trace", (True, False, False), "pickle"),
    ("_dump_fr_trace", (True, False, False), "pickle"),
)


def start(dist, core) -> None:
    """Turn on torch's record (with CUDA: NCCL's), and keep beside the ledger, rewritten
    when changed every FLIGHT_EVERY seconds by a daemon thread: its dump
    (``<ledger>.torch``, JSON), which the kernel merges with the ledger, and this rank's GPU
    facts (``<ledger>.gpu``, :func:`gpu_facts`). Where no dump function works, each one's
    failure is said once on the rank's stderr, and until one works the ledger's wrappers
    record NCCL's collectives themselves (``STATE.torch_record``)."""
    if core.STATE.ring is None:
        return
    torch = sys.modules["torch"]
    if torch.cuda.is_available():
        os.environ.setdefault("TORCH_FR_BUFFER_SIZE", "2000")
    path = core.STATE.path
    said: set[str] = set()

    def loop() -> None:
        import time

        last = {".torch": b"", ".gpu": b""}
        while True:
            time.sleep(FLIGHT_EVERY)
            try:
                facts = gpu_facts(torch)
            except Exception:  # a torch without these counters: no facts
                facts = b""
            raw, errors = dump_record() if dist.is_initialized() else (b"", [])
            # while no dump works, the ledger's wrappers record NCCL's collectives
            core.STATE.torch_record = bool(raw) or not errors
            for name, error in errors if not raw else ():  # one dump that works is enough
                if name not in said:
                    said.add(name)
                    core.say(
                        f"distcomp: torch's record of this rank's collectives (its Flight "
                        f"Recorder) cannot be read, %distcomp collectives shows the ledger's "
                        f"rows alone: {error}"
                    )
            for suffix, data in ((".torch", raw), (".gpu", facts)):
                if data and data != last[suffix]:
                    try:
                        with open(path + suffix + ".tmp", "wb") as handle:
                            handle.write(data)
                        os.replace(path + suffix + ".tmp", path + suffix)
                    except OSError:  # the ledger's folder is gone: the world stops
                        return
                    last[suffix] = data

    threading.Thread(target=loop, name="distcomp-flight-recorder", daemon=True).start()


_NAMES: dict[int, tuple[str, int]] = {}


def gpu_facts(torch) -> bytes:
    """This process's CUDA devices (those its caching allocator holds memory on): index,
    name, memory in use and peak (``memory_allocated``, ``max_memory_allocated``), reserved
    and total, as JSON; b"" while CUDA is not initialised (it is never initialised here:
    the current device is per thread, so the devices are those with memory)."""
    import json

    cuda = torch.cuda
    if not cuda.is_initialized():
        return b""
    devices = []
    for index in range(cuda.device_count()):
        reserved = cuda.memory_reserved(index)
        if not reserved:
            continue
        known = _NAMES.get(index)
        if known is None:
            props = cuda.get_device_properties(index)
            known = _NAMES[index] = (props.name, int(props.total_memory))
        devices.append(
            {
                "index": index,
                "name": known[0],
                "total": known[1],
                "allocated": cuda.memory_allocated(index),
                "peak": cuda.max_memory_allocated(index),
                "reserved": reserved,
            }
        )
    return json.dumps({"devices": devices}).encode()


def dump_record() -> tuple[bytes, list[tuple[str, str]]]:
    """torch's record of this process's collectives, from every dump function the
    installed torch has, as one JSON document (``{"entries": [...], "pg_config": {...}}``;
    b"" when there is none), and the errors of the dumps that failed: (function, error)."""
    import json

    c10d = sys.modules["torch"]._C._distributed_c10d
    entries: dict[tuple, dict] = {}
    configs: dict = {}
    errors: list[tuple[str, str]] = []
    read_json = False
    for name, args, form in _DUMPS:
        fn = getattr(c10d, name, None)
        if fn is None or (form == "pickle" and read_json):
            continue
        try:
            raw = fn(*args)
            if form == "json":
                dump = json.loads(raw)
                read_json = True
            else:
                import pickle

                dump = pickle.loads(raw)
        except Exception as exc:
            errors.append((name, f"{name}: {type(exc).__name__}: {exc}"))
            continue
        for config_name, config in (dump.get("pg_config") or {}).items():
            if config_name and isinstance(config, dict):
                configs[str(config_name)] = {"ranks": str(config.get("ranks", ""))}
        for item in dump.get("entries") or []:
            group = item.get("process_group") or ("",)
            key = (
                str(group[0]),
                item.get("collective_seq_id"),
                item.get("p2p_seq_id"),
                item.get("profiling_name"),
            )
            entries[key] = {k: v for k, v in item.items() if k in _KEPT_FIELDS}
    if not entries:
        return b"", errors
    body = {"entries": list(entries.values()), "pg_config": configs}
    return json.dumps(body, default=str).encode(), errors


#: the fields of torch's record that the kernel reads
_KEPT_FIELDS = frozenset(
    (
        "collective_seq_id",
        "p2p_seq_id",
        "is_p2p",
        "profiling_name",
        "process_group",
        "input_sizes",
        "input_dtypes",
        "state",
        "time_created_ns",
        "time_discovered_started_ns",
        "time_discovered_completed_ns",
        "frames",
        "retired",
    )
)
