"""A GPU program on a machine without a usable GPU: the failure report names that once,
before the tracebacks, with the change that checks the program on CPU (gloo, device "cpu"),
in ``%%distcomp run`` cells and in ``%distcomp command`` runs alike.

The real ranks run torch's ``torch.cuda.set_device``: a CPU-only torch answers with
``module 'torch._C' has no attribute '_cuda_setDevice'``, a CUDA build where
``CUDA_VISIBLE_DEVICES`` is empty with "no CUDA GPUs"; the test empties that variable, so it
holds on a GPU machine too.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from jupyter_distcomp.local.ranks.failures import error_sections
from jupyter_distcomp.machine.gpus import no_gpu_notice

from .ranks_support import TORCH_SPEC, define, run_cell

CPU_TORCH = "module 'torch._C' has no attribute '_cuda_setDevice'"
FIX = 'init_process_group("gloo") instead of "nccl"'


def test_each_way_cuda_says_it_has_no_gpu_is_named_with_the_fix(monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    said = no_gpu_notice([f"AttributeError: {CPU_TORCH}"], gpus=[])
    assert said is not None and said.startswith("A CUDA call failed: this machine has no GPU (")
    assert FIX in said and 'device "cpu"' in said and "no torch.cuda.set_device" in said
    built = no_gpu_notice(["AssertionError: Torch not compiled with CUDA enabled"], gpus=["0"])
    assert built is not None and "built without CUDA" in built and "GPU(s) 0" in built
    for words in (
        "RuntimeError: No CUDA GPUs are available",
        "RuntimeError: Found no NVIDIA driver on your system.",
        "RuntimeError: ProcessGroupNCCL is only supported with GPUs, no GPUs found!",
    ):
        hidden = no_gpu_notice([words], gpus=["0", "1"])
        assert hidden is not None and "found no usable GPU" in hidden, words
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert "no GPU is visible here (CUDA_VISIBLE_DEVICES is '')" in (
        no_gpu_notice([CPU_TORCH]) or ""
    )
    for other in ("ZeroDivisionError: division by zero", "CUDA out of memory. Tried to allocate"):
        assert no_gpu_notice([other], gpus=[]) is None, other


def test_the_notice_comes_once_before_the_tracebacks_of_different_errors():
    errors = {
        rank: SimpleNamespace(
            ename="AttributeError", evalue=CPU_TORCH, traceback=f"Cell In[3], line {rank + 2}"
        )
        for rank in range(2)
    }
    errors[2] = SimpleNamespace(ename="ValueError", evalue="bad", traceback="Cell In[3], line 9")
    sections = error_sections(errors)
    assert [heading for heading, _ in sections] == ["no usable GPU", "rank 0", "rank 1", "rank 2"]
    assert sum("A CUDA call failed" in line for _, lines in sections for line in lines) == 1
    assert error_sections({2: errors[2]})[0][0] == "rank 2"  # no notice for other errors


@pytest.fixture
def no_gpus(monkeypatch):
    """No GPU for the ranks this test starts, on any machine."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")


@pytest.mark.slow
def test_a_run_cell_names_the_missing_gpu_once_before_the_traceback(ip, no_gpus):
    define(ip, "nogpu", TORCH_SPEC, 1, 2)
    try:
        code = "import os, torch\ntorch.cuda.set_device(int(os.environ['LOCAL_RANK']))"
        cell = run_cell(ip, f"%%distcomp run nogpu\n{code}")
        assert not cell.ok and type(cell.error).__name__ == "RankError"
        text = cell.traceback_text()
        assert text.count("A CUDA call failed") == 1, text
        assert "(CUDA_VISIBLE_DEVICES is '')" in text and FIX in text, text
        notice, traceback = text.index("A CUDA call failed"), text.index("torch.cuda.set_device(")
        assert notice < traceback, text  # named before the traceback, which stays whole
        assert "--- ranks 0-1 ---" in text, text
        cell = run_cell(ip, "%%distcomp run nogpu\nx = torch.zeros(2, device='cpu').sum()")
        assert cell.ok, cell.error  # the ranks live on: the fix's check on CPU runs
    finally:
        run_cell(ip, "%distcomp stop nogpu")


PROGRAM = """\
import os, torch
import torch.distributed as dist
torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
dist.init_process_group("nccl")
"""

COMMAND_SPEC = """\
name: gpu_train
type: DistributedComponent
launcher:
  type: torch.distributed
  additional_arguments: python train_gpu.py
"""


@pytest.mark.slow
def test_a_command_run_names_the_missing_gpu_once_with_its_ranks_stderr(
    ip, no_gpus, tmp_path, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train_gpu.py").write_text(PROGRAM)
    define(ip, "gpu_train", COMMAND_SPEC, 1, 2)
    cell = run_cell(ip, "%distcomp command gpu_train")
    assert not cell.ok and type(cell.error).__name__ == "RankError"
    text = cell.traceback_text()
    assert text.count("A CUDA call failed") == 1, text
    assert FIX in text and "`gpu_train` failed on ranks 0-1:" in text, text
    assert text.index("A CUDA call failed") < text.index("last "), text  # before the tails
    assert "torch.cuda.set_device" in text, text  # the ranks' own traceback is kept
