"""Each emulated node of a multi-node layout has its own loopback address, as Azure ML's
nodes have their own: node 1 finds node 0 at MASTER_ADDR, not at ``localhost``.

Real torch.distributed ranks (gloo) rendezvous through ``%distcomp command``: the correct
program passes unchanged; one that looks for node 0 at localhost fails on node 1 and says so.
"""

from __future__ import annotations

import json

import pytest

from jupyter_distcomp.core.spec_parsing import load_component
from jupyter_distcomp.errors import RankError
from jupyter_distcomp.local.command import run_command

PROGRAM = r"""
import datetime, json, os, sys
import torch, torch.distributed as dist
init, out = sys.argv[1], sys.argv[2]
rank = int(os.environ["RANK"])
url = "env://" if init == "env" else f"tcp://localhost:{os.environ['MASTER_PORT']}"
dist.init_process_group(
    "gloo", init_method=url, rank=rank, world_size=int(os.environ["WORLD_SIZE"]),
    timeout=datetime.timedelta(seconds=8),
)
total = torch.tensor([float(rank + 1)])
dist.all_reduce(total)
with open(os.path.join(out, f"rank{rank}.json"), "w") as f:
    json.dump({"total": total.item(), "master": os.environ["MASTER_ADDR"],
               "hosts": os.environ["AZ_BATCH_HOST_LIST"]}, f)
dist.destroy_process_group()
"""

SPEC = """
name: rendezvous
type: DistributedComponent
inputs:
  init: {{type: String, default: env}}
outputs:
  out: {{type: path}}
code: {code}
launcher:
  type: torch.distributed
  additional_arguments: python prog.py {{inputs.init}} {{outputs.out}}
"""

pytestmark = pytest.mark.slow


def component(tmp_path, nodes: int):
    pytest.importorskip("torch")
    code = tmp_path / "code"
    code.mkdir(exist_ok=True)
    (code / "prog.py").write_text(PROGRAM)
    made = load_component(SPEC.format(code=code), base_dir=tmp_path)
    made.runsettings.resource_layout.configure(instance_count=nodes, process_count_per_node=1)
    return made


def test_node_1_reaches_node_0_at_master_addr(tmp_path):
    out = tmp_path / "out"
    run_command(component(tmp_path, 2), outputs={"out": str(out)}, stream=None, cwd=tmp_path)
    seen = [json.loads((out / f"rank{r}.json").read_text()) for r in range(2)]
    assert [s["total"] for s in seen] == [3.0, 3.0]
    assert {s["master"] for s in seen} == {"127.0.0.2"}  # node 0's own address
    assert {s["hosts"] for s in seen} == {"127.0.0.2,127.0.0.3"}


def test_node_1_looking_for_node_0_at_localhost_fails_and_says_so(tmp_path):
    lines: list[str] = []
    with pytest.raises(RankError):
        run_command(
            component(tmp_path, 2),
            inputs={"init": "localhost"},
            outputs={"out": str(tmp_path / "out")},
            stream=lambda text, file=None, flush=False: lines.extend(text.splitlines()),
            cwd=tmp_path,
            timeout=60,
        )
    said = [line for line in lines if "looked for node 0 at localhost" in line]
    assert said and said[0].startswith("[node 1 rank 1] distcomp: node 1 looked for node 0")
    assert "MASTER_ADDR (127.0.0.2)" in said[0]
    assert not [line for line in lines if line.startswith("[node 0") and "looked for" in line]
    assert not list((tmp_path / "out").glob("rank*.json"))  # no rank got past the rendezvous


def test_one_node_rendezvous_at_localhost_as_before(tmp_path):
    out = tmp_path / "out"
    run_command(
        component(tmp_path, 1),
        inputs={"init": "localhost"},
        outputs={"out": str(out)},
        stream=None,
        cwd=tmp_path,
    )
    assert json.loads((out / "rank0.json").read_text())["master"] == "127.0.0.1"
