"""Hosts for the multi-host tests: Linux network namespaces on a virtual bridge, each with
its own address, its own host name and Debian's sshd (host and user keys made here).

The kernel under test stays in this machine's namespace and reaches the hosts over the
bridge, as a notebook reaches a cluster's nodes. Needs root (namespaces, veth, bridge) and
``/usr/sbin/sshd`` (``make test`` installs openssh-server); :func:`unavailable` says why not.
"""

from __future__ import annotations

import itertools
import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

SSHD = "/usr/sbin/sshd"
#: how many sets of hosts this process made (see NamespaceHosts)
_MADE = itertools.count()


def unavailable() -> str | None:
    """Why namespaced hosts cannot be made here, or None."""
    if os.geteuid() != 0:
        return "network namespaces need root (run the tests as root, as CI does)"
    for tool in ("ip", "unshare", "ssh", "ssh-keygen"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed"
    if not os.path.exists(SSHD):
        return f"{SSHD} is missing: apt-get install openssh-server (make test does it)"
    probe = f"dcprobe{os.getpid()}"
    made = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if made.returncode != 0:
        return f"cannot make a network namespace: {made.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    return None


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True)


class NamespaceHosts:
    """``count`` hosts ``10.213.N.10``, ``.11`` ... named ``node0``, ``node1`` ... and the
    kernel's side of the bridge, ``10.213.N.1``. Use as a context manager: everything is
    removed on exit, whatever happened inside."""

    def __init__(self, count: int = 2):
        self.count = count
        # names and subnet of their own for each set of hosts of this process: the kernel
        # may still be removing a set this process closed (a namespace goes once its last
        # reference does), and two pytest processes differ by their pid
        made = next(_MADE)
        self.tag = f"dc{os.getpid() % 100000}{chr(ord('a') + made % 26)}"
        subnet = 20 + (os.getpid() + 37 * made) % 200
        self.gateway = f"10.213.{subnet}.1"
        self.addresses = [f"10.213.{subnet}.{10 + i}" for i in range(count)]
        self.namespaces = [f"{self.tag}n{i}" for i in range(count)]
        self.bridge = f"{self.tag}br"
        self.dir = Path(tempfile.mkdtemp(prefix="distcomp-hosts-"))
        self.ssh_config = self.dir / "ssh_config"
        self.sshds: list[subprocess.Popen] = []

    @property
    def ssh_command(self) -> str:
        """The ssh the product must use to reach the hosts (``DistComp.ssh_command``)."""
        return f"ssh -F {self.ssh_config}"

    def __enter__(self) -> NamespaceHosts:
        try:
            self._network()
            self._keys()
            self._names()
            for i in range(self.count):
                self._sshd(i)
            self._wait_for_ssh()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _network(self) -> None:
        _ip("link", "add", self.bridge, "type", "bridge")
        _ip("addr", "add", f"{self.gateway}/24", "dev", self.bridge)
        _ip("link", "set", self.bridge, "up")
        for i, (ns, addr) in enumerate(zip(self.namespaces, self.addresses, strict=True)):
            outer, inner = f"{self.tag}v{i}", f"{self.tag}p{i}"
            _ip("netns", "add", ns)
            _ip("link", "add", outer, "type", "veth", "peer", "name", inner)
            _ip("link", "set", inner, "netns", ns)
            _ip("-n", ns, "link", "set", inner, "name", "eth0")
            _ip("-n", ns, "addr", "add", f"{addr}/24", "dev", "eth0")
            _ip("-n", ns, "link", "set", "eth0", "up")
            _ip("-n", ns, "link", "set", "lo", "up")
            _ip("link", "set", outer, "master", self.bridge, "up")

    def _keys(self) -> None:
        for name in ("host_key", "user_key"):
            subprocess.run(
                ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(self.dir / name)],
                check=True,
            )
        (self.dir / "authorized_keys").write_text((self.dir / "user_key.pub").read_text())
        host_key = (self.dir / "host_key.pub").read_text().split()[:2]
        (self.dir / "known_hosts").write_text(
            "".join(f"{addr} {' '.join(host_key)}\n" for addr in self.addresses)
        )
        self.ssh_config.write_text(
            f"Host {' '.join(self.addresses)}\n"
            f"  IdentityFile {self.dir / 'user_key'}\n"
            f"  UserKnownHostsFile {self.dir / 'known_hosts'}\n"
            "  StrictHostKeyChecking yes\n"
            "  BatchMode yes\n"
            "  User root\n"
            "  ConnectTimeout 10\n"
        )
        os.makedirs("/run/sshd", exist_ok=True)  # sshd's privilege separation directory

    def _names(self) -> None:
        """Each host resolves every host's name to its address, as on a cluster (``ip netns
        exec`` mounts /etc/netns/NS/hosts over /etc/hosts for what runs inside)."""
        table = "127.0.0.1 localhost\n" + "".join(
            f"{addr} node{i}\n" for i, addr in enumerate(self.addresses)
        )
        for ns in self.namespaces:
            folder = Path("/etc/netns") / ns
            folder.mkdir(parents=True, exist_ok=True)
            (folder / "hosts").write_text(table)

    def _sshd(self, i: int) -> None:
        config = self.dir / f"sshd_config_{i}"
        config.write_text(
            f"ListenAddress {self.addresses[i]}\n"
            f"HostKey {self.dir / 'host_key'}\n"
            f"AuthorizedKeysFile {self.dir / 'authorized_keys'}\n"
            f"PidFile {self.dir / f'sshd_{i}.pid'}\n"
            "PermitRootLogin prohibit-password\n"
            "PasswordAuthentication no\n"
            "KbdInteractiveAuthentication no\n"
            "UsePAM no\n"
            "StrictModes no\n"
            "MaxStartups 100\n"
            "MaxSessions 100\n"
        )
        log = open(self.dir / f"sshd_{i}.log", "wb")  # noqa: SIM115 - closed with the process
        # its own UTS namespace: the host has a name of its own, as a real node does
        inside = [
            "unshare",
            "--uts",
            "sh",
            "-c",
            f"hostname node{i} && exec {SSHD} -D -e -f {config}",
        ]
        self.sshds.append(
            subprocess.Popen(
                ["ip", "netns", "exec", self.namespaces[i], *inside],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
        )
        log.close()

    def ssh(self, i: int, command: str, timeout: float = 60) -> subprocess.CompletedProcess:
        return subprocess.run(
            ["ssh", "-F", str(self.ssh_config), self.addresses[i], command],
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def _wait_for_ssh(self) -> None:
        deadline = time.monotonic() + 60
        for i in range(self.count):
            while True:
                done = self.ssh(i, "hostname")
                if done.returncode == 0 and done.stdout.strip() == f"node{i}":
                    break
                if time.monotonic() > deadline:
                    log = (self.dir / f"sshd_{i}.log").read_text(errors="replace")
                    raise RuntimeError(f"sshd of node{i} does not answer: {done.stderr}\n{log}")
                time.sleep(0.2)

    def pids(self, i: int) -> list[int]:
        """Every process in host ``i``'s namespace (its sshd included)."""
        out = subprocess.run(
            ["ip", "netns", "pids", self.namespaces[i]], capture_output=True, text=True
        ).stdout
        return [int(p) for p in out.split()]

    def processes(self, i: int) -> list[str]:
        """The command lines of host ``i``'s processes, its sshd left out."""
        sshd = {p.pid for p in self.sshds}
        lines = []
        for pid in self.pids(i):
            if pid in sshd:
                continue
            try:
                raw = Path(f"/proc/{pid}/cmdline").read_bytes()
            except OSError:
                continue
            lines.append(raw.replace(b"\0", b" ").decode(errors="replace").strip())
        return [line for line in lines if line]

    def close(self) -> None:
        for ns in self.namespaces:
            for pid in self.pids(self.namespaces.index(ns)):
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        for proc in self.sshds:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
        for ns in self.namespaces:
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
            shutil.rmtree(Path("/etc/netns") / ns, ignore_errors=True)
        subprocess.run(["ip", "link", "del", self.bridge], capture_output=True)
        shutil.rmtree(self.dir, ignore_errors=True)
