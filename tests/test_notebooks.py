"""Every notebook in notebooks/ runs top to bottom in a real kernel, as a user would run it.

Executed as the documentation site executes them (docs/execute.py: nbclient in the
``python3`` kernel of this environment, the debugger's prompts of debugging.ipynb answered
with the lines its cells' metadata scripts), in a copy of the folder (so relative paths work
and the repository stays clean). New notebooks are picked up by the glob.
"""

from __future__ import annotations

import importlib.util
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from .horovod_support import horovod  # noqa: F401  (the fixture horovod.ipynb needs)

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = ROOT / "notebooks"
PATHS = sorted(NOTEBOOKS.glob("*.ipynb"))

pytestmark = pytest.mark.slow
#: notebooks that need what a fixture provides (or skips, saying why): Horovod's, built once
NEEDS = {"horovod.ipynb": "horovod"}


def ready(path: Path, request) -> bool:
    """What ``path`` needs is here (its fixture ran), or not (the fixture skipped)."""
    if path.name not in NEEDS:
        return True
    try:
        request.getfixturevalue(NEEDS[path.name])
    except pytest.skip.Exception:
        return False
    return True


def test_there_are_notebooks():
    assert {"mpi_quickstart.ipynb", "tensorflow_layout.ipynb"} <= {p.name for p in PATHS}


_EXECUTED: dict[str, object] = {}


def executed(path: Path, tmp_path_factory) -> object:
    """Each notebook runs once per session; several tests may look at its outputs."""
    if path.name not in _EXECUTED:
        workdir = tmp_path_factory.mktemp(path.stem) / "notebooks"
        _EXECUTED[path.name] = execute(path, workdir)
    return _EXECUTED[path.name]


def docs_module(name: str):
    """A module of docs/ (a folder of scripts, not a package), loaded by its path."""
    spec = importlib.util.spec_from_file_location(f"docs_{name}", ROOT / "docs" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def execute(path: Path, workdir: Path):
    from jupyter_client import KernelManager

    # the kernelspec says "python", which jupyter_client runs as this very interpreter
    assert KernelManager(kernel_name="python3").kernel_spec.argv[0] in (
        "python",
        "python3",
        sys.executable,
    )
    return docs_module("execute").execute(path, workdir)


@pytest.mark.parametrize("path", PATHS, ids=[p.stem for p in PATHS])
def test_notebook_runs_top_to_bottom(path, tmp_path_factory, request):
    if path.name in NEEDS:
        request.getfixturevalue(NEEDS[path.name])  # skips, saying why, where it cannot
    notebook = executed(path, tmp_path_factory)
    code = [c for c in notebook.cells if c.cell_type == "code"]
    assert all(c.execution_count for c in code), "a cell did not run"
    for cell in code:
        errors = [o for o in cell.get("outputs", []) if o.output_type == "error"]
        if "raises-exception" in cell.metadata.get("tags", []):  # it shows a failure
            assert errors, f"{cell.source[:80]!r} is tagged raises-exception and did not raise"
        else:
            assert not errors, f"{cell.source[:80]!r} failed: {errors[0]['ename']}"


def text_of(cell) -> str:
    parts = []
    for output in cell.get("outputs", []):
        if output.output_type == "stream":
            parts.append(output.text)
        elif "data" in output:  # a display is a block of its own, never part of a line
            shown = output.data.get("text/plain", "")
            parts.append(shown + "\n" if shown and not shown.endswith("\n") else shown)
    return "".join(parts)


def test_mpi_quickstart_shows_the_allreduce_on_four_ranks(tmp_path_factory):
    notebook = executed(NOTEBOOKS / "mpi_quickstart.ipynb", tmp_path_factory)
    text = "".join(text_of(c) for c in notebook.cells if c.cell_type == "code")
    for rank in range(4):
        label = f"[node {rank // 2} rank {rank}]"
        assert f"{label} rank {rank} of 4 (local rank {rank % 2}): allreduce sum = 10" in text
    # its command, quickstart/train.py beside the notebook, ran on the same four ranks
    assert text.count("allreduce sum = 10") == 8, text
    assert "rank 0 still has total = 10.0" in text


def test_the_landing_pages_example_shows_what_the_quickstart_printed(tmp_path_factory):
    """docs/index.md's 30-second example: its output, line by line, is the quickstart's."""
    page = (ROOT / "docs" / "index.md").read_text()
    block = page.split("<!-- the example's output", 1)[1].split("<!-- /the example's output")[0]
    lines = [line for line in block.splitlines()[2:] if line and not line.startswith("```")]
    assert len(lines) == 4, lines
    notebook = executed(NOTEBOOKS / "mpi_quickstart.ipynb", tmp_path_factory)
    text = "".join(text_of(c) for c in notebook.cells if c.cell_type == "code")
    for line in lines:
        assert line in text.splitlines(), (line, text)
    run_cell = next(c.source for c in notebook.cells if "comm.Allreduce" in c.source)
    shown = page.split("%%distcomp run quickstart", 1)[1].split("```", 1)[0]
    assert shown.strip() in run_cell, "the example's run cell is not the quickstart's"


def test_tensorflow_layout_runs_multi_worker_mirrored_strategy(tmp_path_factory):
    notebook = executed(NOTEBOOKS / "tensorflow_layout.ipynb", tmp_path_factory)
    cells = [text_of(c) for c in notebook.cells if c.cell_type == "code"]
    by_cell, command = "".join(cells[:-1]), cells[-1]
    for worker in range(2):
        label = f"[node {worker} rank {worker}]"
        # cell by cell, then through %distcomp command: the reduce and the model.fit steps
        assert f"{label} worker {worker}: sum across 2 workers = 3.0" in by_cell
        assert f"{label} worker {worker}: loss after 4 steps" in by_cell
        assert f"{label} worker {worker}: sum across 2 workers = 3.0" in command
        assert f"{label} worker {worker}: loss after 4 steps" in command


def test_deepspeed_zero_steps_on_two_ranks(tmp_path_factory):
    notebook = executed(NOTEBOOKS / "deepspeed_zero.ipynb", tmp_path_factory)
    cells = [text_of(c) for c in notebook.cells if c.cell_type == "code"]
    by_cell, command = "".join(cells[:-1]), cells[-1]
    for rank in range(2):
        assert f"[rank {rank}] rank {rank}: ZeRO stage 1" in by_cell
        assert f"[rank {rank}] rank {rank}: loss" in by_cell
        assert "weights equal on all ranks: True" in by_cell
        assert (
            f"[rank {rank}] rank {rank} of 2 (AZUREML_PROCESS_NAME=rank_{rank}): ZeRO stage 1"
        ) in command
    assert "weights equal on all ranks: False" not in by_cell + command


def test_collectives_finds_a_skipped_collective_and_a_shape_mismatch(tmp_path_factory):
    notebook = executed(NOTEBOOKS / "collectives.ipynb", tmp_path_factory)
    text = "".join(text_of(c) for c in notebook.cells if c.cell_type == "code")
    assert "all_reduce #1 ([4] float32, sum, default group): ranks 0-1, 3 wait since" in text, text
    (skipping,) = [c for c in notebook.cells if c.source.endswith("dist.barrier()")]
    at = f"In [{skipping.execution_count}], line 5"  # as the notebook numbers the cell
    assert f"rank 2 has not called it: it is in barrier #1 at {at}" in text, text
    assert "could not stop" in text or "blocked inside a collective" in text
    assert "replaying 1 of 1" in text and "rank 3 of 4" in text
    mismatch = "all_reduce #1 (sum, default group): ranks 0-1 [4] float32, ranks 2-3 [5] float32"
    (checked,) = [c for c in notebook.cells if c.source.startswith("%%distcomp run job --check")]
    shown = text_of(checked)
    assert shown.count(f"check_collectives: {mismatch}") == 4, "every rank raised at the call"
    assert "after [" not in shown, "a rank went on with a result"
    assert f"{mismatch}; ranks 0-1 went on (their result may be wrong)" in text


def test_documentation_site_builds_with_the_executed_notebooks(tmp_path_factory, request):
    """docs/build.py, warnings as errors, with the notebooks this module has executed as
    pages (one whose needs this machine lacks as it is, unexecuted): the quickstart's page
    shows what its ranks printed."""
    import nbformat

    folder = tmp_path_factory.mktemp("docs-notebooks") / "notebooks"
    shutil.copytree(NOTEBOOKS, folder, ignore=shutil.ignore_patterns("outputs", ".ipynb_*"))
    for path in PATHS:
        if ready(path, request):
            nbformat.write(executed(path, tmp_path_factory), folder / path.name)
    out = tmp_path_factory.mktemp("docs")
    build = Path(__file__).resolve().parent.parent / "docs" / "build.py"
    done = subprocess.run(
        [sys.executable, str(build), str(out), "--notebooks", str(folder)],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    html = out / "html"
    for page in ("index", "using", "debugging", "commands", "speed", "development"):
        assert (html / f"{page}.html").is_file(), page
    quickstart = (html / "notebooks" / "mpi_quickstart.html").read_text()
    assert "rank 3 of 4 (local rank 1): allreduce sum = 10" in quickstart
    # the four ranks' lines of one output are one block, not a grey box each
    blocks = re.findall(r"<pre>(.*?)</pre>", quickstart, re.S)
    allreduce = next(b for b in blocks if "rank 0 of 4 (local rank 0): allreduce sum" in b)
    assert all(f"rank {r} of 4" in allreduce for r in range(4)), allreduce
    # the debugging notebook's page: executed, its prompts answered as a person would
    debugging = (html / "notebooks" / "debugging.html").read_text()
    assert "(Pdb ranks 0-2) compare loss" in debugging and "All ranks agree." in debugging
    # every page of the manual: the sidebar lists every guide, and a guide has sub-headings
    index = (html / "index.html").read_text()
    for guide in ("using", "commands", "debugging", "azureml-jobs", "own-cluster", "speed"):
        assert f'href="{guide}.html"' in index, guide
        page = (html / f"{guide}.html").read_text()
        nav = page.split('class="bd-docs-nav', 1)[-1].split("</nav>", 1)[0]
        assert 'href="using.html"' in nav or guide == "using", (guide, nav[:300])
    assert (html / "debugging.html").read_text().count("<h2") >= 4


def test_azureml_job_follows_every_rank_and_names_the_rank_that_never_came(tmp_path_factory):
    notebook = executed(NOTEBOOKS / "azureml_job.ipynb", tmp_path_factory)
    code = [c for c in notebook.cells if c.cell_type == "code"]
    followed = text_of(next(c for c in code if "--follow" in c.source))
    for rank in range(4):
        assert f"[node {rank // 2} rank {rank}] rank {rank}: step 1 done" in followed
    diagnosis = text_of(next(c for c in code if "diagnose" in c.source))
    assert "ended Failed" in diagnosis
    assert "all_reduce #2" in diagnosis and "at train.py:12" in diagnosis
    assert "rank 1 has not called it: it is at train.py:11" in diagnosis


def test_horovod_trains_on_1x2_and_2x2_and_names_the_skipped_allreduce(tmp_path_factory, horovod):  # noqa: F811
    notebook = executed(NOTEBOOKS / "horovod.ipynb", tmp_path_factory)
    code = [c for c in notebook.cells if c.cell_type == "code"]
    one, two = (text_of(c) for c in code if c.source == "%distcomp command train")
    assert "rank 1 of 2: local_rank 1 of 2 on node 0 of 1" in one, one
    assert "mean loss over 2 ranks after 30 steps" in one
    assert "mean loss over 4 ranks after 30 steps" in two
    live = next(text_of(c) for c in code if "hvd.init()" in c.source)
    assert live.count("sum = 3.0") == 2, live
    listing = next(text_of(c) for c in code if c.source == "%distcomp collectives train")
    assert "name allreduce.skipped, global process set): rank 0 waits since" in listing, listing
    assert "rank 1 has not called it: its cell has ended" in listing
    checked = next(text_of(c) for c in code if "--check-collectives" in c.source)
    assert checked.count("rank 0 [4] float32, rank 1 [5] float32") == 2, checked
    # each emulated node a node to Horovod, as on Azure ML
    assert "rank 3 of 4: local_rank 1 of 2 on node 1 of 2" in two, two
