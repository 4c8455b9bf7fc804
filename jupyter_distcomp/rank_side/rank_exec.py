"""The small supervisor each rank of ``%distcomp command`` runs under.

    python -I .../rank_side/rank_exec.py ENVFILE -- ARGV...    (each rank under mpiexec)
    python -I .../rank_side/rank_exec.py --plan-in-env -- ARGV...  (ranks on other hosts)
    python -I .../rank_side/rank_exec.py --direct -- ARGV...   (one process per rank)

Standard library only, so it runs as a file without importing (or needing) this package.

Under ``mpiexec`` every process gets the same environment, but Azure ML gives each rank its
own variables (and, in emulated multi-node layouts, a local rank that Open MPI on one host
does not compute). The supervisor picks its rank's variables from the JSON file ENVFILE by
``OMPI_COMM_WORLD_RANK`` and runs ARGV with them.

Why a supervisor (fork, then exec in the child) rather than a bare ``os.execvpe``: the kernel
is not the parent of the ranks under ``mpiexec``, so it could not learn each rank's exit
code or signal. The supervisor waits for the child and reports the exit status over a
control connection, then exits the same way so that ``mpiexec`` sees it too. The child is
still the process ``mpiexec`` launched in every way MPI cares about (same PMIx variables,
same process group), so mpi4py in it joins the one MPI world. In both modes the supervisor
also makes sure a rank never outlives the kernel: if the kernel dies (killed, restarted)
the rank is killed, where a bare process would run on as an orphan. The supervisor is a
child subreaper (see reaper.py): whatever the rank starts, even a daemon that detaches with
``setsid``, stays below it and is killed when the rank ends or the kernel dies.

Why sockets instead of ``mpiexec --output tag``: under mpiexec the child's stdout and stderr
are Unix socket connections to the kernel, one per rank and stream. The kernel thus reads
each rank's streams separately and exactly, with no tag parsing, nothing merged or reordered
by ``mpiexec``'s forwarding, and nothing lost when ``mpiexec`` tears the job down after a
failure; the same reader code serves pipes of ``--direct`` ranks.
"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import socket
import sys
import threading
import time
from types import ModuleType

_FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2)
USAGE = "usage: python -I rank_exec.py (ENVFILE | --plan-in-env | --direct) -- ARGV..."
#: the variable that carries the plan (socket, each rank's variables) to ranks on other hosts
PLAN_VARIABLE = "DISTCOMP_RANK_PLAN"
_MPI_PREFIXES = ("OMPI_", "PMIX_", "PRTE_")
#: the host name of the rank's emulated node (machine/shim.h)
NODE_NAME = "DISTCOMP_NODE_NAME"


def _connect(path: str, header: str) -> socket.socket:
    """A connection to the kernel: a Unix socket path, or ``tcp:ADDRESS:PORT`` for a rank on
    another host."""
    if path.startswith("tcp:"):
        host, port = path[4:].rsplit(":", 1)
        sock = socket.create_connection((host, int(port)))
    else:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.connect(path)
    sock.sendall(header.encode() + b"\n")
    return sock


def _sibling(name: str) -> ModuleType:
    """``name``.py beside this file: run as a file (-I), this is no package to import from."""
    spec = importlib.util.spec_from_file_location(
        f"distcomp_{name}", os.path.join(os.path.dirname(os.path.abspath(__file__)), f"{name}.py")
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


reaper = _sibling("reaper")


def _start_child(
    argv: list[str], env: dict[str, str], streams: tuple | None, host: str = ""
) -> int:
    """The rank's process; ``host``: the name of its emulated node, its host name where the
    system permits a UTS namespace (node_agent.become; under mpiexec its node's daemon has
    one already)."""
    child = os.fork()
    if child:
        return child
    if host:
        _sibling("node_agent").become(host)
    if streams:
        os.dup2(streams[0].fileno(), 1)
        os.dup2(streams[1].fileno(), 2)
    for sig in _FORWARDED:
        signal.signal(sig, signal.SIG_DFL)
    reaper.die_with_parent()  # the supervisor SIGKILLed (mpiexec does that): the child too
    try:
        os.execvpe(argv[0], argv, env)
    except OSError as exc:
        os.write(2, f"cannot run {argv[0]!r}: {exc.strerror}\n".encode())
    os._exit(127)


def _kill_when(gone, child: int) -> None:
    gone()
    try:
        os.kill(child, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _until_closed(ctl: socket.socket, child: int):
    """The kernel closes the control connection only once the rank is over; if it closes
    while the rank runs, the kernel is gone. ``signal N`` lines on it are passed on to the
    child (how the kernel signals a rank on another host)."""

    def wait() -> None:
        pending = b""
        try:
            while chunk := ctl.recv(64):
                *lines, pending = (pending + chunk).split(b"\n")
                for line in lines:
                    words = line.split()
                    if len(words) == 2 and words[0] == b"signal" and words[1].isdigit():
                        try:
                            os.kill(child, int(words[1]))
                        except ProcessLookupError:
                            pass
        except OSError:
            pass

    return wait


def _until_orphaned(parent: int):
    def wait() -> None:
        while os.getppid() == parent:
            time.sleep(0.5)

    return wait


def _supervise(child: int) -> int:
    """Wait for the child (reaping the orphans we adopt meanwhile), then end what it left."""

    def forward(signum: int, _frame: object) -> None:
        try:
            os.kill(child, signum)
        except ProcessLookupError:  # the child ended and was reaped: its exit code follows
            pass

    for sig in _FORWARDED:
        signal.signal(sig, forward)
    return reaper.wait_for(child)


def _exit_like(code: int) -> int:
    """Die of the child's signal, so that mpiexec (or the kernel) sees the rank's own end."""
    if code < 0:
        try:
            signal.signal(-code, signal.SIG_DFL)
        except (OSError, ValueError):  # SIGKILL, SIGSTOP: cannot be caught, already default
            pass
        os.kill(os.getpid(), -code)
        return 128 - code  # a signal whose default is not to end the process
    return code


def main(args: list[str]) -> int:
    if len(args) < 3 or args[1] != "--":
        print(USAGE, file=sys.stderr)
        return 2
    argv = args[2:]
    reaper.become_subreaper()
    if args[0] == "--direct":
        parent = os.getppid()
        child = _start_child(argv, dict(os.environ), None, os.environ.get(NODE_NAME, ""))
        threading.Thread(
            target=_kill_when, args=(_until_orphaned(parent), child), daemon=True
        ).start()
        return _exit_like(_supervise(child))

    if args[0] == "--plan-in-env":  # on another host: mpiexec forwarded the plan
        plan = json.loads(os.environ.pop(PLAN_VARIABLE))
    else:
        with open(args[0], encoding="utf-8") as handle:
            plan = json.load(handle)
    rank = int(os.environ.get("OMPI_COMM_WORLD_RANK", os.environ.get("PMIX_RANK", "0")))
    env = {**os.environ, **plan.get("base", {}), **plan["ranks"][rank]}
    if plan.get("drop_mpi"):  # a launcher without MPI: Azure ML gives its ranks no MPI variables
        env = {k: v for k, v in env.items() if not k.startswith(_MPI_PREFIXES)}
    if plan.get("cwds"):  # each emulated node in its own copy of the code folder
        os.chdir(plan["cwds"][rank])
    out = _connect(plan["socket"], f"{rank} out")
    err = _connect(plan["socket"], f"{rank} err")
    ctl = _connect(plan["socket"], f"{rank} ctl {os.getpid()}")
    child = _start_child(argv, env, (out, err))
    out.close()
    err.close()
    threading.Thread(
        target=_kill_when, args=(_until_closed(ctl, child), child), daemon=True
    ).start()
    code = _supervise(child)
    try:
        ctl.sendall(f"exit {code}\n".encode())
        ctl.close()
    except OSError:
        pass
    return _exit_like(code)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
