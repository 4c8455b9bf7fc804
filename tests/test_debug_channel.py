"""The debugger channel against hostile clients and a kernel that does not answer (issue 28,
item 2; issue 39, item 6): the listener outlives any accept() error, idle and half-open
clients are dropped within seconds, cost no thread and are capped, and a rank whose
handshake gets no answer says so and runs on."""

from __future__ import annotations

import json
import os
import resource
import select
import socket
import subprocess
import sys
import threading
import time

import pytest

from jupyter_distcomp.local.debug.channel import AUTH_SECONDS, DebugChannel
from jupyter_distcomp.local.debug.listener import MAX_PENDING
from jupyter_distcomp.rank_side import debug_hook

from .waiting import wait_for


@pytest.fixture
def channel():
    made = DebugChannel()
    yield made
    made.close()


def _read_until_dropped(client: socket.socket, seconds: float) -> None:
    """Read ``client`` until the channel closes it (TimeoutError after ``seconds``)."""
    client.settimeout(seconds)
    try:
        while client.recv(1024):
            pass
    except ConnectionResetError:
        pass
    client.close()


def _stops_and_goes(channel: DebugChannel, rank: int = 3) -> None:
    """A rank-side connection (the hook's own handshake) stops and is told to go."""
    conn = debug_hook._connect((channel.host, channel.port), channel.key)
    try:
        conn.send_bytes(json.dumps({"hello": rank}).encode())
        conn.send_bytes(json.dumps({"stop": {"file": "t.py", "line": 1, "func": "f"}}).encode())
        assert conn.poll(10) and json.loads(conn.recv_bytes()) == {"go": True}
    finally:
        conn.close()


@pytest.mark.parametrize(
    "message", [b"{" + bytes(19), b"{sha256}" + bytes(12)], ids=["brace", "sha256-prefix"]
)
def test_a_python_3_11_challenge_that_starts_with_a_brace_is_answered(channel, message):
    """Python 3.11 challenges with 20 random bytes, one in 256 of them starting with ``{``
    as a later version's ``{digest}`` prefix does: such a rank still gets its prompt."""
    import hmac
    from multiprocessing.connection import CHALLENGE, WELCOME, Connection, answer_challenge

    sock = socket.create_connection((channel.host, channel.port), timeout=10)
    sock.settimeout(None)
    conn = Connection(sock.detach())
    try:
        answer_challenge(conn, channel.key)
        conn.send_bytes(CHALLENGE + message)  # Python 3.11's deliver_challenge
        assert conn.poll(10), "the channel did not answer the challenge"
        assert conn.recv_bytes(256) == hmac.new(channel.key, message, "md5").digest()
        conn.send_bytes(WELCOME)
        conn.send_bytes(json.dumps({"hello": 1}).encode())
        conn.send_bytes(json.dumps({"stop": {"file": "t.py", "line": 1, "func": "f"}}).encode())
        assert conn.poll(10) and json.loads(conn.recv_bytes()) == {"go": True}
    finally:
        conn.close()
    assert channel.refused == 0


def test_the_channel_survives_running_out_of_file_descriptors(channel):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    clients = [socket.socket() for _ in range(20)]  # their descriptors taken before
    filler = []
    resource.setrlimit(resource.RLIMIT_NOFILE, (len(os.listdir("/proc/self/fd")) + 40, hard))
    try:  # the audit's attack: the kernel has no descriptor left, and clients connect
        while True:
            try:
                filler.append(os.open(os.devnull, os.O_RDONLY))
            except OSError:
                break
        for client in clients:
            client.connect((channel.host, channel.port))  # into the listener's backlog
        wait_for(lambda: channel.accept_errors > 0, 10, "accept() to fail with EMFILE")
    finally:
        for fd in filler:
            os.close(fd)
        for client in clients:
            client.close()
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    assert len(filler) >= 10
    assert channel.accept_errors > 0, "accept() never ran out of descriptors: no attack"
    tic = time.monotonic()
    _stops_and_goes(channel)  # a later breakpoint() still gets its prompt
    assert time.monotonic() - tic < AUTH_SECONDS
    assert channel.pending()


def test_idle_and_half_open_clients_are_dropped_and_do_not_block_a_rank(channel):
    idle = [socket.create_connection((channel.host, channel.port)) for _ in range(40)]
    half = socket.create_connection((channel.host, channel.port))
    half.recv(1024)  # the channel's challenge; no answer follows
    tic = time.monotonic()
    _stops_and_goes(channel)
    assert time.monotonic() - tic < 3, "idle clients held up a rank's handshake"
    for client in [*idle, half]:
        _read_until_dropped(client, AUTH_SECONDS + 5)
    assert time.monotonic() - tic <= AUTH_SECONDS + 3
    deadline = time.monotonic() + 5
    while channel.refused < 41 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert channel.refused == 41


def test_a_flood_of_idle_clients_costs_no_thread_is_capped_and_a_rank_still_stops(channel):
    threads = threading.active_count()
    flood = [socket.create_connection((channel.host, channel.port)) for _ in range(300)]
    try:
        # the listener took every connection in: the newest has its challenge
        assert select.select([flood[-1]], [], [], 10)[0], "the flood was not accepted"
        assert threading.active_count() <= threads + 1, "a thread per pending connection"
        assert channel.pending_connections <= MAX_PENDING
        tic = time.monotonic()
        _stops_and_goes(channel)  # while all 300 are still open
        assert time.monotonic() - tic < 2, "the flood held up a rank's handshake"
        assert channel.pending()
        pushed_out = 0
        for client in flood[:-MAX_PENDING]:  # the oldest were closed to make room
            client.settimeout(AUTH_SECONDS)
            try:
                while client.recv(1024):
                    pass
                pushed_out += 1
            except (ConnectionResetError, TimeoutError):
                pass
        assert pushed_out == 300 - MAX_PENDING
    finally:
        for client in flood:
            client.close()


def test_a_client_that_sends_a_huge_frame_or_a_wrong_answer_is_dropped_at_once(channel):
    huge = socket.create_connection((channel.host, channel.port))
    wrong = socket.create_connection((channel.host, channel.port))
    tic = time.monotonic()
    huge.sendall(b"\x7f\xff\xff\xff" + b"x" * 100)  # a 2 GB frame announced
    wrong.recv(1024)  # the challenge
    wrong.sendall(b"\x00\x00\x00\x10" + b"0" * 16)  # an answer without the key
    for client in (huge, wrong):
        _read_until_dropped(client, AUTH_SECONDS)
    assert time.monotonic() - tic < 1, "a bad client was kept until its deadline"
    deadline = time.monotonic() + 2
    while channel.refused < 2 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert channel.refused == 2 and channel.pending_connections == 0


RANK_PROGRAM = "breakpoint()\nprint('ran on', flush=True)\n"


def _rank_process(port: int, key: str = "00" * 32) -> subprocess.CompletedProcess:
    env = {
        **os.environ,
        "PYTHONBREAKPOINT": debug_hook.HOOK,
        debug_hook.ENV_ADDRESS: f"127.0.0.1:{port}:0",
        debug_hook.ENV_KEY: key,
    }
    return subprocess.run(
        [sys.executable, "-c", RANK_PROGRAM], env=env, capture_output=True, text=True, timeout=60
    )


def test_a_rank_whose_channel_does_not_answer_says_so_and_runs_on():
    silent = socket.create_server(("127.0.0.1", 0))  # listens, never accepts or answers
    try:
        tic = time.monotonic()
        done = _rank_process(silent.getsockname()[1])
        seconds = time.monotonic() - tic
    finally:
        silent.close()
    assert done.returncode == 0, done.stderr
    assert "ran on" in done.stdout
    assert "rank 0: breakpoint() skipped, the rank runs on" in done.stderr, done.stderr
    assert "did not answer within" in done.stderr
    assert seconds < debug_hook.HANDSHAKE_SECONDS + 10, "the rank waited for ever"


def test_a_rank_with_no_channel_at_all_says_so_and_runs_on():
    closed = socket.create_server(("127.0.0.1", 0))
    port = closed.getsockname()[1]
    closed.close()
    done = _rank_process(port)
    assert done.returncode == 0 and "ran on" in done.stdout, done.stderr
    assert "cannot connect to the notebook's debugger" in done.stderr, done.stderr


def _pipe(source: socket.socket, target: socket.socket) -> None:
    try:
        while data := source.recv(65536):
            target.sendall(data)
    except OSError:
        pass
    for sock in (source, target):
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


class _Relay:
    """A TCP relay to the channel that closes its ``drop``-th connection (from 1) at once,
    as a kernel that refuses a handshake does."""

    def __init__(self, channel: DebugChannel, drop: int):
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        self.target, self.drop, self.count = (channel.host, channel.port), drop, 0
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self) -> None:
        while True:
            try:
                client, _ = self.server.accept()
            except OSError:
                return
            self.count += 1
            if self.count == self.drop:
                client.close()
                continue
            upstream = socket.create_connection(self.target)
            for pair in ((client, upstream), (upstream, client)):
                threading.Thread(target=_pipe, args=pair, daemon=True).start()


def _serve_one_stop(channel: DebugChannel) -> None:
    """As the kernel serves a stop: ``c`` at its prompt, until the rank says it ran on."""
    deadline = time.monotonic() + 30
    while (stop := channel.take()) is None:
        assert time.monotonic() < deadline, "the rank did not stop"
        time.sleep(0.05)
    session, _ = stop
    session.send(line="c")
    while "end" not in session.messages.get(timeout=30):
        pass


def _stop_in_cells(channel: DebugChannel, port: int, cells: int) -> tuple[str, str]:
    """A rank process that stops once in each of ``cells`` cells, connecting to ``port``:
    each stop served as the kernel serves it, then the cell's sessions ended (the rank's
    connection closed) before the rank goes on. The rank's stdout and stderr."""
    program = f"import sys\nfor _ in range({cells}):\n    breakpoint()\n    sys.stdin.readline()\n"
    env = {
        **os.environ,
        "PYTHONBREAKPOINT": debug_hook.HOOK,
        debug_hook.ENV_ADDRESS: f"127.0.0.1:{port}:0",
        debug_hook.ENV_KEY: channel.key_hex,
    }
    rank = subprocess.Popen(
        [sys.executable, "-c", program + "print('ran on')\n"],
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert rank.stdin is not None
        for _ in range(cells):
            _serve_one_stop(channel)
            channel.end_sessions()  # the cell ended
            rank.stdin.write("\n")
            rank.stdin.flush()
        return rank.communicate(timeout=30)
    except AssertionError as exc:  # with what the rank said
        rank.kill()
        raise AssertionError(f"{exc}\n{rank.communicate()}") from None
    finally:
        rank.kill()


def test_a_rank_that_stops_in_cell_after_cell_gets_every_prompt(channel):
    """The kernel ends each cell's sessions as the rank goes on to its next stop: every
    stop gets its prompt over a new connection (an ended session's reader thread, about to
    read when its session ended, must not read the new connection's bytes)."""
    out, err = _stop_in_cells(channel, channel.port, cells=20)
    assert "ran on" in out and "skipped" not in err, err
    assert channel.refused == 0


def test_a_refused_handshake_after_an_earlier_stop_costs_a_retry_not_the_breakpoint(channel):
    """The rank's second stop finds its first connection closed (the kernel ended the
    cell's sessions), then the new connection refused in its handshake: a third one stops."""
    relay = _Relay(channel, drop=2)
    try:
        out, err = _stop_in_cells(channel, relay.port, cells=2)
    finally:
        relay.server.close()
    assert "ran on" in out and "skipped" not in err, err
    assert relay.count == 3, relay.count


def test_a_session_the_kernel_ended_is_an_interrupt_at_the_rank_never_a_quit():
    """The kernel ends a rank's session when the notebook interrupts it at the prompt: pdb's
    next read on the rank is that interrupt, not the end of input, which pdb takes for
    ``q`` ("rank 1: quit in the debugger", though nobody typed it; issue 47, item 13)."""
    ended = debug_hook._Channel("127.0.0.1", 9, b"key", 1, command=True)  # no connection
    with pytest.raises(KeyboardInterrupt, match="the notebook ended this debug session"):
        debug_hook._In(ended).readline()
