"""Every kind of Horovod PyTorch operation, on 2 ranks under mpiexec, with the collectives
ledger on (as our ranks load it: ledger_hooks.py by path); each rank then prints its
ledger as JSON (tests/test_horovod_ledger.py finds the lines by their comments).

With ``skip`` as the third argument, rank 1 skips an allreduce instead (check mode's case).
"""

import importlib.util
import json
import os
import sys

here, ledger_file = sys.argv[1], sys.argv[2] % int(os.environ["OMPI_COMM_WORLD_RANK"])
spec = importlib.util.spec_from_file_location("distcomp_ledger_hooks", here)
hooks = importlib.util.module_from_spec(spec)
sys.modules["distcomp_ledger_hooks"] = hooks
spec.loader.exec_module(hooks)
hooks.install(ledger_file, check=os.environ.get("DISTCOMP_CHECK_COLLECTIVES") == "1")

import horovod.torch as hvd  # noqa: E402
import torch  # noqa: E402

hvd.init()
r = hvd.rank()
x = torch.ones(3)
if sys.argv[3:] == ["skip"]:
    if r != 1:
        hvd.allreduce(torch.ones(4 if r == 0 else 5), name="skipped")  # [skipped]
    hvd.barrier()  # [barrier]
    print("not reached", flush=True)
    sys.exit(0)
hvd.allreduce(x, name="a")  # [first]
hvd.allreduce_(x, op=hvd.Sum)
handle = hvd.allreduce_async(x)
hvd.synchronize(handle)
hvd.allgather(torch.ones(r + 1, 2))
hvd.broadcast(x, root_rank=1)
hvd.alltoall(torch.arange(4.0))
hvd.reducescatter(torch.ones(4), op=hvd.Sum)
hvd.grouped_allreduce([x, x])
handle = hvd.allgather_async(x)
while not hvd.poll(handle):
    pass
hvd.synchronize(handle)
model = torch.nn.Linear(2, 1)
optimizer = hvd.DistributedOptimizer(
    torch.optim.SGD(model.parameters(), lr=0.1), named_parameters=model.named_parameters()
)
model(torch.ones(1, 2)).sum().backward()  # [backward]
optimizer.step()
hvd.barrier()  # [last barrier]
hvd.join()  # [join]
hvd.allreduce(x, name="after")  # [after]
entries = hooks.ledger.read_ring(ledger_file)
print(
    "LEDGER",
    r,
    json.dumps(
        [[e.seq, e.op, e.data, e.reduce, e.root, e.group, e.line, e.finished > 0] for e in entries]
    ),
    flush=True,
)
