"""``%distcomp env``: the variables each rank sees, those every rank shares once, then one
compact row per rank (rank, node, local rank and what varies); TF_CONFIG in readable parts
(``core/rank_view.py``)."""

from __future__ import annotations

from html import escape
from typing import TYPE_CHECKING

from ...core.rank_view import RankView, rank_view, text_lines
from ...core.summary import layout_caption
from ...machine.gpus import kernel_gpus, rank_device
from .code_marks import plain, rich
from .component import STYLE

if TYPE_CHECKING:
    from ...core.model import Component


def files_text(instance_count: int, node_local_files: bool, local: bool = True) -> str | None:
    """Where the ranks of several emulated nodes read and write files; None for one node
    and for real hosts (each has its own disk)."""
    if instance_count < 2 or not local:
        return None
    run = (
        "each node in its own copy of the notebook's folder with its own TMPDIR, the folder "
        "itself at $DISTCOMP_NOTEBOOK_DIR (DistComp.node_local_files = False: all in the "
        "notebook's folder)"
        if node_local_files
        else "all ranks in the notebook's folder (DistComp.node_local_files = True: a copy "
        "per node, as on Azure ML)"
    )
    return (
        f"files: `%%distcomp run`: {run}; `%distcomp command`: each node in its own copy "
        "of the code folder with its own TMPDIR, outputs shared"
    )


def _with_devices(view: RankView, envs: list[dict[str, str]]) -> RankView:
    """``view`` with each rank's ``cuda:LOCAL_RANK`` device, where the ranks have GPUs."""
    gpus = kernel_gpus()
    devices = [rank_device(env, gpus) for env in envs]
    if all(device == "cpu" for device in devices) or len(devices) != len(view.rows):
        return view
    rows = [[*row, device] for row, device in zip(view.rows, devices, strict=True)]
    return RankView(view.shared, [*view.header, "device"], rows)


def _breakable(name: str) -> str:
    """A variable name that may wrap after each underscore (a narrow output stays narrow)."""
    return escape(name).replace("_", "_<wbr>")


class EnvTable:
    """The variables each rank sees: those every rank shares once, then one compact row per
    rank (rank, node, local rank and what varies); TF_CONFIG in readable parts.

    ``envs`` come from ``Session.rank_values``; ``held`` says they are the running ranks' own
    (else the ports read ``PORT_AT_START``). ``pending``: what the next run changes (the
    settings no longer match the running ranks). ``preview_of``: the name of the component
    whose settings ``component`` previews another layout of, unchanged. ``files``: where
    the ranks of several emulated nodes read and write files (:func:`files_text`).
    """

    def __init__(
        self,
        component: Component,
        envs: list[dict[str, str]],
        held: bool = False,
        pending: str | None = None,
        preview_of: str | None = None,
        files: str | None = None,
    ):
        self.component = component
        self.envs = envs
        self.held = held
        self.pending = pending
        self.preview_of = preview_of
        self.files = files
        self.view = _with_devices(rank_view(component.launcher_type or "mpi", envs), envs)

    @property
    def caption(self) -> str:
        source = "held by the running ranks" if self.held else "ports chosen when the ranks start"
        parts = [f"{self.component.launcher_type or 'mpi'}: {layout_caption(self.component)}"]
        if self.preview_of:
            parts.append(
                f"a preview: the settings of {self.preview_of} and its ranks are unchanged"
                " (set the layout in its panel or with "
                f"{self.preview_of}.runsettings.resource_layout.configure(...))"
            )
        parts.append(source)
        if self.pending:
            parts.append(self.pending)
        return "; ".join(parts)

    def __repr__(self) -> str:
        return "\n".join(
            [
                plain(self.caption),
                *([plain(self.files)] if self.files else []),
                *text_lines(self.view),
            ]
        )

    def _repr_html_(self) -> str:
        view = self.view
        shared = "".join(
            f"<tr><th>{_breakable(k)}</th><td><code>{escape(v)}</code></td></tr>"
            for k, v in view.shared.items()
        )
        head = "".join(f"<th>{_breakable(h)}</th>" for h in view.header)
        body = "".join(
            "<tr>" + "".join(f"<td><code>{escape(c)}</code></td>" for c in row) + "</tr>"
            for row in view.rows
        )
        parts = [f"<div>{rich(self.caption)}</div>"]
        if self.files:
            parts.append(f"<div>{rich(self.files)}</div>")
        if shared:
            parts.append(
                f"<div>on every rank:</div><table class='distcomp-env-shared'>{shared}</table>"
            )
        if len(view.rows) > 1 or len(view.header) > 3:
            parts.append(f"<table class='distcomp-env-ranks'><tr>{head}</tr>{body}</table>")
        return f"{STYLE}<div class='distcomp-summary distcomp-env'>{''.join(parts)}</div>"
