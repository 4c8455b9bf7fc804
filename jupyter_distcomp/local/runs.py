"""The runs in progress in this kernel, asked in one place: background cells and commands,
and ``%distcomp command`` runs.

A background job (``--background``: a cell or a command) is kept by the rank backend
(``ranks/background.py``) until ``%distcomp wait`` collects it; the processes of a
``%distcomp command`` run, background or not, are registered by ``command/active.py`` while
they run. ``stop``, ``status``, ``where``, ``interrupt`` and the panel ask :class:`Runs`,
which reads both, instead of each reaching into the two.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from .command.active import running_command, running_commands

if TYPE_CHECKING:
    from .command.active import ActiveRun
    from .ranks.backend import RankBackend
    from .ranks.background import BackgroundCell

#: seconds `where`, `interrupt` and `collectives` wait for a background `%distcomp command`
#: to set up its processes (it renders its command and opens its ports first)
COMMAND_SETUP = 10.0
#: seconds `%distcomp stop` waits for a background command's processes to end
COMMAND_STOP = 15.0


class Runs:
    """The runs of this kernel; ``backend()`` is the rank backend, None before any ranks
    (then no background job exists)."""

    def __init__(self, backend: Callable[[], RankBackend | None]) -> None:
        self._backend = backend

    def jobs(self, name: str | None = None) -> list[tuple[str, BackgroundCell]]:
        """``(component, job)`` of each background job not yet waited for (of ``name``)."""
        backend = self._backend()
        kept = backend.background.items() if backend is not None else []
        return [(key, job) for key, jobs in kept if name in (None, key) for job in jobs]

    def job(self, name: str) -> BackgroundCell | None:
        """The background job (cell or command) of ``name`` that runs now, if any."""
        backend = self._backend()
        return backend.background.running(name) if backend is not None else None

    def describe(self, name: str | None = None) -> list[str]:
        """One line per background job (of ``name``, or of every component)."""
        return [job.describe() for _, job in self.jobs(name)]

    def command(self, name: str) -> ActiveRun | None:
        """The `%distcomp command` run of ``name`` in progress (an ActiveRun), if any; a
        background one that is still setting up its processes is waited for."""
        command = running_command(name)
        job = self.job(name)
        if command is not None or job is None or job.kind != "command":
            return command
        deadline = time.monotonic() + COMMAND_SETUP
        while command is None and job.running and time.monotonic() < deadline:
            time.sleep(0.01)
            command = running_command(name)
        return command

    def stop(self, name: str | None = None) -> list[str]:
        """End the runs of ``name`` (of every component when None) that are not its ranks':
        each `%distcomp command` run gets SIGINT (a background one's thread is then waited
        for, SIGKILL after the grace), each background cell is marked cancelled (stopping
        the ranks ends it). What was stopped, one phrase each."""
        keys = {key for key, _ in running_commands(name)}
        keys.update(key for key, job in self.jobs(name) if job.running and job.kind == "command")
        said: list[str] = []
        for key in sorted(keys):
            command = self.command(key)
            job = self.job(key)
            job = job if job is not None and job.kind == "command" else None
            if command is None:
                continue
            if job is not None:
                job.cancelled = True
            command.interrupt()
            if job is not None:
                job.join(COMMAND_STOP)
            said.append(
                f"the {'background ' if job else ''}`%distcomp command` of {key} "
                f"({command.world_size} rank process(es))"
            )
        for _, job in self.jobs(name):
            if job.running and job.kind == "cell":
                job.cancelled = True
        return said
