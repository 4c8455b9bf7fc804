"""A real kernel (jupyter_client) whose stdin requests are answered as a notebook answers them."""

from __future__ import annotations

import queue
import time
from collections.abc import Callable
from dataclasses import dataclass, field

#: an answer to one prompt: the text typed, or a function of the prompt (None: do not answer)
Answer = str | Callable[[str], "str | None"]
#: seconds an output message sent before a stdin request has to arrive (another socket)
IOPUB_SETTLE = 0.05


@dataclass
class Outcome:
    reply: dict | None
    text: str = ""  # every stream and error of the cell, in order
    prompts: list[str] = field(default_factory=list)  # each stdin request's prompt, in order
    transcript: str = ""  # text and "<prompt><answer>" lines in arrival order
    states: list[dict[int, str]] = field(default_factory=list)  # ranks panel's rank states
    msg_id: str = ""  # the cell's request: the parent of its output messages
    #: (seconds since the request, text) of each stream text and display (shown or updated)
    events: list[tuple[float, str]] = field(default_factory=list)

    def first(self, needle: str) -> float | None:
        """When the first event holding ``needle`` arrived (seconds since the request)."""
        return next((when for when, text in self.events if needle in text), None)

    def saw(self, rank: int, state: str) -> bool:
        return any(states.get(rank) == state for states in self.states)

    @property
    def cell(self) -> str:
        """The notebook's label of this cell, as locations name it: ``In [7]``."""
        assert self.reply is not None
        return f"In [{self.reply['execution_count']}]"

    @property
    def ok(self) -> bool:
        return self.reply is not None and self.reply["status"] == "ok"


class DebugKernel:
    def __init__(self, cwd: str | None = None):
        from jupyter_client import KernelManager

        self.km = KernelManager(kernel_name="python3")
        self.km.start_kernel(cwd=cwd)
        self.kc = self.km.client()
        self.kc.start_channels()
        self.kc.wait_for_ready(timeout=60)
        self.streams: dict[str, list[str]] = {}  # every stream text seen, by its cell's msg_id

    def run(
        self, code: str, answers: list[Answer] = (), timeout: float = 180, stdin: bool = True
    ) -> Outcome:
        """Execute ``code`` with stdin allowed (``stdin=False``: as nbconvert runs it); answer
        each prompt with the next answer (``c`` once they are used up). Returns when the
        cell's reply and output are in."""
        pending = list(answers)
        started = time.monotonic()
        msg_id = self.kc.execute(code, allow_stdin=stdin)
        out = Outcome(reply=None, msg_id=msg_id)
        parts: list[str] = []
        transcript: list[str] = []
        idle = False

        def take(msg: dict) -> None:
            nonlocal idle
            if msg["msg_type"] == "comm_msg":  # what the ranks panel is told
                data = msg["content"]["data"]
                if data.get("type") == "world":
                    ranks = data["world"]["ranks"]
                    out.states.append({r["rank"]: r["state"] for r in ranks})
            self._keep_stream(msg)  # a background cell's output too
            if msg["parent_header"].get("msg_id") != msg_id:
                return
            content = msg["content"]
            if msg["msg_type"] == "stream":
                parts.append(content["text"])
                transcript.append(content["text"])
                out.events.append((time.monotonic() - started, content["text"]))
            elif msg["msg_type"] in ("display_data", "update_display_data"):
                shown = content["data"].get("text/plain", "")
                out.events.append((time.monotonic() - started, shown))
            elif msg["msg_type"] == "error":
                parts.append("\n".join(content["traceback"]))
            elif msg["msg_type"] == "status" and content["execution_state"] == "idle":
                idle = True

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and not (idle and out.reply is not None):
            try:
                take(self.kc.get_iopub_msg(timeout=0.02))
            except queue.Empty:
                pass
            try:
                request = self.kc.get_stdin_msg(timeout=0.01)
            except queue.Empty:
                request = None
            if request is not None:
                # the kernel sent its output before asking (ipykernel flushes first): all of
                # it shows before the prompt, as in a notebook, though it came on another socket
                while True:
                    try:
                        take(self.kc.get_iopub_msg(timeout=IOPUB_SETTLE))
                    except queue.Empty:
                        break
                prompt = request["content"]["prompt"]
                out.prompts.append(prompt)
                answer = pending.pop(0) if pending else "c"
                typed = answer(prompt) if callable(answer) else answer
                if typed is not None:
                    transcript.append(f"{prompt}{typed}\n")
                    self.kc.input(typed)
            if out.reply is None:
                try:
                    reply = self.kc.get_shell_msg(timeout=0.01)
                except queue.Empty:
                    continue
                if reply["parent_header"].get("msg_id") == msg_id:
                    out.reply = reply["content"]
        from jupyter_distcomp.errors import strip_ansi

        out.text = strip_ansi("".join(parts))
        out.transcript = strip_ansi("".join(transcript))
        assert out.reply is not None, f"no reply within {timeout} s:\n{out.text}"
        return out

    def _keep_stream(self, msg: dict) -> None:
        if msg["msg_type"] == "stream":
            parent = msg["parent_header"].get("msg_id", "")
            self.streams.setdefault(parent, []).append(msg["content"]["text"])

    def output_until(self, msg_id: str, needle: str, seconds: float = 30) -> str:
        """The stream text of cell ``msg_id`` once it holds ``needle`` (or after ``seconds``),
        reading output as a notebook does between cells."""
        deadline = time.monotonic() + seconds
        while needle not in self.output_of(msg_id) and time.monotonic() < deadline:
            try:
                self._keep_stream(self.kc.get_iopub_msg(timeout=0.1))
            except queue.Empty:
                pass
        return self.output_of(msg_id)

    def output_of(self, msg_id: str) -> str:
        """The stream text of cell ``msg_id`` seen so far (also after its reply)."""
        from jupyter_distcomp.errors import strip_ansi

        return strip_ansi("".join(self.streams.get(msg_id, [])))

    def close(self) -> None:
        self.kc.stop_channels()
        if self.km.is_alive():
            self.km.shutdown_kernel(now=False)


MPI_SPEC = """\
name: dbg
type: DistributedComponent
launcher:
  type: mpi
  additional_arguments: python train.py
"""
