"""YAML text -> :class:`~jupyter_distcomp.core.model.Component`, or a SpecError that points at
the line.

- ``loader``: builds the model from the parsed YAML
- ``schema``: checks the shipped JSON Schema and explains its failures
- ``positions``: remembers where every key and value is in the text
"""

from __future__ import annotations

from .loader import carry_over_settings, load_component
from .schema import SCHEMA_PATH, schema

__all__ = ["SCHEMA_PATH", "carry_over_settings", "load_component", "schema"]
