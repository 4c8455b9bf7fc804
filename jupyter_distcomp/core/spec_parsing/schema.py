"""The JSON Schema of a spec, and its failures as messages that say what, where and the fix.

The schema file is shipped in the package and bundled by the JupyterLab extension, so the
editor and the kernel check the same rules. A compiled validator (fastjsonschema) passes a
valid spec quickly; jsonschema runs only to explain a failure, listing every error. The
messages are word for word those of labextension/src/diagnostics.ts (tests/data/bad_specs.json
holds them for both sides' tests).
"""

from __future__ import annotations

import functools
import json
import re
import reprlib
import sys
from pathlib import Path
from typing import Any

from ...contracts import COMPONENT_TYPES, LAUNCHERS
from ...errors import SpecError, did_you_mean
from .positions import Context

SCHEMA_PATH = Path(__file__).with_name("component.schema.json")


@functools.lru_cache(maxsize=1)
def schema() -> dict:
    """The JSON Schema of a spec, as shipped in the package."""
    return json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))


@functools.lru_cache(maxsize=1)
def _fast_check():
    """A compiled validator (fastjsonschema) for the common case: a spec that is valid."""
    import fastjsonschema

    return fastjsonschema.compile(schema())


@functools.lru_cache(maxsize=1)
def _validator():
    """jsonschema's validator, used only to explain a failure: it lists every error."""
    _import_jsonschema()
    import jsonschema

    cls = jsonschema.validators.validator_for(schema())
    return cls(schema())


def _import_jsonschema() -> None:
    """Import jsonschema without rfc3987_syntax, which its format checks import when installed
    and which compiles dozens of grammars (seconds) for IRI formats our schema does not use:
    the first error of a spec would otherwise take seconds."""
    if "jsonschema" in sys.modules or "rfc3987_syntax" in sys.modules:
        return
    sys.modules["rfc3987_syntax"] = None  # type: ignore[assignment]  # an ImportError
    try:
        import jsonschema  # noqa: F401
    finally:
        del sys.modules["rfc3987_syntax"]


def kind_of(value: Any) -> str:
    return {list: "list", str: "string", int: "number", float: "number", bool: "boolean"}.get(
        type(value), type(value).__name__
    )


# -- schema ---------------------------------------------------------------------------------
def validate(data: dict, ctx: Context) -> None:
    """Warn about unknown top-level keys; report every schema error to ``ctx``."""
    known = schema()["properties"]
    for key in data:
        if key not in known:
            ctx.warn(f"unknown top-level key, ignored.{did_you_mean(str(key), known)}", (str(key),))
    import fastjsonschema

    try:
        _fast_check()(data)
        return
    except fastjsonschema.JsonSchemaException:
        pass
    for error in _validator().iter_errors(data):
        ctx.report(_describe(error, ctx))


def _describe(error: Any, ctx: Context) -> SpecError:
    """Turn a jsonschema error into a message that says what, where and the fix."""
    path = tuple(error.absolute_path)
    validator = error.validator
    where = ".".join(map(str, path)) or "the spec"
    if validator == "additionalProperties":
        allowed = list(error.schema.get("properties", {}))
        extra = [k for k in error.instance if k not in allowed]
        key = extra[0]
        return ctx.error(
            f"unknown key '{key}' in {where}.{did_you_mean(key, allowed)}"
            f" Allowed keys: {', '.join(allowed)}.",
            (*path, key),
        )
    if validator == "required":
        missing = [k for k in error.validator_value if k not in error.instance]
        key = missing[0]
        example = {"name": "my_component", "type": "DistributedComponent"}.get(key, "...")
        return ctx.error(
            f"missing required key '{key}' in {where}. Fix: add `{key}: {example}`.", path
        )
    if validator == "enum" and path == ("launcher", "type"):
        value = str(error.instance)
        return ctx.error(
            f"unknown launcher type {value!r}.{did_you_mean(value, LAUNCHERS)}"
            f" Allowed: {', '.join(LAUNCHERS)}.",
            path,
            at="value",
        )
    if validator == "enum":
        options = list(dict.fromkeys(str(o).lower() for o in error.validator_value))
        if path[-1:] == ("type",) and "torch.distributed" in options:
            options = [o for o in options if o != "pytorch"]  # suggest the canonical name
        return ctx.error(
            f"{error.instance!r} is not allowed for {where}."
            f"{did_you_mean(str(error.instance), options)} Allowed: {', '.join(options)}.",
            path,
            at="value",
        )
    if validator in ("oneOf", "anyOf"):
        deeper = [e for e in error.context if len(e.absolute_path) > len(path)]
        if deeper:  # the value has the right kind; what is wrong is inside it
            return _describe(max(deeper, key=lambda e: len(e.absolute_path)), ctx)
        kinds = [_SCHEMA_KINDS.get(str(e.schema.get("type")), "") for e in error.context]
        expected = " or ".join(dict.fromkeys(k for k in kinds if k)) or "another kind of value"
        return ctx.error(
            f"{where} must be {expected}, got {got(error.instance)}.", path, at="value"
        )
    if validator == "type":
        expected = error.schema.get("type")
        names = expected if isinstance(expected, list) else [expected]
        expected = " or ".join(_TYPE_NAMES.get(t, _article(t)) for t in names if t != "null")
        return ctx.error(
            f"{where} must be {expected}, got {got(error.instance)}.", path, at="value"
        )
    if validator == "pattern" and path and path[-1] == "type":
        return ctx.error(
            f"unknown component type {error.instance!r}."
            f"{did_you_mean(str(error.instance).split('@')[0], COMPONENT_TYPES)}"
            " Use DistributedComponent (with a launcher), CommandComponent (with a command),"
            " or v2 'command' (with an optional distribution).",
            path,
            at="value",
        )
    if validator == "pattern" and path == ("name",):
        return ctx.error(
            f"name {error.instance!r} may only contain letters, digits and '-', '_', '.'. "
            f"Fix: name: {re.sub(r'[^A-Za-z0-9_.-]+', '_', str(error.instance)) or 'component'}",
            path,
            at="value",
        )
    if validator == "minimum":
        return ctx.error(
            f"{where} must be at least {error.validator_value}, got {got(error.instance)}.",
            path,
            at="value",
        )
    if validator in ("minLength", "minItems"):
        return ctx.error(f"{where} must not be empty.", path, at="value")
    if validator == "pattern":
        hint = error.schema.get("description") or f"match {error.validator_value}"
        return ctx.error(
            f"{where} {_short(error.instance)} is not valid: {hint}.", path, at="value"
        )
    return ctx.error(f"{where}: {_short_message(error)}", path, at="value")


_TYPE_NAMES = {
    "string": "a string",
    "object": "a mapping",
    "array": "a list",
    "number": "a number",
    "integer": "a whole number",
    "boolean": "true or false",
}
_SCHEMA_KINDS = {**_TYPE_NAMES, "array": "a list of strings"}
_REPR = reprlib.Repr()
_REPR.maxstring = _REPR.maxother = 40
_REPR.maxlist = _REPR.maxdict = 4
_REPR.maxlevel = 2


def _article(noun: Any) -> str:
    noun = str(noun)
    return ("an " if noun[:1] in "aeiou" else "a ") + noun


def got(value: Any) -> str:
    """What a wrong value is, as the messages say it: "a string 'x'", "a list", "a number 3"."""
    if value is None:
        return "nothing (null)"
    if isinstance(value, bool):
        return f"a boolean {str(value).lower()}"
    if isinstance(value, (int, float)):
        return f"a number {value}"
    if isinstance(value, str):
        return f"a string {_short(value)}"
    if isinstance(value, list):
        return "a list"
    return "a mapping" if isinstance(value, dict) else _article(type(value).__name__)


def _short(value: Any) -> str:
    """A short repr of ``value``, however large it is (reprlib stops early)."""
    text = _REPR.repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _short_message(error: Any) -> str:
    """jsonschema's message, without a long repr of the value in it."""
    message = str(error.message)
    return message if len(message) <= 200 else f"{_short(error.instance)}: {message[-120:]}"
