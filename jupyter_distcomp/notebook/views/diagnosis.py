"""What ``%distcomp diagnose`` shows: the verdict on top, then each section (tracebacks,
stacks, the launchers' words), the notes and how the verdict was decided; as text in a
terminal or log, as HTML in a notebook (the verdict coloured by how the job ended, each
section's lines as preformatted text); credentials a log printed are masked in both."""

from __future__ import annotations

import html
from typing import Any

from ...core.joblog import Diagnosis
from ...core.joblog.model import COMPLETED, FAILED, HUNG
from ...core.secrets import mask_secrets

_COLOURS = {FAILED: "#b00020", HUNG: "#a15c00", COMPLETED: "#1b5e20"}


class DiagnosisView:
    """A :class:`Diagnosis`, rendered."""

    def __init__(self, diagnosis: Diagnosis, title: str = "") -> None:
        self.diagnosis = diagnosis
        self.title = title

    def text(self) -> str:
        body = self.diagnosis.text()
        return f"{self.title}\n{body}" if self.title else body

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        printer.text(self.text())

    def __repr__(self) -> str:
        return self.text()

    def _repr_html_(self) -> str:
        d = self.diagnosis
        colour = _COLOURS.get(d.outcome, "inherit")
        parts = ["<div class='distcomp-diagnosis'>"]
        if self.title:
            parts.append(f"<div>{html.escape(self.title)}</div>")
        verdict = html.escape(mask_secrets(d.verdict))
        parts.append(f"<p style='color:{colour};font-weight:bold'>{verdict}</p>")
        blocks = [(s.heading, s.lines) for s in d.sections]
        if d.notes:
            blocks.append(("notes", d.notes))
        if d.rules:
            blocks.append(("how this was decided", [f"- {rule}" for rule in d.rules]))
        for heading, lines in blocks:
            summary = html.escape(mask_secrets(heading))
            parts.append(f"<details open><summary>{summary}</summary>")
            body = html.escape(mask_secrets("\n".join(lines)))
            parts.append(f"<pre>{body}</pre></details>")
        parts.append("</div>")
        return "".join(parts)
