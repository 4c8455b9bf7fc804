"""A submitted job's code snapshot with our rank side in it (``submit(..., diagnose=True)``).

The failures that cost most happen on the cluster: a rank that never reaches a collective,
a deadlock, a job cancelled after hours. So a job submitted with diagnostics carries, in a
``.distcomp/`` folder of its code snapshot, the rank side files of :data:`JOB_FILES`
(standard library only, Python 3.8 or newer: no package in the job's image), and its
command starts with a prefix that puts ``.distcomp/rank_side/job_site`` first on each
process's ``PYTHONPATH``. Each rank then keeps its collectives ledger and, on a stall, on
SIGTERM or on a failure, writes one ``[distcomp rank-state]`` line into its log
(rank_side/job_watch.py); otherwise it prints nothing and behaves as without it.

Nothing is written into the user's code folder: the snapshot is a temporary copy (hard
links where the file system allows, else copies) of exactly the files azure-ai-ml would
upload from it (its own ``.amlignore`` / ``.gitignore`` rules, read with its own
functions), plus ``.distcomp/``. In the copy, an ``.amlignore`` that leaves out only itself
(or the user's, with ``.distcomp/`` let in) keeps azure-ai-ml from filtering the files a
second time by other rules.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ..errors import AzureMLError
from ..machine import scratch

FOLDER = ".distcomp"
#: the rank side files a job's processes load (from jupyter_distcomp/rank_side/, to
#: .distcomp/rank_side/ in the snapshot, in the same places relative to each other)
JOB_FILES = (
    "job_site/sitecustomize.py",
    "job_watch.py",
    "job_line.py",
    "job_sigterm.py",
    "ledger_hooks.py",
    "ledger.py",
    "ledger_words.py",
    "ledger_torch.py",
    "ledger_mpi.py",
    "ledger_horovod.py",
    "after_import.py",
    "torch_record.py",
)
#: what a job submitted with ``--debug`` carries as well: the rank side of ``%distcomp
#: attach``, the debugger it loads, JupyterLab's debugger's side of it, and the engine of
#: ``--cells`` jobs
DEBUG_FILES = (
    "job_attach.py",
    "debug_hook.py",
    "compare.py",
    "dap_side.py",
    "dap_values.py",
    "job_engine.py",
    "engine_start.py",
)
SITE = f"{FOLDER}/rank_side/job_site"
#: what the command's prefix sets PYTHONPATH to: bash expands it in the code folder, where
#: Azure ML starts the command; the job's own PYTHONPATH, if any, follows
PYTHONPATH_VALUE = f'"$PWD/{SITE}${{PYTHONPATH:+:$PYTHONPATH}}"'
RANK_SIDE = Path(__file__).resolve().parents[1] / "rank_side"
#: bash words that make a command more than one simple command
_NOT_SIMPLE = {
    "if",
    "for",
    "while",
    "until",
    "case",
    "select",
    "function",
    "time",
    "coproc",
    "exec",
    "{",
    "[[",
    "!",
}
_CONTROL = {";", "&", "&&", "||", "|", "|&", ";;", "(", ")", "((", "))"}
_AMLIGNORE = ".amlignore"


def _one_simple_command(command: str) -> bool:
    """Whether bash reads ``command`` as one simple command (a program, its arguments and
    redirections): an assignment in front of it then reaches that program alone, and bash
    still runs the program in its own place (no shell left in between)."""
    if "\n" in command:
        return False
    try:
        lexer = shlex.shlex(command, posix=True, punctuation_chars=True)
        words = list(lexer)
    except ValueError:  # an open quote: bash is the judge
        return False
    if not words or words[0] in _NOT_SIMPLE:
        return False
    return not any(word in _CONTROL for word in words)


def diagnosed_command(command: str) -> str:
    """``command`` with the prefix that lets its Python processes find the job side:
    ``PYTHONPATH="$PWD/.distcomp/rank_side/job_site${PYTHONPATH:+:$PYTHONPATH}" CMD`` for one
    simple command, else ``export PYTHONPATH=... && CMD`` (every command of a list sees it).
    Azure ML's ``${{inputs.x}}`` and ``$[[...]]`` are left to Azure ML, as before."""
    command = command.lstrip()
    if _one_simple_command(command):
        return f"PYTHONPATH={PYTHONPATH_VALUE} {command}"
    return f"export PYTHONPATH={PYTHONPATH_VALUE} && {command}"


def job_files(debug: bool = False) -> list[tuple[Path, str]]:
    """Each file of :data:`JOB_FILES` (and, with ``debug``, :data:`DEBUG_FILES`) in this
    package, with its place in the snapshot."""
    names = JOB_FILES + (DEBUG_FILES if debug else ())
    return [(RANK_SIDE / name, f"{FOLDER}/rank_side/{name}") for name in names]


def _upload_list(folder: Path) -> list[tuple[str, str]]:
    """(file, its path in the upload) of each file azure-ai-ml uploads from ``folder``."""
    from azure.ai.ml._utils._asset_utils import get_ignore_file, get_upload_files_from_folder

    found: Any = get_upload_files_from_folder(folder, ignore_file=get_ignore_file(folder))
    return [(str(source), str(name)) for source, name in found]  # typed list[str] there


def _link(source: str | Path, target: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(source, target)
    except OSError:  # another file system, or links refused: a copy
        shutil.copy2(source, target)


def _let_ours_in(copy: Path, ours: list[str]) -> None:
    """azure-ai-ml filters the copy by its ``.amlignore`` again: one that leaves out only
    itself, or the user's (uploaded as it is) with ``.distcomp/`` let in where it would
    leave some of ours out (rewritten, never through the link to the user's file)."""
    from azure.ai.ml._utils._asset_utils import AmlIgnoreFile

    ignore = copy / _AMLIGNORE
    if not ignore.exists():
        ignore.write_text(f"/{_AMLIGNORE}\n", encoding="utf-8")
        return
    rules = AmlIgnoreFile(copy)
    if not any(rules.is_file_excluded((copy / name).as_posix()) for name in ours):
        return
    text = ignore.read_text(encoding="utf-8")
    ignore.unlink()
    ignore.write_text(f"{text.rstrip()}\n!/{FOLDER}/\n!/{FOLDER}/**\n", encoding="utf-8")


@contextlib.contextmanager
def diagnosed_snapshot(code_dir: Path, debug: bool = False) -> Iterator[Path]:
    """A temporary copy of what azure-ai-ml would upload from ``code_dir``, with
    ``.distcomp/`` added (a ``.distcomp`` of the user's is replaced; ``debug``: with the
    rank side of attach); removed on exit. The copy's folder has the code folder's name,
    so the upload's paths are the same."""
    code_dir = Path(code_dir).resolve()
    root = scratch.make_folder("distcomp-snapshot-")
    try:
        copy = Path(root) / code_dir.name
        copy.mkdir()
        wanted = set()
        for source, name in _upload_list(code_dir):
            if name == FOLDER or name.startswith(f"{FOLDER}/"):
                continue
            try:
                _link(source, copy / name)
            except OSError as exc:
                raise AzureMLError(
                    f"cannot copy {source} into the code snapshot with diagnostics: "
                    f"{exc.strerror}. Fix: make the file readable, list it in the code "
                    "folder's .amlignore, or submit with --no-diagnose (diagnose=False)."
                ) from None
            wanted.add(name)
        ours = []
        for file, name in job_files(debug):
            (copy / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(file, copy / name)
            ours.append(name)
        _let_ours_in(copy, ours)
        uploaded = {name for _, name in _upload_list(copy)}
        missing = (wanted | set(ours)) - uploaded
        if missing:
            raise AzureMLError(
                f"the code snapshot of {code_dir} with diagnostics would leave out "
                f"{', '.join(sorted(missing)[:5])} (its .amlignore). Fix: submit with "
                "--no-diagnose (diagnose=False), or simplify the .amlignore's rules."
            )
        yield copy
    finally:
        scratch.remove(root)
