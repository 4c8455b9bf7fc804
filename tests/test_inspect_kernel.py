"""Background cells and ``where`` in a real kernel (jupyter_client), as a notebook uses them.

A background cell's output keeps arriving in that cell's output area (its messages carry
that cell's ``msg_id``) while other cells run; ``%distcomp where`` looks into the processes
of a ``%distcomp command`` run in the background.
"""

from __future__ import annotations

import queue
import re
import time

import psutil
import pytest

from .ranks_support import MPI_SPEC
from .test_ranks_kernel import Kernel

pytestmark = pytest.mark.slow

TRAIN = """\
import time
def wait_for_data():
    time.sleep(30)
print("training", flush=True)
wait_for_data()
"""

COMMAND_SPEC = """\
name: train
type: DistributedComponent
code: {code}
launcher:
  type: {launcher}
  additional_arguments: python train.py
"""


@pytest.fixture(scope="module")
def kernel():
    k = Kernel()
    reply, text, _ = k.run(
        "%load_ext jupyter_distcomp\n%config DistComp.default_process_count_per_node = 2\n"
        "%config DistComp.prestart = False"  # ranks start at the first run, not at definitions
    )
    assert reply["status"] == "ok", text
    yield k
    k.close()


def streams_until_reply(kernel: Kernel, msg_id: str, timeout: float = 120) -> list[tuple[str, str]]:
    """Every stream message (parent msg_id, text) until the reply to ``msg_id``."""
    seen: list[tuple[str, str]] = []
    deadline = time.monotonic() + timeout
    replied = False
    while time.monotonic() < deadline:
        try:
            msg = kernel.kc.get_iopub_msg(timeout=0.1)
        except queue.Empty:
            if replied:
                return seen
            msg = None
        if msg and msg["msg_type"] == "stream":
            seen.append((msg["parent_header"].get("msg_id", ""), msg["content"]["text"]))
        if not replied:
            try:
                reply = kernel.kc.get_shell_msg(timeout=0.01)
                replied = reply["parent_header"].get("msg_id") == msg_id
            except queue.Empty:
                pass
    raise AssertionError(f"no reply within {timeout} s: {seen}")


def test_background_output_lands_in_its_own_cell(kernel):
    reply, text, _ = kernel.run(f"%%distcomp bg\n{MPI_SPEC}")
    assert reply["status"] == "ok", text
    code = "import time\nfor i in range(4):\n    time.sleep(0.5)\n    print('tick', i, flush=True)"
    background = kernel.send(f"%%distcomp run bg --background\n{code}")
    first = streams_until_reply(kernel, background)
    assert any("%distcomp wait bg" in text for _, text in first)
    later = kernel.send("import time\ntime.sleep(0.3)\nprint('other cell')")
    during = streams_until_reply(kernel, later)
    waiting = kernel.send("%distcomp wait bg")
    after = streams_until_reply(kernel, waiting)
    ticks = [(parent, text) for parent, text in first + during + after if "tick" in text]
    assert ticks, "no output of the background cell arrived"
    assert {parent for parent, _ in ticks} == {background}, "output landed in another cell"
    joined = "".join(text for _, text in ticks)
    assert "[rank 0] tick 3" in joined and "[rank 1] tick 3" in joined
    assert any(p == later and "other cell" in t for p, t in during)
    assert any(p == waiting and "finished" in t for p, t in after)


@pytest.mark.parametrize("launcher", ["mpi", "torch.distributed"])
def test_where_shows_the_stacks_of_a_background_command(kernel, tmp_path, launcher):
    (tmp_path / "train.py").write_text(TRAIN)
    spec = COMMAND_SPEC.format(code=tmp_path, launcher=launcher)
    reply, text, _ = kernel.run(f"%%distcomp cmd\n{spec}")
    assert reply["status"] == "ok", text
    # `where` at once, in the same cell: the command's processes, though still starting
    reply, text, _ = kernel.run(
        "%distcomp command cmd --background --timeout 60\n%distcomp where cmd"
    )
    assert reply["status"] == "ok" and "%distcomp where cmd" in text, text
    assert "cmd: where the `%distcomp command` processes of 2 rank(s) are" in text, text
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        reply, text, _ = kernel.run("%distcomp where cmd")
        # both ranks in the user's program, at the same line
        if "ranks 0-1: running, current stack" in text and "wait_for_data" in text:
            break
        assert "jupyter_distcomp" not in text, "a process starting up showed our frames"
        time.sleep(0.5)
    assert reply["status"] == "ok", text
    assert "ranks 0-1: running, current stack" in text, text
    assert 'train.py", line 5, in <module>' in text and "in wait_for_data" in text
    assert "time.sleep(30)" in text, "the source line of the user's file is missing"
    # the definition cell runs again while the command runs: a new component, the same name
    reply, text, _ = kernel.run(f"%%distcomp cmd\n{spec}")
    assert reply["status"] == "ok", text
    reply, text, _ = kernel.run("%distcomp where cmd")
    assert "ranks 0-1: running, current stack" in text, text
    reply, text, _ = kernel.run("%distcomp wait cmd --timeout 0.1")
    assert reply["status"] == "error" and "still runs" in text
    reply, text, _ = kernel.run("%distcomp interrupt cmd")
    assert "Sent SIGINT to ranks 0-1 of cmd" in text
    reply, text, _ = kernel.run("%distcomp wait cmd --timeout 60")
    assert reply["status"] == "error" and "interrupted" in text.lower(), text


def test_the_issue_case_fails_fast_in_a_kernel_with_rank_1s_error_first(kernel):
    reply, text, _ = kernel.run(f"%%distcomp ff\n{MPI_SPEC}")
    assert reply["status"] == "ok", text
    code = (
        "from mpi4py import MPI\n"
        "if mpi_rank == 1:\n"
        "    raise ValueError('bad shard on rank 1')\n"
        "MPI.COMM_WORLD.Barrier()"
    )
    reply, text, _ = kernel.run(f"%%distcomp run ff\n{code}", timeout=120)
    assert reply["status"] == "error" and reply["ename"] == "RankError"
    shown = "\n".join(reply["traceback"])
    assert shown.index("bad shard on rank 1") < shown.index("rank 0: still busy, waiting here")
    assert "MPI.COMM_WORLD.Barrier()" in shown and "%distcomp restart ff" in shown
    assert "site-packages" not in shown, "internal frames leaked into the report"
    reply, text, _ = kernel.run("%distcomp restart ff")
    assert reply["status"] == "ok", text


def test_interrupt_ends_a_background_cell_and_wait_reports_it(kernel):
    reply, text, _ = kernel.run(f"%%distcomp bi\n{MPI_SPEC}")
    assert reply["status"] == "ok", text
    reply, text, _ = kernel.run(
        "%%distcomp run bi --background\nimport time\nx = 5\ntime.sleep(60)"
    )
    assert reply["status"] == "ok", text
    reply, text, _ = kernel.run("%distcomp status bi")
    assert "background cell on ranks 0-1, running" in text
    reply, text, _ = kernel.run("%distcomp interrupt bi")
    assert "Sent SIGINT to ranks 0-1 of bi" in text
    reply, text, _ = kernel.run("%distcomp wait bi --timeout 60")
    assert reply["status"] == "error" and "KeyboardInterrupt" in "\n".join(reply["traceback"])
    reply, text, _ = kernel.run("%%distcomp run bi\nprint('x is', x)")
    assert reply["status"] == "ok" and "[rank 1] x is 5" in text


def test_where_sees_ranks_inside_a_gloo_collective(kernel, tmp_path):
    from .ranks_support import TORCH_SPEC

    reply, text, _ = kernel.run(f"%%distcomp gl\n{TORCH_SPEC}")
    assert reply["status"] == "ok", text
    go = tmp_path / "go"  # rank 0 joins the collective once the test has seen where
    code = (
        "import os, time, torch, torch.distributed as dist\n"
        "if not dist.is_initialized():\n"
        "    dist.init_process_group('gloo')\n"
        "if dist.get_rank() == 0:\n"
        f"    while not os.path.exists({str(go)!r}):\n"
        "        time.sleep(0.05)\n"
        "dist.all_reduce(torch.ones(4))"
    )
    reply, text, _ = kernel.run(f"%%distcomp run gl --background\n{code}")
    assert reply["status"] == "ok", text
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        reply, text, _ = kernel.run("%distcomp where gl")
        if "dist.all_reduce(torch.ones(4))" in text and "time.sleep(0.05)" in text:
            break  # the stacks show rank 1 in the collective and rank 0 held
        time.sleep(0.5)
    go.touch()
    assert reply["status"] == "ok", text
    assert "ranks 0-1: busy, current stack" in text, text  # one tree, a branch per rank
    assert "+ rank 1\n" in text and "dist.all_reduce(torch.ones(4))" in text, text
    assert "+ rank 0\n" in text and re.search(r"time.sleep\(0.05\)|while not os", text), text
    reply, text, _ = kernel.run("%distcomp wait gl --timeout 90")
    assert reply["status"] == "ok", text
    reply, text, _ = kernel.run("%distcomp compare gl dist.get_world_size()")
    assert "All ranks agree." in text and "0-1" in text


def test_stop_ends_a_background_command_with_the_ranks_and_says_both(kernel, tmp_path):
    (tmp_path / "train.py").write_text(TRAIN)
    spec = COMMAND_SPEC.format(code=tmp_path, launcher="mpi")
    reply, text, _ = kernel.run(f"%%distcomp halt\n{spec}")
    assert reply["status"] == "ok", text
    reply, text, _ = kernel.run("%%distcomp run halt\nprint('up', mpi_rank)")
    assert reply["status"] == "ok" and "[rank 1] up 1" in text, text
    reply, text, _ = kernel.run("%distcomp command halt --background --timeout 120")
    assert reply["status"] == "ok", text
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        training = [p for p in kernel.processes() if "train.py" in " ".join(p.cmdline())]
        if len(training) >= 2:
            break
        time.sleep(0.5)
    assert len(training) >= 2, "the command's ranks never started"
    reply, text, _ = kernel.run("%distcomp stop halt")
    assert reply["status"] == "ok", text
    said = "Stopped the ranks of halt; the background `%distcomp command` of halt (2 rank"
    assert said in text, text
    _, gone = psutil.wait_procs(training, timeout=10)
    assert gone == [], f"still running after stop: {gone}"
    reply, text, _ = kernel.run("%distcomp status halt")
    assert "No ranks running" in text, text
    # stopped on purpose: no failure is kept for `wait`
    reply, text, _ = kernel.run("%distcomp wait halt --timeout 30")
    assert reply["status"] == "ok", text
    reply, text, _ = kernel.run("%distcomp stop halt")
    assert "Nothing of halt was running." in text, text
