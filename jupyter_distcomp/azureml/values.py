"""Input and output values of a job, bound by the rules local runs use (``core/bindings.py``).

Data inputs become ``Input(type=uri_folder|uri_file, path=...)``: a remote value as it is
(azure-ai-ml passes it on), a local path checked here and uploaded by azure-ai-ml on
submission.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..core.bindings import bound, input_values, is_remote, path_text
from ..errors import AzureMLError
from .environment import existing_path

if TYPE_CHECKING:
    from ..core.model import Component


def _is_azure_input(value: Any) -> bool:
    return type(value).__module__.startswith("azure.ai.ml")


def _data_input(component: Component, name: str, value: Any):
    from azure.ai.ml import Input

    if _is_azure_input(value):
        return value
    inp = component.inputs[name]
    text = path_text(value).strip()
    if is_remote(text):
        return Input(type=inp.data_type or "uri_folder", path=text)
    path = existing_path(component, text, f"input '{name}'")
    return Input(type="uri_file" if path.is_file() else "uri_folder", path=str(path))


def job_inputs(component: Component, inputs: dict | None = None) -> dict[str, Any]:
    """The ``inputs=`` of the v2 job: literal parameter values, ``Input`` objects for data."""
    values = input_values(component, inputs)
    return {
        name: _data_input(component, name, value) if component.inputs[name].is_data else value
        for name, value in values.items()
    }


def job_outputs(component: Component, outputs: dict | None = None) -> dict[str, Any]:
    """Outputs typed per the spec; remote values bound in run settings or ``outputs`` become
    their paths.

    Local output folders in ``runsettings.outputs`` are for local runs and are left out here
    (Azure ML picks its default datastore location); an explicit local path is an error.
    """
    from azure.ai.ml import Output

    explicit = dict(outputs or {})
    values = bound(component, explicit, "output")
    result = {}
    for name, out in component.outputs.items():
        value = values.get(name)
        if value is not None and not is_remote(value):
            if name in explicit:
                raise AzureMLError(
                    f"output '{name}': {value!r} is a local path, which a job on Azure ML cannot "
                    "write to. Fix: give a datastore URI such as "
                    "azureml://datastores/workspaceblobstore/paths/out/, or leave it unset."
                )
            value = None
        result[name] = Output(type=out.data_type, path=path_text(value) if value else None)
    return result
