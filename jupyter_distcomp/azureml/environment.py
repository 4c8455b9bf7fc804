"""The spec's ``environment:`` section as azure-ai-ml sees it.

A curated or registered name becomes ``azureml:NAME@latest`` (or ``azureml:NAME:VERSION``), sent
as written; a docker image, a Dockerfile build context or conda dependencies become an inline
``Environment``, which azure-ai-ml registers as an anonymous environment on submission. Files the
spec names are checked here, so a missing Dockerfile is our clear error, not the SDK's traceback.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import AzureMLError

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
    """An inline ``docker.base_dockerfile`` becomes a build context in a cache folder."""
    import hashlib
    import tempfile

    from azure.ai.ml.entities import BuildContext

    digest = hashlib.sha256(text.encode()).hexdigest()[:16]
    folder = Path(tempfile.gettempdir()) / "jupyter-distcomp-env" / digest
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "Dockerfile").write_text(text)
    return BuildContext(path=str(folder), dockerfile_path="Dockerfile")
