"""Bind a component's inputs and outputs to local values for ``%distcomp command``.

Values come from ``component.runsettings`` (the widget and ``configure`` write there),
overridden for one run by the ``--input`` / ``--output`` flags (which are not stored back).
Parameters are converted by their declared type, so ``--input lr=abc`` on a Float fails
here, naming the input, before any rank starts. Data inputs must be local files or folders
that exist; outputs are local folders, created. Relative paths are relative to the folder
the notebook runs in (not the component's code folder, where the ranks run), and reach
the ranks as absolute paths.

Default output location: ``./outputs/<component name>/<output name>`` under the notebook's
folder, so repeated runs of one component write to the same, predictable place.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import SpecError, did_you_mean

if TYPE_CHECKING:
    from ..model import Component

_REMOTE_PREFIXES = ("azureml:", "http://", "https://", "wasbs://", "abfss://", "adl://", "s3://")


def _check_names(given: dict[str, Any], known: dict[str, Any], kind: str, flag: str) -> None:
    for name in given:
        if name not in known:
            choices = ", ".join(known) or "none"
            raise SpecError(
                f"{flag} {name}=...: the component has no {kind} named {name!r}."
                f"{did_you_mean(name, known)} Its {kind}s: {choices}."
            )


def _as_path_text(value: Any) -> str:
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    path = getattr(value, "path", None)  # an azure.ai.ml Input/Output bound in the settings
    return str(path if path is not None else value)


def _local_path(name: str, value: Any, kind: str, flag: str, cwd: Path) -> Path:
    from ..values import check_argument

    if isinstance(value, (bytes, bytearray, list, tuple, dict)):
        raise SpecError(
            f"{kind} '{name}' is bound to a {type(value).__name__}, not a path. "
            f"Fix: {flag} {name}=PATH"
        )
    text = check_argument(name, _as_path_text(value).strip(), kind)
    if text.startswith("file:") and not text.startswith("file://"):
        text = text[5:]
    if text.lower().startswith(_REMOTE_PREFIXES) or "://" in text:
        raise SpecError(
            f"{kind} '{name}' is bound to {text!r}, which a local run cannot read or write. "
            f"Fix: {flag} {name}=./a/local/path for the local run (Azure ML submission keeps "
            "the remote value)."
        )
    if not text:
        raise SpecError(f"{kind} '{name}' is bound to an empty path. Fix: {flag} {name}=PATH")
    path = Path(text).expanduser()
    return path if path.is_absolute() else (cwd / path).resolve()


def bind_inputs(
    component: Component, overrides: dict[str, Any] | None, cwd: Path
) -> dict[str, Any]:
    """Input name -> value for the template: parameters typed, data inputs absolute paths."""
    from ..values import coerce_value, short_repr

    overrides = dict(overrides or {})
    _check_names(overrides, component.inputs, "input", "--input")
    values = {**component.runsettings.inputs, **overrides}
    bound: dict[str, Any] = {}
    for name, inp in component.inputs.items():
        value = values.get(name)
        if value is None or (isinstance(value, str) and inp.is_data and not value.strip()):
            if not inp.optional and inp.default is None:
                what = "data input" if inp.is_data else "parameter"
                example = "PATH" if inp.is_data else "VALUE"
                raise SpecError(
                    f"{what} '{name}' is required and has no value. "
                    f"Fix: %distcomp command {component.name} --input {name}={example} "
                    f"(or set {name} in the run settings).",
                    line=inp.line,
                    path=f"inputs.{name}",
                )
            continue
        if inp.is_parameter:
            try:
                bound[name] = coerce_value(inp, value)
            except SpecError as exc:
                raise SpecError(
                    f"--input {name}={short_repr(value)}: {exc.message}",
                    line=inp.line,
                    path=f"inputs.{name}",
                ) from None
            continue
        path = _local_path(name, value, "data input", "--input", cwd)
        if not path.exists():
            raise SpecError(
                f"data input '{name}': {_as_path_text(value)!r} does not exist (looked for {path}). "
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
        bound[name] = str(path)
    return bound


def bind_outputs(
    component: Component, overrides: dict[str, Any] | None, cwd: Path
) -> dict[str, str]:
    """Output name -> absolute local path, created (folder outputs) or its folder created."""
    overrides = dict(overrides or {})
    _check_names(overrides, component.outputs, "output", "--output")
    values = {**component.runsettings.outputs, **overrides}
    bound: dict[str, str] = {}
    for name, out in component.outputs.items():
        value = values.get(name)
        if value is None or not _as_path_text(value).strip():
            path = cwd / "outputs" / component.name / name
        else:
            path = _local_path(name, value, "output", "--output", cwd)
        folder = path.parent if out.data_type == "uri_file" else path
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise SpecError(
                f"output '{name}': cannot create the folder {folder}: {exc.strerror}. "
                f"Fix: --output {name}=a/writable/folder",
                line=out.line,
                path=f"outputs.{name}",
            ) from None
        bound[name] = str(path)
    return bound
