"""Strangers on the controller's ports: any local user can connect to them (they are
ipyparallel's, on loopback). With CurveZMQ on, random bytes and bogus ZMTP greetings sent to
every port while a cell runs cost nothing: that cell and the next ones finish with every
rank's output. (With CurveZMQ off, the same bytes lose a rank's request: the next cell times
out, and later ones find rank 0 still busy.)
"""

from __future__ import annotations

import json
import os
import random
import socket
import stat
import threading
import time
from pathlib import Path

import pytest

from .ranks_support import MPI_SPEC, define, loaded_shell, run_cell

pytestmark = pytest.mark.slow

RANKS = 2
#: a ZMTP 3 greeting (signature, version 3.0, mechanism NULL) that a NULL-security
#: controller would accept, followed by a READY command of a made-up socket type
GREETING = b"\xff" + b"\0" * 8 + b"\x7f\x03\x00NULL" + b"\0" * 16 + b"\0" * 32
READY = b"\x04\x19\x05READY\x0bSocket-Type\x00\x00\x00\x06ROUTER"


@pytest.fixture(scope="module")
def ip():
    with loaded_shell() as shell:
        define(shell, "ports", MPI_SPEC, nodes=1, per_node=RANKS)
        cell = run_cell(
            shell, "%%distcomp run ports\nfrom mpi4py import MPI\nr = MPI.COMM_WORLD.rank"
        )
        assert cell.ok, cell.stdout
        yield shell
        run_cell(shell, "%distcomp stop ports")


def security_folder() -> Path:
    from jupyter_distcomp.local.ranks.backend import get_backend

    world = get_backend().world("ports")
    return Path(world._tmp, "profile", "security")


def connection_files() -> list[Path]:
    return sorted(security_folder().glob("ipcontroller-*.json"))


def controller_ports() -> set[int]:
    """Every port named in the client's and the engines' connection files."""
    ports: set[int] = set()
    for path in connection_files():
        for value in json.loads(path.read_text()).values():
            values = value if isinstance(value, list) else [value]
            ports.update(v for v in values if isinstance(v, int) and not isinstance(v, bool))
    return ports


def send(port: int, payload: bytes) -> None:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1) as sock:
            sock.sendall(payload)
            time.sleep(0.02)
    except OSError:
        pass  # the controller may close the connection at once: that is fine


def flood(ports: set[int], until: threading.Event) -> None:
    rng = random.Random(39)
    while not until.is_set():
        for port in ports:
            send(port, rng.randbytes(rng.randint(1, 4096)))
            send(port, GREETING + READY + rng.randbytes(64))


def printed_by_every_rank(cell, text: str) -> bool:
    return all(f"[rank {r}] {text} {r}" in cell.stdout for r in range(RANKS))


def test_connection_files_hold_the_curve_key_and_only_we_can_read_them(ip):
    files = connection_files()
    assert len(files) == 2, files  # the client's and the engines'
    for path in files:
        assert json.loads(path.read_text())["curve_serverkey"], path
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
    assert stat.S_IMODE(security_folder().parent.parent.stat().st_mode) == 0o700


def test_bytes_from_a_stranger_on_every_port_lose_nothing(ip):
    ports = controller_ports()
    assert len(ports) >= 8, ports  # registration, mux, task, control, iopub, heartbeats...
    stop = threading.Event()
    stranger = threading.Thread(target=flood, args=(ports, stop), daemon=True)
    stranger.start()
    try:
        streaming = run_cell(
            ip,
            "%%distcomp run ports --timeout 60\nimport time\n"
            "for i in range(20):\n    print('tick', i, r, flush=True)\n    time.sleep(0.1)",
        )
    finally:
        stop.set()
        stranger.join()
    assert streaming.ok, streaming.stdout
    for i in range(20):
        assert printed_by_every_rank(streaming, f"tick {i}"), streaming.stdout
    for trial in range(3):
        for port in ports:
            send(port, os.urandom(512))
            send(port, GREETING + READY)
        cell = run_cell(ip, f"%%distcomp run ports --timeout 20\nprint('after {trial}', r)")
        assert cell.ok, cell.stdout
        assert printed_by_every_rank(cell, f"after {trial}"), cell.stdout
