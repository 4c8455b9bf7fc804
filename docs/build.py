"""Builds the documentation site with Sphinx and MyST-NB, warnings as errors.

    python docs/build.py OUT [--notebooks DIR]

The pages (docs/*.md, screenshots/) and the shipped notebooks are staged in OUT/source, so
the tracked tree stays as it is; the site is OUT/html. Every notebook is a page with the
outputs of a real run: executed here, each in a copy of notebooks/ under OUT/run
(docs/execute.py; the debugging notebook's prompts answered with the lines its cells script:
``make docs``), or taken from DIR (``--notebooks DIR``: the test suite passes the copies it
has just executed). Either way each output reads as JupyterLab shows it (execute.tidy).
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
from pathlib import Path

import execute  # docs/execute.py: this script's folder is first on sys.path

DOCS = Path(__file__).resolve().parent
NOTEBOOKS = DOCS.parent / "notebooks"
#: what stays out of the staged pages
NOT_PAGES = ("build.py", "execute.py", "__pycache__")


def run_notebooks(out: Path) -> Path:
    """Every shipped notebook executed, in OUT/run/<name>/ (a copy of notebooks/ each, as a
    person runs it beside its files); the folder of the executed notebooks."""
    import nbformat

    executed = out / "executed"
    shutil.rmtree(executed, ignore_errors=True)
    shutil.copytree(NOTEBOOKS, executed, ignore=shutil.ignore_patterns("outputs", ".ipynb_*"))
    for path in sorted(NOTEBOOKS.glob("*.ipynb")):
        workdir = out / "run" / path.stem
        shutil.rmtree(workdir, ignore_errors=True)
        print(f"executing {path.name}", flush=True)
        nbformat.write(execute.execute(path, workdir), executed / path.name)
    return executed


def stage(out: Path, notebooks: Path) -> Path:
    import nbformat

    source = out / "source"
    shutil.rmtree(source, ignore_errors=True)
    shutil.copytree(DOCS, source, ignore=shutil.ignore_patterns(*NOT_PAGES))
    # the README's magic table is the one copy, which using.md includes
    shutil.copy(DOCS.parent / "README.md", source / "_readme.md")
    shutil.copytree(
        notebooks, source / "notebooks", ignore=shutil.ignore_patterns("outputs", ".ipynb_*")
    )
    for path in (source / "notebooks").glob("*.ipynb"):
        nbformat.write(execute.tidy(nbformat.read(path, as_version=4)), path)
    return source


def build(out: Path, notebooks: Path | None = None) -> Path:
    """Builds the site into ``out/html`` (``notebooks``: executed ones; None: run them here);
    raises CalledProcessError on any warning."""
    source = stage(out, notebooks if notebooks is not None else run_notebooks(out))
    html = out / "html"
    sphinx = [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html"]
    subprocess.run([*sphinx, "-d", str(out / "doctrees"), str(source), str(html)], check=True)
    return html


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument(
        "--notebooks", type=Path, default=None, help="executed notebooks (default: run them)"
    )
    args = parser.parse_args()
    notebooks = args.notebooks.resolve() if args.notebooks is not None else None
    html = build(args.out.resolve(), notebooks)
    print(f"The documentation site is {html / 'index.html'}")


if __name__ == "__main__":
    main()
