"""GPU ranks, on a machine with at least one CUDA GPU (``make test-gpu`` runs these alone;
elsewhere they are skipped with the reason): torch's NCCL Flight Recorder in
``%distcomp collectives``, a CUDA out-of-memory error on one rank, ``compare`` and check mode
on CUDA tensors, each rank's device and memory in ``%distcomp status``, and a DDP training
script unchanged as a component's command.

World sizes fit the machine: NCCL takes one GPU per rank (it refuses two ranks on one GPU,
"Duplicate GPU detected"), so its group holds ``min(GPUS, WORLD)`` ranks; gloo with CUDA
tensors puts several ranks on one GPU.
"""

from __future__ import annotations

import time

import pytest

from .ranks_support import TORCH_SPEC, define, loaded_shell, run_cell


def _gpus() -> int:
    try:
        import torch
    except ImportError:
        return 0
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


GPUS = _gpus()
#: two ranks on gloo, their CUDA tensors on GPU rank % GPUS; NCCL's group: one rank a GPU
WORLD = 2
NCCL_RANKS = min(GPUS, WORLD)

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.slow,
    pytest.mark.skipif(GPUS == 0, reason="needs a CUDA GPU (torch sees none on this machine)"),
]

INIT = (
    "%%distcomp run g\n"
    "import torch, torch.distributed as dist\n"
    "if not dist.is_initialized():\n"
    "    dist.init_process_group('gloo')\n"
    "rank = dist.get_rank()\n"
    "torch.cuda.set_device(rank % torch.cuda.device_count())\n"
    f"nccl = dist.new_group(ranks=list(range({NCCL_RANKS})), backend='nccl')"
)


@pytest.fixture(scope="module")
def ip():
    with loaded_shell() as shell:
        define(shell, "g", TORCH_SPEC, nodes=1, per_node=WORLD)
        cell = run_cell(shell, INIT)
        assert cell.ok, cell.traceback_text()
        yield shell
        run_cell(shell, "%distcomp stop")


def ready(ip) -> None:
    """A usable world: restarted when an earlier test left it blocked."""
    if not run_cell(ip, "%%distcomp run g\ndist.barrier()").ok:
        assert run_cell(ip, "%distcomp restart g").ok
        cell = run_cell(ip, INIT)
        assert cell.ok, cell.traceback_text()


def _record_files(ip) -> str:
    """What a failed assertion shows: rank 0's dump of torch's record and GPU facts, and
    what its torch can dump."""
    from jupyter_distcomp.local.ranks.backend import get_backend

    path = get_backend().world("g").ledger_path(0)
    shown = []
    for suffix in (".torch", ".gpu"):
        try:
            with open(path + suffix) as handle:
                shown.append(f"{suffix}: {handle.read()[:1500]}")
        except OSError as exc:
            shown.append(f"{suffix}: {exc}")
    probe = run_cell(
        ip,
        "%%distcomp run g --ranks 0\n"
        "import os\n"
        "c10d = torch._C._distributed_c10d\n"
        "print('FR', os.environ.get('TORCH_FR_BUFFER_SIZE'), [n for n in dir(c10d) if 'dump' in n])\n"
        "for n in [n for n in dir(c10d) if 'dump' in n and 'json' in n]:\n"
        "    try:\n"
        "        print(n, getattr(c10d, n)(True, True)[:600])\n"
        "    except Exception as exc:\n"
        "        print(n, 'raised', repr(exc))",
    )
    return "\n".join([*shown, probe.stdout, probe.stderr])


def _wait_for(ip, line: str, wanted: str, times: int = 1, seconds: float = 15) -> str:
    """The output of ``line`` once it holds ``wanted`` ``times`` times (the ranks write
    their GPU facts and torch's record every 2 s), or its last output."""
    deadline = time.monotonic() + seconds
    while True:
        cell = run_cell(ip, line)  # status is a displayed table, the others print
        text = "\n".join([cell.stdout, *(o.data.get("text/plain", "") for o in cell.outputs)])
        if text.count(wanted) >= times or time.monotonic() > deadline:
            return text
        time.sleep(0.5)


def test_nccl_calls_show_in_collectives_with_their_gpu_state(ip):
    ready(ip)
    code = (
        "%%distcomp run g\n"
        f"if rank < {NCCL_RANKS}:\n"
        "    x = torch.ones(4, device='cuda')\n"
        "    for _ in range(3):\n"
        "        dist.all_reduce(x, group=nccl)\n"
        "    torch.cuda.synchronize()\n"
        "    print('sum', x[0].item())"
    )
    cell = run_cell(ip, code)
    assert cell.ok, cell.traceback_text()
    assert f"sum {float(NCCL_RANKS**3)}" in cell.stdout
    text = _wait_for(ip, "%distcomp collectives g", "completed on the GPU")
    ranks = "rank 0" if NCCL_RANKS == 1 else f"ranks 0-{NCCL_RANKS - 1}"
    shown = f"{text}\n--- what rank 0 has:\n{_record_files(ip) if 'nccl group' not in text else ''}"
    assert "nccl group" in text, shown
    assert "all_reduce ([4] float32)" in text, shown
    assert f"{ranks} completed on the GPU" in text, shown
    assert "cannot be read" not in cell.stderr


def test_status_and_where_show_each_ranks_device_and_memory(ip):
    ready(ip)
    cell = run_cell(ip, "%%distcomp run g\nkeep = torch.ones(64, 1024, 1024, device='cuda')")
    assert cell.ok, cell.traceback_text()
    last = WORLD - 1
    status = _wait_for(ip, "%distcomp status g", " 256 MiB (peak", times=WORLD)
    rows = [x for x in status.splitlines() if x.startswith("g ")]
    assert len(rows) == WORLD, status
    for rank, row in enumerate(rows):  # each rank's 64 Mi floats, on its own device
        assert f"cuda:{rank % GPUS} 256 MiB (peak" in row, status
    where = run_cell(ip, "%distcomp where g").stdout
    assert "GPU memory" in where, where
    assert f"rank {last}: cuda:{last % GPUS} (" in where and "256 MiB in use" in where, where
    assert run_cell(ip, "%%distcomp run g\ndel keep\ntorch.cuda.empty_cache()").ok


def test_compare_and_check_mode_on_cuda_tensors(ip):
    ready(ip)
    code = (
        "%%distcomp run g\n"
        "same = torch.ones(1000, device='cuda')\n"
        "odd = torch.arange(1000.0, device='cuda') + (rank == 1)\n"
        "gaps = torch.tensor([1.0, float('nan'), float('inf')], device='cuda')"
    )
    assert run_cell(ip, code).ok
    agree = run_cell(ip, "%distcomp compare g same")
    assert "torch float32 1000" in agree.stdout and "All ranks agree." in agree.stdout
    differs = run_cell(ip, "%distcomp compare g odd")
    line = next(x for x in differs.stdout.splitlines() if x.startswith("1 "))
    assert "DIFFERS" in line and float(line.split()[-1]) == pytest.approx(1.0), differs.stdout
    gaps = run_cell(ip, "%distcomp compare g gaps").stdout
    assert "(1 NaN, 1 Inf)" in gaps and "All ranks agree." in gaps, gaps
    # the checksum is torch's on every device: a CPU tensor and a CUDA one of the same bytes
    code = "%%distcomp run g\nmixed = torch.arange(10.0, device='cpu' if rank == 0 else 'cuda')"
    assert run_cell(ip, code).ok
    assert "All ranks agree." in run_cell(ip, "%distcomp compare g mixed").stdout
    check = (
        "%%distcomp run g --check-collectives\n"
        "t = torch.ones(4 if rank == 0 else 5, device='cuda')\n"
        "dist.all_reduce(t)\n"
        "print('after', t.tolist())"
    )
    cell = run_cell(ip, check)
    assert not cell.ok
    text = cell.traceback_text()
    assert "after [" not in cell.stdout, "a rank went on with a result"
    assert "CollectiveMismatch: check_collectives: all_reduce #" in text
    assert "rank 0 [4] float32, rank 1 [5] float32" in text, text


def test_a_cuda_out_of_memory_on_one_rank_names_its_device_and_the_others_wait(ip):
    ready(ip)
    assert run_cell(ip, "%%distcomp run g\nsmall = torch.ones(1024, device='cuda')").ok
    _wait_for(ip, "%distcomp status g", " (peak ", times=WORLD)  # the ranks' facts are written
    code = (
        "%%distcomp run g --timeout 30\n"
        "if rank == 1:\n"
        "    huge = torch.empty(1 << 48, dtype=torch.uint8, device='cuda')\n"
        "dist.barrier()"
    )
    cell = run_cell(ip, code)
    assert not cell.ok
    text = cell.traceback_text()
    assert "OutOfMemoryError" in text, text
    assert "GPU memory of rank 1, " in text and f"cuda:{1 % GPUS} (" in text, text
    assert "rank 0 waits" in text and "barrier" in text, text


DDP_SCRIPT = """\
import os
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

local = int(os.environ["LOCAL_RANK"])
world = int(os.environ["WORLD_SIZE"])
backend = "nccl" if world <= torch.cuda.device_count() else "gloo"
dist.init_process_group(backend)
torch.cuda.set_device(local % torch.cuda.device_count())
device = torch.device("cuda", local % torch.cuda.device_count())
torch.manual_seed(0)
model = DDP(torch.nn.Linear(20, 1).to(device), device_ids=[device.index])
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
data = torch.Generator().manual_seed(dist.get_rank())
for epoch in range(2):
    for _ in range(8):
        x = torch.randn(32, 20, generator=data).to(device)
        loss = torch.nn.functional.mse_loss(model(x), x.sum(1, keepdim=True))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    print(f"[GPU{dist.get_rank()}] epoch {epoch} loss {loss.item():.3f} on {device}")
dist.destroy_process_group()
"""

DDP_SPEC = """\
name: gpu_ddp
type: DistributedComponent
code: {code}
launcher:
  type: torch.distributed
  additional_arguments: python multinode.py
"""


def test_a_ddp_training_script_runs_unchanged_as_the_command(ip, tmp_path):
    (tmp_path / "multinode.py").write_text(DDP_SCRIPT)
    assert run_cell(ip, f"%%distcomp gpu_ddp\n{DDP_SPEC.format(code=tmp_path)}").ok
    ip.user_ns["gpu_ddp"].runsettings.resource_layout.configure(
        instance_count=1, process_count_per_node=NCCL_RANKS
    )
    cell = run_cell(ip, "%distcomp command gpu_ddp --timeout 180")
    assert cell.ok, cell.traceback_text()
    for rank in range(NCCL_RANKS):
        assert f"[GPU{rank}] epoch 1 loss" in cell.stdout, cell.stdout
        assert f"on cuda:{rank}" in cell.stdout
