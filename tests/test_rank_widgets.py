"""Widgets made on ranks survive a page reload: the kernel answers the requests a reloaded
JupyterLab page makes (ipywidgets 8's ``request_states`` on its control comm, and
``comm_info`` for older frontends) with the ranks' widgets and their latest state.

A real kernel (jupyter_client) with 2 MPI ranks; the requests are sent as the widget manager
of a loading page sends them. The browser's own reload: tests/test_browser_output.py.
"""

from __future__ import annotations

import queue
import re
import time
import uuid

import pytest

from .ranks_support import MPI_SPEC
from .test_ranks_kernel import Kernel

pytestmark = pytest.mark.slow

BARS = (
    "%%distcomp run w\n"
    "from ipywidgets import IntProgress\n"
    "from IPython.display import display\n"
    "bar = IntProgress(max=10, description=f'rank {mpi_rank}')\n"
    "display(bar)\n"
    "bar.value = 3 + mpi_rank"
)


def comm_reply(kernel: Kernel, comm_id: str, timeout: float = 30) -> dict:
    """The data of the first comm_msg the kernel sends on ``comm_id``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            msg = kernel.kc.get_iopub_msg(timeout=0.5)
        except queue.Empty:
            continue
        content = msg["content"]
        if msg["msg_type"] == "comm_msg" and content.get("comm_id") == comm_id:
            return content["data"]
    raise AssertionError(f"no answer on comm {comm_id} in {timeout} s")


def send(kernel: Kernel, kind: str, content: dict, metadata: dict | None = None) -> None:
    msg = kernel.kc.session.msg(kind, content=content, metadata=metadata or {})
    kernel.kc.shell_channel.send(msg)


def test_a_reloaded_page_gets_the_rank_widgets_and_their_latest_state():
    kernel = Kernel()
    try:
        reply, text, _ = kernel.run(
            "%load_ext jupyter_distcomp\n%config DistComp.default_process_count_per_node = 2\n"
            f"get_ipython().run_cell_magic('distcomp', 'w', {MPI_SPEC!r})"
        )
        assert reply["status"] == "ok", text
        reply, text, _ = kernel.run(BARS)
        assert reply["status"] == "ok", text
        shown = re.findall(r"'model_id': '([0-9a-f]+)'", text)
        assert len(shown) == 2, text  # one bar per rank, shown as the ranks display them

        # ipywidgets 8: the page opens the control comm and asks for every widget's state
        control = uuid.uuid4().hex
        send(
            kernel,
            "comm_open",
            {"comm_id": control, "target_name": "jupyter.widget.control", "data": {}},
            {"version": "1.0.0"},
        )
        send(kernel, "comm_msg", {"comm_id": control, "data": {"method": "request_states"}})
        data = comm_reply(kernel, control)
        assert data["method"] == "update_states", data
        states = data["states"]
        assert set(shown) <= set(states), (shown, list(states))
        values = sorted(states[model]["state"]["value"] for model in shown)
        assert values == [3, 4], "the bars' latest values"
        assert {states[model]["model_name"] for model in shown} == {"IntProgressModel"}

        # older frontends: the widgets' comms are listed, each then asks its rank
        kernel.kc.comm_info(target_name="jupyter.widget")
        content = kernel.kc.get_shell_msg(timeout=30)["content"]
        assert set(shown) <= set(content["comms"]), content
        ask = shown[0]
        send(kernel, "comm_msg", {"comm_id": ask, "data": {"method": "request_state"}})
        answer = comm_reply(kernel, ask)
        assert answer["method"] == "update" and answer["state"]["value"] in (3, 4), answer
    finally:
        kernel.close()
