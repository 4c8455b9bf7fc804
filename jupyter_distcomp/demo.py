"""``python -m jupyter_distcomp.demo`` (``make demo``): the MPI quickstart, headless.

Executes notebooks/mpi_quickstart.ipynb top to bottom in a real kernel with nbclient (4
local MPI ranks as 2 nodes x 2 processes), then prints what it showed: each rank's
allreduce result, the per-rank variables table and the rank status table. Exits non-zero
when a cell fails.
"""

from __future__ import annotations

import re
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

NOTEBOOK = Path(__file__).resolve().parent.parent / "notebooks" / "mpi_quickstart.ipynb"
#: the quickstart spec's `code:` folder (its train.py), next to the notebook
CODE = "quickstart"
ALLREDUCE_LINE = r"^(\[node \d+ rank \d+\] .*allreduce sum = .*)$"


def _text(cell: Any) -> str:
    parts = []
    for output in cell.get("outputs", []):
        if output.output_type == "stream":
            parts.append(output.text)
        elif "data" in output:
            parts.append(output.data.get("text/plain", "") + "\n")
    return "".join(parts)


def run(notebook_path: Path = NOTEBOOK) -> int:
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError
    from traitlets.config import Config

    if not notebook_path.exists():
        print(f"demo: {notebook_path} not found (run the demo from a checkout).", file=sys.stderr)
        return 2
    notebook = nbformat.read(notebook_path, as_version=4)
    tic = time.perf_counter()
    with (
        tempfile.TemporaryDirectory(prefix="distcomp-demo-") as workdir,
        tempfile.TemporaryDirectory(prefix="distcomp-demo-kernel-") as sockets,
    ):
        shutil.copy(notebook_path, workdir)
        code = notebook_path.parent / CODE  # the spec's `code:` folder, beside the notebook
        if code.is_dir():
            shutil.copytree(code, Path(workdir) / CODE)
        # the kernel's channels are Unix sockets in a folder of their own (not the notebook's,
        # which each emulated node copies): nothing listens on a port, and the kernel has no
        # plain-TCP transport to warn about
        ipc = Config({"KernelManager": {"transport": "ipc", "ip": str(Path(sockets) / "kernel")}})
        client = NotebookClient(
            notebook,
            timeout=600,
            kernel_name="python3",
            resources={"metadata": {"path": workdir}},
            config=ipc,
        )
        try:
            client.execute()
        except CellExecutionError as exc:
            print(f"demo: the quickstart failed:\n{exc}", file=sys.stderr)
            return 1
    seconds = time.perf_counter() - tic

    cells = [c for c in notebook.cells if c.cell_type == "code"]
    texts = [_text(c) for c in cells]
    # the `%%distcomp run` cell's lines (the notebook's command cell prints the same ones)
    sums = next(
        (found for t in texts if (found := re.findall(ALLREDUCE_LINE, t, re.M))),
        [],
    )
    # `%distcomp layout` sets the layout, then shows the table of each rank's variables
    env_table = next(
        (t for c, t in zip(cells, texts, strict=True) if "%distcomp layout" in c.source), ""
    )
    status = next(
        (t for c, t in zip(cells, texts, strict=True) if "%distcomp status" in c.source), ""
    )
    if len(sums) != 4:
        print("demo: expected an allreduce line from each of 4 ranks, got:", file=sys.stderr)
        print("".join(texts), file=sys.stderr)
        return 1
    value = sums[0].rsplit("=", 1)[1].strip()
    print(f"MPI quickstart: 2 nodes x 2 processes, executed in {seconds:.1f} s\n")
    print(f"Allreduce (sum of rank + 1 over 4 ranks) = {value}")
    print("\n".join(sums))
    print("\nVariables each rank sees (%distcomp env):")
    print(env_table.rstrip())
    print("\nRanks (%distcomp status):")
    print(status.rstrip())
    return 0


if __name__ == "__main__":
    sys.exit(run())
