"""Each emulated node sees its own share of the machine's GPUs as devices 0..k-1.

The GPUs the kernel sees come from its ``CUDA_VISIBLE_DEVICES`` (else ``nvidia-smi -L``);
on this CPU machine the tests set that variable to stand for GPUs, as a user hands the
emulated nodes some GPUs, and check the environment the real rank processes get.
"""

from __future__ import annotations

import json

import pytest

from jupyter_distcomp.core.spec_parsing import load_component
from jupyter_distcomp.local.command import run_command
from jupyter_distcomp.machine import gpus
from jupyter_distcomp.notebook.views.status import StatusTable

PROGRAM = r"""
import json, os, sys
rank = os.environ.get("RANK", os.environ.get("OMPI_COMM_WORLD_RANK"))
local = os.environ.get("LOCAL_RANK", os.environ.get("OMPI_COMM_WORLD_LOCAL_RANK"))
with open(os.path.join(sys.argv[1], f"rank{rank}.json"), "w") as f:
    json.dump([os.environ.get("CUDA_VISIBLE_DEVICES"), local], f)
print("ran", rank)
"""

SPEC = """
name: gpus
type: DistributedComponent
outputs:
  out: {{type: path}}
code: {code}
launcher:
  type: {launcher}
  additional_arguments: python prog.py {{outputs.out}}
"""


def run(tmp_path, launcher: str, nodes: int, per_node: int, lines: list[str] | None = None):
    code = tmp_path / "code"
    code.mkdir(exist_ok=True)
    (code / "prog.py").write_text(PROGRAM)
    component = load_component(SPEC.format(code=code, launcher=launcher), base_dir=tmp_path)
    component.runsettings.resource_layout.configure(
        instance_count=nodes, process_count_per_node=per_node
    )
    out = tmp_path / "out"
    said = lines if lines is not None else []
    run_command(
        component,
        outputs={"out": str(out)},
        cwd=tmp_path,
        stream=lambda text, file=None, flush=False: said.append(text),
    )
    return [json.loads((out / f"rank{r}.json").read_text()) for r in range(nodes * per_node)]


@pytest.mark.slow
@pytest.mark.parametrize("launcher", ["torch.distributed", "mpi"])
def test_each_node_sees_its_share_of_the_gpus_from_device_0(tmp_path, monkeypatch, launcher):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4,5,6,7")  # the GPUs the kernel may use
    seen = run(tmp_path, launcher, nodes=2, per_node=2)
    # node 0: GPUs 4 and 5 as its devices 0 and 1; node 1: GPUs 6 and 7; LOCAL_RANK picks
    assert seen == [["4,5", "0"], ["4,5", "1"], ["6,7", "0"], ["6,7", "1"]]


@pytest.mark.slow
def test_one_node_sees_what_the_kernel_sees(tmp_path, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")
    assert run(tmp_path, "torch.distributed", nodes=1, per_node=2) == [["2,3", "0"], ["2,3", "1"]]


@pytest.mark.slow
def test_fewer_gpus_than_processes_on_a_node_is_said_once_before_the_start(tmp_path, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "9")  # a 1-GPU machine, as in the issue
    lines: list[str] = []
    run(tmp_path, "torch.distributed", nodes=1, per_node=2, lines=lines)
    notice = lines[0]  # before any rank's output
    assert "runs 2 processes per node, but node 0 has 1 GPU(s)" in notice
    assert "Duplicate GPU detected" in notice
    assert "Fix: process_count_per_node = 1" in notice and '"gloo"' in notice
    again: list[str] = []
    run(tmp_path, "torch.distributed", nodes=1, per_node=2, lines=again)
    assert not [line for line in again if "GPU(s)" in line]  # once per layout and GPUs

    # the mpi launcher does not give each process a GPU: nothing to say
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "8")
    quiet: list[str] = []
    run(tmp_path, "mpi", nodes=1, per_node=2, lines=quiet)
    assert not [line for line in quiet if "GPU(s)" in line]


def test_shares_and_devices():
    assert gpus.node_shares(["0", "1", "2", "3", "4"], 2) == [["0", "1"], ["2", "3"]]
    assert gpus.node_shares(["0"], 2) == [["0"], ["0"]]  # fewer GPUs than nodes: shared
    assert gpus.node_environments(1, ["0", "1"]) == [{}]
    assert gpus.node_environments(2, []) == [{}, {}]
    env = {"CUDA_VISIBLE_DEVICES": "6,7", "LOCAL_RANK": "1"}
    assert gpus.rank_device(env) == "cuda:1 (GPU 7)"
    assert gpus.rank_device({"LOCAL_RANK": "2"}, ["0", "1"]) == "cpu (its node has 2 GPU(s))"
    assert gpus.rank_device({"OMPI_COMM_WORLD_LOCAL_RANK": "0"}, []) == "cpu"


def test_nodes_sharing_a_gpu_are_named():
    said = gpus.shortage_notice("torch.distributed", 2, 1, ["3"])
    assert said is not None and "2 nodes share this machine's 1 GPU(s)" in said
    assert "Fix: instance_count = 1 or fewer" in said
    assert gpus.shortage_notice("torch.distributed", 2, 1, ["3"]) is None  # said once
    assert gpus.shortage_notice("torch.distributed", 2, 1, ["3", "4"]) is None  # one each


def test_the_kernels_gpus_come_from_its_cuda_visible_devices(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1,3,-1,5")
    assert gpus.kernel_gpus() == ["1", "3"]  # CUDA stops at an invalid entry
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert gpus.kernel_gpus() == []


def test_status_shows_each_ranks_device_where_there_are_gpus():
    record = {"name": "ddp", "rank": 2, "node": 1, "local_rank": 0, "state": "idle", "pid": 7}
    text = repr(StatusTable([{**record, "device": "cuda:0 (GPU 2)"}]))
    assert text.splitlines()[0].split()[-1] == "device"
    assert text.splitlines()[1].endswith("cuda:0 (GPU 2)")
    assert "device" not in repr(StatusTable([{**record, "device": "cpu"}]))


def test_env_shows_each_ranks_device_before_a_start(ip, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1,2,3")
    ip.run_line_magic("config", "DistComp.prestart = False")
    try:
        ip.run_cell("%%distcomp gpus_env\n" + SPEC.format(code=".", launcher="torch.distributed"))
        session = ip.magics_manager.registry["DistCompMagics"].session
        ip.user_ns["gpus_env"].runsettings.resource_layout.configure(
            instance_count=2, process_count_per_node=2
        )
        view = session.env_table("gpus_env").view  # what `%distcomp env gpus_env` shows
        column = view.header.index("device")
        assert [row[column] for row in view.rows] == [
            "cuda:0 (GPU 0)",
            "cuda:1 (GPU 1)",
            "cuda:0 (GPU 2)",
            "cuda:1 (GPU 3)",
        ]
        visible = view.header.index("CUDA_VISIBLE_DEVICES")
        assert [row[visible] for row in view.rows] == ["0,1", "0,1", "2,3", "2,3"]
    finally:
        ip.run_line_magic("config", "DistComp.prestart = True")
