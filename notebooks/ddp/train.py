"""PyTorch DDP on CPU: the training function of notebooks/pytorch_ddp.ipynb, as a script.

Azure ML's torch.distributed launcher (and ``%distcomp command`` locally) starts this once
per rank with MASTER_ADDR, MASTER_PORT, WORLD_SIZE, RANK, LOCAL_RANK and NODE_RANK set, so
``init_process_group(init_method="env://")`` needs no arguments. The functions are the ones
the notebook first ran cell by cell on its ranks.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

TRUE_WEIGHTS = torch.tensor([1.0, -2.0, 3.0, 0.5])
TRUE_BIAS = 0.25


def make_model() -> torch.nn.Module:
    torch.manual_seed(0)
    return DistributedDataParallel(torch.nn.Linear(4, 1))


def train_steps(model: torch.nn.Module, steps: int, lr: float, rank: int) -> list[float]:
    """A few SGD steps on this rank's own shard of a synthetic regression problem."""
    data = torch.Generator().manual_seed(1000 + rank)
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    losses = []
    for _ in range(steps):
        x = torch.randn(64, 4, generator=data)
        y = x @ TRUE_WEIGHTS + TRUE_BIAS
        loss = torch.nn.functional.mse_loss(model(x).squeeze(-1), y)
        optimizer.zero_grad()
        loss.backward()  # DDP averages the gradients of all ranks here
        optimizer.step()
        losses.append(loss.item())
    return losses


def same_on_all_ranks(model: torch.nn.Module) -> bool:
    """DDP's promise: after every step, every rank holds the same weights."""
    flat = torch.cat([p.detach().flatten() for p in model.parameters()])
    gathered = [torch.empty_like(flat) for _ in range(dist.get_world_size())]
    dist.all_gather(gathered, flat)
    return all(torch.equal(flat, other) for other in gathered)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--lr", type=float, default=0.1)
    parser.add_argument("--model-dir", type=Path, required=True)
    args = parser.parse_args()

    dist.init_process_group("gloo", init_method="env://")
    rank, world = dist.get_rank(), dist.get_world_size()
    print(
        f"rank {rank}/{world} on node {os.environ['NODE_RANK']}, local rank {os.environ['LOCAL_RANK']}"
    )
    model = make_model()
    losses = train_steps(model, args.steps, args.lr, rank)
    print(f"loss {losses[0]:.3f} -> {losses[-1]:.3f}")
    assert same_on_all_ranks(model), "ranks disagree on the weights"
    if rank == 0:
        args.model_dir.mkdir(parents=True, exist_ok=True)
        torch.save(model.module.state_dict(), args.model_dir / "model.pt")
        print(f"saved {args.model_dir / 'model.pt'}")
    dist.barrier()  # no rank closes its connections while another still uses them
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
    # torch 2.13's DDP keeps gloo's worker threads alive past destroy_process_group, and one of
    # them may still be releasing the last collective's tensors while the interpreter shuts
    # down, which aborts the rank (SIGABRT, "terminate called without an active exception"),
    # here as on Azure ML. Everything is saved: leave without the interpreter's shutdown.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
