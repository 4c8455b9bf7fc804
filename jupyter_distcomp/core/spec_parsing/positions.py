"""Parse YAML once and remember where every key and value is, so errors can point at them.

libyaml's parser (when available) gives the events; PyYAML's composer turns them into nodes with
their start and end marks, which we keep per key path, and the plain data is constructed from
the same node tree. The composer refuses what would exhaust the kernel before it is built:
nesting deeper than ``MAX_DEPTH`` (libyaml's own composer recurses in C and crashes the process;
its scanner refuses past a limit of its own, reported the same way), aliases that expand past
``MAX_ALIAS_VALUES`` values (a "billion laughs"), integers longer than Python converts, and lone
surrogates, which are not text.
"""

from __future__ import annotations

import re
import sys
import warnings
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import yaml

from ...errors import SpecError, SpecWarning


def _key_text(key_node: yaml.Node) -> str:
    """Keys stay as written: `on:`, `1:` or `false:` are names in a spec, not values."""
    return str(key_node.value) if isinstance(key_node, yaml.ScalarNode) else repr(key_node)


#: deepest nesting of mappings and lists a spec may have (real specs stay below 10)
MAX_DEPTH = 64
#: values that aliases (``*name``) may add to a document, all aliases together
MAX_ALIAS_VALUES = 10_000
#: libyaml's scanner's word for nesting past its own limit (1,000 levels), which it reaches
#: before the composer sees the events of a deep flow collection
_LIBYAML_TOO_DEEP = "exceeded maximum nesting depth"
#: longest integer, in digits, that Python converts from text
MAX_INT_DIGITS = sys.get_int_max_str_digits() or 4300
_SURROGATE = re.compile("[\ud800-\udfff]")

if TYPE_CHECKING:
    from yaml._yaml import CParser as _Parser
else:  # libyaml's parser when available: it produces events without recursion
    try:
        from yaml._yaml import CParser as _Parser
    except ImportError:
        _Parser = yaml.parser.Parser


class TooComplex(Exception):
    """YAML that would exhaust the kernel (depth, aliases, huge numbers) or is not text."""

    def __init__(self, message: str, line: int, column: int):
        super().__init__(message)
        self.message, self.line, self.column = message, line, column


def _at(mark: Any) -> tuple[int, int]:
    return mark.line + 1, mark.column + 1


def _too_deep(mark: Any) -> TooComplex:
    return TooComplex(
        f"the spec nests lists and mappings more than {MAX_DEPTH} levels deep. "
        "Fix: close the brackets, or flatten the structure.",
        *_at(mark),
    )


class _Loader(
    yaml.composer.Composer, _Parser, yaml.constructor.SafeConstructor, yaml.resolver.Resolver
):
    def __init__(self, stream: str):
        _Parser.__init__(self, stream)
        yaml.composer.Composer.__init__(self)
        yaml.constructor.SafeConstructor.__init__(self)
        yaml.resolver.Resolver.__init__(self)
        self._depth = 0
        self._alias_values = 0
        self._sizes: dict[int, int] = {}  # id(node) -> values in it, aliases expanded

    def compose_node(self, parent, index):
        if self.check_event(yaml.AliasEvent):
            event: Any = self.peek_event()
            node = super().compose_node(parent, index)
            self._alias_values += self._sizes.get(id(node), 1)
            if self._alias_values > MAX_ALIAS_VALUES:
                raise TooComplex(
                    f"the alias *{event.anchor} makes the spec expand past "
                    f"{MAX_ALIAS_VALUES:,} values. Fix: write the value out, or reuse "
                    "fewer aliases.",
                    *_at(event.start_mark),
                )
            return node
        if not self.check_event(yaml.SequenceStartEvent, yaml.MappingStartEvent):
            return super().compose_node(parent, index)
        if self._depth >= MAX_DEPTH:
            raise _too_deep(getattr(self.peek_event(), "start_mark", None))
        self._depth += 1
        try:
            node = super().compose_node(parent, index)
        finally:
            self._depth -= 1
        if isinstance(node, yaml.SequenceNode):
            items = node.value
        elif isinstance(node, yaml.MappingNode):
            items = [item for pair in node.value for item in pair]
        self._sizes[id(node)] = 1 + sum(self._sizes.get(id(item), 1) for item in items)
        return node

    def construct_mapping(self, node, deep=False):
        self.flatten_mapping(node)
        return {
            _key_text(key_node): self.construct_object(value_node, deep=deep)
            for key_node, value_node in node.value
        }

    def construct_yaml_int(self, node):
        digits = sum(ch.isdigit() for ch in str(node.value))
        if digits > MAX_INT_DIGITS:
            raise TooComplex(
                f"a number of {digits:,} digits is longer than Python converts "
                f"({MAX_INT_DIGITS:,}). Fix: quote it to make it a string, or shorten it.",
                *_at(node.start_mark),
            )
        return super().construct_yaml_int(node)


_Loader.add_constructor(  # type: ignore[type-var]
    "tag:yaml.org,2002:int", _Loader.construct_yaml_int
)


class DuplicateKey(Exception):
    def __init__(self, key: str, line: int, column: int, first_line: int, path: str):
        super().__init__(key)
        self.key, self.line, self.column, self.first_line, self.path = (
            key,
            line,
            column,
            first_line,
            path,
        )


@dataclass
class Positions:
    """Key path (tuple of strings) -> marks of its key and value (0-based, as PyYAML gives)."""

    keys: dict[tuple, Any] = field(default_factory=dict)
    values: dict[tuple, Any] = field(default_factory=dict)

    def _nearest(self, path: tuple, table: dict) -> Any:
        path = tuple(str(p) for p in path)
        while path:
            if path in table:
                return table[path]
            path = path[:-1]
        return None

    def locate(self, path: tuple, at: str = "key") -> tuple[int | None, int | None]:
        """1-based (line, column) of the key (or its value) at ``path``, or of its nearest parent."""
        str_path = tuple(str(p) for p in path)
        mark = None
        if at == "value" and str_path in self.values:
            mark = self.values[str_path][0]
            key = self.keys.get(str_path)
            if key is not None and mark.index < key.index:  # an alias: point at its use
                mark = None
        if mark is None:
            mark = self._nearest(path, self.keys)
        if mark is None:
            return (1, 1) if not path else (None, None)
        return mark.line + 1, mark.column + 1

    def find_in_value(
        self, path: tuple, needle: str, text: str, skip: int = 0
    ) -> tuple[int | None, int | None]:
        """1-based position of ``needle`` inside the source of the value at ``path``, after
        ``skip`` earlier occurrences of it there."""
        str_path = tuple(str(p) for p in path)
        span = self.values.get(str_path)
        if span is not None:
            start, end = span[0].index, span[1].index
            found = text.find(needle, start, max(end, start + len(needle)))
            for _ in range(skip):
                if found < 0:
                    break
                found = text.find(needle, found + 1, max(end, start + len(needle)))
            if found >= 0:
                line = text.count("\n", 0, found) + 1
                column = found - (text.rfind("\n", 0, found) + 1) + 1
                return line, column
        return self.locate(path, at="value")


def compose_positions(text: str) -> tuple[Any, Positions]:
    """Plain data and positions of one YAML document.

    Raises yaml errors, DuplicateKey and TooComplex.
    """
    surrogate = _SURROGATE.search(text)
    if surrogate:
        start = surrogate.start()
        raise TooComplex(
            f"{surrogate.group()!r} is half of a UTF-16 surrogate pair, not a character. "
            "Fix: delete it, or write the whole character.",
            text.count("\n", 0, start) + 1,
            start - (text.rfind("\n", 0, start) + 1) + 1,
        )
    loader = _Loader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None, Positions()
        positions = Positions()
        _walk(node, (), positions, set())
        data = loader.construct_document(node)
    except yaml.MarkedYAMLError as exc:
        if exc.problem != _LIBYAML_TOO_DEEP or exc.problem_mark is None:
            raise
        raise _too_deep(exc.problem_mark) from None
    finally:
        loader.dispose()
    return data, positions


def _walk(node: yaml.Node, path: tuple, positions: Positions, seen: set[int]) -> None:
    if id(node) in seen:  # aliases may make cycles
        return
    seen.add(id(node))
    if isinstance(node, yaml.MappingNode):
        first_seen: dict[str, int] = {}
        for key_node, value_node in node.value:
            key = _key_text(key_node)
            if key == "<<":
                _walk(value_node, path, positions, seen)
                continue
            if key in first_seen:
                raise DuplicateKey(
                    key,
                    key_node.start_mark.line + 1,
                    key_node.start_mark.column + 1,
                    first_seen[key],
                    ".".join((*path, key)),
                )
            first_seen[key] = key_node.start_mark.line + 1
            child = (*path, key)
            positions.keys[child] = key_node.start_mark
            positions.values[child] = (value_node.start_mark, value_node.end_mark)
            _walk(value_node, child, positions, seen)
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            child = (*path, str(index))
            positions.keys[child] = item.start_mark
            positions.values[child] = (item.start_mark, item.end_mark)
            _walk(item, child, positions, seen)


@dataclass
class Context:
    """What the loader needs to point at a place in the text: errors and warnings with lines."""

    pos: Positions
    source_name: str | None
    warnings: list[str]
    #: the errors found so far: the loader reports every one at once
    errors: list[SpecError] = field(default_factory=list)

    def report(self, error: SpecError) -> None:
        """Keep ``error`` and go on checking the rest of the spec."""
        self.errors.append(error)

    def error(self, message: str, path: tuple, *, at: str = "key") -> SpecError:
        line, column = self.pos.locate(path, at=at)
        return SpecError(
            message,
            line=line,
            column=column,
            path=".".join(str(p) for p in path) or None,
            source_name=self.source_name,
        )

    def warn(self, message: str, path: tuple) -> None:
        line, _ = self.pos.locate(path)
        where = f"line {line}, " if line else ""
        text = f"{where}key '{'.'.join(map(str, path))}': {message}"
        self.warnings.append(text)
        warnings.warn(SpecWarning(text), stacklevel=4)
