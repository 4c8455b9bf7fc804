"""`%distcomp restart NAME --replay` never destroys data unasked: it lists the cells, asks in
the notebook (stdin), keeps its log across `stop`, maps each cell's ranks to the current
layout or refuses, and never stops at a breakpoint. And an interrupt at the group prompt
reports what really stopped; a restart after an interrupted deadlock ends in bounded time on a
busy machine, saying what it waits for. A real kernel whose stdin requests are answered as a
notebook answers them, with 2 then 4 MPI ranks."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time

import pytest

from .debug_support import MPI_SPEC, DebugKernel

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def kernel(tmp_path_factory):
    k = DebugKernel(cwd=str(tmp_path_factory.mktemp("replay")))
    assert k.run("%load_ext jupyter_distcomp").ok
    assert k.run(f"%%distcomp dbg\n{MPI_SPEC}").ok
    layout = (
        "dbg.runsettings.resource_layout.configure(instance_count=1, process_count_per_node={})"
    )
    assert k.run(layout.format(2)).ok
    k.layout = layout
    yield k
    k.run("%distcomp stop")
    k.close()


def test_replay_lists_asks_keeps_its_log_and_maps_ranks_to_the_layout(kernel):
    cells = [
        "%%distcomp run dbg\nfrom mpi4py import MPI\nr = MPI.COMM_WORLD.Get_rank()",
        "%%distcomp run dbg\nwith open(f'log{r}.txt', 'a') as f:\n    f.write('x')",
        "%%distcomp run dbg\nbreakpoint()\nseen = r * 10",
    ]
    for code in cells:
        out = kernel.run(code, ["c"])
        assert out.ok, out.text

    said_no = kernel.run("%distcomp restart dbg --replay", ["n"])
    assert said_no.ok, said_no.text
    assert said_no.prompts == ["Restart dbg and run these 3 cell(s) again? [y/N] "]
    listing = said_no.text
    assert "1. " in listing and "2. " in listing and "f.write('x')" not in listing
    assert "[on ranks 0-1]" in listing and "files they wrote" in listing, listing
    assert "Not replayed" in listing
    out = kernel.run("%%distcomp run dbg\nprint('still', seen)")
    assert out.ok and "[rank 1] still 10" in out.text, "answering no keeps the ranks"

    assert kernel.run("%distcomp stop dbg").ok
    assert kernel.run(kernel.layout.format(4)).ok
    dry = kernel.run("%distcomp restart dbg --replay --dry-run")
    assert dry.ok and not dry.prompts, dry.text
    assert "2. Cell In[" in dry.text and "with open(f'log{r}.txt', 'a')" in dry.text
    assert "[on ranks 0-3 (ran on ranks 0-1 of 2)]" in dry.text, dry.text
    assert "nothing was restarted" in dry.text

    replay = kernel.run("%distcomp restart dbg --replay --skip 2", ["y"], timeout=240)
    assert replay.ok, replay.text
    assert "replaying 3 of 3 (cell 4)" in replay.text and "(cell 2)" not in replay.text
    assert "breakpoint() skipped on ranks 0-3: a replay does not stop at breakpoints" in (
        replay.text
    )
    out = kernel.run(
        "%%distcomp run dbg\nimport os\nprint('state', seen, os.path.getsize(f'log{r}.txt') if os.path.exists(f'log{r}.txt') else 0)"
    )
    assert out.ok, out.text
    assert "[rank 3] state 30 0" in out.text and "[rank 1] state 10 1" in out.text, out.text

    assert kernel.run("%%distcomp run dbg --ranks 0\nonly_root = 1").ok
    assert kernel.run(kernel.layout.format(2)).ok
    refused = kernel.run("%distcomp restart dbg --replay --yes")
    assert not refused.ok
    assert "cell 5 (" in refused.text and "ran on rank 0 of 4" in refused.text, refused.text
    assert "Nothing was restarted" in refused.text and "--skip 5" in refused.text
    assert "Restarted" not in refused.text and not refused.prompts
    replay = kernel.run("%distcomp restart dbg --replay --yes --skip 5")
    assert replay.ok and not replay.prompts, replay.text
    out = kernel.run("%%distcomp run dbg\nprint('alive', seen, MPI.COMM_WORLD.Get_size())")
    assert out.ok and "[rank 1] alive 10 2" in out.text, out.text

    assert (
        "Cleared the replay log of dbg (5 cell(s))"
        in kernel.run("%distcomp replay dbg --clear").text
    ), "the log holds the cells replayed, then the later ones"
    assert "nothing to replay" in kernel.run("%distcomp replay dbg").text
    assert kernel.run("%%distcomp run dbg\nafter_clear = 1").ok
    plain = kernel.run("%distcomp restart dbg")
    assert plain.ok and "The replay log (1 cell(s)) starts anew." in plain.text, plain.text
    assert "nothing to replay" in kernel.run("%distcomp replay dbg").text


def test_an_interrupt_of_a_loop_run_at_the_group_prompt_reports_the_ranks_as_stopped(kernel):
    out = kernel.run("%%distcomp run dbg\nfrom mpi4py import MPI\nr = MPI.COMM_WORLD.Get_rank()")
    assert out.ok, out.text
    timer = threading.Timer(8.0, kernel.km.interrupt_kernel)  # while the ranks spin
    timer.start()
    try:
        out = kernel.run(
            "%%distcomp run dbg\nbreakpoint()\nprint('after', r)", ["!while True: pass"], timeout=90
        )
    finally:
        timer.cancel()
    text = out.text
    assert out.reply is not None and out.reply["status"] == "error", text
    assert "did not stop on SIGINT" not in text, text
    assert "--replay" not in text, text
    # breakpoint() stops before the cell's next line, named as the notebook names the cell
    assert "Interrupted at the debugger prompt of ranks 0-1 at In [" in text, text
    assert "], line 3, in <module>" in text, text
    assert "; ranks 0-1 stopped." in text and "ready for the next cell" in text, text
    for _ in range(5):
        after = kernel.run("%%distcomp run dbg\nprint('next', r)")
        if after.ok:
            break
        time.sleep(1)
    assert after.ok and "[rank 1] next 1" in after.text, after.text


DEADLOCK = """%%distcomp run dbg
buf = np.zeros(4_000_000)  # 32 MB: Open MPI's Send waits for the matching receive
print('about to send', flush=True)
comm.Send(buf, dest=(r + 1) % 4)
comm.Recv(buf, source=(r - 1) % 4)
"""


def test_a_restart_after_an_interrupted_deadlock_is_bounded_on_a_busy_machine(kernel):
    """4 ranks in a send/send deadlock, interrupted: SIGINT cannot end a rank blocked in
    C code, nor can SIGTERM's Python handler. The restart says what it waits for, SIGKILLs
    after the grace it names, and its stop ends within those graces while every core runs a
    busy loop."""
    from jupyter_distcomp.local.ranks import ipp, world

    assert kernel.run(kernel.layout.format(4)).ok
    assert kernel.run("%distcomp replay dbg --clear").ok  # the replay: the next cell alone
    setup = "from mpi4py import MPI\nimport numpy as np\ncomm = MPI.COMM_WORLD\nr = comm.Get_rank()"
    assert kernel.run(f"%%distcomp run dbg\n{setup}", timeout=300).ok

    def interrupt_once_all_send() -> None:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            seen = "".join(text for texts in list(kernel.streams.values()) for text in texts)
            if seen.count("about to send") >= 4:
                kernel.km.interrupt_kernel()
                return
            time.sleep(0.05)

    watcher = threading.Thread(target=interrupt_once_all_send, daemon=True)
    watcher.start()
    stuck = kernel.run(DEADLOCK, timeout=180)
    watcher.join()
    assert not stuck.ok and "did not stop on SIGINT" in stuck.text, stuck.text

    cores = len(os.sched_getaffinity(0))
    busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(cores)]
    try:
        restart = kernel.run("%distcomp restart dbg --replay --yes", timeout=300)
    finally:
        for loop in busy:
            loop.kill()
            loop.wait()
    assert restart.ok, restart.text
    ranks = f"dbg: restarting: stopping ranks 0-3: SIGTERM, then SIGKILL after {world.RANK_EXIT_GRACE:g} s"
    cluster = (
        "dbg: restarting: stopping mpiexec and the controller: SIGTERM, then SIGKILL after "
        f"{ipp.CLUSTER_GRACE:g} s"
    )
    said_ranks, said_cluster = restart.first(ranks), restart.first(cluster)
    ready = restart.first("dbg: ranks ready 0 of 4")
    assert said_ranks is not None and said_cluster is not None, restart.events
    assert ready is not None and said_ranks < said_cluster < ready, restart.events
    # the stop: the graces it names, and the time a busy machine takes to act on them
    bound = world.RANK_EXIT_GRACE + ipp.CLUSTER_GRACE + ipp.BOOKKEEPING_SECONDS + 20
    assert ready < bound, restart.events
    restarted = restart.first("Restarted dbg")  # then the new ranks' start, bounded by its own
    assert restarted is not None and restarted < bound + world.START_TIMEOUT, restart.events
    assert "replaying 1 of 1" in restart.text, restart.text
    after = kernel.run("%%distcomp run dbg\nprint('alive', r, comm.Get_size())")
    assert after.ok and "[rank 3] alive 3 4" in after.text, after.text
