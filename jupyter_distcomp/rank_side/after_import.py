"""Run a function on a module right after it is imported: what a rank adds to a library
only once the user's code loads that library.

:func:`when_imported` registers the function; a ``sys.meta_path`` entry runs it after the
module's own code (a module imported already is the caller's to handle). A failing function
prints its error and never fails the import.

Standard library only; ledger_hooks.py loads it by path on a rank without the package.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Callable
from types import ModuleType

_AFTER: dict[str, list[Callable[[ModuleType], None]]] = {}
_busy: set[str] = set()


class _Finder:
    """``sys.meta_path`` entry: runs the module's functions right after it is executed."""

    def find_spec(self, name, path=None, target=None):
        if name not in _AFTER or name in _busy:
            return None
        _busy.add(name)
        try:
            spec = importlib.util.find_spec(name)
        finally:
            _busy.discard(name)
        if spec is None or spec.loader is None:
            return spec
        load = spec.loader.exec_module

        def exec_module(module: ModuleType) -> None:
            load(module)
            for function in _AFTER.get(name, ()):
                _run(function, module)

        spec.loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


def _run(function: Callable[[ModuleType], None], module: ModuleType) -> None:
    try:
        function(module)
    except Exception as exc:  # the user's import works whatever we add to it
        print(f"distcomp: {function.__name__} on {module.__name__}: {exc!r}", file=sys.stderr)


def when_imported(name: str, function: Callable[[ModuleType], None]) -> None:
    """``function(module)`` each time module ``name`` is imported from now on."""
    _AFTER.setdefault(name, []).append(function)
    if not any(isinstance(f, _Finder) for f in sys.meta_path):
        sys.meta_path.insert(0, _Finder())
