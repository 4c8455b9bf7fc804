"""The stopped ranks as one group at one prompt: commands on all of them at once, focus,
stepping over collectives together (torch.distributed on gloo, and MPI), ``q`` that never
hangs. A real kernel whose stdin requests are answered as a notebook answers them."""

from __future__ import annotations

import os
import re
import select
import socket
import time

import pytest

from .debug_support import MPI_SPEC, DebugKernel

TORCH_SPEC = """\
name: ddp
type: DistributedComponent
launcher:
  type: torch.distributed
  additional_arguments: python train.py
"""


@pytest.fixture(scope="module")
def kernel():
    k = DebugKernel()
    assert k.run("%load_ext jupyter_distcomp").ok
    # one world at a time: two worlds starting at once race in ipyparallel's canning map
    setup = {
        "ddp": "import torch\nimport torch.distributed as dist\n"
        'dist.init_process_group("gloo", init_method="env://")\nrank = dist.get_rank()',
        "dbg": "from mpi4py import MPI\ncomm = MPI.COMM_WORLD",
    }
    for spec, name, count in ((TORCH_SPEC, "ddp", 4), (MPI_SPEC, "dbg", 3)):
        out = k.run(f"%%distcomp {name}\n{spec}")
        assert out.ok, out.text
        out = k.run(
            f"{name}.runsettings.resource_layout.configure("
            f"instance_count=1, process_count_per_node={count})"
        )
        assert out.ok, out.text
        out = k.run(f"%%distcomp run {name}\n{setup[name]}", timeout=300)
        assert out.ok, out.text
    for name in ("ddp", "dbg"):  # each rank's first stop connects to the kernel: done once here
        out = k.run(f"%%distcomp run {name}\nbreakpoint()\npass", ["c"] * 4)
        assert out.ok, out.text
    yield k
    k.run("%%distcomp run ddp\ndist.barrier()\ndist.destroy_process_group()")
    k.close()


STEP_CELL = """%%distcomp run ddp
def step(t):
    breakpoint()
    dist.all_reduce(t)
    doubled = t * 2
    return doubled

t = torch.tensor([rank + 1.0])
print('total', step(t).item())
"""


@pytest.mark.slow
def test_four_gloo_ranks_share_one_prompt_and_step_over_all_reduce_together(kernel):
    answers = ["p t", "n", "p t", "rank", "n", "c"]
    out = kernel.run(STEP_CELL, answers)
    assert out.ok, out.text
    assert out.prompts == ["(Pdb ranks 0-3) "] * len(answers), f"{out.prompts}\n{out.text}"
    text = out.text
    assert f"[ranks 0-3] stopped at {out.cell}, line 4, in step" in text  # every stopped rank named
    for rank in range(4):  # different replies, each with its rank
        assert f"[rank {rank}] tensor([{rank + 1}.])" in text, text
    # the one n over the collective: every rank completed it, one line per distinct place
    assert f"[ranks 0-3]\n> {out.cell}, line 5, in step()" in text, text
    assert text.count(f"{out.cell}, line 5, in step") == 1, text  # the new place, once
    assert "[ranks 0-3] tensor([10.])" in text, text  # identical replies once
    assert "[rank 2] 2" in text  # a bare `rank` is the user's variable, as in pdb
    assert f"> {out.cell}, line 6, in step()" in text, text  # pdb's location lines
    assert "ipykernel_" not in text, text
    assert all(f"[rank {r}] total 20.0" in text for r in range(4)), text


TOP_LEVEL_CELL = """%%distcomp run ddp
t = torch.tensor([rank + 1.0])
breakpoint()
dist.all_reduce(t)
doubled = t * 2
print('total', doubled.item())
"""


@pytest.mark.slow
def test_a_top_level_breakpoint_stops_at_the_next_line_and_one_n_steps_over_all_reduce(kernel):
    """IPython runs each top-level statement as code of its own: the stop is still at the
    cell's next line, and ``n`` goes from line to line of the cell as in one frame."""
    answers = ["p t", "n", "p t", "n", "p doubled", "p '__return__' in globals()", "c"]
    out = kernel.run(TOP_LEVEL_CELL, answers)
    assert out.ok, out.text
    assert out.prompts == ["(Pdb ranks 0-3) "] * len(answers), out.transcript
    text = out.text
    assert text.startswith(f"[ranks 0-3] stopped at {out.cell}, line 4, in <module>\n"), text
    assert all(f"[rank {rank}] tensor([{rank + 1}.])" in text for rank in range(4)), text
    # one n completed the all_reduce on every rank, the next one reached the cell's last line
    assert f"[ranks 0-3]\n> {out.cell}, line 5, in <module>()" in text, text
    assert "[ranks 0-3] tensor([10.])" in text, text
    assert f"[ranks 0-3]\n> {out.cell}, line 6, in <module>()" in text, text
    assert "[ranks 0-3] tensor([20.])" in text, text
    assert "[ranks 0-3] False" in text, text  # pdb's __return__ is not left in the globals
    for pdb_event in ("--Return--", "--Call--", ", line 0", "->None"):
        assert pdb_event not in text, (pdb_event, text)
    assert all(f"[rank {r}] total 20.0" in text for r in range(4)), text


MOVES_CELL = """%%distcomp run dbg
x = 1
breakpoint()
y = x + 1
z = y + 1
v = z + 1
print('end', v)
"""


@pytest.mark.slow
def test_up_until_and_return_at_a_cell_top_level_move_as_in_one_frame(kernel):
    """The cell's top level is the oldest frame (``u``); ``unt 6`` runs on to line 6 across
    top-level statements; ``r`` runs to the cell's end, as pdb's ``r`` at a script's top
    level, and at that ``--Return--`` on past the cell: never into the machinery."""
    answers = ["u", "w", "d", "unt 6", "p z", "r", "p v", "r"]
    out = kernel.run(MOVES_CELL, answers)
    assert out.ok, out.text
    assert out.prompts == ["(Pdb ranks 0-2) "] * len(answers), out.transcript
    text = out.text
    assert "[ranks 0-2] *** Oldest frame" in text, text
    assert "[ranks 0-2] *** Newest frame" in text, text
    assert f"[ranks 0-2]\n> {out.cell}, line 6, in <module>()" in text, text  # unt 6
    assert "line 5, in <module>" not in text, text  # line 5 ran without a stop
    assert "[ranks 0-2] 3" in text, text  # p z
    assert f"--Return--\n> {out.cell}, line 7, in <module>()->None" in text, text  # r
    assert "[ranks 0-2] 4" in text, text  # p v
    for machinery in ("interactiveshell", "StopIteration", "async_helpers"):
        assert machinery not in text, (machinery, text)
    assert all(f"[rank {r}] end 4" in text for r in range(3)), text


@pytest.mark.slow
def test_focus_narrows_the_prompt_and_a_step_that_blocks_says_for_whom(kernel):
    answers = ["rank 2", "p t", "n", "p t", "n", "ranks all", "p t", "c"]
    out = kernel.run(STEP_CELL, answers)
    assert out.ok, out.text
    assert out.prompts == [
        "(Pdb ranks 0-3) ",
        "(Pdb rank 2) ",
        "(Pdb rank 2) ",
        # rank 2 waits in all_reduce for the others: the prompt goes to them
        "(Pdb ranks 0-1, 3) ",
        "(Pdb ranks 0-1, 3) ",
        # their n completes the collective: rank 2 is back and joins
        "(Pdb ranks 0-3) ",
        "(Pdb ranks 0-3) ",
        "(Pdb ranks 0-3) ",
    ], out.transcript
    text = out.text
    assert "Commands go to rank 2; `ranks all` for all." in text
    assert "\ntensor([3.])\n" in text  # one rank's reply, as pdb shows it
    assert "rank 2 still running after 'n': waiting for ranks 0-1, 3 (at this prompt)?" in text
    assert "The prompt goes to ranks 0-1, 3, still stopped." in text
    assert "[ranks 0-1, 3] tensor([" not in text  # their values differ before the step
    assert "[rank 3] tensor([4.])" in text
    assert f"[rank 2] stopped at {out.cell}, line 5, in step: joins the prompt" in text, text
    assert "rank 2 joined the prompt outside the focus" not in text  # focus was widened
    assert "[ranks 0-3] tensor([10.])" in text, text
    assert all(f"[rank {r}] total 20.0" in text for r in range(4)), text


@pytest.mark.slow
def test_mpi_ranks_step_over_allreduce_together_and_continue_as_one(kernel):
    cell = (
        "%%distcomp run dbg\ndef total():\n    breakpoint()\n"
        "    value = comm.allreduce(mpi_rank + 1)\n    return value\n\nprint('sum', total())"
    )
    tic = time.monotonic()
    out = kernel.run(cell, ["n", "p value", "c"])
    assert out.ok, out.text
    assert out.prompts == ["(Pdb ranks 0-2) "] * 3, out.prompts
    assert f"[ranks 0-2] stopped at {out.cell}, line 4, in total" in out.text, out.text
    assert f"[ranks 0-2]\n> {out.cell}, line 5, in total()" in out.text, out.text
    assert "[ranks 0-2] 6" in out.text
    assert all(f"[rank {r}] sum 6" in out.text for r in range(3))
    assert time.monotonic() - tic < 60


@pytest.mark.slow
def test_code_of_an_earlier_cell_is_named_by_that_cell_in_stops_where_and_tracebacks(kernel):
    """As the notebook names them: ``In [5], line 4`` for a function defined in In [5], also
    while In [9] runs it."""
    defined = kernel.run(
        "%%distcomp run dbg\ndef check(v):\n    breakpoint()\n    if v > 1:\n"
        "        raise ValueError(f'rank {v} too big')\n    return v\n"
    )
    assert defined.ok, defined.text
    out = kernel.run("%%distcomp run dbg\nfirst = 1\nprint('ok', check(mpi_rank))", ["w", "c"])
    assert not out.ok, out.text
    text = out.text
    assert f"[ranks 0-2] stopped at {defined.cell}, line 4, in check" in text, text
    assert f"  {out.cell}, line 3, in <module>()" in text, text  # w: the calling cell too
    assert f"> {defined.cell}, line 4, in check()" in text, text
    number = defined.reply["execution_count"]
    assert f"Cell In[{out.reply['execution_count']}], line 3" in text, text  # the traceback
    assert f"Cell In[{number}], line 5, in check" in text, text
    assert "ValueError: rank 2 too big" in text and "[rank 1] ok 1" in text, text


WORK_CELL = """%%distcomp run dbg
def work(x):
    breakpoint()
    y = x + 1
    return y

print('after', work(mpi_rank))
"""


@pytest.mark.slow
def test_locations_say_cell_line_and_interact_names_its_rank(kernel):
    answers = ["w", "b 5", "rank 1", "interact", "print('inside', x * 10)", "exit()", "ranks all"]
    answers += ["cl 1", "c"]
    out = kernel.run(WORK_CELL, answers)
    assert out.ok, out.text
    assert out.prompts[4] == "[rank 1] >>> ", out.prompts  # interact, on rank 1
    text = out.text
    assert f"Breakpoint 1 at {out.cell}, line 5" in text, text
    assert (
        f"> {out.cell}, line 4, in work()" in text and f"{out.cell}, line 7, in <module>()" in text
    ), text
    assert "[rank 1] inside 10" not in text and "inside 10" in text
    for internal in ("ipykernel_", "bdb.py", "pdb.py", "interactiveshell.py", "debug_hook"):
        assert internal not in text, (internal, text)


@pytest.mark.slow
def test_an_interrupt_at_the_group_prompt_names_the_prompt_and_shows_no_debugger_frames(kernel):
    def interrupt(prompt: str) -> None:
        kernel.km.interrupt_kernel()

    out = kernel.run(WORK_CELL, [interrupt], timeout=90)
    assert out.prompts == ["(Pdb ranks 0-2) "], out.text
    assert out.reply["status"] == "error" and out.reply["ename"] == "RankInterrupt"
    text = out.text
    assert (
        f"Interrupted at the debugger prompt of ranks 0-2 at {out.cell}, line 4, in work" in text
    ), text
    assert "The debug session ended" in text and "ready for the next cell" in text, text
    assert "at a debugger prompt" in text and "print('after', work(mpi_rank))" in text, text
    assert "quit in the debugger" not in text, text  # nobody typed q
    for internal in ("bdb.py", "pdb.py", "cmd.py", "multiprocessing", "debug_hook", "ipykernel_"):
        assert internal not in text, (internal, text)
    for _ in range(5):
        out = kernel.run("%%distcomp run dbg\nprint('ready', mpi_rank)")
        if out.ok:
            break
        time.sleep(1)
    assert out.ok, out.text


def status_until(kernel, name: str, needle: str, seconds: float = 90) -> str:
    deadline = time.monotonic() + seconds
    while True:
        text = kernel.run(f"%distcomp status {name}").text
        if needle in text or time.monotonic() > deadline:
            return text
        time.sleep(0.5)


@pytest.mark.slow
def test_where_tree_and_compare_on_ranks_stopped_in_a_background_cell(kernel):
    started = kernel.run(
        "%%distcomp run dbg --background\ndef work(v):\n    if mpi_rank > 0:\n"
        "        breakpoint()\n        odd = 1\n    return comm.allreduce(v)\n\n"
        "print('sum', work(mpi_rank + 100))"
    )
    assert started.ok, started.text
    status_until(kernel, "dbg", "ranks 1-2 stopped at a breakpoint")
    text = kernel.run("%distcomp where dbg").text
    assert "rank 0: busy, current stack" in text, text
    assert text.count("return comm.allreduce(v)") == 1, text
    assert f"ranks 1-2: at a debugger prompt, {started.cell}, line 5" in text, text
    for internal in ("bdb.py", "pdb.py", "cmd.py", "debug_hook"):
        assert internal not in text, (internal, text)
    # compare evaluates in the stopped frames (v is a local of work); spaces need no quotes
    out = kernel.run("%distcomp compare dbg v - mpi_rank --ranks 1-2")
    assert out.ok, out.text
    assert "compare `v - mpi_rank` on 2 rank(s)" in out.text and "All ranks agree." in out.text
    out = kernel.run("%distcomp compare dbg v")
    assert not out.ok, out.text
    assert "rank 0 of 'dbg' are busy (not stopped at a breakpoint)" in out.text, out.text
    assert "Fix: --ranks 1-2" in out.text and "Traceback" not in out.text, out.text
    out = kernel.run("%distcomp compare dbg v --ranks 1-2")
    assert "1-2" not in out.text.split("DIFFERS")[0].splitlines()[-1], out.text  # they differ
    assert "DIFFERS" in out.text and "101" in out.text and "102" in out.text, out.text
    # the stops are still there for wait, which shows where they stopped
    out = kernel.run("%distcomp wait dbg", ["p v", "c"])
    assert out.ok, out.text
    assert out.prompts == ["(Pdb ranks 1-2) "] * 2, out.text
    assert f"[ranks 1-2] stopped at {started.cell}, line 5, in work" in out.text, out.text
    assert "[rank 1] 101" in out.text and "[rank 2] 102" in out.text, out.text
    assert "[rank 0] sum 303" in kernel.output_of(started.msg_id)


@pytest.mark.slow
def test_compare_at_the_prompt_evaluates_in_each_ranks_frame(kernel):
    answers = [
        "compare t",
        "n",
        "compare t * 1",
        "compare t / 0",
        "compare t * float('nan')",
        "compare float('nan')",
        "compare [rank] * 3 if rank < 2 else list(range(300))",
        "compare t +",
        "c",
    ]
    out = kernel.run(STEP_CELL, answers)
    assert out.ok, out.text
    assert out.prompts == ["(Pdb ranks 0-3) "] * len(answers), f"{out.prompts}\n{out.text}"
    tables = out.text.split("ddp: compare ")[1:]
    assert len(tables) == 6, out.text
    assert tables[0].startswith("`t` on 4 rank(s)") and "DIFFERS" in tables[0], tables[0]
    # the max |diff| of a tensor: rank 0 served its t to the others, at their prompts
    assert re.search(r"\n3 .*DIFFERS\s+3\n", tables[0]), tables[0]
    assert "All ranks agree." in tables[1], tables[1]  # after the all_reduce
    assert "(4 Inf)" not in tables[2] and "(1 Inf)" in tables[2], tables[2]
    assert "(1 NaN)" in tables[3] and "All ranks agree." in tables[3], tables[3]
    assert "nan" in tables[4] and "All ranks agree." in tables[4], tables[4]
    assert "[0, 0, 0]" in tables[5] and "[1, 1, 1]" in tables[5], tables[5]
    assert "297, 298, 299]" in tables[5], tables[5]  # a list in full
    assert "is not a Python expression" in out.text, out.text


STEP_SCRIPT = """\
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
t = torch.tensor([dist.get_rank() + 1.0])
breakpoint()
dist.all_reduce(t)
print("total", t.item(), flush=True)
dist.barrier()
dist.destroy_process_group()
"""


def define_command(kernel, tmp_path, name: str, script: str) -> None:
    """Component ``name`` whose command runs ``script`` as train.py on 2 torch ranks."""
    (tmp_path / "train.py").write_text(script)
    spec = TORCH_SPEC.replace("name: ddp", f"name: {name}\ncode: {tmp_path}")
    assert kernel.run(f"%%distcomp {name}\n{spec}").ok
    layout = "instance_count=1, process_count_per_node=2"
    assert kernel.run(f"{name}.runsettings.resource_layout.configure({layout})").ok


@pytest.mark.slow
def test_the_ranks_of_a_command_share_one_prompt_and_step_over_all_reduce(kernel, tmp_path):
    define_command(kernel, tmp_path, "cmd", STEP_SCRIPT)
    out = kernel.run("%distcomp command cmd", ["p t", "n", "compare t", "c"], timeout=240)
    assert out.ok, out.text
    assert out.prompts == ["(Pdb ranks 0-1) "] * 4, out.transcript
    text = out.text
    assert f"[ranks 0-1] stopped at {tmp_path / 'train.py'}:7, in <module>" in text, text
    assert "[rank 0] tensor([1.])" in text and "[rank 1] tensor([2.])" in text, text
    assert f"[ranks 0-1]\n> {tmp_path / 'train.py'}(8)<module>()" in text, text
    assert "cmd: compare `t` on 2 rank(s)" in text and "All ranks agree." in text, text
    assert "[rank 0] total 3.0" in text and "[rank 1] total 3.0" in text, text


PRINTING_SCRIPT = """\
import os
rank = int(os.environ["RANK"])
breakpoint()
print("AAA", rank)
print("BBB", rank)
"""


@pytest.mark.slow
def test_what_a_commands_ranks_print_at_the_prompt_shows_before_the_next_prompt(kernel, tmp_path):
    define_command(kernel, tmp_path, "printing", PRINTING_SCRIPT)
    out = kernel.run("%distcomp command printing", ["n", "n", "c"], timeout=240)
    assert out.ok, out.text
    lines = out.transcript.splitlines()
    first_n, second_n = (i for i, line in enumerate(lines) if line.endswith(") n"))
    for rank in range(2):
        assert first_n < lines.index(f"[rank {rank}] AAA {rank}") < second_n, out.transcript
        assert second_n < lines.index(f"[rank {rank}] BBB {rank}"), out.transcript
    assert f"[ranks 0-1]\n> {tmp_path / 'train.py'}(5)<module>()" in out.transcript


STEP_INTO_PRINT = """%%distcomp run dbg
def f():
    breakpoint()
    print('x')
    done = 1
    return done
f()
"""


@pytest.mark.slow
def test_a_step_into_print_goes_to_the_next_line_not_into_the_output_machinery(kernel):
    """``s`` on a line that prints: the rank's output code (ipykernel's and ours, and the
    threading code they call) is not the user's, so the step stops at the next line."""
    out = kernel.run(STEP_INTO_PRINT, ["s", "s", "c"])
    assert out.ok, out.text
    assert f"> {out.cell}, line 5, in f()" in out.transcript, out.transcript
    for foreign in ("flow.py", "threading.py", "ipykernel", "jupyter_distcomp", "<string>"):
        assert foreign not in out.transcript, out.transcript


PRINTS_IN_A_FUNCTION = """%%distcomp run dbg
def f():
    print('before', mpi_rank)
    breakpoint()
    print('AAA', mpi_rank)
    print('BBB', mpi_rank)
    return 1
f()
"""

PRINTS_AT_TOP_LEVEL = """%%distcomp run dbg
print('before', mpi_rank)
breakpoint()
print('AAA', mpi_rank)
print('BBB', mpi_rank)
"""


@pytest.mark.slow
@pytest.mark.parametrize(
    ("cell", "func"), [(PRINTS_IN_A_FUNCTION, "f"), (PRINTS_AT_TOP_LEVEL, "<module>")]
)
def test_what_the_ranks_print_at_the_prompt_shows_before_the_next_prompt(kernel, cell, func):
    """As at pdb's own prompt: ``n`` over a print shows its line, then the new place (once),
    then the prompt; what a rank printed before its breakpoint shows before its stop; ``l 1``
    lists the cell as the notebook shows it, its ``%%distcomp run`` line included."""
    out = kernel.run(cell, ["n", "n", "l 1", "c"])
    assert out.ok, out.text
    script = out.transcript
    first_n, second_n = (i for i, line in enumerate(script.splitlines()) if line.endswith(") n"))
    lines = script.splitlines()
    stop = next(i for i, line in enumerate(lines) if "] stopped at " in line)
    for rank in range(3):
        assert lines.index(f"[rank {rank}] before {rank}") < stop, script
        assert first_n < lines.index(f"[rank {rank}] AAA {rank}") < second_n, script
        assert second_n < lines.index(f"[rank {rank}] BBB {rank}"), script
    line = 6 if func == "f" else 5
    assert f"[ranks 0-2]\n> {out.cell}, line {line}, in {func}()" in script, script
    after_n = lines[first_n:second_n]  # the new place after the first n, printed once
    assert sum(f"{out.cell}, line {line}, in {func}" in each for each in after_n) == 1, script
    assert f"ranks 0-2 at {out.cell}" not in script, script
    listing = [line for line in lines if "\t" in line]
    assert listing and listing[0].split("\t") == ["  1  ", "%%distcomp run dbg"], listing
    assert not any(line.rstrip().endswith("\t#") for line in listing), listing


@pytest.mark.slow
def test_an_evaluation_past_the_time_limit_is_interrupted_and_a_blocked_rank_is_named(kernel):
    assert kernel.run("%env DISTCOMP_DEBUG_EVAL_SECONDS=2").ok
    answers = [
        "!while True: pass",  # interrupted after 2 s: the ranks stay at the prompt
        "p sys.exit(3)",
        "rank 1",
        "p comm.allreduce(1)",  # rank 1 alone in a collective: SIGINT cannot end it
        "p comm.allreduce(1)",  # the others join it: rank 1 answers and rejoins
        "p mpi_rank",
        "c",
    ]
    try:
        tic = time.monotonic()
        out = kernel.run(
            "%%distcomp run dbg\nimport sys\nbreakpoint()\nprint('after', mpi_rank)", answers
        )
    finally:
        kernel.run("%env DISTCOMP_DEBUG_EVAL_SECONDS=15")
    assert out.ok, out.text
    text = out.text
    assert "ranks 0-2: '!while True: pass' ran past the debugger's time limit of 2 s" in text
    assert "KeyboardInterrupt" in text and "SystemExit" in text, text
    assert "rank 1 did not answer 'p comm.allreduce(1)' after the interrupt" in text, text
    assert out.prompts[:5] == [
        "(Pdb ranks 0-2) ",
        "(Pdb ranks 0-2) ",
        "(Pdb ranks 0-2) ",
        "(Pdb rank 1) ",
        "(Pdb ranks 0, 2) ",
    ], out.transcript
    # rank 1 rejoins once its collective completes: by the next prompt, or the one after
    assert set(out.prompts[5:]) <= {"(Pdb ranks 0, 2) ", "(Pdb ranks 0-2) ", "(Pdb rank 1) "}
    assert "(Pdb ranks 0-2) " in out.prompts[5:] or "(Pdb rank 1) " in out.prompts[5:]
    assert "[ranks 0, 2] 3" in text, text  # the collective completed
    assert re.search(r"\[rank 1\]\s+\*\*\* KeyboardInterrupt", text), text  # once it returned
    assert all(f"[rank {r}] after {r}" in text for r in range(3)), text
    assert time.monotonic() - tic < 60


@pytest.mark.slow
def test_100000_breakpoints_in_one_file_load_in_linear_time(kernel):
    """pdb loads each breakpoint with a check of a list: 100,000 in one file took minutes
    per stop (30,000: 7.5 s). JupyterLab's gutter sends them this way (debugpy's own part
    of that is upstream's)."""
    cell = (
        "%%distcomp run dbg\nimport bdb\nfor line in range(10, 100_010):\n"
        "    bdb.Breakpoint('/nowhere/big.py', line)\nbreakpoint()\n"
        "bdb.Breakpoint.clearBreakpoints()\nprint('cleared', len(bdb.Breakpoint.bplist))"
    )
    tic = time.monotonic()
    out = kernel.run(cell, ["c"])
    seconds = time.monotonic() - tic
    assert out.ok, out.text
    assert out.prompts == ["(Pdb ranks 0-2) "], out.text
    assert all(f"[rank {r}] cleared 0" in out.text for r in range(3)), out.text
    assert seconds < 30, seconds


def kernel_counts(pid: int) -> tuple[int, int]:
    """The kernel process's threads and open file descriptors now."""
    return len(os.listdir(f"/proc/{pid}/task")), len(os.listdir(f"/proc/{pid}/fd"))


@pytest.mark.slow
def test_300_idle_clients_of_the_debugger_channel_cost_no_threads_and_a_breakpoint_still_stops(
    kernel,
):
    from jupyter_distcomp.local.debug.listener import MAX_PENDING

    out = kernel.run(
        "%%distcomp run dbg --ranks 0\nimport sys\n"
        "print('at', *sys.modules['distcomp_debug_hook']._channel.address)"
    )
    host, port = re.search(r"at (\S+) (\d+)", out.text).groups()
    pid = int(re.search(r"pid (\d+)", kernel.run("import os; print('pid', os.getpid())").text)[1])
    threads, files = kernel_counts(pid)
    flood = [socket.create_connection((host, int(port))) for _ in range(300)]
    try:
        # the listener took every connection in: the newest has its challenge
        assert select.select([flood[-1]], [], [], 10)[0], "the flood was not accepted"
        now_threads, now_files = kernel_counts(pid)
        assert now_threads <= threads + 1, (threads, now_threads)
        assert now_files <= files + MAX_PENDING + 2, (files, now_files)
        out = kernel.run("%%distcomp run dbg\nbreakpoint()\nprint('went on', mpi_rank)", ["c"])
        assert out.ok, out.text
        assert out.prompts == ["(Pdb ranks 0-2) "], out.text
        assert all(f"[rank {r}] went on {r}" in out.text for r in range(3)), out.text
    finally:
        for client in flood:
            client.close()


@pytest.mark.slow
def test_q_on_a_rank_the_others_wait_for_ends_the_cell_within_the_grace(kernel):
    """The last test of the module: ranks 0-1 stay blocked in MPI's C code."""
    kernel.run("%config DistComp.fail_fast_grace = 3")
    cell = (
        "%%distcomp run dbg --debug-ranks 2\nimport time\nbreakpoint()\n"
        "value = comm.allreduce(mpi_rank)\nprint('sum', value)"
    )
    tic = time.monotonic()
    out = kernel.run(cell, ["q"], timeout=120)
    seconds = time.monotonic() - tic
    assert not out.ok, out.text
    assert seconds < 40, seconds
    text = out.text
    assert "rank 2: quit in the debugger" in text, text
    assert re.search(r"ranks 0-1: still busy, waiting here", text), text
    assert "comm.allreduce(mpi_rank)" in text, text  # where they wait: their cell line
    assert "Traceback" in text and "bdb.py" not in text and "BdbQuit" not in text, text
    # blocked in MPI's C code, they do not stop on SIGINT: the cell says how to recover
    assert "did not stop on SIGINT" in text and "`%distcomp restart dbg`" in text, text
