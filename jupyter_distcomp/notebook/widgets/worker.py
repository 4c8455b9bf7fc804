"""Run a panel action in a background thread, with a status line, a progress bar and a log.

A button's handler runs in the kernel's message loop: anything slow there (starting ranks,
importing azure-ai-ml, a training command) would freeze every widget and queue the next cell.
So each action runs in a thread, one at a time per panel, and reports through widget traits
(safe from a thread: ipykernel sends the updates itself). Every error ends up in the status
line as its message and, for an unexpected one, with its traceback in the log: nothing is
left only in the kernel's log.
"""

from __future__ import annotations

import ctypes
import threading
import time
import traceback
from collections.abc import Callable

import ipywidgets as w

from ...errors import DistcompError
from ..views.code_marks import rich

#: entries kept in the log (older ones are dropped with a note): a chatty command stays cheap
MAX_LOG_ENTRIES = 400
_COLOURS = {"info": "#555", "busy": "#06c", "ok": "#080", "error": "#c00"}


class Cancelled(Exception):
    """The user pressed stop while this action ran."""


class Worker:
    def __init__(self) -> None:
        self.status = w.HTML("<span style='color:#888'>idle</span>")
        self.status.add_class("distcomp-status")
        self.progress = w.IntProgress(value=0, min=0, max=1, description="ranks ready")
        self.progress.style = {"description_width": "initial"}
        self.progress.add_class("distcomp-progress")
        self.progress_text = w.Label("")
        self.progress_text.add_class("distcomp-progress-text")
        self.log = w.Output(layout=w.Layout(max_height="240px", overflow="auto"))
        self.log.add_class("distcomp-log")
        self.state = "idle"  # idle | busy | ok | error (the last status, for tests and the UI)
        self.text = ""
        self.action: str | None = None
        self.buttons: list[w.Button] = []  # disabled while an action runs
        #: called with True when an action starts and False when it ends
        self.on_busy: Callable[[bool], None] | None = None
        self._thread: threading.Thread | None = None
        self._done = threading.Event()
        self._done.set()

    # -- reporting ----------------------------------------------------------------------
    def say(self, text: str, kind: str = "info") -> None:
        self.text, self.state = text, kind
        colour = _COLOURS.get(kind, "#555")
        body = rich(text)
        if not text:
            self.status.value = ""
            return
        if "\n" in text:
            body = f"<pre style='white-space:pre-wrap;margin:0'>{body}</pre>"
        self.status.value = f"<span style='color:{colour}'>{body}</span>"

    def say_html(self, html: str, text: str, kind: str = "ok") -> None:
        self.text, self.state = text, kind
        self.status.value = f"<span style='color:{_COLOURS[kind]}'>{html}</span>"

    def show_progress(self, done: int, total: int, what: str = "ranks ready") -> None:
        self.progress.max = max(total, 1)
        self.progress.value = min(done, total)
        self.progress.description = what
        self.progress_text.value = f"{done} of {total}"

    def write(self, text: str, stderr: bool = False) -> None:
        """Append to the log (from any thread)."""
        if not text.endswith("\n"):
            text += "\n"
        entry = {"output_type": "stream", "name": "stderr" if stderr else "stdout", "text": text}
        outputs = self.log.outputs
        if len(outputs) >= MAX_LOG_ENTRIES:
            note = {"output_type": "stream", "name": "stdout", "text": "[earlier output cut]\n"}
            outputs = (note, *outputs[-(MAX_LOG_ENTRIES // 2) :])
        self.log.outputs = (*outputs, entry)

    # -- running ------------------------------------------------------------------------
    @property
    def busy(self) -> bool:
        return not self._done.is_set()

    def run(self, action: str, func: Callable[[], None]) -> bool:
        """Start ``func`` in a thread; False (and a status saying why) if one already runs."""
        if self.busy:
            self.say(f"busy: {self.action} is still running. Wait, or press stop.", "error")
            return False
        self.action = action
        self.log.outputs = ()  # the log of an earlier action is not this one's
        self._done.clear()
        self._set_buttons(disabled=True)
        if self.on_busy is not None:
            self.on_busy(True)
        self.say(f"{action}...", "busy")
        self._thread = threading.Thread(
            target=self._guarded, args=(action, func), name=f"distcomp-panel-{action}", daemon=True
        )
        self._thread.start()
        return True

    def _guarded(self, action: str, func: Callable[[], None]) -> None:
        try:
            func()
        except (Cancelled, KeyboardInterrupt):
            self.say(f"{action}: stopped.", "info")
        except DistcompError as exc:
            self.say(f"{action} failed: {exc}", "error")
        except Exception as exc:  # not ours: keep the whole story in the panel
            self.write("".join(traceback.format_exception(exc)), stderr=True)
            self.say(f"{action} failed: {type(exc).__name__}: {exc} (traceback below)", "error")
        finally:
            self.action = None
            self._set_buttons(disabled=False)
            self._done.set()
            if self.on_busy is not None:
                self.on_busy(False)

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the current action ends (for tests and scripts); True if it did."""
        return self._done.wait(timeout)

    def cancel(self, grace: float = 10.0) -> bool:
        """Interrupt the running action's thread as Ctrl-C would (its code cleans up as after
        a Ctrl-C: ``run_command`` stops every rank). True if no action runs after ``grace``."""
        thread = self._thread
        if thread is None or thread.ident is None or not thread.is_alive():
            return True
        ctypes.pythonapi.PyThreadState_SetAsyncExc(
            ctypes.c_ulong(thread.ident), ctypes.py_object(KeyboardInterrupt)
        )
        deadline = time.monotonic() + grace
        while thread.is_alive() and time.monotonic() < deadline:
            thread.join(0.05)
        if thread.is_alive():
            return False
        if not self._done.is_set():  # the interrupt landed in our own clean-up
            self.action = None
            self._set_buttons(disabled=False)
            self._done.set()
        return True

    def _set_buttons(self, disabled: bool) -> None:
        for button in self.buttons:
            button.disabled = disabled
