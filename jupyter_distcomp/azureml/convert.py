"""Component + run settings -> an azure-ai-ml v2 job or component, validated client-side.

The v1.5 spec maps onto a v2 ``command()`` job. The run settings object
(``component.runsettings``) is read at call time, so what the widget or ``configure()`` set is
what gets built; ``resources.instance_count`` is always set explicitly. Parameter defaults are
passed as values, because azure-ai-ml's ``command()`` does not fill them in on a job.

DeepSpeed runs under the PyTorch distribution, as every DeepSpeed job in Azure/azureml-examples
does (``process_count_per_instance`` = processes per node); the local ranks get the same
PyTorch variables. A spec that wants MPI says ``launcher: {type: mpi}``. TensorFlow sends
``worker_count`` (default: the instance count) and ``parameter_server_count``.
"""

from __future__ import annotations

import contextlib
import logging
import re
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..core.layout import MPI_LAUNCHERS, tensorflow_tasks
from ..core.secrets import masked_repr
from ..errors import AzureMLError, AzureMLWarning, DistcompError
from .checks import check_code_folder, outside_package, warn_return_code
from .environment import build_environment
from .values import job_inputs, job_outputs

if TYPE_CHECKING:
    from ..core.model import Component
    from ..core.model import Input as SpecInput

#: tag that keeps the v1.5 name when the v2 name had to be sanitised
ORIGINAL_NAME_TAG = "distcomp_original_name"
_V2_NAME = re.compile(r"^[a-z][a-z0-9_]*$")


@contextlib.contextmanager
def quiet_sdk() -> Iterator[None]:
    """Silence azure-ai-ml's "experimental class" notices, which say nothing to our users."""
    logger = logging.getLogger("azure.ai.ml._utils._experimental")
    disabled = logger.disabled
    logger.disabled = True
    try:
        yield
    finally:
        logger.disabled = disabled


def sanitize_name(name: str) -> str:
    """A v2 component name (lower-case letters, digits, ``_``, starting with a letter)."""
    if _V2_NAME.match(name):
        return name
    cleaned = re.sub(r"[^a-z0-9_]", "_", name.lower()).strip("_")
    cleaned = re.sub(r"_+", "_", cleaned)
    if not cleaned or not cleaned[0].isalpha():
        cleaned = "c_" + cleaned
    return cleaned[:255]


def launcher_distribution(component: Component):
    """The v2 distribution object for the component's launcher and current layout, or None."""
    from azure.ai.ml import MpiDistribution, PyTorchDistribution, TensorFlowDistribution

    layout = component.runsettings.resource_layout
    kind = component.launcher_type
    if kind in MPI_LAUNCHERS:
        return MpiDistribution(process_count_per_instance=layout.process_count_per_node)
    if kind in ("torch.distributed", "deepspeed"):
        return PyTorchDistribution(process_count_per_instance=layout.process_count_per_node)
    if kind == "tensorflow":
        workers, ps = tensorflow_tasks(
            layout.instance_count, layout.worker_count, layout.parameter_server_count
        )
        return TensorFlowDistribution(worker_count=workers, parameter_server_count=ps)
    return None


def _tags(component: Component, sanitized: str, extra: dict | None) -> dict[str, str]:
    tags = {str(k): str(v) for k, v in (component.tags or {}).items()}
    if sanitized != component.name:
        tags[ORIGINAL_NAME_TAG] = component.name
    tags.update({str(k): str(v) for k, v in (extra or {}).items()})
    return tags


def code_folder(component: Component, code: Any = None) -> Path:
    """The job's code folder (``code``, else the spec's), checked: an AzureMLError for one
    that does not exist or that would upload the home folder or the whole disk."""
    path = Path(code).expanduser() if code is not None else component.code_path
    problem = component.code_folder_problem(path)
    if problem:
        raise AzureMLError(f"component '{component.name}': {problem} (or pass code=PATH)")
    check_code_folder(component, path)
    return path.resolve()


def _code(component: Component, code: Any) -> str:
    path = code_folder(component, code)
    warn_return_code(component)
    return str(path)


def to_azureml_job(
    component: Component,
    inputs: dict | None = None,
    outputs: dict | None = None,
    compute: str | None = None,
    code: Any = None,
    experiment_name: str | None = None,
    display_name: str | None = None,
    environment: Any = None,
    *,
    name: str | None = None,
    tags: dict | None = None,
    distribution: Any = None,
    validate: bool = True,
    **kwargs: Any,
):
    """An ``azure.ai.ml.entities.Command`` job for the component and its current run settings.

    ``inputs`` / ``outputs`` override ``component.runsettings``; ``compute`` defaults to
    ``runsettings.compute``; other keyword arguments go to ``azure.ai.ml.command``.
    """
    from azure.ai.ml import command

    sanitized = sanitize_name(component.name)
    layout = component.runsettings.resource_layout
    from ..core.template import to_azureml

    values = job_inputs(component, inputs)
    with quiet_sdk():
        job = command(
            name=name,
            display_name=display_name or component.display_name or component.name,
            description=component.description,
            tags=_tags(component, sanitized, tags),
            experiment_name=experiment_name or sanitized,
            # blocks of unbound inputs are left out: Azure drops them, and azure-ai-ml's
            # check rejects some block forms (`$[[--opt=${{inputs.x}}]]`) when x is unbound
            command=to_azureml(component.command_template, bound=values),
            code=_code(component, code),
            inputs=values,
            outputs=job_outputs(component, outputs),
            environment=build_environment(component, environment),
            environment_variables=dict(component.environment_variables) or None,
            compute=compute or component.runsettings.compute,
            instance_count=layout.instance_count,
            distribution=distribution or launcher_distribution(component),
            **kwargs,
        )
        if validate:
            validate_job(job, component.name)
    warn_if_commands_differ(component, job.command or "", values)
    return job


def warn_if_commands_differ(component: Component, command: str, values: dict[str, Any]) -> None:
    """Warn (AzureMLWarning) when Azure ML would run another argv than the local run.

    Azure ML pastes values into the command unquoted, so the shell on the compute splits a
    value with spaces, drops an empty one and interprets ``;``, ``$``, quotes...; a local run
    passes each value as one argument. Compared here with the template's own expansion of
    Azure's rules, data inputs and outputs standing in as mount paths.
    """
    import shlex
    import warnings

    from ..core.template import expand_azureml, render_command

    data = {n: f"/mnt/azureml/inputs/{n}" for n in values if component.inputs[n].is_data}
    outputs = {n: f"/mnt/azureml/outputs/{n}" for n in component.outputs}
    bound = {**values, **data}
    try:
        local = render_command(component, bound, outputs)
    except DistcompError:  # the local run reports its own problem, with the fix
        return
    try:
        broken = ""
        if expand_azureml(command, bound, outputs) == local:
            return
    except DistcompError:  # Azure's shell cannot even parse the expanded command
        broken = " (there bash stops with a syntax error: the value closes a quote early)"
    risky: list[str | None] = [
        n for n, v in values.items() if n not in data and shlex.quote(str(v)) != str(v)
    ]
    for name in risky or [None]:
        shown = f"input '{name}' = {masked_repr(values[name])}" if name else "the command"
        if name and broken and any(q in str(values[name]) for q in "'\""):
            fix = "remove the quote characters from the value (Azure ML cannot quote it)"
        elif name:
            fix = f'quote it in the template ("{{inputs.{name}}}")'
        else:
            fix = "check the values"
        warnings.warn(
            AzureMLWarning(
                f"'{component.name}': {shown} runs differently on Azure ML{broken}, which "
                "inserts values unquoted (the shell splits spaces, drops empty values and "
                f"interprets ; $ quotes), while a local run passes one argument. Fix: {fix}, "
                "or avoid spaces and shell characters in the value.",
                name,
            ),
            stacklevel=outside_package(),
        )


def to_azureml_component(
    component: Component,
    *,
    name: str | None = None,
    version: str | None = None,
    code: Any = None,
    environment: Any = None,
    tags: dict | None = None,
    validate: bool = True,
):
    """A v2 ``CommandComponent`` with ``distribution`` and ``resources.instance_count``."""
    from azure.ai.ml.entities import CommandComponent, JobResourceConfiguration

    sanitized = name or sanitize_name(component.name)
    with quiet_sdk():
        entity = CommandComponent(
            name=sanitized,
            version=version or component.version or "1",
            display_name=component.display_name or component.name,
            description=component.description,
            tags=_tags(component, sanitized, tags),
            command=component.azureml_command(),
            code=_code(component, code),
            environment=build_environment(component, environment),
            environment_variables=dict(component.environment_variables) or None,
            inputs={n: _component_input(i) for n, i in component.inputs.items()},
            outputs={n: _component_output(o) for n, o in component.outputs.items()},
            distribution=launcher_distribution(component),
            resources=JobResourceConfiguration(
                instance_count=component.runsettings.resource_layout.instance_count
            ),
            is_deterministic=component.is_deterministic
            if component.is_deterministic is not None
            else True,
        )
        if validate:
            _raise_if_failed(entity._validate(), component.name, "component")
    return entity


def _component_input(inp: SpecInput) -> Any:
    from azure.ai.ml import Input

    optional, description = inp.optional or None, inp.description
    if inp.is_data:
        data_type = inp.data_type or "uri_folder"
        return Input(type=data_type, optional=optional, description=description)
    kind = "string" if inp.param_type in ("enum", None) else inp.param_type
    extra: dict[str, Any] = {}
    if inp.enum:
        extra["enum"] = list(inp.enum)
    if kind in ("integer", "number"):
        extra.update(min=inp.min, max=inp.max)
    return Input(
        type=kind, default=inp.default, optional=optional, description=description, **extra
    )


def _component_output(out: Any):
    from azure.ai.ml import Output

    return Output(type=out.data_type, description=out.description)


def validate_job(job: Any, spec_name: str) -> None:
    """azure-ai-ml's own client-side checks: the node's, then the stricter CommandJob's."""
    from azure.ai.ml.exceptions import ValidationException

    _raise_if_failed(job._validate(), spec_name, "job")
    try:
        job._to_job()._validate()
    except ValidationException as exc:
        raise AzureMLError(
            f"azure-ai-ml rejects the job built from '{spec_name}': {exc}. "
            "Fix: check the command template's placeholders and the input values."
        ) from None


def _raise_if_failed(result: Any, spec_name: str, what: str) -> None:
    if result.passed:
        return
    problems = "; ".join(f"{k}: {v}" for k, v in result.error_messages.items())
    raise AzureMLError(f"azure-ai-ml rejects the {what} built from '{spec_name}': {problems}")
