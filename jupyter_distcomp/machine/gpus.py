"""Each emulated node's share of this machine's GPUs, as devices 0..k-1.

On Azure ML every node of a job has its VM's GPUs to itself, numbered from 0, and a rank
picks ``cuda:LOCAL_RANK``. Here the nodes share one machine, so node ``i`` of ``n`` gets the
``i``-th of ``n`` equal shares of the GPUs the kernel sees, through ``CUDA_VISIBLE_DEVICES``.

The GPUs the kernel sees are its own ``CUDA_VISIBLE_DEVICES`` where set (the way to hand the
emulated nodes only some GPUs, and what a CPU machine's tests set to stand for GPUs), else
the GPUs ``nvidia-smi -L`` lists; torch is never imported for this (seconds, and a CUDA
context in the kernel).

A program written for GPUs that runs where there is none fails on every rank with CUDA's,
torch's or NCCL's own words (``module 'torch._C' has no attribute '_cuda_setDevice'``);
:func:`no_gpu_notice` names that once, with the change that checks the program on CPU. The
failure reports of run cells and of ``%distcomp command`` carry it.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
from collections.abc import Iterable

#: the variable CUDA (torch, TensorFlow, NCCL) reads to number a process's GPUs from 0
VISIBLE = "CUDA_VISIBLE_DEVICES"
_GPU_LINE = re.compile(r"^GPU (\d+):", re.MULTILINE)


def kernel_gpus() -> list[str]:
    """The GPUs this kernel may use: its CUDA_VISIBLE_DEVICES, else nvidia-smi's list."""
    given = os.environ.get(VISIBLE)
    if given is not None:
        return _visible_list(given)
    return list(_nvidia_smi_gpus())


def _visible_list(value: str) -> list[str]:
    """CUDA_VISIBLE_DEVICES as a list; CUDA stops at the first invalid entry (``-1``)."""
    gpus = []
    for item in (part.strip() for part in value.split(",")):
        if not item or item.startswith("-"):
            break
        gpus.append(item)
    return gpus


@functools.lru_cache(maxsize=1)
def _nvidia_smi_gpus() -> tuple[str, ...]:
    """GPU indices nvidia-smi lists (none without nvidia-smi or a driver); asked once."""
    program = shutil.which("nvidia-smi")
    if program is None:
        return ()
    try:
        listing = subprocess.run(
            [program, "-L"], capture_output=True, text=True, timeout=10, check=False
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return ()
    return tuple(_GPU_LINE.findall(listing))


def node_shares(gpus: list[str], nodes: int) -> list[list[str]]:
    """The GPUs of each of ``nodes`` nodes: equal shares in order (a remainder is left out);
    with fewer GPUs than nodes, node ``i`` gets GPU ``i mod count`` (nodes then share)."""
    if not gpus:
        return [[] for _ in range(nodes)]
    each = len(gpus) // nodes
    if each == 0:
        return [[gpus[node % len(gpus)]] for node in range(nodes)]
    return [gpus[node * each : (node + 1) * each] for node in range(nodes)]


def node_environments(nodes: int, gpus: list[str] | None = None) -> list[dict[str, str]]:
    """``CUDA_VISIBLE_DEVICES`` of each emulated node; nothing for one node or no GPU (the
    ranks then see what the kernel sees)."""
    gpus = kernel_gpus() if gpus is None else gpus
    if nodes < 2 or not gpus:
        return [{} for _ in range(nodes)]
    return [{VISIBLE: ",".join(share)} for share in node_shares(gpus, nodes)]


#: launchers whose ranks each take a GPU of their node when there are GPUs (NCCL)
GPU_LAUNCHERS = ("torch.distributed", "deepspeed")
_said: set[tuple] = set()


def rank_device(env: dict[str, str], gpus: list[str] | None = None) -> str:
    """The device a rank's ``cuda:LOCAL_RANK`` is: ``cuda:1 (GPU 3)``, or ``cpu`` where its
    node has no GPU for it. ``gpus``: what the kernel sees (used where ``env`` does not set
    CUDA_VISIBLE_DEVICES)."""
    given = env.get(VISIBLE)
    visible = _visible_list(given) if given is not None else (gpus or [])
    if not visible:
        return "cpu"
    local = int(env.get("LOCAL_RANK") or env.get("OMPI_COMM_WORLD_LOCAL_RANK") or 0)
    if local < len(visible):
        return f"cuda:{local} (GPU {visible[local]})"
    return f"cpu (its node has {len(visible)} GPU(s))"


def shortage_notice(
    launcher: str | None, nodes: int, per_node: int, gpus: list[str] | None = None
) -> str | None:
    """What to say before a start where a node has GPUs but fewer than its processes and
    the launcher gives each process one; None otherwise, and after the first time a kernel
    said it for this layout and these GPUs."""
    gpus = kernel_gpus() if gpus is None else gpus
    if launcher not in GPU_LAUNCHERS or not gpus:
        return None
    shares = node_shares(gpus, nodes)
    short = [(node, len(share)) for node, share in enumerate(shares) if len(share) < per_node]
    key = (launcher, nodes, per_node, tuple(gpus))
    if (not short and len(gpus) >= nodes) or key in _said:
        return None
    _said.add(key)
    if not short:  # every node has a GPU, but some nodes have the same one
        return (
            f"distcomp: the layout's {nodes} nodes share this machine's {len(gpus)} GPU(s) "
            f"(CUDA_VISIBLE_DEVICES {','.join(gpus)}): NCCL refuses two ranks on one GPU "
            '("Duplicate GPU detected"), where Azure ML gives each node its own. Fix: '
            f'instance_count = {len(gpus)} or fewer, or init_process_group("gloo") for a '
            "check on CPU."
        )
    node, count = short[0]
    where = "this machine's" if nodes == 1 else f"its share of this machine's {len(gpus)}"
    return (
        f"distcomp: {launcher} runs {per_node} processes per node, but node {node} has "
        f"{count} GPU(s) ({where} GPUs, CUDA_VISIBLE_DEVICES {','.join(shares[node])}): "
        f'ranks with LOCAL_RANK >= {count} have no GPU of their own, and NCCL fails ("invalid '
        'device ordinal", "Duplicate GPU detected"), as on an Azure ML node with '
        f"{count} GPU(s). Fix: process_count_per_node = {count}, or "
        'init_process_group("gloo") for a check on CPU.'
    )


#: what a process without a usable GPU hears from torch (built without CUDA) ...
CPU_BUILD_WORDS = (
    "has no attribute '_cuda_",  # torch.cuda.set_device and friends of a CPU-only torch
    "Torch not compiled with CUDA enabled",
    "Distributed package doesn't have NCCL built in",
)
#: ... and from CUDA, torch and NCCL where the build has CUDA but the process has no GPU
NO_DEVICE_WORDS = (
    "Found no NVIDIA driver",
    "No CUDA GPUs are available",
    "no CUDA-capable device is detected",
    "CUDA driver initialization failed",
    "ProcessGroupNCCL is only supported with GPUs",
)


def no_gpu_notice(texts: Iterable[str], gpus: list[str] | None = None) -> str | None:
    """What to say when one of ``texts`` (the ranks' errors or last lines) is a CUDA call
    that failed for want of a usable GPU: why, and what to change to check the program on
    CPU; None when none of them is. ``gpus``: what the kernel sees (default: asked)."""
    joined = "\n".join(texts)
    cpu_build = any(words in joined for words in CPU_BUILD_WORDS)
    if not cpu_build and not any(words in joined for words in NO_DEVICE_WORDS):
        return None
    gpus = kernel_gpus() if gpus is None else gpus
    on_cpu = (
        'init_process_group("gloo") instead of "nccl", no torch.cuda.set_device, and the model '
        'and tensors on device "cpu" (device = torch.device("cuda" if '
        'torch.cuda.is_available() else "cpu") runs on both; an Azure ML GPU compute then runs '
        "the program as it is)"
    )
    if not gpus:
        given = os.environ.get(VISIBLE)
        if given is not None:
            where = f"no GPU is visible here (CUDA_VISIBLE_DEVICES is {given!r})"
        else:
            seen = "nvidia-smi lists none" if shutil.which("nvidia-smi") else "no nvidia-smi"
            where = f"this machine has no GPU ({seen})"
        return f"A CUDA call failed: {where}. Fix: to check the program on CPU here, {on_cpu}."
    if cpu_build:
        return (
            f"A CUDA call failed: torch here is built without CUDA (a CPU-only wheel), though "
            f"this machine has GPU(s) {','.join(gpus)}. Fix: install a CUDA build of torch; "
            f"or, to check the program on CPU, {on_cpu}."
        )
    return (
        f"A CUDA call failed: the ranks found no usable GPU, though the kernel sees GPU(s) "
        f"{','.join(gpus)} (no driver loaded, or CUDA_VISIBLE_DEVICES left none to them). "
        f"Fix: check `nvidia-smi` and CUDA_VISIBLE_DEVICES; or, to check the program on "
        f"CPU, {on_cpu}."
    )
