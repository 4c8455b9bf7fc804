"""The command template: one parse, two renderings (a local argv, and Azure ML v2 syntax).

- ``render``: the template rules, both renderings and their checks
- ``words``: literal text split into words as a POSIX shell would
"""

from __future__ import annotations

from .render import (
    Placeholder,
    check_azureml,
    check_template,
    expand_azureml,
    from_azureml,
    placeholders,
    render_command,
    to_azureml,
    undeclared_placeholders,
)

__all__ = [
    "Placeholder",
    "check_azureml",
    "check_template",
    "expand_azureml",
    "from_azureml",
    "placeholders",
    "render_command",
    "to_azureml",
    "undeclared_placeholders",
]
