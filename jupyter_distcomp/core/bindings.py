"""What a run binds to a component's inputs and outputs: one set of rules for local runs
(``%distcomp command``, the panel's preview) and Azure ML jobs (``azureml/values.py``).

Values come from the spec's defaults < ``component.runsettings`` (the panel and
``runsettings.set_input`` write there) < the call's own (``--input`` / ``--output`` flags,
``inputs=`` from Python), which are not stored back; a call's None unbinds. Parameters go
through :func:`~.values.coerce_value`, so ``--input lr=abc`` on a Float fails here, naming
the input, before any rank starts or anything is uploaded.

A data value is remote when Azure ML reads it where it is (:func:`is_remote`): a job passes
it on, a local run cannot read it. Local paths are relative to the folder the notebook runs
in (not the component's code folder, where the ranks run) and reach the ranks as absolute
paths; an unset output goes to ``./outputs/<component name>/<output name>``, so repeated
runs of one component write to one predictable place.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal
from urllib.parse import urlsplit

from ..errors import SpecError, did_you_mean
from .secrets import mask_secrets, masked_repr
from .values import check_argument, coerce_value, short_repr

if TYPE_CHECKING:
    from .model import Component, Input

#: a registered data asset: ``azureml:name:version`` or ``azureml:name@latest``
ASSET_PREFIX = "azureml:"

Kind = Literal["input", "output"]


def path_text(value: Any) -> str:
    """A bound path as text: a string, an ``os.PathLike``, or an azure.ai.ml Input's path."""
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    path = getattr(value, "path", None)
    return str(path if path is not None else value)


def is_remote(value: Any) -> bool:
    """True for a data value Azure ML reads where it is, which azure-ai-ml passes on without
    uploading: a URL with a scheme and a host (``azureml://``, ``https://``, ``wasbs://``,
    ``abfss://``, ``adl://``, ``s3://``, ...) or a registered data asset (``azureml:data:1``).
    Anything else is a local path (``C:\\data`` and ``file:data`` included)."""
    text = path_text(value).strip()
    if text.lower().startswith(ASSET_PREFIX):
        return True
    try:
        parts = urlsplit(text)
    except ValueError:
        return False
    return bool(parts.scheme and parts.netloc)


def default_output(component_name: str, output: str) -> Path:
    """Where an unset output goes, relative to the notebook's folder."""
    return Path("outputs") / component_name / output


def bound(component: Component, given: Mapping[str, Any] | None, kind: Kind) -> dict[str, Any]:
    """The run settings' inputs (or outputs) with ``given`` over them (None unbinds); a
    SpecError for a name the component does not declare."""
    declared = component.inputs if kind == "input" else component.outputs
    settings = component.runsettings
    values = dict(settings.inputs if kind == "input" else settings.outputs)
    for name, value in (given or {}).items():
        if name not in declared:
            raise SpecError(
                f"component '{component.name}' has no {kind} '{name}'."
                f"{did_you_mean(name, declared)} Its {kind}s: {', '.join(declared) or 'none'}."
            )
        if value is None:
            values.pop(name, None)
        else:
            values[name] = value
    return values


def input_values(component: Component, given: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Input name -> value for every input that has one (spec defaults < run settings <
    ``given``): parameters checked and converted by their type, data values as bound.

    A SpecError names every required input still without a value.
    """
    values = bound(component, given, "input")
    result: dict[str, Any] = {}
    missing = []
    for name, inp in component.inputs.items():
        value = values.get(name)
        if value is None or (inp.is_data and not path_text(value).strip()):
            value = inp.default if inp.is_parameter else None
        if value is None:
            if not inp.optional:
                missing.append(inp)
            continue
        result[name] = _parameter(inp, value) if inp.is_parameter else value
    if missing:
        raise _missing(component, missing)
    return result


def _parameter(inp: Input, value: Any) -> Any:
    try:
        return coerce_value(inp, value)
    except SpecError as exc:
        raise SpecError(
            f"--input {inp.name}={short_repr(value)}: {exc.message}",
            line=inp.line,
            path=f"inputs.{inp.name}",
        ) from None


def _missing(component: Component, missing: list[Input]) -> SpecError:
    described = ", ".join(
        f"{i.name} ({i.param_type or 'data: a local path or an azureml:// URI'})" for i in missing
    )
    first = missing[0]
    return SpecError(
        f"component '{component.name}' needs values for its required inputs: {described}. "
        f"Fix: `--input {first.name}=VALUE`, inputs={{'{first.name}': ...}} from Python, or "
        f"{component.name}.runsettings.set_input('{first.name}', ...).",
        line=first.line,
        path=f"inputs.{first.name}",
    )


def output_values(component: Component) -> dict[str, Any]:
    """Output name -> what the run settings bind, an unset output its default folder (relative
    to the notebook's folder): the outputs a run would write, as the views show them."""
    settings = component.runsettings.outputs
    return {
        name: settings.get(name) or str(default_output(component.name, name))
        for name in component.outputs
    }


# -- a local run: files and folders of this machine -------------------------------------
def local_inputs(
    component: Component, given: Mapping[str, Any] | None, cwd: Path
) -> dict[str, Any]:
    """:func:`input_values` for a local run: each data input an existing file or folder,
    as an absolute path (relative ones start at ``cwd``)."""
    values = input_values(component, given)
    for name, value in values.items():
        inp = component.inputs[name]
        if inp.is_parameter:
            continue
        path = _local_path(name, value, "data input", "--input", cwd)
        if not path.exists():
            raise SpecError(
                f"data input '{name}': {masked_repr(path_text(value))} does not exist (looked "
                f"for {mask_secrets(str(path))}). "
                f"Fix: create it, or bind an existing file or folder with --input {name}=PATH.",
                line=inp.line,
                path=f"inputs.{name}",
            )
        if inp.data_type == "uri_file" and path.is_dir():
            raise SpecError(
                f"data input '{name}' is a file input ({inp.type}) but {path} is a folder. "
                f"Fix: --input {name}=path/to/a/file",
                line=inp.line,
                path=f"inputs.{name}",
            )
        values[name] = str(path)
    return values


def local_outputs(
    component: Component, given: Mapping[str, Any] | None, cwd: Path
) -> dict[str, Path]:
    """Output name -> the absolute local path of every output (unset: the default folder)."""
    values = bound(component, given, "output")
    paths = {}
    for name in component.outputs:
        value = values.get(name)
        if value is None or not path_text(value).strip():
            paths[name] = cwd / default_output(component.name, name)
        else:
            paths[name] = _local_path(name, value, "output", "--output", cwd)
    return paths


def _local_path(name: str, value: Any, kind: str, flag: str, cwd: Path) -> Path:
    if isinstance(value, (bytes, bytearray, list, tuple, dict)):
        raise SpecError(
            f"{kind} '{name}' is bound to a {type(value).__name__}, not a path. "
            f"Fix: {flag} {name}=PATH"
        )
    text = check_argument(name, path_text(value).strip(), kind)
    if text.startswith("file:") and not text.startswith("file://"):
        text = text[5:]
    if is_remote(text) or "://" in text:
        raise SpecError(
            f"{kind} '{name}' is bound to {masked_repr(text)}, which a local run cannot read or "
            "write. "
            f"Fix: {flag} {name}=./a/local/path for the local run (Azure ML submission keeps "
            "the remote value)."
        )
    if not text:
        raise SpecError(f"{kind} '{name}' is bound to an empty path. Fix: {flag} {name}=PATH")
    path = Path(text).expanduser()
    return path if path.is_absolute() else (cwd / path).resolve()


__all__ = [
    "default_output",
    "input_values",
    "is_remote",
    "local_inputs",
    "local_outputs",
    "output_values",
    "path_text",
]
