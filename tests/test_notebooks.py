"""Every notebook in notebooks/ runs top to bottom in a real kernel, as a user would run it.

Executed with nbclient in the ``python3`` kernel of this environment, in a copy of the
folder (so relative paths work and the repository stays clean). New notebooks are picked
up by the glob.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from .horovod_support import horovod  # noqa: F401  (the fixture horovod.ipynb needs)

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"
#: debugging.ipynb answers debugger prompts (stdin), which nbclient cannot: its own test runs it
PATHS = sorted(p for p in NOTEBOOKS.glob("*.ipynb") if p.name != "debugging.ipynb")

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


def execute(path: Path, workdir: Path):
    import nbformat
    from jupyter_client import KernelManager
    from nbclient import NotebookClient

    shutil.copytree(NOTEBOOKS, workdir, ignore=shutil.ignore_patterns("outputs", ".ipynb_*"))
    notebook = nbformat.read(workdir / path.name, as_version=4)
    km = KernelManager(kernel_name="python3")
    # the kernelspec says "python", which jupyter_client runs as this very interpreter
    assert km.kernel_spec.argv[0] in ("python", "python3", sys.executable)
    client = NotebookClient(
        notebook, km=km, timeout=600, resources={"metadata": {"path": str(workdir)}}
    )
    client.execute()
    return notebook


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
        elif "data" in output:
            parts.append(output.data.get("text/plain", ""))
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
