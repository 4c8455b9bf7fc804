"""The spec's ``environment:`` section as azure-ai-ml sees it.

A curated or registered name becomes ``azureml:NAME@latest`` (or ``azureml:NAME:VERSION``), sent
as written; a docker image, a Dockerfile build context or conda dependencies become an inline
``Environment``, which azure-ai-ml registers as an anonymous environment on submission; an
inline Dockerfile is written into a private folder (never a shared, predictable path). Files the
spec names are checked here, so a missing Dockerfile is our clear error, not the SDK's traceback.
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import AzureMLError
from ..machine import scratch

if TYPE_CHECKING:
    from ..core.model import Component

#: base image for specs that give conda dependencies but no image (Azure ML's own CPU image)
DEFAULT_IMAGE = "mcr.microsoft.com/azureml/openmpi4.1.0-ubuntu22.04:latest"


def _base(component: Component) -> Path:
    return component.base_dir or Path.cwd()


def existing_path(component: Component, relpath: str, what: str) -> Path:
    path = Path(relpath).expanduser()
    path = path if path.is_absolute() else (_base(component) / path).resolve()
    if not path.exists():
        raise AzureMLError(
            f"component '{component.name}': {what} '{relpath}' does not exist (looked for "
            f"{path}). Fix: put the file there, or define the spec from the folder that holds it."
        )
    return path


def base_image_words(handle: str) -> str:
    """What a job of a spec without an environment runs in (``handle``: its name)."""
    return (
        f"'{handle}' names no environment: the job runs in Azure ML's base image "
        f"{DEFAULT_IMAGE}, with no package of yours installed."
    )


#: where a job of a spec without an environment gets one
ENVIRONMENT_FIX = (
    "add an `environment:` section to the spec, e.g. `environment: {name: "
    "AzureML-ACPT-pytorch-2.2-cuda12.1}` (a curated one), or `environment: {image: IMAGE, "
    "conda_file: conda.yml}`"
)


def default_image_note(component: Component) -> str | None:
    """What a job of ``component`` runs in when its spec names no environment, with the fix."""
    if component.environment is not None:
        return None
    return f"{base_image_words(component.name)} Fix: {ENVIRONMENT_FIX}."


def missing_environment(component: Component, handle: str) -> str | None:
    """Why a submission of ``component`` (the notebook's ``handle``) is not made unasked: its
    spec names no environment; the two fixes. None when the spec names one."""
    if component.environment is not None:
        return None
    return (
        f"{base_image_words(handle)} Fix: {ENVIRONMENT_FIX}; or, to submit it in that image all "
        f"the same, `%distcomp submit {handle} --no-environment` (with your other flags)."
    )


def build_environment(component: Component, override: Any = None):
    """The spec's environment as v2 sees it: ``azureml:NAME@latest`` or an Environment."""
    from azure.ai.ml.entities import BuildContext, Environment

    if override is not None:
        return override
    env = component.environment
    if env is None:
        return Environment(image=DEFAULT_IMAGE)
    if env.name:
        return f"azureml:{env.name}:{env.version}" if env.version else f"azureml:{env.name}@latest"
    os_type = "windows" if env.os.lower() == "windows" else "linux"
    if env.dockerfile:
        dockerfile = existing_path(component, env.dockerfile, "environment Dockerfile")
        context = BuildContext(path=str(dockerfile.parent), dockerfile_path=dockerfile.name)
        return Environment(build=context, os_type=os_type)
    if env.base_dockerfile:
        return Environment(build=_inline_dockerfile(env.base_dockerfile), os_type=os_type)
    conda: Any = None
    if env.conda_file:
        conda = str(existing_path(component, env.conda_file, "conda file"))
    elif env.conda_dependencies:
        conda = dict(env.conda_dependencies)
    return Environment(image=env.image or DEFAULT_IMAGE, conda_file=conda, os_type=os_type)


def _inline_dockerfile(text: str):
    """An inline ``docker.base_dockerfile`` becomes a build context in a private folder of
    this kernel (made by mkdtemp, readable by this user only, removed with the kernel)."""
    from azure.ai.ml.entities import BuildContext

    context = _private_contexts.get(text)
    if context is None or not _is_private(context.parent):
        # the context is a folder of its own: the scratch folder's owner file would change
        # the environment's content hash, and Azure ML's cached image with it
        context = Path(scratch.make_folder("distcomp-env-")) / "context"
        context.mkdir(mode=0o700)
        write_private(context / "Dockerfile", text)
        _private_contexts[text] = context
    return BuildContext(path=str(context), dockerfile_path="Dockerfile")


#: Dockerfile text -> the build context made for it by this kernel, in a private folder
_private_contexts: dict[str, Path] = {}


def _is_private(folder: Path) -> bool:
    try:
        info = os.lstat(folder)
    except OSError:
        return False
    return stat.S_ISDIR(info.st_mode) and info.st_uid == os.getuid() and not info.st_mode & 0o077


def inline_context_beside(component: Component, target: Path):
    """For an exported file ``target``: the inline Dockerfile as a build context folder beside
    it (``<stem>-environment/``), so the exported YAML keeps working; None when the spec has no
    inline Dockerfile. An existing folder is reused only when it is a real folder of this user;
    the Dockerfile is replaced, never written through a link."""
    from azure.ai.ml.entities import BuildContext, Environment

    env = component.environment
    if env is None or env.name or env.dockerfile or not env.base_dockerfile:
        return None
    folder = target.parent / f"{target.stem}-environment"
    try:
        folder.mkdir(mode=0o755)
    except FileExistsError:
        info = os.lstat(folder)
        if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid():
            raise AzureMLError(
                f"{folder} exists and is not a folder of yours (a link or another user's), so "
                "the inline Dockerfile is not written there. Fix: remove it, or export to "
                "another file name."
            ) from None
    write_private(folder / "Dockerfile", env.base_dockerfile)
    os_type = "windows" if env.os.lower() == "windows" else "linux"
    return Environment(
        build=BuildContext(path=str(folder), dockerfile_path="Dockerfile"), os_type=os_type
    )


def write_private(path: Path, text: str) -> None:
    """Write ``path`` through a new file renamed over it: a planted link at ``path`` is
    replaced, never followed."""
    handle, partial = tempfile.mkstemp(prefix=".distcomp-", dir=path.parent)
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as stream:
            stream.write(text)
        os.chmod(partial, 0o644)
        os.replace(partial, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(partial)
        raise
