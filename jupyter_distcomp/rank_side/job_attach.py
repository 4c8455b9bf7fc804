"""A rank of a job submitted with ``--debug``: ``breakpoint()`` waits for the notebook, and
``%distcomp attach`` finds the rank on its node.

``arm()`` runs in every Python process of such a job (job_site/sitecustomize.py, when
``DISTCOMP_ATTACH_DIR`` names the job's folder on the node):

- the process writes who it is into ``<folder>/proc-<pid>.json`` (rank, node, pid, main
  thread, its stack file, its ledger, its folder, when it started), which ``%distcomp
  attach`` reads over SSH, and arms faulthandler on SIGUSR1 to write its stacks to
  ``<folder>/proc-<pid>.stack`` (``%distcomp where``), and takes SIGUSR2 (where it is at its
  default as the process starts) for JupyterLab's Pause, which the notebook sends over SSH;
- ``breakpoint()`` (unless ``PYTHONBREAKPOINT`` says otherwise) waits for a notebook: the
  file ``<folder>/attach-node<N>.json`` that ``%distcomp attach`` writes on node N (the port
  where its SSH tunnel ends on the node's loopback, and the debugger channel's key), then
  stops at the notebook's group prompt with the debugger of ``%distcomp command`` ranks
  (debug_hook.py, loaded by path; JupyterLab's debugger asks its frames and variables
  through dap_side.py, as on local ranks). Without a notebook for ``DISTCOMP_IDLE_MINUTES``
  (default 30) the rank says so in its log and runs on: a job nobody attaches to is not
  held for good.
- a notebook that goes away (``%distcomp detach``, its kernel ended, its SSH connection
  lost) leaves the ranks at its prompt running on, the breakpoints set in that session
  cleared; the next ``breakpoint()`` waits for the next attach.

The folder is the job's user's own (0700; the rank refuses any other), and so is the key's
file: only whoever logs in with the SSH service's key reads it. Nothing here listens: the
ranks connect to the node's loopback, where the notebook's tunnel ends.
Standard library only, Python 3.8 or newer.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from typing import Any

#: JupyterLab's Pause, the signal dap_side.PAUSE_SIGNAL names on local ranks
PAUSE_SIGNAL = signal.SIGUSR2
ENV_FOLDER = "DISTCOMP_ATTACH_DIR"
ENV_IDLE = "DISTCOMP_IDLE_MINUTES"
DEFAULT_IDLE_MINUTES = 30.0
#: seconds between two looks for the notebook's file while a rank waits at a breakpoint
POLL_SECONDS = 0.2
_STATE: Rank | None = None


def _sibling(name: str) -> Any:
    """A file of ours beside this one, loaded by path once (job_watch.py's loader)."""
    return sys.modules["distcomp_job_watch"]._sibling(name)


def say(text: str) -> None:
    """A line of ours in the rank's log (its stderr)."""
    try:
        sys.stderr.write(f"distcomp: {text}\n")
        sys.stderr.flush()
    except (OSError, ValueError, AttributeError):
        pass


def idle_minutes(env: Any = None) -> float:
    env = os.environ if env is None else env
    raw = str(env.get(ENV_IDLE, "")).strip()
    try:
        return float(raw) if raw else DEFAULT_IDLE_MINUTES
    except ValueError:
        say(f"{ENV_IDLE}={raw!r} is not a number of minutes; {DEFAULT_IDLE_MINUTES:g} it is.")
        return DEFAULT_IDLE_MINUTES


def own_folder(path: str) -> bool:
    """``path`` is a folder of this user's that no one else may read (made so if absent)."""
    try:
        os.makedirs(path, mode=0o700, exist_ok=True)
        info = os.stat(path)
    except OSError:
        return False
    return info.st_uid == os.getuid() and not info.st_mode & 0o077


def write_json(path: str, data: dict) -> None:
    """``path`` replaced at once by ``data`` (readers never see half a file), mode 0600."""
    temporary = f"{path}.{os.getpid()}.tmp"
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        json.dump(data, handle)
    os.replace(temporary, path)


def read_json(path: str) -> dict | None:
    try:
        with open(path) as handle:
            data = json.load(handle)
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


class Rank:
    """This process: who it is, its files in the job's folder, its debugger."""

    def __init__(self, folder: str, identity: dict, idle: float) -> None:
        self.folder = folder
        self.rank = int(identity["rank"])
        self.node = int(identity.get("node") or 0)
        self.idle = idle
        self.pid = os.getpid()
        self.beacon = os.path.join(folder, f"proc-{self.pid}.json")
        self.stack_path = os.path.join(folder, f"proc-{self.pid}.stack")
        self.attach_path = os.path.join(folder, f"attach-node{self.node}.json")
        self.facts = {
            "rank": self.rank,
            "node": self.node,
            "size": identity.get("size"),
            "pid": self.pid,
            "thread": threading.main_thread().ident,
            "stack": self.stack_path,
            "ledger": "",
            "cwd": os.getcwd(),
            "started": time.time(),
        }
        self._debugger: Any = None

    def tell(self, **changes: Any) -> None:
        """Rewrite this process's beacon with ``changes`` (``waiting``: at a breakpoint)."""
        self.facts.update(changes)
        try:
            write_json(self.beacon, self.facts)
        except OSError:
            pass

    def debugger(self) -> Any:
        if self._debugger is None:
            _sibling("compare")  # `compare EXPR` at the prompt (debug_hook finds it loaded)
            _sibling("dap_values")  # JupyterLab's debugger: frames and variables (dap_side)
            _sibling("dap_side")
            self._debugger = _job_pdb()(_job_channel()(self))
        return self._debugger


def _job_channel() -> Any:
    """debug_hook's channel, its address and key read from the notebook's file on this node."""
    base: Any = _sibling("debug_hook")._Channel

    class JobChannel(base):
        def __init__(self, rank: Rank) -> None:
            super().__init__("127.0.0.1", 0, b"", rank.rank, command=True)
            self.me = rank
            self.session = ""  # the notebook's attach that the connection belongs to
            self.dead: set = set()  # sessions whose tunnel did not answer

        def current(self) -> dict | None:
            """The notebook's attach of this node now, or None."""
            found = read_json(self.me.attach_path)
            if not found or found.get("detached") or found.get("session") in self.dead:
                return None
            return found

        def session_over(self) -> bool:
            """The attach this rank's breakpoints were set in is over."""
            now = self.current()
            return bool(self.session) and (now is None or now.get("session") != self.session)

        def recv(self, timeout: float | None = None) -> dict:
            """The notebook's next message; at a prompt nobody answers for the idle limit,
            a TimeoutError: the rank runs on, as when the notebook detaches."""
            try:
                return super().recv(self.me.idle * 60 if timeout is None else timeout)
            except TimeoutError:
                if timeout is None:
                    say(
                        f"rank {self.rank}: no command from the notebook for "
                        f"{self.me.idle:g} min ({ENV_IDLE}); the rank runs on"
                    )
                raise

        def session_ended(self) -> str:
            """The end of input: pdb's EOF, where the rank runs on (JobPdb.do_EOF)."""
            return ""

        def send(self, connect: bool = False, **message: Any) -> None:
            if self.conn is not None or not connect:
                return super().send(connect, **message)
            deadline = time.monotonic() + self.me.idle * 60
            while True:
                self.wait_for_notebook(deadline, message.get("stop"))
                try:
                    return super().send(connect=True, **message)
                except OSError:  # a tunnel of a notebook that is gone: wait for the next
                    self.dead.add(self.session)
                    self.close()

        def wait_for_notebook(self, deadline: float, where: Any) -> None:
            attach = self.current()
            if attach is None:
                self.me.tell(waiting={"since": time.time(), "where": where})
                say(
                    f"rank {self.rank}: at a breakpoint, waiting for the notebook "
                    f"(`%distcomp attach`) for {self.me.idle:g} min at most"
                )
            while attach is None:
                if time.monotonic() > deadline:
                    self.me.tell(waiting=None)
                    raise TimeoutError(
                        f"no notebook attached within {self.me.idle:g} min "
                        f"({ENV_IDLE}); the breakpoint is skipped"
                    )
                time.sleep(POLL_SECONDS)
                attach = self.current()
            self.me.tell(waiting=None)
            self.address = ("127.0.0.1", int(attach["port"]))
            self.key = bytes.fromhex(str(attach["key"]))
            self.session = str(attach["session"])

    return JobChannel


def _job_pdb() -> Any:
    """debug_hook's pdb, with what a job needs: a notebook that goes away lets it run on."""
    base: Any = _sibling("debug_hook").RankPdb

    class JobPdb(base):
        explicit = False  # the stop under way is a breakpoint() call, not a pdb breakpoint

        def _announce(self, frame: Any, line: int) -> bool:
            explicit, self.explicit = self.explicit, False
            if not explicit and self.channel.session_over():
                self.clear_all_breaks()  # set in an attach that is over: the rank runs on
                return False
            return super()._announce(frame, line)

        def do_EOF(self, arg: str) -> Any:
            if self.channel.conn is None:  # the notebook went away, nobody typed EOF
                self.clear_all_breaks()
                say(f"rank {self.channel.rank}: the notebook detached; the rank runs on")
                return self.do_continue(arg)
            return super().do_EOF(arg)

    return JobPdb


def breakpointhook(*args: Any, **kwargs: Any) -> None:
    """``breakpoint()``: wait for the notebook, then stop at its prompt."""
    if _STATE is None:
        return sys.__breakpointhook__(*args, **kwargs)
    debugger = _STATE.debugger()
    debugger.explicit = True
    debugger.set_trace(sys._getframe(1))


def _pause(signum: int, frame: Any) -> None:
    """JupyterLab's Pause while the notebook serves this job: stop at the next line of the
    user's code, as the visual debugger steps (a rank inside a C call stops once it returns)."""
    if _STATE is None or frame is None:
        return
    debugger = _STATE.debugger()
    debugger.visual_step = True
    debugger.set_trace(frame)


def arm() -> Rank | None:
    """Make this process findable and its ``breakpoint()`` wait for the notebook; None where
    the job is not debugged, or this is a spawned child of a rank."""
    global _STATE
    folder = os.environ.get(ENV_FOLDER, "")
    if not folder or "--multiprocessing-fork" in sys.argv:
        return None
    if _STATE is not None and _STATE.pid == os.getpid():
        return _STATE
    if not own_folder(folder):
        say(f"{folder} is not a folder of this user's alone: `%distcomp attach` is off here")
        return None
    import faulthandler

    rank = Rank(folder, _sibling("job_line").identity(), idle_minutes())
    stacks = open(rank.stack_path, "a")  # noqa: SIM115 - open while the process lives
    faulthandler.register(signal.SIGUSR1, file=stacks, all_threads=True)
    sys._distcomp_attach_stacks = stacks  # type: ignore[attr-defined]  # kept alive
    if signal.getsignal(PAUSE_SIGNAL) is signal.SIG_DFL:  # a program's own handler stays
        signal.signal(PAUSE_SIGNAL, _pause)
        rank.facts["pause"] = True
    hooks = sys.modules.get("distcomp_ledger_hooks")
    rank.tell(ledger=str(getattr(getattr(hooks, "STATE", None), "path", "") or ""))
    if not os.environ.get("PYTHONBREAKPOINT"):
        sys.breakpointhook = breakpointhook
    _STATE = rank
    return rank
