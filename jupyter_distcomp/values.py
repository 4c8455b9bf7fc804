"""Parameter types and the one check every input value goes through.

A value reaches a component from a spec default, a widget, a ``--input`` flag or an Azure ML
job; each of them calls :func:`coerce_value`, so they accept and refuse the same values.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from . import contracts
from .errors import SpecError, did_you_mean

if TYPE_CHECKING:
    from .model import Input

#: normalised parameter types
PARAMETER_TYPES = ("string", "integer", "number", "boolean", "enum")
#: how a spec may spell a parameter type (lower case) -> the normalised type (contracts.json,
#: so the JupyterLab extension checks values by the same rules)
PARAM_TYPES = contracts.PARAMETER_TYPES
PARAM_TYPE_NAMES = contracts.PARAMETER_TYPE_NAMES


def coerce_value(inp: Input, value: Any) -> Any:
    """Check (and, for strings from a command line or a text box, convert) one input value.

    Raises SpecError saying what is wrong and what would be accepted.
    """
    if value is None or inp.is_data:
        return value
    kind = inp.param_type
    if kind == "boolean":
        if isinstance(value, bool):
            return value
        text = str(value).strip().lower()
        if text in ("true", "1", "yes"):
            return True
        if text in ("false", "0", "no"):
            return False
        raise SpecError(f"input '{inp.name}' is Boolean: use True or False, not {value!r}.")
    if kind in ("integer", "number"):
        if isinstance(value, bool):
            raise SpecError(f"input '{inp.name}' is {kind}: got a boolean {value!r}.")
        number: int | float
        try:
            if kind == "integer":
                number = value if isinstance(value, int) else _to_int(value)
            else:
                number = value if isinstance(value, (int, float)) else float(str(value).strip())
        except ValueError:
            example = "3" if kind == "integer" else "0.01"
            raise SpecError(
                f"input '{inp.name}' is {'Integer' if kind == 'integer' else 'Float'}: "
                f"{value!r} is not a number. Fix: give a value such as {example}."
            ) from None
        if inp.min is not None and number < inp.min:
            raise SpecError(f"input '{inp.name}' must be at least {inp.min}, got {number}.")
        if inp.max is not None and number > inp.max:
            raise SpecError(f"input '{inp.name}' must be at most {inp.max}, got {number}.")
        return number
    if kind == "enum":
        text = str(value)
        if inp.enum and text not in inp.enum:
            raise SpecError(
                f"input '{inp.name}' must be one of {', '.join(inp.enum)}; got {text!r}."
                f"{did_you_mean(text, inp.enum)}"
            )
        return text
    return value if isinstance(value, str) else str(value)


def _to_int(value: Any) -> int:
    if isinstance(value, float):
        if not value.is_integer():
            raise ValueError(value)
        return int(value)
    return int(str(value).strip())
