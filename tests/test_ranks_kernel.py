"""Ranks driven from a real Jupyter kernel (jupyter_client), as a notebook drives them.

Interrupting the kernel during a run cell interrupts the ranks and the cell returns long
before the ranks' sleep would end;
definitions start ranks in the background; shutting the kernel down leaves no process.
"""

from __future__ import annotations

import queue
import time

import psutil
import pytest

from .ranks_support import MPI_SPEC, wait_gone

pytestmark = pytest.mark.slow
SLEEP = 600  # seconds a cell sleeps that only an interrupt ends in time


class Kernel:
    def __init__(self):
        from jupyter_client import KernelManager

        self.km = KernelManager(kernel_name="python3")
        self.km.start_kernel()
        self.kc = self.km.client()
        self.kc.start_channels()
        self.kc.wait_for_ready(timeout=60)

    def send(self, code: str) -> str:
        return self.kc.execute(code)

    def collect(self, msg_id: str, timeout: float = 120, until=None):
        """(reply content, text of every stream/display, seconds) for one execution."""
        texts, tic = [], time.monotonic()
        deadline = tic + timeout
        reply = None
        while time.monotonic() < deadline:
            try:
                msg = self.kc.get_iopub_msg(timeout=0.1)
            except queue.Empty:
                msg = None
            if msg and msg["parent_header"].get("msg_id") == msg_id:
                content = msg["content"]
                if msg["msg_type"] == "stream":
                    texts.append(content["text"])
                elif msg["msg_type"] in (
                    "display_data",
                    "update_display_data",
                    "execute_result",
                    "error",
                ):
                    texts.append(str(content.get("data", content)))
                if until is not None and until("".join(texts)):
                    return None, "".join(texts), time.monotonic() - tic
            if reply is None:
                try:
                    reply = self.kc.get_shell_msg(timeout=0.01)
                except queue.Empty:
                    continue
                if reply["parent_header"].get("msg_id") != msg_id:
                    reply = None
            elif msg is None:
                break  # replied, and iopub is quiet
        assert reply is not None, f"no reply within {timeout} s: {''.join(texts)}"
        return reply["content"], "".join(texts), time.monotonic() - tic

    def run(self, code: str, timeout: float = 120):
        return self.collect(self.send(code), timeout)

    def processes(self) -> list[psutil.Process]:
        return psutil.Process(self.km.provisioner.process.pid).children(recursive=True)

    def close(self):
        self.kc.stop_channels()
        if self.km.is_alive():
            self.km.shutdown_kernel(now=False)  # graceful: the kernel stops its ranks


@pytest.fixture(scope="module")
def kernel():
    k = Kernel()
    reply, text, _ = k.run(
        "%load_ext jupyter_distcomp\n%config DistComp.default_process_count_per_node = 2"
    )
    assert reply["status"] == "ok", text
    yield k
    k.close()


def test_a_definition_starts_ranks_ahead_only_where_a_run_cell_is_likely(kernel):
    # a first definition may only ever be used by `%distcomp command`: nothing starts
    reply, text, _ = kernel.run(f"%%distcomp pre\n{MPI_SPEC}")
    assert reply["status"] == "ok", text
    reply, text, _ = kernel.run("%distcomp status pre")
    assert "No ranks running" in text, text
    reply, text, _ = kernel.run("%%distcomp run pre\nprint('first', mpi_rank)")
    assert reply["status"] == "ok" and "[rank 1] first 1" in text, text
    reply, text, _ = kernel.run("%distcomp stop pre")
    assert "Stopped the ranks of pre." in text, text
    # it ran cells in this kernel: its definition, run again, starts the ranks ahead
    reply, text, seconds = kernel.run(f"%%distcomp pre\n{MPI_SPEC}")
    assert reply["status"] == "ok", text
    reply, text, _ = kernel.run("%distcomp status pre")
    assert "pre" in text and ("starting" in text or "idle" in text), text
    reply, text, _ = kernel.run("%%distcomp run pre\nprint('hello', mpi_rank)")
    assert reply["status"] == "ok" and "[rank 1] hello 1" in text
    reply, text, _ = kernel.run(
        "from jupyter_distcomp.local.ranks.backend import get_backend\n"
        "print('START', get_backend().world('pre').started_seconds)"
    )
    start_seconds = float(text.split("START")[1].split()[0])
    # the baseline: what starting the ranks took, measured by the same kernel
    assert seconds < start_seconds, "the definition waited for the ranks"


def test_interrupt_stops_every_rank_and_they_stay_usable(kernel):
    kernel.run(f"%%distcomp intr\n{MPI_SPEC}")
    reply, text, _ = kernel.run("%%distcomp run intr\nprint('warm')")
    assert reply["status"] == "ok", text
    # the ranks would sleep for SLEEP seconds: a reply well before that means they stopped
    msg_id = kernel.send(
        f"%%distcomp run intr\nimport time\nprint('sleeping', flush=True)\ntime.sleep({SLEEP})"
    )
    _, text, _ = kernel.collect(msg_id, timeout=30, until=lambda t: t.count("sleeping") >= 2)
    kernel.km.interrupt_kernel()
    reply, text, _ = kernel.collect(msg_id, timeout=SLEEP / 4)
    assert reply["status"] == "error" and reply["ename"] == "RankInterrupt"
    assert "sent SIGINT to ranks 0-1" in text and "did not stop" not in text
    reply, text, _ = kernel.run("%%distcomp run intr\nprint('after', mpi_rank)")
    assert reply["status"] == "ok", text
    assert "[rank 0] after 0" in text and "[rank 1] after 1" in text


def test_kernel_shutdown_leaves_no_process():
    k = Kernel()
    try:
        k.run("%load_ext jupyter_distcomp")
        k.run(f"%%distcomp bye\n{MPI_SPEC}")
        reply, text, _ = k.run("%%distcomp run bye\nprint('up')")
        assert reply["status"] == "ok", text
        ours = k.processes()
        assert len(ours) >= 4, [p.name() for p in ours]
        k.km.shutdown_kernel(now=False)
        assert wait_gone(ours, 15) == []
    finally:
        k.close()


def test_a_killed_kernel_takes_its_ranks_along():
    """No atexit hook runs after SIGKILL: the controller and mpiexec die with the kernel."""
    k = Kernel()
    try:
        k.run("%load_ext jupyter_distcomp")
        k.run(f"%%distcomp doomed\n{MPI_SPEC}")
        reply, text, _ = k.run("%%distcomp run doomed\nprint('up')")
        assert reply["status"] == "ok", text
        ours = k.processes()
        assert len(ours) >= 4
        names = {p.pid: " ".join(p.cmdline()[:4]) for p in ours}
        psutil.Process(k.km.provisioner.process.pid).kill()
        assert [names[p.pid] for p in wait_gone(ours, 20)] == []
    finally:
        k.close()
