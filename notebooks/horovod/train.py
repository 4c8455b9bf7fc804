"""Horovod with PyTorch on CPU: the training script of notebooks/horovod.ipynb.

Azure ML's ``mpi`` launcher (and ``%distcomp command`` locally) starts this once per
process under mpiexec; ``hvd.init()`` takes its rank and size from MPI, and its node from
the processes that share one: ``local_rank`` / ``local_size`` within the node,
``cross_size`` nodes. Each rank trains on its own shard of a synthetic regression problem;
``hvd.DistributedOptimizer`` averages the gradients of all ranks at every step.
"""

from __future__ import annotations

import argparse

import horovod.torch as hvd
import torch

TRUE_WEIGHTS = torch.tensor([1.0, -2.0, 3.0, 0.5])
TRUE_BIAS = 0.25


def train(steps: int, lr: float) -> torch.nn.Module:
    torch.manual_seed(hvd.rank())  # different on purpose: the broadcast below aligns them
    model = torch.nn.Linear(4, 1)
    optimizer = hvd.DistributedOptimizer(
        torch.optim.SGD(model.parameters(), lr=lr * hvd.size()),
        named_parameters=model.named_parameters(),
    )
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    data = torch.Generator().manual_seed(1000 + hvd.rank())
    for _ in range(steps):
        x = torch.randn(64, 4, generator=data)
        y = x @ TRUE_WEIGHTS + TRUE_BIAS
        loss = torch.nn.functional.mse_loss(model(x).squeeze(-1), y)
        optimizer.zero_grad()
        loss.backward()  # each gradient's allreduce starts here
        optimizer.step()  # and is waited for here
    mean = hvd.allreduce(loss.detach(), name="final_loss")  # the average over the ranks
    if hvd.rank() == 0:
        print(f"mean loss over {hvd.size()} ranks after {steps} steps: {mean.item():.4f}")
    return model


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--lr", type=float, default=0.05)
    args = parser.parse_args()
    hvd.init()
    print(
        f"rank {hvd.rank()} of {hvd.size()}: local_rank {hvd.local_rank()} of "
        f"{hvd.local_size()} on node {hvd.cross_rank()} of {hvd.cross_size()}",
        flush=True,
    )
    model = train(args.steps, args.lr)
    weights = hvd.allgather(model.weight.detach())  # every rank's weights, one row each
    assert all(torch.equal(row, weights[0]) for row in weights), "the ranks' weights differ"


if __name__ == "__main__":
    main()
