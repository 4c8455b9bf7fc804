"""Cells on real ranks (a 2x2 MPI world under mpiexec), one world shared by the module.

What a user checks: each rank sees its MPI rank and exactly its Azure ML variables, output
arrives live and labelled, errors say which ranks once, subsets run where asked.
"""

from __future__ import annotations

import json

import pytest

from .ranks_support import MPI_SPEC, define, loaded_shell, run_cell
from .waiting import wait_for

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def ip():
    with loaded_shell() as shell:
        define(shell, "mpi", MPI_SPEC, nodes=2, per_node=2)
        yield shell


def by_rank(stdout: str) -> dict[str, list[str]]:
    lines: dict[str, list[str]] = {}
    for line in stdout.splitlines():
        if line.startswith("[node"):
            label, _, text = line.partition("] ")
            lines.setdefault(label + "]", []).append(text)
    return lines


def test_mpi_world_and_variables_match_the_layout(ip):
    from jupyter_distcomp.core.layout import rank_environments
    from jupyter_distcomp.local.ranks.backend import get_backend

    code = (
        "import os, json\nfrom mpi4py import MPI\n"
        "print(json.dumps([MPI.COMM_WORLD.Get_rank(), MPI.COMM_WORLD.Get_size(), dict(os.environ)]))"
    )
    cell = run_cell(ip, f"%%distcomp run mpi\n{code}")
    assert cell.ok, cell.stdout
    world = get_backend().world("mpi")
    port = int(world.envs[0]["AZ_BATCH_MASTER_NODE"].rsplit(":", 1)[1])
    nodes = ["127.0.0.2", "127.0.0.3"]  # each emulated node on its own loopback address
    expected = rank_environments(
        "mpi", 2, 2, master_addr=nodes[0], master_port=port, node_hosts=nodes
    )
    expected = [{**env, "NCCL_SOCKET_IFNAME": "lo"} for env in expected]
    lines = by_rank(cell.stdout)
    assert sorted(lines) == [
        "[node 0 rank 0]",
        "[node 0 rank 1]",
        "[node 1 rank 2]",
        "[node 1 rank 3]",
    ]
    for label, (text,) in lines.items():
        rank = int(label.split()[-1].rstrip("]"))
        mpi_rank, mpi_size, env = json.loads(text)
        assert (mpi_rank, mpi_size) == (rank, 4)
        # exactly the layout's variables: node-local ranks as on two Azure nodes
        assert {k: env.get(k) for k in expected[rank]} == expected[rank]
        assert env["OMPI_COMM_WORLD_LOCAL_RANK"] == str(rank % 2)
        assert env["OMPI_COMM_WORLD_LOCAL_SIZE"] == "2"


def test_state_persists_and_reuses_the_running_ranks(ip):
    from jupyter_distcomp.local.ranks.backend import get_backend

    pids = [r["pid"] for r in get_backend().status("mpi")]
    assert run_cell(ip, "%%distcomp run mpi\nx = mpi_rank * 10").ok
    cell = run_cell(ip, "%%distcomp run mpi\nprint(x + 1)")
    assert sorted(t for (t,) in by_rank(cell.stdout).values()) == ["1", "11", "21", "31"]
    assert [r["pid"] for r in get_backend().status("mpi")] == pids


def test_output_streams_live_with_labels(ip):
    code = "import time\nprint('first', flush=True)\ntime.sleep(2)\nprint('second')"
    cell = run_cell(ip, f"%%distcomp run mpi\n{code}")
    assert cell.ok
    first = cell.out.first_time("[node 1 rank 3] first")
    second = cell.out.first_time("[node 1 rank 3] second")
    assert first is not None and second is not None
    assert second - first > 1.5, "the first line was held back until the end"


def test_group_output_shows_ranks_in_order(ip):
    code = "import time\ntime.sleep(0.3 * (3 - mpi_rank))\nprint('line a')\nprint('line b')"
    cell = run_cell(ip, f"%%distcomp run mpi --group-output\n{code}")
    assert cell.ok
    labels = [line.split("] ")[0] + "]" for line in cell.stdout.splitlines() if "line" in line]
    assert labels == [
        "[node 0 rank 0]",
        "[node 0 rank 0]",
        "[node 0 rank 1]",
        "[node 0 rank 1]",
        "[node 1 rank 2]",
        "[node 1 rank 2]",
        "[node 1 rank 3]",
        "[node 1 rank 3]",
    ]


def test_identical_errors_are_shown_once_with_their_ranks(ip):
    code = "print('before the error', flush=True)\nif mpi_rank > 0:\n    1 / 0"
    cell = run_cell(ip, f"%%distcomp run mpi\n{code}")
    assert not cell.ok
    assert type(cell.error).__name__ == "RankError"
    text = cell.traceback_text()
    assert "ranks 1-3" in text and text.count("ZeroDivisionError: division by zero") == 1
    assert "1 / 0" in text
    assert len(by_rank(cell.stdout)) == 4, "output printed before the error was lost"


def test_different_errors_get_one_section_each(ip):
    code = "if mpi_rank == 0:\n    raise KeyError('zero')\nelif mpi_rank == 2:\n    int('x')"
    cell = run_cell(ip, f"%%distcomp run mpi\n{code}")
    text = cell.traceback_text()
    assert "--- rank 0 ---" in text and "KeyError: 'zero'" in text
    assert "--- rank 2 ---" in text and "ValueError" in text


def test_memory_error_names_the_rank_and_keeps_it_alive(ip):
    cell = run_cell(ip, "%%distcomp run mpi\nif mpi_rank == 1:\n    blob = bytearray(1 << 50)")
    assert "--- rank 1 ---" in cell.traceback_text() and "MemoryError" in cell.traceback_text()
    assert run_cell(ip, "%%distcomp run mpi\nprint('still here')").ok


def test_an_mpi_error_is_an_exception_on_its_rank_which_lives_on(ip):
    code = "from mpi4py import MPI\nif mpi_rank == 1:\n    MPI.COMM_WORLD.send(1, dest=99)"
    cell = run_cell(ip, f"%%distcomp run mpi\n{code}")
    assert not cell.ok
    text = cell.traceback_text()
    assert "--- rank 1 ---" in text or "rank 1" in text, text
    assert "MPI_ERR_RANK" in text, text
    assert run_cell(ip, "%%distcomp run mpi\nprint('still here')").ok


def printed(stdout: str) -> list[str]:
    """What the ranks printed, without their labels, in order of their ranks."""
    return [line.partition("] ")[2] for line in sorted(stdout.splitlines()) if line[:1] == "["]


def test_a_new_rank_loads_numpy_once_a_cell_does_and_sends_arrays_whole(ip):
    """A rank starts without numpy and debugpy (the engine's kernel has no debugger)."""
    from jupyter_distcomp.local.ranks.backend import get_backend

    define(ip, "fresh", MPI_SPEC, nodes=1, per_node=2)
    try:
        code = "import sys\nprint('numpy' in sys.modules, 'debugpy' in sys.modules)"
        cell = run_cell(ip, f"%%distcomp run fresh\n{code}")
        assert cell.ok, cell.stdout
        # neither is loaded for the rank's start: numpy waits for the cell that imports it
        assert printed(cell.stdout) == ["False False", "False False"]
        code = (
            "import numpy as np\nfrom ipyparallel.serialize import canning\n"
            "a = np.arange(6.0) * mpi_rank\nprint(np.ndarray in canning.can_map)"
        )
        cell = run_cell(ip, f"%%distcomp run fresh\n{code}")
        assert cell.ok, cell.stdout
        # arrays go by ipyparallel's own canning (no copy) once numpy is loaded
        assert printed(cell.stdout) == ["True", "True"]
        pulled = get_backend().world("fresh").client[1].pull("a", block=True)
        assert type(pulled).__name__ == "ndarray" and list(pulled) == [0, 1, 2, 3, 4, 5]
    finally:
        run_cell(ip, "%distcomp stop fresh")


def test_rich_outputs_are_displayed_and_labelled(ip):
    code = (
        "import pandas as pd, matplotlib.pyplot as plt\n"
        "plt.plot([0, mpi_rank])\n"
        "pd.DataFrame({'rank': [mpi_rank]})"
    )
    cell = run_cell(ip, f"%%distcomp run mpi --ranks 0-1\n{code}")
    assert cell.ok, cell.traceback_text()
    images = [o for o in cell.outputs if "image/png" in o.data]
    tables = [o for o in cell.outputs if "text/html" in o.data and "<table" in o.data["text/html"]]
    assert len(images) == 2 and len(tables) == 2
    assert sorted(o.metadata["distcomp_rank"] for o in tables) == [0, 1]
    assert "[node 0 rank 1] Out:" in cell.stdout


def test_rank_subsets_run_only_where_asked(ip):
    cell = run_cell(ip, "%%distcomp run mpi --ranks 0,2-3\nprint('here')")
    assert cell.ok
    assert sorted(by_rank(cell.stdout)) == ["[node 0 rank 0]", "[node 1 rank 2]", "[node 1 rank 3]"]


@pytest.mark.parametrize(
    ("ranks", "message"),
    [("0,7", "rank 7 outside the world of 4"), ("2-x", "is not a rank"), ("3-1", "backwards")],
)
def test_bad_rank_lists_are_explained(ip, ranks, message):
    cell = run_cell(ip, f"%%distcomp run mpi --ranks {ranks}\nprint('never printed')")
    assert not cell.ok and message in str(cell.error)
    assert "never printed" not in cell.stdout.replace("print('never printed')", "")


def test_status_lists_every_rank(ip):
    cell = run_cell(ip, "%distcomp status mpi")
    assert cell.ok
    text = cell.outputs[0].data["text/plain"]
    rows = [line.split() for line in text.splitlines()[1:]]
    assert [(r[1], r[2], r[3], r[4]) for r in rows] == [
        ("0", "0", "0", "idle"),
        ("1", "0", "1", "idle"),
        ("2", "1", "0", "idle"),
        ("3", "1", "1", "idle"),
    ]
    assert all(r[5].isdigit() for r in rows)


def test_hang_times_out_with_stacks_then_restart_works(ip):
    code = "from mpi4py import MPI\nif mpi_rank == 0:\n    MPI.COMM_WORLD.Barrier()"
    cell = run_cell(ip, f"%%distcomp run mpi --timeout 3\n{code}")
    assert not cell.ok  # returned at all: the Barrier alone never would
    text = cell.traceback_text()
    assert "timed out after 3 s" in text and "rank 0: busy" in text
    assert "MPI.COMM_WORLD.Barrier()" in text, "the stuck rank's stack is missing"
    assert "%distcomp restart mpi" in text
    busy = run_cell(ip, "%%distcomp run mpi\nprint(1)")
    assert not busy.ok and "still busy" in str(busy.error)
    assert run_cell(ip, "%distcomp restart mpi").ok
    assert run_cell(ip, "%%distcomp run mpi\nprint('back')").ok


@pytest.mark.parametrize(
    ("kill", "reason"),
    [
        ("os._exit(3)", "exited with code 3"),
        ("ctypes.string_at(0)", "killed by signal 11 (Segmentation fault)"),
        ("os.kill(os.getpid(), signal.SIGKILL)", "killed by signal 9 (Killed)"),
    ],
    ids=["exit", "segfault", "sigkill"],
)
def test_dead_rank_ends_the_cell_saying_why(ip, kill, reason):
    code = (
        "import os, signal, ctypes, sys, time\n"
        "print('alive', flush=True)\nsys.stdout.flush()\ntime.sleep(1)\n"
        f"if mpi_rank == 1:\n    {kill}\ntime.sleep(60)"
    )
    cell = run_cell(ip, f"%%distcomp run mpi\n{code}")
    assert not cell.ok
    assert cell.seconds < 60 / 4, "the other ranks sleep 60 s: the death ended the cell"
    text = cell.traceback_text()
    assert f"rank 1 {reason}" in text, text
    assert "what mpiexec printed" in text and "%distcomp restart mpi" in text
    assert "[node 1 rank 3] alive" in cell.stdout, "other ranks' output was lost"
    status = run_cell(ip, "%distcomp status mpi").outputs[0].data["text/plain"]
    assert "dead" in status
    again = run_cell(ip, "%%distcomp run mpi\nprint(1)")
    assert not again.ok and "dead" in str(again.error) and "restart" in str(again.error)
    assert run_cell(ip, "%distcomp restart mpi").ok
    back = run_cell(
        ip, "%%distcomp run mpi\nfrom mpi4py import MPI\nprint(MPI.COMM_WORLD.Get_size())"
    )
    assert back.ok and back.stdout.count("4") == 4


def test_listeners_see_each_rank_go_busy_and_back_to_idle(ip):
    from jupyter_distcomp.local.ranks.backend import get_backend

    events: list[dict] = []
    backend = get_backend()
    backend.add_listener(events.append)
    try:
        assert run_cell(ip, "%%distcomp run mpi --ranks 1-2\nimport time\ntime.sleep(0.3)").ok
    finally:
        backend.remove_listener(events.append)
    json.dumps(events)  # the JupyterLab panel gets these as JSON
    assert events and all(e["name"] == "mpi" and e["instance_count"] == 2 for e in events)
    states = [{r["rank"]: r["state"] for r in e["ranks"]} for e in events]
    busy = [s for s in states if "busy" in s.values()]
    assert busy[0] == {0: "idle", 1: "busy", 2: "busy", 3: "idle"}
    assert states[-1] == {0: "idle", 1: "idle", 2: "idle", 3: "idle"}
    assert all(isinstance(r["pid"], int) for r in events[-1]["ranks"])


def test_default_timeout_from_config_interrupts_a_slow_rank(ip):
    ip.run_line_magic("config", "DistComp.default_timeout = 2")
    try:
        code = "import time\nif mpi_rank == 3:\n    time.sleep(60)"
        cell = run_cell(ip, f"%%distcomp run mpi\n{code}")
    finally:
        ip.run_line_magic("config", "DistComp.default_timeout = None")
    assert not cell.ok and cell.seconds < 60 / 4, "rank 3 sleeps 60 s: the time-out ended it"
    text = cell.traceback_text()
    assert "timed out after 2 s" in text and "rank 3: busy" in text
    assert "time.sleep(60)" in text and "Interrupted rank 3 (SIGINT)" in text
    assert run_cell(ip, "%%distcomp run mpi\nprint('ok')").ok


def test_a_run_cells_ranks_publish_only_output_and_idle_while_px_gets_its_usual_messages(ip):
    """A ``%%distcomp run`` request is lean: its ranks publish neither a busy status nor the
    echo of its code (two messages less per rank and cell); ``%%px`` on the same engines
    still gets both. Read on the controller's own output socket, beside the kernel."""
    import time

    import zmq
    from jupyter_client.session import Session

    from jupyter_distcomp.local.ranks.backend import get_backend

    assert run_cell(ip, "%%distcomp run mpi\npass").ok  # the ranks are up
    client = get_backend().world("mpi").client
    # a session of its own, with the client's key: it checks each signature once itself
    session = Session(key=client.session.key, signature_scheme=client.session.signature_scheme)
    sub = zmq.Context.instance().socket(zmq.SUB)
    sub.setsockopt(zmq.SUBSCRIBE, b"")
    # the controller speaks CurveZMQ: a peer needs its public key, and a key pair of its own
    sub.curve_serverkey = client.curve_serverkey
    sub.curve_publickey, sub.curve_secretkey = zmq.curve_keypair()
    sub.connect(client._config["iopub"])
    try:

        def subscribed() -> bool:  # the controller sends to this socket: a probe's messages
            client[0].execute("pass", silent=False, block=True)
            return bool(sub.poll(200))

        wait_for(subscribed, 30, "the subscription to reach the controller", every=0)
        cell = run_cell(ip, "%%distcomp run mpi\nprint('lean', mpi_rank)")
        assert cell.ok and sorted(t for (t,) in by_rank(cell.stdout).values()) == [
            f"lean {r}" for r in range(4)
        ]
        px = client[:].execute("print('full')", silent=False, block=True)  # as %%px sends it
        seen: dict[str, list[str]] = {}
        texts: dict[str, str] = {}
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and sum(
            "status idle" in seen.get(m, []) for m in px.msg_ids
        ) < len(px.msg_ids):
            if not sub.poll(200):
                continue
            _, frames = session.feed_identities(sub.recv_multipart())
            msg = session.deserialize(frames)
            parent = msg["parent_header"].get("msg_id")
            kind = msg["msg_type"]
            if kind == "status":
                kind += " " + msg["content"]["execution_state"]
            if kind == "stream":
                texts[parent] = texts.get(parent, "") + msg["content"]["text"]
            seen.setdefault(parent, []).append(kind)
    finally:
        sub.close(linger=0)
    ours = [m for m, text in texts.items() if text.startswith("lean")]
    assert len(ours) == 4, texts
    for msg_id in ours:
        assert seen[msg_id] == ["stream", "status idle"], seen[msg_id]
    for msg_id in px.msg_ids:
        assert seen[msg_id] == ["status busy", "execute_input", "stream", "status idle"]


def test_a_rank_starts_without_ipyparallels_client_and_a_cell_gets_all_of_ipyparallel(ip):
    code = (
        "import sys\n"
        "heavy = ('ipyparallel.client.client', 'ipyparallel.cluster.cluster')\n"
        "print([name for name in heavy if name in sys.modules])\n"
        "import ipyparallel\n"
        "print(ipyparallel.Client.__name__)"
    )
    assert run_cell(ip, "%distcomp restart mpi").ok
    cell = run_cell(ip, f"%%distcomp run mpi\n{code}")
    assert cell.ok, cell.stdout
    assert {label: lines for label, lines in by_rank(cell.stdout).items()} == {
        label: ["[]", "Client"]
        for label in ("[node 0 rank 0]", "[node 0 rank 1]", "[node 1 rank 2]", "[node 1 rank 3]")
    }
