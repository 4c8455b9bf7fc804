"""The ranks of every component in this kernel: start, reuse, run, watch, stop.

One :class:`RankBackend` per kernel process (:func:`get_backend`). The magics, the
run-settings widget, the JupyterLab ranks panel (through a comm) and ``%distcomp command``
all go through it, so they agree on which ranks exist and what state each is in. How a
start's progress is shown is the caller's (``progress``); a world's debugger attaches
through its start-up hook. Cells and the debugger are imported when a world first needs
them: ``%load_ext`` imports this module for the JupyterLab panel's channel.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from ...contracts import RankState
from ...core.layout import layout_text, start_environment
from ...core.ranges import format_ranks, parse_ranks
from ...core.summary import pending_text
from ...errors import RankError
from ...machine.gpus import kernel_gpus, rank_device, shortage_notice
from ...machine.hosts import Placement
from . import gpu
from .background import BackgroundCell, BackgroundJobs
from .connection import Connection
from .ledgers import busy_message
from .options import CellOptions
from .replay import Replayed, ReplayLog
from .world import NOTEBOOK_DIR, World

if TYPE_CHECKING:
    from ...core.model import Component
    from ...core.run_settings import ResourceLayout
    from .replay import Plan
    from .run import CellRun

Listener = Callable[[dict], None]
PRESTART_DELAY = 1.0  # seconds a pre-start waits for a layout change before launching


class Progress(Protocol):
    """How a start that the caller waits for is shown: what a restart's stop waits for,
    ranks ready so far, then the end."""

    def phase(self, text: str) -> None: ...

    def update(self, ready: int) -> None: ...

    def done(self, summary: str) -> None: ...


class _Quiet:
    def phase(self, text: str) -> None:
        pass

    def update(self, ready: int) -> None:
        pass

    def done(self, summary: str) -> None:
        pass


class RankBackend:
    def __init__(self) -> None:
        self.worlds: dict[str, World] = {}
        self.master_addr = "127.0.0.1"
        #: DistComp.node_local_files: each emulated node's ranks in a copy of the folder
        self.node_local_files = True
        self.default_connection = Connection()
        self.connections: dict[str, Connection] = {}
        self.placement = Placement()  # DistComp.hosts: where the nodes of every layout run
        self.placements: dict[str, Placement] = {}  # per component (restart --hosts)
        self._signatures: dict[str, tuple] = {}
        self._components: dict[str, Component] = {}
        self._listeners: list[Listener] = []
        self._lock = threading.RLock()
        self._stopping: list[threading.Thread] = []
        # name -> (component, its layout, our observer): one observer per name at a time
        self._watched: dict[str, tuple[Component, ResourceLayout, Callable[[Any], None]]] = {}
        self.background = BackgroundJobs()  # of every component, not yet waited for
        self.replays = ReplayLog()  # the cells `restart --replay` runs again
        #: ``progress(name, world size)``: shows a start the caller waits for
        self.progress: Callable[[str, int], Progress] = lambda name, total: _Quiet()

    # -- listeners (the JupyterLab panel) -----------------------------------------------
    def add_listener(self, callback: Listener) -> None:
        """``callback(event)`` on every state change of any rank. It may be called from a
        background thread; the event is a JSON-able dict (see :meth:`event`)."""
        if callback not in self._listeners:
            self._listeners.append(callback)

    def remove_listener(self, callback: Listener) -> None:
        if callback in self._listeners:
            self._listeners.remove(callback)

    def event(self, world: World, stopped: bool = False) -> dict:
        """The world as the ranks panel sees it: contracts.json's ``World``."""
        component = self._components.get(world.name)
        pending = None if stopped or component is None else self.pending(world.name, component)
        facts = {} if stopped else gpu.read(world)
        return {
            "name": world.name,
            "instance_count": world.instance_count,
            "process_count_per_node": world.process_count_per_node,
            "stopped": stopped,
            "pending": pending,
            "background": world.background,
            "hang": world.hang
            if any(info.state == RankState.BUSY for info in world.ranks)
            else None,
            "ranks": [
                {
                    "rank": info.rank,
                    "node": info.node,
                    "local_rank": info.local_rank,
                    "state": info.state,
                    "pid": info.pid,
                    **({"gpu": gpu.short_text(facts[info.rank])} if info.rank in facts else {}),
                }
                for info in world.ranks
            ],
        }

    def _notify(self, world: World) -> None:
        if not self._listeners or self.worlds.get(world.name) is not world:
            return  # nobody listens (no event to build), or a replaced world's last words
        event = self.event(world)
        for callback in list(self._listeners):
            try:
                callback(event)
            except Exception as exc:  # a broken listener must not break the ranks
                print(f"distcomp: a rank-state listener failed: {exc!r}", file=sys.stderr)

    # -- starting -----------------------------------------------------------------------
    def connect(self, name: str, connection: Connection | None) -> None:
        """Use the user's own cluster for ``name`` (None: back to the local one)."""
        if connection is None or connection.embedded:
            self.connections.pop(name, None)
        else:
            self.connections[name] = connection

    def _signature(self, name: str, component: Component) -> tuple:
        """What a world's ranks are started with; the connection stays last."""
        return (
            *component.layout_args,
            self.master_addr,
            self.node_local_files,
            self.placement_of(name),
            tuple(sorted(component.environment_variables.items())),
            self.connections.get(name, self.default_connection),
        )

    def placement_of(self, name: str) -> Placement:
        """Where the nodes of ``name`` run: its own hosts, else the notebook's."""
        return self.placements.get(name, self.placement)

    def place(self, name: str, placement: Placement | None) -> None:
        """Run ``name``'s nodes on ``placement``'s hosts (None: follow DistComp.hosts)."""
        if placement is None:
            self.placements.pop(name, None)
        else:
            self.placements[name] = placement

    def prestart(self, name: str, component: Component, delay: float = PRESTART_DELAY) -> World:
        """Start the ranks of a just-defined component in the background.

        The short delay lets a layout set right after the definition (the next cell) replace
        the start before any process runs, instead of starting the default layout twice. One
        prestarted world waits at a time: those of earlier definitions that never ran a cell
        are stopped, with a notice.
        """
        self._retire_prestarted(keep=name)
        return self.start(name, component, wait=False, delay=delay)

    def _retire_prestarted(self, keep: str) -> None:
        """Stop (in the background) the worlds, other than ``keep``'s, that were started
        ahead for their definition and never ran anything."""
        with self._lock:
            idle = [
                name
                for name, world in self.worlds.items()
                if name != keep
                and not world.used
                and self.background.running(name) is None
                and self._signatures[name][-1].embedded  # a cluster of the user's own stays
            ]
            leaving = [self._leave(name) for name in idle]
        for world in leaving:
            if world is not None:
                self._stop_in_background(world)
                self._notify_stopped(world)
        if idle:
            names = ", ".join(idle)
            print(
                f"distcomp: stopped the idle ranks of {names}, started ahead at the definition "
                f"and never used: only the latest definition keeps ranks ready. A "
                f"`%%distcomp run` of {names} starts them again.",
                file=sys.stderr,
            )

    def start(
        self,
        name: str,
        component: Component,
        wait: bool = True,
        delay: float = 0.0,
        progress: Progress | None = None,
    ) -> World:
        """Start (or reuse, or restart when the layout changed) the ranks of ``name``;
        ``progress``: where a start waited for is shown (default: a new one)."""
        with self._lock:
            signature = self._signature(name, component)
            self._components[name] = component
            world = self.worlds.get(name)
            reason = ""
            if world is not None:
                healthy = world.error is None and not world.dead_ranks
                if self._signatures.get(name) == signature and healthy:
                    self._follow_layout(name, component)
                    if wait:
                        self._wait(world, progress)
                    return world
                old = self._signatures.get(name)
                if healthy and (world.used or _environment_changed(old, signature)):
                    reason = _restart_reason(name, world, old, signature)
                self._stop_in_background(world)
            world = self._new_world(name, component, signature)
            world.start_async(delay=delay)
            self._follow_layout(name, component)
        self._notify(world)  # the views show "starting 0 of N" at once, not "no ranks"
        if reason:
            print(reason)  # news of the settings the user changed, not an error
        if wait:
            self._wait(world, progress)
        return world

    def _stop_in_background(self, world: World) -> None:
        """Replace a world without making the cell wait for the old one's processes."""
        thread = threading.Thread(target=world.stop, name=f"distcomp-stop-{world.name}")
        thread.start()
        self._stopping = [t for t in self._stopping if t.is_alive()] + [thread]

    def _follow_layout(self, name: str, component: Component) -> None:
        """Ranks that ran nothing yet follow layout changes at once (in the background), so
        a layout set right after the definition does not make the first run wait."""
        layout = component.runsettings.resource_layout
        watched = self._watched.get(name)
        if watched is not None and watched[0] is component and watched[1] is layout:
            return
        self._unfollow_layout(name)

        def changed(change: Any) -> None:
            world = self.worlds.get(name)
            if world is None or self._components.get(name) is not component:
                return
            if world.used:
                self._notify(world)  # the views say what the next run changes
            elif self._signatures.get(name) != self._signature(name, component):
                self.start(name, component, wait=False)

        layout.observe(changed)
        self._watched[name] = (component, layout, changed)

    def _unfollow_layout(self, name: str) -> None:
        watched = self._watched.pop(name, None)
        if watched is not None:
            _, layout, changed = watched
            layout.unobserve(changed)

    def _new_world(self, name: str, component: Component, signature: tuple) -> World:
        from ..debug.cells import attach

        layout = component.runsettings.resource_layout
        placement = self.placement_of(name).for_layout(layout.instance_count)
        if placement.local and signature[-1].embedded:
            _warn_if_oversubscribed(layout.world_size)
            short = shortage_notice(
                component.launcher_type, layout.instance_count, layout.process_count_per_node
            )
            if short:
                print(short, file=sys.stderr)
        node_files = self.node_local_files and layout.instance_count > 1
        if node_files and placement.local and signature[-1].embedded:
            node_files = _node_local_files(name)
        # the ports are chosen here, once per world; every view shows these values
        envs = placement.rank_environments(component, self.master_addr)
        world = World(
            name,
            envs,
            start_env=start_environment(envs, list(component.environment_variables)),
            launcher=component.launcher_type or "mpi",
            instance_count=layout.instance_count,
            process_count_per_node=layout.process_count_per_node,
            connection=signature[-1],
            placement=placement,
            on_change=self._notify,
            on_ready=(attach,),
            node_disks=node_files,
        )
        self.worlds[name] = world
        self._signatures[name] = signature
        return world

    def pending(self, name: str, component: Component) -> str | None:
        """What the next run changes, while the running ranks of ``name`` no longer match its
        settings ("running mpi, 2 node(s) x 2 process(es); next run restarts as ..."); None
        while they match or none run."""
        world = self.worlds.get(name)
        if world is None or world.error is not None:
            return None
        signature = self._signature(name, component)
        if self._signatures.get(name) == signature:
            return None
        running = (
            f"{world.launcher}, {layout_text(world.instance_count, world.process_count_per_node)}"
        )
        return pending_text(running, _describe(signature))

    def current_envs(self, name: str, component: Component) -> list[dict[str, str]] | None:
        """The variables the ranks of ``name`` hold, while they match the current settings."""
        world = self.worlds.get(name)
        if world is None or world.error is not None:
            return None
        if self._signatures.get(name) != self._signature(name, component):
            return None
        return [dict(env) for env in world.envs]

    def _wait(self, world: World, progress: Progress | None = None) -> None:
        if world.started and progress is None:
            world.raise_start_error()
            return
        progress = progress or self.progress(world.name, world.world_size)
        while not world.wait_started(0.1):
            progress.update(world.ready_count)
        world.raise_start_error()
        progress.done(f"{world.world_size} rank(s) of {world.describe_layout()}")

    # -- running ------------------------------------------------------------------------
    def run_cell(
        self,
        name: str,
        component: Component,
        code: str,
        options: CellOptions | None = None,
        shell: Any = None,
    ) -> BackgroundCell | None:
        """Run ``code`` on the ranks of ``name`` as ``options`` say (:class:`CellOptions`:
        all ranks, or ``ranks`` such as ``"0,2-3"``; with ``background``, return a started
        :class:`BackgroundCell` at once); ``shell``: the IPython shell whose cell this is
        (its rich output and cell numbers)."""
        from .run import CellRun, cell_name

        options = options or CellOptions()
        ranks, background = options.ranks, options.background
        # a bad rank list, or a second background job, is refused before any rank starts
        parse_ranks(ranks, component.runsettings.resource_layout.world_size)
        if background:
            self.background.refuse_beside(name, "background cell")
        world = self.worlds.get(name)
        same = self._signatures.get(name) == self._signature(name, component)
        # world.dead_ranks is kept current by the world's watcher thread
        if world is not None and world.started and world.dead_ranks and same:
            raise RankError(self._dead_message(world))
        world = self.start(name, component, wait=True)
        targets = parse_ranks(ranks, world.world_size)
        busy = [r for r in targets if world.ranks[r].state == RankState.BUSY]
        if busy:
            earlier = self.background.running(name)
            background_cell = earlier is not None and earlier.kind == "cell"
            raise RankError(busy_message(world, busy, background_cell))
        debug_ranks = options.debug_ranks
        try:
            stopping = (
                None
                if debug_ranks is None
                else []
                if debug_ranks == ""  # a replay: no rank stops
                else parse_ranks(debug_ranks, world.world_size)
            )
        except RankError as exc:
            raise RankError(str(exc).replace("--ranks", "--debug-ranks", 1)) from None
        cell = CellRun(world, targets, code, options, shell=shell, stopping=stopping)
        replayed = Replayed(
            cell_name(shell, code), code, options.replayed(targets), world.world_size
        )
        if not background:
            cell.run()
            if options.record:  # it succeeded: `restart --replay` runs it
                self.replays.record(name, replayed)
            return None
        return self._in_background(world, targets, cell, replayed if options.record else None)

    def replay_plan(
        self, name: str, component: Component, skip: str | None = None, only: str | None = None
    ) -> Plan:
        """What `restart NAME --replay` runs on the layout ``component`` has now."""
        from .replay import plan

        size = component.runsettings.resource_layout.world_size
        return plan(name, self.replays.cells(name), size, skip, only)

    def replay(
        self,
        name: str,
        component: Component | None,
        chosen: Plan,
        announce: Callable[[str], None],
    ) -> World:
        """Restart ``name`` and run the cells of ``chosen`` in order, each on its ranks, with
        no stop at breakpoints; ``announce(text)`` names each before it runs. The log then
        holds the cells chosen; the first that fails raises its error (the rest do not
        run)."""
        world = self.restart(name, component, keep_log=True)
        component = self._components[name]
        announce(f"Restarted {name}: {world.describe_layout()}.")
        if not chosen.all_cells:
            announce(f"{name}: no `%%distcomp run` cell succeeded, so none was replayed.")
        self.replays.replace(name, [cell for _, cell, _ in chosen.runs])
        for count, (number, cell, ranks) in enumerate(chosen.runs, 1):
            announce(f"replaying {count} of {len(chosen.runs)} (cell {number}): {cell.headline()}")
            options = CellOptions(**{**cell.options, "ranks": ranks}, debug_ranks="", record=False)
            self.run_cell(name, component, cell.code, options)
        return world

    def _in_background(
        self, world: World, targets: list[int], run: CellRun, replayed: Replayed | None
    ) -> BackgroundCell:
        def ended() -> None:
            try:
                run.run()
                if replayed is not None:  # replayed in the foreground
                    self.replays.record(world.name, replayed)
            finally:
                world.background = False
                self._notify(world)

        world.background = True
        world.set_state(targets, RankState.BUSY)  # from now on, not from when the thread runs
        cell = self.background.add(world.name, BackgroundCell(world.name, targets, ended))
        held = run.debug.hold_in_background(lambda: run.running)
        if held is not None:  # its stops are served by `%distcomp wait`
            cell.serve, cell.stopped, cell.asking = held.serve_waiting, held.stopped, held.asking
        return cell.start()

    def post_mortem(self, name: str, rank: int | None, shell: Any = None) -> None:
        """Post-mortem pdb on a rank whose last ``%%distcomp run`` cell failed: the prompt
        and commands are those of a breakpoint."""
        from ..debug.cells import POST_MORTEM, post_mortem_rank
        from .run import CellRun

        world = self.worlds.get(name)
        if world is None or not world.started or world.client is None:
            raise RankError(
                f"{name!r} has no running ranks to debug. Fix: run the failing "
                f"`%%distcomp run {name}` cell first."
            )
        run = CellRun(world, [post_mortem_rank(world, rank)], POST_MORTEM, shell=shell)
        run.debug.record = False
        run.run()

    def _dead_message(self, world: World) -> str:
        from .failures import death_reason

        said = world.mpiexec_output()
        for info in world.ranks:
            info.death = info.death or death_reason(info.rank, said) or None
        why = "; ".join(f"{format_ranks([i.rank])} {i.death}" for i in world.ranks if i.death)
        return (
            f"{format_ranks(world.dead_ranks)} of {world.name!r} are dead "
            f"({why or 'killed from outside, or mpiexec stopped'})."
            + (f"\nmpiexec printed:\n{said}" if said else "")
            + f"\nFix: `%distcomp restart {world.name}` starts a fresh world."
        )

    # -- lifecycle ----------------------------------------------------------------------
    def status(self, name: str | None = None) -> list[dict]:
        """One record per rank: name, rank, node, local_rank, state, pid, host, death, gpu
        (its devices and memory, "" for none: gpu.py)."""
        names = [name] if name is not None else list(self.worlds)
        records = []
        gpus = kernel_gpus()
        for world_name in names:
            world = self.worlds.get(world_name)
            if world is None:
                continue
            world.check_alive()
            facts = gpu.read(world)
            for info in world.ranks:
                records.append(
                    {
                        "name": world_name,
                        "rank": info.rank,
                        "node": info.node,
                        "local_rank": info.local_rank,
                        "state": info.state,
                        "pid": info.pid,
                        "host": info.host,
                        "death": info.death,
                        "gpu": gpu.short_text(facts[info.rank]) if info.rank in facts else "",
                        "device": rank_device(world.envs[info.rank], gpus),
                    }
                )
        return records

    def world(self, name: str) -> World | None:
        return self.worlds.get(name)

    def stop(self, name: str | None = None, say: Callable[[str], None] | None = None) -> list[str]:
        """Stop the ranks of ``name`` (of every component when None); the stopped names.
        ``say(text)``: told what each phase of the stop waits for (World.stop).

        The worlds leave the backend at once; stopping their processes (which waits for a
        world still starting) happens outside the backend's lock.
        """
        with self._lock:
            names = [name] if name is not None else list(self.worlds)
            leaving = [w for w in (self._leave(n) for n in names) if w is not None]
        for world in leaving:
            world.stop(say=say)
            self._notify_stopped(world)
        return [world.name for world in leaving]

    def _leave(self, name: str) -> World | None:
        """Take the world of ``name`` out of the backend (under the lock)."""
        world = self.worlds.pop(name, None)
        self._signatures.pop(name, None)
        self._unfollow_layout(name)
        return world

    def _notify_stopped(self, world: World) -> None:
        event = self.event(world, stopped=True)
        for callback in list(self._listeners):
            try:
                callback(event)
            except Exception:
                pass

    def restart(
        self, name: str, component: Component | None = None, keep_log: bool = False
    ) -> World:
        """Fresh ranks for ``name``; its replay log starts anew unless ``keep_log``."""
        component = component or self._components.get(name)
        if component is None:
            raise RankError(f"No ranks to restart for {name!r}: run a `%%distcomp run` cell first.")
        # one line says what the stop waits for, then how many ranks are ready
        progress = self.progress(name, component.runsettings.resource_layout.world_size)
        self.stop(name, say=lambda text: progress.phase(f"restarting: {text}"))
        if not keep_log:
            self.replays.clear(name)
        return self.start(name, component, wait=True, progress=progress)

    def interrupt_and_wait(self, name: str, grace: float = 2.0) -> tuple[list[int], list[int]]:
        """SIGINT to the busy ranks of ``name``, then up to ``grace`` s for them to stop: the
        ranks signalled, and those still busy."""
        import time

        sent = self.interrupt(name)
        world = self.worlds.get(name)
        deadline = time.monotonic() + grace
        still = list(sent)
        while world is not None and still and time.monotonic() < deadline:
            time.sleep(0.05)
            states = world.states()
            still = [r for r in sent if states[r] in (RankState.BUSY, RankState.DEBUGGING)]
        return sent, still

    def interrupt(self, name: str) -> list[int]:
        """SIGINT to every busy rank of ``name`` (at a breakpoint too); the ranks signalled."""
        import signal

        world = self.worlds.get(name)
        if world is None:
            return []
        working = (RankState.BUSY, RankState.DEBUGGING)
        busy = [info.rank for info in world.ranks if info.state in working]
        world.signal(busy, signal.SIGINT)
        return busy

    def running_world(self, name: str) -> World:
        """The started world of ``name``; a RankError saying how to start it otherwise."""
        world = self.worlds.get(name)
        if world is None or not world.started or world.client is None:
            raise RankError(
                f"{name!r} has no running ranks. Fix: run a `%%distcomp run {name}` cell first."
            )
        return world

    def wait(self, name: str, timeout: float | None = None) -> BackgroundCell:
        """Block until the background jobs of ``name`` end; raise their errors."""
        return self.background.wait(name, timeout)

    def shutdown(self) -> None:
        self.stop()
        for thread in self._stopping:
            thread.join(timeout=30)
        self._stopping = []


def _describe(signature: tuple) -> str:
    launcher, nodes, ppn = signature[:3]
    return f"{launcher}, {layout_text(nodes, ppn)}"


def _environment_changed(old: tuple | None, new: tuple) -> bool:
    """Only the spec's environment variables differ between two signatures."""
    return old is not None and old[:-2] == new[:-2] and old[-2] != new[-2]


def _restart_reason(name: str, world: World, old: tuple | None, new: tuple) -> str:
    """What a restart says: the spec's variables that changed, or the layout."""
    if old is not None and _environment_changed(old, new):
        before, after = dict(old[-2]), dict(new[-2])
        changed = [k for k in sorted(before.keys() | after.keys()) if before.get(k) != after.get(k)]
        return (
            f"The environment variables of {name} changed ({', '.join(changed)}): restarting "
            "its ranks, so that the new values are set before any code runs there (variables "
            "on the ranks are lost)."
        )
    return (
        f"The layout of {name} changed ({world.describe_layout()} -> {_describe(new)}): "
        "restarting its ranks."
    )


_backend: RankBackend | None = None
_backend_lock = threading.Lock()


def get_backend() -> RankBackend:
    """The one backend of this kernel process."""
    global _backend
    with _backend_lock:
        if _backend is None:
            _backend = RankBackend()
        return _backend


def existing_backend() -> RankBackend | None:
    """The backend of this kernel process if ranks were ever asked for, else None."""
    return _backend


_oversubscription_said: list[int] = []


def _warn_if_oversubscribed(world_size: int) -> None:
    """Once per kernel: more local ranks than this machine has cores, with the figures."""
    import os

    cores = os.cpu_count() or 1
    if world_size <= cores or _oversubscription_said:
        return
    _oversubscription_said.append(world_size)
    print(
        f"distcomp: {world_size} ranks on {cores} CPU cores: the ranks take turns on the "
        f"cores, so everything runs about {world_size / cores:.0f}x slower than with a core "
        "each (fine for checking code, not for timing it). Fix: a smaller layout, or "
        "DistComp.hosts to spread the nodes over machines. (Said once per kernel.)",
        file=sys.stderr,
    )


_node_files_said: list[bool] = []


def _node_local_files(name: str) -> bool:
    """Whether the ranks of ``name`` on several emulated nodes run in copies of the notebook's
    folder: said once per kernel, with how to reach the folder itself; not where the folder
    is over Azure ML's limit on a code snapshot (said each time, with the fix)."""
    from pathlib import Path

    from ...machine.node_disks import SNAPSHOT_MAX_BYTES, SNAPSHOT_MAX_FILES, over_limit

    excess = over_limit(Path.cwd())
    if excess:
        print(
            f"distcomp: the notebook's folder holds {excess}, over Azure ML's limit on a code "
            f"snapshot ({SNAPSHOT_MAX_BYTES // 2**20} MB, {SNAPSHOT_MAX_FILES} files): the "
            f"ranks of {name} share it, as with DistComp.node_local_files = False, where each "
            "node would run in its own copy. Fix: list what the ranks need not see (data, "
            ".git/) in the folder's .amlignore, then `%distcomp restart "
            f"{name}`.",
            file=sys.stderr,
        )
        return False
    if _node_files_said:
        return True
    _node_files_said.append(True)
    print(
        "distcomp: each emulated node runs its ranks in its own copy of the notebook's folder, "
        "with its own TMPDIR, as Azure ML's nodes have their own disks: what one node writes "
        "there the others do not see, and nothing lands in the notebook's folder, which is "
        f"os.environ[{NOTEBOOK_DIR!r}] on every rank. To run every node in the notebook's "
        "folder: %config DistComp.node_local_files = False. (Said once per kernel.)",
        file=sys.stderr,
    )
    return True
