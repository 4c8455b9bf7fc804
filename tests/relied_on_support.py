"""What a dotted name of a ``RELIES_ON`` list names in an installed package: a module, a
function, a class attribute, or an attribute the class sets in one of its methods
(``self.debugger = ...`` in ``__init__``)."""

from __future__ import annotations

import ast
import importlib
import inspect
import textwrap


def sets_attribute(cls: type, name: str) -> bool:
    """A method of ``cls`` or of a class it inherits from assigns ``self.<name>``."""
    for klass in inspect.getmro(cls):
        try:
            source = textwrap.dedent(inspect.getsource(klass))
        except (OSError, TypeError):  # builtins, classes made at run time
            continue
        for node in ast.walk(ast.parse(source)):
            targets = node.targets if isinstance(node, ast.Assign) else []
            if isinstance(node, ast.AnnAssign | ast.AugAssign):
                targets = [node.target]
            if any(
                isinstance(t, ast.Attribute)
                and t.attr == name
                and isinstance(t.value, ast.Name)
                and t.value.id == "self"
                for t in targets
            ):
                return True
    return False


def resolve(dotted: str) -> object:
    """The object a dotted name such as ``ipyparallel.Cluster.start_cluster`` names; for an
    attribute a class sets on its instances, the class. ImportError or AttributeError when
    it no longer exists."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            value: object = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for attribute in parts[cut:]:
            if hasattr(value, attribute):
                value = getattr(value, attribute)
            elif isinstance(value, type) and sets_attribute(value, attribute):
                return value
            else:
                raise AttributeError(f"{value!r} has no attribute {attribute!r}")
        return value
    raise ImportError(dotted)
