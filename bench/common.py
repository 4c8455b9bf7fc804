"""What the benchmarks share: the component they run, and output kept out of the figures.

Run as ``python bench/bench_x.py``: this folder is then first on ``sys.path``.
"""

from __future__ import annotations

import io
from contextlib import redirect_stderr, redirect_stdout
from typing import Any

#: an MPI component whose command is never run: the benchmarks time cells on its ranks
SPEC = """\
name: bench
type: DistributedComponent
launcher:
  type: mpi
  additional_arguments: python bench.py
"""


def quiet(fn: Any, *args: Any) -> tuple[Any, str]:
    """Run fn with stdout/stderr captured; return (result, captured stdout)."""
    out = io.StringIO()
    with redirect_stdout(out), redirect_stderr(io.StringIO()):
        result = fn(*args)
    return result, out.getvalue()


def bench_shell(ranks: int) -> Any:
    """The process's IPython shell with the extension loaded and the component ``bench``
    defined on one node of ``ranks`` processes."""
    from IPython.testing.globalipapp import get_ipython

    shell = get_ipython()
    shell.run_line_magic("load_ext", "jupyter_distcomp")
    quiet(shell.run_cell, f"%%distcomp bench\n{SPEC}")
    shell.user_ns["bench"].runsettings.resource_layout.configure(
        instance_count=1, process_count_per_node=ranks
    )
    return shell
