"""What the panel's buttons do: the same calls as the magics, run by the panel's worker
thread so the kernel stays responsive, reporting to the status line, progress bar and log.

The panel reaches the rank backend and Azure ML through a :class:`PanelSession` (the shell's
:class:`~jupyter_distcomp.notebook.session.Session`):

- start ranks: ``backend.start(wait=False)``, then "ranks ready n of N" until started
  (following a new world when the layout changes meanwhile);
- run command: ``session.run_command``, its labelled output streamed to the log;
- export: ``session.export`` to the path field; submit: ``session.submit`` to the compute
  field (or the session's default compute); follow: ``session.follow`` of the job submitted
  last, every rank's labelled output into the log, its state in the status line;
- stop: interrupts a running command as Ctrl-C would (every rank stopped), stops the ranks.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable
from html import escape
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from ...contracts import RankState
from ...errors import AzureMLError
from ..views.preview import command_line
from .worker import Cancelled, Worker

if TYPE_CHECKING:
    import ipywidgets as w

    from ...core.model import Component
    from ...local.command import CommandResult
    from ...local.ranks.backend import RankBackend
    from ..session import Submission


class PanelSession(Protocol):
    """What the panel needs of the session: the ranks, the command, Azure ML."""

    @property
    def master_addr(self) -> str: ...

    @property
    def backend(self) -> RankBackend: ...

    def end_runs(self, name: str | None) -> list[str]: ...

    def rank_values(
        self, name: str, component: Component | None = None
    ) -> tuple[list[dict[str, str]], bool]: ...

    def resolve_compute(
        self, component: Component | None = None, explicit: str | None = None
    ) -> str | None: ...

    def run_command(
        self,
        name: str,
        *,
        component: Component | None = None,
        stream: Callable[..., Any] | None = print,
    ) -> CommandResult: ...

    def export(self, component: Component, path: str | Path) -> Path: ...

    def submit(
        self,
        component: Component,
        *,
        compute: str | None = None,
        interactive: tuple[str, ...] = (),
        on_warning: Callable[[str], None] | None = None,
    ) -> Submission: ...

    def follow(
        self,
        name: str,
        *,
        ml_client: Any = None,
        show: Callable[[str, str], None] | None = None,
        state: Callable[[str], None] | None = None,
    ) -> Any: ...


#: the stop button's own words; how long its "confirm stop" waits for the second click
STOP_LABEL, STOP_TIP = "stop ranks", "Stop the ranks (and a running command)"
CONFIRM_SECONDS = 10.0


class PanelActions:
    """The buttons' actions, mixed into RunSettingsPanel, which sets these attributes."""

    name: str
    component: Component
    session: PanelSession
    worker: Worker
    buttons: dict[str, w.Button]
    export_path: w.Text
    interactive: w.Text
    last_job: Any
    last_client: Any
    _stop_requested: bool
    _stopper: threading.Thread | None
    _confirming: bool = False
    _asking: threading.Timer | None = None
    _before_asking: tuple[str, str, str] = ("", "", "idle")

    def _update_stop(self) -> None: ...

    # -- wiring ------------------------------------------------------------------------
    def _wire_buttons(self) -> None:
        actions = {
            "start": ("start ranks", self._start),
            "run-command": ("run the command", self._run_command),
            "export": ("export", self._export),
            "submit": ("submit", self._submit),
            "follow": ("follow", self._follow),
        }
        for key, (label, func) in actions.items():
            self.buttons[key].on_click(
                lambda _b, label=label, func=func: self.worker.run(label, func)
            )
        self.buttons["stop"].on_click(lambda _b: self._stop_clicked())

    # -- stop, asked first when it ends running code ---------------------------------------
    def _running_code(self) -> str:
        """What a stop would end ("" when nothing runs): a command, or busy ranks' cells."""
        if self.worker.busy and self.worker.action == "run the command":
            return "the command running on every rank"
        world = self.session.backend.world(self.name) if self.worker.action is None else None
        working = [
            r
            for r in (world.ranks if world else [])
            if r.state in (RankState.BUSY, RankState.DEBUGGING)
        ]
        return f"the code running on {len(working)} rank(s)" if working else ""

    def _stop_clicked(self) -> None:
        """Stop at once, unless code runs: then the button asks for a second click, as
        JupyterLab asks before it restarts a busy kernel."""
        button = self.buttons["stop"]
        running = self._running_code()
        if running and not self._confirming:
            self._confirming = True
            button.description, button.button_style = "confirm stop", "danger"
            button.tooltip = f"Stopping ends {running} and the ranks' variables: click to stop"
            worker = self.worker
            self._before_asking = (worker.status.value, worker.text, worker.state)
            worker.say(
                f"Stop ends {running}, and the variables the ranks hold are lost. "
                "Click 'confirm stop' to go ahead.",
                "busy" if worker.busy else "info",
            )
            self._asking = threading.Timer(CONFIRM_SECONDS, self._end_confirming, (True,))
            self._asking.daemon = True
            self._asking.start()
            return
        self._end_confirming()
        self.stop()

    def _end_confirming(self, unanswered: bool = False) -> None:
        """The stop button as it was; ``unanswered``: the question timed out, so the status
        line says again what it said before it."""
        if self._asking is not None:
            self._asking.cancel()
            self._asking = None
        question = self._confirming and self.worker.text.startswith("Stop ends ")
        self._confirming = False
        button = self.buttons["stop"]
        button.description, button.tooltip = STOP_LABEL, STOP_TIP
        self._update_stop()
        if unanswered and question:
            worker = self.worker
            worker.status.value, worker.text, worker.state = self._before_asking

    def _start(self) -> None:
        self._stop_requested = False
        backend = self.session.backend
        world = backend.start(self.name, self.component, wait=False)
        while True:
            total = world.world_size
            if not world.wait_started(0.1):
                self.worker.show_progress(world.ready_count, total)
                self.worker.say(
                    f"starting {self.name}: ranks ready {world.ready_count} of {total}", "busy"
                )
                continue
            current = backend.world(self.name)
            if self._stop_requested or current is None:
                raise Cancelled
            if current is not world:  # the layout changed meanwhile: follow the new world
                world = current
                continue
            world.raise_start_error()
            break
        self.worker.show_progress(total, total)
        took = f" in {world.started_seconds:.1f} s" if world.started_seconds else ""
        self.worker.say(
            f"{self.name}: {total} of {total} ranks ready ({world.describe_layout()}){took}", "ok"
        )

    def _run_command(self) -> None:
        total = self.component.world_size
        self.worker.show_progress(0, total, "runs finished")
        self.worker.log.clear_output()
        self.worker.write(f"$ {command_line(self.component)}")
        self.worker.say(f"running the command on {total} rank(s); output below", "busy")

        def stream(text: str, file: Any = None, flush: bool = True) -> None:
            self.worker.write(text, stderr=file is sys.stderr)

        result = self.session.run_command(self.name, component=self.component, stream=stream)
        self.worker.show_progress(total, total, "runs finished")
        self.worker.say(
            f"the command ended on {total} rank(s) in {result.seconds:.1f} s, every rank "
            "succeeded; output below",
            "ok",
        )

    def _export(self) -> None:
        path = self.export_path.value.strip() or f"{self.name}_job.yml"
        written = self.session.export(self.component, path)
        self.worker.say(
            f"Wrote the Azure ML job of '{self.name}' to {written}. Create it with: "
            f"az ml job create -f {written}",
            "ok",
        )

    def _submit(self) -> None:
        from ...azureml.interactive import parse_services
        from ..views.job import JobSummary

        compute = self.session.resolve_compute(self.component)
        if not compute:
            raise AzureMLError(
                f"submitting '{self.name}' needs a compute target. Fix: type the name of a "
                "compute cluster in the compute field (or %config AzureML.compute = 'NAME')."
            )
        interactive = parse_services(self.interactive.value)
        self.worker.say(f"submitting {self.name} to {compute}...", "busy")
        notes: list[str] = []

        def note(text: str) -> None:
            notes.append(text)
            self.worker.write(f"warning: {text}", stderr=True)

        submission = self.session.submit(
            self.component, compute=compute, interactive=interactive, on_warning=note
        )
        job = self.last_job = submission.job
        self.last_client = submission.ml_client
        summary = JobSummary(job, spec_name=self.name)
        text = f"submitted job {summary.name} ({summary.status}) to {compute}"
        link_html = ""
        if summary.studio_url:
            href = escape(summary.studio_url, quote=True)
            link_html = f": <a href='{href}' target='_blank' rel='noopener'>Azure ML studio</a>"
            text += f": {summary.studio_url}"
        html = f"submitted job <b>{escape(summary.name)}</b> ({escape(summary.status)}) to "
        warned = f"; {len(notes)} warning(s) in the log below" if notes else ""
        self.worker.say_html(f"{html}{escape(compute)}{link_html}{warned}", text + warned, "ok")

    def _follow(self) -> None:
        """Every rank's output of the job submitted last, into the log (``%distcomp follow``)."""
        job = self.last_job
        if job is None:
            raise AzureMLError(
                f"no job of '{self.name}' was submitted from this panel. Fix: press 'submit to "
                "Azure ML' first, or follow any job by name: `%distcomp follow JOB`."
            )
        self.worker.log.clear_output()
        self.worker.say(f"following job {job.name}...", "busy")
        outcome = self.session.follow(
            job.name,
            ml_client=self.last_client,
            show=lambda text, stream: self.worker.write(text, stderr=stream == "stderr"),
            state=lambda text: self.worker.say(text, "busy"),
        )
        status = outcome.status if outcome is not None else "still running"
        self.worker.say(f"job {job.name}: {status}; every rank's output is in the log", "ok")

    def stop(self) -> threading.Thread:
        """Stop the panel's running command, then what `%distcomp stop NAME` stops (another
        run of the command, the ranks); in a thread, as stopping takes seconds."""

        def stop() -> None:
            self._stop_requested = True
            cancelled = self.worker.action == "run the command" and self.worker.cancel()
            try:
                stopped = self.session.end_runs(self.name)  # as `%distcomp stop NAME`
            except Exception as exc:
                self.worker.say(f"stop failed: {exc}", "error")
                return
            self.worker.wait(30)
            if not cancelled:  # the log of a stopped command stays: it says how far it got
                self.worker.log.outputs = ()
            self.worker.show_progress(0, self.component.world_size)
            said = [f"Stopped {'; '.join(stopped)}."] if stopped else ["No ranks running."]
            if cancelled:
                said.insert(0, "Stopped the command on every rank.")
            self.worker.say(" ".join(said), "info")

        self._stopper = threading.Thread(target=stop, name="distcomp-panel-stop", daemon=True)
        self._stopper.start()
        return self._stopper

    def wait(self, timeout: float | None = 60) -> bool:
        """Until the running action (and a stop) ended; for tests and scripts."""
        done = self.worker.wait(timeout)
        if self._stopper is not None:
            self._stopper.join(timeout)
            done = done and not self._stopper.is_alive()
        return done
