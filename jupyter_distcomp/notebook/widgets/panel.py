"""The run-settings panel of one component: controls, live preview, actions.

The panel holds no settings of its own: every control is a view of ``component.runsettings``
(see fields.py and layout_fields.py), so what the panel shows is what ``configure()``, the
``%distcomp`` flags, a local run and an Azure ML submission use. The buttons call the same
functions as the magics (ranks backend, ``run_command``, ``export``, ``submit``), in a
background thread (worker.py).
"""

from __future__ import annotations

import threading
from html import escape
from typing import TYPE_CHECKING, Any

import ipywidgets as w
from traitlets import link

from ...contracts import RankState
from ...core.summary import same_words
from ...errors import DistcompError
from ..views.preview import preview_html, summary_text
from .actions import STOP_LABEL, STOP_TIP, PanelActions, PanelSession
from .fields import InputField, OutputField
from .layout_fields import LayoutFields
from .worker import Worker

if TYPE_CHECKING:
    from ...core.model import Component
    from ...local.ranks.backend import RankBackend

#: status lines of a stop, cleared when the ranks run again
STOP_SAYINGS = ("Stopped the", "No ranks running", "The ranks of")
#: at most one update of the rank states per this many seconds
RANK_UPDATE_SECONDS = 0.2
BUTTONS = (
    ("start", "start ranks", "play", "Start the local ranks of this layout (or reuse them)"),
    ("run-command", "run command", "terminal", "Run the spec's command on local ranks"),
    ("export", "export YAML", "download", "Write the Azure ML job YAML to the path"),
    ("submit", "submit to Azure ML", "cloud-upload", "Submit the job to the compute target"),
    ("follow", "follow the job", "eye", "Every rank's output of the submitted job, in the log"),
    ("stop", STOP_LABEL, "stop", STOP_TIP),
)


def panel_title(name: str, component: Component) -> str:
    """ "run settings of quickstart", and the display name when it says something else
    ("MPI quickstart"), each once."""
    title = component.display_name or component.name
    shown = f"<b>run settings</b> of <code>{escape(name)}</code>"
    if not (same_words(title, name) or same_words(title, component.name)):
        shown += f" &middot; {escape(title)}"
    return shown


def _row(children: list[w.Widget]) -> w.HBox:
    return w.HBox(children, layout=w.Layout(flex_flow="row wrap", align_items="center"))


def _section(title: str, rows: list[w.Widget]) -> list[w.Widget]:
    return [w.HTML(f"<b>{escape(title)}</b>"), *rows] if rows else []


class RunSettingsPanel(PanelActions, w.VBox):
    """``RunSettingsPanel(name, component, session)``; ``panel_for`` keeps one per component
    name. The buttons act through ``session``, the shell's: its settings are read at the time
    of use, so a later ``%config`` applies to an existing panel."""

    def __init__(self, name: str, component: Component, session: PanelSession):
        self.name, self.component = name, component
        self.session = session
        self.last_job: Any = None
        self.last_client: Any = None  # the client that submitted last_job
        self.closed = False
        self._stop_requested = False
        self._stopper: threading.Thread | None = None
        settings = component.runsettings

        self.layout_fields = LayoutFields(component)
        self.input_fields = {n: InputField(i, settings) for n, i in component.inputs.items()}
        self.output_fields = {
            n: OutputField(o, component.name, settings) for n, o in component.outputs.items()
        }
        # as wide as the panel, no wider: its wide table scrolls inside
        self.preview = w.HTML(layout=w.Layout(width="100%", margin="2px 0"))
        self.preview.add_class("distcomp-preview")
        self.ranks_line = w.HTML("<small>ranks: not started</small>")
        self.ranks_line.add_class("distcomp-ranks")
        self.worker = Worker()
        self.buttons: dict[str, w.Button] = {}
        for key, text, icon, tip in BUTTONS:
            button = w.Button(
                description=text, icon=icon, tooltip=tip, layout=w.Layout(width="auto")
            )
            button.add_class(f"distcomp-btn-{key}")
            self.buttons[key] = button
        self.worker.buttons = [b for k, b in self.buttons.items() if k != "stop"]
        self.worker.on_busy = lambda busy: self._update_stop()
        self.export_path = w.Text(
            value=f"{name}_job.yml",
            description="YAML path",
            layout=w.Layout(width="300px", max_width="100%"),
        )
        self.export_path.add_class("distcomp-export-path")
        self.compute = w.Text(
            placeholder=self.session.resolve_compute() or "compute cluster name",
            description="compute",
            layout=w.Layout(width="260px", max_width="100%"),
        )
        self.compute.add_class("distcomp-compute")
        self.interactive = w.Text(
            placeholder="jupyterlab,vscode,ssh",
            description="interactive",
            tooltip="Azure ML's interactive services on every node of the job (ssh: ~/.ssh key)",
            layout=w.Layout(width="260px", max_width="100%"),
        )
        self.interactive.add_class("distcomp-interactive")
        self._compute_link = link(
            (settings, "compute"),
            (self.compute, "value"),
            transform=(lambda v: v or "", lambda v: v.strip() or None),
        )
        self._wire_buttons()

        header = w.HTML(panel_title(name, component))
        header.add_class("distcomp-header")
        # rows wrap at any width: a narrow notebook stacks the controls, none is cut
        actions = _row([self.buttons[k] for k in ("start", "run-command", "stop")])
        azure = _row([self.export_path, self.buttons["export"]])
        submit = _row(
            [self.compute, self.interactive, self.buttons["submit"], self.buttons["follow"]]
        )
        progress = _row([self.worker.progress, self.worker.progress_text, self.ranks_line])
        super().__init__(
            [
                header,
                self.layout_fields.box,
                *_section("inputs", [f.box for f in self.input_fields.values()]),
                *_section("outputs", [f.box for f in self.output_fields.values()]),
                self.preview,
                actions,
                azure,
                submit,
                self.worker.status,
                progress,
                self.worker.log,
            ]
        )
        self.add_class("distcomp-panel")
        settings.observe(self._refresh, names=["inputs", "outputs", "compute"])
        settings.resource_layout.observe(self._refresh)
        self._listening: RankBackend | None = None
        self._rank_lock = threading.Lock()
        self._rank_event: dict | None = None
        self._rank_timer: threading.Timer | None = None
        self._listen()
        self._update_stop()
        self._refresh()

    @property
    def master_addr(self) -> str:
        return self.session.master_addr

    # -- preview ------------------------------------------------------------------------
    def _rank_values(self) -> list[dict[str, str]] | None:
        """What the session shows for each rank (None: the preview says what is wrong)."""
        try:
            return self.session.rank_values(self.name, self.component)[0]
        except DistcompError:
            return None

    def _refresh(self, change: Any = None) -> None:
        self.preview.value = preview_html(self.component, self._rank_values())
        self.worker.progress.max = max(self._world_size(), 1)

    def _world_size(self) -> int:
        try:
            return self.component.world_size
        except DistcompError:
            return 1

    def summary(self) -> str:
        return summary_text(self.component, self.name, self._rank_values())

    def _repr_mimebundle_(self, **kwargs: Any) -> dict:
        """The widget view where widgets render; a text summary everywhere else."""
        bundle = super()._repr_mimebundle_(**kwargs) or {}
        bundle["text/plain"] = self.summary()
        return bundle

    # -- ranks state --------------------------------------------------------------------
    def _listen(self) -> None:
        try:
            backend = self.session.backend
        except Exception:  # no ranks support here: the buttons will say why
            return
        backend.add_listener(self._on_ranks)
        self._listening = backend
        world = backend.world(self.name)
        if world is not None:
            self._show_ranks(backend.event(world))

    def _on_ranks(self, event: dict) -> None:
        """Called by the backend (any thread) when a rank of any component changes state.

        Coalesced: a cell on many ranks makes each go busy and idle, and one widget update
        per RANK_UPDATE_SECONDS is all the eye can follow (and all the kernel should send).
        """
        if event.get("name") != self.name or self.closed:
            return
        with self._rank_lock:
            self._rank_event = event
            if self._rank_timer is not None:
                return
            self._rank_timer = threading.Timer(RANK_UPDATE_SECONDS, self._flush_ranks)
            self._rank_timer.daemon = True
            self._rank_timer.start()

    def _flush_ranks(self) -> None:
        with self._rank_lock:
            event, self._rank_event, self._rank_timer = self._rank_event, None, None
        if event is not None and not self.closed:
            self._show_ranks(event)

    def _update_stop(self) -> None:
        """ "stop ranks" is live (orange) only when there are ranks or an action to stop."""
        backend = self._listening
        has_ranks = backend is not None and backend.world(self.name) is not None
        live = has_ranks or self.worker.busy
        stop = self.buttons["stop"]
        stop.disabled = not live
        if not self._confirming:
            stop.button_style = "warning" if live else ""

    def _show_ranks(self, event: dict) -> None:
        self.preview.value = preview_html(self.component, self._rank_values())
        ranks = event.get("ranks") or []
        self._update_stop()
        if event.get("stopped"):
            self.ranks_line.value = "<small>ranks: stopped</small>"
            if not self.worker.busy:
                self.worker.show_progress(0, len(ranks))
                if not self.worker.text.startswith(STOP_SAYINGS):
                    # stopped elsewhere (a magic, the ranks panel): "ready" is no longer true
                    self.worker.say(f"The ranks of {self.name} stopped.")
            return
        if not self.worker.busy and self.worker.text.startswith(STOP_SAYINGS):
            self.worker.say("")  # the ranks run again: "Stopped the ranks" is no longer true
        counts: dict[str, int] = {}
        for rank in ranks:
            counts[rank["state"]] = counts.get(rank["state"], 0) + 1
        states = ", ".join(f"{n} {state}" for state, n in sorted(counts.items()))
        layout = f"{event.get('instance_count')}x{event.get('process_count_per_node')}"
        pending = event.get("pending")
        note = f"<div class='distcomp-pending'>{escape(pending)}</div>" if pending else ""
        self.ranks_line.value = f"<small>ranks ({layout}): {escape(states)}</small>{note}"
        if not self.worker.busy:
            ready = counts.get(RankState.IDLE, 0) + counts.get(RankState.BUSY, 0)
            what = "ranks ready" if ready == len(ranks) else "ranks starting"
            self.worker.show_progress(ready, len(ranks), what)

    # -- lifecycle ----------------------------------------------------------------------
    def close(self) -> None:
        """Detach from the settings and the backend, then remove the widgets."""
        if self.closed:
            return
        self.closed = True
        settings = self.component.runsettings
        settings.unobserve(self._refresh, names=["inputs", "outputs", "compute"])
        settings.resource_layout.unobserve(self._refresh)
        self._compute_link.unlink()
        self.layout_fields.close()
        for field in (*self.input_fields.values(), *self.output_fields.values()):
            field.close()
        if self._listening is not None:
            self._listening.remove_listener(self._on_ranks)
        with self._rank_lock:
            if self._rank_timer is not None:
                self._rank_timer.cancel()
        for child in _descendants(self):
            child.close()
        super().close()


def _descendants(widget: w.Widget) -> list[w.Widget]:
    found = []
    for child in getattr(widget, "children", ()):
        found += [*_descendants(child), child]
    return found
