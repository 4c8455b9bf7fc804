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
        (name,) = [n for n in os.listdir(stacks) if n.startswith(f"{proc.pid}-")]
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
        attempt = socket.create_connection((address, port))
        time.sleep(0.5)
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
