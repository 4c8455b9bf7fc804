"""``%distcomp attach``, end to end: a job submitted with ``--debug`` through the real
azure-ai-ml client to the local stand-in of Azure ML, its 2 nodes x 2 ranks running on two
hosts (network namespaces with their own sshd, tests/netns_support.py), each node's SSH
service that host's sshd as ``jobs.show_services`` serves it, and a real kernel whose stdin
requests are answered as a notebook answers them.

A ``breakpoint()`` before an ``allreduce`` answered at the notebook's group prompt (``p``,
``n`` over the collective, ``compare``, ``c``); ``where``, ``collectives`` and ``status``
of the running job; detach, then a second attach that serves the next breakpoint; a node
whose SSH dies at the prompt (named, the rest go on); a stranger's key refused; nothing of
ours listening beyond loopback; the notebook's kernel killed (the job goes on, its next
breakpoint waits for the idle limit, then the rank runs on). Skipped, with the reason,
where namespaces cannot be made.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from .debug_support import DebugKernel
from .netns_support import NamespaceHosts, unavailable

pytest.importorskip("azure.ai.ml")
WHY_NOT = unavailable()
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(WHY_NOT is not None, reason=f"no namespaced hosts: {WHY_NOT}"),
    pytest.mark.filterwarnings("ignore::UserWarning"),
]

SPEC = """\
name: train
type: DistributedComponent
launcher:
  type: mpi
  additional_arguments: {python} train.py
"""
#: a breakpoint before an allreduce; then, once the test says so (the file ``go``), a second
TRAIN = """\
import os, time
from mpi4py import MPI
c = MPI.COMM_WORLD
x = c.rank * 10 + 1
breakpoint()
total = c.allreduce(x)
print("total", total, flush=True)
try:
    while not os.path.exists("{go}"):
        time.sleep(0.1)
except KeyboardInterrupt:  # `%distcomp interrupt`
    print("SIGINT caught", flush=True)
    while not os.path.exists("{go}"):
        time.sleep(0.1)
y = total + c.rank
breakpoint()
print("y", y, flush=True)
"""


@pytest.fixture(scope="module")
def hosts():
    with NamespaceHosts(2) as made:
        yield made


@pytest.fixture(scope="module")
def keys(hosts, tmp_path_factory):
    """The notebook user's ssh (its own key, let in by the job's SSH service only), and a
    stranger's (another user of the workspace)."""
    folder = tmp_path_factory.mktemp("keys")
    commands = {}
    for who in ("mine", "stranger"):
        key = folder / who
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
        config = folder / f"{who}_config"
        config.write_text(
            f"Host {' '.join(hosts.addresses)}\n"
            f"  IdentityFile {key}\n"
            "  IdentitiesOnly yes\n"
            f"  UserKnownHostsFile {hosts.dir / 'known_hosts'}\n"
            "  StrictHostKeyChecking yes\n"
            "  ConnectTimeout 10\n"
        )
        commands[who] = f"ssh -F {config}"
    commands["public"] = str(folder / "mine.pub")
    commands["private"] = (folder / "mine").read_text()
    return commands


@pytest.fixture(scope="module")
def standin(hosts, tmp_path_factory):
    from jupyter_distcomp.standin import AzureStandIn

    root = tmp_path_factory.mktemp("standin")
    with AzureStandIn(
        root=root,
        hosts=tuple(hosts.addresses),
        ssh_command=hosts.ssh_command,  # the cluster's own key: mpiexec starts the ranks
        authorized_keys=hosts.dir / "authorized_keys",
    ) as server:
        yield server


def pointed_at(standin, keys) -> str:
    """A cell that points the kernel's session at the stand-in, with the user's ssh."""
    return (
        "%load_ext jupyter_distcomp\n"
        "from jupyter_distcomp.standin import FakeCredential\n"
        "from jupyter_distcomp.standin.transport import make_transport\n"
        "s = get_ipython().magics_manager.registry['DistCompMagics'].session.azureml\n"
        f"s.subscription_id, s.resource_group = {standin.subscription!r}, {standin.resource_group!r}\n"
        f"s.workspace_name, s.credential = {standin.workspace!r}, FakeCredential({standin.token!r})\n"
        f"s.client_kwargs = dict(transport=make_transport({standin.url!r}), "
        "enable_telemetry=False, show_progress=False, retry_total=3, retry_backoff_factor=0.01)\n"
        f"s.ssh_command = {keys['mine']!r}\n"
        "s.ssh_user = 'root'\n"
        "%config AzureML.poll_interval = 0.2\n"
    )


@pytest.fixture(scope="module")
def kernel(standin, keys, tmp_path_factory):
    k = DebugKernel(cwd=str(tmp_path_factory.mktemp("notebook")))
    try:
        out = k.run(pointed_at(standin, keys))
        assert out.ok, out.text
        yield k
    finally:
        k.close()


def project(folder: Path, idle: str = "") -> Path:
    """The component's folder: the spec (2 nodes x 2 ranks) and its program."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "spec.yaml").write_text(SPEC.format(python=sys.executable))
    (folder / "train.py").write_text(TRAIN.format(go=folder / "go"))
    return folder


def submitted(
    kernel,
    folder: Path,
    keys,
    extra: str = "",
    said: str = r"(\S+): a breakpoint\(\) in its ranks waits for `%distcomp attach",
) -> str:
    """Define the component in ``folder`` and submit it with --debug (and ``extra``); the
    job's name, read from the submit's words ``said``."""
    out = kernel.run(f"%%distcomp train\n{(folder / 'spec.yaml').read_text()}code: {folder}\n")
    assert out.ok, out.text
    out = kernel.run(
        "train.runsettings.resource_layout.configure(instance_count=2, process_count_per_node=2)\n"
        f"%distcomp submit train --compute cpu --no-environment --debug --ssh-key {keys['public']} {extra}"
    )
    assert out.ok, out.text
    found = re.search(said, out.text)
    assert found, out.text
    return found[1]


def waiting_ranks(job, ranks: range | list[int], times: int = 1) -> None:
    """Until ``ranks`` of ``job`` said (``times`` times) that they wait for a notebook."""

    def said() -> bool:
        logs = [job.log_text(f"user_logs/std_log_process_{r}.txt") for r in ranks]
        return all(log.count("waiting for the notebook") >= times for log in logs)

    wait_for(said, 180, "the ranks at a breakpoint")


def wait_for(condition, seconds: float = 120, what: str = "") -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, f"not within {seconds} s: {what}"
        time.sleep(0.1)


def test_a_breakpoint_before_an_allreduce_is_answered_at_the_notebooks_prompt(
    kernel, standin, keys, tmp_path
):
    folder = project(tmp_path / "proj")
    name = submitted(kernel, folder, keys)
    job = standin.job(name)
    waiting_ranks(job, range(4))  # attach serves the ranks that wait at a breakpoint at once
    out = kernel.run(f"%distcomp attach {name}", ["p x", "n", "compare x", "c"], timeout=300)
    assert out.ok, out.text
    assert re.search(rf"Attached to job {name} in [\d.]+ s over SSH \(direct route\)", out.text)
    assert "Idle limit: a breakpoint() waits 30 min for a notebook" in out.text
    assert out.prompts[:4] == ["(Pdb ranks 0-3) "] * 4, out.transcript
    for rank in range(4):  # p x: each rank's own value, labelled with its node
        assert f"[node {rank // 2} rank {rank}] {rank * 10 + 1}\n" in out.transcript, out.transcript
    # n went over the allreduce on every rank at once: all four stop at the next line
    assert '-> print("total", total, flush=True)' in out.transcript, out.transcript
    assert re.search(r"3\s+31\s+DIFFERS\s+30", out.text), out.text  # compare's table
    wait_for(
        lambda: all(
            "total 64" in job.log_text(f"user_logs/std_log_process_{r}.txt") for r in range(4)
        ),
        what="the allreduce's totals",
    )

    where = kernel.run(f"%distcomp where {name}")
    assert "ranks 0-3: running, current stack" in where.text, where.text
    assert "time.sleep(0.1)" in where.text, where.text
    collectives = kernel.run(f"%distcomp collectives {name}")
    assert re.search(
        r"#1\s+allreduce \(int, sum\) at train\.py:6 in <module>: ranks 0-3 done", collectives.text
    ), collectives.text
    status = kernel.run(f"%distcomp status {name}")
    assert "node 1 (ssh://root@" in status.text and "ranks 0-3: running" in status.text, status.text
    interrupted = kernel.run(f"%distcomp interrupt {name}")
    assert f"Sent SIGINT to ranks 0-3 of job {name}." in interrupted.text, interrupted.text
    wait_for(
        lambda: all(
            "SIGINT caught" in job.log_text(f"user_logs/std_log_process_{r}.txt") for r in range(4)
        ),
        what="the SIGINT in every rank",
    )

    # detach: the job runs on; its next breakpoint waits for the next attach
    detached = kernel.run(f"%distcomp detach {name}")
    assert f"Detached from job {name}: it keeps running" in detached.text, detached.text
    (folder / "go").write_text("")
    waiting_ranks(job, range(4), times=2)
    assert job.status == "Running"
    again = kernel.run(f"%distcomp attach {name}", ["p y", "c"], timeout=300)
    assert again.ok, again.text
    for rank in range(4):
        assert f"[node {rank // 2} rank {rank}] {64 + rank}\n" in again.transcript, again.transcript
    assert job.wait(120) == "Completed", job.error
    assert all(
        f"y {64 + r}" in job.log_text(f"user_logs/std_log_process_{r}.txt") for r in range(4)
    )


def listeners(hosts, node: int) -> list[tuple[str, str]]:
    """(address:port, process) of every TCP listener on host ``node``."""
    done = subprocess.run(
        ["ip", "netns", "exec", hosts.namespaces[node], "ss", "-ltnpH"],
        capture_output=True,
        text=True,
        check=True,
    )
    found = []
    for line in done.stdout.splitlines():
        words = line.split()
        process = re.search(r'\(\("([^"]+)"', line)
        found.append((words[3], process[1] if process else "?"))
    return found


def kill_attach_connection(hosts, folder: str, node: int) -> None:
    """End the SSH connection of the notebook's attach on host ``node`` there (its sshd
    session, found by the tunnel it holds on the node's loopback)."""
    port = json.loads(Path(folder, f"attach-node{node}.json").read_text())["port"]
    done = subprocess.run(
        ["ip", "netns", "exec", hosts.namespaces[node], "ss", "-ltnpH", f"sport = :{port}"],
        capture_output=True,
        text=True,
        check=True,
    )
    pids = {int(p) for p in re.findall(r"pid=(\d+)", done.stdout)}
    assert pids, done.stdout
    for pid in pids:
        os.kill(pid, signal.SIGKILL)


def test_a_node_whose_ssh_dies_is_named_and_the_others_go_on(
    kernel, standin, keys, hosts, tmp_path
):
    folder = project(tmp_path / "proj")
    name = submitted(kernel, folder, keys)
    job = standin.job(name)
    waiting_ranks(job, range(4))
    attach_folder = f"/tmp/distcomp-attach-{name}"

    # another user of the workspace: their key is not the job's
    stranger = kernel.run(
        f"%config AzureML.ssh_command = {keys['stranger']!r}\n%distcomp attach {name}"
    )
    assert not stranger.ok and "Permission denied" in stranger.text, stranger.text
    assert "cannot attach to job" in stranger.text, stranger.text
    mine = kernel.run(f"%config AzureML.ssh_command = {keys['mine']!r}")
    assert mine.ok, mine.text

    # nothing of ours listens beyond loopback, on the nodes or in the kernel
    def check_listeners(prompt: str) -> str:
        for node in (0, 1):
            for address, process in listeners(hosts, node):
                if process == "sshd" and not address.endswith(":22"):
                    assert address.startswith("127.0.0.1:"), (node, address)
        kernel_pid = kernel.km.provisioner.process.pid
        for conn in psutil.Process(kernel_pid).net_connections(kind="inet"):
            if conn.status == psutil.CONN_LISTEN:
                assert conn.laddr.ip in ("127.0.0.1", "::1"), conn
        info = os.stat(attach_folder)
        assert oct(info.st_mode & 0o777) == "0o700"
        for path in Path(attach_folder).iterdir():
            text = path.read_text(errors="replace")
            assert keys["private"].splitlines()[1] not in text  # the user's key stayed home
            if path.name.startswith("attach-"):
                assert oct(path.stat().st_mode & 0o777) == "0o600"
        kill_attach_connection(hosts, attach_folder, 1)
        return "p x"

    out = kernel.run(f"%distcomp attach {name}", [check_listeners, "n", "c"], timeout=300)
    assert out.ok, out.text
    assert re.search(
        r"node 1 \(ssh://root@[\d.]+:22\): SSH connection lost: ranks 2-3 leave the prompt and run on",
        out.text,
    ), out.text
    assert "[node 0 rank 0] 1\n" in out.transcript and "[node 0 rank 1] 11\n" in out.transcript, (
        out.transcript
    )
    wait_for(
        lambda: all(
            "total 64" in job.log_text(f"user_logs/std_log_process_{r}.txt") for r in range(4)
        ),
        what="the allreduce, ranks 2-3 running on",
    )
    assert "rank 2: the notebook detached; the rank runs on" in job.log_text(
        "user_logs/std_log_process_2.txt"
    )
    status = kernel.run(f"%distcomp status {name}")
    assert "node 1 (ssh://" in status.text and "lost" in status.text, status.text

    # the next breakpoint: node 0's ranks stop here (held, then `wait`); node 1's wait for a
    # new attach, which reconnects their node
    (folder / "go").write_text("")
    waiting_ranks(job, [2, 3], times=2)
    wait_for(
        lambda: "ranks 0-1: at the debugger prompt" in kernel.run(f"%distcomp status {name}").text,
        60,
        "node 0's ranks held at their breakpoint",
    )
    compared = kernel.run(f"%distcomp compare {name} y --ranks 0-1")
    assert re.search(r"1\s+65\s+DIFFERS\s+1\b", compared.text), compared.text
    served = kernel.run(f"%distcomp wait {name} --timeout 5", ["p y", "c"], timeout=120)
    assert served.ok, served.text
    assert "[node 0 rank 1] 65\n" in served.transcript, served.transcript
    again = kernel.run(f"%distcomp attach {name}", ["p y", "c"], timeout=300)
    assert again.ok, again.text
    assert "[node 1 rank 3] 67\n" in again.transcript, again.transcript
    assert job.wait(120) == "Completed", job.error


def test_a_killed_kernel_leaves_the_job_running_to_its_end_by_the_idle_limit(
    kernel, standin, keys, tmp_path
):
    doomed = DebugKernel(cwd=str(tmp_path))
    try:
        assert doomed.run(pointed_at(standin, keys)).ok
        folder = project(tmp_path / "proj")
        name = submitted(kernel, folder, keys, "--idle-limit 0.5")
        job = standin.job(name)
        waiting_ranks(job, range(4))
        doomed.kc.execute(f"%distcomp attach {name}", allow_stdin=True)
        request = doomed.kc.get_stdin_msg(timeout=60)  # at the prompt, nobody answers
        assert request["content"]["prompt"] == "(Pdb ranks 0-3) "
        kernel_process = psutil.Process(doomed.km.provisioner.process.pid)
        ours = [p for p in kernel_process.children(recursive=True) if "ssh" in p.name()]
        assert ours, "the kernel holds an SSH connection to each node"
        kernel_process.kill()  # SIGKILL: no atexit hook, no detach
        assert not psutil.wait_procs(ours, timeout=30)[1]  # its tunnels ended with it
    finally:
        doomed.close()
    wait_for(
        lambda: all(
            "total 64" in job.log_text(f"user_logs/std_log_process_{r}.txt") for r in range(4)
        ),
        what="the ranks running on without the notebook",
    )
    (folder / "go").write_text("")
    assert job.wait(180) == "Completed", job.error  # the next breakpoint waited 0.5 min
    log = job.log_text("user_logs/std_log_process_0.txt")
    assert "the notebook detached; the rank runs on" in log, log
    assert "no notebook attached within 0.5 min (DISTCOMP_IDLE_MINUTES)" in log, log
    assert "y 64" in log
