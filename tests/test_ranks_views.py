"""What a person sees in a real kernel (jupyter_client): interrupts and errors that show only
the ranks, in the notebook's own cell and lines; quiet `list` and `command`; bad rank lists
refused before any rank starts; spec warnings as a message with the cell's line.
"""

from __future__ import annotations

import re

import pytest

from jupyter_distcomp.errors import strip_ansi

from .ranks_support import MPI_SPEC
from .test_ranks_kernel import Kernel

pytestmark = pytest.mark.slow

#: file names of the package and of the machinery under it: never in what a user sees
INTERNALS = ("magics.py", "backend.py", "run.py", "threading.py", "site-packages", "ipyparallel")


@pytest.fixture(scope="module")
def kernel():
    k = Kernel()
    reply, text, _ = k.run(
        "%load_ext jupyter_distcomp\n%config DistComp.default_process_count_per_node = 2"
    )
    assert reply["status"] == "ok", text
    reply, text, _ = k.run(f"%%distcomp views\n{MPI_SPEC}")
    assert reply["status"] == "ok", text
    yield k
    k.close()


def error_text(reply: dict) -> str:
    return strip_ansi("\n".join(reply.get("traceback", [])))


def test_an_interrupt_shows_where_each_rank_stopped_and_nothing_of_the_package(kernel):
    code = (
        "%%distcomp run views\n"
        "import time\n"
        "from mpi4py import MPI\n"
        "print('waiting', flush=True)\n"
        "if mpi_rank == 0:\n"
        "    time.sleep(60)\n"
        "else:\n"
        "    time.sleep(61)\n"
    )
    msg_id = kernel.send(code)
    kernel.collect(msg_id, timeout=120, until=lambda t: t.count("waiting") >= 2)
    kernel.km.interrupt_kernel()
    reply, _, _ = kernel.collect(msg_id, timeout=60)
    assert reply["status"] == "error" and reply["ename"] == "RankInterrupt"
    text = error_text(reply)
    count = reply["execution_count"]
    assert "Interrupted: sent SIGINT to ranks 0-1 of 'views'" in text, text
    # each rank's place, in the notebook's cell and with the cell's line numbers
    assert re.search(rf"rank 0: stopped at ---\n.*\n  Cell In\[{count}\], line 6", text), text
    assert "    time.sleep(60)" in text and "    time.sleep(61)" in text, text
    assert "The ranks are ready for the next cell." in text
    for internal in INTERNALS:
        assert internal not in text, (internal, text)
    reply, text, _ = kernel.run("%%distcomp run views\nprint('after', mpi_rank)")
    assert reply["status"] == "ok" and "[rank 1] after 1" in text, text


def test_identical_stacks_are_one_section(kernel):
    msg_id = kernel.send(
        "%%distcomp run views\nimport time\nprint('nap', flush=True)\ntime.sleep(60)"
    )
    kernel.collect(msg_id, timeout=120, until=lambda t: t.count("nap") >= 2)
    kernel.km.interrupt_kernel()
    reply, _, _ = kernel.collect(msg_id, timeout=60)
    text = error_text(reply)
    assert text.count("stopped at") == 1 and "ranks 0-1: stopped at" in text, text


def test_a_rank_error_names_the_notebook_cell_and_its_line(kernel):
    for _ in range(3):  # the kernel's cell count moves ahead of the ranks'
        kernel.run("x = 1")
    reply, _, _ = kernel.run("%%distcomp run views\ny = 2\nif mpi_rank == 1:\n    1 / 0")
    assert reply["status"] == "error"
    text = error_text(reply)
    count = reply["execution_count"]
    assert f"Cell In[{count}], line 4" in text, text
    assert re.search(r"----> 4\s+1 / 0", text), text
    assert "ZeroDivisionError: division by zero" in text
    for internal in INTERNALS:
        assert internal not in text, (internal, text)


def test_a_bad_rank_list_is_refused_before_ranks_start(kernel):
    reply, text, _ = kernel.run(
        f"%config DistComp.prestart = False\n"
        f"get_ipython().run_cell_magic('distcomp', 'later', {MPI_SPEC!r})\n"
        "%config DistComp.prestart = True"
    )
    assert reply["status"] == "ok", text
    reply, _, _ = kernel.run("%%distcomp run later --ranks 7\nprint(1)")
    assert reply["status"] == "error"
    assert "rank 7 outside the world of 2 rank(s)" in error_text(reply)
    reply, text, _ = kernel.run("%distcomp status later")
    assert reply["status"] == "ok"
    assert "idle" not in text and "starting" not in text, "the refusal started ranks"


def test_list_and_command_print_a_summary_and_no_repr(kernel):
    reply, text, _ = kernel.run("%distcomp list")
    assert reply["status"] == "ok"
    assert "views: ranks_demo (DistributedComponent, mpi, " in text, text
    assert "<Component" not in text
    spec = MPI_SPEC.replace("python train.py", "echo 42")
    reply, text, _ = kernel.run(f"%%distcomp echo\n{spec}")
    assert reply["status"] == "ok", text
    msg_id = kernel.send("%distcomp command echo --timeout 120")
    reply, text, _ = kernel.collect(msg_id, timeout=180)
    assert reply["status"] == "ok" and "[rank 1] 42" in text, text
    assert "<CommandResult" not in text, text


def test_spec_warnings_are_a_message_with_the_cells_line(kernel):
    spec = MPI_SPEC.replace("name:", "descripton: typo\nname:", 1)
    reply, text, _ = kernel.run(f"%%distcomp warned\n{spec}")
    assert reply["status"] == "ok", text
    # "descripton" is on the cell's line 2 (the %%distcomp line is line 1)
    assert "line 2, key 'descripton'" in text, text
    assert "SpecWarning" not in text and ".py:" not in text, text


def test_interrupting_a_collective_hang_shows_the_stuck_ranks_stack(kernel):
    msg_id = kernel.send(
        "%%distcomp run views\n"
        "import time\n"
        "from mpi4py import MPI\n"
        "print('entering', flush=True)\n"
        "if mpi_rank == 0:\n"
        "    MPI.COMM_WORLD.Barrier()\n"
        "else:\n"
        "    time.sleep(60)\n"
    )
    kernel.collect(msg_id, timeout=120, until=lambda t: t.count("entering") >= 2)
    kernel.km.interrupt_kernel()
    reply, _, _ = kernel.collect(msg_id, timeout=60)
    text = error_text(reply)
    # rank 0 cannot leave the barrier: it is named with where it waits, and the fix
    assert "rank 0: stopped at" in text and "    MPI.COMM_WORLD.Barrier()" in text, text
    assert "rank 1: stopped at" in text and "    time.sleep(60)" in text, text
    assert "rank 0 did not stop" in text and "%distcomp restart views" in text, text
    reply, text, _ = kernel.run("%distcomp restart views")
    assert reply["status"] == "ok", text
