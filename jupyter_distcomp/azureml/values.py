"""Input and output values of a job: spec defaults < run settings < call arguments.

Parameter values are checked against their spec type (the same check as local runs); data
inputs become ``Input(type=uri_folder|uri_file, path=...)`` from a URI (``azureml:``,
``azureml://``, ``https://``, ...) or a local path, which azure-ai-ml uploads on submission.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from ..errors import AzureMLError, did_you_mean
from ..values import coerce_value
from .environment import existing_path

if TYPE_CHECKING:
    from ..model import Component

URI = re.compile(r"^(azureml:|https?://|abfss?://|wasbs?://|adl://)", re.IGNORECASE)


def input_values(component: Component, inputs: dict | None = None) -> dict[str, Any]:
    """Spec defaults < ``runsettings.inputs`` < ``inputs``; each value checked against its type.

    A value of None in ``inputs`` unbinds that input. Raises AzureMLError naming every
    required input still without a value.
    """
    given = dict(component.runsettings.inputs)
    for name, value in (inputs or {}).items():
        if name not in component.inputs:
            raise AzureMLError(
                f"component '{component.name}' has no input '{name}'."
                f"{did_you_mean(name, component.inputs)} Inputs: {', '.join(component.inputs)}."
            )
        if value is None:
            given.pop(name, None)
        else:
            given[name] = value
    values: dict[str, Any] = {}
    missing = []
    for name, inp in component.inputs.items():
        value = given.get(name, inp.default if inp.is_parameter else None)
        if value is None:
            if not inp.optional:
                missing.append(inp)
            continue
        values[name] = value if _is_azure_input(value) else coerce_value(inp, value)
    if missing:
        described = ", ".join(
            f"{i.name} ({i.param_type or 'data: a local path or an azureml:// URI'})"
            for i in missing
        )
        example = missing[0].name
        raise AzureMLError(
            f"component '{component.name}' needs values for its required inputs: {described}. "
            f"Fix: pass inputs={{'{example}': ...}}, `--input {example}=VALUE`, or set "
            f"{component.name}.runsettings.inputs."
        )
    return values


def _is_azure_input(value: Any) -> bool:
    return type(value).__module__.startswith("azure.ai.ml")


def _data_input(component: Component, name: str, value: Any):
    from azure.ai.ml import Input

    if _is_azure_input(value):
        return value
    inp = component.inputs[name]
    text = str(value)
    if URI.match(text):
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
    """Outputs typed per the spec; URIs bound in run settings or ``outputs`` become paths.

    Local output folders in ``runsettings.outputs`` are for local runs and are left out here
    (Azure ML picks its default datastore location); an explicit local path is an error.
    """
    from azure.ai.ml import Output

    explicit = dict(outputs or {})
    for name in explicit:
        if name not in component.outputs:
            raise AzureMLError(
                f"component '{component.name}' has no output '{name}'."
                f"{did_you_mean(name, component.outputs)} Outputs: {', '.join(component.outputs)}."
            )
    result = {}
    for name, out in component.outputs.items():
        value = explicit.get(name, component.runsettings.outputs.get(name))
        if value is not None and not URI.match(str(value)):
            if name in explicit:
                raise AzureMLError(
                    f"output '{name}': {value!r} is a local path, which a job on Azure ML cannot "
                    "write to. Fix: give a datastore URI such as "
                    "azureml://datastores/workspaceblobstore/paths/out/, or leave it unset."
                )
            value = None
        result[name] = Output(type=out.data_type, path=str(value) if value else None)
    return result
