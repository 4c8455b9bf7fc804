"""The pure parts of the ranks backend: rank lists, error grouping, death reasons, stacks,
labelled output, mpiexec flags. No process is started here."""

from __future__ import annotations

import io
import sys
import time
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import pytest

from jupyter_distcomp.core.ranges import format_ranks, parse_ranks
from jupyter_distcomp.errors import RankError
from jupyter_distcomp.local.command.result import (
    CommandResult,
    RankResult,
    exit_abort_notice,
    failure_message,
)
from jupyter_distcomp.local.ranks.failures import death_reason, error_sections, group_errors
from jupyter_distcomp.local.ranks.feed import OutputFeed
from jupyter_distcomp.local.ranks.output import LINE_LIMIT, REDRAW_SECONDS, RankOutput
from jupyter_distcomp.local.ranks.run import OUTPUT_GRACE, CellRun
from jupyter_distcomp.local.stacks import render_stack
from jupyter_distcomp.machine import mpi


@pytest.mark.parametrize(
    ("text", "ranks"),
    [
        (None, [0, 1, 2, 3]),
        ("0,2-3", [0, 2, 3]),
        (" 3 , 1 ", [1, 3]),
        ("1-1", [1]),
        ("0-3,2", [0, 1, 2, 3]),
    ],
)
def test_parse_ranks(text, ranks):
    assert parse_ranks(text, 4) == ranks


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("4", "rank 4 outside the world of 4 rank(s) (ranks 0-3)"),
        ("0,5-6", "ranks 5-6 outside"),
        ("a", "'a' is not a rank"),
        ("3-1", "runs backwards. Fix: write 1-3"),
        (",", "names no rank"),
        ("-1", "is not a rank"),
    ],
)
def test_bad_rank_lists_say_what_and_how_to_fix(text, message):
    with pytest.raises(RankError, match="Fix") as info:
        parse_ranks(text, 4)
    assert message in str(info.value)


def test_format_ranks():
    assert format_ranks([3]) == "rank 3"
    assert format_ranks([1, 2, 3, 5, 7, 8]) == "ranks 1-3, 5, 7-8"
    assert format_ranks([]) == "no rank"


class FakeRemoteError(Exception):
    def __init__(self, ename, evalue, traceback):
        self.ename, self.evalue, self.traceback = ename, evalue, traceback


def test_identical_tracebacks_from_different_kernels_collapse():
    def tb(pid, count):
        return (
            f"\x1b[31mZeroDivisionError\x1b[0m Traceback\nFile /tmp/ipykernel_{pid}/123.py:2\n"
            f"Cell In[{count}], line 2\n    1/0\nZeroDivisionError: division by zero"
        )

    errors = {
        3: FakeRemoteError("ZeroDivisionError", "division by zero", tb(30, 5)),
        1: FakeRemoteError("ZeroDivisionError", "division by zero", tb(10, 4)),
        2: FakeRemoteError("ZeroDivisionError", "division by zero", tb(20, 4)),
        0: FakeRemoteError("KeyError", "'x'", "KeyError: 'x'"),
    }
    groups = group_errors(errors)
    assert [ranks for ranks, _ in groups] == [[0], [1, 2, 3]]
    sections = error_sections(errors)
    assert [heading for heading, _ in sections] == ["rank 0", "ranks 1-3"]


def test_a_cell_a_rank_dropped_says_so_and_how_to_go_on():
    """ipyparallel's TaskAborted (a rank still ending a failed cell drops the next one) has
    no traceback: the section says what happened, no internal error."""
    from ipyparallel.error import TaskAborted

    errors = {
        0: FakeRemoteError("KeyError", "'x'", "KeyError: 'x'"),
        1: TaskAborted("aborted"),
        2: TaskAborted("aborted"),
    }
    sections = dict(error_sections(errors))
    assert sections["rank 0"] == ["KeyError: 'x'"]
    assert sections["ranks 1-2"] == [
        "Did not run this cell: still busy ending the cell before it, which failed or was "
        "interrupted. Run the cell again."
    ]


def test_a_print_interrupted_while_it_waits_for_the_notebook_shows_the_users_line():
    traceback = (
        "KeyboardInterrupt Traceback (most recent call last)\n"
        "Cell In[3], line 2\n      1 for i in range(10**9):\n----> 2     print(i)\n\n"
        "File /x/jupyter_distcomp/rank_side/flow.py:170, in install.<locals>.paced_write\n"
        "    169 written = write(self, string)\n"
        "File /x/jupyter_distcomp/rank_side/flow.py:121, in Flow.charge\n"
        "    121 time.sleep(pause)\n\n"
        "KeyboardInterrupt: "
    )
    sections = dict(error_sections({0: FakeRemoteError("KeyboardInterrupt", "", traceback)}))
    shown = "\n".join(sections["rank 0"])
    assert "print(i)" in shown and "KeyboardInterrupt" in shown
    assert "flow.py" not in shown and "sleep" not in shown


MPIEXEC_EXIT = """\
--------------------------------------------------------------------------
prterun detected that one or more processes exited with non-zero status,
thus causing the job to be terminated. The first process to do so was:

   Process name: [prterun-vm-7030@1,2]
   Exit code:    3
--------------------------------------------------------------------------
"""
MPIEXEC_SIGNAL = """\
prterun noticed that process rank 1 with PID 0 on node vm exited on
signal 11 (Segmentation fault).
"""


def test_death_reasons_from_mpiexec():
    assert death_reason(2, MPIEXEC_EXIT) == "exited with code 3"
    assert death_reason(1, MPIEXEC_EXIT) == ""
    assert death_reason(1, MPIEXEC_SIGNAL) == "killed by signal 11 (Segmentation fault)"
    assert death_reason(0, "") == ""


def test_a_rank_aborted_by_a_thread_left_at_exit_is_named_with_destroy_process_group():
    def ranks(last_line: str) -> list[RankResult]:
        aborted = RankResult(0, 0, pid=10, returncode=-6)
        aborted.stdout_tail.append("rank 0 of 2: loss -1.4152")
        aborted.stderr_tail.append(last_line)
        return [aborted, RankResult(1, 0, pid=11, stopped=True)]

    def message(last_line: str) -> str:
        result = CommandResult(
            "ds_zero", "deepspeed", ["python", "train.py"], Path("."), {}, {}, ranks(last_line)
        )
        return failure_message(result)

    said = message("terminate called without an active exception")
    lines = said.splitlines()
    assert lines[0] == "`ds_zero` failed on rank 0:"
    assert lines[1].startswith("rank 0 aborted as the process ended: a native thread was still")
    assert "torch.distributed.destroy_process_group()" in lines[1]
    assert (
        lines[2] == "rank 0: killed by SIGABRT (aborted, usually by a failed check in native code)"
    )
    other = message("Assertion `x > 0' failed.")
    assert "destroy_process_group" not in other and "rank 0: killed by SIGABRT" in other
    logged = RankResult(3, 1, returncode=134)  # a job's rank: its log holds both streams
    logged.stdout_tail.extend(["epoch 9 done", "terminate called without an active exception"])
    said = exit_abort_notice([logged]) or ""
    assert said.startswith("rank 3 aborted as the process ended") and "os._exit(0)" in said


def test_stack_shows_the_cell_line_and_hides_the_engine():
    dump = (
        "Current thread 0x00007f (most recent call first):\n"
        '  File "/tmp/ipykernel_77/1234.py", line 3 in <module>\n'
        '  File "/x/IPython/core/interactiveshell.py", line 3823 in run_code\n'
        '  File "<frozen runpy>", line 88 in _run_code\n'
    )
    lines = render_stack(dump.split("\n", 1)[1], "import time\n\ntime.sleep(60)\n")
    assert lines == [
        "Traceback (most recent call last):",
        "  Cell, line 3, in <module>",
        "    time.sleep(60)",
    ]


def test_a_rank_whose_print_waits_for_the_notebook_shows_its_own_line():
    dump = (
        '  File "/x/jupyter_distcomp/rank_side/flow.py", line 120 in charge\n'
        '  File "/x/jupyter_distcomp/rank_side/flow.py", line 170 in paced_write\n'
        '  File "/tmp/ipykernel_77/1234.py", line 2 in <module>\n'
        '  File "/x/IPython/core/interactiveshell.py", line 3823 in run_code\n'
    )
    lines = render_stack(dump, "for i in range(10**9):\n    print(i)\n")
    assert lines == [
        "Traceback (most recent call last):",
        "  Cell, line 2, in <module>",
        "    print(i)",
    ]


def test_output_labels_every_line_and_keeps_partial_lines():
    out = RankOutput(lambda r: f"[rank {r}]")
    buffer = io.StringIO()
    with redirect_stdout(buffer):
        out.stream(1, "stdout", "a\nb")
        out.stream(0, "stdout", "x\n")
        out.flush()
        assert buffer.getvalue() == "[rank 1] a\n[rank 0] x\n"
        out.stream(1, "stdout", "c\n\n")
        out.finish()
    assert buffer.getvalue() == "[rank 1] a\n[rank 0] x\n[rank 1] bc\n[rank 1] \n"


def test_pieces_of_a_line_are_one_line_and_a_line_past_the_limit_is_cut():
    out = RankOutput(lambda r: f"[rank {r}]")
    buffer = io.StringIO()
    with redirect_stdout(buffer):
        for piece in ("epoch 1 ", "loss=0.5", " done\n"):
            out.stream(0, "stdout", piece)
            out.flush_partial()
            out.flush()
        out.stream(1, "stdout", "x" * (LINE_LIMIT + 5))
        out.flush()
        assert buffer.getvalue() == f"[rank 0] epoch 1 loss=0.5 done\n[rank 1] {'x' * LINE_LIMIT}\n"
        out.finish()
    assert buffer.getvalue().endswith("[rank 1] xxxxx\n")


def test_a_redrawn_line_is_what_a_terminal_shows_of_it():
    out = RankOutput(lambda r: f"[rank {r}]")
    buffer = io.StringIO()
    with redirect_stdout(buffer):
        out.stream(0, "stdout", "\rstep 1/3")
        out.stream(0, "stdout", "\rstep 2/3\r")
        out.stream(0, "stdout", "step 3/3\r\n")
        out.stream(0, "stdout", "\r\n")
        out.finish()
    assert buffer.getvalue() == "[rank 0] step 3/3\n[rank 0] \n"


class Publisher:
    """What a shell's display publisher was given."""

    def __init__(self):
        self.calls: list[dict] = []

    def publish(self, data, metadata=None, *, transient=None, update=False):
        self.calls.append({"data": data, "transient": transient, "update": update})


class Clock:
    """Time that moves when the test says, and the timers due by it."""

    def __init__(self):
        self.now = 100.0
        self.timers: list[FakeTimer] = []

    def __call__(self) -> float:
        return self.now

    def timer(self, seconds, function):
        made = FakeTimer(self.now + seconds, function)
        self.timers.append(made)
        return made

    def advance(self, seconds: float) -> None:
        self.now += seconds
        for due in [t for t in self.timers if t.started and t.at <= self.now]:
            self.timers.remove(due)
            if not due.cancelled:
                due.function()


class FakeTimer:
    def __init__(self, at, function):
        self.at, self.function = at, function
        self.started = self.cancelled = False
        self.daemon = False

    def start(self):
        self.started = True

    def cancel(self):
        self.cancelled = True


def test_a_progress_line_is_drawn_in_place_and_finished_there():
    shell = type("Shell", (), {"display_pub": Publisher()})()
    clock = Clock()
    out = RankOutput(lambda r: f"[rank {r}]", shell=shell, clock=clock)
    buffer = io.StringIO()
    with redirect_stdout(buffer):
        out.stream(1, "stderr", "\r 0%|")
        out.flush_partial()
        clock.advance(REDRAW_SECONDS + 0.01)  # a redraw is due
        out.stream(1, "stderr", "\r50%|")
        out.flush_partial()
        out.stream(1, "stderr", "\r100%|\n")
        out.stream(1, "stdout", "after\n")
        out.finish()
    calls = shell.display_pub.calls
    assert [c["data"]["text/plain"] for c in calls] == [
        "[rank 1]  0%|",
        "[rank 1] 50%|",
        "[rank 1] 100%|",
    ]
    assert [c["update"] for c in calls] == [False, True, True]
    assert len({c["transient"]["display_id"] for c in calls}) == 1
    assert buffer.getvalue() == "[rank 1] after\n"


class LandingReply:
    """A rank's reply whose last output lands while the kernel asks whether its output is
    complete: ipyparallel's receiving thread runs beside the cell's loop."""

    def __init__(self, feed: OutputFeed, index: int, text: str):
        self.feed, self.index, self._text = feed, index, text

    def replied(self) -> bool:
        return True

    def output_complete(self) -> bool:
        if self._text:  # it arrives once
            self.feed.on_message(self.index, "stream", {"name": "stdout", "text": self._text})
            self._text = ""
        return True


class StuckReply(LandingReply):
    """A reply whose output never completes: its last message was lost."""

    def output_complete(self) -> bool:
        super().output_complete()
        return False


def output_loop(texts: dict, stuck: tuple = ()) -> CellRun:
    """A cell's output loop alone, without ranks."""
    run = CellRun.__new__(CellRun)
    run.ranks, run.running = list(texts), set(texts)
    run.feed = OutputFeed(run.ranks, lambda: None)
    run.futures = {
        rank: (StuckReply if rank in stuck else LandingReply)(run.feed, index, texts[rank])
        for index, rank in enumerate(run.ranks)
    }
    run.out = RankOutput(lambda r: f"[rank {r}]")
    run._replied_at = {}
    run._cut_short = set()
    run.flows = None  # no flow files: what is lost is said as possible
    run._started = time.monotonic()
    return run


def pump_once(run: CellRun) -> tuple[str, str]:
    """One pass of the output loop, then what the cell says as it ends: (stdout, stderr)."""
    printed, said = io.StringIO(), io.StringIO()
    with redirect_stdout(printed), redirect_stderr(said):
        run._pump()
        run._say_lost()
    return printed.getvalue(), said.getvalue()


def test_output_completing_as_the_cell_ends_is_shown():
    run = output_loop({rank: f"back {rank}\n" for rank in (0, 1)})
    printed, said = pump_once(run)
    assert not run.running
    assert printed == "[rank 0] back 0\n[rank 1] back 1\n"
    assert said == ""


def test_output_still_incomplete_when_the_cell_ends_is_said():
    run = output_loop({0: "whole\n", 1: "part\n"}, stuck=(1,))
    run._replied_at = {0: time.monotonic(), 1: time.monotonic() - 2 * OUTPUT_GRACE}
    first, _ = pump_once(run)
    assert run.running == {1}, "a rank whose output still arrives keeps the cell open"
    run.feed.last[1] = time.monotonic() - 2 * OUTPUT_GRACE
    printed, said = pump_once(run)
    assert not run.running
    assert first + printed == "[rank 0] whole\n[rank 1] part\n"
    assert said.startswith("distcomp: the output of rank 1 may be incomplete")


def test_grouped_output_is_in_rank_order():
    out = RankOutput(lambda r: f"[rank {r}]", group=True)
    buffer = io.StringIO()
    with redirect_stdout(buffer):
        out.stream(2, "stdout", "late\n")
        out.stream(0, "stdout", "early\n")
        out.stream(2, "stdout", "more\n")
        out.flush()
        assert buffer.getvalue() == ""
        out.finish()
    assert buffer.getvalue() == "[rank 0] early\n[rank 2] late\n[rank 2] more\n"


def test_mpiexec_files_go_to_the_run_folders_unless_the_user_placed_them():
    session, segments = "PRTE_MCA_prte_local_tmpdir_base", "OMPI_MCA_btl_sm_backing_directory"
    records = {"DISTCOMP_SEGMENT_RECORDS": "/run"}  # the guard unlinks what ranks recorded
    assert mpi.run_files_environment("/run", "/shm", {}) == {
        session: "/run",
        segments: "/shm",
        **records,
    }
    assert mpi.run_files_environment("/run", None, {}) == {session: "/run", **records}
    mine = {segments: "/mine"}
    assert mpi.run_files_environment("/run", "/shm", mine) == {session: "/run", **records}
    mine = {"PRTE_MCA_prte_tmpdir_base": "/mine"}  # Open MPI refuses it beside ours
    assert mpi.run_files_environment("/run", "/shm", mine) == {segments: "/shm", **records}


def test_mpiexec_is_the_one_beside_python_and_flags_fit_the_machine(monkeypatch):
    assert mpi.mpiexec_path().startswith(sys.prefix) or "bin" in mpi.mpiexec_path()
    # more ranks than cores, and as many: a rank may MPI_Comm_spawn as under a bare
    # `mpiexec --oversubscribe` (tests/test_transparency_mpi4py.py runs mpi4py's Spawn tests)
    assert "--oversubscribe" in mpi.mpiexec_args(4)
    assert "--oversubscribe" in mpi.mpiexec_args(1)
    monkeypatch.setattr(mpi.os, "geteuid", lambda: 0)
    env = mpi.mpiexec_environment()
    assert env["OMPI_ALLOW_RUN_AS_ROOT"] == env["OMPI_ALLOW_RUN_AS_ROOT_CONFIRM"] == "1"
    monkeypatch.setattr(mpi.os, "geteuid", lambda: 1000)
    assert "OMPI_ALLOW_RUN_AS_ROOT" not in mpi.mpiexec_environment()


def test_importing_the_ranks_package_imports_no_ipyparallel():
    import subprocess

    code = (
        "import sys, jupyter_distcomp.local.ranks.backend as r, jupyter_distcomp.core.ranges as g\n"
        "r.get_backend(); g.parse_ranks('0', 1)\n"
        "print('ipyparallel' in sys.modules, 'zmq' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]


def _observers(layout) -> int:
    return sum(
        len(handlers)
        for by_type in layout._trait_notifiers.values()
        for handlers in by_type.values()
    )


@pytest.fixture
def idle_backend(monkeypatch):
    """A backend whose worlds never start a process."""
    from jupyter_distcomp.local.ranks.backend import RankBackend
    from jupyter_distcomp.local.ranks.world import World

    monkeypatch.setattr(World, "start_async", lambda self, delay=0.0: None)
    backend = RankBackend()
    yield backend
    backend.shutdown()


def test_a_redefined_or_stopped_component_leaves_no_layout_observer(idle_backend):
    from jupyter_distcomp import load_component
    from jupyter_distcomp.core.spec_parsing.loader import carry_over_settings

    from .ranks_support import MPI_SPEC

    first = load_component(MPI_SPEC)
    layout = first.runsettings.resource_layout
    baseline = _observers(layout)
    idle_backend.start("c", first, wait=False)
    idle_backend.start("c", first, wait=False)
    assert _observers(layout) == baseline + 1

    # a definition cell run again: a new Component, the same settings object
    second = carry_over_settings(first, load_component(MPI_SPEC))
    assert second is not first and second.runsettings.resource_layout is layout
    idle_backend.start("c", second, wait=False)
    assert _observers(layout) == baseline + 1

    # a new Component with its own settings: the old layout is let go
    third = load_component(MPI_SPEC)
    idle_backend.start("c", third, wait=False)
    assert _observers(layout) == baseline
    assert _observers(third.runsettings.resource_layout) == baseline + 1

    idle_backend.stop("c")
    assert _observers(third.runsettings.resource_layout) == baseline


def test_a_layout_change_restarts_only_the_current_component(idle_backend):
    from jupyter_distcomp import load_component

    from .ranks_support import MPI_SPEC

    old, new = load_component(MPI_SPEC), load_component(MPI_SPEC)
    idle_backend.start("c", old, wait=False)
    idle_backend.start("c", new, wait=False)
    world = idle_backend.world("c")
    old.runsettings.resource_layout.configure(instance_count=2, process_count_per_node=2)
    assert idle_backend.world("c") is world, "the replaced component still drives the ranks"
    new.runsettings.resource_layout.configure(instance_count=2, process_count_per_node=2)
    assert idle_backend.world("c") is not world
    assert idle_backend.world("c").world_size == 4


def test_stopping_a_world_that_is_starting_leaves_the_backend_free(monkeypatch):
    """stop() waits for a starting world to notice, outside the backend's lock: other
    components can start and stop meanwhile."""
    import threading

    from jupyter_distcomp import load_component
    from jupyter_distcomp.local.ranks.backend import RankBackend
    from jupyter_distcomp.local.ranks.world import World

    from .ranks_support import MPI_SPEC

    release = threading.Event()
    monkeypatch.setattr(World, "_start_embedded", lambda self: release.wait(30))
    backend = RankBackend()
    try:
        backend.start("slow", load_component(MPI_SPEC), wait=False)
        stopper = threading.Thread(target=backend.stop, args=("slow",))
        stopper.start()
        stopper.join(0.3)
        assert stopper.is_alive(), "stop() returns only once the start has noticed"
        other = threading.Thread(target=backend.stop, args=("other",))
        other.start()
        other.join(10)
        assert not other.is_alive() and stopper.is_alive()
        assert backend.world("slow") is None, "the stopping world left the backend at once"
    finally:
        release.set()
        backend.shutdown()


def test_a_burst_of_rank_changes_tells_the_panel_twice_and_the_last_state_wins():
    from jupyter_distcomp.local.ranks.health import NOTICE_GAP, Notices

    state = {"idle": 0}
    told: list[int] = []
    clock = Clock()
    notices = Notices(lambda: told.append(state["idle"]), clock=clock, timer=clock.timer)
    for rank in range(16):  # 16 ranks reply within a few milliseconds
        state["idle"] = rank + 1
        notices.changed()
        clock.advance(0.001)
    assert told == [1], "the first change is told at once, the others wait for the gap"
    assert len(clock.timers) == 1, "one notice waits for the gap's end"
    clock.advance(NOTICE_GAP)
    assert told == [1, 16], "the rest are told once, with the latest state"

    state["idle"] = 0
    with notices.held():  # a cell's start: told once its requests are out
        notices.changed()
        notices.changed()
        assert told == [1, 16]
    assert told == [1, 16, 0], "told at once after the block, whatever the gap"

    state["idle"] = 4
    notices.changed()  # within the gap: waits
    assert told == [1, 16, 0] and len(clock.timers) == 1
    notices.flush()  # the cell ends: told now
    assert told == [1, 16, 0, 4]
    clock.advance(NOTICE_GAP * 4)
    assert told == [1, 16, 0, 4], "a flushed change is not told twice"

    clock.advance(NOTICE_GAP)
    state["idle"] = 2
    notices.changed()  # a gap after the last notice: told at once
    assert told == [1, 16, 0, 4, 2] and clock.timers == []


def _logged(ranks: list[int] | None, size: int, first: str = "x = 1"):
    from jupyter_distcomp.local.ranks.replay import Replayed

    return Replayed("Cell In[3]", first, {"ranks": ranks}, size)


def test_a_replay_plan_maps_all_ranks_to_the_new_layout_and_refuses_a_subset():
    from jupyter_distcomp.local.ranks.replay import plan

    cells = [_logged([0, 1], 2), _logged([0], 2, "root_only = 1"), _logged([1], 2)]
    with pytest.raises(RankError) as refused:
        plan("job", cells, 4)
    text = str(refused.value)
    assert "cell 2 (Cell In[3]: root_only = 1): it ran on rank 0 of 2" in text, text
    assert "cell 3 (" in text and "--skip 2,3" in text and "Nothing was restarted" in text
    chosen = plan("job", cells, 4, skip="2-3")
    assert [(n, ranks) for n, _, ranks in chosen.runs] == [(1, [0, 1, 2, 3])]
    assert "1. Cell In[3]: x = 1  [on ranks 0-3 (ran on ranks 0-1 of 2)]" in chosen.text()
    assert "2. Cell In[3]: root_only = 1  [left out]" in chosen.text()
    assert "files they wrote" in chosen.text()
    same = plan("job", cells, 2, only="2,3")
    assert [(n, ranks) for n, _, ranks in same.runs] == [(2, [0]), (3, [1])]


@pytest.mark.parametrize(
    ("flag", "text", "said"),
    [
        ("--skip", "0", "holds cells 1-3"),
        ("--only", "4", "holds cells 1-3"),
        ("--skip", "a", "not a cell"),
    ],
)
def test_replay_cell_numbers_outside_the_list_are_refused(flag, text, said):
    from jupyter_distcomp.local.ranks.replay import plan

    cells = [_logged(None, 2)] * 3
    with pytest.raises(RankError, match=said):
        plan("job", cells, 2, **{flag[2:]: text})
