"""SSH connections to the nodes of a job, opened from the notebook's side: one OpenSSH master
connection a node (``ControlMaster``), a remote forward on it that ends on the node's
loopback (where the job's ranks connect), and short commands over it without a new
handshake.

The user's own ssh does the work, with the user's own key and options
(``AzureML.ssh_command``, e.g. ``ssh -i ~/.ssh/id_ed25519``): the key never leaves this
machine, and no agent or X11 is forwarded. sshd binds a remote forward to the node's
127.0.0.1 (its ``GatewayPorts no`` default), so nothing of ours listens beyond loopback
there. Each master is started so that it ends with the process that started it
(``PR_SET_PDEATHSIG``, rank_side/reaper.py): a killed kernel leaves no tunnel behind; start
them from a thread that lives as long (the kernel's main thread). A job's nodes are new
machines, so their host keys are accepted on first use (``StrictHostKeyChecking=accept-new``)
unless the ssh command sets its own policy; keepalives notice a dead connection within
about 15 s.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import subprocess
import time
from pathlib import Path

from ..rank_side import reaper

#: ssh's own keepalive: a connection that does not answer for INTERVAL x COUNT s ends
ALIVE_INTERVAL, ALIVE_COUNT = 5, 3


def ssh_argv(ssh_command: str, control: str) -> list[str]:
    """The user's ssh with our options: multiplexed on ``control``, nothing forwarded."""
    argv = shlex.split(ssh_command or "ssh")
    options = {
        "ControlPath": control,
        "BatchMode": "yes",
        "ForwardAgent": "no",
        "ForwardX11": "no",
        "ServerAliveInterval": str(ALIVE_INTERVAL),
        "ServerAliveCountMax": str(ALIVE_COUNT),
    }
    if "stricthostkeychecking" not in ssh_command.lower():
        options["StrictHostKeyChecking"] = "accept-new"
    for key, value in options.items():
        argv += ["-o", f"{key}={value}"]
    return argv


def control_path(folder: str) -> str:
    """Where ssh keeps each destination's master socket in ``folder`` (one a destination:
    ``%C`` is a hash of host, port and user), so that one ssh command reaches every node."""
    return os.path.join(folder, "%C")


class NodeLink:
    """One node's master connection to ``destination`` (``ssh://user@host:port``); its
    socket in ``folder`` (private to this user), its log there as ``name.log``."""

    def __init__(self, destination: str, ssh_command: str, folder: str, name: str) -> None:
        self.destination = destination
        self.argv = ssh_argv(ssh_command, control_path(folder))
        self.log = Path(folder, f"{name}.log")
        self.master: subprocess.Popen | None = None
        self.error = ""  # why the connection failed or ended

    def start(self) -> None:
        """Start the master connection (returns at once; :meth:`ready` waits for it)."""
        with open(self.log, "wb") as log:
            self.master = subprocess.Popen(
                [*self.argv, "-M", "-N", "-o", "ExitOnForwardFailure=yes", self.destination],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=log,
                preexec_fn=lambda: reaper.die_with_parent(signal.SIGTERM),
                start_new_session=True,  # a kernel interrupt (its process group's) spares it
            )

    def ready(self, timeout: float) -> bool:
        """Wait until the master answers (True) or ends or ``timeout`` passes (False,
        :attr:`error` says why)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.alive():
                self.error = self._said() or "ssh ended"
                return False
            check = self._ssh(["-O", "check"], timeout=max(1.0, deadline - time.monotonic()))
            if check is not None and check.returncode == 0:
                return True
            time.sleep(0.05)
        self.error = f"no SSH connection within {timeout:g} s" + (
            f" ({self._said()})" if self._said() else ""
        )
        return False

    def alive(self) -> bool:
        return self.master is not None and self.master.poll() is None

    def forward(self, local_port: int) -> int:
        """A port on the node's loopback whose connections reach ``local_port`` here."""
        done = self._ssh(["-O", "forward", "-R", f"127.0.0.1:0:127.0.0.1:{local_port}"], 30)
        if done is None or done.returncode != 0 or not done.stdout.strip().isdigit():
            said = (done.stderr.strip() if done is not None else "") or "no port"
            raise OSError(f"the node refused the tunnel: {said}")
        return int(done.stdout.strip())

    def run(
        self, script: str, timeout: float = 30, stdin: str | None = None
    ) -> subprocess.CompletedProcess | None:
        """``script`` run by sh on the node over the master connection (None: timed out or
        could not run); ``stdin`` is its input (secrets go there, never on a command line,
        which other users of the node see)."""
        return self._ssh([], timeout, script, stdin)

    def _ssh(
        self, extra: list[str], timeout: float, script: str | None = None, stdin: str | None = None
    ) -> subprocess.CompletedProcess | None:
        argv = [*self.argv, "-o", "ControlMaster=no", *extra, self.destination]
        if script is not None:
            argv.append(script)
        try:
            return subprocess.run(
                argv,
                input=stdin if stdin is not None else "",
                capture_output=True,
                text=True,
                timeout=timeout,
            )
        except (OSError, subprocess.TimeoutExpired):
            return None

    def _said(self) -> str:
        """What ssh said last (its stderr), one line."""
        try:
            lines = self.log.read_text(errors="replace").strip().splitlines()
        except OSError:
            return ""
        return lines[-1].strip() if lines else ""

    def close(self) -> None:
        """End the master connection, its forwards with it."""
        if self.master is not None and self.master.poll() is None:
            self.master.terminate()
            try:
                self.master.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.master.kill()
                self.master.wait()
        with contextlib.suppress(OSError):
            os.unlink(self.log)
