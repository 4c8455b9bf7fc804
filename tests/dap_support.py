"""A Jupyter debug protocol client that speaks to a real kernel as JupyterLab's debugger does:
``debug_request`` on the control channel, ``debug_event`` read from iopub."""

from __future__ import annotations

import queue
import time
from typing import Any

#: JupyterLab's ``initialize`` arguments (packages/debugger/src/session.ts)
INITIALIZE = {
    "clientID": "jupyterlab",
    "clientName": "JupyterLab",
    "adapterID": "python3",
    "pathFormat": "path",
    "linesStartAt1": True,
    "columnsStartAt1": True,
    "supportsVariableType": True,
    "supportsVariablePaging": True,
    "supportsRunInTerminalRequest": True,
    "locale": "en-us",
}
RANK_THREADS = 1_000_000_000  # the kernel's rank threads are numbered from here


class DapClient:
    """Requests, the events seen, and cells run without waiting for them."""

    def __init__(self, kc: Any):
        self.kc = kc
        self.seq = 0
        self.events: list[dict] = []
        self.text: dict[str, list[str]] = {}  # stream text by cell msg_id
        self.replies: dict[str, dict] = {}  # execute replies by msg_id
        self.idle: set[str] = set()  # requests whose output is all out (status idle)
        self.kernel: Any = None  # the DebugKernel, where a test needs its stdin answers

    # -- requests -------------------------------------------------------------------------
    def request(self, command: str, timeout: float = 60, **arguments: Any) -> dict:
        self.seq += 1
        content = {"type": "request", "seq": self.seq, "command": command, "arguments": arguments}
        return self.raw(content, timeout)

    def raw(self, content: dict, timeout: float = 30) -> dict:
        """Send ``content`` as the debug request, whatever its shape; the reply's content."""
        msg = self.kc.session.msg("debug_request", content)
        self.kc.control_channel.send(msg)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.pump()
            try:
                reply = self.kc.control_channel.get_msg(timeout=0.02)
            except queue.Empty:
                continue
            if reply["parent_header"].get("msg_id") == msg["header"]["msg_id"]:
                return reply["content"]
        raise AssertionError(f"no reply to {content} within {timeout} s")

    def start(self) -> dict:
        """Switch the debugger on as JupyterLab does; debugInfo's body."""
        assert self.request("initialize", **INITIALIZE)["success"]
        assert self.request("attach")["success"]
        return self.request("debugInfo")["body"]

    def breakpoints(self, code: str, lines: list[int]) -> str:
        """dumpCell then setBreakpoints for the cell ``code``: its path."""
        path = self.request("dumpCell", code=code)["body"]["sourcePath"]
        reply = self.request(
            "setBreakpoints",
            source={"path": path},
            breakpoints=[{"line": line} for line in lines],
            sourceModified=False,
        )
        assert reply["success"], reply
        return path

    def stop(self) -> None:
        self.request("disconnect", restart=False, terminateDebuggee=False)

    # -- cells and events -----------------------------------------------------------------
    def execute(self, code: str) -> str:
        return self.kc.execute(code)

    def pump(self) -> None:
        while True:
            try:
                msg = self.kc.get_iopub_msg(timeout=0.005)
            except queue.Empty:
                break
            parent = msg["parent_header"].get("msg_id", "")
            if msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle":
                self.idle.add(parent)
            elif msg["msg_type"] == "debug_event":
                self.events.append(msg["content"])
            elif msg["msg_type"] == "stream":
                self.text.setdefault(parent, []).append(msg["content"]["text"])
            elif msg["msg_type"] == "error":
                self.text.setdefault(parent, []).append("\n".join(msg["content"]["traceback"]))
        while True:
            try:
                reply = self.kc.get_shell_msg(timeout=0.001)
            except queue.Empty:
                break
            self.replies[reply["parent_header"].get("msg_id", "")] = reply["content"]

    def output(self, msg_id: str) -> str:
        from jupyter_distcomp.errors import strip_ansi

        return strip_ansi("".join(self.text.get(msg_id, [])))

    def wait_reply(self, msg_id: str, timeout: float = 120) -> dict:
        deadline = time.monotonic() + timeout
        while msg_id not in self.replies or msg_id not in self.idle:  # its output, all of it
            assert time.monotonic() < deadline, (
                f"no reply within {timeout} s:\n{self.output(msg_id)}"
            )
            self.pump()
            time.sleep(0.01)
        return self.replies[msg_id]

    def wait_events(
        self, event: str, count: int, since: int, timeout: float = 60, ranks: bool = True, **body
    ) -> list:
        """The first ``count`` events named ``event`` (whose body has ``body``; of a rank's
        thread unless not ``ranks``) after index ``since`` of :attr:`events`."""
        deadline = time.monotonic() + timeout
        while True:
            self.pump()
            found = [
                e
                for e in self.events[since:]
                if e.get("event") == event
                and all(e.get("body", {}).get(k) == v for k, v in body.items())
                and (not ranks or e.get("body", {}).get("threadId", 0) >= RANK_THREADS)
            ]
            if len(found) >= count:
                return found[:count]
            assert time.monotonic() < deadline, (
                f"{len(found)} of {count} {event} events within {timeout} s: {self.events[since:]}"
            )
            time.sleep(0.01)

    def run(self, code: str, timeout: float = 180) -> tuple[dict, str]:
        """Run a cell to its end (no breakpoint expected): its reply and output."""
        msg_id = self.execute(code)
        reply = self.wait_reply(msg_id, timeout)
        return reply, self.output(msg_id)
