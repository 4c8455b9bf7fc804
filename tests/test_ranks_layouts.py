"""Other layouts and launchers on real ranks, layout changes, and a clean stop.

1x1 and 1x4 (more ranks than this machine's cores: --oversubscribe), an mpi4py allreduce on 2
ranks in a cell and through `%distcomp command`, torch.distributed DDP
with gloo and ``init_method="env://"`` across ranks, TensorFlow's TF_CONFIG, and no process
of ours left after ``%distcomp stop`` and ``%unload_ext``.
"""

from __future__ import annotations

import json
import os

import pytest

from jupyter_distcomp.errors import strip_ansi

from .ranks_support import (
    MPI_SPEC,
    TF_SPEC,
    TORCH_SPEC,
    alive,
    define,
    our_processes,
    run_cell,
    wait_gone,
)

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def ip():
    from IPython.testing.globalipapp import get_ipython

    shell = get_ipython()
    shell.run_line_magic("load_ext", "jupyter_distcomp")
    yield shell
    shell.run_line_magic("unload_ext", "jupyter_distcomp")


def test_one_by_one_then_a_changed_layout_restarts_saying_so(ip):
    define(ip, "single", MPI_SPEC, nodes=1, per_node=1)
    cell = run_cell(ip, "%%distcomp run single\nprint(mpi_size, mpi_rank)")
    assert cell.ok and "[rank 0] 1 0" in cell.stdout
    ip.user_ns["single"].runsettings.resource_layout.configure(process_count_per_node=4)
    cell = run_cell(
        ip,
        "%%distcomp run single\nimport os\nprint(mpi_size, os.environ['OMPI_COMM_WORLD_LOCAL_RANK'])",
    )
    assert cell.ok, cell.stdout
    # news of the user's own change, not an error: on stdout
    assert "layout of single changed" in cell.stdout and "restarting" in cell.stdout
    assert "layout of single changed" not in cell.stderr
    assert sorted(line for line in cell.stdout.splitlines() if line.startswith("[rank")) == [
        "[rank 0] 4 0",
        "[rank 1] 4 1",
        "[rank 2] 4 2",
        "[rank 3] 4 3",
    ]
    run_cell(ip, "%distcomp stop single")


def test_torch_ddp_with_gloo_and_env_init_across_ranks(ip):
    define(ip, "ddp", TORCH_SPEC, nodes=2, per_node=1)
    code = """
import os, torch, torch.distributed as dist
dist.init_process_group("gloo", init_method="env://")
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(2, 1))
loss = model(torch.ones(4, 2) * (dist.get_rank() + 1)).sum()
loss.backward()
total = torch.tensor([float(dist.get_rank() + 1)])
dist.all_reduce(total)
grads = [p.grad.clone() for p in model.parameters()]
print(dist.get_rank(), dist.get_world_size(), os.environ["LOCAL_RANK"], os.environ["NODE_RANK"], int(total.item()))
dist.barrier()
dist.destroy_process_group()
"""
    cell = run_cell(ip, f"%%distcomp run ddp --timeout 120\n{code}")
    assert cell.ok, cell.traceback_text() if cell.error else cell.stdout
    lines = sorted(line for line in cell.stdout.splitlines() if "rank" in line)
    assert lines == ["[node 0 rank 0] 0 2 0 0 3", "[node 1 rank 1] 1 2 0 1 3"]
    from jupyter_distcomp.core.layout import rank_environments
    from jupyter_distcomp.local.ranks.backend import get_backend

    port = int(get_backend().world("ddp").envs[0]["MASTER_PORT"])
    nodes = ["127.0.0.2", "127.0.0.3"]  # each emulated node on its own loopback address
    envs = rank_environments(
        "torch.distributed", 2, 1, master_addr=nodes[0], master_port=port, node_hosts=nodes
    )
    cell = run_cell(ip, "%%distcomp run ddp\nimport os, json\nprint(json.dumps(dict(os.environ)))")
    for line in cell.stdout.splitlines():
        rank = int(line.split("] ")[0].split()[-1])
        env = json.loads(line.split("] ", 1)[1])
        assert {k: env.get(k) for k in envs[rank]} == envs[rank]
        # Open MPI's own per-process numbers would contradict the emulated nodes
        assert "OMPI_COMM_WORLD_RANK" not in env and "OMPI_COMM_WORLD_LOCAL_RANK" not in env
    # node 1 looking for node 0 at localhost finds itself, as on Azure ML, and says so
    code = """
import datetime, os, torch.distributed as dist
dist.init_process_group("gloo", init_method=f"tcp://localhost:{os.environ['MASTER_PORT']}",
    rank=int(os.environ["RANK"]), world_size=2, timeout=datetime.timedelta(seconds=6))
"""
    ip.run_line_magic("config", "DistComp.hang_notice = 1")
    try:
        cell = run_cell(ip, f"%%distcomp run ddp\n{code}")
    finally:
        ip.run_line_magic("config", "DistComp.hang_notice = 30")
    assert not cell.ok
    notice = [line for line in cell.stderr.splitlines() if "looked for node 0" in line]
    assert notice and notice[0].startswith("[rank 1] distcomp: node 1 looked for node 0")
    report = strip_ansi(cell.traceback_text())
    assert "distcomp: node 1 looked for node 0 at localhost" in report, report
    assert "node 0 is at MASTER_ADDR (127.0.0.2)" in report
    run_cell(ip, "%distcomp stop ddp")


MPI4PY_ALLREDUCE = """\
import numpy as np
from mpi4py import MPI

comm = MPI.COMM_WORLD
total = comm.allreduce(comm.Get_rank() + 1)
summed = np.empty(3)
comm.Allreduce(np.arange(3.0) * (comm.Get_rank() + 1), summed)
print(f"rank {comm.Get_rank()} of {comm.Get_size()}: allreduce {total} Allreduce {summed.tolist()}")
"""


def test_mpi4py_allreduce_on_two_ranks_in_a_cell_and_through_the_command(ip, tmp_path):
    (tmp_path / "train.py").write_text(MPI4PY_ALLREDUCE)
    spec = MPI_SPEC.replace("name: ranks_demo", f"name: mpi4py_demo\ncode: {tmp_path}")
    define(ip, "m4", spec, nodes=1, per_node=2)
    expected = [f"[rank {r}] rank {r} of 2: allreduce 3 Allreduce [0.0, 3.0, 6.0]" for r in (0, 1)]
    cell = run_cell(ip, f"%%distcomp run m4 --timeout 120\n{MPI4PY_ALLREDUCE}")
    assert cell.ok, cell.traceback_text() if cell.error else cell.stdout
    assert sorted(line for line in cell.stdout.splitlines() if "Allreduce" in line) == expected
    command = run_cell(ip, "%distcomp command m4 --timeout 120")
    assert command.ok, command.traceback_text() if command.error else command.stdout
    assert sorted(line for line in command.stdout.splitlines() if "Allreduce" in line) == expected
    run_cell(ip, "%distcomp stop m4")


def test_tensorflow_ranks_read_tf_config(ip):
    define(ip, "tf", TF_SPEC, nodes=2, per_node=1)
    code = "import os, json\ncfg = json.loads(os.environ['TF_CONFIG'])\nprint(json.dumps(cfg))"
    cell = run_cell(ip, f"%%distcomp run tf\n{code}")
    assert cell.ok
    from jupyter_distcomp.local.ranks.backend import get_backend

    expected = get_backend().world("tf").envs  # TF_CONFIG ports are picked per world
    for line in cell.stdout.splitlines():
        rank = int(line.split("] ")[0].split()[-1])
        assert json.loads(line.split("] ", 1)[1]) == json.loads(expected[rank]["TF_CONFIG"])
    run_cell(ip, "%distcomp stop tf")


def test_deepspeed_ranks_get_the_pytorch_variables_as_on_azure(ip):
    from jupyter_distcomp.local.ranks.backend import get_backend

    define(ip, "ds", MPI_SPEC.replace("type: mpi", "type: deepspeed"), nodes=1, per_node=2)
    code = "import os, json\nprint(json.dumps(dict(os.environ)))"
    cell = run_cell(ip, f"%%distcomp run ds\n{code}")
    assert cell.ok
    expected = get_backend().world("ds").envs
    for line in cell.stdout.splitlines():
        rank = int(line.split("] ")[0].split()[-1])
        env = json.loads(line.split("] ", 1)[1])
        assert {k: env.get(k) for k in expected[rank]} == expected[rank]
        assert env["RANK"] == str(rank) and env["AZUREML_PROCESS_NAME"] == f"rank_{rank}"
        assert "OMPI_COMM_WORLD_RANK" not in env  # Azure's PyTorch distribution has no mpirun
    run_cell(ip, "%distcomp stop ds")


def rank_lines(cell) -> dict[int, dict]:
    """What each rank printed as JSON, by rank."""
    found = {}
    for line in cell.stdout.splitlines():
        if line.startswith("["):
            found[int(line.split("] ")[0].split()[-1])] = json.loads(line.split("] ", 1)[1])
    return found


@pytest.mark.parametrize(
    ("launcher", "keys"),
    [("torch.distributed", ["MASTER_PORT"]), ("mpi", ["AZ_BATCH_MASTER_NODE"]),
     ("tensorflow", ["TF_CONFIG"])],
)  # fmt: skip
def test_every_view_shows_the_ports_the_ranks_hold(ip, launcher, keys):
    name = f"port_{launcher.split('.')[0]}"
    define(ip, name, MPI_SPEC.replace("type: mpi", f"type: {launcher}"), nodes=2, per_node=1)
    before = run_cell(ip, f"%distcomp env {name}").outputs[0].data["text/plain"]
    assert "<chosen at start>" in before and "ports chosen when the ranks start" in before
    code = f"import os, json\nprint(json.dumps({{k: os.environ[k] for k in {keys!r}}}))"
    cell = run_cell(ip, f"%%distcomp run {name}\n{code}")
    assert cell.ok, cell.stdout
    held = rank_lines(cell)
    after = run_cell(ip, f"%distcomp env {name}").outputs[0].data["text/plain"]
    again = run_cell(ip, f"%distcomp env {name}").outputs[0].data["text/plain"]
    assert after == again and "held by the running ranks" in after  # no new port per call
    panel = ip.magics_manager.registry["DistCompMagics"].session.panel(name)
    for rank, values in held.items():
        for key, value in values.items():
            if key == "TF_CONFIG":  # shown in readable parts: each task's host:port
                hosts = [h for group in json.loads(value)["cluster"].values() for h in group]
                assert hosts and all(h in after for h in hosts), (rank, key)
                continue
            assert value in after, (rank, key)
            assert value.rsplit(":", 1)[-1] in panel.preview.value
    run_cell(ip, f"%distcomp stop {name}")


def test_node_local_files_give_each_node_its_own_copy_of_the_notebook_folder(
    ip, tmp_path, monkeypatch
):
    monkeypatch.chdir(tmp_path)  # the notebook's folder
    (tmp_path / "data.txt").write_text("prepared")
    define(ip, "disks", MPI_SPEC, nodes=2, per_node=1)
    session = ip.magics_manager.registry["DistCompMagics"].session
    ip.run_line_magic("config", "DistComp.node_local_files = False")
    caption = repr(session.env_table("disks"))  # what `%distcomp env disks` shows
    assert "%%distcomp run: all ranks in the notebook's folder" in caption
    ip.run_line_magic("config", "DistComp.node_local_files = True")  # the default
    try:
        caption = repr(session.env_table("disks"))
        assert "%%distcomp run: each node in its own copy of the notebook's folder" in caption
        code = f"""
import os, tempfile
from mpi4py import MPI
if mpi_rank == 0:
    open("snapshot.pt", "w").write("node 0")
    open(os.path.join(tempfile.gettempdir(), "cache"), "w").write("node 0")
MPI.COMM_WORLD.Barrier()
here = os.getcwd()
print(os.path.exists("snapshot.pt"), os.path.exists(os.path.join(tempfile.gettempdir(), "cache")),
      open("data.txt").read(), here != {str(tmp_path)!r}, here.endswith(f"node-{{mpi_rank}}/code"))
"""
        cell = run_cell(ip, f"%%distcomp run disks --timeout 60\n{code}")
        assert cell.ok, cell.traceback_text() if cell.error else cell.stdout
        lines = sorted(line for line in cell.stdout.splitlines() if "rank" in line)
        assert lines == [
            "[node 0 rank 0] True True prepared True True",
            "[node 1 rank 1] False False prepared True True",
        ]
        assert sorted(p.name for p in tmp_path.iterdir()) == ["data.txt"]
    finally:
        run_cell(ip, "%distcomp stop disks")


def test_node_local_files_with_a_fifo_in_the_notebook_folder_end_the_start_saying_so(
    ip, tmp_path, monkeypatch
):
    monkeypatch.chdir(tmp_path)  # the notebook's folder, with a named pipe in it
    os.mkfifo(tmp_path / "logpipe")
    define(ip, "fifo", MPI_SPEC, nodes=2, per_node=1)
    before = {p.pid for p in our_processes()}
    ip.run_line_magic("config", "DistComp.node_local_files = True")
    try:
        cell = run_cell(ip, "%%distcomp run fifo --timeout 60\nprint('never')")
        assert not cell.ok and "never" not in cell.stdout
        message = strip_ansi(cell.traceback_text())
        assert "logpipe (a FIFO)" in message and ".amlignore" in message, message
        assert "mpiexec said" not in message  # the folder's fault, not mpiexec's
        status = run_cell(ip, "%distcomp status fifo").outputs[0].data["text/plain"]
        assert "starting" not in status, status
        assert wait_gone([p for p in our_processes() if p.pid not in before]) == []
    finally:
        ip.run_line_magic("config", "DistComp.node_local_files = False")
        run_cell(ip, "%distcomp stop fifo")


def test_stop_and_unload_leave_no_process_behind(ip):
    before = {p.pid for p in our_processes()}
    define(ip, "gone", MPI_SPEC, nodes=1, per_node=2)
    assert run_cell(ip, "%%distcomp run gone\nprint('up')").ok
    ours = [p for p in our_processes() if p.pid not in before]
    names = " ".join(p.name() for p in ours)
    assert "prterun" in names or "mpiexec" in names, names
    assert len(ours) >= 1 + 2 + 2  # controller, mpiexec (+daemon), 2 ranks, 2 nannies
    cell = run_cell(ip, "%distcomp stop gone")
    assert cell.ok and "Stopped the ranks of gone" in cell.stdout
    assert wait_gone(ours) == []
    status = run_cell(ip, "%distcomp status gone")
    assert "No ranks running" in status.outputs[0].data["text/plain"]

    assert run_cell(ip, "%%distcomp run gone\nprint('again')").ok
    ours = [p for p in our_processes() if p.pid not in before]
    assert alive(ours)
    ip.run_line_magic("unload_ext", "jupyter_distcomp")
    assert wait_gone(ours) == []
    ip.run_line_magic("load_ext", "jupyter_distcomp")
