"""notebooks/debugging.ipynb runs top to bottom in a real kernel, its debugger prompts answered
through the kernel's stdin channel with the lines its cells' metadata scripts (as a person
types them in JupyterLab; docs/execute.py, which the documentation site runs it with too)."""

from __future__ import annotations

import re

import pytest

from .test_notebooks import NOTEBOOKS, executed, text_of

#: the group prompt of the cell that stops every rank
GROUP = "%%distcomp run ddp\ndef mean_loss"


@pytest.mark.slow
def test_debugging_notebook_finds_the_divergent_rank_and_the_shape_error(tmp_path_factory):
    notebook = executed(NOTEBOOKS / "debugging.ipynb", tmp_path_factory)
    code = [c for c in notebook.cells if c.cell_type == "code"]
    scripted = [c for c in code if c.metadata.get("distcomp", {}).get("answers")]
    assert len(scripted) == 3, [c.source[:40] for c in scripted]
    for cell in scripted:
        # each answer shows after its prompt, as JupyterLab shows an answered prompt
        shown = re.findall(r"^(\(Pdb[^)]*\) )(.*)$", text_of(cell), re.M)
        assert [answer for _, answer in shown] == cell.metadata["distcomp"]["answers"], shown
        if cell.source.startswith(GROUP):
            assert {prompt for prompt, _ in shown} == {"(Pdb ranks 0-2) "}, shown

    def text(start: str, part: str = "") -> str:
        return next(text_of(c) for c in code if c.source.startswith(start) and part in c.source)

    stop = text("%%distcomp run ddp --debug-ranks 0")
    assert re.search(r"\[rank 0\] stopped at In \[\d+\], line 4, in warm_start", stop), stop
    assert "0.8000, -1.5000,  2.5000,  0.4000" in stop  # the checkpoint, after the load
    assert "breakpoint() skipped on ranks 1-2" in stop
    before_fix, after_fix = [text_of(c) for c in code if c.source.startswith("%distcomp compare")]
    assert re.search(r"^0 .*DIFFERS", before_fix, re.M), before_fix  # rank 0 alone differs
    assert "All ranks agree." in after_fix, after_fix
    assert "[rank 2] 3 batches" in text("%%distcomp run ddp", "// 16 * 16")  # the fix
    post_mortem = text("%distcomp debug ddp")
    assert re.search(r"\[rank 2\] stopped at In \[\d+\], line 6, in make_batches", post_mortem)
    assert "torch.Size([63, 4])" in post_mortem and "\n191\n" in post_mortem
    group = text(GROUP)
    assert re.search(r"\[ranks 0-2\] stopped at In \[\d+\], line 6, in mean_loss", group), group
    assert re.search(r"\[ranks 0-2\]\n> In \[\d+\], line 7, in mean_loss\(\)", group), group  # n
    before, after = group.split("ddp: compare `loss` on 3 rank(s)")[1:]
    assert "DIFFERS" in before and "All ranks agree." in after, group
    assert group.count("mean loss ") == 3, group
