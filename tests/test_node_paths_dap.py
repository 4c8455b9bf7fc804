"""JupyterLab's debugger on ranks of 2 emulated nodes, each running in its own copy of the
notebook's folder: a breakpoint set in the user's file (the path JupyterLab has) holds in
every node's copy, and the frames name the user's file, which JupyterLab's source view opens.
A real kernel in a folder of the test's own, sent the requests as JupyterLab sends them."""

from __future__ import annotations

import pytest

from .dap_support import DapClient
from .debug_support import MPI_SPEC, DebugKernel

pytestmark = pytest.mark.slow

HELPER = "def double(v):\n    w = v * 2\n    return w\n"


@pytest.fixture(scope="module")
def dap(tmp_path_factory):
    folder = tmp_path_factory.mktemp("notebook")
    (folder / "helper_nodes.py").write_text(HELPER)
    kernel = DebugKernel(cwd=str(folder))
    client = DapClient(kernel.kc)
    client.kernel = kernel
    client.folder = folder
    setup = [
        "%load_ext jupyter_distcomp",
        f"%%distcomp dbg\n{MPI_SPEC}",
        "dbg.runsettings.resource_layout.configure(instance_count=2, process_count_per_node=2)",
        "%%distcomp run dbg\nfrom mpi4py import MPI\ncomm = MPI.COMM_WORLD",
    ]
    for code in setup:
        reply, text = client.run(code, timeout=300)
        assert reply["status"] == "ok", text
    yield client
    kernel.close()


def test_a_breakpoint_in_the_users_file_stops_every_node_and_frames_name_that_file(dap):
    dap.start()
    try:
        module = dap.folder / "helper_nodes.py"
        dap.request(
            "setBreakpoints",
            source={"path": str(module)},
            breakpoints=[{"line": 2}],
            sourceModified=False,
        )
        dap.request("configurationDone")
        code = "%%distcomp run dbg\nimport helper_nodes\nz = helper_nodes.double(comm.rank)\nprint('z', z)"
        since = len(dap.events)
        msg_id = dap.execute(code)
        stops = dap.wait_events("stopped", 4, since)
        thread = stops[-1]["body"]["threadId"]
        frames = dap.request("stackTrace", threadId=thread)["body"]["stackFrames"]
        in_module = [f for f in frames if f["source"]["path"] == str(module)]
        assert len(in_module) == 4 and {f["line"] for f in in_module} == {2}, frames
        assert not [f for f in frames if "node-" in f["source"].get("path", "")], frames
        dap.request("continue", threadId=thread)
        reply = dap.wait_reply(msg_id)
        assert reply["status"] == "ok", dap.output(msg_id)
        assert "[node 1 rank 3] z 6" in dap.output(msg_id)
    finally:
        dap.stop()
