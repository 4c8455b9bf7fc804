"""Write the v2 job (or component) as YAML that ``az ml job create -f`` and ``load_job`` accept.

azure-ai-ml's own ``dump`` writes the YAML (``CommandJob``, not the ``Command`` node, whose dump
``load_job`` rejects). Local paths (code folder, data inputs, build context) are written
relative to the YAML file, so the file keeps working when the folder is moved or committed; an
inline Dockerfile is written beside it, in ``<stem>-environment/``.
The file holds no credential: the client, its token and SAS URIs never reach these objects.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from ..core.bindings import input_values
from ..errors import AzureMLError
from .convert import quiet_sdk, to_azureml_component, to_azureml_job
from .environment import inline_context_beside

if TYPE_CHECKING:
    from ..core.model import Component


def _relative(path: Any, folder: Path) -> Any:
    if not isinstance(path, str) or "://" in path or path.startswith("azureml:"):
        return path
    if not os.path.isabs(path):
        return path
    try:
        return os.path.relpath(path, folder)
    except ValueError:  # another drive on Windows
        return path


def _relativize(data: dict, folder: Path) -> dict:
    """Local paths in the dumped YAML, made relative to the YAML's folder; empty sections go."""
    for key in [k for k, v in data.items() if v == {}]:
        del data[key]
    if isinstance(data.get("resources"), dict) and data["resources"].get("properties") == {}:
        del data["resources"]["properties"]
    if "code" in data:
        data["code"] = _relative(data["code"], folder)
    for value in (data.get("inputs") or {}).values():
        if isinstance(value, dict) and "path" in value:
            value["path"] = _relative(value["path"], folder)
    environment = data.get("environment")
    if isinstance(environment, dict):
        if environment.get("name") == "CliV2AnonymousEnvironment":
            # the SDK names anonymous environments by a hash of their content; let it redo that
            for key in ("name", "version", "tags"):
                environment.pop(key, None)
        build = environment.get("build")
        if isinstance(build, dict) and "path" in build:
            build["path"] = _relative(build["path"], folder)
        if isinstance(environment.get("conda_file"), str):
            environment["conda_file"] = _relative(environment["conda_file"], folder)
    return data


def _restore_booleans(data: dict, values: dict) -> None:
    """azure-ai-ml 1.35 dumps a boolean job input as 1/0, which a re-load sends as "1"/"0"
    instead of "True"/"False": write the booleans back as YAML booleans."""
    inputs = data.get("inputs") or {}
    for name, value in values.items():
        if isinstance(value, bool) and name in inputs:
            inputs[name] = value


def export(
    component: Component,
    path: Any,
    *,
    component_form: bool = False,
    inputs: dict | None = None,
    outputs: dict | None = None,
    compute: str | None = None,
    **kwargs: Any,
) -> Path:
    """Write ``component`` as a v2 job YAML (or, with ``component_form``, a component YAML).

    Returns the path written. Extra keyword arguments go to :func:`to_azureml_job` (or
    ``to_azureml_component``). The folder is created if needed; an existing file is replaced.
    """
    target = Path(path).expanduser()
    if target.is_dir():
        raise AzureMLError(
            f"{target} is a folder. Fix: give a file name such as {target / 'job.yml'}."
        )
    if target.suffix.lower() not in (".yml", ".yaml"):
        raise AzureMLError(
            f"{target}: Azure ML reads YAML; give the file a .yml or .yaml suffix "
            f"(for example {target.with_suffix('.yml')})."
        )
    target = target.resolve()
    target.parent.mkdir(parents=True, exist_ok=True)
    if kwargs.get("environment") is None:
        kwargs["environment"] = inline_context_beside(component, target)
    if component_form:
        if inputs or outputs or compute:
            raise AzureMLError(
                "a component has no input values, outputs or compute target (a job does). "
                "Fix: drop --input/--output/--compute, or export a job (without --component)."
            )
        entity = to_azureml_component(component, **kwargs)
    else:
        node = to_azureml_job(component, inputs=inputs, outputs=outputs, compute=compute, **kwargs)
        entity = node._to_job()
    with quiet_sdk():
        data = json.loads(json.dumps(entity._to_dict()))  # plain dicts for safe_dump
    if not component_form:
        _restore_booleans(data, input_values(component, inputs))
    text = yaml.safe_dump(_relativize(data, target.parent), sort_keys=False, allow_unicode=True)
    target.write_text(text, encoding="utf-8")
    return target
