"""Each emulated node's own disk: a copy of the code folder and a temporary folder.

Azure ML snapshots a job's ``code`` folder and copies it to every node; a node's working
directory and ``/tmp`` are its own, and only the job's inputs and outputs are shared. Here the
nodes of a layout share one machine, so each gets ``node-N/code`` (a copy of the code folder)
and ``node-N/tmp`` (its ``TMPDIR``) in a scratch folder of the run, removed with the run. A
file one node writes in its working directory is then invisible to the others, and nothing a
node writes lands in the user's code folder.

Files are copied copy-on-write where the file system can (a reflink: ``FICLONE`` on btrfs, XFS,
bcachefs; ``copy_file_range``, which some file systems serve without copying), else byte by
byte. Never hard links, never links: a write through one would change the user's file. The
snapshot follows Azure ML's rules: ``.amlignore`` (else ``.gitignore``) in the code folder leaves
files out, a link is copied as what it points to (azure-ai-ml's ``get_upload_files_from_folder``
walks with ``followlinks=True`` and uploads each link's target), and a snapshot over Azure ML's
limit, counted in what links point to, is refused here as it would be there. A FIFO, socket or
device is refused before anything is copied: reading one would wait for a writer forever.

What the ranks print, and their stacks and debugger frames, name the copies; every view
shows them as the user's own files through one rule, :func:`user_path` (and a breakpoint in
the user's file holds in every copy: :func:`node_paths`), for the copies that exist now.
"""

from __future__ import annotations

import contextlib
import errno
import fnmatch
import os
import shutil
import stat
import tempfile
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from ..errors import SpecError
from . import scratch

#: Azure ML's limit on a code snapshot: "a total limit of 300 MB and/or 2000 files"
#: (learn.microsoft.com/azure/machine-learning/how-to-save-write-experiment-files,
#: "Storage limits of experiment snapshots")
SNAPSHOT_MAX_BYTES = 300 * 1024 * 1024
SNAPSHOT_MAX_FILES = 2000
SNAPSHOT_LIMIT_SOURCE = (
    "https://learn.microsoft.com/azure/machine-learning/how-to-save-write-experiment-files"
    "#storage-limits-of-experiment-snapshots"
)
IGNORE_FILES = (".amlignore", ".gitignore")
_FICLONE = 0x40049409  # linux/fs.h: _IOW(0x94, 9, int)


@dataclass(frozen=True)
class NodeDisks:
    """The scratch folder of one run and, per node, its code copy and its temp folder;
    ``source``: the user's folder the copies were made of."""

    root: str
    code: tuple[str, ...]
    tmp: tuple[str, ...]
    source: str = ""

    def environment(self, node: int) -> dict[str, str]:
        """The variables that put a node's processes on its own disk."""
        return {"TMPDIR": self.tmp[node], "PWD": self.code[node]}

    def node_path(self, path: str, node: int) -> str:
        """``path`` (a file in the user's folder) as node ``node`` has it: in its copy."""
        inside = _inside(path, self.source)
        return path if inside is None else self.code[node] + inside

    def remove(self) -> None:
        with _LOCK:
            if self in _LIVE:
                _LIVE.remove(self)
        scratch.remove(self.root)


#: the node disks of the runs and worlds that exist now: :func:`user_text` maps their copies
_LIVE: list[NodeDisks] = []
_LOCK = threading.Lock()


def _inside(path: str, folder: str) -> str | None:
    """What follows ``folder`` in ``path`` ("" or "/name..."), or None if not inside it."""
    if not folder or not path.startswith(folder):
        return None
    rest = path[len(folder) :]
    return rest if rest == "" or rest.startswith(os.sep) else None


def user_path(path: str) -> str:
    """``path`` with a node's copy of a folder (``.../node-1/code/train.py``) named as the
    user's own (``~/project/train.py``): the one rule every view of tracebacks, stacks,
    debugger locations and frames follows, so a user reads (and an editor opens) their own
    files, and identical failures on several nodes read alike."""
    return user_text(path)


def node_paths(path: str) -> list[str]:
    """Each node's copy of ``path`` (a file in a user's folder that nodes run copies of):
    where a breakpoint the user set in their file is, on each node."""
    with _LOCK:
        live = list(_LIVE)
    return [
        disks.node_path(path, n)
        for disks in live
        for n in range(len(disks.code))
        if _inside(path, disks.source) is not None
    ]


def user_text(text: str) -> str:
    """:func:`user_path` applied to every copy named anywhere in ``text``."""
    if "node-" not in text:
        return text
    with _LOCK:
        live = list(_LIVE)
    for disks in live:
        if disks.root in text:
            for copy in disks.code:
                text = text.replace(copy, disks.source)
    return text


def _ignore_patterns(code_dir: Path) -> list[str]:
    """The patterns of the code folder's ``.amlignore``, else of its ``.gitignore``."""
    for name in IGNORE_FILES:
        with contextlib.suppress(OSError):
            lines = (code_dir / name).read_text(encoding="utf-8").splitlines()
            return [ln.strip() for ln in lines if ln.strip() and not ln.startswith(("#", "!"))]
    return []


def _ignored(relative: str, is_dir: bool, patterns: list[str]) -> bool:
    """Whether a path matches one of the ignore patterns (gitignore's common forms: a name or
    glob anywhere, ``a/b`` anchored at the code folder, ``name/`` for folders only)."""
    for pattern in patterns:
        if pattern.endswith("/"):
            if not is_dir:
                continue
            pattern = pattern.rstrip("/")
        if "/" in pattern:
            if fnmatch.fnmatchcase(relative, pattern.lstrip("/")):
                return True
        elif fnmatch.fnmatchcase(relative.rsplit("/", 1)[-1], pattern):
            return True
    return False


def _kind(mode: int) -> str | None:
    """What a file that is not a regular file is (None: a regular file)."""
    if stat.S_ISREG(mode):
        return None
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "not a regular file"


def _refuse(code_dir: Path, problems: list[str], fix: str) -> SpecError:
    shown = "; ".join(problems[:5]) + (
        f"; and {len(problems) - 5} more" if len(problems) > 5 else ""
    )
    return SpecError(f"cannot copy the code folder {code_dir} for each node: {shown}. Fix: {fix}")


def snapshot(code_dir: Path, skip: Iterable[Path] = ()) -> tuple[list[Path], list[Path], int]:
    """The folders and files (relative) Azure ML would snapshot, and their total size;
    ``skip``: folders left out (outputs inside the code folder, which stay shared).

    As Azure ML's client uploads a snapshot, a link (to a file or a folder, inside the code
    folder or not) is followed: its target's content is what is copied and counted. A link
    to nothing, a link to a folder that holds it, and a FIFO, socket or device are refused,
    each named (a copy would fail, never end, or wait for a writer forever)."""
    patterns = _ignore_patterns(code_dir)
    skipped = {Path(s).resolve() for s in skip}
    folders: list[Path] = []
    files: list[Path] = []
    size = 0
    special: list[str] = []
    broken: list[str] = []
    for top, dirs, names in os.walk(code_dir, followlinks=True):
        here = Path(top)
        kept = []
        for name in sorted(dirs):
            path = here / name
            relative = path.relative_to(code_dir)
            if path.resolve() in skipped or _ignored(relative.as_posix(), True, patterns):
                continue
            if path.is_symlink() and _holds(path):
                raise _refuse(
                    code_dir,
                    [f"{relative} is a link to {os.readlink(path)}, a folder that holds it"],
                    "replace the link by what it should hold, or list it in the code "
                    "folder's .amlignore.",
                )
            kept.append(name)
            folders.append(relative)
        dirs[:] = kept
        for name in sorted(names):
            path = here / name
            relative = path.relative_to(code_dir)
            if _ignored(relative.as_posix(), False, patterns):
                continue
            try:
                facts = path.stat()  # what a link points to
            except OSError:
                if path.is_symlink():
                    broken.append(
                        f"{relative} is a link to {os.readlink(path)}, which does not exist"
                    )
                continue  # gone since the walk: not in the snapshot
            kind = _kind(facts.st_mode)
            if kind is not None:
                special.append(f"{relative} ({kind})")
                continue
            files.append(relative)
            size += facts.st_size
    if broken:
        raise _refuse(
            code_dir, broken, "remove the link, or list it in the code folder's .amlignore."
        )
    if special:
        raise _refuse(
            code_dir,
            special,
            "list it in the code folder's .amlignore, or move it out of the code folder "
            "(a FIFO or socket a program opens at run time belongs in its TMPDIR).",
        )
    return folders, files, size


def _holds(link: Path) -> bool:
    """Is the folder ``link`` points to one of the folders that hold ``link``?"""
    target = link.resolve()
    return any(target == parent.resolve() for parent in link.parents)


def _copy_file(source: Path, target: Path) -> None:
    """``source`` (a link: what it points to) to ``target``, copy-on-write where the file
    system can, else by bytes; refused when it is no regular file by now (never waits on a
    FIFO for a writer)."""
    import fcntl

    fd = os.open(source, os.O_RDONLY | os.O_NONBLOCK)
    with open(fd, "rb") as src:
        kind = _kind(os.fstat(fd).st_mode)
        if kind is not None:
            raise OSError(errno.EINVAL, f"{kind}, not a regular file", str(source))
        fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)
        with open(target, "wb") as dst:
            try:
                fcntl.ioctl(dst.fileno(), _FICLONE, src.fileno())
            except OSError:
                left = os.fstat(src.fileno()).st_size
                try:
                    while left > 0:
                        done = os.copy_file_range(src.fileno(), dst.fileno(), left)
                        if done == 0:
                            break
                        left -= done
                except OSError:  # not between these file systems: plain bytes
                    src.seek(0)
                    dst.seek(0)
                    dst.truncate()
                    shutil.copyfileobj(src, dst, 1 << 20)
    shutil.copymode(source, target)


def over_limit(folder: Path) -> str:
    """What of ``folder``'s snapshot is over Azure ML's limit ("2500 files, 3 MB"), or ""."""
    _, files, size = snapshot(folder)
    if size > SNAPSHOT_MAX_BYTES or len(files) > SNAPSHOT_MAX_FILES:
        return f"{len(files)} files, {size / 2**20:.0f} MB"
    return ""


def make_node_disks(
    code_dir: Path, nodes: int, skip: Iterable[Path] = (), root: str | None = None
) -> NodeDisks:
    """A scratch folder (in ``root``, a scratch folder of the run, where given) with
    ``node-N/code`` (the code folder's snapshot) and ``node-N/tmp`` for each of ``nodes``
    nodes; an error when the snapshot is over Azure ML's limit."""
    folders, files, size = snapshot(code_dir, skip)
    if size > SNAPSHOT_MAX_BYTES or len(files) > SNAPSHOT_MAX_FILES:
        raise SpecError(
            f"the code folder {code_dir} holds {len(files)} files, {size / 2**20:.0f} MB: "
            f"over Azure ML's limit on a code snapshot ({SNAPSHOT_MAX_BYTES // 2**20} MB, "
            f"{SNAPSHOT_MAX_FILES} files; {SNAPSHOT_LIMIT_SOURCE}), which every node gets a "
            "copy of, here as there. Fix: pass data and checkpoints as inputs (they are "
            "shared, not copied), list the rest in the code folder's .amlignore, or point "
            "the spec's `code` at a folder with the code only."
        )
    made = tempfile.mkdtemp(prefix="nodes-", dir=root) if root else None
    where = Path(made or scratch.make_folder("distcomp-nodes-"))
    try:
        for node in range(nodes):
            code, tmp = where / f"node-{node}" / "code", where / f"node-{node}" / "tmp"
            tmp.mkdir(parents=True)
            code.mkdir()
            for folder in folders:
                (code / folder).mkdir()
            for file in files:
                _copy_file(code_dir / file, code / file)
    except OSError as exc:
        scratch.remove(str(where))
        raise SpecError(
            f"cannot copy the code folder {code_dir} for each node: {exc.strerror} "
            f"({exc.filename}). Fix: make the file readable, or list it in the code "
            "folder's .amlignore."
        ) from None
    except BaseException:
        scratch.remove(str(where))
        raise
    disks = NodeDisks(
        str(where),
        tuple(str(where / f"node-{n}" / "code") for n in range(nodes)),
        tuple(str(where / f"node-{n}" / "tmp") for n in range(nodes)),
        str(code_dir),
    )
    with _LOCK:
        _LIVE.append(disks)
    return disks
