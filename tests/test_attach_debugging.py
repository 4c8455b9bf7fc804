"""An attached job's ranks under JupyterLab's debugger, and a kernel interrupt at the group
prompt reaching them: a job submitted with ``--debug`` through the real azure-ai-ml client
to the local stand-in of Azure ML, 2 nodes x 2 ranks on two hosts (network namespaces with
their own sshd, tests/netns_support.py), attached over SSH from a real kernel.

JupyterLab's side is the debug protocol exactly as it sends it (dap_support.py): the job's
ranks are threads, a ``stackTrace`` names each rank's frame, ``next`` steps over an
``allreduce`` on every rank at once, ``continue`` lets them run; a later breakpoint, held
while no cell serves the job, is served to the debugger by ``%distcomp wait``; ``stepIn``
and ``stepOut`` of the user's function stop at its first line and the caller's next, as on
local ranks; Pause stops ranks that run without a breakpoint, in their code. Then, at the
pdb prompt, ``km.interrupt_kernel()`` (JupyterLab's stop button) in a step that runs on
reaches the job's ranks, the prompt says so, and the job goes on to its end. Skipped, with
the reason, where namespaces cannot be made.
"""

from __future__ import annotations

import re
import threading
from pathlib import Path

import pytest

from . import test_attach_jobs as jobs
from .dap_support import RANK_THREADS, DapClient
from .debug_support import DebugKernel
from .test_attach_jobs import WHY_NOT, pointed_at, project, submitted, waiting_ranks
from .waiting import wait_for

pytest.importorskip("azure.ai.ml")
#: the fixtures of the attach tests: two hosts with sshd, the user's keys, the stand-in
hosts, keys, standin = jobs.hosts, jobs.keys, jobs.standin
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(WHY_NOT is not None, reason=f"no namespaced hosts: {WHY_NOT}"),
    pytest.mark.filterwarnings("ignore::UserWarning"),
]

#: a breakpoint, then a step into a busy loop (no sleep) that only an interrupt ends
SPIN = """\
import os
from mpi4py import MPI
c = MPI.COMM_WORLD
def spin():
    open(os.path.join({folder!r}, "spinning-%d" % c.rank), "w").close()
    try:
        while True:
            pass
    except KeyboardInterrupt:
        return "interrupted"
breakpoint()
state = spin()
total = c.allreduce(1)
print("after", state, total, flush=True)
"""

#: a breakpoint before a call of the user's own function (lines 3-5), then a collective
STEPS = """\
from mpi4py import MPI
c = MPI.COMM_WORLD
def double(v):
    w = v * 2
    return w
breakpoint()
y = double(c.rank)
z = c.allreduce(y)
print("z", z, flush=True)
"""

#: no breakpoint: ranks that loop until the test's file appears
LOOP = """\
import os, time
from mpi4py import MPI
c = MPI.COMM_WORLD
open(os.path.join({folder!r}, "looping-%d" % c.rank), "w").close()
n = 0
while not os.path.exists({go!r}):
    n += 1
    time.sleep(0.01)
print("looped", n > 0, flush=True)
"""


@pytest.fixture(scope="module")
def dap(standin, keys, tmp_path_factory):
    kernel = DebugKernel(cwd=str(tmp_path_factory.mktemp("notebook")))
    client = DapClient(kernel.kc)
    client.kernel = kernel
    try:
        reply, text = client.run(pointed_at(standin, keys))
        assert reply["status"] == "ok", text
        yield client
    finally:
        kernel.close()


def rank_of(thread: int) -> int:
    assert thread >= RANK_THREADS, thread
    return (thread - RANK_THREADS) % 100_000


def frames_of(dap: DapClient, thread: int) -> dict[int, dict]:
    """Each rank's innermost frame (where it stopped) in a stackTrace of ``thread``, which
    lists every stopped rank's frames innermost first, each named ``rank N: function``."""
    reply = dap.request("stackTrace", threadId=thread)
    assert reply["success"], reply
    innermost: dict[int, dict] = {}
    for frame in reply["body"]["stackFrames"]:
        innermost.setdefault(int(frame["name"].split(":")[0].split()[1]), frame)
    return innermost


def variables_of(dap: DapClient, frame: dict) -> dict[str, str]:
    scopes = dap.request("scopes", frameId=frame["id"])["body"]["scopes"]
    assert scopes, frame
    found = dap.request("variables", variablesReference=scopes[0]["variablesReference"])
    return {v["name"]: v["value"] for v in found["body"]["variables"]}


def logs_say(job, text: str, ranks=range(4)) -> bool:
    return all(text in job.log_text(f"user_logs/std_log_process_{r}.txt") for r in ranks)


def test_jupyterlabs_debugger_steps_the_attached_jobs_ranks_as_threads(
    dap, standin, keys, tmp_path
):
    folder = project(tmp_path / "proj")
    name = submitted(dap.kernel, folder, keys)
    job = standin.job(name)
    waiting_ranks(job, range(4))
    dap.start()
    assert dap.request("configurationDone")["success"]
    try:
        since = len(dap.events)
        msg_id = dap.execute(f"%distcomp attach {name}")
        stops = dap.wait_events("stopped", 4, since, timeout=180, reason="breakpoint")
        assert sorted(rank_of(e["body"]["threadId"]) for e in stops) == [0, 1, 2, 3]
        started = dap.wait_events("thread", 4, since, reason="started")  # told at attach
        assert {e["body"]["threadId"] for e in started} == {e["body"]["threadId"] for e in stops}
        threads = dap.request("threads")["body"]["threads"]
        names = {t["name"] for t in threads if t["id"] >= RANK_THREADS}
        assert names == {f"rank {r}" for r in range(4)}, threads

        current = stops[-1]["body"]["threadId"]  # JupyterLab shows the thread that stopped last
        frames = frames_of(dap, current)
        assert sorted(frames) == [0, 1, 2, 3], frames
        assert {(f["line"], Path(f["source"]["path"]).name) for f in frames.values()} == {
            (6, "train.py")  # the allreduce's line, after the breakpoint() call
        }
        assert variables_of(dap, frames[2])["x"] == "21"
        evaluated = dap.request(
            "evaluate", expression="x + 1", frameId=frames[1]["id"], context="repl"
        )
        assert evaluated["success"] and evaluated["body"]["result"] == "12", evaluated

        since = len(dap.events)
        assert dap.request("next", threadId=current)["success"]
        steps = dap.wait_events("stopped", 4, since, reason="step")  # over the collective
        frames = frames_of(dap, steps[-1]["body"]["threadId"])
        assert {f["line"] for f in frames.values()} == {7}, (frames, dap.output(msg_id))
        for frame in frames.values():
            assert variables_of(dap, frame)["total"] == "64"

        # JupyterLab's Continue forgets the stopped thread before it asks: it names thread 1
        assert dap.request("continue", threadId=1)["success"]
        reply = dap.wait_reply(msg_id, timeout=120)
        assert reply["status"] == "ok", dap.output(msg_id)
        assert f"Attached to job {name}" in dap.output(msg_id)
        wait_for(lambda: logs_say(job, "total 64"), 60, "the allreduce's totals")

        # the next breakpoint comes while no cell serves the job: held, then `wait`
        (folder / "go").write_text("")
        wait_for(
            lambda: "ranks 0-3: at the debugger prompt" in dap.run(f"%distcomp status {name}")[1],
            120,
            "the ranks held at their second breakpoint",
        )
        since = len(dap.events)
        msg_id = dap.execute(f"%distcomp wait {name} --timeout 120")
        stops = dap.wait_events("stopped", 4, since, timeout=60)
        frames = frames_of(dap, stops[-1]["body"]["threadId"])
        assert {f["line"] for f in frames.values()} == {17}, frames
        assert {r: variables_of(dap, f)["y"] for r, f in frames.items()} == {
            r: str(64 + r) for r in range(4)
        }
        assert dap.request("continue", threadId=1)["success"]
        reply = dap.wait_reply(msg_id, timeout=180)
        assert reply["status"] == "ok", dap.output(msg_id)
    finally:
        dap.stop()
    assert job.wait(120) == "Completed", job.error
    assert all(logs_say(job, f"y {64 + r}", [r]) for r in range(4))


def test_step_in_and_out_of_a_function_on_the_jobs_ranks_stops_at_the_users_lines_only(
    dap, standin, keys, tmp_path
):
    folder = project(tmp_path / "steps")
    (folder / "train.py").write_text(STEPS)
    name = submitted(dap.kernel, folder, keys)
    job = standin.job(name)
    waiting_ranks(job, range(4))
    dap.start()
    assert dap.request("configurationDone")["success"]

    def step(request: str, thread: int) -> tuple[int, dict[int, dict]]:
        """``request`` on the stopped ranks; the thread that stopped last, and where each
        rank stopped."""
        since = len(dap.events)
        assert dap.request(request, threadId=thread)["success"]
        stops = dap.wait_events("stopped", 4, since, reason="step")
        thread = stops[-1]["body"]["threadId"]
        return thread, frames_of(dap, thread)

    try:
        since = len(dap.events)
        msg_id = dap.execute(f"%distcomp attach {name}")
        stops = dap.wait_events("stopped", 4, since, timeout=180, reason="breakpoint")
        thread = stops[-1]["body"]["threadId"]
        assert {f["line"] for f in frames_of(dap, thread).values()} == {7}
        # into double: its first line, not pdb's --Call-- stop at the def line
        thread, frames = step("stepIn", thread)
        assert {(f["line"], f["name"].split(": ")[1]) for f in frames.values()} == {
            (4, "double")
        }, (frames, dap.output(msg_id))
        # out of it: the caller's next line, not pdb's --Return-- stop at double's last line
        thread, frames = step("stepOut", thread)
        assert {(f["line"], f["name"].split(": ")[1]) for f in frames.values()} == {
            (8, "<module>")
        }, (frames, dap.output(msg_id))
        assert {r: variables_of(dap, f)["y"] for r, f in frames.items()} == {
            r: str(2 * r) for r in range(4)
        }
        thread, frames = step("next", thread)  # over the allreduce, on every rank at once
        assert {f["line"] for f in frames.values()} == {9}, frames
        assert "--Call--" not in dap.output(msg_id) and "--Return--" not in dap.output(msg_id)
        assert dap.request("continue", threadId=1)["success"]
        reply = dap.wait_reply(msg_id, timeout=120)
        assert reply["status"] == "ok", dap.output(msg_id)
    finally:
        dap.stop()
    assert job.wait(120) == "Completed", job.error
    assert logs_say(job, "z 12")


def test_pause_stops_the_jobs_running_ranks_in_their_code_and_continue_lets_them_end(
    dap, standin, keys, tmp_path
):
    folder = project(tmp_path / "loop")
    (folder / "train.py").write_text(LOOP.format(folder=str(folder), go=str(folder / "go")))
    name = submitted(dap.kernel, folder, keys)
    job = standin.job(name)
    wait_for(
        lambda: all((folder / f"looping-{r}").exists() for r in range(4)),
        180,
        "every rank of the job in its loop",
    )
    reply, text = dap.run(f"%distcomp attach {name}")
    assert reply["status"] == "ok", text
    dap.start()
    assert dap.request("configurationDone")["success"]
    try:
        since = len(dap.events)
        msg_id = dap.execute(f"%distcomp wait {name} --timeout 120")

        def serving() -> bool:
            dap.pump()
            return "its Pause stops the running ranks" in dap.output(msg_id)

        wait_for(serving, 60, "the wait cell serving the job")
        assert dap.request("pause", threadId=1)["success"]  # JupyterLab names thread 1 then
        stops = dap.wait_events("stopped", 4, since, timeout=60, reason="pause")
        frames = frames_of(dap, stops[-1]["body"]["threadId"])
        assert sorted(frames) == [0, 1, 2, 3], frames
        assert {(f["name"].split(": ")[1], f["line"]) for f in frames.values()} <= {
            ("<module>", line) for line in (6, 7, 8)
        }, frames
        (folder / "go").write_text("")
        assert dap.request("continue", threadId=1)["success"]
        reply = dap.wait_reply(msg_id, timeout=180)
        assert reply["status"] == "ok", dap.output(msg_id)
        assert re.search(  # the ranks' end or the job's, whichever the wait saw first
            rf"{name}: (every rank of )?the job has ended\.", dap.output(msg_id)
        ), dap.output(msg_id)
    finally:
        dap.stop()
    assert job.wait(120) == "Completed", job.error
    assert logs_say(job, "looped True")


def test_a_kernel_interrupt_in_a_long_step_reaches_the_jobs_ranks_and_the_job_goes_on(
    dap, standin, keys, tmp_path
):
    kernel = dap.kernel
    folder = project(tmp_path / "spin")
    (folder / "train.py").write_text(SPIN.format(folder=str(folder)))
    name = submitted(kernel, folder, keys)
    job = standin.job(name)
    waiting_ranks(job, range(4))

    def step_then_interrupt(prompt: str) -> str:
        """``n`` into the busy loop; once every rank spins there, the stop button."""

        def interrupt() -> None:
            wait_for(
                lambda: all((folder / f"spinning-{r}").exists() for r in range(4)),
                120,
                "every rank in its busy step",
            )
            kernel.km.interrupt_kernel()

        threading.Thread(target=interrupt, daemon=True).start()
        return "n"

    out = kernel.run(f"%distcomp attach {name}", [step_then_interrupt, "p state", "c"], 300)
    assert out.ok, out.text
    assert out.prompts[:3] == ["(Pdb ranks 0-3) "] * 3, out.transcript
    assert re.search(
        rf"{name}: interrupted: SIGINT sent to ranks 0-3, the ranks of this prompt", out.text
    ), out.text
    # each caught the interrupt in its own code; the step ended at the next line
    assert "-> total = c.allreduce(1)" in out.transcript, out.transcript
    assert "[ranks 0-3] 'interrupted'\n" in out.transcript, out.transcript
    assert job.wait(120) == "Completed", job.error  # `c`: the job went on to its end
    assert logs_say(job, "after interrupted 4")
