"""PyTorch's Flight Recorder dumps, read as plain data and put in the ledger's words.

A job that sets ``TORCH_FR_BUFFER_SIZE`` (or ``TORCH_NCCL_TRACE_BUFFER_SIZE``) keeps a
record of each rank's recent collectives; with ``TORCH_NCCL_DUMP_ON_TIMEOUT=1`` NCCL's
watchdog writes it to ``TORCH_FR_DUMP_TEMP_FILE`` (older: ``TORCH_NCCL_DEBUG_INFO_TEMP_FILE``)
+ the rank, and ``torch._C._distributed_c10d._dump_fr_trace()`` gives the same bytes on
demand (gloo's collectives too, in torch 2.13). The dump is a pickle of plain dicts and
lists (``{"version", "pg_config", "pg_status", "entries": [{"collective_seq_id",
"profiling_name": "nccl:all_reduce", "state", "frames", "input_sizes", ...}]}``, see
torch/distributed/flight_recorder/components/loader.py) or, from ``_dump_fr_trace_json``,
the same as JSON. It is read with an unpickler that loads no class at all, so a dump
runs no code here and needs no torch; the collectives it holds become ledger entries, and
the ledger's verdicts say who never reached which call.
"""

from __future__ import annotations

import io
import json
import pickle
from typing import Any

from ...rank_side import ledger_words
from ...rank_side.ledger_words import COLLECTIVE, TORCH_DTYPES, Entry, format_ranks
from .tracebacks import Frame


class _PlainData(pickle.Unpickler):
    """Unpickles dicts, lists, tuples, strings and numbers only."""

    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"{module}.{name} is not plain data")


def read_dump(raw: bytes) -> dict | None:
    """A dump's contents (pickle or JSON); None when it is neither, or not a Flight
    Recorder dump."""
    try:
        dump = json.loads(raw) if raw[:1] == b"{" else _PlainData(io.BytesIO(raw)).load()
    except Exception:  # a damaged or foreign file: not a dump
        return None
    if not isinstance(dump, dict) or not isinstance(dump.get("entries"), list):
        return None
    return dump


def _group_label(entry: dict, configs: dict, world: int) -> str:
    name, desc = [*(entry.get("process_group") or ()), "", ""][:2]
    config = configs.get(str(name)) or {}
    ranks = str(config.get("ranks") or "").strip("[]")
    if desc == "default_pg" or (ranks and ranks == ", ".join(map(str, range(world)))):
        return "default group"
    return f"group {name}" + (f" (ranks {ranks})" if ranks else "")


def _frame(item: dict) -> Frame | None:
    for raw in item.get("frames") or []:  # innermost first
        frame = Frame(str(raw.get("filename", "")), int(raw.get("line") or 0), str(raw.get("name")))
        if frame.mine:
            return frame
    return None


def dump_entries(dump: dict, world: int) -> list[Entry]:
    """A dump's collectives as ledger entries (oldest first): finished once completed,
    their call site the innermost frame of the user's."""
    configs = dump.get("pg_config") or {}
    statuses = dump.get("pg_status") or {}
    entries = []
    for item in dump.get("entries") or []:
        if not isinstance(item, dict) or item.get("is_p2p"):
            continue
        profile = str(item.get("profiling_name", ""))
        op = profile.split(":", 1)[-1]
        data = " ".join(
            f"[{', '.join(map(str, size))}] {TORCH_DTYPES.get(str(dtype), str(dtype).lower())}"
            for size, dtype in zip(
                item.get("input_sizes") or [], item.get("input_dtypes") or [], strict=False
            )
        )
        created = (item.get("time_created_ns") or 0) / 1e9
        state = str(item.get("state") or "")
        seq = int(item.get("collective_seq_id") or 0)
        # gloo's entries stay "scheduled": its group's status says what completed
        status = statuses.get(str(item.get("pg_id"))) or {}
        done = state == "completed" or seq <= int(status.get("last_completed_collective") or -1)
        finished = (item.get("time_discovered_completed_ns") or 0) / 1e9 or created
        frame = _frame(item)
        entries.append(
            Entry(
                seq,
                created,
                finished if done else 0.0,
                COLLECTIVE,
                _group_label(item, configs, world),
                op,
                data,
                file=frame.file if frame else "",
                line=frame.line if frame else 0,
                function=frame.function if frame else "",
                gpu=state if profile.startswith("nccl:") else "",
            )
        )
    return entries


def _reach_lines(ledgers: dict[int, list[Entry]], world: int) -> list[str]:
    """Per group, the newest collective some of its ranks reached and others never did
    (torch's analyser's "not all ranks joining collective"): whether a call completed
    is left aside, as gloo marks a call that failed completed too."""
    lines = []
    for table in ledger_words.by_group(ledgers).values():
        sample = next(iter(next(iter(table.values())).values()))
        members = [r for r in (sample.members or range(world)) if r in ledgers]
        newest = {r: max((s for s in table if r in table[s]), default=0) for r in members}
        top = max(newest.values(), default=0)
        behind = sorted(r for r in members if newest[r] < top)
        if not behind:
            continue
        call = next(iter(table[top].values()))
        reached = sorted(table[top])
        text = f"{ledger_words.call_text(call)}"
        text += f" at {call.site()}" if call.file else ""
        text += f": {format_ranks(reached)} reached it; {format_ranks(behind)} never did"
        lasts: dict[str, list[int]] = {}
        for rank in behind:
            last = table.get(newest[rank], {}).get(rank)
            words = f"{last.op} #{last.seq}" if last else "no call of this group"
            lasts.setdefault(words, []).append(rank)
        text += " (" + "; ".join(f"{format_ranks(rs)}: last {w}" for w, rs in lasts.items()) + ")"
        lines.append(text)
    return lines


def flight_lines(dumps: dict[int, dict], world: int) -> list[str]:
    """What the ranks' dumps say: who never reached which collective, calls that differ
    across ranks (the ledger's verdicts), and each rank's last enqueued and completed
    collective."""
    ledgers = {rank: dump_entries(dump, world) for rank, dump in dumps.items()}
    lines = _reach_lines(ledgers, world)
    for verdict in ledger_words.verdicts(ledgers, world, now=0.0):
        if not verdict.others:  # a rank missing: said above
            continue
        verdict.now = None  # a dump has no "now": no "waits since"
        calls = ledger_words.by_group(ledgers).get(verdict.group, {}).get(verdict.seq, {})
        lines.append(ledger_words.verdict_text(verdict, calls))
    missing = [r for r in range(world) if r not in dumps]
    if missing:
        lines.append(f"{format_ranks(missing)}: no dump")
    statuses: dict[str, list[int]] = {}
    for rank, dump in sorted(dumps.items()):
        for group, status in sorted((dump.get("pg_status") or {}).items()):
            if not isinstance(status, dict):
                continue
            words = (
                f"process group {group}: last enqueued #{status.get('last_enqueued_collective')}, "
                f"last completed #{status.get('last_completed_collective')}"
            )
            statuses.setdefault(words, []).append(rank)
    lines += [f"{format_ranks(ranks)}: {words}" for words, ranks in statuses.items()]
    return lines
