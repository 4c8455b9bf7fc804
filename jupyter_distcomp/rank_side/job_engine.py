"""The command of each rank of a job submitted with ``--debug --cells``: the rank becomes an
ipyparallel engine of the notebook, so that ``%%distcomp run NAME --job JOB`` runs cells
on it.

The job's own launcher starts this file (``python .distcomp/rank_side/job_engine.py``) in
every rank's process, with exactly the job's environment (RANK, WORLD_SIZE, MASTER_ADDR,
OMPI_* ...); the job's sitecustomize has armed attach there already (job_attach.py: the
rank's beacon in the job's folder on its node, ``breakpoint()`` at the notebook's prompt).
The rank then waits for ``<folder>/engine-node<N>.json``, which the notebook writes on
node N over its SSH connection (mode 0600, through ssh's stdin): the controller's engine
connection, with the ports where the notebook's tunnels end on this node's loopback and its
CurveZMQ key. The rank runs ipyparallel's engine in this process (engine id = its rank)
until the notebook ends it (``%distcomp stop JOB``) or no cell comes for the idle limit
(``DISTCOMP_IDLE_MINUTES``), also when the notebook is gone; then the process exits with
code 0, and the job completes once every rank has. Nothing here listens: the engine
connects to the node's loopback.
Standard library only, Python 3.8 or newer (ipyparallel is imported once the notebook is
there: the job's environment needs it).
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from typing import Any

#: seconds between two looks for the notebook's file
POLL_SECONDS = 0.2
#: seconds between two looks at the engine's idle time
IDLE_CHECK_SECONDS = 1.0


def say(text: str) -> None:
    """A line of ours in the rank's log (the process's own stderr, also under the engine)."""
    stream = sys.__stderr__ or sys.stderr
    try:
        stream.write(f"distcomp: {text}\n")
        stream.flush()
    except (OSError, ValueError, AttributeError):
        pass


def engine_file(folder: str, node: int) -> str:
    return os.path.join(folder, f"engine-node{node}.json")


def wait_for_notebook(path: str, minutes: float) -> dict | None:
    """The notebook's engine connection for this node, once written; None after
    ``minutes``."""
    reader = sys.modules["distcomp_job_watch"]._sibling("job_attach").read_json
    deadline = time.monotonic() + minutes * 60
    while time.monotonic() < deadline:
        found = reader(path)
        if found and isinstance(found.get("connection"), dict):
            return found
        time.sleep(POLL_SECONDS)
    return None


class Idle:
    """When the engine last had a cell (an execute request) and whether one runs now."""

    def __init__(self) -> None:
        self.last = time.monotonic()
        self.running = 0
        self.ended = ""

    def watch_kernel(self) -> None:
        """Count the execute requests of ipyparallel's engine kernel (its ``should_handle``
        sees each request, its ``finish_metadata`` each reply)."""
        from ipyparallel.engine.kernel import IPythonParallelKernel as Kernel

        handle, finish = Kernel.should_handle, Kernel.finish_metadata
        idle = self

        def should_handle(kernel: Any, stream: Any, msg: Any, idents: Any) -> Any:
            handled = handle(kernel, stream, msg, idents)
            if handled and msg["header"].get("msg_type") == "execute_request":
                idle.running += 1
                idle.last = time.monotonic()
            return handled

        def finish_metadata(kernel: Any, parent: Any, metadata: Any, content: Any) -> Any:
            if parent["header"].get("msg_type") == "execute_request" and idle.running:
                idle.running -= 1
                idle.last = time.monotonic()
            return finish(kernel, parent, metadata, content)

        Kernel.should_handle = should_handle
        Kernel.finish_metadata = finish_metadata

    def watch(self, minutes: float) -> None:
        """In a thread: end the engine (:func:`stop_engine`) once no cell came for
        ``minutes`` (counted from now, the engine's start; a cell that runs counts as one)."""
        self.last = time.monotonic()

        def run() -> None:
            while not self.ended:
                time.sleep(IDLE_CHECK_SECONDS)
                if not self.running and time.monotonic() - self.last > minutes * 60:
                    self.ended = (
                        f"no cell from the notebook for {minutes:g} min (DISTCOMP_IDLE_MINUTES)"
                    )
                    stop_engine()

        threading.Thread(target=run, name="distcomp-idle", daemon=True).start()


def stop_engine() -> None:
    """Stop the engine's event loop (from any thread): :func:`run_engine` returns."""
    from ipyparallel.engine.app import IPEngine

    loop = IPEngine.instance().loop
    loop.add_callback(loop.stop)


def end_engine(reason: str, delay: float = 0.2) -> int:
    """Shipped by the notebook (``%distcomp stop JOB``): the engine stops after its reply,
    the process ends with code 0; this process's id."""
    import os
    import sys
    import threading

    module = sys.modules["distcomp_job_engine"]
    module.IDLE.ended = reason
    threading.Timer(delay, module.stop_engine).start()
    return os.getpid()


def run_engine(connection: dict, rank: int) -> None:
    """ipyparallel's engine in this process, connected as ``connection`` says, until it
    stops."""
    import runpy

    # the engine's kernel without ipykernel's debugger (which imports debugpy, and debugpy
    # takes over breakpoint(): attach's breakpoint() serves the cell's stops instead)
    sys.modules["distcomp_job_watch"]._sibling("engine_start").without_kernel_debugger()
    os.environ["IPP_CONNECTION_INFO"] = json.dumps(connection)
    sys.argv = [
        "ipengine",
        f"--IPEngine.id={rank}",
        "--IPEngine.enable_nanny=False",  # signals reach this process itself (over SSH)
        "--IPEngine.max_heartbeat_misses=0",  # the idle limit ends an engine, not a beat
        "--log-level=ERROR",  # its warnings (no signing: CurveZMQ signs) are no news here
    ]
    try:
        runpy.run_module("ipyparallel.engine", run_name="__main__", alter_sys=True)
    except RuntimeError as exc:  # tornado's run_sync, its loop stopped by stop_engine
        if "Event loop stopped" not in str(exc):
            raise


def _finalize_mpi() -> None:
    """MPI finalised before exit where a cell initialised it (mpi4py's atexit would too;
    this process leaves through os._exit: the engine's threads do not hold it)."""
    module = sys.modules.get("mpi4py.MPI")
    if module is None:
        return
    try:
        if module.Is_initialized() and not module.Is_finalized():
            module.Finalize()
    except Exception:
        pass


IDLE = Idle()


def main() -> int:
    sys.modules["distcomp_job_engine"] = sys.modules[__name__]  # end_engine finds IDLE here
    attach = sys.modules.get("distcomp_job_watch")
    state = getattr(attach._sibling("job_attach"), "_STATE", None) if attach else None
    if state is None:
        say(
            "job_engine.py runs only in a job submitted with `--debug --cells` "
            "(DISTCOMP_ATTACH_DIR and the job's sitecustomize); nothing to do"
        )
        return 2
    minutes = float(state.idle)
    say(
        f"rank {state.rank}: waiting for the notebook's cells (`%%distcomp run NAME --job`) "
        f"for {minutes:g} min at most"
    )
    found = wait_for_notebook(engine_file(state.folder, state.node), minutes)
    if found is None:
        say(
            f"rank {state.rank}: no notebook within {minutes:g} min (DISTCOMP_IDLE_MINUTES); "
            "the rank ends"
        )
        return 0
    state.tell(engine=str(found.get("session", "")))
    IDLE.watch_kernel()
    IDLE.watch(minutes)
    say(f"rank {state.rank}: the notebook's engine (idle limit {minutes:g} min)")
    run_engine(found["connection"], state.rank)
    IDLE.ended = IDLE.ended or "the engine stopped"
    say(f"rank {state.rank}: {IDLE.ended}; the rank ends")
    return 0


#: seconds the rank's last lines get to leave through the launcher before the process exits
#: (it leaves with os._exit: the engine's threads would hold a normal exit)
LAST_WORDS = 0.5

if __name__ == "__main__":
    code = main()
    _finalize_mpi()
    time.sleep(LAST_WORDS)
    os._exit(code)
