"""JupyterLab's visual debugger on the ranks, at the protocol level: a real kernel with real
MPI ranks, sent the debug requests exactly as JupyterLab sends them (dap_support.py)."""

from __future__ import annotations

import re
import time

import pytest

from .dap_support import RANK_THREADS, DapClient
from .debug_support import MPI_SPEC, DebugKernel
from .waiting import wait_for

RANKS = 4
#: the cell that sets a (re)started world up: ``comm`` and ``sys`` on every rank
WORLD_CELL = "%%distcomp run dbg\nfrom mpi4py import MPI\ncomm = MPI.COMM_WORLD\nimport sys"


@pytest.fixture(scope="module")
def dap():
    kernel = DebugKernel()
    client = DapClient(kernel.kc)
    client.kernel = kernel  # its run() answers the pdb prompt's stdin requests
    setup = [
        "%load_ext jupyter_distcomp",
        f"%%distcomp dbg\n{MPI_SPEC}",
        f"dbg.runsettings.resource_layout.configure(instance_count=1, process_count_per_node={RANKS})",
        WORLD_CELL,
    ]
    for code in setup:
        reply, text = client.run(code, timeout=300)
        assert reply["status"] == "ok", text
    yield client
    kernel.close()


@pytest.fixture
def debugger(dap):
    info = dap.start()
    yield dap, info
    dap.stop()


CELL = """%%distcomp run dbg
x = comm.rank * 10
total = comm.allreduce(x)
y = total + 1
print('y', y)"""


def set_up_world(dap: DapClient) -> None:
    """Run WORLD_CELL on the ranks (after a restart), asserting it succeeded."""
    reply, text = dap.run(WORLD_CELL)
    assert reply["status"] == "ok", text


def rank_of(thread: int) -> int:
    assert thread >= RANK_THREADS, thread
    return (thread - RANK_THREADS) % 100_000


def by_rank(frames: list[dict]) -> dict[int, dict]:
    """Each rank's frame of a stackTrace (its frames are named ``rank N: function``)."""
    return {int(f["name"].split(":")[0].split()[1]): f for f in frames}


def variables_of(dap: DapClient, frame: dict) -> dict[str, str]:
    scopes = dap.request("scopes", frameId=frame["id"])["body"]["scopes"]
    assert scopes, frame
    found = dap.request("variables", variablesReference=scopes[0]["variablesReference"])
    return {v["name"]: v["value"] for v in found["body"]["variables"]}


@pytest.mark.slow
def test_gutter_breakpoint_stops_every_rank_at_the_cell_line_and_next_steps_over_allreduce(
    debugger,
):
    dap, info = debugger
    assert info["isStarted"] and info["hashMethod"] == "Murmur2"
    path = dap.breakpoints(CELL, [3])  # the allreduce line, as the cell shows it
    assert dap.request("configurationDone")["success"]
    since = len(dap.events)
    msg_id = dap.execute(CELL)
    stops = dap.wait_events("stopped", RANKS, since)
    assert sorted(rank_of(e["body"]["threadId"]) for e in stops) == list(range(RANKS))
    threads = dap.request("threads")["body"]["threads"]
    names = {t["name"] for t in threads if t["id"] >= RANK_THREADS}
    assert names == {f"rank {r}" for r in range(RANKS)}, threads
    assert any(t["id"] < RANK_THREADS for t in threads)  # the kernel's own threads too

    current = stops[-1]["body"]["threadId"]  # JupyterLab shows the thread that stopped last
    frames = dap.request("stackTrace", threadId=current)["body"]["stackFrames"]
    assert frames[0]["name"] == f"rank {rank_of(current)}: <module>"
    assert sorted(f["name"] for f in frames) == [f"rank {r}: <module>" for r in range(RANKS)]
    assert {(f["line"], f["source"]["path"]) for f in frames} == {(3, path)}
    ranks = by_rank(frames)
    assert variables_of(dap, ranks[2])["x"] == "20"
    assert "total" not in variables_of(dap, ranks[2])  # not yet computed
    evaluated = dap.request("evaluate", expression="x + 1", frameId=ranks[1]["id"], context="repl")
    assert evaluated["success"] and evaluated["body"]["result"] == "11", evaluated

    since = len(dap.events)
    assert dap.request("next", threadId=current)["success"]
    steps = dap.wait_events("stopped", RANKS, since, reason="step")  # over the collective
    current = steps[-1]["body"]["threadId"]
    frames = dap.request("stackTrace", threadId=current)["body"]["stackFrames"]
    assert {f["line"] for f in frames} == {4}, (frames, dap.output(msg_id))
    for frame in frames:
        assert variables_of(dap, frame)["total"] == "60"

    # JupyterLab's Continue forgets the stopped thread before it asks: it names thread 1
    assert dap.request("continue", threadId=1)["success"]
    reply = dap.wait_reply(msg_id)
    text = dap.output(msg_id)
    assert reply["status"] == "ok", text
    assert all(f"[rank {r}] y 61" in text for r in range(RANKS)), text
    assert "ipykernel_" not in text, text


STEP_CELL = """%%distcomp run dbg
import json
def double(v):
    return v * 2
text = json.dumps({"rank": comm.rank})
total = comm.allreduce(double(comm.rank))
print('total', total)"""


def lines_after(dap: DapClient, request: str, thread: int) -> tuple[int, set[int], set[str]]:
    """``request`` (next, stepIn) on the ranks: the thread that stopped last, and the lines
    and the files of the ranks' innermost frames there."""
    since = len(dap.events)
    assert dap.request(request, threadId=thread)["success"]
    steps = dap.wait_events("stopped", RANKS, since, reason="step")
    thread = steps[-1]["body"]["threadId"]
    frames = dap.request("stackTrace", threadId=thread)["body"]["stackFrames"]
    inner = [f for f in frames if not f["name"].endswith("<module>")] or frames
    return thread, {f["line"] for f in inner}, {f["source"]["path"] for f in inner}


@pytest.mark.slow
def test_step_in_stops_in_the_users_code_only(debugger):
    """As debugpy in JupyterLab (justMyCode): Step In over a library call (json) and over a
    collective goes to the cell's next line; into the user's own function, to its line."""
    dap, _ = debugger
    path = dap.breakpoints(STEP_CELL, [5])
    dap.request("configurationDone")
    since = len(dap.events)
    msg_id = dap.execute(STEP_CELL)
    thread = dap.wait_events("stopped", RANKS, since)[-1]["body"]["threadId"]
    thread, lines, files = lines_after(dap, "stepIn", thread)
    assert (lines, files) == ({6}, {path}), dap.output(msg_id)
    thread, lines, files = lines_after(dap, "stepIn", thread)  # into double, not allreduce
    assert (lines, files) == ({4}, {path}), dap.output(msg_id)
    # the rich view of a local of the function's frame, on rank 3
    frames = dap.request("stackTrace", threadId=thread)["body"]["stackFrames"]
    inner = next(f for f in frames if f["name"] == "rank 3: double")
    rich = dap.request("richInspectVariables", variableName="v", frameId=inner["id"])
    assert rich["success"] and rich["body"]["data"]["text/plain"] == "3", rich
    dap.request("continue", threadId=1)
    reply = dap.wait_reply(msg_id)
    assert reply["status"] == "ok", dap.output(msg_id)
    assert "[rank 3] total 12" in dap.output(msg_id)


@pytest.mark.slow
def test_a_ranks_variable_in_the_rich_view_and_copied_to_the_ranks_globals(debugger):
    dap, _ = debugger
    dap.breakpoints(CELL, [3])
    dap.request("configurationDone")
    since = len(dap.events)
    msg_id = dap.execute(CELL)
    thread = dap.wait_events("stopped", RANKS, since)[-1]["body"]["threadId"]
    frames = dap.request("stackTrace", threadId=thread)["body"]["stackFrames"]
    ranks = by_rank(frames)
    rich = dap.request("richInspectVariables", variableName="x", frameId=ranks[2]["id"])
    assert rich["success"] and rich["body"]["data"]["text/plain"] == "20", rich
    copied = dap.request(
        "copyToGlobals", srcVariableName="x", dstVariableName="x_seen", srcFrameId=ranks[1]["id"]
    )
    assert copied["success"], copied
    # a name the frame lacks: nothing to show ("undefined in the active context")
    rich = dap.request("richInspectVariables", variableName="nowhere", frameId=ranks[2]["id"])
    assert rich["success"] and rich["body"]["data"] == {}, rich
    # after a step, JupyterLab refreshes an open rich view with the frame it was opened at:
    # the view shows the variable in that rank's frame now
    since = len(dap.events)
    assert dap.request("next", threadId=thread)["success"]
    dap.wait_events("stopped", RANKS, since, reason="step")
    rich = dap.request("richInspectVariables", variableName="total", frameId=ranks[2]["id"])
    assert rich["success"] and rich["body"]["data"]["text/plain"] == "60", rich
    stale = dap.request("scopes", frameId=ranks[2]["id"])  # other requests: stale
    assert not stale["success"] and "is stale" in stale["message"], stale
    dap.request("continue", threadId=1)
    assert dap.wait_reply(msg_id)["status"] == "ok", dap.output(msg_id)
    reply, text = dap.run("%%distcomp run dbg --ranks 1\nprint('seen', x_seen)")
    assert reply["status"] == "ok" and "[rank 1] seen 10" in text, text


EXPAND_CELL = """%%distcomp run dbg
t = torch.arange(3.0) + comm.rank
box = {"t": t, "n": [1, 2]}
import numpy as np; grid = np.arange(6).reshape(2, 3) * comm.rank; big = torch.zeros(5000)
y = 1"""


@pytest.mark.slow
def test_a_ranks_tensor_expands_and_its_variables_follow_an_evaluate(debugger):
    """As in a plain cell, with values: a tensor lists its shape, dtype, min and max, then its
    elements as numbers (JupyterLab's tree draws the value of a number, the type's name of
    anything else), its other attributes in a group; an array's rows expand to numbers; a
    large tensor lists its first 300 and says how many more. After Evaluate (which
    JupyterLab follows with stackTrace) the frames are new, so their Variables are asked
    for again and show what the evaluation changed."""
    dap, _ = debugger
    reply, text = dap.run("%%distcomp run dbg\nimport torch")
    assert reply["status"] == "ok", text
    dap.breakpoints(EXPAND_CELL, [5])
    dap.request("configurationDone")
    since = len(dap.events)
    msg_id = dap.execute(EXPAND_CELL)
    thread = dap.wait_events("stopped", RANKS, since)[-1]["body"]["threadId"]
    frames = dap.request("stackTrace", threadId=thread)["body"]["stackFrames"]
    ranks = by_rank(frames)
    scopes = dap.request("scopes", frameId=ranks[1]["id"])["body"]["scopes"]
    found = dap.request("variables", variablesReference=scopes[0]["variablesReference"])
    tensor = next(v for v in found["body"]["variables"] if v["name"] == "t")
    assert tensor["type"] == "Tensor" and tensor["variablesReference"] > 0, tensor
    children = dap.request("variables", variablesReference=tensor["variablesReference"])
    named = {v["name"]: v for v in children["body"]["variables"]}
    assert named["shape"]["value"] == "torch.Size([3])", named.keys()
    assert named["dtype"]["value"] == "torch.float32", named["dtype"]
    # rank 1: [1., 2., 3.], each element a number the tree draws
    assert [(named[f"[{i}]"]["value"], named[f"[{i}]"]["type"]) for i in range(3)] == [
        ("1.0", "float"),
        ("2.0", "float"),
        ("3.0", "float"),
    ], named
    assert (named["min"]["value"], named["max"]["value"]) == ("1.0", "3.0"), named
    assert "add" not in named and "__class__" not in named  # data, not methods
    group = dap.request("variables", variablesReference=named["attributes"]["variablesReference"])
    assert {"grad", "requires_grad", "T"} <= {v["name"] for v in group["body"]["variables"]}
    grid = next(v for v in found["body"]["variables"] if v["name"] == "grid")
    rows = dap.request("variables", variablesReference=grid["variablesReference"])["body"]
    row = next(v for v in rows["variables"] if v["name"] == "[1]")
    assert row["type"] == "ndarray" and row["variablesReference"] > 0, row
    cells = dap.request("variables", variablesReference=row["variablesReference"])["body"]
    assert [(v["value"], v["type"]) for v in cells["variables"] if v["name"].startswith("[")] == [
        ("3", "int"),
        ("4", "int"),
        ("5", "int"),
    ], cells  # rank 1's [[0, 1, 2], [3, 4, 5]]
    big = next(v for v in found["body"]["variables"] if v["name"] == "big")
    listed = dap.request("variables", variablesReference=big["variablesReference"])["body"]
    elements = [v for v in listed["variables"] if v["name"].startswith("[")]
    assert len(elements) == 300 and elements[-1]["name"] == "[299]", len(elements)
    (more,) = [v for v in listed["variables"] if v["name"] == "..."]
    assert more["value"] == "4,700 more of 5,000 (the first 300 shown)" and "type" not in more
    rich = dap.request("richInspectVariables", variableName="t", frameId=ranks[1]["id"])
    assert rich["success"], rich
    assert rich["body"]["data"]["text/plain"] == "tensor([1., 2., 3.])", rich
    box = next(v for v in found["body"]["variables"] if v["name"] == "box")
    inner = dap.request("variables", variablesReference=box["variablesReference"])
    assert {v["name"] for v in inner["body"]["variables"]} == {"'t'", "'n'"}, inner
    listing = next(v for v in inner["body"]["variables"] if v["name"] == "'n'")
    items = dap.request("variables", variablesReference=listing["variablesReference"])["body"]
    assert [(v["name"], v["value"]) for v in items["variables"]] == [("0", "1"), ("1", "2")]

    evaluated = dap.request(
        "evaluate", expression="evaluated_here = 41", frameId=ranks[1]["id"], context="repl"
    )
    assert evaluated["success"], evaluated
    again = dap.request("stackTrace", threadId=thread)["body"]["stackFrames"]
    assert not {f["id"] for f in again} & {f["id"] for f in frames}, (frames, again)
    ranks = by_rank(again)
    assert variables_of(dap, ranks[1])["evaluated_here"] == "41"
    assert "evaluated_here" not in variables_of(dap, ranks[2])  # on rank 1 only
    dap.request("continue", threadId=1)
    assert dap.wait_reply(msg_id)["status"] == "ok", dap.output(msg_id)


@pytest.mark.slow
def test_the_rank_chosen_in_the_call_stack_stays_first_across_steps_continues_and_refreshes(
    debugger,
):
    """JupyterLab selects the first frame of each stackTrace (after every stop and every
    refresh): once the person chooses rank 2's frame (JupyterLab then asks for its scopes),
    rank 2's frames come first, and its thread stops last, until the person chooses another."""
    dap, _ = debugger
    dap.breakpoints(CELL, [2, 4])
    dap.request("configurationDone")
    since = len(dap.events)
    msg_id = dap.execute(CELL)
    current = dap.wait_events("stopped", RANKS, since)[-1]["body"]["threadId"]
    frames = dap.request("stackTrace", threadId=current)["body"]["stackFrames"]
    assert frames[0]["name"] == "rank 0: <module>", frames
    variables_of(dap, frames[0])  # what JupyterLab asks of the frame it selects
    variables_of(dap, by_rank(frames)[2])  # the person chooses rank 2

    def first_after(request: str, reason: str, **arguments) -> tuple[int, dict]:
        """The thread JupyterLab shows after ``request`` and the first frame it selects."""
        since = len(dap.events)
        assert dap.request(request, **arguments)["success"]
        thread = dap.wait_events("stopped", RANKS, since, reason=reason)[-1]["body"]["threadId"]
        assert rank_of(thread) == 2, thread
        frames = dap.request("stackTrace", threadId=thread)["body"]["stackFrames"]
        return thread, frames[0]

    thread, first = first_after("next", "step", threadId=current)
    assert (first["name"], first["line"]) == ("rank 2: <module>", 3), first
    assert variables_of(dap, first)["x"] == "20"  # JupyterLab's own request keeps rank 2
    dap.request("evaluate", expression="z = 1", frameId=first["id"], context="repl")
    again = dap.request("stackTrace", threadId=thread)["body"]["stackFrames"]
    assert again[0]["name"] == "rank 2: <module>", again  # the refresh after an evaluation
    _, first = first_after("continue", "breakpoint", threadId=1)  # to line 4's breakpoint
    assert (first["name"], first["line"]) == ("rank 2: <module>", 4), first
    assert variables_of(dap, first)["total"] == "60"
    dap.request("continue", threadId=1)
    assert dap.wait_reply(msg_id)["status"] == "ok", dap.output(msg_id)


@pytest.mark.slow
def test_a_plain_cell_keeps_its_own_debugging(debugger):
    dap, _ = debugger
    code = "a = 1\nb = a + 1\nc = b * 3"
    path = dap.breakpoints(code, [2])
    dap.request("configurationDone")
    since = len(dap.events)
    msg_id = dap.execute(code)
    stop = dap.wait_events("stopped", 1, since, ranks=False)[0]
    thread = stop["body"]["threadId"]
    assert thread < RANK_THREADS  # debugpy's thread, not a rank
    frames = dap.request("stackTrace", threadId=thread)["body"]["stackFrames"]
    assert frames[0]["line"] == 2 and frames[0]["source"]["path"] == path
    dap.request("continue", threadId=thread)
    assert dap.wait_reply(msg_id)["status"] == "ok"


@pytest.mark.slow
def test_breakpoint_call_stops_in_the_visual_debugger_and_a_module_breakpoint_too(
    debugger, tmp_path
):
    dap, _ = debugger
    module = tmp_path / "helper_dap.py"
    module.write_text("def double(v):\n    w = v * 2\n    return w\n")
    dap.request(
        "setBreakpoints",
        source={"path": str(module)},
        breakpoints=[{"line": 2}],
        sourceModified=False,
    )
    dap.request("configurationDone")
    code = (
        f"%%distcomp run dbg\nsys.path.insert(0, {str(tmp_path)!r})\nimport helper_dap\n"
        "z = helper_dap.double(comm.rank)\nbreakpoint()\nprint('z', z)"
    )
    since = len(dap.events)
    msg_id = dap.execute(code)
    stops = dap.wait_events("stopped", RANKS, since)
    thread = stops[-1]["body"]["threadId"]
    frames = dap.request("stackTrace", threadId=thread)["body"]["stackFrames"]
    in_module = [f for f in frames if f["source"]["path"] == str(module)]
    assert len(in_module) == RANKS and {f["line"] for f in in_module} == {2}, frames
    assert {f["name"].split(": ")[1] for f in in_module} == {"double"}
    since = len(dap.events)
    dap.request("continue", threadId=thread)
    stops = dap.wait_events("stopped", RANKS, since)  # breakpoint() in the cell
    thread = stops[-1]["body"]["threadId"]
    frames = dap.request("stackTrace", threadId=thread)["body"]["stackFrames"]
    cell_frames = [f for f in frames if f["name"].endswith("<module>")]
    assert {f["line"] for f in cell_frames} == {6}, frames
    dap.request("continue", threadId=thread)
    reply = dap.wait_reply(msg_id)
    assert reply["status"] == "ok", dap.output(msg_id)
    assert "[rank 3] z 6" in dap.output(msg_id)


@pytest.mark.slow
def test_debugger_off_detaches_the_ranks(dap):
    dap.start()
    path = dap.breakpoints(CELL, [3])
    dap.request("configurationDone")
    dap.stop()
    since = len(dap.events)
    reply, text = dap.run(CELL)  # the breakpoint is gone with the debugger
    assert reply["status"] == "ok", text
    assert not [e for e in dap.events[since:] if e.get("event") == "stopped"]
    reply, text = dap.run("%%distcomp run dbg\nprint('traced', sys.gettrace() is not None)")
    assert all(f"[rank {r}] traced False" in text for r in range(RANKS)), text
    assert path
    # breakpoint() opens the notebook's pdb prompt again
    out = dap.kernel.run("%%distcomp run dbg\nv = comm.rank\nbreakpoint()\nw = v", ["p v", "c"])
    assert out.ok, out.text
    assert out.prompts == [f"(Pdb ranks 0-{RANKS - 1}) "] * 2, out.prompts
    assert "[rank 3] 3" in out.text, out.text


@pytest.mark.slow
def test_restarted_ranks_leave_and_join_as_threads(debugger):
    dap, _ = debugger
    dap.run("%%distcomp run dbg\npass")  # the rank threads are told
    since = len(dap.events)
    reply, text = dap.run("%distcomp restart dbg", timeout=300)
    assert reply["status"] == "ok", text
    exited = dap.wait_events("thread", RANKS, since, reason="exited")
    started = dap.wait_events("thread", RANKS, since, reason="started", timeout=120)
    old = {e["body"]["threadId"] for e in exited}
    new = {e["body"]["threadId"] for e in started}
    assert sorted(map(rank_of, old)) == sorted(map(rank_of, new)) == list(range(RANKS))
    assert not old & new  # the new ranks' threads are numbered anew: old numbers are stale
    stale = dap.request("stackTrace", threadId=min(old))
    assert not stale["success"] and "not a rank of a running world" in stale["message"]
    set_up_world(dap)


@pytest.mark.slow
def test_this_rank_only_steps_one_rank_and_the_others_stay(debugger):
    dap, _ = debugger
    code = "%%distcomp run dbg\na = comm.rank\nb = a + 1\nc = b * 2\nprint('c', c)"
    dap.breakpoints(code, [3])
    dap.request("configurationDone")
    since = len(dap.events)
    msg_id = dap.execute(code)
    stops = dap.wait_events("stopped", RANKS, since)
    only = dap.request("distcompStepOnly", rank=1)
    assert only["success"] and only["body"] == {"rank": 1}, only
    since = len(dap.events)
    dap.request("next", threadId=stops[-1]["body"]["threadId"])
    step = dap.wait_events("stopped", 1, since, reason="step")[0]
    assert rank_of(step["body"]["threadId"]) == 1
    continued = [e for e in dap.events[since:] if e.get("event") == "continued"]
    assert [rank_of(e["body"]["threadId"]) for e in continued] == [1]
    frames = dap.request("stackTrace", threadId=step["body"]["threadId"])["body"]["stackFrames"]
    lines = {f["name"]: f["line"] for f in frames}
    assert lines == {f"rank {r}: <module>": 4 if r == 1 else 3 for r in range(RANKS)}, lines
    # where the step went, printed in the cell, is named with its rank
    assert re.search(r"\[rank 1\]\n> In \[\d+\], line 4", dap.output(msg_id)), dap.output(msg_id)
    assert dap.request("distcompStepOnly", rank=None)["body"] == {"rank": None}
    dap.request("continue", threadId=1)
    reply = dap.wait_reply(msg_id)
    assert reply["status"] == "ok", dap.output(msg_id)
    assert all(f"[rank {r}] c {2 * (r + 1)}" in dap.output(msg_id) for r in range(RANKS))


@pytest.mark.slow
def test_pause_stops_the_running_ranks_in_their_code(debugger):
    dap, _ = debugger
    dap.request("configurationDone")
    code = (
        "%%distcomp run dbg\nimport time; print('looping', flush=True)\n"
        "for i in range(100):\n    time.sleep(0.05)\nprint('i', i)"
    )
    since = len(dap.events)
    msg_id = dap.execute(code)

    def looping() -> bool:  # every rank is in the loop
        dap.pump()
        return dap.output(msg_id).count("looping") == RANKS

    wait_for(looping, 120, "every rank in its loop")
    assert dap.request("pause", threadId=1)["success"]  # JupyterLab names thread 1 then
    stops = dap.wait_events("stopped", RANKS, since, reason="pause")
    thread = stops[-1]["body"]["threadId"]
    frames = dap.request("stackTrace", threadId=thread)["body"]["stackFrames"]
    assert {f["name"] for f in frames} == {f"rank {r}: <module>" for r in range(RANKS)}, frames
    assert {f["line"] for f in frames} <= {3, 4}, frames
    dap.request("continue", threadId=1)
    reply = dap.wait_reply(msg_id)
    assert reply["status"] == "ok", dap.output(msg_id)
    assert all(f"[rank {r}] i 99" in dap.output(msg_id) for r in range(RANKS))


MALFORMED = [  # shapes a client may send: each gets an error reply, the kernel serves on
    {"command": "variables", "arguments": {"variablesReference": "abc"}},
    {"command": "scopes", "arguments": {"frameId": str(1 << 40)}},
    {"command": "stackTrace", "arguments": {"threadId": str(RANK_THREADS)}},
    {"command": "next", "arguments": {"threadId": "1"}},
    {"command": "variables", "arguments": [1, 2]},
    {"command": "evaluate", "arguments": "abc"},
    {"command": "evaluate", "arguments": {"expression": "1", "frameId": 1.5}},
    {"command": 7, "arguments": {}},
    {"command": "continue", "arguments": None},  # plain ipykernel never replies to it
    {"command": "threads", "arguments": None},
]


@pytest.mark.slow
def test_malformed_requests_get_error_replies_and_references_go_stale_after_a_step(debugger):
    dap, _ = debugger
    for seq, shape in enumerate(MALFORMED, 1000):
        reply = dap.raw({"type": "request", "seq": seq, **shape})
        assert reply["success"] is False and reply["message"], (shape, reply)
        assert reply["request_seq"] == seq, reply
    bad_line = dap.request(
        "setBreakpoints", source={"path": "/tmp/x.py"}, breakpoints=[{"line": "abc"}]
    )
    assert "success" in bad_line, bad_line
    dap.breakpoints(CELL, [3])
    dap.request("configurationDone")
    since = len(dap.events)
    msg_id = dap.execute(CELL)
    current = dap.wait_events("stopped", RANKS, since)[-1]["body"]["threadId"]
    frames = dap.request("stackTrace", threadId=current)["body"]["stackFrames"]
    frame = frames[0]
    scope = dap.request("scopes", frameId=frame["id"])["body"]["scopes"][0]
    # a thread of a world that does not exist: refused, and no rank steps
    since = len(dap.events)
    nowhere = dap.request("next", threadId=RANK_THREADS + 99 * 100_000 + 1)
    assert not nowhere["success"] and "not a rank of a running world" in nowhere["message"]
    time.sleep(0.5)
    assert not [e for e in dap.events[since:] if e.get("event") == "continued"]
    assert dap.request("stackTrace", threadId=current)["body"]["stackFrames"] == frames
    # exit() and sys.exit() in an evaluation are caught: the rank stays stopped
    for expression, code in (("sys.exit(3)", "3"), ("exit()", "exit() at the debugger")):
        exited = dap.request("evaluate", expression=expression, frameId=frame["id"])
        assert not exited["success"], exited
        assert f"SystemExit: {code}" in exited["message"], exited
    value = dap.request("evaluate", expression="x + 1", frameId=frame["id"], context="repl")
    assert value["success"], value
    since = len(dap.events)
    assert dap.request("next", threadId=current)["success"]
    current = dap.wait_events("stopped", RANKS, since, reason="step")[-1]["body"]["threadId"]
    # the frame and variables of the stop before the step are stale, not the new stop's
    stale = dap.request("variables", variablesReference=scope["variablesReference"])
    assert not stale["success"] and "is stale" in stale["message"], stale
    stale = dap.request("scopes", frameId=frame["id"])
    assert not stale["success"] and "is stale" in stale["message"], stale
    frames = dap.request("stackTrace", threadId=current)["body"]["stackFrames"]
    assert "total" in variables_of(dap, frames[0])
    dap.request("continue", threadId=1)
    reply = dap.wait_reply(msg_id)
    assert reply["status"] == "ok", dap.output(msg_id)
    assert all(f"[rank {r}] y 61" in dap.output(msg_id) for r in range(RANKS))
    stale = dap.request("variables", variablesReference=scope["variablesReference"])
    assert not stale["success"] and "is stale" in stale["message"], stale


@pytest.mark.slow
def test_an_evaluation_or_variables_view_that_never_returns_is_interrupted(debugger):
    dap, _ = debugger
    dap.run("%env DISTCOMP_DEBUG_EVAL_SECONDS=2")
    reply, text = dap.run(
        "%%distcomp run dbg\nclass Forever:\n    def __repr__(self):\n"
        "        while True:\n            pass"
    )
    assert reply["status"] == "ok", text
    code = "%%distcomp run dbg\nslow = Forever()\nx = comm.rank\nprint('x', x)"
    dap.breakpoints(code, [3])
    dap.request("configurationDone")
    since = len(dap.events)
    msg_id = dap.execute(code)
    try:
        current = dap.wait_events("stopped", RANKS, since)[-1]["body"]["threadId"]
        frame = dap.request("stackTrace", threadId=current)["body"]["stackFrames"][0]
        tic = time.monotonic()
        looped = dap.request("evaluate", expression="while True: pass", frameId=frame["id"])
        assert not looped["success"], looped
        assert "KeyboardInterrupt" in looped["message"], looped
        assert "time limit of 2 s" in looped["message"], looped
        assert time.monotonic() - tic < 15
        scope = dap.request("scopes", frameId=frame["id"])["body"]["scopes"]
        seen = dap.request("variables", variablesReference=scope[-1]["variablesReference"])
        assert not seen["success"] and "time limit" in seen["message"], seen
        assert dap.request("evaluate", expression="comm.rank", frameId=frame["id"])["success"]
    finally:
        dap.request("continue", threadId=1)
        reply = dap.wait_reply(msg_id)
        dap.run("%env DISTCOMP_DEBUG_EVAL_SECONDS=15")
        dap.breakpoints(code, [])
    assert reply["status"] == "ok", dap.output(msg_id)
    assert all(f"[rank {r}] x {r}" in dap.output(msg_id) for r in range(RANKS))
    # the cell names the request as the user made it, never our internal command
    assert "distcomp_call" not in dap.output(msg_id), dap.output(msg_id)
    assert "the debugger's evaluate" in dap.output(msg_id), dap.output(msg_id)


@pytest.mark.slow
def test_an_evaluation_that_ends_its_rank_says_so(debugger):
    """``os._exit`` in an evaluation ends the rank's process: the reply says that, not that
    the rank is blocked in C code (issue 47, item 13)."""
    dap, _ = debugger
    code = "%%distcomp run dbg\nimport os\nx = comm.rank\nprint('x', x)"
    dap.breakpoints(code, [3])
    dap.request("configurationDone")
    since = len(dap.events)
    msg_id = dap.execute(code)
    try:
        stops = dap.wait_events("stopped", RANKS, since)
        thread = min(e["body"]["threadId"] for e in stops)  # rank 0
        frame = dap.request("stackTrace", threadId=thread)["body"]["stackFrames"][0]
        assert frame["name"].startswith("rank 0:"), frame
        ended = dap.request("evaluate", expression="os._exit(3)", frameId=frame["id"])
        assert not ended["success"], ended
        assert "blocked in C code" not in ended["message"], ended
        assert "rank 0 ended while it answered" in ended["message"], ended
    finally:
        dap.request("continue", threadId=1)
        dap.wait_reply(msg_id)
        dap.breakpoints(code, [])
    assert dap.run("%distcomp restart dbg")[0]["status"] == "ok"  # rank 0 is gone
    set_up_world(dap)


@pytest.mark.slow
def test_switching_the_debugger_off_at_a_stop_lets_the_ranks_run_on(dap):
    dap.start()
    dap.breakpoints(CELL, [3])
    dap.request("configurationDone")
    since = len(dap.events)
    msg_id = dap.execute(CELL)
    dap.wait_events("stopped", RANKS, since)
    dap.stop()  # JupyterLab's bug icon, off
    reply = dap.wait_reply(msg_id)
    assert reply["status"] == "ok", dap.output(msg_id)
    assert all(f"[rank {r}] y 61" in dap.output(msg_id) for r in range(RANKS))
    continued = [e for e in dap.events[since:] if e.get("event") == "continued"]
    assert len(continued) == RANKS
    reply, text = dap.run("%%distcomp run dbg\nprint('traced', sys.gettrace() is not None)")
    assert all(f"[rank {r}] traced False" in text for r in range(RANKS)), text


@pytest.mark.slow
def test_the_debugger_on_before_load_ext_keeps_its_breakpoints_and_the_ranks_start():
    """JupyterLab's debugger switched on (and a gutter breakpoint set) in a fresh kernel,
    before ``%load_ext``: debugpy stays out of the processes that start the ranks, and the
    breakpoint stops every rank."""
    kernel = DebugKernel()
    try:
        client = DapClient(kernel.kc)
        client.start()
        cell = "%%distcomp run first\nx = mpi_rank * 10\ny = x + 1\nprint('y', y)"
        client.breakpoints(cell, [3])
        client.request("configurationDone")
        setup = [
            "%load_ext jupyter_distcomp",
            f"%%distcomp first\n{MPI_SPEC.replace('name: dbg', 'name: first')}",
            "first.runsettings.resource_layout.configure(process_count_per_node=2)",
        ]
        for code in setup:
            reply, text = client.run(code, timeout=120)
            assert reply["status"] == "ok" and "distcomp:" not in text, text
        since = len(client.events)
        msg_id = client.execute(cell)
        stops = client.wait_events("stopped", 2, since, timeout=120)
        thread = stops[-1]["body"]["threadId"]
        frames = client.request("stackTrace", threadId=thread)["body"]["stackFrames"]
        assert {f["line"] for f in frames} == {3}, frames
        client.request("continue", threadId=1)
        assert client.wait_reply(msg_id)["status"] == "ok", client.output(msg_id)
        assert "[rank 1] y 11" in client.output(msg_id)
        client.stop()
    finally:
        kernel.close()


def test_pydevds_switch_for_child_processes_is_still_there():
    """What :func:`dap.debugpy_out_of_children` relies on in debugpy's pydevd."""
    import subprocess
    import sys

    from jupyter_distcomp.local.debug import dap

    code = (
        "import debugpy.server.api, importlib\n"
        f"monkey = importlib.import_module({dap.PYDEVD_CHILDREN!r})\n"
        "monkey.skip_subprocess_arg_patch\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, f"adapt local/debug/dap.py: {done.stderr}"
