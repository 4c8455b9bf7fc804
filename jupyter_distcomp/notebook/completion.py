"""Tab in a ``%%distcomp NAME`` cell: the spec's keys where a key goes, and the allowed
values after ``type:`` (launcher types, component types, parameter types).

An IPython matcher (API v2), so it completes in JupyterLab (the kernel answers the
frontend's complete requests through IPython's completer) and in a terminal IPython alike.
The keys come from the spec's JSON Schema (the one the kernel and the editor check with);
the key a line sits under is read from the indentation of the lines above it. In such a
cell it replaces the other matchers, whose offers there are tokens of the cell, not YAML.
"""

from __future__ import annotations

import re
from typing import Any

from ..contracts import COMPONENT_TYPES, LAUNCHERS, PARAMETER_TYPE_NAMES, SUBCOMMANDS

_HEADER = re.compile(r"^\s*%%distcomp\s+(\S+)")
_KEY_LINE = re.compile(r"^(\s*)(?:- )?([$\w.-]+):\s*(?:#.*)?$")
_TYPING_KEY = re.compile(r"^(\s*)(?:- )?([$\w.-]*)$")
_TYPING_VALUE = re.compile(r"^(\s*)(?:- )?([$\w.-]+):\s+([\w.@-]*)$")
MATCHER_ID = "jupyter_distcomp.spec"
#: the type JupyterLab's completer draws beside each offer: one short word, so the label fits
#: the completer's box on one line (two words wrapped and were drawn over each other)
OFFER_TYPE = "spec"


def _resolve(node: Any, root: dict) -> dict:
    """``node`` with its ``$ref`` followed, the object of an ``anyOf``/``oneOf`` taken."""
    while isinstance(node, dict):
        if "$ref" in node:
            node = root["definitions"][node["$ref"].rsplit("/", 1)[1]]
            continue
        for choice in ("anyOf", "oneOf"):
            objects = [n for n in node.get(choice, ()) if _resolve(n, root).get("properties")]
            if objects:
                node = objects[0]
                break
        else:
            return node
    return {}


def _parents(lines: list[str], indent: int) -> list[str]:
    """The keys a line indented by ``indent`` under ``lines`` sits under, outermost first."""
    path: list[str] = []
    for line in reversed(lines):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        own = len(line) - len(line.lstrip())
        if own >= indent:
            continue
        match = _KEY_LINE.match(line)
        if match:  # `key:` opening a mapping
            path.insert(0, match[2])
        indent = own
        if indent == 0:
            break
    return path


def _node_at(path: list[str], schema: dict) -> dict:
    node = schema
    for key in path:
        props = node.get("properties", {})
        if key in props:
            node = _resolve(props[key], schema)
        elif isinstance(node.get("additionalProperties"), dict):  # a name of the user's own
            node = _resolve(node["additionalProperties"], schema)
        else:
            return {}
    return node


def _values(path: list[str], key: str) -> tuple[str, ...]:
    """The values offered after ``key:`` at ``path``."""
    if key != "type":
        return ()
    if path == ["launcher"]:
        return LAUNCHERS
    if not path:
        return COMPONENT_TYPES
    if path[0] in ("inputs", "outputs") and len(path) == 2:
        return (*PARAMETER_TYPE_NAMES, "path", "uri_folder", "uri_file", "mltable")
    return ()


def spec_completions(cell: str, line: int, column: int) -> tuple[str, list[str]] | None:
    """``(the text typed, completions)`` at ``line``/``column`` of a ``%%distcomp NAME``
    cell; None where it is no spec (another cell, a subcommand, the first line)."""
    from ..core.spec_parsing.schema import schema

    lines = cell.split("\n")
    header = _HEADER.match(lines[0]) if lines else None
    if header is None or header[1] in SUBCOMMANDS or line < 1 or line >= len(lines):
        return None
    before = lines[line][:column]
    root = schema()
    value = _TYPING_VALUE.match(before)
    if value:
        path = _parents(lines[:line], len(value[1]))
        offered = _values(path, value[2])
        return value[3], [v for v in dict.fromkeys(offered) if v.startswith(value[3])]
    key = _TYPING_KEY.match(before)
    if key is None:
        return None
    path = _parents(lines[:line], len(key[1]))
    props = _node_at(path, root).get("properties", {}) if path or key[1] == "" else {}
    return key[2], [k for k in props if k.startswith(key[2])]


def spec_matcher(context: Any) -> dict:
    """IPython's matcher (API v2) for ``%%distcomp NAME`` cells."""
    from IPython.core.completer import SimpleCompletion

    found = spec_completions(context.full_text, context.cursor_line, context.cursor_position)
    if found is None:
        return {"completions": []}
    typed, offered = found
    return {
        "completions": [SimpleCompletion(text, type=OFFER_TYPE) for text in offered],
        "matched_fragment": typed,
        "suppress": True,
    }


spec_matcher.matcher_api_version = 2  # type: ignore[attr-defined]
spec_matcher.matcher_identifier = MATCHER_ID  # type: ignore[attr-defined]
spec_matcher.matcher_priority = 100  # type: ignore[attr-defined]


def in_spec_body(cell: str, offset: int) -> bool:
    """Whether character ``offset`` of ``cell`` is in the spec of a ``%%distcomp NAME``
    cell (after its first line)."""
    header = _HEADER.match(cell)
    return header is not None and header[1] not in SUBCOMMANDS and "\n" in cell[:offset]


def _spec_only(completions: Any) -> Any:
    """``completer.completions`` that offers nothing of Python's in a spec: where the spec
    has nothing to offer (a value of the user's own), IPython's matchers would offer the
    names of the kernel's namespace (a matcher suppresses the others only when it offers
    something)."""

    def spec_completions_only(text: str, offset: int) -> Any:
        if in_spec_body(text, offset):
            return (c for c in completions(text, offset) if c.type == OFFER_TYPE)
        return completions(text, offset)

    spec_completions_only.distcomp_wraps = completions  # type: ignore[attr-defined]
    return spec_completions_only


def install(shell: Any) -> None:
    """Add the matcher to ``shell``'s completer (once)."""
    completer = getattr(shell, "Completer", None)
    if completer is not None and spec_matcher not in completer.custom_matchers:
        completer.custom_matchers.append(spec_matcher)
        completer.completions = _spec_only(completer.completions)


def uninstall(shell: Any) -> None:
    completer = getattr(shell, "Completer", None)
    if completer is not None and spec_matcher in completer.custom_matchers:
        completer.custom_matchers.remove(spec_matcher)
        wrapped = getattr(completer.completions, "distcomp_wraps", None)
        if wrapped is not None:
            completer.completions = wrapped
