"""The cost of the rank side a diagnosed job carries, on a training step (target <= 1.01).

Run: .venv/bin/python bench/bench_job_side.py   (not a test; prints its figures)

A small training script on 4 ranks of the PyTorch distribution (gloo, CPU, one process a
rank with the variables Azure ML sets, ``bash -c`` of the job's command in the code
snapshot a diagnosed submit uploads): a DDP MLP (256-512-512-10, batch 64, one thread a
rank), steps timed inside the script between barriers.

1. The figure: inside one run with the job side on, two identical DDP models, one made
   with the ledger off (DDP's own C++ reduction of its gradient buckets, torch's own
   functions) and one with it on (its buckets through the ledger's comm hook, every call
   recorded), stepped by turns in blocks of BLOCK steps, each side first in every other
   block; the median over the blocks of the ratio of the neighbouring blocks' step times
   (rank 0's). Same processes, same moment: the machine's load, which on a small machine
   moves a run by tens of percent, cancels out.
2. End to end: whole runs with and without the prefix (the command as the user wrote it),
   alternated, the median of the pairs' ratios and their spread: everything the job side
   does (also torch's record, which torch 2.13 keeps by default anyway, and the watcher's
   thread), but only as precise as the machine is quiet.
3. The job side's start, once a process: ``python -c pass`` with and without the prefix.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import figure, load

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from jupyter_distcomp.azureml.snapshot import diagnosed_command, diagnosed_snapshot
from jupyter_distcomp.core.layout import rank_environments
from jupyter_distcomp.machine.network import free_ports

RANKS = 4
WARM = 20
STEPS = 200  # a run's timed steps (the end-to-end figure)
PAIRS = 4  # runs with and without the job side, alternated
BLOCKS = 24  # blocks of steps a side, alternated inside one run
BLOCK = 20

TRAIN = f"""\
import json, sys, time
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

torch.set_num_threads(1)
dist.init_process_group("gloo")
hooks = sys.modules.get("distcomp_ledger_hooks")  # the job side's ledger, if on
ring = hooks.STATE.ring if hooks is not None else None


def ddp():
    torch.manual_seed(0)
    layers = [torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 512),
              torch.nn.ReLU(), torch.nn.Linear(512, 10)]
    model = DistributedDataParallel(torch.nn.Sequential(*layers))
    return model, torch.optim.SGD(model.parameters(), lr=0.01)


x, y = torch.randn(64, 256), torch.randint(0, 10, (64,))


def step(model, optimizer):
    optimizer.zero_grad()
    torch.nn.functional.cross_entropy(model(x), y).backward()
    optimizer.step()


def steps(model, optimizer, n):
    dist.barrier()
    tic = time.perf_counter()
    for _ in range(n):
        step(model, optimizer)
    took = time.perf_counter() - tic
    dist.barrier()
    return took / n


if hooks is not None:  # a model made while the ledger is off: DDP's own C++ reduction
    hooks.STATE.ring = None
plain = ddp()
if hooks is not None:
    hooks.STATE.ring = ring
ours = ddp()  # the job side's: its gradient buckets through the ledger's comm hook
result = {{"run": steps(*ours, {WARM}) and steps(*ours, {STEPS}), "blocks": []}}
if hooks is not None:  # the same process, the same steps, the ledger on and off by turns
    for block in range({BLOCKS}):
        took = {{}}
        for side in ("ours", "plain")[:: 1 if block % 2 else -1]:
            hooks.STATE.ring = ring if side == "ours" else None
            took[side] = steps(*(ours if side == "ours" else plain), {BLOCK})
        hooks.STATE.ring = ring
        result["blocks"].append((took["ours"], took["plain"]))
if dist.get_rank() == 0:
    print(json.dumps(result))
dist.destroy_process_group()
"""


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OMPI_", "PMIX_"))}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["OMP_NUM_THREADS"] = "1"
    return env


def run(folder: Path, diagnose: bool) -> dict:
    """One run of 4 ranks: rank 0's seconds a step (``run``), and with the job side the
    blocks' (ours, plain) seconds a step."""
    command = "python train.py"
    command = diagnosed_command(command) if diagnose else command
    (port,) = free_ports("127.0.0.1", 1)
    base = _env()
    procs = [
        subprocess.Popen(
            ["bash", "-c", command],
            cwd=folder,
            env={**base, **env},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        for env in rank_environments("torch.distributed", 1, RANKS, master_port=port)
    ]
    outs = [proc.communicate(timeout=900) for proc in procs]
    for proc, (_, err) in zip(procs, outs, strict=True):
        if proc.returncode != 0:
            raise RuntimeError(err.decode(errors="replace"))
    return json.loads(outs[0][0])


def start(folder: Path, diagnose: bool) -> float:
    command = "python -c pass"
    command = diagnosed_command(command) if diagnose else command
    tic = time.perf_counter()
    subprocess.run(["bash", "-c", command], cwd=folder, env=_env(), check=True)
    return time.perf_counter() - tic


def main() -> None:
    code = Path(tempfile.mkdtemp(prefix="bench-job-side-")) / "src"
    code.mkdir()
    (code / "train.py").write_text(TRAIN)
    with diagnosed_snapshot(code) as folder:
        blocks = run(folder, True)["blocks"]
        pairs = []
        for i in range(PAIRS):
            took = {}
            for side in (True, False)[:: 1 if i % 2 else -1]:
                took[side] = run(folder, side)["run"]
            pairs.append((took[True], took[False]))
        starts = [(start(folder, True), start(folder, False)) for _ in range(20)]
    ours = statistics.median(o for o, _ in blocks)
    plain = statistics.median(p for _, p in blocks)
    print(
        figure(
            "a DDP training step, job side on",
            statistics.median(o / p for o, p in blocks),
            "the same step, ledger off, same run",
            "<= 1.01",
            f"{ours * 1e3:.2f} ms vs {plain * 1e3:.2f} ms a step, {RANKS} ranks, gloo, "
            f"{BLOCKS} blocks of {BLOCK} a side",
        )
    )
    print(
        figure(
            "  end to end, whole runs",
            statistics.median(o / p for o, p in pairs),
            "runs without the prefix",
            "",
            "pairs: " + ", ".join(f"{o / p:.3f}" for o, p in pairs),
        )
    )
    extra = statistics.median(o - p for o, p in starts)
    plain_start = statistics.median(p for _, p in starts)
    print(
        figure(
            "a Python process's start",
            statistics.median(o / p for o, p in starts),
            "python -c pass without the prefix",
            "",
            f"+{extra * 1e3:.0f} ms on {plain_start * 1e3:.0f} ms, once a process",
        )
    )
    print(load())


if __name__ == "__main__":
    main()
