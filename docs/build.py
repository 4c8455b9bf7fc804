"""Builds the documentation site with Sphinx and MyST-NB, warnings as errors.

    python docs/build.py OUT [--notebooks DIR] [--execute]

The pages (docs/*.md, screenshots/) and the shipped notebooks are staged in OUT/source, so
the tracked tree stays as it is; the site is OUT/html. ``--notebooks DIR`` takes the
notebooks from DIR (the test suite passes the copies it has just executed); ``--execute``
runs the notebooks during the build instead (``make docs``).
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parent
NOTEBOOKS = DOCS.parent / "notebooks"


def stage(out: Path, notebooks: Path) -> Path:
    source = out / "source"
    shutil.rmtree(source, ignore_errors=True)
    shutil.copytree(DOCS, source, ignore=shutil.ignore_patterns("build.py", "__pycache__"))
    # the README's magic table is the one copy, which using.md includes
    shutil.copy(DOCS.parent / "README.md", source / "_readme.md")
    shutil.copytree(
        notebooks, source / "notebooks", ignore=shutil.ignore_patterns("outputs", ".ipynb_*")
    )
    return source


def build(out: Path, notebooks: Path = NOTEBOOKS, execute: bool = False) -> Path:
    """Builds the site into ``out/html``; raises CalledProcessError on any warning."""
    source = stage(out, notebooks)
    html = out / "html"
    mode = "force" if execute else "off"
    sphinx = [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html"]
    options = ["-D", f"nb_execution_mode={mode}", "-d", str(out / "doctrees")]
    subprocess.run([*sphinx, *options, str(source), str(html)], check=True)
    return html


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--notebooks", type=Path, default=NOTEBOOKS)
    parser.add_argument("--execute", action="store_true")
    args = parser.parse_args()
    html = build(args.out.resolve(), args.notebooks.resolve(), args.execute)
    print(f"The documentation site is {html / 'index.html'}")


if __name__ == "__main__":
    main()
