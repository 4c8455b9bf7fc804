"""What a person sees in a real kernel (jupyter_client): interrupts and errors that show only
the ranks, in the notebook's own cell and lines; quiet `list` and `command`; bad rank lists
refused before any rank starts; spec warnings as a message with the cell's line.
"""

from __future__ import annotations

import json
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
    # the context starts at the cell's code, not at a stand-in for the magic's line
    reply, _, _ = kernel.run("%%distcomp run views\ny = 2\nraise ValueError('third line')")
    text = error_text(reply)
    assert re.search(r"\n\s+2 y = 2\n----> 3 raise ValueError", text), text
    assert not re.search(r"\n\s+1 #?\n", text), text


def test_a_bad_rank_list_is_refused_before_ranks_start(kernel):
    reply, text, _ = kernel.run(
        f"%config DistComp.prestart = False\n"
        f"get_ipython().run_cell_magic('distcomp', 'later', {MPI_SPEC!r})\n"
        '%config DistComp.prestart = "auto"'
    )
    assert reply["status"] == "ok", text
    reply, _, _ = kernel.run("%%distcomp run later --ranks 7\nprint(1)")
    assert reply["status"] == "error"
    assert "rank 7 outside the world of 2 rank(s)" in error_text(reply)
    reply, text, _ = kernel.run("%distcomp status later")
    assert reply["status"] == "ok"
    assert "idle" not in text and "starting" not in text, "the refusal started ranks"


def test_list_and_command_print_a_summary_and_no_repr(kernel, tmp_path):
    reply, text, _ = kernel.run("%distcomp list")
    assert reply["status"] == "ok"
    assert "views: ranks_demo (DistributedComponent, mpi, " in text, text
    assert "<Component" not in text
    # its own code folder: the kernel's folder (this checkout) is over a snapshot's limit
    spec = MPI_SPEC.replace("python train.py", "echo 42").replace(
        "name:", f"code: {tmp_path}\nname:", 1
    )
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
    # rank 0 cannot leave the barrier: it is named with where it waits, and the fix; it is
    # not said to have stopped (issue 47, item 13)
    assert "rank 0: stopped at" not in text, text
    assert "rank 0: did not stop; at the interrupt it was at" in text, text
    assert "    MPI.COMM_WORLD.Barrier()" in text, text
    assert "rank 1: stopped at" in text and "    time.sleep(60)" in text, text
    assert "rank 0 did not stop" in text and "%distcomp restart views" in text, text
    reply, text, _ = kernel.run("%distcomp restart views")
    assert reply["status"] == "ok", text


def test_a_layout_changed_while_ranks_run_is_pending_in_every_view(kernel):
    """One truth: the ranks run as they are until the next run, and every view says so;
    the next run's restart is news on stdout, not an error on stderr."""
    reply, text, _ = kernel.run("%%distcomp run views\nprint('first', mpi_rank)")
    assert reply["status"] == "ok" and "[rank 1] first 1" in text, text
    reply, text, _ = kernel.run(
        "import json\n"
        "from jupyter_distcomp.notebook.widgets import get_panel\n"
        "from jupyter_distcomp.local.ranks.backend import get_backend\n"
        "%distcomp widget views\n"
        "views.runsettings.resource_layout.configure(instance_count=1, process_count_per_node=3)\n"
        "import time; time.sleep(0.5)  # the panel coalesces rank events (0.2 s)\n"
        "world = get_backend().world('views')\n"
        "print(json.dumps({'panel': get_panel('views').ranks_line.value,"
        " 'event': get_backend().event(world)['pending']}))"
    )
    assert reply["status"] == "ok", text
    pending = "running mpi, 1 node(s) x 2 process(es); next run restarts as mpi, 1 node(s) x 3 process(es)"
    shown = json.loads(text[text.index('{"panel"') :].splitlines()[0])
    assert pending in shown["panel"] and "distcomp-pending" in shown["panel"]
    assert shown["event"] == pending  # what the ranks panel shows
    reply, text, _ = kernel.run("%distcomp status views")
    assert reply["status"] == "ok" and f"views: {pending}" in text, text
    assert text.count("idle") >= 2, "the running ranks are still the old two"
    reply, text, _ = kernel.run("%distcomp env views")
    assert reply["status"] == "ok" and pending in text, text

    reply, text, _ = kernel.run(
        "from IPython.utils.capture import capture_output\n"
        "with capture_output() as seen:\n"
        "    get_ipython().run_cell_magic('distcomp', 'run views', 'print(mpi_size)')\n"
        "print(json.dumps({'out': seen.stdout, 'err': seen.stderr}))"
    )
    assert reply["status"] == "ok", text
    seen = json.loads(text[text.index('{"out"') :].splitlines()[0])
    assert "restarting its ranks" in seen["out"] and "[rank 2] 3" in seen["out"], seen
    assert "restarting" not in seen["err"], seen
    reply, text, _ = kernel.run("%distcomp status views")
    assert "next run" not in text, text
    kernel.run("views.runsettings.resource_layout.configure(process_count_per_node=2)")


def test_env_with_layout_flags_previews_and_changes_nothing(kernel):
    reply, text, _ = kernel.run(
        "%%distcomp run views\nprint('ready', mpi_rank)"
    )  # ranks of the current layout run
    assert reply["status"] == "ok", text
    reply, before, _ = kernel.run("%distcomp status views")
    reply, text, _ = kernel.run("%distcomp env views --instance-count 2 --process-count-per-node 2")
    assert reply["status"] == "ok", text
    assert "2 node(s) x 2 process(es) = 4 rank(s); a preview: the settings of views" in text, text
    reply, text, _ = kernel.run(
        "layout = views.runsettings.resource_layout\n"
        "print(layout.instance_count, layout.process_count_per_node)"
    )
    assert text.split()[-2:] == ["1", "2"], text
    reply, after, _ = kernel.run("%distcomp status views")
    assert after == before and "next run" not in after, (before, after)
