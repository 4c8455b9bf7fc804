"""A run cell that shows nothing for a few seconds says what its ranks do, in one line that
updates in place and goes once they show something or the cell ends: the words from stacks
and the collectives ledger (pure), then real ranks in a real kernel."""

from __future__ import annotations

import queue
import re
import time

import pytest

from jupyter_distcomp.local.ranks.silence import imported_module, rank_activity, status_text

from .ranks_support import MPI_SPEC

#: a rank importing torch, as faulthandler writes it (most recent call first)
IMPORTING = """\
  File "/venv/lib/python3.11/site-packages/torch/_tensor.py", line 10 in <module>
  File "<frozen importlib._bootstrap>", line 488 in _call_with_frames_removed
  File "<frozen importlib._bootstrap_external>", line 995 in exec_module
  File "<frozen importlib._bootstrap>", line 1360 in _find_and_load
  File "/venv/lib/python3.11/site-packages/torch/__init__.py", line 50 in <module>
  File "<frozen importlib._bootstrap>", line 488 in _call_with_frames_removed
  File "<frozen importlib._bootstrap>", line 1360 in _find_and_load
  File "/tmp/ipykernel_1/1234.py", line 2 in <module>
  File "/venv/lib/python3.11/site-packages/IPython/core/interactiveshell.py", line 3577 in run_code
"""
RUNNING = """\
  File "/work/train.py", line 12 in step
  File "/tmp/ipykernel_1/1234.py", line 7 in <module>
  File "/venv/lib/python3.11/site-packages/IPython/core/interactiveshell.py", line 3577 in run_code
"""


def test_a_rank_importing_is_named_by_the_package_it_imports():
    assert imported_module(IMPORTING) == "torch"
    assert rank_activity(IMPORTING, "%%distcomp run t\nimport torch") == "importing torch"
    local = IMPORTING.replace("/venv/lib/python3.11/site-packages/torch/__init__.py", "/w/data.py")
    assert imported_module(local) == "data"
    assert imported_module(RUNNING) is None


def test_a_running_rank_is_at_its_cells_line_and_in_its_innermost_function():
    code = "\n".join(f"x{i} = {i}" for i in range(9))
    doing = rank_activity(RUNNING, code, "Cell In[5]")
    assert doing == "at cell line 7, in step", doing  # (a cell this kernel never ran)


def test_the_line_groups_ranks_by_what_they_do():
    doings = {
        0: ("importing torch", 8.2),
        1: ("importing torch", 7.9),
        3: ("importing torch", 8.0),
        2: ("in all_reduce #3", 5.0),
    }
    assert (
        status_text(doings) == "ranks 0-1, 3: importing torch (8 s); rank 2: in all_reduce #3 (5 s)"
    )


# -- real ranks ----------------------------------------------------------------------------


class StatusKernel:
    """A kernel whose cells' status lines are followed: each display of it, in order."""

    def __init__(self, cwd: str):
        from jupyter_client import KernelManager

        self.km = KernelManager(kernel_name="python3")
        self.km.start_kernel(cwd=cwd)
        self.kc = self.km.client()
        self.kc.start_channels()
        self.kc.wait_for_ready(timeout=60)

    def run(
        self, code: str, timeout: float = 240
    ) -> tuple[dict, list[str], list[tuple[float, str]]]:
        """The reply, the cell's other outputs, and each state of its status line with when
        it came (seconds after the cell was sent): its text, or "" once emptied."""
        msg_id = self.kc.execute(code)
        tic = time.monotonic()
        others: list[str] = []
        status: list[tuple[float, str]] = []
        reply = None
        deadline = tic + timeout
        while time.monotonic() < deadline:
            try:
                msg = self.kc.get_iopub_msg(timeout=0.05)
            except queue.Empty:
                msg = None
            if msg and msg["parent_header"].get("msg_id") == msg_id:
                content = msg["content"]
                if content.get("metadata", {}).get("distcomp_status"):
                    status.append((time.monotonic() - tic, content["data"].get("text/plain", "")))
                elif msg["msg_type"] == "stream":
                    others.append(content["text"])
                elif msg["msg_type"] == "error":
                    others.append("\n".join(content["traceback"]))
            if reply is None:
                try:
                    found = self.kc.get_shell_msg(timeout=0.01)
                except queue.Empty:
                    continue
                if found["parent_header"].get("msg_id") == msg_id:
                    reply = found["content"]
            elif msg is None:
                return reply, others, status
        raise AssertionError(f"no reply within {timeout} s: {others} {status}")

    def close(self) -> None:
        self.kc.stop_channels()
        self.km.shutdown_kernel(now=False)


@pytest.fixture(scope="module")
def kernel(tmp_path_factory):
    folder = tmp_path_factory.mktemp("silence")
    (folder / "slow_module.py").write_text("import time\ntime.sleep(7)\n")
    started = StatusKernel(str(folder))
    for code in (
        "%load_ext jupyter_distcomp",
        f"%%distcomp quiet\n{MPI_SPEC}",
        "quiet.runsettings.resource_layout.configure(instance_count=1, process_count_per_node=2)",
        "%%distcomp run quiet\nfrom mpi4py import MPI\nimport sys",
    ):
        reply, others, _ = started.run(code)
        assert reply["status"] == "ok", others
    yield started
    started.close()


@pytest.mark.slow
def test_a_silent_cell_says_its_ranks_import_then_the_line_goes(kernel):
    reply, others, status = kernel.run(
        "%%distcomp run quiet\nsys.path.insert(0, '.')\nimport slow_module"
    )
    assert reply["status"] == "ok", others
    texts = [text for _, text in status]
    assert texts, "no status line in a cell silent for 7 s"
    assert status[0][0] >= 2.5, status  # only after the cell was silent a while
    assert re.fullmatch(r"ranks 0-1: importing slow_module \(\d+ s\)", texts[0]), texts
    seconds = [int(m[1]) for t in texts if (m := re.search(r"\((\d+) s\)", t))]
    assert seconds == sorted(seconds) and seconds[-1] > seconds[0], texts  # in place, counting
    assert texts[-1] == "", texts  # emptied at the cell's end: JupyterLab draws nothing


@pytest.mark.slow
def test_a_rank_in_a_collective_and_one_that_keeps_it_waiting(kernel):
    code = (
        "%%distcomp run quiet\nimport time\ncomm = MPI.COMM_WORLD\n"
        "if comm.rank == 0:\n    time.sleep(7)\ncomm.Barrier()"
    )
    reply, others, status = kernel.run(code)
    assert reply["status"] == "ok", others
    said = [text for _, text in status if text]
    assert said, status
    first = said[0]
    assert re.search(r"rank 0: at In \[\d+\], line 5 \(\d+ s\)", first), said
    assert re.search(r"rank 1: in Barrier #\d+ \(\d+ s\)", first), said


@pytest.mark.slow
def test_a_cell_that_prints_gets_no_line_and_a_quick_one_neither(kernel):
    code = "%%distcomp run quiet\nimport time\nprint('working', flush=True)\ntime.sleep(5)"
    reply, others, status = kernel.run(code)
    assert reply["status"] == "ok" and "working" in "".join(others), others
    assert status == [], status  # it showed something: nothing to say
    reply, others, status = kernel.run("%%distcomp run quiet\nx = 1")
    assert status == [], status


def test_only_what_the_cell_called_counts_as_an_import():
    """An engine whose own start ran under ``import`` (frames below the cell's) imports
    nothing while its cell sleeps."""
    engine_started_by_import = RUNNING + (
        '  File "<frozen importlib._bootstrap>", line 1360 in _find_and_load\n'
        '  File "/venv/lib/python3.11/site-packages/ipyparallel/engine/app.py", line 9 in <module>\n'
    )
    assert imported_module(engine_started_by_import) is None
