"""What JupyterLab's Variables panel shows of a value on a stopped rank: its line (the value's
text and type) and, once expanded, its children, with values, as a plain cell under debugpy
shows them.

JupyterLab's tree draws a variable's value only for the types ``int``, ``float``, ``bool``
and ``str`` (any other type is drawn as its type's name), so the elements of a tensor or an
array are their Python numbers (``tolist()`` / ``item()``): expanding ``t`` shows ``[1]: 2.0``,
never ``Tensor``. An array lists its shape, dtype, device, min and max (min and max only up to
:data:`MIN_MAX_ELEMENTS` elements, debugpy's bound), then its elements or rows; its other
attributes are one group, read only when expanded. A container lists its items. At most
:data:`CHILDREN` children of one value are listed (debugpy's bound too); a line says how many
more there are.

Shipped to each engine as source beside ``dap_side`` (module ``distcomp_dap_values``);
standard library only.
"""

from __future__ import annotations

import reprlib
import warnings
from typing import Any

#: globals a user did not make (IPython's), hidden from the Variables panel
HIDDEN = {"In", "Out", "exit", "quit", "get_ipython", "open"}
VALUE_CHARS = 200
CHILDREN = 300  # the most children listed of one value
#: the most elements of an array whose min and max are computed (debugpy's bound)
MIN_MAX_ELEMENTS = 1 << 20
#: values shown whole, with nothing to expand (as debugpy shows them)
PLAIN = (str, bytes, bytearray, int, float, complex, bool, type(None))
#: the summary of an array, before its elements
SUMMARY = ("shape", "dtype", "device")

_repr = reprlib.Repr()
_repr.maxstring = VALUE_CHARS
_repr.maxother = VALUE_CHARS


class Space:
    """A frame's namespace, listed as the user's variables."""

    def __init__(self, names: dict):
        self.names = names


class Attributes:
    """The data attributes of an array beyond its summary (``grad``, ``T``, ...), one group."""

    def __init__(self, value: Any):
        self.value = value


class Note:
    """A line of the tree that is no value: how many children are not listed."""

    def __init__(self, text: str):
        self.text = text


def expands(value: Any) -> bool:
    """Whether ``value`` gets children (every value but a plain one, a module or a note)."""
    return not isinstance(value, (*PLAIN, Note)) and type(value).__name__ != "module"


def line(name: str, value: Any) -> dict:
    """The tree's line of ``value``: ``name``, ``value`` (its text), ``type`` (None for a
    note: JupyterLab then draws its text) and, for a string, the hint to draw it unquoted."""
    if isinstance(value, Note):
        return {"name": name, "value": value.text, "type": None}
    if isinstance(value, Attributes):
        return {"name": name, "value": "", "type": ""}
    try:
        text = _repr.repr(value)
    except BaseException as exc:  # a user's __repr__ that fails, exits or is interrupted
        if isinstance(exc, KeyboardInterrupt):
            raise
        text = f"<repr failed: {type(exc).__name__}>"
    found = {"name": name, "value": text, "type": type(value).__name__}
    if isinstance(value, str):
        found["hint"] = "rawString"
    return found


def children(value: Any) -> list[tuple[str, Any]]:
    """The children of ``value``, in the order the tree lists them."""
    if isinstance(value, Space):
        return [
            (k, v)
            for k, v in value.names.items()
            if not k.startswith("_") and k not in HIDDEN and type(v).__name__ != "module"
        ]
    if isinstance(value, Attributes):
        return attributes(value.value, skip=SUMMARY)
    if isinstance(value, dict):
        return _bounded([(repr(k), v) for k, v in list(value.items())[: CHILDREN + 1]], len(value))
    if isinstance(value, (list, tuple)):
        return _bounded(list(enumerate(value[: CHILDREN + 1])), len(value))
    if isinstance(value, (set, frozenset)):
        return _bounded(list(enumerate(list(value)[: CHILDREN + 1])), len(value))
    shape = array_shape(value)
    if shape is not None:
        return _array(value, shape)
    return attributes(value) + _items(value)


def _bounded(found: list[tuple[Any, Any]], total: int) -> list[tuple[str, Any]]:
    """The first :data:`CHILDREN` of ``total``, and a note of the rest."""
    return [(str(k), v) for k, v in found[:CHILDREN]] + _more(total, CHILDREN)


def _more(total: int, shown: int) -> list[tuple[str, Any]]:
    """The line that says how many of ``total`` children are not listed (none: all are)."""
    if total <= shown:
        return []
    return [("...", Note(f"{total - shown:,} more of {total:,} (the first {shown} shown)"))]


def array_shape(value: Any) -> tuple[int, ...] | None:
    """The shape of a tensor or an array (torch, numpy, anything with ``shape``, ``dtype``
    and ``tolist``); None for any other value."""
    if isinstance(value, type):
        return None
    try:
        shape = getattr(value, "shape", None)
        if not isinstance(shape, tuple) or not hasattr(value, "dtype"):
            return None
        if not callable(getattr(value, "tolist", None)):
            return None
        return tuple(int(n) for n in shape)
    except Exception:
        return None


def _number(value: Any) -> Any:
    """A 0-d tensor or array (or a numpy scalar) as its Python number; else ``value``."""
    if array_shape(value) == ():
        try:
            item = value.item()
        except Exception:
            return value
        if isinstance(item, PLAIN):
            return item
    return value


def _array(value: Any, shape: tuple[int, ...]) -> list[tuple[str, Any]]:
    """An array's summary, then its elements (numbers) or rows, then its other attributes."""
    found = attributes(value, only=SUMMARY)
    size = 1
    for n in shape:
        size *= n
    if not shape:
        found.insert(0, ("value", _number(value)))
    elif 0 < size <= MIN_MAX_ELEMENTS:
        for name in ("min", "max"):
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    extreme = _number(getattr(value, name)())
            except Exception:  # not numbers (strings, objects), or complex
                continue
            if isinstance(extreme, PLAIN):
                found.append((name, extreme))
    elif size > MIN_MAX_ELEMENTS:
        found.append(("min, max", Note(f"not computed for {size:,} elements (debugpy's bound)")))
    if shape:
        count = min(shape[0], CHILDREN)
        try:
            rows: list[Any] = (
                list(value[:count].tolist())
                if len(shape) == 1
                else [value[i] for i in range(count)]
            )
        except Exception:  # an array that cannot be sliced so
            rows = []
        found += [(f"[{i}]", _number(row)) for i, row in enumerate(rows)]
        found += _more(shape[0], count) if rows else []
    found.append(("attributes", Attributes(value)))
    return found


def attributes(
    value: Any, only: tuple[str, ...] = (), skip: tuple[str, ...] = ()
) -> list[tuple[str, Any]]:
    """The public data attributes of ``value`` (a tensor's ``shape``, ``dtype``, ``grad``,
    ...), not its methods; one that raises when read is left out. ``only``: those names, in
    that order; ``skip``: all but those."""
    found: list[tuple[str, Any]] = []
    try:
        names = list(only) if only else sorted(dir(value))
    except Exception:
        return found
    for name in names:
        if name.startswith("_") or name in skip or len(found) >= CHILDREN:
            continue
        try:
            with warnings.catch_warnings():  # a tensor's .grad or .T warns when read
                warnings.simplefilter("ignore")
                attribute = getattr(value, name)
        except Exception:
            continue
        if callable(attribute) or type(attribute).__name__ == "module":
            continue
        found.append((name, attribute))
    return found


def _items(value: Any) -> list[tuple[str, Any]]:
    """The first elements of a sized, indexable value as ``[0]``, ``[1]``, ...; none for a
    value that is not one."""
    if not (hasattr(value, "__len__") and hasattr(value, "__getitem__")):
        return []
    try:
        total = len(value)
        found = [(f"[{index}]", value[index]) for index in range(min(total, CHILDREN))]
    except Exception:  # a mapping by other keys, a 0-d array, ...
        return []
    return found + _more(total, CHILDREN)
