"""The small parts behind ``where`` and ``compare``, without ranks."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from jupyter_distcomp.local.command.active import STACK_SITE
from jupyter_distcomp.local.stacks import main_thread_stack, stack_sections

from .waiting import wait_for

PROGRAM = """
import time

import pytest
def waiting():
    time.sleep(30)
print("ready", flush=True)
waiting()
"""


def test_the_stack_hook_dumps_on_sigusr1_and_keeps_the_users_sitecustomize(tmp_path):
    own = tmp_path / "own"
    own.mkdir()
    (own / "sitecustomize.py").write_text("import os\nos.environ['OWN_SITE'] = 'ran'\n")
    stacks = tmp_path / "stacks"
    stacks.mkdir()
    program = tmp_path / "train.py"
    program.write_text(PROGRAM)
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([STACK_SITE, str(own)]),
        "DISTCOMP_STACK_DIR": str(stacks),
    }
    check = subprocess.run(
        [sys.executable, "-c", "import os; print(os.environ.get('OWN_SITE'))"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    assert check.stdout.strip() == "ran", "the user's own sitecustomize did not run"
    proc = subprocess.Popen([sys.executable, str(program)], env=env, stdout=subprocess.PIPE)
    try:
        assert proc.stdout is not None and proc.stdout.readline() == b"ready\n"
        (name,) = [n for n in os.listdir(stacks) if n.startswith(f"{proc.pid}-") and ".stack" in n]
        assert os.path.exists(stacks / name.replace(".stack", ".ledger")), "no ledger beside"
        deadline = time.monotonic() + 10
        dump = ""
        while time.monotonic() < deadline and "line 4 in waiting" not in dump:
            proc.send_signal(signal.SIGUSR1)  # until it has reached the sleep
            time.sleep(0.1)
            dump = (stacks / name).read_text()
        assert proc.poll() is None, "SIGUSR1 ended the process"
    finally:
        proc.kill()
        proc.wait()
    thread = int(name.split("-")[1].split(".")[0])

    last = dump[dump.rindex("Current thread") :]
    (section,) = stack_sections({0: main_thread_stack(last, thread)}, "", "running")
    text = "\n".join(section[1])
    assert "in waiting" in text and "time.sleep(30)" in text


def test_identical_stacks_of_ranks_with_different_cell_files_are_one_section():
    frame = 'File "/tmp/ipykernel_{pid}/123.py", line 2 in <module>'
    stacks = {0: frame.format(pid=11), 1: frame.format(pid=12), 2: frame.format(pid=13)}
    sections = stack_sections(stacks, "x = 1\nwait()", "busy")
    assert [heading for heading, _ in sections] == ["ranks 0-2: busy"]
    assert "    wait()" in sections[0][1]


def _dump(*frames: tuple[str, int, str]) -> str:
    """A faulthandler dump of the main thread, most recent call first."""
    lines = ["Current thread 0x00007f0000000001 (most recent call first):"]
    lines += [f'  File "{path}", line {line} in {func}' for path, line, func in frames]
    return "\n".join(lines)


CODE = "%%distcomp run w\ndef step():\n    comm.allreduce(1)\n\nstep()\ntime.sleep(9)\n"
ENGINE = ("/venv/lib/python3.13/site-packages/IPython/core/interactiveshell.py", 3600, "run_code")


def test_where_tree_merges_common_frames_and_flags_the_odd_branch():
    from jupyter_distcomp.local.inspect.tree import stack_tree
    from jupyter_distcomp.local.stacks import stack_frames

    collective = _dump(
        ("/tmp/ipykernel_7/1.py", 3, "step"), ("/tmp/ipykernel_7/1.py", 5, "<module>"), ENGINE
    )
    asleep = _dump(("/tmp/ipykernel_9/1.py", 6, "<module>"), ENGINE)
    stacks = {r: stack_frames(collective, CODE)[0] for r in range(31)}
    stacks[31] = stack_frames(asleep, CODE)[0]
    lines = stack_tree(stacks)
    text = "\n".join(lines)
    assert text.count("comm.allreduce(1)") == 1 and "interactiveshell" not in text
    assert lines[0] == "+ ranks 0-30"
    assert "+ rank 31  <- differs" in lines
    assert "    time.sleep(9)" in text
    # a common prefix is shown once, unindented, then the branches
    deeper = {0: stacks[0], 1: [*stacks[0][:1], stacks[31][0]]}
    lines = stack_tree(deeper)
    assert lines[:2] == ["  Cell, line 5, in <module>", "    step()"], lines
    assert lines[2] == "+ rank 0" and "+ rank 1" in lines, lines


def test_a_rank_at_a_debugger_prompt_shows_its_own_frames_only():
    from jupyter_distcomp.local.stacks import render_stack, stack_frames

    at_prompt = _dump(
        ("/usr/lib/python3.13/multiprocessing/connection.py", 430, "_recv_bytes"),
        ("/tmp/x/distcomp_debug_hook.py", 120, "readline"),
        ("/usr/lib/python3.13/cmd.py", 126, "cmdloop"),
        ("/usr/lib/python3.13/pdb.py", 400, "interaction"),
        ("/usr/lib/python3.13/bdb.py", 90, "trace_dispatch"),
        ("/tmp/ipykernel_7/1.py", 3, "step"),
        ("/tmp/ipykernel_7/1.py", 5, "<module>"),
        ENGINE,
    )
    frames, debugging = stack_frames(at_prompt, CODE)
    assert debugging and frames[-1].place() == "cell line 3"
    text = "\n".join(render_stack(at_prompt, CODE))
    assert text.endswith("(at a debugger prompt)")
    for internal in ("connection.py", "debug_hook", "cmd.py", "pdb.py", "bdb.py"):
        assert internal not in text


def test_compare_table_nan_equals_nan_and_arrays_show_nan_and_inf_counts():
    import numpy

    from jupyter_distcomp.core.compare_table import table
    from jupyter_distcomp.rank_side.compare import summarize_value

    nan = {r: summarize_value(float("nan"), "unit") for r in range(3)}
    assert "All ranks agree." in table("w", "loss", nan, None).text()
    values = [numpy.array([1.0, numpy.nan, numpy.inf]), numpy.array([1.0, 2.0, 3.0])]
    arrays = {0: summarize_value(values[0], "unit"), 1: summarize_value(values[1], "unit")}
    text = table("w", "x", arrays, None).text()
    assert "(1 NaN, 1 Inf)" in text and "DIFFERS" in text, text
    close = {r: summarize_value(0.5 + (0.25 if r == 2 else 0.0), "unit") for r in range(4)}
    text = table("w", "loss", close, 0.6).text()
    assert "rank 2 differs from rank 0 by at most 0.25, within rtol 0.6" in text, text
    assert text.endswith("All ranks agree within rtol 0.6 (not all equal)."), text
    long = {r: summarize_value([*range(300), r], "unit") for r in range(2)}
    text = table("w", "xs", long, None).text()
    assert "297, 298, 299, 0]" in text and "297, 298, 299, 1]" in text, text


def test_everything_after_the_name_is_the_expression_of_compare():
    from jupyter_distcomp.notebook.magics import compare_arguments

    args = compare_arguments("compare w a + b[' c '] --ranks 0,2 --rtol 1e-3")
    assert (args.name, args.expr, args.ranks, args.rtol) == ("w", "a + b[' c ']", "0,2", 1e-3)
    assert compare_arguments('compare w "model.state_dict()"').expr == "model.state_dict()"
    assert compare_arguments("compare --ranks 1 w x * 2").expr == "x * 2"


# -- the compare value server against hostile clients -----------------------------------


def _serve(value, readers=1, timeout=30.0):
    import secrets

    from jupyter_distcomp.rank_side import compare

    slot = f"test-{secrets.token_hex(4)}"
    compare._KEPT[slot] = value
    token = secrets.token_hex(16)
    where = compare.serve_value(slot, None, readers, token, timeout)
    assert not isinstance(where, str), where
    return slot, (*where, token)


def test_idle_and_half_open_clients_do_not_stall_the_value_server():
    import socket

    import numpy

    from jupyter_distcomp.rank_side import compare

    slot, source = _serve({"w": numpy.arange(1000.0), "n": 3}, readers=1)
    address, port, token = source
    idle = socket.create_connection((address, port))  # connects, says nothing
    half = socket.create_connection((address, port))
    half.sendall(token.encode()[:5])  # half a token, then silence
    wrong = socket.create_connection((address, port))
    wrong.sendall(b"x" * len(token))  # a wrong token gets nothing
    tic = time.monotonic()
    value = compare.fetch_value(source, timeout=10)
    assert time.monotonic() - tic < 2, "an idle connection stalled the real reader"
    assert value["n"] == 3 and numpy.array_equal(value["w"], numpy.arange(1000.0))
    assert wrong.recv(10) == b""
    # the idle connections are dropped within IDLE_SECONDS
    idle.settimeout(compare.IDLE_SECONDS + 5)
    tic = time.monotonic()
    assert idle.recv(10) == b"" and time.monotonic() - tic <= compare.IDLE_SECONDS + 1
    for sock in (idle, half, wrong):
        sock.close()
    # served its one reader: the socket is closed
    with pytest.raises(OSError):
        socket.create_connection((address, port), timeout=2).close()
    compare.forget(slot)


def test_forget_closes_the_value_server_and_fd_exhaustion_does_not_end_it():
    import resource
    import socket

    import numpy

    from jupyter_distcomp.rank_side import compare

    slot, source = _serve(numpy.ones(10), readers=2)
    address, port, _ = source
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    hogs = []
    resource.setrlimit(resource.RLIMIT_NOFILE, (len(os.listdir("/proc/self/fd")) + 16, hard))
    try:  # no descriptor left for accept() in this process, for a moment
        while True:
            try:
                hogs.append(open(os.devnull))  # noqa: SIM115
            except OSError:
                break
        # one descriptor for the client; the server's accept() finds none (EMFILE)
        hogs.pop().close()
        failed = compare.accept_errors
        attempt = socket.create_connection((address, port))
        wait_for(lambda: compare.accept_errors > failed, 10, "accept() to fail with EMFILE")
    finally:
        for hog in hogs:
            hog.close()
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    attempt.close()
    assert compare.fetch_value(source, timeout=10).tolist() == [1.0] * 10
    compare.forget(slot)
    with pytest.raises(OSError):
        socket.create_connection((address, port), timeout=2).close()
    assert slot not in compare._SERVERS and slot not in compare._KEPT


def test_an_unpicklable_reference_value_is_the_users_error():
    import threading

    from jupyter_distcomp.rank_side import compare

    compare._KEPT["unpicklable"] = {"lock": threading.Lock()}
    why = compare.serve_value("unpicklable", None, 1, "t" * 32, 5)
    assert isinstance(why, str) and "cannot be sent to the other ranks" in why
    assert "TypeError" in why and "unpicklable" not in compare._SERVERS
    compare.forget("unpicklable")


def test_a_tensor_is_summarised_and_compared_where_it_is_a_chunk_at_a_time(monkeypatch):
    """compare's summary of a tensor is computed by torch on the tensor's device (for a
    CUDA tensor, its GPU: tests/test_gpu.py): no copy of the tensor to the host; the max
    |diff| of a differing rank reads both sides a chunk at a time."""
    import torch

    from jupyter_distcomp.rank_side import compare

    monkeypatch.setattr(compare, "CHUNK", 7)  # several chunks, the last one short
    base = torch.arange(40.0).reshape(4, 10)
    strided = base.t()  # not contiguous: the same values as its contiguous copy
    odd = base.clone()
    odd[3, 9] += 0.5
    odd[0, 1] = float("nan")
    with monkeypatch.context() as no_host:
        for name in ("cpu", "numpy"):
            no_host.setattr(torch.Tensor, name, lambda *a, **k: pytest.fail("to the host"))
        one = compare.summarize_value(base, "a")
        same = compare.summarize_value(base.clone(), "b")
        other = compare.summarize_value(odd, "c")
        transposed = compare.summarize_value(strided, "d")
        copy = compare.summarize_value(strided.contiguous(), "e")
    assert one["digest"] == same["digest"] != other["digest"]
    assert transposed["digest"] == copy["digest"] != one["digest"], "the shape counts"
    assert (other["shape"], other["dtype"], other["nan"], other["inf"]) == (
        (4, 10),
        "float32",
        1,
        0,
    )
    ints = compare.summarize_value(torch.ones(3, dtype=torch.int8), "f")
    assert (
        ints["digest"] != compare.summarize_value(torch.ones(3, dtype=torch.uint8), "g")["digest"]
    )
    compare._KEPT["ref"] = base
    address, port = compare.serve_value("ref", None, 1, "token", 10.0)
    odd[0, 1] = 1.0
    compare._KEPT["mine"] = odd
    assert compare.diff_value("mine", (address, port, "token"), None) == {
        "maxdiff": 0.5,
        "close": False,
    }
    compare._KEPT["ref"] = {"w": base.to(torch.bfloat16)}
    address, port = compare.serve_value("ref", None, 1, "token", 10.0)
    compare._KEPT["mine"] = {"w": (base + 2).to(torch.bfloat16)}
    result = compare.diff_value("mine", (address, port, "token"), None)
    assert result["items"]["w"] == {"maxdiff": 2.0, "close": False}
    compare.forget("ref")
