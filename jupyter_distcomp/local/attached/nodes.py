"""What the notebook runs on a node of an attached job (sh, over the node's SSH connection),
and what it reads back: the job's processes (rank_side/job_attach.py writes one
``proc-<pid>.json`` each into the job's folder), the notebook's attach file, signals, files.

Every script prints only between markers, so a login banner or a shell's noise cannot be
taken for an answer. Secrets (the channel's key) travel on the script's stdin.
"""

from __future__ import annotations

import base64
import json
import shlex
import signal
from dataclasses import dataclass, field
from typing import Any

MARK = "@@distcomp"


@dataclass
class JobProcess:
    """One rank's first Python process on its node, as its ``proc-<pid>.json`` says."""

    rank: int
    node: int
    pid: int
    thread: int | None
    stack: str
    ledger: str
    cwd: str
    started: float
    alive: bool = True
    waiting: dict | None = field(default=None)  # at a breakpoint, waiting for a notebook
    pause: bool = False  # takes JupyterLab's Pause (job_attach.PAUSE_SIGNAL is ours there)

    @classmethod
    def parse(cls, data: dict, alive: bool) -> JobProcess:
        thread = data.get("thread")
        return cls(
            rank=int(data["rank"]),
            node=int(data.get("node") or 0),
            pid=int(data["pid"]),
            thread=int(thread) if thread is not None else None,
            stack=str(data.get("stack") or ""),
            ledger=str(data.get("ledger") or ""),
            cwd=str(data.get("cwd") or ""),
            started=float(data.get("started") or 0.0),
            alive=alive,
            waiting=data.get("waiting") or None,
            pause=bool(data.get("pause")),
        )


def attach_file(folder: str, node: int) -> str:
    return f"{folder}/attach-node{node}.json"


def discover_script(folder: str) -> str:
    """Each process's file in the job's folder, with whether that process lives."""
    where = shlex.quote(folder)
    return (
        f"[ -d {where} ] || {{ echo '{MARK} nofolder'; exit 0; }}\n"
        f"for f in {where}/proc-*.json; do\n"
        '  [ -e "$f" ] || continue\n'
        "  pid=${f##*/proc-}; pid=${pid%.json}\n"
        '  if kill -0 "$pid" 2>/dev/null; then alive=1; else alive=0; fi\n'
        f'  echo "{MARK} proc $alive"; cat "$f"; echo\n'
        "done\n"
        f"echo '{MARK} end'\n"
    )


def parse_discovery(output: str, node: int) -> tuple[bool, dict[int, JobProcess]]:
    """(whether the job's folder exists, the first process of each rank of ``node``)."""
    if f"{MARK} nofolder" in output:
        return False, {}
    found: dict[int, JobProcess] = {}
    for block in output.split(f"{MARK} proc ")[1:]:
        flag, _, rest = block.partition("\n")
        try:
            data = json.loads(rest.split(MARK, 1)[0])
            process = JobProcess.parse(data, flag.strip() == "1")
        except (ValueError, KeyError, TypeError):
            continue  # a file being written: read again next time
        if process.node != node:  # nodes that share a disk (the stand-in's)
            continue
        known = found.get(process.rank)
        if known is None or process.started < known.started:
            found[process.rank] = process
    return f"{MARK} end" in output, found


def attach_script(folder: str, node: int) -> str:
    """Write the attach file of ``node`` (its JSON on stdin) at once, readable by the job's
    user alone; in the job's folder, made (0700) if its ranks have not yet, refused unless
    it is that user's own and no one else's."""
    return private_file_script(folder, attach_file(folder, node))


def private_file_script(folder: str, path: str) -> str:
    """Write ``path`` in the job's ``folder`` (its text on stdin) as :func:`attach_script`
    writes the attach file."""
    target = shlex.quote(path)
    where = shlex.quote(folder)
    return (
        "umask 077\n"
        f"mkdir -p {where} 2>/dev/null\n"
        f'[ -d {where} ] && [ -O {where} ] && [ -z "$(find {where} -maxdepth 0 -perm /077)" ] '
        f"|| {{ echo '{MARK} notours'; exit 0; }}\n"
        f"cat > {target}.$$ && mv -f {target}.$$ {target} && echo '{MARK} written'\n"
    )


def attach_data(session: str, port: int, key_hex: str, node: int) -> str:
    return json.dumps({"session": session, "port": port, "key": key_hex, "node": node})


def detach_script(folder: str, node: int, session: str) -> str:
    """Mark the attach file of ``node`` detached, if it is still ``session``'s."""
    target = shlex.quote(attach_file(folder, node))
    data = shlex.quote(json.dumps({"session": session, "detached": True}))
    return (
        "umask 077\n"
        f"grep -q {shlex.quote(session)} {target} 2>/dev/null && "
        f"printf '%s' {data} > {target}.$$ && mv -f {target}.$$ {target}\n"
        f"echo '{MARK} done'\n"
    )


def signal_script(pids: list[int], sig: int) -> str:
    """Send signal ``sig`` (by its name: the node's numbers may differ) to ``pids``."""
    listed = " ".join(str(int(p)) for p in pids)
    name = signal.Signals(sig).name.removeprefix("SIG")
    return f"kill -{name} {listed} 2>/dev/null; echo '{MARK} sent'\n"


def read_files_script(paths: dict[str, str]) -> str:
    """Each file ``paths[key]`` (a rank's ledger, its torch record), base64, between markers."""
    lines = []
    for key, path in paths.items():
        lines.append(f"echo '{MARK} file {key}'; base64 {shlex.quote(path)} 2>/dev/null")
    lines.append(f"echo '{MARK} end'")
    return "\n".join(lines) + "\n"


def parse_files(output: str) -> dict[str, bytes]:
    """key -> the bytes of its file, from :func:`read_files_script` (absent ones: empty)."""
    found: dict[str, bytes] = {}
    for block in output.split(f"{MARK} file ")[1:]:
        key, _, rest = block.partition("\n")
        try:
            found[key.strip()] = base64.b64decode("".join(rest.split(MARK, 1)[0].split()))
        except ValueError:
            continue
    return found


def said(output: Any, word: str) -> bool:
    return isinstance(output, str) and f"{MARK} {word}" in output
