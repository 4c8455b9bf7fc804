"""ipyparallel, behind one adapter: the cluster, the client, each rank's reply, the processes.

No other module of the kernel imports ipyparallel or calls into its objects: they get
clusters, clients, replies and the errors replies raise from here (on the rank side, only
``rank_side/engine_start.py``, which starts each engine, and ``rank_side/job_engine.py``,
which starts one in a rank of an Azure ML job, import it). :data:`RELIES_ON`
names everything used, and a test checks it against the installed ipyparallel. ipyparallel
is imported on first use only.

ipyparallel's cluster methods are coroutines; they all run on one event loop, in one daemon
thread (``distcomp-ipyparallel``) started on first use and shared by every world of the kernel.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import sys
import threading
import weakref
from collections.abc import Callable, Coroutine, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from ...machine import mpi, shim
from ...machine.hosts import Placement
from ...machine.network import LOOPBACK
from ...rank_side import reaper
from ...rank_side.guard import GRACE
from ...rank_side.rank_setup import CELL_LABEL, LEAN_REQUEST
from ..debug import dap
from . import rank_widgets

if TYPE_CHECKING:
    import logging

    from ipyparallel import Client
    from traitlets.config import Config

T = TypeVar("T")

#: What this module uses of ipyparallel, as dotted names (a test checks each exists).
RELIES_ON = (
    "ipyparallel.Client",
    "ipyparallel.client.client.unpack_message",  # drops what it cannot read, via client.log
    "ipyparallel.serialize.canning.can",
    "ipyparallel.serialize.canning.uncan",
    "ipyparallel.serialize.canning.can_map",
    "ipyparallel.serialize.canning.uncan_map",
    "ipyparallel.Client.__getitem__",
    "ipyparallel.Client.ids",
    "ipyparallel.Client.send_signal",
    "ipyparallel.Client.close",
    "ipyparallel.Cluster",
    "ipyparallel.Cluster.start_cluster",
    "ipyparallel.Cluster.start_engines",
    "ipyparallel.Cluster.start_controller",
    "ipyparallel.Cluster.connect_client",
    "ipyparallel.Cluster.stop_cluster",
    "ipyparallel.Cluster.engine_set",
    "ipyparallel.Cluster.engines",
    "ipyparallel.Cluster.controller",
    "ipyparallel.Cluster.shutdown_atexit",
    "ipyparallel.Cluster.send_engines_connection_env",
    "ipyparallel.Cluster.cluster_id",
    "ipyparallel.error.EngineError",  # reply_errors()
    "ipyparallel.error.RemoteError",
    "ipyparallel.DirectView.execute",
    "ipyparallel.DirectView.apply_async",
    "ipyparallel.client.asyncresult.AsyncResult.ready",
    "ipyparallel.client.asyncresult.AsyncResult.get",
    "ipyparallel.client.asyncresult.AsyncResult.wait_for_output",
    "ipyparallel.client.asyncresult.AsyncResult.add_done_callback",
    "ipyparallel.client.asyncresult.AsyncResult.stream_output",  # how iopub_callbacks are used
    "ipyparallel.Client._dispatch_iopub",  # calls each MessageFuture's iopub_callbacks
    "ipyparallel.Client._io_loop",  # the thread that makes and sends a cell's requests
    "ipyparallel.Client._build_targets",
    "ipyparallel.Client.send_execute_request",  # with message_future_hook
    "ipyparallel.Client.direct_view",
    "ipyparallel.client.view.View._socket",
    "ipyparallel.client.futures.MessageFuture",  # and its msg_id (set in __init__)
    "ipyparallel.cluster.launcher.ipcontroller_cmd_argv",
    "ipyparallel.cluster.launcher.LocalProcessLauncher.process",
    "ipyparallel.cluster.launcher.LocalProcessLauncher.output_file",
    "ipyparallel.cluster.launcher.LocalProcessLauncher.get_output",
    "ipyparallel.cluster.launcher.LocalProcessLauncher.stop_seconds_until_kill",
    "ipyparallel.cluster.launcher.LocalControllerLauncher.controller_cmd",
    "ipyparallel.cluster.launcher.LocalControllerLauncher.controller_args",
    "ipyparallel.cluster.launcher.MPILauncher.mpi_cmd",
    "ipyparallel.cluster.launcher.MPILauncher.mpi_args",
    "ipyparallel.cluster.launcher.MPIEngineSetLauncher.environment",
    "ipyparallel.cluster.launcher.MPIEngineSetLauncher.engine_args",
    "ipyparallel.cluster.launcher.MPIEngineSetLauncher.engine_cmd",
    "ipyparallel.cluster.launcher.BaseLauncher.connection_files",
    "ipyparallel.engine.app.IPEngine.max_heartbeat_misses",
    "ipyparallel.engine.app.IPEngine.enable_nanny",
    "ipyparallel.controller.app.IPController.enable_curve",
    "ipyparallel.controller.heartmonitor.HeartMonitor.period",
    "ipyparallel.controller.heartmonitor.HeartMonitor.max_heartmonitor_misses",
)
#: The names of RELIES_ON that must stay coroutine functions (they run on our event loop).
COROUTINES = (
    "ipyparallel.Cluster.start_cluster",
    "ipyparallel.Cluster.start_engines",
    "ipyparallel.Cluster.start_controller",
    "ipyparallel.Cluster.connect_client",
    "ipyparallel.Cluster.stop_cluster",
)

#: The hub pings engines every HEARTBEAT_MS. ipyparallel's default (3000 ms) is most of a
#: ~10 s start: registration only completes on a heartbeat cycle. 200 ms makes 4 ranks
#: ready in about a third of that time; a shorter beat gains little and, on a loaded
#: machine, an engine's answer that misses the beat delays its registration further. The
#: miss limits keep the same patience in seconds.
HEARTBEAT_MS = 200
HUB_MISSES = 50  # 10 s without an answer before the hub gives an engine up
#: about 100 s without the hub before an engine shuts itself down (an engine checks every
#: HEARTBEAT_MS + 500 ms)
ENGINE_MISSES = 150
#: run through this, the controller and mpiexec die with the kernel
GUARD = [sys.executable, "-m", "jupyter_distcomp.rank_side.guard"]
#: each engine on this machine starts through this, side by side with the controller
ENGINE_START = [sys.executable, "-m", "jupyter_distcomp.rank_side.engine_start"]
#: seconds ipyparallel waits for a guard after SIGTERM before its SIGKILL: longer than the
#: guard's own GRACE, so that the guard, which owns every process below it (also those that
#: lost their parent), is what ends a controller or mpiexec slow to stop. A SIGKILLed guard
#: would leave the controller's schedulers and mpiexec's ranks to PID 1. (Our own stop,
#: LocalCluster.stop, kills the whole tree below a guard, leaves first, before the guard.)
STOP_SECONDS = int(GRACE) + 5
#: seconds mpiexec and the controller have to end on SIGTERM when a world stops (its ranks
#: are gone by then: a few tenths of a second), before SIGKILL to them and all below them
CLUSTER_GRACE = 5.0
#: seconds ipyparallel's own stop may take once the processes are gone (its bookkeeping)
BOOKKEEPING_SECONDS = 5.0
#: CurveZMQ on every socket of the controller: a peer completes a handshake only with the
#: controller's public key, which is in the connection files alone (mode 0600), so bytes from
#: anyone else never reach ipyparallel's message parsing (without it, random bytes sent to
#: its ports lose requests); across hosts it also encrypts cells and output. ipyparallel then
#: drops its HMAC signatures (CurveZMQ authenticates each message). The engines and clients
#: read the key from the connection files. False: bench/bench_curve.py's comparison only.
CURVE = True


# -- the event loop ---------------------------------------------------------------------
_loop: asyncio.AbstractEventLoop | None = None
_loop_lock = threading.Lock()


def event_loop() -> asyncio.AbstractEventLoop:
    """The loop that runs ipyparallel's coroutines (its thread starts on the first call)."""
    global _loop
    with _loop_lock:
        if _loop is None:
            loop = asyncio.new_event_loop()
            ready = threading.Event()

            def main() -> None:
                asyncio.set_event_loop(loop)
                loop.set_exception_handler(_kernel_log_exception)
                loop.call_soon(ready.set)
                with dap.debugpy_out_of_children():  # the controller and mpiexec start here
                    loop.run_forever()

            threading.Thread(target=main, name="distcomp-ipyparallel", daemon=True).start()
            ready.wait()
            _loop = loop
        return _loop


def _kernel_log_exception(_loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
    """A callback of ipyparallel that failed, in the kernel's own log: this thread's stderr
    would otherwise end up in whichever cell runs at the time."""
    kernel_log().error("ipyparallel: %s", context.get("message"), exc_info=context.get("exception"))


def run(coro: Coroutine[Any, Any, T]) -> T:
    """Run ``coro`` on the shared loop and wait for its result."""
    return asyncio.run_coroutine_threadsafe(coro, event_loop()).result()


# -- a cluster of our own ---------------------------------------------------------------
#: what every engine on another host needs of the engine set's environment
FORWARDED = ("IPP_CLUSTER_ID", "IPP_PROFILE_DIR", "IPP_CONNECTION_INFO", "MPLBACKEND")


def engine_environment(
    listen: str = LOOPBACK, files: Mapping[str, str] | None = None, nodes: Sequence[int] = ()
) -> dict[str, str]:
    """Variables mpiexec and the engines need besides the kernel's own; the processes on
    this machine listen on ``listen`` only; ``files``: :func:`mpi.run_files_environment`;
    ``nodes``: the ranks of each emulated node (``shim.node_slots``)."""
    env = mpi.mpiexec_environment()
    env.update(shim.listen_environment(listen))
    env.update(shim.launcher_environment(list(nodes)))
    env.update(files or {})
    if "MPLBACKEND" not in os.environ:
        # figures made on ranks come back as images, as in a notebook
        env["MPLBACKEND"] = "module://matplotlib_inline.backend_inline"
    env["PYTHONUNBUFFERED"] = "1"
    return env


def cluster_config(
    world_size: int,
    placement: Placement | None = None,
    process_count_per_node: int = 1,
    files: Mapping[str, str] | None = None,
    start_env: Mapping[str, str] | None = None,
    nodes: Sequence[int] = (),
) -> Config:
    """traitlets config for ``Cluster(engines="mpi")``: our mpiexec, flags, heartbeat; with
    hosts, the engines run there and the controller listens on the address reaching them.
    ``start_env``: variables every rank has from its start (passed on to other hosts too);
    the engines' own win. ``nodes``: the ranks of each emulated node, one Open MPI daemon
    each (``mpi.emulated_node_args``)."""
    placement = placement or Placement()
    listen = placement.listen()
    config = controller_config(listen)
    config.MPILauncher.mpi_cmd = [*guarded(), mpi.mpiexec_path()]
    start_env = dict(start_env or {})
    forward = [*FORWARDED, *(name for name in start_env if name not in FORWARDED)]
    config.MPILauncher.mpi_args = mpi.mpiexec_flags(
        placement, world_size, process_count_per_node, forward, nodes
    )
    config.MPIEngineSetLauncher.environment = {
        **start_env,
        **engine_environment(listen, files, nodes),
    }
    config.MPIEngineSetLauncher.engine_args = [
        "--log-level=WARN",
        f"--IPEngine.max_heartbeat_misses={ENGINE_MISSES}",
    ]
    if placement.local:
        # an engine's nanny is a second Python process per rank (a third of a rank's
        # start-up): it relays signals, and on this machine we signal a rank by its pid
        config.MPIEngineSetLauncher.engine_args.append("--IPEngine.enable_nanny=False")
    return config


def guarded() -> list[str]:
    """The start of a command line that runs under the guard, which ends it with this
    process (and exits at once if this process is gone by the time it starts)."""
    return [*GUARD, "--parent", str(os.getpid())]


def controller_config(listen: str) -> Config:
    """traitlets config for a controller we start: under the guard, stopped with SIGTERM
    then SIGKILL after STOP_SECONDS, listening on ``listen``, with CurveZMQ where libzmq has
    it."""
    from ipyparallel.cluster.launcher import ipcontroller_cmd_argv
    from traitlets.config import Config

    config = Config()
    config.LocalProcessLauncher.stop_seconds_until_kill = STOP_SECONDS
    config.LocalControllerLauncher.controller_cmd = [*guarded(), *ipcontroller_cmd_argv]
    args = [
        "--log-level=WARN",
        # the hub keeps no record of requests and output (its in-memory store joins each
        # piece of a rank's output to the cell's text so far, and keeps 1,024 cells' worth);
        # nothing here asks the hub for an earlier result
        "--nodb",
        f"--HeartMonitor.period={HEARTBEAT_MS}",
        f"--HeartMonitor.max_heartmonitor_misses={HUB_MISSES}",
        f"--ip={listen}",
    ]
    if CURVE and curve_available():
        args.append("--IPController.enable_curve=True")
    config.LocalControllerLauncher.controller_args = args
    return config


#: what jupyter_client's Session logs when it has no key, as every client of a controller
#: with CurveZMQ has (CurveZMQ authenticates each message in place of the signatures)
_NO_SIGNING = "Message signing is disabled"


class _KeepSigningNoteOut(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return _NO_SIGNING not in record.getMessage()


@contextlib.contextmanager
def _quiet_about_signing() -> Any:
    """While a client connects: the kernel's log leaves out jupyter_client's warning that
    message signing is disabled, which is untrue of a CurveZMQ controller (ipyparallel's
    own advice is to ignore it) and would show in the notebook's log at every world start."""
    from traitlets.log import get_logger

    log = get_logger()
    logger = log.logger if isinstance(log, logging.LoggerAdapter) else log
    keep_out = _KeepSigningNoteOut()
    logger.addFilter(keep_out)
    try:
        yield
    finally:
        logger.removeFilter(keep_out)


def curve_available() -> bool:
    """Whether this libzmq has CurveZMQ (pyzmq's wheels do; a libzmq built without it not)."""
    import zmq

    return bool(zmq.has("curve"))


class LocalCluster:
    """A controller and one mpiexec engine set of ``world_size`` ranks, started by us;
    ``files``: where mpiexec keeps its files (:func:`mpi.run_files_environment`);
    ``start_env``: variables every rank has from its start; ``nodes``: the ranks of each
    emulated node.

    Keeps mpiexec's launcher after the stop: it holds what mpiexec printed.
    """

    def __init__(
        self,
        world_size: int,
        profile_dir: str,
        timeout: float,
        placement: Placement | None = None,
        process_count_per_node: int = 1,
        files: Mapping[str, str] | None = None,
        start_env: Mapping[str, str] | None = None,
        nodes: Sequence[int] = (),
    ):
        import ipyparallel

        self.world_size = world_size
        config = cluster_config(
            world_size, placement, process_count_per_node, files, start_env, nodes
        )
        self._cluster = ipyparallel.Cluster(
            engines="mpi",
            n=world_size,
            profile_dir=profile_dir,
            config=config,
            load_profile=False,
            delay=0,  # engines wait for the controller's connection info anyway
            engine_timeout=int(timeout),
            log=quiet_log(),
            # we stop it (session.shutdown at exit, the guard when the kernel dies);
            # ipyparallel's own stop at exit would SIGKILL slow guards and forget the processes
            shutdown_atexit=False,
        )
        if placement is None or placement.local:
            # mpiexec starts first, the controller beside it; each engine reads the
            # controller's connection file once it is written (engine_start.py)
            self._cluster.send_engines_connection_env = False
            self._cluster.config.MPIEngineSetLauncher.engine_cmd = [
                *ENGINE_START,
                engine_connection_file(profile_dir, self._cluster.cluster_id),
            ]
        self._engine_set: Any = None
        self._stopped = False
        self._stop_lock = threading.Lock()
        #: seconds mpiexec and the controller get on SIGTERM before SIGKILL (ranks on other
        #: hosts are mpiexec's to stop: it gets as long as the guard gives it)
        self.grace = CLUSTER_GRACE if placement is None or placement.local else float(STOP_SECONDS)

    def start(self) -> None:
        cluster = self._cluster
        if cluster.send_engines_connection_env:
            run(cluster.start_cluster(self.world_size))
        else:
            run(self._engines_first())
        self._engine_set = cluster.engine_set

    async def _engines_first(self) -> None:
        """mpiexec first: its ranks take longest to start, and wait for the controller."""
        await self._cluster.start_engines(self.world_size)
        await self._cluster.start_controller()

    def connect(self) -> Client:
        with _quiet_about_signing():
            client = run(self._cluster.connect_client())
        return ready_client(client)

    def stop(self) -> None:
        """Stop the controller and mpiexec, within :attr:`grace` s and a few more whatever
        they do: SIGTERM to both guards at once (each passes it on, and ends as its
        command ends), SIGKILL to every process below them and to them after the grace; then
        ipyparallel's own stop, which finds them gone (its stop waits for each process in
        turn, blocking the loop, up to a minute and more each). Idempotent."""
        with self._stop_lock:
            if self._stopped:
                return
            self._stopped = True
        self._engine_set = self._engine_set or self._cluster.engine_set
        stop_guarded(self._cluster, self.grace)

    def mpiexec_alive(self) -> bool:
        """mpiexec runs (or has not been launched yet); True once stopped."""
        if self._stopped:
            return True
        engine_set = self._cluster.engine_set
        process = getattr(engine_set, "process", None)
        if process is None:
            return engine_set is None
        return _running(process)

    def _launcher(self) -> Any:
        if self._engine_set is None and not self._stopped:
            self._engine_set = self._cluster.engine_set
        return self._engine_set

    def output_file(self) -> str | None:
        return getattr(self._launcher(), "output_file", None) or None

    def mpiexec_text(self, since: int = 0) -> str:
        """Everything mpiexec printed from byte ``since`` on."""
        path = self.output_file()
        if path and os.path.exists(path):
            with open(path, errors="replace") as f:
                f.seek(since)
                return f.read()
        launcher = self._launcher()
        if launcher is None:
            return ""
        # ipyparallel read the file into memory and removed it when mpiexec ended
        text: str = launcher.get_output()
        return text[since:]


class Controller:
    """A controller alone, in ``profile_dir``, on loopback with CurveZMQ, for engines that
    others start (the ranks of an Azure ML job: local/jobcells.py); it ends with the
    kernel (the guard)."""

    def __init__(self, profile_dir: str) -> None:
        import ipyparallel

        self.profile_dir = profile_dir
        self._cluster = ipyparallel.Cluster(
            n=0,
            profile_dir=profile_dir,
            config=controller_config(LOOPBACK),
            load_profile=False,
            log=quiet_log(),
            shutdown_atexit=False,
        )
        self.cluster_id = str(self._cluster.cluster_id)
        self._stopped = False

    def start(self, timeout: float = 60.0) -> dict[str, Any]:
        """Start it; the engines' connection (its ports, its CurveZMQ public key)."""
        import json
        import time

        run(self._cluster.start_controller())
        path = engine_connection_file(self.profile_dir, self.cluster_id)
        deadline = time.monotonic() + timeout
        while True:
            try:
                with open(path) as handle:
                    found: dict[str, Any] = json.load(handle)
                return found
            except (OSError, ValueError):
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    def stop(self) -> None:
        """Stop the controller (SIGTERM, SIGKILL after the grace); idempotent."""
        if self._stopped:
            return
        self._stopped = True
        stop_guarded(self._cluster, CLUSTER_GRACE)


def stop_guarded(cluster: Any, grace: float) -> None:
    """Stop ``cluster``'s processes: SIGTERM to their guards, SIGKILL to all below them and
    to them after ``grace`` s; then ipyparallel's own stop, which finds them gone."""
    guards = guard_pids(cluster)
    if reaper.end_gently(guards, grace):
        reaper.kill_tree(guards, include_roots=True, grace=0)
    try:
        asyncio.run_coroutine_threadsafe(cluster.stop_cluster(), event_loop()).result(
            BOOKKEEPING_SECONDS
        )
    except Exception:  # its loop is busy, or it failed: the processes are gone already
        pass
    # whatever started below the guards meanwhile
    reaper.kill_tree(guards, include_roots=True, timeout=3)


def engine_connection_file(profile_dir: str, cluster_id: str) -> str:
    """Where the controller of ``cluster_id`` writes the engines' connection."""
    return os.path.join(profile_dir, "security", f"ipcontroller-{cluster_id}-engine.json")


# -- clients ----------------------------------------------------------------------------
def connect(timeout: float, **connection: str) -> Client:
    """A client of a running cluster (``profile``, ``profile_dir``, ``cluster_id``)."""
    import ipyparallel

    with _quiet_about_signing():
        client = ipyparallel.Client(**connection, timeout=timeout)
    return ready_client(client)


_canning_lock = threading.Lock()


def ready_canning() -> None:
    """Have ipyparallel import the types of its serialization table now, once. It does so on
    first use, changing the table in place: two worlds serializing at once (two starts,
    a start beside a cell) would otherwise break each other (KeyError 'numpy.ndarray')."""
    from ipyparallel.serialize import canning

    with _canning_lock:
        canning.can(None)
        canning.uncan(None)


def ready_client(client: Client) -> Client:
    """``client``, logging into the kernel's own log, with ipyparallel's serialization
    ready for several threads (:func:`ready_canning`). ipyparallel's client drops a message
    it cannot read (e.g. signed by an engine of another cluster that reconnected to a port
    the system gave again) and logs it through ``client.log``, which it does not set."""
    client.log = kernel_log()
    ready_canning()
    return client


def engine_ids(client: Client) -> list[int]:
    return list(client.ids)


def view(client: Client, ids: list[int]) -> Any:
    return client[ids]


def close(client: Client) -> None:
    """Close the client; never raises."""
    try:
        client.close(linger=0)
    except Exception:
        pass


def send_each(client: Client, calls: Sequence[tuple[int, Callable[..., Any], tuple]]) -> list:
    """Start ``function(*args)`` on each engine of ``calls`` at once; :func:`results` waits
    for them. An engine runs what it is sent in the order sent."""
    return [client[eid].apply_async(function, *args) for eid, function, args in calls]


def results(pending: list, timeout: float) -> list[Any]:
    """The results of :func:`send_each`, in order."""
    return [result.get(timeout=timeout) for result in pending]


def send_signal(client: Client, sig: int, ids: list[int]) -> None:
    client.send_signal(sig, targets=ids, block=False)


class RankReply:
    """One engine's share of an ``execute``: its reply, and whether its output is complete
    (the output itself comes through :meth:`Execution.listen`).

    Read from ipyparallel's future of that engine's request (``MessageFuture``; its
    ``output`` future carries the output as it arrives), not from an AsyncResult per engine:
    a cell makes one of those per rank, with futures and callbacks of its own.
    """

    def __init__(self, future: Any):
        self._future = future

    def on_reply(self, callback: Callable[[], None]) -> None:
        """``callback()`` in ipyparallel's thread when the reply arrives."""
        self._future.add_done_callback(lambda _: callback())

    def replied(self) -> bool:
        return bool(self._future.done())

    @property
    def request_id(self) -> str:
        """The msg_id of the request (the parent of the engine's output messages)."""
        return str(self._future.msg_id)

    def output_complete(self) -> bool:
        return bool(self._future.output.done())

    def outcome(self) -> Any:
        """The reply's value, or the error (a RemoteError, an EngineError) the engine sent."""
        if not self._future.done():
            return None
        return self._future.result()


def reply_errors() -> tuple[type[Exception], Any]:
    """``(EngineError, RemoteError)``: what a reply's ``get()`` raises when its engine died,
    and when the code it ran raised; imported on first use."""
    from ipyparallel.error import EngineError, RemoteError

    return EngineError, RemoteError


HISTORY_KEPT = 1000  # msg_ids in Client.history (ints index it; nothing of ours does)
DIGESTS_KEPT = 4096  # message signatures remembered against replays (jupyter_client: 65536)


#: iopub messages of an execution that carry output
OUTPUT_MESSAGES = frozenset(
    {"stream", "display_data", "update_display_data", "execute_result", "clear_output"}
)


#: iopub messages of a rank's widgets (ipyparallel relays them to the notebook)
COMM_MESSAGES = frozenset({"comm_open", "comm_msg", "comm_close"})


class Execution:
    """``code`` sent to the engines ``ids``: each engine's reply, and its output given to
    ``on_message(index, msg_type, content)`` (``index`` into ``ids``) in ipyparallel's thread,
    in arrival order, as it arrives; then ``status`` ``idle`` once that engine's output is
    complete. ``on_reply(index, reply)`` runs in that thread when the engine's reply
    (:class:`RankReply`) arrives.

    Each request is what ``%%px`` sends (``Client.send_execute_request`` on a direct view's
    socket), without the view and AsyncResult made per call around it, and all of a cell's
    requests are made in ipyparallel's thread in one go: the kernel's thread hands over
    once, not once per engine. The listener is attached to each request's future before it
    is sent, so nothing can arrive unseen. The texts and displays are not accumulated in
    ipyparallel's metadata as well (that joins each new piece to all earlier text of the
    cell: quadratic in a burst). The requests are lean (rank_setup.LEAN_REQUEST): a rank
    publishes no busy status and no echo of the code for them.
    """

    def __init__(
        self,
        client: Client,
        ids: list[int],
        code: str,
        on_message: Callable[[int, str, dict], None],
        on_reply: Callable[[int, RankReply], None],
        cell: str | None = None,
    ):
        socket = _sender(client)._socket
        metadata: dict[str, Any] = {LEAN_REQUEST: True}
        if cell is not None:  # the notebook's number of the cell (rank_setup.CELL_LABEL)
            metadata[CELL_LABEL] = cell
        idents, _ = client._build_targets(ids)
        self.replies: list[RankReply] = []
        self._error: BaseException | None = None
        self._sent = threading.Event()

        def send() -> None:
            try:
                for index, ident in enumerate(idents):
                    future = client.send_execute_request(
                        socket,
                        code,
                        silent=False,
                        metadata=metadata,
                        ident=ident,
                        message_future_hook=functools.partial(_listen, index, on_message),
                    )
                    reply = RankReply(future)
                    reply.on_reply(functools.partial(on_reply, index, reply))
                    self.replies.append(reply)
                # a kernel runs cells for days: keep ipyparallel's per-message records bounded
                del client.history[:-HISTORY_KEPT]
                session = client.session
                session.digest_history_size = min(session.digest_history_size, DIGESTS_KEPT)
            except BaseException as exc:
                self._error = exc
            finally:
                self._sent.set()

        client._io_loop.add_callback(send)

    def wait_sent(self, timeout: float) -> bool:
        """Wait until the requests are sent (False after ``timeout`` seconds: ipyparallel's
        thread does not run); raises what sending them raised."""
        if not self._sent.wait(timeout):
            return False
        if self._error is not None:
            raise self._error
        return True


_senders: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()


def _sender(client: Client) -> Any:
    """One direct view per client, whose socket every execution goes out on."""
    view = _senders.get(client)
    if view is None:
        view = _senders[client] = client.direct_view()
    return view


def _listen(index: int, on_message: Callable[[int, str, dict], None], future: Any) -> None:
    """Before the request is sent: its output to ``on_message`` (see :class:`Execution`)."""
    md = future.output.metadata

    def forward(msg: dict) -> None:
        kind = msg["header"]["msg_type"]
        if kind in COMM_MESSAGES:  # a rank's widget: its state is kept for a page reload
            rank_widgets.seen(kind, msg)
            return
        if kind not in OUTPUT_MESSAGES:
            return
        content = msg["content"]
        on_message(index, kind, content)
        if kind == "stream":
            md[content["name"]] = ""
        elif kind == "display_data":
            md["outputs"] = []

    def complete(_future: Any) -> None:
        # ipyparallel drops the future before it would pass on the idle status that says
        # so, when the reply came first
        on_message(index, "status", {"execution_state": "idle"})

    future.iopub_callbacks.append(forward)
    future.output.add_done_callback(complete)


# -- processes --------------------------------------------------------------------------
def quiet_log() -> logging.Logger:
    """ipyparallel logs every engine line at exit; we report what matters ourselves."""
    import logging

    log = logging.getLogger("jupyter_distcomp.local.ranks.cluster")
    if not log.handlers:
        log.addHandler(logging.NullHandler())
        log.propagate = False
        log.setLevel(logging.CRITICAL)
    return log


def kernel_log() -> logging.Logger:
    """Warnings and errors of ipyparallel's thread, on the kernel process's own stderr (the
    terminal or log of the Jupyter server), never in a cell's output."""
    import logging

    log = logging.getLogger("jupyter_distcomp.local.ranks.ipyparallel")
    if not log.handlers:
        log.addHandler(logging.StreamHandler(sys.__stderr__))
        log.propagate = False
        log.setLevel(logging.WARNING)
    return log


def guard_pids(cluster: Any) -> list[int]:
    """The guards of the controller and of mpiexec (the processes ipyparallel started)."""
    launchers = [cluster.controller, *cluster.engines.values()]
    processes = [getattr(launcher, "process", None) for launcher in launchers]
    return [process.pid for process in processes if process is not None]


def _running(proc: Any) -> bool:
    """A psutil process that runs (not a zombie)."""
    import psutil

    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False
