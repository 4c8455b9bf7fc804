"""The package's shape, as the README's Architecture section draws it: a few modules at the
top, one folder per layer, and no import cycle between any two modules, counting imports
inside functions (``make lint`` checks the layers themselves with import-linter)."""

from __future__ import annotations

from pathlib import Path

import grimp

import jupyter_distcomp

PACKAGE = Path(jupyter_distcomp.__file__).parent


def test_the_top_level_holds_at_most_six_modules_and_the_layers():
    modules = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert len(modules) <= 6, modules
    folders = {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").exists()}
    assert folders == {"core", "machine", "local", "azureml", "notebook", "rank_side", "standin"}


def cycles(graph: grimp.ImportGraph) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        for imported in graph.find_modules_directly_imported_by(module):
            if imported not in index:
                visit(imported)
                low[module] = min(low[module], low[imported])
            elif imported in stack:
                low[module] = min(low[module], index[imported])
        if low[module] == index[module]:
            component = []
            while True:
                top = stack.pop()
                component.append(top)
                if top == module:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for module in sorted(graph.modules):
        if module not in index:
            visit(module)
    return found


def test_no_import_cycle_among_the_modules():
    graph = grimp.build_graph(
        "jupyter_distcomp", exclude_type_checking_imports=True, cache_dir=None
    )
    assert len(graph.modules) > 50  # the whole package, function-level imports included
    assert cycles(graph) == []


def test_the_cycle_check_finds_a_cycle():
    graph = grimp.ImportGraph()
    for name in ("p", "p.a", "p.b", "p.c"):
        graph.add_module(name)
    graph.add_import(importer="p.a", imported="p.b")
    graph.add_import(importer="p.b", imported="p.c")
    assert cycles(graph) == []
    graph.add_import(importer="p.c", imported="p.a")
    assert cycles(graph) == [["p.a", "p.b", "p.c"]]
