"""What ``%distcomp submit`` and the panel show of a job: name, status, layout and the Azure
ML studio link."""

from __future__ import annotations

import html
from typing import Any

from ...azureml.submission import job_status


class JobSummary:
    """A submitted job, rendered as text (terminal, logs) and HTML (notebook, with a link)."""

    def __init__(self, job: Any, spec_name: str | None = None):
        self.job = job
        self.spec_name = spec_name
        self.name = job.name
        self.status = job_status(job) or "unknown"
        self.studio_url = getattr(job, "studio_url", None)
        self.experiment = getattr(job, "experiment_name", None)
        resources = getattr(job, "resources", None)
        self.instance_count = getattr(resources, "instance_count", None)
        distribution = getattr(job, "distribution", None)
        self.distribution = getattr(distribution, "type", None)
        self.process_count = getattr(distribution, "process_count_per_instance", None)

    def _rows(self) -> list[tuple[str, str]]:
        rows = [("job", self.name), ("status", self.status)]
        if self.spec_name:
            rows.insert(0, ("component", self.spec_name))
        if self.experiment:
            rows.append(("experiment", self.experiment))
        layout = f"{self.instance_count or 1} node(s)"
        if self.distribution:
            per_node = self.process_count or 1
            layout += f" x {per_node} process(es), {self.distribution} distribution"
        rows.append(("layout", layout))
        rows.append(("studio", self.studio_url or "(no link returned)"))
        return rows

    def text(self) -> str:
        return "\n".join(f"{key:<11} {value}" for key, value in self._rows())

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        printer.text(self.text())

    def _repr_html_(self) -> str:
        cells = []
        for key, value in self._rows():
            shown = html.escape(str(value))
            if key == "studio" and self.studio_url:
                link = html.escape(self.studio_url, quote=True)
                shown = (
                    f'<a href="{link}" target="_blank" rel="noopener">open in Azure ML studio</a>'
                )
            cells.append(f"<tr><th style='text-align:left'>{key}</th><td>{shown}</td></tr>")
        return f"<table class='distcomp-job'>{''.join(cells)}</table>"

    def __repr__(self) -> str:
        return f"<JobSummary {self.name} {self.status}>"
