"""notebooks/debugging.ipynb runs top to bottom in a real kernel, its debugger prompts answered
through the kernel's stdin channel as JupyterLab answers them (nbclient answers no stdin)."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from .debug_support import DebugKernel

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"

#: what a person types at the prompts of the cell that starts with the key
ANSWERS = {
    "%%distcomp run ddp --debug-ranks 0": [
        "p model.module.weight",
        "n",
        "n",
        "p model.module.weight",
        "c",
    ],
    "%distcomp debug ddp": ["p shard.shape", "p len(DATA)", "c"],
    "%%distcomp run ddp\ndef mean_loss": ["compare loss", "n", "compare loss", "c"],
}


@pytest.mark.slow
def test_debugging_notebook_finds_the_divergent_rank_and_the_shape_error(tmp_path):
    import nbformat

    workdir = tmp_path / "notebooks"
    shutil.copytree(NOTEBOOKS, workdir, ignore=shutil.ignore_patterns("outputs", ".ipynb_*"))
    notebook = nbformat.read(workdir / "debugging.ipynb", as_version=4)
    kernel = DebugKernel(cwd=str(workdir))
    texts: dict[str, str] = {}
    try:
        for cell in notebook.cells:
            if cell.cell_type != "code":
                continue
            answers = next((a for k, a in ANSWERS.items() if cell.source.startswith(k)), [])
            out = kernel.run(cell.source, list(answers), timeout=300)
            expected_error = "raises-exception" in cell.metadata.get("tags", [])
            assert out.ok != expected_error, f"{cell.source[:60]!r}:\n{out.text}"
            assert len(out.prompts) == len(answers), (cell.source[:60], out.prompts)
            if answers and "--debug-ranks" not in cell.source and "debug ddp" not in cell.source:
                assert out.prompts == ["(Pdb ranks 0-2) "] * len(answers), out.prompts
            texts[cell.source] = out.text
    finally:
        kernel.close()

    def text_of(start: str, part: str = "") -> str:
        return next(t for source, t in texts.items() if source.startswith(start) and part in source)

    stop = text_of("%%distcomp run ddp --debug-ranks 0")
    assert re.search(r"\[rank 0\] stopped at In \[\d+\], line 4, in warm_start", stop), stop
    assert "0.8000, -1.5000,  2.5000,  0.4000" in stop  # the checkpoint, after the load
    assert "breakpoint() skipped on ranks 1-2" in stop
    assert "rank 0" in text_of("%distcomp compare")  # the divergent rank
    assert "[rank 2] 3 batches" in text_of("%%distcomp run ddp", "// 16 * 16")  # the fix
    post_mortem = text_of("%distcomp debug ddp")
    assert re.search(r"\[rank 2\] stopped at In \[\d+\], line 6, in make_batches", post_mortem)
    assert "torch.Size([63, 4])" in post_mortem and "\n191\n" in post_mortem
    group = text_of("%%distcomp run ddp\ndef mean_loss")
    assert re.search(r"\[ranks 0-2\] stopped at In \[\d+\], line 6, in mean_loss", group), group
    assert re.search(r"\[ranks 0-2\]\n> In \[\d+\], line 7, in mean_loss\(\)", group), group  # n
    before, after = group.split("ddp: compare `loss` on 3 rank(s)")[1:]
    assert "DIFFERS" in before and "All ranks agree." in after, group
    assert group.count("mean loss ") == 3, group
