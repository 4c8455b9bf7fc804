"""The stand-in of Azure ML for the tests: the package's :mod:`jupyter_distcomp.standin`,
here with scripted job statuses (jobs are not run unless a test passes ``statuses=None``),
and the public specs prepared for submission.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from jupyter_distcomp.standin import *  # noqa: F403  (the names the tests import from here)
from jupyter_distcomp.standin import AzureStandIn as _StandIn

SCRIPTED = ("Queued", "Running", "Completed")


class AzureStandIn(_StandIn):
    """The stand-in whose job GETs answer ``statuses`` in turn (default: queued, running,
    completed), without running the job; ``statuses=None`` runs it."""

    def __init__(self, *args: Any, statuses: tuple[str, ...] | None = SCRIPTED, **kwargs: Any):
        super().__init__(*args, statuses=statuses, **kwargs)


@contextlib.contextmanager
def session_on(ip: Any, standin: _StandIn) -> Iterator[Any]:
    """The shell ``ip`` with its session pointed at ``standin`` and following jobs every
    0.2-0.5 s; its settings as they were afterwards."""
    settings = ip.magics_manager.registry["DistCompMagics"].session.azureml
    saved = {k: getattr(settings, k) for k in ("follow_poll", "follow_poll_max")}
    for key, value in standin.session_settings().items():
        setattr(settings, key, value)
    settings.follow_poll, settings.follow_poll_max = 0.2, 0.5
    try:
        yield ip
    finally:
        for key, value in saved.items():
            setattr(settings, key, value)
        for key in ("credential", "subscription_id", "resource_group", "workspace_name"):
            setattr(settings, key, None)
        settings.client_kwargs = {}


# -- specs for the Azure tests ----------------------------------------------------------------
def prepare_spec(spec: Any, folder: Any):
    """Copy a public spec into ``folder`` with the files it names (Dockerfile, conda file, a
    script), as they sit beside the spec in its own repository; return the loaded Component."""
    import shutil
    from pathlib import Path

    from jupyter_distcomp import load_component

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copy(spec, folder / "spec.yaml")
    (folder / "train.py").write_text("print('hello from rank')\n")
    component = load_component(folder / "spec.yaml")
    env = component.environment
    if env is not None and env.dockerfile:
        (folder / env.dockerfile).write_text(
            "FROM mcr.microsoft.com/azureml/openmpi4.1.0-ubuntu22.04\n"
        )
    if env is not None and env.conda_file:
        (folder / env.conda_file).write_text("name: env\ndependencies:\n  - python=3.10\n")
    return component


def required_values(
    component: Any, data_uri: str = "azureml://datastores/workspaceblobstore/paths/in/"
):
    """A value for every required input without a default (a URI for data inputs)."""
    values = {}
    for name, inp in component.inputs.items():
        if inp.optional or inp.default is not None:
            continue
        values[name] = data_uri if inp.is_data else example_value(inp)
    return values


def example_value(inp: Any) -> Any:
    if inp.param_type == "enum":
        return inp.enum[-1]
    if inp.param_type == "integer":
        return int(inp.min) + 1 if inp.min is not None else 3
    if inp.param_type == "number":
        return 0.25
    if inp.param_type == "boolean":
        return True
    return f"{inp.name}-value"
