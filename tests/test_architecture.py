"""The package's shape, as the README's Architecture section draws it: a few modules at the
top, one folder per layer, and no import cycle between any two modules, counting imports
inside functions (``make lint`` checks the layers themselves with import-linter). The maps
are true: each folder's ``__init__`` docstring names each of its modules in a line, and only
``local/ranks/ipp.py`` and ``rank_side/engine_start.py`` import ipyparallel (read from the
files' syntax trees, functions' own imports included)."""

from __future__ import annotations

import ast
import re
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


# -- the maps: each folder's docstring names its modules; one adapter imports ipyparallel --

#: the modules that may import ipyparallel: the kernel's adapter, and the engine's start
#: the kernel's adapter, and the two engine starts: a local rank's, and a job rank's (--cells)
IPYPARALLEL_IMPORTERS = {
    "local/ranks/ipp.py",
    "rank_side/engine_start.py",
    "rank_side/job_engine.py",
}


def docstring_of(path: Path) -> str:
    return ast.get_docstring(ast.parse(path.read_text())) or ""


def unnamed_modules(package: Path) -> list[str]:
    """Each module file and subfolder of every package folder under ``package`` that its
    folder's ``__init__`` docstring names in no line of its own (``- ``name``: what for``);
    and each such line that names no module there."""
    problems = []
    for init in sorted(package.rglob("__init__.py")):
        folder = init.parent
        entries = {p.stem for p in folder.glob("*.py") if p.name != "__init__.py"}
        entries |= {p.name for p in folder.iterdir() if p.is_dir() and any(p.rglob("*.py"))}
        lines = re.findall(r"^- ``(\w+)``: \S", docstring_of(init), re.M)
        where = init.relative_to(package).as_posix()
        problems += [f"{where} names no line for {e}" for e in sorted(entries - set(lines))]
        problems += [f"{where} names {e}, which is no module" for e in sorted(set(lines) - entries)]
    return problems


def imported_modules(path: Path) -> set[str]:
    """What a file imports by absolute name, at any depth (functions' own imports included),
    and what it imports by a literal name through ``importlib.import_module``,
    ``runpy.run_module`` or ``__import__``."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module)
        elif isinstance(node, ast.Call) and node.args:
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            first = node.args[0]
            if name in {"import_module", "run_module", "__import__"} and isinstance(
                first, ast.Constant
            ):
                found.add(str(first.value))
    return found


def importers_of(package: Path, top: str) -> set[str]:
    """The files under ``package`` that import ``top`` or any module below it."""
    return {
        path.relative_to(package).as_posix()
        for path in package.rglob("*.py")
        if any(m == top or m.startswith(top + ".") for m in imported_modules(path))
    }


def test_every_folder_names_each_of_its_modules_in_a_line():
    assert unnamed_modules(PACKAGE) == []


def test_only_the_adapter_and_the_engine_starts_import_ipyparallel():
    assert importers_of(PACKAGE, "ipyparallel") == IPYPARALLEL_IMPORTERS


def test_the_map_check_finds_an_unnamed_module_and_a_stale_line(tmp_path):
    package = tmp_path / "p"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text('"""P.\n\n- ``a``: the a\n- ``sub``: the sub\n"""\n')
    (package / "a.py").write_text("")
    (package / "sub" / "__init__.py").write_text('"""Sub.\n\n- ``gone``: was here\n"""\n')
    (package / "sub" / "b.py").write_text("")
    assert unnamed_modules(package) == [
        "sub/__init__.py names no line for b",
        "sub/__init__.py names gone, which is no module",
    ]
    (package / "c.py").write_text("")
    assert "__init__.py names no line for c" in unnamed_modules(package)


def test_the_import_check_finds_imports_inside_functions(tmp_path):
    (tmp_path / "top.py").write_text("import ipyparallelish\nimport json\n")
    (tmp_path / "inner.py").write_text("def f():\n    from ipyparallel.error import E\n")
    (tmp_path / "by_name.py").write_text("import runpy\nrunpy.run_module('ipyparallel.engine')\n")
    (tmp_path / "relative.py").write_text("from . import ipyparallel\n")
    assert importers_of(tmp_path, "ipyparallel") == {"inner.py", "by_name.py"}
