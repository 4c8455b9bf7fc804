"""One ZeRO stage 1 step with DeepSpeed on CPU (gloo), on every rank Azure ML starts."""
import os
import sys

import deepspeed
import deepspeed.ops
import torch
import torch.distributed as dist

# on CPU, DeepSpeed compiles a shared-memory collective (C++, minutes) on first use; gloo does
# the collectives here, so skip that build
deepspeed.ops.__compatible_ops__["deepspeed_shm_comm"] = False
deepspeed.init_distributed(dist_backend="gloo")
rank, world = dist.get_rank(), dist.get_world_size()
torch.manual_seed(0)
model = torch.nn.Linear(4, 1)
config = {
    "train_micro_batch_size_per_gpu": 2,
    "gradient_accumulation_steps": 1,
    "zero_optimization": {"stage": 1},
    "zero_allow_untested_optimizer": True,
}
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
engine, _, _, _ = deepspeed.initialize(model=model, optimizer=optimizer, config=config)
x = torch.ones(2, 4) * (rank + 1)
loss = engine(x).sum()
engine.backward(loss)
engine.step()
weight = engine.module.weight.detach().clone()
gathered = [torch.zeros_like(weight) for _ in range(world)]
dist.all_gather(gathered, weight)
same = all(torch.equal(w, weight) for w in gathered)
print(
    f"rank {rank} of {world} (AZUREML_PROCESS_NAME={os.environ['AZUREML_PROCESS_NAME']}): "
    f"ZeRO stage {engine.zero_optimization_stage()}, loss {loss.item():.4f}, "
    f"weights equal on all ranks: {same}"
)
# DeepSpeed keeps the process group alive to the interpreter's shutdown, where gloo's worker
# threads may still be releasing the last collective's tensors; that aborts the process now
# and then ("terminate called without an active exception", pytorch/pytorch#190489), under
# any launcher. destroy_process_group() cannot end a group that DeepSpeed still holds, so the
# process ends here, its output flushed, before that shutdown.
sys.stdout.flush()
sys.stderr.flush()
os._exit(0)
