"""What we show names the user's own files, not a node's copy of them, and the same place on
every node once: the debugger's prompt, ``%distcomp where`` (run cells and commands) and a
command's tracebacks, on 2 emulated nodes that each run in a copy of the folder.

A real kernel in a folder of the test's own (the notebook's folder), with a module of the
user's there, imported by the ranks from their node's copy.
"""

from __future__ import annotations

import time

import pytest

from .debug_support import MPI_SPEC, DebugKernel

pytestmark = pytest.mark.slow

HELPER = """\
import time


def step(value):
    breakpoint()
    return value + 1


def wait_for_data():
    time.sleep(30)
"""

TRAIN = """\
import helper
print("training", flush=True)
helper.wait_for_data()
"""

COMMAND_SPEC = """\
name: train
type: DistributedComponent
code: {code}
launcher:
  type: torch.distributed
  additional_arguments: python train.py
"""


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    made = tmp_path_factory.mktemp("notebook")
    (made / "helper.py").write_text(HELPER)
    (made / "train.py").write_text(TRAIN)
    return made


@pytest.fixture(scope="module")
def kernel(folder):
    k = DebugKernel(cwd=str(folder))
    for cell in (
        "%load_ext jupyter_distcomp\n%config DistComp.prestart = False",
        f"%%distcomp nodes\n{MPI_SPEC}",
        "nodes.runsettings.resource_layout.configure(instance_count=2, process_count_per_node=2)",
    ):
        out = k.run(cell)
        assert out.ok, out.text
    yield k
    k.run("%distcomp stop")
    k.close()


def test_a_breakpoint_in_the_users_module_names_their_file_on_every_node(kernel, folder):
    out = kernel.run(
        "%%distcomp run nodes\nimport helper\nprint('got', helper.step(mpi_rank))", ["w", "c"]
    )
    assert out.ok, out.text
    text = out.text
    assert "[ranks 0-3] stopped at" in text and str(folder / "helper.py") in text, text
    assert "node-" not in text, text
    assert "[node 1 rank 3] got 4" in text


def _where_once_waiting(kernel, name: str, seconds: float) -> str:
    """``%distcomp where NAME``'s text once ranks 0-3 are in one stack, in
    ``wait_for_data`` (or ``seconds`` have passed)."""
    deadline = time.monotonic() + seconds
    while True:
        out = kernel.run(f"%distcomp where {name}")
        together = "ranks 0-3: " in out.text and "in wait_for_data" in out.text
        if together or time.monotonic() > deadline:
            return out.text
        time.sleep(0.5)


def test_where_names_the_users_file_once_for_the_ranks_of_both_nodes(kernel, folder):
    started = kernel.run("%%distcomp run nodes --background\nimport helper\nhelper.wait_for_data()")
    assert started.ok, started.text
    try:
        text = _where_once_waiting(kernel, "nodes", 60)
        assert "ranks 0-3: busy, current stack" in text, text
        assert f'File "{folder / "helper.py"}", line 10, in wait_for_data' in text, text
        assert "node-" not in text, text
    finally:
        kernel.run("%distcomp interrupt nodes")
        kernel.run("%distcomp wait nodes --timeout 60")


def test_where_on_a_command_of_two_nodes_names_the_users_file(kernel, folder):
    pytest.importorskip("torch")
    out = kernel.run(f"%%distcomp cmd\n{COMMAND_SPEC.format(code=folder)}")
    assert out.ok, out.text
    out = kernel.run(
        "cmd.runsettings.resource_layout.configure(instance_count=2, process_count_per_node=2)\n"
        "get_ipython().run_line_magic('distcomp', 'command cmd --background --timeout 90')"
    )
    assert out.ok, out.text
    try:
        text = _where_once_waiting(kernel, "cmd", 90)
        assert "ranks 0-3: running, current stack" in text, text
        assert f'File "{folder / "helper.py"}", line 10, in wait_for_data' in text, text
        assert f'File "{folder / "train.py"}", line 3, in <module>' in text, text
        assert "node-" not in text, text
        assert sorted(p.name for p in folder.iterdir()) == ["helper.py", "train.py"]
    finally:
        kernel.run("%distcomp interrupt cmd")
        kernel.run("%distcomp wait cmd --timeout 60")
