"""The cost of the rank side a diagnosed job carries, on a training step (target <= 1.01).

Run: .venv/bin/python bench/bench_job_side.py   (not a test; prints its figures)

A small training script on 4 ranks of the PyTorch distribution (gloo, CPU, one process a
rank with the variables Azure ML sets, each ``bash -c`` of the job's command in the code
snapshot a diagnosed submit uploads): a DDP MLP (256-512-512-10, batch 64, one thread a
rank), steps timed inside the script between barriers (rank 0's figures).

1. The step: the job side adds no work to a DDP step (DDP keeps its own C++ reduction; the
   ledger records nothing in a step, counted here), only its threads' work beside it: the
   watcher's look every 2 s, and torch's record dumped and read every ``record_every``
   seconds (30 at the default stall threshold). Those threads' CPU time is read from
   /proc/self/task for a run with the record read every 2 s (DISTCOMP_STALL_SECONDS=20),
   and scaled to the default: the figure is 1 + that CPU time per second of training (the
   share of the rank's time it takes at most, were every ms of it taken from the step).
2. End to end: whole runs with and without the prefix (the command as the user wrote
   it), alternated, each side first in every other pair: the median of the pairs' ratios,
   beside the same for two runs without it (the machine's noise, which on a small loaded
   machine is far above 1%).
3. ``DISTCOMP_LEDGER_DDP=1`` (the ledger's comm hook records DDP's buckets, in place of
   DDP's own reduction): two identical models in one run, stepped by turns in blocks, the
   hooked one against the plain one (the ledger off for it): median of the blocks' ratios.
4. The job side's start, once a process: ``python -c pass`` with and without the prefix.
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
STEPS = 300  # a run's timed steps
PAIRS = 4  # end to end: runs with and without the job side, alternated
BACKGROUND_SECONDS = 40  # the run whose threads' CPU time is read
CHUNK = 50  # its steps between two barriers
BLOCKS, BLOCK = 16, 20  # DISTCOMP_LEDGER_DDP=1: blocks of steps a side, alternated
DEFAULT_RECORD_EVERY = 30.0  # job_watch.Watch.record_every at the default threshold

TRAIN = """\
import json, os, sys, time
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

torch.set_num_threads(1)
dist.init_process_group("gloo")
hooks = sys.modules.get("distcomp_ledger_hooks")  # the job side's ledger, if on
ring = hooks.STATE.ring if hooks is not None else None
x, y = torch.randn(64, 256), torch.randint(0, 10, (64,))


def ddp():
    torch.manual_seed(0)
    layers = [torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 512),
              torch.nn.ReLU(), torch.nn.Linear(512, 10)]
    model = DistributedDataParallel(torch.nn.Sequential(*layers))
    return model, torch.optim.SGD(model.parameters(), lr=0.01)


def steps(model, optimizer, n):
    dist.barrier()
    tic = time.perf_counter()
    for _ in range(n):
        optimizer.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        optimizer.step()
    took = time.perf_counter() - tic
    dist.barrier()
    return took


def our_threads_cpu():
    import threading
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for thread in threading.enumerate():
        if thread.name.startswith("distcomp-") and thread.native_id:
            with open(f"/proc/self/task/{thread.native_id}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / ticks  # utime, stime
    return total


mode = sys.argv[1]
result = {}
if mode == "buckets":  # a model made with the ledger off: DDP's own C++ reduction
    hooks.STATE.ring = None
    plain = ddp()
    hooks.STATE.ring = ring
    ours = ddp()
    steps(*ours, 20), steps(*plain, 20)
    result["blocks"] = []
    for block in range(int(sys.argv[2])):
        took = {}
        for side in ("ours", "plain")[:: 1 if block % 2 else -1]:
            hooks.STATE.ring = ring if side == "ours" else None
            took[side] = steps(*(ours if side == "ours" else plain), int(sys.argv[3]))
        hooks.STATE.ring = ring
        result["blocks"].append((took["ours"], took["plain"]))
else:
    model = ddp()
    steps(*model, 20)
    written = ring.written if ring is not None else 0
    if mode == "seconds":  # steps for about that long, then our threads' CPU time
        cpu, tic, count = our_threads_cpu(), time.perf_counter(), 0
        deadline, chunk = tic + float(sys.argv[2]), int(sys.argv[3])
        while time.perf_counter() < deadline:
            steps(*model, chunk)
            count += chunk
        result.update(wall=time.perf_counter() - tic, ours_cpu=our_threads_cpu() - cpu)
    else:
        count = int(sys.argv[2])
        result["step"] = steps(*model, count) / count
    result["recorded"] = (ring.written - written) if ring is not None else 0
    result["steps"] = count
if dist.get_rank() == 0:
    print(json.dumps(result))
dist.destroy_process_group()
"""


def _env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OMPI_", "PMIX_"))}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["OMP_NUM_THREADS"] = "1"
    env.update(extra or {})
    return env


def run(folder: Path, diagnose: bool, *args: object, env: dict | None = None) -> dict:
    """One run of 4 ranks of ``python train.py ARGS``: rank 0's result."""
    command = "python train.py " + " ".join(map(str, args))
    command = diagnosed_command(command) if diagnose else command
    (port,) = free_ports("127.0.0.1", 1)
    base = _env(env)
    procs = [
        subprocess.Popen(
            ["bash", "-c", command],
            cwd=folder,
            env={**base, **rank},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        for rank in rank_environments("torch.distributed", 1, RANKS, master_port=port)
    ]
    outs = [proc.communicate(timeout=900) for proc in procs]
    for proc, (_, err) in zip(procs, outs, strict=True):
        if proc.returncode != 0:
            raise RuntimeError(err.decode(errors="replace"))
    return json.loads(outs[0][0])


def start(folder: Path, diagnose: bool) -> float:
    command = diagnosed_command("python -c pass") if diagnose else "python -c pass"
    tic = time.perf_counter()
    subprocess.run(["bash", "-c", command], cwd=folder, env=_env(), check=True)
    return time.perf_counter() - tic


def alternated(folder: Path, sides: tuple[bool, bool]) -> list[float]:
    """Ratios of the step times of PAIRS pairs of whole runs, ``sides`` (diagnosed or
    not) alternated, each first in every other pair."""
    ratios = []
    for i in range(PAIRS):
        took = {}
        for index in (0, 1)[:: 1 if i % 2 else -1]:
            took[index] = run(folder, sides[index], "steps", STEPS)["step"]
        ratios.append(took[0] / took[1])
    return ratios


def main() -> None:
    code = Path(tempfile.mkdtemp(prefix="bench-job-side-")) / "src"
    code.mkdir()
    (code / "train.py").write_text(TRAIN)
    with diagnosed_snapshot(code) as folder:
        quick = {"DISTCOMP_STALL_SECONDS": "20"}  # torch's record read every 2 s
        background = run(folder, True, "seconds", BACKGROUND_SECONDS, CHUNK, env=quick)
        on = alternated(folder, (True, False))
        noise = alternated(folder, (False, False))
        buckets = run(folder, True, "buckets", BLOCKS, BLOCK, env={"DISTCOMP_LEDGER_DDP": "1"})
        starts = [(start(folder, True), start(folder, False)) for _ in range(20)]
    share = background["ours_cpu"] / background["wall"]
    at_default = share * 2.0 / DEFAULT_RECORD_EVERY
    step_ms = background["wall"] / background["steps"] * 1e3
    barriers = 2 * background["steps"] // CHUNK  # steps() waits at a barrier on each side
    print(
        figure(
            "a DDP training step, job side on",
            1 + at_default,
            "the step without it",
            "<= 1.01",
            f"{background['recorded'] - barriers} calls recorded in {background['steps']} "
            f"steps (besides the bench's {barriers} barriers); our threads "
            f"{share * 1e3:.1f} ms of CPU a second with torch's record read every 2 s, "
            f"{at_default * 1e3:.2f} ms ({at_default:.2%}) at the default 30 s; "
            f"{step_ms:.1f} ms a step",
        )
    )
    print(
        figure(
            "  end to end, whole runs",
            statistics.median(on),
            "runs without the prefix",
            "",
            "pairs " + ", ".join(f"{r:.3f}" for r in on) + "; without against without: "
            f"{statistics.median(noise):.3f} (" + ", ".join(f"{r:.3f}" for r in noise) + ")",
        )
    )
    blocks = buckets["blocks"]
    print(
        figure(
            "  DISTCOMP_LEDGER_DDP=1, a step",
            statistics.median(o / p for o, p in blocks),
            "DDP's own reduction, same run",
            "",
            f"{BLOCKS} blocks of {BLOCK} steps a side; the ledger's comm hook in place of "
            "DDP's C++ reduction",
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
