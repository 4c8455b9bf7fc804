"""The collectives ledger's cost on one rank's ``all_reduce`` launch: NCCL on a GPU (or gloo
on the CPU, where no GPU is), in one process of a world of one (no other rank to wait for).

Run: python bench/bench_ledger_gpu.py [--backend nccl|gloo]   (not a test; prints figures)

1. ``dist.all_reduce`` of 4 float32 through the ledger's wrapper against torch's own function
   on the same process group, in alternating blocks of BLOCK calls (each side first in every
   other block), CUDA synchronised at the end of each block (so a block's time includes its
   kernels). The figure is the median over blocks of the time per call, and the median of
   the per-block differences: what the ledger adds to a launch (target <= 2 us on NCCL).
2. torch's own record (its Flight Recorder, which the ledger turns on with
   TORCH_FR_BUFFER_SIZE): the same plain loop in a second process with the record off
   (TORCH_FR_BUFFER_SIZE=0), for scale (separate processes: reported, no target).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time

BLOCK = 200
BLOCKS = 40


def _port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def measure(backend: str, ledger: bool) -> dict:
    """In this process: the figures of one side-by-side run."""
    if ledger:
        sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        from jupyter_distcomp.rank_side import ledger_hooks

        folder = tempfile.mkdtemp(prefix="bench-ledger-")
        ledger_hooks.install(os.path.join(folder, "rank-0.ledger"))
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(_port()), RANK="0", WORLD_SIZE="1")
    import torch
    import torch.distributed as dist

    cuda = backend == "nccl"
    if cuda:
        torch.cuda.set_device(0)
    dist.init_process_group(backend)
    x = torch.ones(4, device="cuda" if cuda else "cpu")
    wrapped = dist.all_reduce
    plain = getattr(wrapped, "__distcomp_ledger__", wrapped)
    sync = torch.cuda.synchronize if cuda else (lambda: None)

    def block(fn) -> float:
        sync()
        tic = time.perf_counter()
        for _ in range(BLOCK):
            fn(x)
        sync()
        return (time.perf_counter() - tic) / BLOCK

    for _ in range(5):  # warm: NCCL's communicator, the ledger's cached texts
        block(plain), block(wrapped)
    plains, ledgers, added = [], [], []
    for i in range(BLOCKS):
        if i % 2:
            b = block(wrapped)
            a = block(plain)
        else:
            a = block(plain)
            b = block(wrapped)
        plains.append(a)
        ledgers.append(b)
        added.append(b - a)
    dist.destroy_process_group()
    return {
        "plain": statistics.median(plains),
        "ledger": statistics.median(ledgers),
        "added": statistics.median(added),
        "device": torch.cuda.get_device_name(0) if cuda else "cpu",
        "torch": torch.__version__,
        "record": os.environ.get("TORCH_FR_BUFFER_SIZE", ""),
    }


def child(backend: str, ledger: bool, record: bool) -> dict:
    env = dict(os.environ)
    env["TORCH_FR_BUFFER_SIZE"] = "2000" if record else "0"  # torch 2.13 records by default
    argv = [sys.executable, __file__, "--backend", backend, "--child"]
    if ledger:
        argv.append("--ledger")
    out = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=240)
    line = [x for x in out.stdout.splitlines() if x.startswith("FIGURES ")]
    if out.returncode or not line:
        raise SystemExit(f"the {backend} bench failed:\n{out.stdout}\n{out.stderr}")
    return json.loads(line[-1][len("FIGURES ") :])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--backend", choices=("nccl", "gloo"), default=None)
    parser.add_argument("--child", action="store_true")
    parser.add_argument("--ledger", action="store_true")
    args = parser.parse_args()
    if args.child:
        print("FIGURES " + json.dumps(measure(args.backend, args.ledger)), flush=True)
        return
    backend = args.backend
    if backend is None:
        import torch

        backend = "nccl" if torch.cuda.is_available() else "gloo"
    with_ledger = child(backend, ledger=True, record=True)
    bare = child(backend, ledger=False, record=False)
    us = 1e6
    print(
        f"collectives ledger on {backend}, one rank, {with_ledger['device']}, "
        f"torch {with_ledger['torch']}, {os.cpu_count()} cores\n"
        f"all_reduce of 4 float32, {BLOCKS} alternating blocks of {BLOCK} calls "
        f"(synchronised per block):\n"
        f"  torch's function {with_ledger['plain'] * us:6.2f} us a call, "
        f"the ledger's {with_ledger['ledger'] * us:6.2f} us: "
        f"added {with_ledger['added'] * us:5.2f} us (median of block differences; "
        f"target <= 2 us)\n"
        f"  torch's function without its own record (TORCH_FR_BUFFER_SIZE=0, another "
        f"process): {bare['plain'] * us:6.2f} us a call (reported)"
    )


if __name__ == "__main__":
    main()
