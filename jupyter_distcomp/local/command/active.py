"""The ``%distcomp command`` runs in progress, by component name, so that ``%distcomp where``
and ``interrupt`` find them, also after the component's definition cell ran again.

Each run puts ``rank_side/stack_site`` on its ranks' ``PYTHONPATH`` with
``DISTCOMP_STACK_DIR`` set: every Python process of the run then writes its stacks to a file
of its own there on SIGUSR1 (see that folder's ``sitecustomize``). :meth:`ActiveRun.targets`
maps those processes to ranks (a rank's process descends from its supervisor), so the
caller can signal them and read what they wrote.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Callable, Iterator
from pathlib import Path

from ...machine import scratch

STACK_SITE = str(Path(__file__).parents[2] / "rank_side" / "stack_site")
_STACK_FILE = re.compile(r"^(\d+)-(\d+)\.stack$")

#: component name -> the run of its command now in progress
_ACTIVE: dict[str, ActiveRun] = {}


class ActiveRun:
    """One run in progress: where its processes write stacks, and its ranks' supervisors."""

    def __init__(self, world_size: int, cwd: Path) -> None:
        self.world_size = world_size
        self.cwd = str(cwd)
        self.folder = scratch.make_folder("distcomp-stacks-")
        self.supervisors: Callable[[], dict[int, int]] = dict
        #: end the run (``signal.SIGINT`` by default, as Ctrl-C; SIGTERM as a cancel)
        self.interrupt: Callable[..., None] = lambda *sig: None

    def environment(self, env: dict[str, str]) -> dict[str, str]:
        """``env`` with the stack hook on PYTHONPATH."""
        path = env.get("PYTHONPATH", "")
        return {
            **env,
            "PYTHONPATH": STACK_SITE + (os.pathsep + path if path else ""),
            "DISTCOMP_STACK_DIR": self.folder,
        }

    def targets(self, ranks: list[int]) -> dict[int, tuple[int, str, int]]:
        """``{rank: (pid, stack file, main thread id)}`` of each rank's first Python process."""
        import psutil

        owners = {pid: rank for rank, pid in self.supervisors().items() if rank in ranks}
        found: dict[int, tuple[float, tuple[int, str, int]]] = {}
        for name in os.listdir(self.folder):
            match = _STACK_FILE.match(name)
            if not match:
                continue
            pid, thread = int(match[1]), int(match[2])
            try:
                process = psutil.Process(pid)
                lineage = [process.pid] + [p.pid for p in process.parents()]
                started = process.create_time()
            except psutil.Error:
                continue  # exited
            rank = next((owners[p] for p in lineage if p in owners), None)
            if rank is not None and (rank not in found or started < found[rank][0]):
                found[rank] = (started, (pid, os.path.join(self.folder, name), thread))
        return {rank: target for rank, (_, target) in found.items()}

    def close(self) -> None:
        scratch.remove(self.folder)


@contextlib.contextmanager
def registered(name: str, run: ActiveRun) -> Iterator[ActiveRun]:
    """``run`` is the command run of component ``name`` while the block runs."""
    _ACTIVE[name] = run
    try:
        yield run
    finally:
        if _ACTIVE.get(name) is run:
            del _ACTIVE[name]
        run.close()


def running_command(name: str) -> ActiveRun | None:
    """The run of component ``name``'s command in progress, if any."""
    return _ACTIVE.get(name)


def running_commands(name: str | None = None) -> list[tuple[str, ActiveRun]]:
    """``(component name, run)`` of the commands in progress (of ``name`` only, if given)."""
    return [(key, run) for key, run in list(_ACTIVE.items()) if name in (None, key)]
