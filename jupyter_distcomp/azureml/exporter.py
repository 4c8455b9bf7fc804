"""Write the v2 job (or component) as YAML that ``az ml job create -f`` and ``load_job`` accept.

azure-ai-ml's own ``dump`` writes the YAML (``CommandJob``, not the ``Command`` node, whose dump
``load_job`` rejects). Local paths (code folder, data inputs, build context) are written
relative to the YAML file, so the file keeps working when the folder is moved or committed; an
inline Dockerfile is written beside it, in ``<stem>-environment/``.
The file holds no credential: the client and its token never reach these objects, and a value
that holds one (a SAS URL) is refused with the fix.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from ..core.bindings import bound, input_values, path_text
from ..core.secrets import has_secret, is_secret_name, mask_secrets
from ..errors import AzureMLError
from .convert import quiet_sdk, to_azureml_component, to_azureml_job
from .environment import inline_context_beside

if TYPE_CHECKING:
    from ..core.model import Component


def _remote(path: str) -> str:
    """A URL as Azure ML reads it: azure-ai-ml dumps ``https://...`` (any URL but
    ``azureml://``) as ``azureml:https://...``, which names no asset; written as it is."""
    rest = path[len("azureml:") :]
    if path.startswith("azureml:") and "://" in rest and not rest.startswith("//"):
        return rest
    return path


def _relative(path: Any, folder: Path) -> Any:
    if isinstance(path, str):
        path = _remote(path)
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
    for value in [*(data.get("inputs") or {}).values(), *(data.get("outputs") or {}).values()]:
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


def _refuse_credentials(
    component: Component, inputs: Any, outputs: Any, *, with_values: bool
) -> None:
    """An AzureMLError naming the first value that holds a credential (a SAS signature, a
    password): an exported file gets shared and committed, so it never holds one."""
    for name in component.environment_variables:
        if is_secret_name(name):
            raise AzureMLError(
                f"environment variable {name} is named as a credential, and an exported file "
                "would keep its value in clear for everyone who reads it; nothing was written. "
                f"Fix: drop {name} from the spec's environment_variables and have the script "
                "read it from an Azure Key Vault (the workspace's; azure-keyvault-secrets) or "
                "from a workspace connection; `%distcomp submit` can still send it as it is."
            )
    given = bound(component, inputs, "input") if with_values else {}
    for name, inp in component.inputs.items():
        if is_secret_name(name) and (inp.default not in (None, "") or given.get(name)):
            raise AzureMLError(
                f"input '{name}' is named as a credential, and an exported file would keep "
                "its value in clear for everyone who reads it; nothing was written. Fix: drop "
                f"its default and its run-settings value, and have the script read it from an "
                "Azure Key Vault (the workspace's; azure-keyvault-secrets) or from a workspace "
                "connection; `%distcomp submit` can still send it as it is."
            )
    values = {f"environment variable {n}": v for n, v in component.environment_variables.items()}
    if with_values:
        values.update({f"input '{n}'": v for n, v in bound(component, inputs, "input").items()})
        values.update({f"output '{n}'": v for n, v in bound(component, outputs, "output").items()})
    for what, value in values.items():
        text = path_text(value) if not isinstance(value, (int, float)) else ""
        if has_secret(text):
            raise AzureMLError(
                f"{what} holds a credential ({mask_secrets(text)}), which an exported file "
                "would keep in clear for everyone who reads it; nothing was written. Fix: give "
                "a datastore URI (azureml://datastores/NAME/paths/...; register the storage "
                "as a datastore once, with its credential) or a data asset (azureml:NAME:"
                "VERSION); `%distcomp submit` can still send this value as it is."
            )


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
    ``to_azureml_component``). The folder is created if needed; an existing file is replaced;
    a link at ``path`` is refused (writing through it would change the file it points to).
    """
    given = target = Path(path).expanduser()
    if target.is_symlink():
        raise AzureMLError(
            f"{target} is a link (to {os.readlink(target)}): export writes a file of its "
            "own, and writing through the link would replace what it points to; nothing was "
            "written. Fix: give a file name that is not a link, or remove the link."
        )
    if target.is_dir():
        raise AzureMLError(
            f"{target} is a folder. Fix: give a file name such as {target / 'job.yml'}."
        )
    if target.suffix.lower() not in (".yml", ".yaml"):
        raise AzureMLError(
            f"{target}: Azure ML reads YAML; give the file a .yml or .yaml suffix "
            f"(for example {target.with_suffix('.yml')})."
        )
    target = target.parent.resolve() / target.name  # a link in the folders' path is followed
    if component_form and (inputs or outputs or compute):
        raise AzureMLError(
            "a component has no input values, outputs or compute target (a job does). "
            "Fix: drop --input/--output/--compute, or export a job (without --component)."
        )
    _refuse_credentials(component, inputs, outputs, with_values=not component_form)
    with _writing(given):
        target.parent.mkdir(parents=True, exist_ok=True)
        if kwargs.get("environment") is None:
            kwargs["environment"] = inline_context_beside(component, target)
    if component_form:
        entity = to_azureml_component(component, **kwargs)
    else:
        node = to_azureml_job(component, inputs=inputs, outputs=outputs, compute=compute, **kwargs)
        entity = node._to_job()
    with quiet_sdk():
        data = json.loads(json.dumps(entity._to_dict()))  # plain dicts for safe_dump
    if not component_form:
        _restore_booleans(data, input_values(component, inputs))
    text = yaml.safe_dump(_relativize(data, target.parent), sort_keys=False, allow_unicode=True)
    # the file is its owner's alone (0600), as a job file may name private storage; a link
    # put there meanwhile is not followed
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0)
    with _writing(given):
        descriptor = os.open(target, flags, 0o600)
        os.fchmod(descriptor, 0o600)  # a file that was there keeps its mode through O_CREAT
        with open(descriptor, "w", encoding="utf-8") as handle:
            handle.write(text)
    return target


@contextlib.contextmanager
def _writing(path: Path) -> Iterator[None]:
    """An OSError while writing ``path`` (or the folder and files beside it) as an
    AzureMLError that says what the system said and the fix."""
    try:
        yield
    except OSError as exc:
        where = f" ({exc.filename})" if exc.filename and str(exc.filename) != str(path) else ""
        raise AzureMLError(
            f"cannot write {path}: {exc.strerror or exc}{where}; nothing usable was written. "
            "Fix: give a path in a folder you can write to."
        ) from None
