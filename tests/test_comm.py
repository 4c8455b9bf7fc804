"""The ranks panel's channel (jupyter_distcomp/notebook/comm.py) in a real kernel, seen from a
client the way JupyterLab sees it: the comm the kernel opens at %load_ext, rank-state events
while a cell runs, and a comm opened by a reloaded page that stops the ranks. Every message
the kernel sends matches its definition in contracts.json, as ipykernel checks its own wire
messages against one reference (its tests/test_message_spec.py)."""

from __future__ import annotations

import time
import uuid

import psutil
import pytest

from jupyter_distcomp.notebook.comm import validator

from .ranks_support import MPI_SPEC

pytestmark = pytest.mark.slow

#: the data of every message the kernel sent on a ranks comm in this module's tests
SENT: list[dict] = []
#: the ids of those comms (the run-settings panel's widgets have comms of their own)
RANKS_COMMS: set[str] = set()


def keep(msg: dict) -> None:
    """Remember what the kernel sent on a ranks comm."""
    content = msg["content"]
    if content.get("target_name") == "jupyter_distcomp":
        RANKS_COMMS.add(content["comm_id"])
    if content["comm_id"] in RANKS_COMMS:
        SENT.append(content["data"])


@pytest.fixture
def kernel():
    from jupyter_client.manager import start_new_kernel

    manager, client = start_new_kernel(kernel_name="python3")
    try:
        yield client
    finally:
        client.stop_channels()
        manager.shutdown_kernel(now=True)


def run(client, code: str, timeout: float = 120) -> list[dict]:
    """Execute ``code``; the comm messages that arrived until the kernel was idle again."""
    msg_id = client.execute(code)
    seen = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        msg = client.get_iopub_msg(timeout=timeout)
        if msg["msg_type"] in ("comm_open", "comm_msg"):
            seen.append(msg)
            keep(msg)
        if msg["msg_type"] == "error":
            raise AssertionError("\n".join(msg["content"]["traceback"]))
        if (
            msg["msg_type"] == "status"
            and msg["content"]["execution_state"] == "idle"
            and msg["parent_header"].get("msg_id") == msg_id
        ):
            return seen
    raise AssertionError(f"no reply in {timeout} s")


def states(messages: list[dict]) -> list[list[str]]:
    return [
        [r["state"] for r in m["content"]["data"]["world"]["ranks"]]
        for m in messages
        if m["content"]["data"].get("type") == "world"
    ]


def test_kernel_announces_streams_states_and_obeys_a_reloaded_page(kernel):
    opened = run(kernel, "%load_ext jupyter_distcomp")
    (announce,) = [m for m in opened if m["msg_type"] == "comm_open"]
    assert announce["content"]["target_name"] == "jupyter_distcomp"
    assert announce["content"]["data"] == {"type": "snapshot", "worlds": []}

    run(kernel, f"%%distcomp chan\n{MPI_SPEC}")
    run(kernel, "chan.runsettings.resource_layout.configure(process_count_per_node=2)")
    events = run(
        kernel,
        "%%distcomp run chan\nimport time\ntime.sleep(1.5 if mpi_rank == 0 else 0)\nprint(mpi_rank)",
    )
    seen = states(events)
    # while the cell ran: both busy, then rank 1 idle while rank 0 still works, then both idle
    assert ["busy", "busy"] in seen and ["busy", "idle"] in seen
    assert seen[-1] == ["idle", "idle"]

    # a reloaded page finds the kernel's comm and opens its own to the registered target
    reply = kernel.comm_info(target_name="jupyter_distcomp", reply=True)
    assert len(reply["content"]["comms"]) == 1
    comm_id = uuid.uuid4().hex
    kernel.session.send(
        kernel.shell_channel.socket,
        "comm_open",
        {"comm_id": comm_id, "target_name": "jupyter_distcomp", "data": {}},
    )
    snapshot = _next_comm_msg(kernel, comm_id)["content"]["data"]
    (world,) = snapshot["worlds"]
    assert (world["name"], len(world["ranks"])) == ("chan", 2)
    pids = [r["pid"] for r in world["ranks"]]

    kernel.session.send(
        kernel.shell_channel.socket,
        "comm_msg",
        {"comm_id": comm_id, "data": {"action": "stop", "name": "chan"}},
    )
    while True:
        data = _next_comm_msg(kernel, comm_id)["content"]["data"]
        if data["type"] == "result":
            break
    assert data == {
        "type": "result",
        "action": "stop",
        "name": "chan",
        "ok": True,
        "message": "Stopped the ranks of chan.",  # as `%distcomp stop chan` says
    }
    assert not [pid for pid in pids if _alive(pid)]

    kernel.session.send(
        kernel.shell_channel.socket,
        "comm_msg",
        {"comm_id": comm_id, "data": {"action": "restart", "name": "nope"}},
    )
    while True:
        data = _next_comm_msg(kernel, comm_id)["content"]["data"]
        if data["type"] == "result":
            break
    assert data["ok"] is False and "nope" in data["message"]

    assert {data["type"] for data in SENT} == {"snapshot", "world", "result"}
    for data in SENT:
        validator("KernelMessage")(data)


def _next_comm_msg(client, comm_id: str, timeout: float = 60) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        msg = client.get_iopub_msg(timeout=timeout)
        if msg["msg_type"] == "comm_msg" and msg["content"]["comm_id"] == comm_id:
            RANKS_COMMS.add(comm_id)
            keep(msg)
            return msg
    raise AssertionError(f"no comm message in {timeout} s")


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
