"""Parameter types and the one check every input value goes through.

A value reaches a component from a spec default, a widget, a ``--input`` flag or an Azure ML
job; each of them calls :func:`coerce_value`, so they accept and refuse the same values.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .. import contracts
from ..errors import SpecError, did_you_mean
from .secrets import masked_repr

if TYPE_CHECKING:
    from .model import Input

#: normalised parameter types
PARAMETER_TYPES = ("string", "integer", "number", "boolean", "enum")
#: how a spec may spell a parameter type (lower case) -> the normalised type (contracts.json,
#: so the JupyterLab extension checks values by the same rules)
PARAM_TYPES = contracts.PARAMETER_TYPES
PARAM_TYPE_NAMES = contracts.PARAMETER_TYPE_NAMES
#: longest single program argument Linux accepts (MAX_ARG_STRLEN, 32 pages), in bytes
MAX_ARGUMENT_BYTES = 131_071
#: widest whole number a value may have: Python refuses to print longer ones
MAX_INT_DIGITS = 4300


def check_argument(name: str, text: str, what: str = "input") -> str:
    """``text`` if it can be one program argument; else a SpecError naming ``name``."""
    if "\x00" in text:
        raise SpecError(
            f"{what} '{name}' contains a NUL character, which no program argument can hold. "
            "Fix: remove it from the value."
        )
    size = len(text.encode("utf-8", "surrogatepass"))
    if size > MAX_ARGUMENT_BYTES:
        raise SpecError(
            f"{what} '{name}' is {size:,} bytes long; one program argument holds at most "
            f"{MAX_ARGUMENT_BYTES:,}. Fix: write the value to a file and pass its path."
        )
    return text


def check_scalar(name: str, value: Any, what: str = "input") -> Any:
    """``value`` unless it is a container or bytes, which no input or output takes."""
    if isinstance(value, (bytes, bytearray, list, tuple, set, frozenset, dict)):
        kind = type(value).__name__
        fix = (
            "decode it first: value.decode()"
            if isinstance(value, (bytes, bytearray))
            else "pass one value (for several, join them into one string yourself)"
        )
        raise SpecError(f"{what} '{name}' takes one value, not a {kind}. Fix: {fix}.")
    return value


def coerce_value(inp: Input, value: Any) -> Any:
    """Check (and, for strings from a command line or a text box, convert) one input value.

    Raises SpecError saying what is wrong and what would be accepted.
    """
    if value is None:
        return value
    value = check_scalar(inp.name, value)
    if inp.is_data:
        if isinstance(value, str):
            check_argument(inp.name, value)
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
        raise SpecError(
            f"input '{inp.name}' is Boolean: use True or False, not {short_repr(value)}."
        )
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
                f"{short_repr(value)} is not a number. Fix: give a value such as {example}."
            ) from None
        if isinstance(number, int) and number.bit_length() > MAX_INT_DIGITS * 3.32:
            raise SpecError(
                f"input '{inp.name}' is a number of more than {MAX_INT_DIGITS:,} digits. "
                "Fix: give a smaller number."
            )
        if inp.min is not None and number < inp.min:
            raise SpecError(f"input '{inp.name}' must be at least {inp.min}, got {number}.")
        if inp.max is not None and number > inp.max:
            raise SpecError(f"input '{inp.name}' must be at most {inp.max}, got {number}.")
        return number
    if kind == "enum":
        text = str(value)
        if inp.enum and text not in inp.enum:
            raise SpecError(
                f"input '{inp.name}' must be one of {', '.join(inp.enum)}; got {short_repr(text)}."
                f"{did_you_mean(text, inp.enum)}"
            )
        return check_argument(inp.name, text)
    return check_argument(inp.name, value if isinstance(value, str) else str(value))


def short_repr(value: Any) -> str:
    """``repr(value)``, credentials masked, cut short for a long value (messages stay
    readable)."""
    if isinstance(value, int) and value.bit_length() > 200:  # Python may refuse to print it
        return f"a number of about {int(value.bit_length() * 0.30103):,} digits"
    text = masked_repr(value)
    return text if len(text) <= 60 else text[:40] + "..."


def _to_int(value: Any) -> int:
    if isinstance(value, float):
        if not value.is_integer():
            raise ValueError(value)
        return int(value)
    return int(str(value).strip())
