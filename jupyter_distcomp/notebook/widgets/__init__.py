"""The run-settings panel shown below every ``%%distcomp NAME`` cell (and by ``%distcomp
widget NAME``): layout, input values, a live preview of what each rank gets, and buttons that
start ranks, run the command, export or submit to Azure ML, and stop the ranks.

ipywidgets 8 standard controls only (no custom JavaScript), so it renders in JupyterLab and
Notebook 7 alike; where widgets cannot render (a terminal, nbconvert) the panel's text/plain
is a summary of the settings. Imported only when a panel is made (ipywidgets is not light).

- ``panel``: the run-settings panel of one component: controls, live preview, actions
- ``layout_fields``: nodes x processes per node (and TensorFlow's workers and parameter
  servers), bound to the component's layout
- ``fields``: one control per input and output of the spec, bound to its run settings
- ``actions``: what the panel's buttons do, the same calls as the magics
- ``worker``: a panel action in a background thread, with status line, progress bar and log

Stable CSS classes, for browser tests and user styles:

==================================  =============================================
``distcomp-panel``                  the panel (a VBox)
``distcomp-header``                 its title line
``distcomp-layout``                 the row of layout controls
``distcomp-instance-count``         nodes (BoundedIntText)
``distcomp-process-count``          processes per node (BoundedIntText)
``distcomp-worker-count``           TensorFlow workers, 0 = all but ps (BoundedIntText)
``distcomp-ps-count``               TensorFlow parameter servers (BoundedIntText)
``distcomp-launcher``               the launcher (HTML)
``distcomp-layout-message``         why the last layout edit was not applied (HTML)
``distcomp-field``                  one input or output row
``distcomp-input-<name>``           the control of input <name>
``distcomp-input-set-<name>``       its set / unset checkbox (hidden when it cannot be unset)
``distcomp-output-<name>``          the path field of output <name>
``distcomp-output-set-<name>``      its set / unset checkbox
``distcomp-message``                the hint or reason beside a control
``distcomp-invalid``                added to a control whose settings value is invalid
``distcomp-preview``                world size, per-rank table, rank 0's command
``distcomp-btn-start``              start ranks
``distcomp-btn-run-command``        run the spec's command on local ranks
``distcomp-btn-stop``               stop the ranks (and a running command)
``distcomp-export-path``            path of the YAML to write (Text)
``distcomp-btn-export``             export Azure ML job YAML
``distcomp-compute``                Azure ML compute target (Text)
``distcomp-interactive``            interactive services of the job: jupyterlab,vscode,ssh (Text)
``distcomp-btn-submit``             submit to Azure ML
``distcomp-btn-follow``             follow the job submitted last (every rank's output in the log)
``distcomp-status``                 status line: what runs, what happened, errors
``distcomp-progress``               progress bar: ranks ready n of N
``distcomp-progress-text``          the same as text, "n of N"
``distcomp-ranks``                  live rank states ("ranks (2x2): 4 idle")
``distcomp-pending``                in it: what the next run changes ("running ...; next ...")
``distcomp-log``                    output of the command and unexpected tracebacks
==================================  =============================================
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .actions import PanelSession
from .panel import RunSettingsPanel

if TYPE_CHECKING:
    from ...core.model import Component

_PANELS: dict[str, RunSettingsPanel] = {}


def panel_for(name: str, component: Component, session: PanelSession) -> RunSettingsPanel:
    """The panel of ``name``: the existing one while ``component`` is the same object (every
    display of it is a live view of one panel), else a new one (the old one is closed). Its
    buttons act through ``session``, the shell's."""
    panel = _PANELS.get(name)
    if panel is not None and panel.component is component and not panel.closed:
        panel.session = session
        return panel
    if panel is not None:
        panel.close()
    panel = RunSettingsPanel(name, component, session=session)
    _PANELS[name] = panel
    return panel


def get_panel(name: str) -> RunSettingsPanel | None:
    return _PANELS.get(name)


def close_all() -> None:
    for panel in list(_PANELS.values()):
        panel.close()
    _PANELS.clear()


__all__ = ["PanelSession", "RunSettingsPanel", "close_all", "get_panel", "panel_for"]
