"""What a conversion to Azure ML refuses or warns about, before anything is uploaded.

- ``code:`` naming the filesystem root or the home folder is refused: azure-ai-ml would
  upload all of it as the job's code snapshot.
- ``successful_return_code: ZeroOrGreater`` exists only for v1.5 components: a v2 command job
  fails on any non-zero exit, so the conversion says so.
"""

from __future__ import annotations

import sys
import warnings
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING

from ..errors import AzureMLError, AzureMLWarning

if TYPE_CHECKING:
    from ..core.model import Component


def check_code_folder(component: Component, path: Path) -> None:
    """Refuse a code folder that is ``/``, the home folder or above it (AzureMLError)."""
    resolved = path.expanduser().resolve()
    home = Path.home().resolve()
    if resolved == Path(resolved.anchor) or resolved == home or home.is_relative_to(resolved):
        written = component.code or "(the spec's folder)"
        raise AzureMLError(
            f"component '{component.name}': code: {written} is {resolved}, "
            f"{'the filesystem root' if resolved == Path(resolved.anchor) else 'your home folder'}"
            ". Azure ML uploads the whole code folder with the job, so this would upload all "
            "of it. Fix: set `code:` to the folder that holds only the scripts (e.g. code: "
            "./src)."
        )


def warn_return_code(component: Component) -> None:
    """Warn when the spec accepts non-zero exits, which a v2 command job does not."""
    if (component.successful_return_code or "").lower() != "zeroorgreater":
        return
    warnings.warn(
        AzureMLWarning(
            f"'{component.name}': successful_return_code: ZeroOrGreater applies to v1.5 "
            "components only; the Azure ML v2 job fails on any non-zero exit code. Fix: make "
            "the command exit 0 on success (e.g. append `|| true` to a step whose exit code "
            "does not matter), or remove the key."
        ),
        stacklevel=outside_package(),
    )


def outside_package() -> int:
    """The stacklevel of the first caller outside jupyter_distcomp (the user's cell)."""
    frame: FrameType | None = sys._getframe(2)
    level = 2
    package = __name__.split(".")[0]
    while frame is not None and frame.f_globals.get("__name__", "").startswith(package):
        frame, level = frame.f_back, level + 1
    return level


__all__ = ["check_code_folder", "outside_package", "warn_return_code"]
