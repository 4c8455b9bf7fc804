"""``%distcomp command`` / ``run_command``: the spec's command on real local rank processes.

Every test here starts real processes (one per rank, or one ``mpiexec`` with real MPI ranks)
running a small program, and checks what a user would: what the program saw (argv,
variables, MPI world), what was printed and when, how a failure is reported, and that no
process of the run is left behind. Processes are counted by the test's own unique folder,
which appears in every command line of the run (never a global ``pgrep``).
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from dataclasses import replace
from pathlib import Path

import psutil
import pytest

from jupyter_distcomp.core.layout import rank_environments
from jupyter_distcomp.core.spec_parsing import load_component
from jupyter_distcomp.errors import RankError, SpecError
from jupyter_distcomp.local.command import run_command

PROGRAM = r"""
import json, os, signal, sys, time
mode, value, out = sys.argv[1], sys.argv[2], sys.argv[3]
rank = int(os.environ.get("RANK", os.environ.get("OMPI_COMM_WORLD_RANK", "-1")))
if rank < 0:
    rank = json.loads(os.environ["TF_CONFIG"])["task"]["index"]
if mode == "env":
    info = {"argv": sys.argv[1:], "env": dict(os.environ), "cwd": os.getcwd()}
    if os.environ.get("WANT_MPI"):
        from mpi4py import MPI
        comm = MPI.COMM_WORLD
        info["mpi"] = [comm.Get_rank(), comm.Get_size(), comm.allreduce(1)]
    with open(os.path.join(out, f"rank{rank}.json"), "w") as f:
        json.dump(info, f)
    print(f"hello from {rank}")
    print(f"warning from {rank}", file=sys.stderr)
elif mode in ("fail", "kill"):
    print(f"started {rank}")
    if rank == 1:
        time.sleep(0.3)
        print("boom: rank 1 cannot go on", file=sys.stderr)
        if mode == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        sys.exit(3)
    time.sleep(60)
elif mode == "raise":  # every rank fails the same way, each in its own time, and each
    import atexit  # takes a while to exit (as mpi4py's MPI_Finalize may): rank 0 ends first
    atexit.register(time.sleep, 1 if rank == 0 else 5)
    time.sleep(0.1 * rank)
    def load_shard():
        raise ValueError("the shard is empty")
    print(f"loading {rank}")
    load_shard()
elif mode == "hang":
    print(f"hanging {rank}")
    time.sleep(60)
elif mode == "many":
    for i in range(10000):
        print(f"line {i} of {rank}")
        if i % 1000 == 0:
            print(f"err {i} of {rank}", file=sys.stderr)
elif mode in ("wait", "partial"):
    if mode == "wait":
        print(f"ready {rank}")
    else:  # no newline: a progress message must show all the same
        sys.stdout.write(f"ready {rank}...")
    deadline = time.time() + 30
    while not os.path.exists(os.path.join(out, "go")):
        if time.time() > deadline:
            sys.exit(1)
        time.sleep(0.02)
    print(f"done {rank}")
"""

SPEC = """
name: probe
type: DistributedComponent
inputs:
  mode: {{type: Enum, enum: [env, fail, kill, raise, hang, wait, many, partial], default: env}}
  value: {{type: String, default: plain}}
  count: {{type: Integer, default: 1, optional: true}}
  data: {{type: AnyFile, optional: true}}
outputs:
  out: {{type: path}}
code: .
launcher:
  type: {launcher}
  additional_arguments: >-
    python prog.py {{inputs.mode}} {{inputs.value}} {{outputs.out}} [--data {{inputs.data}}]
"""


def make_component(
    tmp_path: Path, launcher: str, nodes: int = 1, per_node: int = 1, suffix: str = ""
):
    code = tmp_path / "code"
    code.mkdir(exist_ok=True)
    (code / "prog.py").write_text(PROGRAM)
    spec = SPEC.format(launcher=launcher).replace("code: .", f"code: {code}")
    spec = spec.replace("[--data {inputs.data}]", "[--data {inputs.data}]" + suffix)
    component = load_component(spec, base_dir=tmp_path)
    component.runsettings.resource_layout.configure(
        instance_count=nodes, process_count_per_node=per_node
    )
    return component


def our_processes(tmp_path: Path) -> list[str]:
    """Processes whose command line mentions this test's folder: only ones we started."""
    found = []
    for proc in psutil.process_iter(["cmdline", "status"]):
        cmdline = " ".join(proc.info["cmdline"] or [])
        if str(tmp_path) in cmdline and proc.info["status"] != psutil.STATUS_ZOMBIE:
            found.append(cmdline)
    return found


class Lines:
    """A print-like stream callback that remembers each line with the time it arrived."""

    def __init__(self, on_line=None):
        self.lines: list[tuple[float, str]] = []
        self.on_line = on_line

    def __call__(self, text, file=None, flush=False):
        for line in text.splitlines():
            self.lines.append((time.monotonic(), line))
            if self.on_line:
                self.on_line(line)

    def texts(self) -> list[str]:
        return [line for _, line in self.lines]


def read_ranks(out: Path, world: int) -> list[dict]:
    return [json.loads((out / f"rank{r}.json").read_text()) for r in range(world)]


def _without_ports(env: dict) -> dict:
    config = json.loads(env["TF_CONFIG"])
    config["cluster"] = {k: [a.rsplit(":", 1)[0] for a in v] for k, v in config["cluster"].items()}
    return {**env, "TF_CONFIG": config}


def _expected_port(info: dict) -> int | None:
    env = info["env"]
    if "MASTER_PORT" in env:
        return int(env["MASTER_PORT"])
    if ":" in env.get("AZ_BATCH_MASTER_NODE", ""):
        return int(env["AZ_BATCH_MASTER_NODE"].rsplit(":", 1)[1])
    return None


CASES = [
    (launcher, nodes, per_node)
    for launcher in ("mpi", "torch.distributed")
    for nodes, per_node in ((1, 1), (1, 4), (2, 2))
] + [("deepspeed", 2, 1), ("tensorflow", 2, 1)]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("launcher", "nodes", "per_node"), CASES, ids=[f"{c[0]}-{c[1]}x{c[2]}" for c in CASES]
)
def test_each_rank_sees_its_azure_variables(tmp_path, launcher, nodes, per_node):
    component = make_component(tmp_path, launcher, nodes, per_node)
    under_mpiexec = launcher == "mpi"  # DeepSpeed runs under Azure's PyTorch distribution
    if under_mpiexec:
        component = replace(component, environment_variables={"WANT_MPI": "1"})
    lines = Lines()
    out = tmp_path / "out"
    result = run_command(component, outputs={"out": str(out)}, stream=lines, cwd=tmp_path)

    world = nodes if launcher == "tensorflow" else nodes * per_node
    assert result.returncodes == [0] * world
    infos = read_ranks(out, world)
    # one node on 127.0.0.1; several: each on its own loopback address, node 0 at MASTER_ADDR
    addrs = [f"127.0.0.{n + 2}" for n in range(nodes)] if nodes > 1 else ["127.0.0.1"]
    expected = rank_environments(
        launcher,
        nodes,
        per_node,
        master_addr=addrs[0],
        master_port=_expected_port(infos[0]),
        node_hosts=addrs if nodes > 1 else None,
    )
    if launcher == "mpi" and nodes > 1:  # NCCL on loopback, as for one node
        expected = [{**env, "NCCL_SOCKET_IFNAME": "lo"} for env in expected]
    for rank, (info, wanted) in enumerate(zip(infos, expected, strict=True)):
        seen = {key: info["env"].get(key) for key in wanted}
        if launcher == "tensorflow":  # each call picks fresh free ports: compare the rest
            seen, wanted = _without_ports(seen), _without_ports(wanted)
        assert seen == wanted, f"rank {rank}"
        node = rank // per_node if launcher != "tensorflow" else rank
        # each node (one too) in its own copy of the code folder, as Azure ML's snapshot
        assert info["cwd"].endswith(f"/node-{node}/code"), info["cwd"]
        assert not Path(info["cwd"]).exists()  # removed with the run
        if under_mpiexec:  # one MPI world of all ranks, as mpirun gives on Azure ML
            assert info["mpi"] == [rank, world, world]
        else:  # Azure starts PyTorch-distribution and tensorflow ranks without mpirun
            assert not [key for key in info["env"] if key.startswith("OMPI_COMM_WORLD")]
    label = (lambda r: f"[node {r // per_node} rank {r}]") if nodes > 1 else "[rank {}]".format
    texts = lines.texts()
    for rank in range(world):
        assert f"{label(rank)} hello from {rank}" in texts
        assert f"{label(rank)} warning from {rank}" in texts


@pytest.mark.slow
@pytest.mark.parametrize("launcher", ["torch.distributed", "mpi"])
def test_a_failing_rank_fails_the_run_and_stops_the_others(tmp_path, launcher):
    component = make_component(tmp_path, launcher, 1, 3)
    started = time.monotonic()
    with pytest.raises(RankError) as caught:
        run_command(component, inputs={"mode": "fail"}, stream=None, cwd=tmp_path)
    elapsed = time.monotonic() - started
    message = str(caught.value)
    assert "failed on rank 1:" in message
    assert "rank 1: exit code 3" in message
    assert "boom: rank 1 cannot go on" in message  # the tail of its stderr
    assert "ranks 0, 2 stopped because of the failure" in message
    result = caught.value.result
    assert [r.stopped for r in result.ranks] == [True, False, True]
    assert elapsed < 60 / 4, "the other ranks sleep 60 s: they must have been stopped"
    assert our_processes(tmp_path) == []


@pytest.mark.slow
@pytest.mark.parametrize("launcher", ["torch.distributed", "mpi"])
def test_a_rank_killed_by_a_signal_is_named(tmp_path, launcher):
    component = make_component(tmp_path, launcher, 1, 2)
    with pytest.raises(RankError) as caught:
        run_command(component, inputs={"mode": "kill"}, stream=None, cwd=tmp_path)
    assert "rank 1: killed by SIGKILL" in str(caught.value)
    assert "out of memory" in str(caught.value)
    assert our_processes(tmp_path) == []


@pytest.mark.slow
@pytest.mark.parametrize("launcher", ["torch.distributed", "mpi"])
@pytest.mark.parametrize("suffix", ["", " && echo finished"], ids=["argv", "via-sh"])
def test_a_value_with_shell_characters_is_one_argument(tmp_path, launcher, suffix):
    """Also when the template itself needs a shell (``&&``): values are quoted for it."""
    component = make_component(tmp_path, launcher, 1, 2, suffix=suffix)
    value = "a b; echo pwned $(id) `id` 'q' \"dq\" > x | y & \\"
    out = tmp_path / "out"
    lines = Lines()
    run_command(
        component, inputs={"value": value}, outputs={"out": str(out)}, stream=lines, cwd=tmp_path
    )
    for info in read_ranks(out, 2):
        assert info["argv"] == ["env", value, str(out)]
    assert not (tmp_path / "code" / "x").exists()
    assert not [line for line in lines.texts() if "pwned" in line]
    assert ("[rank 1] finished" in lines.texts()) == bool(suffix)


def test_a_missing_data_input_is_named_before_any_rank_starts(tmp_path):
    component = make_component(tmp_path, "torch.distributed")
    with pytest.raises(SpecError, match=r"data input 'data': 'nope\.csv' does not exist") as caught:
        run_command(component, inputs={"data": "nope.csv"}, stream=None, cwd=tmp_path)
    assert "--input data=PATH" in str(caught.value)
    folder = tmp_path / "a_folder"
    folder.mkdir()
    with pytest.raises(SpecError, match="is a file input"):
        run_command(component, inputs={"data": str(folder)}, stream=None, cwd=tmp_path)


def test_bad_parameter_values_are_rejected_by_type(tmp_path):
    component = make_component(tmp_path, "torch.distributed")
    with pytest.raises(SpecError, match=r"--input count='abc': input 'count' is Integer"):
        run_command(component, inputs={"count": "abc"}, stream=None, cwd=tmp_path)
    with pytest.raises(SpecError, match=r"must be one of env, fail.* Did you mean 'fail'"):
        run_command(component, inputs={"mode": "fial"}, stream=None, cwd=tmp_path)
    with pytest.raises(SpecError, match=r"has no input 'vlaue'. Did you mean 'value'"):
        run_command(component, inputs={"vlaue": "x"}, stream=None, cwd=tmp_path)
    with pytest.raises(SpecError, match="which a local run cannot read"):
        run_command(component, inputs={"data": "azureml://datastores/x/paths/y"}, cwd=tmp_path)


@pytest.mark.slow
def test_outputs_are_created_where_documented(tmp_path):
    component = make_component(tmp_path, "torch.distributed", 1, 2)
    (tmp_path / "data.csv").write_text("1,2\n")
    result = run_command(component, inputs={"data": "data.csv"}, stream=None, cwd=tmp_path)
    default = tmp_path / "outputs" / "probe" / "out"
    assert result.outputs == {"out": str(default)}
    assert sorted(p.name for p in default.iterdir()) == ["rank0.json", "rank1.json"]
    info = read_ranks(default, 2)[0]
    assert info["argv"][-2:] == ["--data", str(tmp_path / "data.csv")]  # absolute for the ranks

    nested = tmp_path / "deep" / "er" / "model"
    run_command(component, outputs={"out": "deep/er/model"}, stream=None, cwd=tmp_path)
    assert (nested / "rank1.json").exists()


@pytest.mark.slow
@pytest.mark.parametrize("launcher", ["torch.distributed", "mpi"])
def test_timeout_names_the_ranks_still_running(tmp_path, launcher):
    component = make_component(tmp_path, launcher, 1, 2)
    started = time.monotonic()
    with pytest.raises(RankError) as caught:
        run_command(component, inputs={"mode": "hang"}, timeout=2, stream=None, cwd=tmp_path)
    elapsed = time.monotonic() - started
    message = str(caught.value)
    assert "timed out after 2 s: ranks 0-1 still running" in message
    assert "KeyboardInterrupt" in message  # SIGINT first: each rank shows where it was
    assert elapsed < 60 / 4, "the ranks sleep 60 s: the time-out stopped them"
    assert our_processes(tmp_path) == []


@pytest.mark.slow
@pytest.mark.parametrize("launcher", ["torch.distributed", "mpi"])
def test_output_streams_while_the_ranks_run(tmp_path, launcher):
    """The program waits for a file that the test creates only after seeing its line."""
    component = make_component(tmp_path, launcher, 1, 2)
    out = tmp_path / "out"
    seen: list[str] = []

    def on_line(line):
        seen.append(line)
        if sum("ready" in s for s in seen) == 2:
            (out / "go").touch()

    lines = Lines(on_line)
    run_command(
        component, inputs={"mode": "wait"}, outputs={"out": str(out)}, stream=lines, cwd=tmp_path
    )
    texts = lines.texts()
    for rank in (0, 1):
        assert texts.index(f"[rank {rank}] ready {rank}") < texts.index(
            f"[rank {rank}] done {rank}"
        )
    assert len(texts) == 4


@pytest.mark.slow
@pytest.mark.parametrize("launcher", ["torch.distributed", "mpi"])
def test_a_line_without_newline_shows_while_the_rank_waits(tmp_path, launcher):
    component = make_component(tmp_path, launcher, 1, 2)
    out = tmp_path / "out"
    seen: list[str] = []

    def on_line(line):
        seen.append(line)
        if sum(s.endswith("...") for s in seen) == 2:
            (out / "go").touch()

    run_command(
        component,
        inputs={"mode": "partial"},
        outputs={"out": str(out)},
        stream=Lines(on_line),
        cwd=tmp_path,
    )
    assert "[rank 1] ready 1..." in seen
    assert "[rank 1] done 1" in seen


@pytest.mark.slow
@pytest.mark.parametrize("launcher", ["torch.distributed", "mpi"])
def test_no_line_is_lost_or_reordered_within_a_rank(tmp_path, launcher):
    component = make_component(tmp_path, launcher, 1, 4)
    lines = Lines()
    run_command(component, inputs={"mode": "many"}, stream=lines, cwd=tmp_path)
    texts = lines.texts()
    for rank in range(4):
        stdout = [t for t in texts if t.startswith(f"[rank {rank}] line ")]
        assert stdout == [f"[rank {rank}] line {i} of {rank}" for i in range(10000)]
        stderr = [t for t in texts if t.startswith(f"[rank {rank}] err ")]
        assert stderr == [f"[rank {rank}] err {i} of {rank}" for i in range(0, 10000, 1000)]
    assert len(texts) == 4 * 10010


@pytest.fixture
def cell_interrupts():
    """SIGINT raises KeyboardInterrupt, as in a kernel's cell (ipykernel installs Python's
    handler while a request runs), whatever this process inherited: a shell starts a job in
    the background with SIGINT ignored."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


@pytest.mark.slow
@pytest.mark.parametrize("launcher", ["torch.distributed", "mpi"])
@pytest.mark.usefixtures("cell_interrupts")
def test_ctrl_c_stops_every_rank(tmp_path, launcher):
    component = make_component(tmp_path, launcher, 1, 2)
    hanging: list[str] = []

    def on_line(line):  # a real SIGINT to this process, as Jupyter's interrupt sends
        hanging.append(line)
        if len(hanging) == 2:
            os.kill(os.getpid(), signal.SIGINT)

    started = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        run_command(component, inputs={"mode": "hang"}, stream=Lines(on_line), cwd=tmp_path)
    assert time.monotonic() - started < 60 / 4, "the ranks sleep 60 s: Ctrl-C stopped them"
    assert our_processes(tmp_path) == []


KERNEL = """
import sys
from jupyter_distcomp.local.command import run_command
from jupyter_distcomp.core.spec_parsing import load_component
component = load_component(sys.argv[1], base_dir=sys.argv[2])
component.runsettings.resource_layout.configure(1, 2)
run_command(component, inputs={"mode": "hang"}, cwd=sys.argv[2])
"""


@pytest.mark.slow
@pytest.mark.parametrize("launcher", ["torch.distributed", "mpi"])
def test_ranks_do_not_outlive_a_killed_kernel(tmp_path, launcher):
    """A kernel killed mid-run (kill -9, a restart) takes its ranks with it."""
    import subprocess

    spec = make_component(tmp_path, launcher).source
    kernel = subprocess.Popen(
        [sys.executable, "-c", KERNEL, spec, str(tmp_path)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert "hanging" in kernel.stdout.readline()
        assert "hanging" in kernel.stdout.readline()
        assert len(our_processes(tmp_path)) >= 2
    finally:
        kernel.kill()
        kernel.wait()
    deadline = time.monotonic() + 5
    while our_processes(tmp_path) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert our_processes(tmp_path) == []


@pytest.mark.slow
def test_through_the_magic_in_a_real_shell(tmp_path, ip, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    component = make_component(tmp_path, "torch.distributed")
    spec = component.source
    ip.run_cell_magic("distcomp", "probe", spec)
    ip.run_line_magic("distcomp", "command probe --output out=results --input value='x y'")
    assert "[rank 0] hello from 0" in capsys.readouterr().out
    info = json.loads((tmp_path / "results" / "rank0.json").read_text())
    assert info["argv"] == ["env", "x y", str(tmp_path / "results")]

    with pytest.raises(SpecError, match="input 'count' is Integer: 'abc' is not a number"):
        ip.run_line_magic("distcomp", "command probe --input count=abc")
    ip.run_line_magic("distcomp", "layout probe --process-count-per-node 2")
    with pytest.raises(RankError, match=r"failed on rank 1:\nrank 1: exit code 3") as caught:
        ip.run_line_magic("distcomp", "command probe --input mode=fail")
    shown = "\n".join(caught.value._render_traceback_())  # what the notebook shows
    assert shown.startswith("RankError: `probe` failed on rank 1:")
    assert "boom: rank 1 cannot go on" in shown
    with pytest.raises(RankError, match="timed out after 1 s"):
        ip.run_line_magic("distcomp", "command probe --input mode=hang --timeout 1")
    assert our_processes(tmp_path) == []


@pytest.mark.slow
def test_in_a_real_kernel_output_is_live_and_interrupt_stops_the_ranks(tmp_path):
    """In a real kernel, each line is an iopub message as soon as the rank prints it (the
    program waits for a file the client creates only after receiving its first line), and
    the kernel's interrupt stops every rank and ends the cell cleanly."""
    from jupyter_client.manager import start_new_kernel

    spec = make_component(tmp_path, "torch.distributed").source
    out = tmp_path / "out"
    km, kc = start_new_kernel(kernel_name="python3", cwd=str(tmp_path))
    received: list[str] = []

    def hook(msg):
        if msg["msg_type"] == "stream":
            received.append(msg["content"]["text"])
            if "ready 0" in msg["content"]["text"]:
                (out / "go").touch()
        if msg["msg_type"] == "error":
            received.append("ERROR " + msg["content"]["evalue"])

    interrupted: list[dict] = []

    def interrupt_once_hanging(msg):  # the notebook's stop button, once the rank runs
        if msg["msg_type"] == "stream" and "hanging" in msg["content"]["text"]:
            km.interrupt_kernel()
        if msg["msg_type"] == "error":
            interrupted.append(msg["content"])

    try:
        kc.execute_interactive("%load_ext jupyter_distcomp", timeout=60)
        kc.execute_interactive("%config DistComp.prestart = False", timeout=60)  # no cell ranks
        kc.execute_interactive(f"%%distcomp probe\n{spec}", timeout=60, output_hook=lambda m: None)
        reply = kc.execute_interactive(
            f"%distcomp command probe --input mode=wait --output out={out}",
            timeout=60,
            output_hook=hook,
        )
        started = time.monotonic()
        stopped = kc.execute_interactive(
            "%distcomp command probe --input mode=hang",
            timeout=60,
            output_hook=interrupt_once_hanging,
        )
        interrupt_seconds = time.monotonic() - started
        after = kc.execute_interactive("1 + 1", timeout=60, output_hook=lambda m: None)
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)
    assert reply["content"]["status"] == "ok", received
    assert "".join(received).splitlines() == ["[rank 0] ready 0", "[rank 0] done 0"]
    # interrupting the kernel stops the ranks and ends the cell with a one-line error
    assert stopped["content"]["status"] == "error"
    assert interrupted[0]["ename"] == "RankError"
    assert "interrupted: every rank was stopped" in interrupted[0]["evalue"]
    assert interrupt_seconds < 60 / 4, "the ranks sleep 60 s: the interrupt stopped them"
    assert after["content"]["status"] == "ok"  # the kernel itself is fine
    assert our_processes(tmp_path) == []


def test_a_missing_program_or_code_folder_is_a_clear_error(tmp_path):
    component = make_component(tmp_path, "torch.distributed")
    spec = component.source.replace("python prog.py", "no-such-program prog.py")
    with pytest.raises(SpecError, match="starts with 'no-such-program', which is not found"):
        run_command(load_component(spec, base_dir=tmp_path), stream=None, cwd=tmp_path)
    spec = component.source.replace(f"code: {tmp_path / 'code'}", "code: ./not_there")
    with pytest.raises(SpecError, match=r"code folder .*not_there does not exist"):
        run_command(load_component(spec, base_dir=tmp_path), stream=None, cwd=tmp_path)
    (tmp_path / "hostname").write_text("a file, not a folder\n")
    spec = component.source.replace(f"code: {tmp_path / 'code'}", f"code: {tmp_path}/hostname")
    with pytest.raises(SpecError) as caught:
        run_command(load_component(spec, base_dir=tmp_path), stream=None, cwd=tmp_path)
    assert f"code folder {tmp_path}/hostname is a file, not a folder" in str(caught.value)
    assert f"set `code:` to the folder that holds it ({tmp_path})" in str(caught.value)


def test_the_rank_supervisor_explains_a_malformed_call():
    import subprocess

    from jupyter_distcomp.local.command.launch import SUPERVISOR

    done = subprocess.run([*SUPERVISOR, "only-a-file"], capture_output=True, text=True)
    assert done.returncode == 2
    assert "usage:" in done.stderr
    done = subprocess.run(
        [*SUPERVISOR, "--direct", "--", "no-such-program"], capture_output=True, text=True
    )
    assert done.returncode == 127
    assert "cannot run 'no-such-program'" in done.stderr
