"""The ranks of a running job, attached: each node reached through its SSH connection, the
job's ranks a world of the notebook's debugger.

:class:`AttachedJob` opens one master connection a node (machine/tunnels.py) and on it a
remote forward that ends on the node's loopback and leads to this kernel's debugger channel
(local/debug/channel.py: on 127.0.0.1, with a key of this attach's own), then writes on
each node the file its ranks wait for (nodes.py). A rank's ``breakpoint()`` then stops at
the group prompt (local/debug/serve.py) as a local rank's does; the stops that come while
the kernel is idle are held and named (local/debug/held.py) for ``%distcomp wait``; while
JupyterLab's debugger is on, the ranks are its threads and it serves their stops
(local/debug/dap_serve.py), as it does a local world's. A kernel interrupt while a cell
serves the job reaches the ranks of its prompt (SIGINT over SSH), said. A thread
watches the nodes: a node whose connection ends is named, its ranks leave the prompt and run
on (the rank side's rule), the others go on. :meth:`detach` leaves the job running; a new
attach gets a new key, and ranks of the old one never use it again.
"""

from __future__ import annotations

import contextlib
import secrets
import shlex
import signal
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from ...contracts import RankState
from ...core.ranges import format_ranks, rank_label
from ...errors import RankError
from ...machine import scratch
from ...machine.tunnels import NodeLink, control_path, ssh_argv
from ...rank_side.dap_side import PAUSE_SIGNAL
from ..debug import dap
from ..debug.channel import DebugChannel
from ..debug.held import HeldStops
from . import nodes as node_side
from .nodes import JobProcess

#: seconds between two looks at the nodes (their connections, the ranks' processes)
WATCH_SECONDS = 2.0
#: seconds attach waits for the ranks to start and those at a breakpoint to reach the prompt
ARRIVE_SECONDS = 10.0
#: seconds the prompt is kept for ranks that left it with a step and may stop again (a
#: collective that takes longer than the prompt waits for, on a busy cluster)
RETURN_SECONDS = 5.0


@dataclass
class Node:
    index: int
    destination: str
    link: NodeLink
    state: str = "connecting"  # attached | unreachable: why | lost: why | detached


class AttachedJob:
    """Job ``name``'s ranks, reached through the SSH endpoints of its nodes (node i at
    ``destinations[i]``); its ranks' files in ``folder`` on each node."""

    def __init__(
        self,
        name: str,
        destinations: list[str],
        folder: str,
        world_size: int,
        ssh_command: str = "ssh",
        idle_minutes: float = 30.0,
        route: str = "direct",
    ) -> None:
        self.name = name
        self.folder = folder
        self.world_size = world_size
        self.idle_minutes = idle_minutes
        self.route = route
        self.session = secrets.token_hex(8)
        self.control = scratch.make_folder("distcomp-ssh-")
        self.nodes = [
            Node(i, dest, NodeLink(dest, ssh_command, self.control, f"n{i}"))
            for i, dest in enumerate(destinations)
        ]
        #: ssh reaching any node over its master connection (``where`` takes stacks so)
        self.ssh_command = shlex.join(
            [*ssh_argv(ssh_command, control_path(self.control)), "-o", "ControlMaster=no"]
        )
        self.debugger = DebugChannel("127.0.0.1")
        self.debugger.on_state = self._on_state
        self.procs: dict[int, JobProcess] = {}
        self.quits: set[int] = set()
        self.notices: list[str] = []  # what the watcher found, for the next prompt or view
        self._debugging: set[int] = set()
        self._interrupted = False  # an interrupt outside the prompt reached them in this cell
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._serving = False  # the main thread serves the prompt now
        self._watcher: threading.Thread | None = None
        self.held = HeldStops(
            self.debugger,
            name,
            self.label,
            self.quits,
            self._interrupt_prompt,
            self.states,
            self._interrupt_late,
            self._before_prompt,
            output_here=False,  # the ranks' output goes to the job's logs: no wait for it
        )
        self.attached_at = 0.0

    # -- attaching ----------------------------------------------------------------------
    def open(self, timeout: float = 30.0) -> None:
        """Connect every node at once, tunnel, tell its ranks; a RankError if none could be
        reached (the nodes that could not are named in :attr:`notices`)."""
        for node in self.nodes:  # from this thread: the masters end when it does
            node.link.start()
        with ThreadPoolExecutor(max_workers=len(self.nodes)) as pool:
            list(pool.map(lambda node: self._open_node(node, timeout), self.nodes))
        attached = [n for n in self.nodes if n.state == "attached"]
        if not attached:
            reasons = "; ".join(f"node {n.index} ({n.destination}): {n.state}" for n in self.nodes)
            self.close()
            raise RankError(
                f"cannot attach to job {self.name!r}: no node could be reached ({reasons}). "
                "Fix: check that the job runs with the SSH service, that this machine reaches "
                "its nodes (the direct route: a compute instance in the workspace's network) "
                "and that AzureML.ssh_command uses the key whose public half the job has."
            )
        self.attached_at = time.monotonic()
        self._watcher = threading.Thread(target=self._watch, name="distcomp-attach", daemon=True)
        self._watcher.start()

    def _open_node(self, node: Node, timeout: float) -> None:
        link = node.link
        if not link.ready(timeout):
            node.state = f"unreachable: {link.error}"
            self._notice(f"node {node.index} ({node.destination}) {node.state}")
            return
        try:
            port = link.forward(self.debugger.port)
        except OSError as exc:
            node.state = f"unreachable: {exc}"
            self._notice(f"node {node.index} ({node.destination}) {node.state}")
            return
        data = node_side.attach_data(self.session, port, self.debugger.key_hex, node.index)
        done = link.run(node_side.attach_script(self.folder, node.index), stdin=data)
        if done is None or not node_side.said(done.stdout, "written"):
            why = "its job folder is missing or not the job's user's" if done else "timed out"
            node.state = f"unreachable: {why} ({self.folder})"
            self._notice(f"node {node.index} ({node.destination}) {node.state}")
            return
        node.state = "attached"
        self._discover(node)

    def _discover(self, node: Node) -> None:
        """Read the node's processes again (who lives, who waits at a breakpoint)."""
        done = node.link.run(node_side.discover_script(self.folder), timeout=20)
        if done is None:
            return
        complete, found = node_side.parse_discovery(done.stdout, node.index)
        if not complete:
            return
        with self._lock:
            for rank, process in found.items():
                self.procs[rank] = process

    # -- the ranks ------------------------------------------------------------------------
    @property
    def instance_count(self) -> int:
        return len(self.nodes)

    def label(self, rank: int) -> str:
        process = self.procs.get(rank)
        node = process.node if process is not None else 0
        return rank_label(rank, node, self.instance_count)

    def node_of(self, rank: int) -> Node | None:
        process = self.procs.get(rank)
        return self.nodes[process.node] if process is not None else None

    def states(self) -> dict[int, RankState]:
        """Each rank's state: at a prompt, running, not yet seen (starting), or ended
        (its process gone, or its node out of reach)."""
        found = {}
        for rank in range(self.world_size):
            process, node = self.procs.get(rank), self.node_of(rank)
            if rank in self._debugging:
                found[rank] = RankState.DEBUGGING
            elif process is None:
                found[rank] = RankState.STARTING
            elif not process.alive or node is None or node.state != "attached":
                found[rank] = RankState.DEAD
            else:
                found[rank] = RankState.BUSY
        return found

    @property
    def started(self) -> bool:
        """Attached: its ranks are threads of JupyterLab's debugger (local/debug/dap.py)."""
        return self.attached_at > 0 and not self._stop.is_set()

    @property
    def dead_ranks(self) -> list[int]:
        """The ranks ended, or out of reach (no thread of JupyterLab's debugger)."""
        return [r for r, s in self.states().items() if s == RankState.DEAD]

    def waiting(self) -> list[int]:
        """The ranks at a breakpoint that wait for a notebook (as their nodes last said)."""
        return sorted(r for r, p in self.procs.items() if p.waiting and p.alive)

    def _on_state(self, rank: int, state: RankState) -> None:
        with self._lock:
            if state == RankState.DEBUGGING:
                self._debugging.add(rank)
            else:
                self._debugging.discard(rank)

    def signal(self, ranks: list[int], sig: int) -> list[int]:
        """Send signal ``sig`` to the ranks' processes; the ranks reached."""
        by_node: dict[int, list[int]] = {}
        for rank in ranks:
            process, node = self.procs.get(rank), self.node_of(rank)
            if process is not None and process.alive and node and node.state == "attached":
                by_node.setdefault(node.index, []).append(rank)
        sent = []
        for index, chosen in by_node.items():
            pids = [self.procs[r].pid for r in chosen]
            done = self.nodes[index].link.run(node_side.signal_script(pids, sig), timeout=20)
            if done is not None and node_side.said(done.stdout, "sent"):
                sent += chosen
        return sorted(sent)

    def interrupt(self, ranks: list[int] | None = None) -> list[int]:
        """SIGINT to ``ranks`` (default: every running rank), as ``%distcomp interrupt``."""
        if ranks is None:
            ranks = [
                r for r, s in self.states().items() if s in (RankState.BUSY, RankState.DEBUGGING)
            ]
        return self.signal(ranks, signal.SIGINT)

    def pause(self) -> list[int]:
        """JupyterLab's Pause: the running ranks that take it stop at their next line of the
        user's code (job_attach's handler); the ranks reached."""
        states = self.states()
        ranks = [r for r, p in self.procs.items() if p.pause and states.get(r) == RankState.BUSY]
        return self.signal(ranks, PAUSE_SIGNAL) if ranks else []

    def _interrupt_late(self, ranks: list[int]) -> None:
        """An evaluation at the prompt past its time limit: SIGINT to its ranks."""
        self.interrupt(ranks)

    def _interrupt_prompt(self) -> None:
        """A kernel interrupt at the prompt: it reaches the ranks at it, as on local ranks."""
        self._interrupt_prompt_ranks(at_prompt=True)

    def _new_cell(self) -> None:
        self._interrupted = False

    def _interrupt_prompt_ranks(self, at_prompt: bool = False) -> list[int]:
        """A kernel interrupt while a cell serves the job: SIGINT to the ranks of its prompt
        (at it, or in a step typed there that runs on; not those that continued), said; the
        ranks reached (none: the interrupt is the cell's alone). Outside the prompt, once a
        cell: a second interrupt leaves the cell."""
        if self._interrupted and not at_prompt:
            return []
        self._interrupted = True
        states = self.states()
        ranks = [
            r
            for r in sorted(self._debugging | self.debugger.stepping)
            if states.get(r) in (RankState.BUSY, RankState.DEBUGGING)
        ]
        sent = self.signal(ranks, signal.SIGINT) if ranks else []
        if sent:
            print(
                f"{self.name}: interrupted: SIGINT sent to {format_ranks(sent)}, the ranks of "
                "this prompt (a KeyboardInterrupt in their code); the job runs on, still "
                "attached.",
                flush=True,
            )
        return sent

    # -- the prompt -----------------------------------------------------------------------
    def serve_arrivals(self, seconds: float = ARRIVE_SECONDS) -> float:
        """At attach: ranks still starting are looked for, those waiting at a breakpoint
        come to the prompt (within ``seconds``) and are served here, as long as they come
        back to it (a step that outlasts the prompt's wait); seconds at the prompt."""
        deadline = time.monotonic() + seconds
        looked = 0.0
        self._serving = True  # no stop is announced as held meanwhile
        self._new_cell()
        try:
            while time.monotonic() < deadline:
                seen = len(self.procs) >= self.world_size
                if seen and set(self.waiting()) <= set(self.debugger.stopped_ranks()):
                    break
                if time.monotonic() - looked > 0.5:
                    looked = time.monotonic()
                    for node in self.nodes:
                        if node.state == "attached":
                            self._discover(node)
                self.debugger.wait_change(self.debugger.version, 0.1)
            spent = total = self.serve_stops()
            while spent:
                try:
                    spent = self._serve_returning()
                except KeyboardInterrupt:  # ranks in a step that outlasts the prompt's wait
                    if not self._interrupt_prompt_ranks():
                        raise
                    spent = RETURN_SECONDS  # the interrupted ranks may stop again
                total += spent
            return total
        finally:
            self._serving = False
            self._before_prompt()

    def _serve_returning(self) -> float:
        """Serve the ranks that stop again within :data:`RETURN_SECONDS` of leaving the
        prompt; seconds spent (0.0: none came back)."""
        deadline = time.monotonic() + RETURN_SECONDS
        while not self.debugger.pending() and time.monotonic() < deadline:
            self.debugger.wait_change(self.debugger.version, 0.1)
        return self.serve_stops() if self.debugger.pending() else 0.0

    def serve_stops(self) -> float:
        """Serve the stopped ranks at the prompt, here (the kernel's main thread); seconds
        spent. A kernel interrupt at the prompt reaches the ranks at it, as on local ranks."""
        self._before_prompt()
        serving, self._serving = self._serving, True
        try:
            return self.held.serve_waiting()
        finally:
            self._serving = serving

    @contextlib.contextmanager
    def serving_cell(self, on_state: Callable[[int, RankState], None]) -> Iterator[DebugChannel]:
        """While a cell of this kernel runs on the job's ranks (local/jobcells.py): the
        stops are the cell's to serve, not held; ``on_state`` is told each rank's stop and
        run as well. The channel is attach's again afterwards."""
        channel = self.debugger
        self._serving = True

        def both(rank: int, state: RankState) -> None:
            self._on_state(rank, state)
            on_state(rank, state)

        channel.on_state = both
        try:
            yield channel
        finally:
            channel.on_state = self._on_state
            channel.serving, channel.allowed = True, None
            channel.wake = lambda: None
            self._serving = False

    def wait(self, timeout: float | None = None, ended: Callable[[], bool] | None = None) -> str:
        """Serve each stop as it comes until the job's ranks have all ended, ``ended()`` says
        the job did, or ``timeout`` s pass; what ended the wait."""
        deadline = None if timeout is None else time.monotonic() + timeout
        self._new_cell()
        with dap.pausing(self.pause) as debugger_on:
            if debugger_on:
                print(
                    f"{self.name}: JupyterLab's debugger serves the stops; its Pause stops "
                    "the running ranks.",
                    flush=True,
                )
            return self._wait(deadline, timeout, ended)

    def _wait(
        self, deadline: float | None, timeout: float | None, ended: Callable[[], bool] | None
    ) -> str:
        checked = 0.0
        while True:
            self.serve_stops()
            if self.all_ended():
                return "every rank of the job has ended"
            if ended is not None and time.monotonic() - checked > WATCH_SECONDS:
                checked = time.monotonic()
                if ended():
                    return "the job has ended"
            if deadline is not None and time.monotonic() > deadline:
                return f"no more stops within {timeout:g} s; the job runs on"
            try:
                self.debugger.wait_change(self.debugger.version, 0.2)
            except KeyboardInterrupt:  # ranks in a step that outlasts the prompt's wait
                if not self._interrupt_prompt_ranks():
                    raise

    def _before_prompt(self) -> None:
        """Before each prompt and when the prompt ends: name the nodes whose SSH connection
        ended since the last look, then everything the watcher found."""
        self._check_links()
        self.say_notices()

    def _check_links(self) -> None:
        for node in self.nodes:
            with self._lock:  # the watcher and the prompt both look: one notice per loss
                lost = node.state == "attached" and not node.link.alive()
                if lost:
                    node.state = f"lost: {node.link._said() or 'its SSH connection ended'}"
            if lost:
                self._lose(node)

    def all_ended(self) -> bool:
        states = self.states()
        return bool(self.procs) and all(s == RankState.DEAD for s in states.values())

    # -- the watcher ------------------------------------------------------------------------
    def _watch(self) -> None:
        last = 0.0
        while not self._stop.wait(0.25):
            if not self._serving:
                self.held.hold()
            if time.monotonic() - last < WATCH_SECONDS:
                continue
            last = time.monotonic()
            self._check_links()
            for node in self.nodes:
                if node.state == "attached":
                    self._discover(node)

    def _lose(self, node: Node) -> None:
        ranks = sorted(r for r, p in self.procs.items() if p.node == node.index)
        who = f"{format_ranks(ranks)} leave the prompt and run on" if ranks else "no rank seen"
        self._notice(
            f"node {node.index} ({node.destination}): SSH connection lost: {who}; the other "
            f"nodes go on. `%distcomp attach {self.name}` again reconnects it."
        )
        if not self._serving:
            self.say_notices()

    def _notice(self, text: str) -> None:
        with self._lock:
            self.notices.append(text)

    def say_notices(self) -> None:
        with self._lock:
            notices, self.notices = self.notices, []
        for text in notices:
            print(f"{self.name}: {text}", flush=True)

    # -- leaving ----------------------------------------------------------------------------
    def detach(self) -> None:
        """Leave the job running: the ranks at the prompt run on, the next breakpoint()
        waits for the next attach; every tunnel and connection of ours ends."""
        self._stop.set()
        with ThreadPoolExecutor(max_workers=max(1, len(self.nodes))) as pool:
            list(pool.map(self._detach_node, self.nodes))
        self.close()

    def _detach_node(self, node: Node) -> None:
        if node.state == "attached" and node.link.alive():
            node.link.run(node_side.detach_script(self.folder, node.index, self.session), 15)
        node.state = "detached"

    def close(self) -> None:
        self._stop.set()
        self.debugger.close()
        for node in self.nodes:
            node.link.close()
        if self._watcher is not None and self._watcher is not threading.current_thread():
            self._watcher.join(timeout=5)
        scratch.remove(self.control)

    def describe(self) -> list[str]:
        """What ``%distcomp status JOB`` says: each node and each group of ranks."""
        lines = [
            f"{self.name}: attached over SSH ({self.route} route) to {self.instance_count} "
            f"node(s); a breakpoint() waits {self.idle_minutes:g} min for a notebook, then "
            "the rank runs on"
        ]
        for node in self.nodes:
            lines.append(f"node {node.index} ({node.destination}): {node.state}")
        by_state: dict[str, list[int]] = {}
        waiting = set(self.waiting())
        for rank, state in self.states().items():
            word = {
                RankState.DEBUGGING: "at the debugger prompt",
                RankState.BUSY: "waiting at a breakpoint for a notebook"
                if rank in waiting
                else "running",
                RankState.STARTING: "not seen yet (starting)",
                RankState.DEAD: "ended, or its node out of reach",
            }.get(state, str(state))
            by_state.setdefault(word, []).append(rank)
        lines += [f"{format_ranks(ranks)}: {word}" for word, ranks in by_state.items()]
        return lines


__all__ = ["AttachedJob", "JobProcess"]
