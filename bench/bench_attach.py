"""``%distcomp attach``'s figures, each against a peer measured in the same run.

Run: .venv/bin/python bench/bench_attach.py   (not a test; prints its figures; needs root)

A 2 x 2 job submitted with ``--debug`` through azure-ai-ml to the local stand-in of Azure ML,
its nodes on two network namespaces with their own sshd (tests/netns_support.py): the
figures show what SSH, the tunnels and the hops cost, not a real network's latency.

1. attach: from the job Running to every node tunnelled and told (the target: under 10 s),
   beside the peer a user would otherwise pay: one plain ``ssh NODE true`` to each node at
   once (``az ml job connect-ssh`` opens such a connection, node by node). Attached COUNT
   times (detach in between).
2. one group ``n`` over an ``allreduce`` on the 4 attached ranks, from the answer to the next
   prompt, beside the same ``n`` on 4 ranks of ``%distcomp command`` on the same hosts (the
   debugger channel reached directly, no tunnel: what attach adds; target under 2x) and on
   this machine (2 emulated nodes x 2: MPI in shared memory, not TCP between hosts); the
   same program, the same prompt code. ``BENCH_LINE`` replaces the stepped line (``x = x +
   1``: the debugger's path alone). The prompt waits for the printed output of ranks of
   ``%distcomp command`` (it shows in the cell), never for an attached job's (it goes to the
   job's logs): so local ranks are measured again without that wait, the debugger's path
   alone on both sides.
   Beside them, what the transport alone costs: a 1-byte echo from node 0 to this machine
   through the ``ssh -R`` forward attach makes, against the same echo straight over the
   bridge (ECHOES round trips each, TCP_NODELAY on both).
3. what a job nobody attaches to pays: a Python process's start (``python -c pass``, as the
   job's bash runs it) with the rank side of attach armed, against the diagnostics alone and
   against no prefix, STARTS alternated runs each (no root needed).
"""

from __future__ import annotations

import builtins
import io
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.netns_support import NamespaceHosts, unavailable

SPEC = """\
name: bench_attach
type: DistributedComponent
launcher:
  type: mpi
  additional_arguments: {python} train.py
"""
#: STEPS allreduces, one a line, after a breakpoint: each ``n`` steps over one
STEPS = 40
PROGRAM = "from mpi4py import MPI\nc = MPI.COMM_WORLD\nx = c.rank\nbreakpoint()\n" + "".join(
    os.environ.get("BENCH_LINE", "x = c.allreduce(x) % 1000") + "\n" for _ in range(STEPS)
)
#: the job attached to and detached from COUNT times: its ranks run (no breakpoint) until
#: the file ``go`` exists
RUNNING = "import os, time\nwhile not os.path.exists({go!r}):\n    time.sleep(0.1)\n"
COUNT = 5
STARTS = 30
ECHOES = 300
#: run on a node: ECHOES 1-byte round trips to HOST PORT; prints the median in seconds
ECHO_CLIENT = """\
import socket, statistics, sys, time
sock = socket.create_connection((sys.argv[1], int(sys.argv[2])))
sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
trips = []
for _ in range(int(sys.argv[3])):
    tic = time.perf_counter()
    sock.sendall(b"x")
    sock.recv(1)
    trips.append(time.perf_counter() - tic)
print(statistics.median(trips))
"""


def _component(folder: Path, program: str = PROGRAM):
    from jupyter_distcomp import load_component

    folder.mkdir(parents=True, exist_ok=True)
    (folder / "spec.yaml").write_text(SPEC.format(python=sys.executable))
    (folder / "train.py").write_text(program)
    component = load_component(folder / "spec.yaml")
    component.runsettings.resource_layout.configure(instance_count=2, process_count_per_node=2)
    return component


class _Person:
    """Types ``n`` at each prompt (``c`` once STEPS are done), timing answer -> next prompt."""

    def __init__(self) -> None:
        self.trips: list[float] = []
        self.typed_at = 0.0
        self.steps = 0

    def __call__(self, prompt: str = "") -> str:
        now = time.perf_counter()
        if self.typed_at:
            self.trips.append(now - self.typed_at)
        self.steps += 1
        if self.steps > STEPS:
            self.typed_at = 0.0
            return "c"
        self.typed_at = time.perf_counter()
        return "n"


def _prompted(serve, *args, **kwargs) -> list[float]:
    person = _Person()
    read = builtins.input
    builtins.input = person
    shown = io.StringIO()
    try:
        with redirect_stdout(shown), redirect_stderr(shown):
            serve(*args, **kwargs)
    finally:
        builtins.input = read
    if len(person.trips) < STEPS:
        raise RuntimeError(
            f"the prompt ended after {len(person.trips)} steps:\n{shown.getvalue()[-3000:]}"
        )
    return person.trips


def command_steps(
    folder: Path, hosts: NamespaceHosts | None = None, output_wait: bool = True
) -> list[float]:
    """``n`` over the allreduce on 4 ranks of ``%distcomp command``: on this machine, or
    (``hosts``) on the hosts, the debugger channel reached without a tunnel. Without
    ``output_wait`` the prompt does not wait for the ranks' printed output, which it does
    for ranks of ``%distcomp command`` (their output shows in the cell), never for attached
    ones (theirs goes to the job's logs): the debugger's path alone, as attached ranks have it."""
    from jupyter_distcomp.local.command import run_command
    from jupyter_distcomp.local.debug import group
    from jupyter_distcomp.machine.hosts import Placement

    placement = Placement(tuple(hosts.addresses), hosts.ssh_command) if hosts else None
    settle = group.UNCOUNTED_SETTLE
    group.UNCOUNTED_SETTLE = settle if output_wait else 0.0
    try:
        return _prompted(
            run_command, _component(folder), stream=None, timeout=600, placement=placement
        )
    finally:
        group.UNCOUNTED_SETTLE = settle


def plain_ssh(hosts: NamespaceHosts) -> float:
    """Seconds for one ``ssh NODE true`` to every node at once (the peer of attach)."""
    tic = time.perf_counter()
    with ThreadPoolExecutor(len(hosts.addresses)) as pool:
        done = list(pool.map(lambda i: hosts.ssh(i, "true"), range(len(hosts.addresses))))
    assert all(d.returncode == 0 for d in done), done
    return time.perf_counter() - tic


def _echo_server(host: str) -> socket.socket:
    """A listener on ``host`` that echoes every byte of each connection back."""
    server = socket.create_server((host, 0))

    def echo(conn: socket.socket) -> None:
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        with conn:
            while data := conn.recv(64):
                conn.sendall(data)

    def accept() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:  # closed
                return
            threading.Thread(target=echo, args=(conn,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    return server


def echo_trips(hosts: NamespaceHosts, link, folder: Path) -> tuple[float, float]:
    """Median seconds of a 1-byte echo from node 0 to this machine: through an ``ssh -R``
    forward on ``link`` (attach's), and straight over the bridge (the peer)."""
    client = folder / "echo_client.py"
    client.write_text(ECHO_CLIENT)
    tunnelled, straight = _echo_server("127.0.0.1"), _echo_server(hosts.gateway)
    try:
        port = link.forward(tunnelled.getsockname()[1])
        through = link.run(f"{sys.executable} {client} 127.0.0.1 {port} {ECHOES}", timeout=120)
        direct = hosts.ssh(
            0, f"{sys.executable} {client} {hosts.gateway} {straight.getsockname()[1]} {ECHOES}"
        )
        assert through is not None and through.returncode == 0, through
        assert direct.returncode == 0, direct
        return float(through.stdout), float(direct.stdout)
    finally:
        tunnelled.close()
        straight.close()


def attached(
    hosts: NamespaceHosts, folder: Path
) -> tuple[list[float], list[float], list[float], tuple[float, float]]:
    """Attach times, plain ssh times, the ``n`` steps over the allreduce on a job, and the
    echo through attach's tunnel and straight."""
    from jupyter_distcomp.azureml import submit
    from jupyter_distcomp.azureml.attach import attach_target
    from jupyter_distcomp.local.attached import AttachedJob
    from jupyter_distcomp.standin import AzureStandIn

    with AzureStandIn(
        root=folder / "standin",
        hosts=tuple(hosts.addresses),
        ssh_command=hosts.ssh_command,
        authorized_keys=hosts.dir / "authorized_keys",
        delays={"Queued": 0.0, "Preparing": 0.0},
    ) as standin:
        client = standin.ml_client(show_progress=False)

        def submitted(program: str, name: str):
            with redirect_stderr(io.StringIO()):
                job = submit(
                    _component(folder / name, program),
                    client,
                    compute="cpu",
                    debug=True,
                    ssh_key=hosts.dir / "user_key.pub",
                )
            attach_target(client, job.name, poll=0.05)  # until it runs
            return job

        go = folder / "go"
        running = submitted(RUNNING.format(go=str(go)), "running")
        times, peers = [], []
        for _ in range(COUNT):
            peers.append(plain_ssh(hosts))
            tic = time.perf_counter()  # the job runs: read its nodes' services, then attach
            target = attach_target(client, running.name)
            attachment = AttachedJob(
                running.name,
                target.destinations,
                target.folder,
                target.world_size,
                ssh_command=hosts.ssh_command,
            )
            attachment.open()
            times.append(time.perf_counter() - tic)
            attachment.detach()
        go.write_text("")
        stepping = submitted(PROGRAM, "stepping")
        target = attach_target(client, stepping.name)
        attachment = AttachedJob(
            stepping.name, target.destinations, target.folder, 4, ssh_command=hosts.ssh_command
        )
        attachment.open()
        try:
            echo = echo_trips(hosts, attachment.nodes[0].link, folder)
            steps = _prompted(attachment.wait, 300.0)  # `%distcomp wait JOB`
        finally:
            attachment.detach()
        for job in (running, stepping):
            assert standin.job(job.name).wait(120) == "Completed", standin.job(job.name).error
    return times, peers, steps, echo


def starts(folder: Path) -> dict[str, float]:
    """Median seconds of ``python -c pass`` in a snapshot: plain, diagnosed, debugged."""
    from jupyter_distcomp.azureml.snapshot import diagnosed_command, job_files

    for source, name in job_files(debug=True):
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_bytes(source.read_bytes())
    plain = f"{sys.executable} -c pass"
    env = {k: v for k, v in os.environ.items() if not k.startswith("DISTCOMP_")}
    env.pop("PYTHONPATH", None)
    sides = {
        "plain": (plain, env),
        "diagnosed": (diagnosed_command(plain), env),
        "debugged": (diagnosed_command(plain), {**env, "DISTCOMP_ATTACH_DIR": str(folder / "a")}),
    }
    took: dict[str, list[float]] = {side: [] for side in sides}
    for _ in range(STARTS):
        for side, (command, side_env) in sides.items():
            tic = time.perf_counter()
            subprocess.run(["bash", "-c", command], cwd=folder, env=side_env, check=True)
            took[side].append(time.perf_counter() - tic)
    return {side: statistics.median(times) for side, times in took.items()}


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="bench-attach-") as root:
        start = starts(Path(root))
    print(
        f"a Python process's start in a --debug job nobody attaches to: "
        f"{start['debugged'] / start['diagnosed']:.2f}x the diagnostics alone "
        f"(+{(start['debugged'] - start['diagnosed']) * 1e3:.1f} ms on "
        f"{start['diagnosed'] * 1e3:.0f} ms; without any prefix {start['plain'] * 1e3:.0f} ms)"
    )
    why = unavailable()
    if why:
        print(f"bench_attach: the attach figures skipped, no namespaced hosts: {why}")
        return
    with tempfile.TemporaryDirectory(prefix="bench-attach-") as root:
        folder = Path(root)
        local = command_steps(folder / "local")
        bare = command_steps(folder / "bare", output_wait=False)
        with NamespaceHosts(2) as hosts:
            times, peers, steps, echo = attached(hosts, folder / "job")
            direct = command_steps(folder / "direct", hosts)
    print(
        f"attach to a 2 x 2 job, Running -> attached: median {statistics.median(times):.2f} s "
        f"(max {max(times):.2f} s, target < 10 s) = {statistics.median(times) / statistics.median(peers):.1f}x "
        f"one plain ssh to each node at once ({statistics.median(peers):.2f} s)"
    )
    over = {
        k: statistics.median(v) for k, v in (("a", steps), ("h", direct), ("l", local), ("b", bare))
    }
    print(
        f"group n over an allreduce, 4 ranks (medians of {STEPS}): attached {over['a'] * 1000:.0f} "
        f"ms = {over['a'] / over['h']:.2f}x the same hosts' ranks of `%distcomp command` without "
        f"a tunnel ({over['h'] * 1000:.0f} ms; the target, < 2x), = {over['a'] / over['l']:.2f}x "
        f"local ranks on this machine ({over['l'] * 1000:.0f} ms; MPI over TCP between the hosts "
        "against shared memory)"
    )
    print(
        f"  the debugger's path alone (no wait for printed output, which attached ranks send to "
        f"the job's logs): attached = {over['a'] / over['b']:.2f}x local ranks on this machine "
        f"without that wait ({over['b'] * 1000:.0f} ms)"
    )
    print(
        f"a 1-byte echo from a node to the notebook's machine (medians of {ECHOES}): through "
        f"attach's ssh -R forward {echo[0] * 1e6:.0f} us, straight over the bridge "
        f"{echo[1] * 1e6:.0f} us: the tunnel adds {(echo[0] - echo[1]) * 1e6:.0f} us a round trip"
    )


if __name__ == "__main__":
    main()
