"""Parse YAML once and remember where every key and value is, so errors can point at them.

PyYAML's composer (libyaml when available) gives each node its start and end marks; we keep
those per key path and construct the plain data from the same node tree.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import yaml

from ..errors import SpecError, SpecWarning


def _key_text(key_node: yaml.Node) -> str:
    """Keys stay as written: `on:`, `1:` or `false:` are names in a spec, not values."""
    return str(key_node.value) if isinstance(key_node, yaml.ScalarNode) else repr(key_node)


if TYPE_CHECKING:
    _SafeLoader = yaml.SafeLoader
else:  # libyaml when available
    _SafeLoader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _Loader(_SafeLoader):
    def construct_mapping(self, node, deep=False):
        self.flatten_mapping(node)
        return {
            _key_text(key_node): self.construct_object(value_node, deep=deep)
            for key_node, value_node in node.value
        }


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
        if mark is None:
            mark = self._nearest(path, self.keys)
        if mark is None:
            return (1, 1) if not path else (None, None)
        return mark.line + 1, mark.column + 1

    def find_in_value(self, path: tuple, needle: str, text: str) -> tuple[int | None, int | None]:
        """1-based position of ``needle`` inside the source of the value at ``path``."""
        str_path = tuple(str(p) for p in path)
        span = self.values.get(str_path)
        if span is not None:
            start, end = span[0].index, span[1].index
            found = text.find(needle, start, max(end, start + len(needle)))
            if found >= 0:
                line = text.count("\n", 0, found) + 1
                column = found - (text.rfind("\n", 0, found) + 1) + 1
                return line, column
        return self.locate(path, at="value")


def compose_positions(text: str) -> tuple[Any, Positions]:
    """Plain data and positions of one YAML document. Raises yaml errors and DuplicateKey."""
    loader = _Loader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None, Positions()
        positions = Positions()
        _walk(node, (), positions, set())
        data = loader.construct_document(node)
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
