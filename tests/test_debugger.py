"""``breakpoint()`` on ranks, ``%distcomp debug``, the debugger channel: in a real kernel whose
stdin requests are answered as a notebook answers them, and in terminal IPython."""

from __future__ import annotations

import socket
import sys
import time
from pathlib import Path

import pytest

from .debug_support import MPI_SPEC, DebugKernel

HELPER = """\
def twice(v):
    doubled = v * 2
    return doubled


def stop_here(v):
    import pdb

    local_value = v + 1
    pdb.set_trace()
    return local_value
"""


@pytest.fixture(scope="module")
def kernel(tmp_path_factory):
    folder = tmp_path_factory.mktemp("debugger")
    (folder / "helper.py").write_text(HELPER)
    k = DebugKernel(cwd=str(folder))
    out = k.run("%load_ext jupyter_distcomp")
    assert out.ok, out.text
    out = k.run(f"%%distcomp dbg\n{MPI_SPEC}")
    assert out.ok, out.text
    out = k.run(
        "dbg.runsettings.resource_layout.configure(instance_count=1, process_count_per_node=3)"
    )
    assert out.ok, out.text
    k.folder = folder
    yield k
    k.close()


def ready(kernel, tries: int = 1) -> None:
    """Every rank runs a cell (``tries`` > 1: waiting for ranks still ending a cell)."""
    for _ in range(tries):
        out = kernel.run("%%distcomp run dbg\nprint('ready', mpi_rank)")
        if out.ok or "still busy" not in out.text:
            break
        time.sleep(2)
    assert out.ok, out.text
    assert all(f"[rank {r}] ready {r}" in out.text for r in range(3)), out.text


@pytest.mark.slow
def test_breakpoint_prompts_on_the_rank_and_every_pdb_command_works(kernel):
    ready(kernel)
    cell = f"""%%distcomp run dbg --debug-ranks 1
import sys
sys.path.insert(0, {str(kernel.folder)!r})
import helper

def work(x):
    breakpoint()
    y = x + 1
    z = helper.twice(y)
    return z

print('result', work(mpi_rank * 10))
"""
    answers = [
        "p x",
        "pp {'x': x, 'twice': [x] * 2}",
        "ll",
        "b 10",
        "n",
        "p y",
        "s",
        "w",
        "u",
        "p y + 1000",
        "d",
        "r",
        "c",
        "p z",
        "!z = 100",
        "interact",
        "print('inside', z * 2)",
        "exit()",
        "l",
        "cl 1",
        "c",
    ]
    out = kernel.run(cell, answers)
    assert out.ok, out.text
    assert out.prompts.count("(Pdb rank 1) ") == len(answers) - 2, out.prompts
    text = out.text
    assert f"[rank 1] stopped at {out.cell}, line 8, in work" in text
    assert "\n10\n" in text  # p x
    assert "{'twice': [10, 10], 'x': 10}" in text  # pp
    assert "def work(x):" in text and "8  ->\t    y = x + 1" in text  # ll, its arrow
    assert "Breakpoint 1 at" in text and "Deleted breakpoint 1 at" in text  # b, cl
    assert "\n11\n" in text and "1011" in text  # p y, up a frame
    assert "helper.py(1)twice()" in text  # s into the module, w
    assert "interactiveshell.py" not in text  # w shows the user's frames only
    assert "--Return--" in text  # r
    assert "\n22\n" in text  # p z at the breakpoint
    assert "inside 200" in text  # interact
    assert "[rank 1] result 100" in text  # !z = 100 changed the rank's variable
    assert "[rank 0] result 2" in text and "[rank 2] result 42" in text
    assert "breakpoint() skipped on ranks 0, 2: --debug-ranks stops only rank 1." in text
    assert text.count("skipped") == 1


@pytest.mark.slow
def test_set_trace_in_an_imported_module_shows_the_file_line(kernel):
    cell = f"""%%distcomp run dbg --debug-ranks 2
import sys
sys.path.insert(0, {str(kernel.folder)!r})
import helper
print('got', helper.stop_here(mpi_rank))
"""
    out = kernel.run(cell, ["p local_value", "c"])
    assert out.ok, out.text
    assert out.prompts == ["(Pdb rank 2) "] * 2
    assert f"[rank 2] stopped at {kernel.folder / 'helper.py'}:11, in stop_here" in out.text
    assert "\n3\n" in out.text and "[rank 2] got 3" in out.text


@pytest.mark.slow
def test_ranks_that_stop_apart_are_served_one_at_a_time_in_order_of_arrival(kernel):
    cell = """%%distcomp run dbg
import time
time.sleep(4 * mpi_rank)
def at(rank):
    breakpoint()
    return rank
print('went on', at(mpi_rank))
"""
    answers = ["p rank", "c"] * 3
    out = kernel.run(cell, answers)
    assert out.ok, out.text
    assert out.prompts == [f"(Pdb rank {r}) " for r in (0, 0, 1, 1, 2, 2)]
    assert out.saw(0, "debugging") and out.saw(2, "debugging"), out.states  # for the panel
    assert out.states[-1] == {0: "idle", 1: "idle", 2: "idle"}
    heads = [out.text.index(f"[rank {r}] stopped at {out.cell}, line 6, in at") for r in range(3)]
    assert heads == sorted(heads)
    assert all(f"[rank {r}] went on {r}" in out.text for r in range(3))


@pytest.mark.slow
def test_q_ends_that_rank_with_one_line_and_the_ranks_stay_usable(kernel):
    out = kernel.run(
        "%%distcomp run dbg --debug-ranks 1\nx = 5\nbreakpoint()\nprint('reached', mpi_rank)",
        ["q"],
    )
    assert out.ok, out.text
    assert "rank 1: quit in the debugger" in out.text
    assert "Traceback" not in out.text and "BdbQuit" not in out.text, out.text
    assert "[rank 0] reached 0" in out.text and "[rank 1] reached" not in out.text
    ready(kernel)


@pytest.mark.slow
def test_the_time_out_does_not_run_while_a_person_is_at_a_prompt(kernel):
    # baseline: the same time-out ends a cell that works as long as the person reads
    out = kernel.run("%%distcomp run dbg --timeout 3\nimport time\ntime.sleep(6)")
    assert not out.ok and "timed out after 3 s" in out.text
    ready(kernel, tries=10)

    def slow_reader(prompt: str) -> str:
        time.sleep(6)
        return "c"

    out = kernel.run(
        "%%distcomp run dbg --timeout 3 --debug-ranks 0\nbreakpoint()\nprint('finished', mpi_rank)",
        [slow_reader],
    )
    assert out.ok, out.text
    assert "timed out" not in out.text and "[rank 0] finished 0" in out.text


def status_until(kernel, name: str, needle: str, seconds: float = 90) -> str:
    """``%distcomp status NAME``'s text once it shows ``needle``."""
    deadline = time.monotonic() + seconds
    while True:
        text = kernel.run(f"%distcomp status {name}").text
        if needle in text or time.monotonic() > deadline:
            return text
        time.sleep(0.5)


@pytest.mark.slow
def test_a_background_cell_says_a_rank_stopped_and_wait_opens_its_prompt(kernel):
    started = kernel.run(
        "%%distcomp run dbg --background --timeout 10\nx = mpi_rank * 10\n"
        "if mpi_rank == 1:\n    breakpoint()\nprint('after', x)"
    )
    assert started.ok, started.text
    stopped = "rank 1 stopped at a breakpoint: `%distcomp wait dbg` opens its prompt"
    text = status_until(kernel, "dbg", stopped)
    assert stopped in text, text
    told = f"[rank 1] stopped at {started.cell}, line 5, in <module>: `%distcomp wait dbg` opens its prompt."
    assert told in kernel.output_until(started.msg_id, told)
    time.sleep(11)  # longer than the cell's time-out, which waits while rank 1 is stopped
    out = kernel.run("%distcomp wait dbg", ["p x + 1", "c"])
    assert out.ok, out.text
    assert out.prompts == ["(Pdb rank 1) "] * 2, out.text
    assert "\n11\n" in out.text and "the background cell finished" in out.text
    background = kernel.output_of(started.msg_id)
    assert all(f"[rank {r}] after {r * 10}" in background for r in range(3)), background
    assert "timed out" not in background + out.text
    assert "stopped at a breakpoint" not in kernel.run("%distcomp status dbg").text

    started = kernel.run(
        "%%distcomp run dbg --background --debug-ranks 0\nbreakpoint()\nprint('went on', mpi_rank)"
    )
    status_until(kernel, "dbg", "rank 0 stopped at a breakpoint")
    out = kernel.run("%distcomp wait dbg", ["q"])
    assert out.ok and out.prompts == ["(Pdb rank 0) "], out.text
    background = kernel.output_of(started.msg_id)
    assert "rank 0: quit in the debugger" in background and "Traceback" not in background
    assert "[rank 2] went on 2" in background and "[rank 0] went on" not in background
    ready(kernel)


@pytest.mark.slow
def test_an_interrupt_at_a_prompt_of_wait_interrupts_the_background_cell(kernel):
    started = kernel.run(
        "%%distcomp run dbg --background --debug-ranks 0\nbreakpoint()\nprint('after', mpi_rank)"
    )
    status_until(kernel, "dbg", "rank 0 stopped at a breakpoint")

    def interrupt(prompt: str) -> None:
        kernel.km.interrupt_kernel()

    out = kernel.run("%distcomp wait dbg", [interrupt], timeout=90)
    assert out.prompts == ["(Pdb rank 0) "], out.text
    assert out.reply["status"] == "error" and "KeyboardInterrupt" in out.text, out.text
    assert "the cell failed on rank 0" in out.text, out.text
    background = kernel.output_of(started.msg_id)
    assert "[rank 1] after 1" in background and "[rank 0] after" not in background
    assert "quit in the debugger" not in out.text + background, out.text + background
    assert "running" not in kernel.run("%distcomp status dbg").text


@pytest.mark.slow
def test_a_kernel_interrupt_at_a_prompt_ends_the_session_and_the_ranks_stay_usable(kernel):
    def interrupt(prompt: str) -> None:
        kernel.km.interrupt_kernel()

    out = kernel.run(
        "%%distcomp run dbg\nimport time\ntime.sleep(0.5 * mpi_rank)\nbreakpoint()\n"
        "print('after', mpi_rank)",
        [interrupt],
        timeout=60,
    )
    assert out.reply["status"] == "error" and out.reply["ename"] == "RankInterrupt"
    assert len(out.prompts) == 1, "the other ranks' stops ended with the interrupt"
    assert "Interrupted" in out.text
    assert "quit in the debugger" not in out.text, out.text
    ready(kernel)
    out = kernel.run("%%distcomp run dbg\nimport sys\nprint('traced', sys.gettrace() is not None)")
    assert out.text.count("traced False") == 3, out.text


@pytest.mark.slow
def test_post_mortem_on_the_lowest_failed_rank_and_on_a_chosen_one(kernel):
    out = kernel.run(
        "%%distcomp run dbg\ndef pick(values):\n    wanted = 2\n    return values[wanted]\n"
        "pick(list(range(mpi_rank + 1)))"
    )
    assert not out.ok and "IndexError" in out.text
    failed = out
    out = kernel.run("%distcomp debug dbg", ["p values", "p wanted", "c"])
    assert out.ok, out.text
    assert out.prompts == ["(Pdb rank 0) "] * 3
    assert f"[rank 0] stopped at {failed.cell}, line 4, in pick" in out.text  # the failed cell
    assert "[0]\n2\n" in out.text
    out = kernel.run("%distcomp debug dbg --rank 1", ["p values", "c"])
    assert out.ok and "[0, 1]" in out.text and out.prompts[0] == "(Pdb rank 1) "
    out = kernel.run("%distcomp debug dbg --rank 2")
    assert not out.ok
    assert "Rank 2 of 'dbg' did not fail its last `%%distcomp run` cell (failed: ranks 0-1)" in (
        out.text
    )
    assert "Traceback" not in out.text
    ready(kernel)


#: a command whose ranks write when they went on into OUT (an absolute path: a command runs
#: in a copy of its code folder), its breakpoint on line 8
TRAIN = """\
import os
import time
OUT = {out!r}
rank = int(os.environ["OMPI_COMM_WORLD_RANK"])
if rank == 1:
    secret = rank * 7
    breakpoint()
    print("rank 1 continues", flush=True)
    open(os.path.join(OUT, "continued"), "w").write(repr(time.time()))
else:
    print("rank 0 works on", flush=True)
    open(os.path.join(OUT, "done-0"), "w").write(repr(time.time()))
"""


@pytest.mark.slow
def test_breakpoint_in_the_specs_command_prompts_and_other_ranks_run_on(kernel, tmp_path):
    (tmp_path / "train.py").write_text(TRAIN.format(out=str(tmp_path)))
    spec = MPI_SPEC.replace("name: dbg", f"name: cmd\ncode: {tmp_path}")
    out = kernel.run(f"%%distcomp cmd\n{spec}")
    assert out.ok, out.text
    kernel.run(
        "cmd.runsettings.resource_layout.configure(instance_count=1, process_count_per_node=2)"
    )

    def after_a_while(prompt: str) -> str:
        time.sleep(2)
        return "p secret"

    out = kernel.run("%distcomp command cmd", [after_a_while, "c"])
    assert out.ok, out.text
    assert out.prompts == ["(Pdb rank 1) "] * 2
    assert f"[rank 1] stopped at {tmp_path / 'train.py'}:8, in <module>" in out.text
    assert "\n7\n" in out.text and "[rank 1] rank 1 continues" in out.text
    done = float((tmp_path / "done-0").read_text())
    continued = float((tmp_path / "continued").read_text())
    assert done < continued, "rank 0 waited for rank 1's debugger"


@pytest.mark.slow
def test_breakpoint_in_a_command_run_in_the_background_prompts_in_wait(kernel, tmp_path):
    (tmp_path / "train.py").write_text(TRAIN.format(out=str(tmp_path)))
    spec = MPI_SPEC.replace("name: dbg", f"name: bgcmd\ncode: {tmp_path}")
    assert kernel.run(f"%%distcomp bgcmd\n{spec}").ok
    kernel.run(
        "bgcmd.runsettings.resource_layout.configure(instance_count=1, process_count_per_node=2)"
    )
    started = kernel.run("%distcomp command bgcmd --background --timeout 60")
    assert started.ok, started.text
    stopped = "rank 1 stopped at a breakpoint: `%distcomp wait bgcmd` opens its prompt"
    text = status_until(kernel, "bgcmd", stopped)
    assert stopped in text, text
    told = f"[rank 1] stopped at {tmp_path / 'train.py'}:8, in <module>: `%distcomp wait"
    assert told in kernel.output_until(started.msg_id, told)
    out = kernel.run("%distcomp wait bgcmd", ["p secret", "c"])
    assert out.ok, out.text
    assert out.prompts == ["(Pdb rank 1) "] * 2 and "\n7\n" in out.text, out.text
    assert "[rank 1] rank 1 continues" in kernel.output_of(started.msg_id)


SET_TRACE = """\
import os
import pdb

rank = int(os.environ["OMPI_COMM_WORLD_RANK"])
if rank == 1:
    secret = rank * 7
    pdb.set_trace()
    print("rank 1 was not ended", flush=True)
print(f"rank {rank} done", flush=True)
"""


@pytest.mark.slow
def test_pdb_set_trace_in_the_specs_command_prompts_and_q_ends_that_process_in_one_line(
    kernel, tmp_path
):
    (tmp_path / "train.py").write_text(SET_TRACE)
    spec = MPI_SPEC.replace("name: dbg", f"name: quitter\ncode: {tmp_path}")
    assert kernel.run(f"%%distcomp quitter\n{spec}").ok
    kernel.run(
        "quitter.runsettings.resource_layout.configure(instance_count=1, process_count_per_node=2)"
    )
    out = kernel.run("%distcomp command quitter", ["p secret", "q"])
    assert out.prompts == ["(Pdb rank 1) "] * 2, out.text
    assert f"[rank 1] stopped at {tmp_path / 'train.py'}:8, in <module>" in out.text
    assert "\n7\n" in out.text
    assert "[rank 1] rank 1: quit in the debugger" in out.text
    assert "rank 1: quit in the debugger (exit code 1)" in out.text
    assert "[rank 1] rank 1 was not ended" not in out.text
    assert "Traceback" not in out.text and "BdbQuit" not in out.text, out.text
    assert out.reply["status"] == "error" and out.reply["ename"] == "RankError"


@pytest.mark.slow
def test_an_interrupt_at_a_commands_prompt_is_no_quit(kernel, tmp_path):
    """Interrupting the kernel at a command rank's prompt ends the run as an interrupt: no
    rank is said to have quit in the debugger (issue 47, item 13)."""
    (tmp_path / "train.py").write_text(SET_TRACE)
    spec = MPI_SPEC.replace("name: dbg", f"name: stopper\ncode: {tmp_path}")
    assert kernel.run(f"%%distcomp stopper\n{spec}").ok
    kernel.run(
        "stopper.runsettings.resource_layout.configure(instance_count=1, process_count_per_node=2)"
    )

    def interrupt(prompt: str) -> None:
        kernel.km.interrupt_kernel()

    out = kernel.run("%distcomp command stopper", [interrupt], timeout=90)
    assert out.prompts == ["(Pdb rank 1) "], out.text
    assert out.reply["status"] == "error" and "interrupted" in out.text, out.text
    assert "quit in the debugger" not in out.text, out.text
    assert "[rank 1] rank 1 was not ended" not in out.text, out.text


def test_an_unauthenticated_connection_is_refused():
    from multiprocessing import AuthenticationError
    from multiprocessing.connection import Client

    from jupyter_distcomp.local.debug.channel import DebugChannel

    channel = DebugChannel()
    try:
        assert channel._server.getsockname()[0] == "127.0.0.1"
        address = (channel.host, channel.port)
        with pytest.raises(AuthenticationError):
            Client(address, authkey=b"not the key")
        raw = socket.create_connection(address)
        raw.sendall(b'{"hello": 0}\n{"stop": {}}\n' * 4)
        raw.settimeout(10)
        try:
            while raw.recv(4096):  # the channel sends its challenge, then closes on our reply
                pass
        except ConnectionResetError:  # closed with our bytes unread
            pass
        raw.close()
        deadline = time.monotonic() + 10
        while channel.refused < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert channel.refused == 2
        assert not channel.pending(), "an unauthenticated client stopped a rank"
        client = Client(address, authkey=channel.key)  # the key holder gets in
        client.send_bytes(b'{"hello": 3}')
        client.send_bytes(b'{"stop": {"file": "train.py", "line": 4, "func": "main"}}')
        assert client.poll(10) and client.recv_bytes() == b'{"go": true}'
        assert channel.pending()
        client.close()
    finally:
        channel.close()


@pytest.mark.slow
def test_breakpoint_on_a_rank_in_terminal_ipython(tmp_path):
    pexpect = pytest.importorskip("pexpect")
    script = tmp_path / "session.ipy"
    script.write_text(
        "%load_ext jupyter_distcomp\n"
        f"get_ipython().run_cell_magic('distcomp', 'term', {MPI_SPEC!r})\n"
        "term.runsettings.resource_layout.configure(instance_count=1, process_count_per_node=2)\n"
        "get_ipython().run_cell_magic('distcomp', 'run term', "
        "'import time\\nx = mpi_rank + 41\\nbreakpoint()\\n"
        'print("x is", x)\')\n'
        "print('END OF SESSION')\n"
    )
    ipython = str(Path(sys.executable).parent / "ipython")
    child = pexpect.spawn(
        ipython,
        ["--no-banner", "--colors=NoColor", "--simple-prompt", str(script)],
        cwd=str(tmp_path),
        encoding="utf-8",
        timeout=180,
    )
    try:
        child.expect(r"\[ranks 0-1\] stopped at In \[\d+\], line 5")  # one prompt for both
        child.expect_exact("(Pdb ranks 0-1) ")
        child.sendline("p x * 2")
        child.expect_exact("[rank 0] 82")
        child.expect_exact("[rank 1] 84")
        child.expect_exact("(Pdb ranks 0-1) ")
        child.sendline("c")
        child.expect_exact("x is 42")
        child.expect_exact("END OF SESSION")
        child.expect(pexpect.EOF)
    finally:
        child.close(force=True)


@pytest.mark.slow
def test_a_kernel_interrupt_while_ranks_wait_for_their_turn_leaves_no_rank_traced(kernel):
    """Rank 0 is at a prompt, ranks 1 and 2 stopped too and wait their turn (their stops are
    queued) when the kernel is interrupted: every rank ends its cell, none stays traced."""

    def interrupt(prompt: str) -> None:
        time.sleep(2)  # the other ranks' stops arrive and queue meanwhile
        kernel.km.interrupt_kernel()

    out = kernel.run(
        "%%distcomp run dbg\nimport time\ntime.sleep(0.2 * mpi_rank)\nbreakpoint()\n"
        "print('after', mpi_rank)",
        [interrupt],
        timeout=60,
    )
    assert out.reply["status"] == "error" and out.reply["ename"] == "RankInterrupt", out.text
    assert len(out.prompts) == 1, out.text
    assert "-> print('after', mpi_rank)" in out.text, out.text  # where they stopped
    assert not any(f"after {rank}" in out.text for rank in range(3)), out.text
    ready(kernel, tries=3)
    out = kernel.run("%%distcomp run dbg\nimport sys\nprint('traced', sys.gettrace() is not None)")
    assert out.text.count("traced False") == 3, out.text


@pytest.mark.slow
def test_a_session_continued_with_breakpoints_set_leaves_no_rank_traced_after_its_cell(kernel):
    """pdb keeps tracing after ``c`` while breakpoints exist; the session ends with its cell
    (a rank traced for good would also stay traced after a later interrupt)."""
    out = kernel.run(
        "%%distcomp run dbg --debug-ranks 0\ndef never():\n    return 1\n\nbreakpoint()\n"
        "print('went on', mpi_rank)",
        ["b never", "c"],
    )
    assert out.ok, out.text
    assert "Breakpoint" in out.text and "[rank 0] went on 0" in out.text
    out = kernel.run("%%distcomp run dbg\nimport sys\nprint('traced', sys.gettrace() is not None)")
    assert out.text.count("traced False") == 3, out.text
