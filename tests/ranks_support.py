"""Helpers for the rank tests: a shared IPython shell, cells, output with arrival times."""

from __future__ import annotations

import io
import time
from collections.abc import Iterator
from contextlib import contextmanager, redirect_stderr, redirect_stdout

import psutil

MPI_SPEC = """\
name: ranks_demo
type: DistributedComponent
launcher:
  type: mpi
  additional_arguments: python train.py
"""

TORCH_SPEC = """\
name: ddp_demo
type: DistributedComponent
launcher:
  type: torch.distributed
  additional_arguments: python train.py
"""

TF_SPEC = """\
name: tf_demo
type: DistributedComponent
launcher:
  type: tensorflow
  additional_arguments: python train.py
"""


class TimedText(io.StringIO):
    """A stream that remembers when each piece of text arrived."""

    def __init__(self):
        super().__init__()
        self.events: list[tuple[float, str]] = []

    def write(self, text: str) -> int:
        self.events.append((time.monotonic(), text))
        return super().write(text)

    def first_time(self, needle: str) -> float | None:
        seen = ""
        for when, text in self.events:
            seen += text
            if needle in seen:
                return when
        return None


class Cell:
    """What one cell did: result, stdout, stderr, rich outputs, duration."""

    def __init__(self, result, out: TimedText, err: TimedText, outputs, seconds: float):
        self.result, self.out, self.err = result, out, err
        self.outputs, self.seconds = outputs, seconds
        self.stdout, self.stderr = out.getvalue(), err.getvalue()

    @property
    def error(self):
        return self.result.error_in_exec or self.result.error_before_exec

    @property
    def ok(self) -> bool:
        return self.result.success

    def traceback_text(self) -> str:
        from jupyter_distcomp.errors import strip_ansi

        return strip_ansi("\n".join(self.error._render_traceback_()))


def run_cell(ip, source: str, store_history: bool = False) -> Cell:
    """``source`` run in the shell ``ip``; ``store_history``: as a notebook runs a cell,
    which moves the shell's count on (the next cell gets the next ``In [N]``)."""
    from IPython.utils.capture import capture_output

    out, err = TimedText(), TimedText()
    tic = time.monotonic()
    with (
        capture_output(stdout=False, stderr=False) as captured,
        redirect_stdout(out),
        redirect_stderr(err),
    ):
        result = ip.run_cell(source, store_history=store_history)
    return Cell(result, out, err, captured.outputs, time.monotonic() - tic)


def label(ip) -> str:
    """``In [7]``: the notebook's name of the cell :func:`run_cell` runs next in ``ip`` (cells
    run without history all keep the shell's count)."""
    return f"In [{ip.execution_count}]"


def define(ip, name: str, spec: str, nodes: int, per_node: int) -> None:
    cell = run_cell(ip, f"%%distcomp {name}\n{spec}")
    assert cell.ok, cell.error
    ip.user_ns[name].runsettings.resource_layout.configure(
        instance_count=nodes, process_count_per_node=per_node
    )


def our_processes() -> list[psutil.Process]:
    """Every process this test process started (controller, mpiexec, ranks, nannies)."""
    return psutil.Process().children(recursive=True)


def alive(procs: list[psutil.Process]) -> list[psutil.Process]:
    result = []
    for proc in procs:
        try:
            if proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE:
                result.append(proc)
        except psutil.Error:
            pass
    return result


def wait_gone(procs: list[psutil.Process], seconds: float = 10) -> list[psutil.Process]:
    deadline = time.monotonic() + seconds
    while alive(procs) and time.monotonic() < deadline:
        time.sleep(0.1)
    return alive(procs)


@contextmanager
def loaded_shell() -> Iterator:
    """The test process's IPython shell with the extension loaded, unloaded afterwards;
    it renders every mimetype, as a notebook kernel does (the terminal shell only text)."""
    from IPython.testing.globalipapp import get_ipython

    shell = get_ipython()
    shell.display_formatter.active_types = shell.display_formatter.format_types
    shell.run_line_magic("load_ext", "jupyter_distcomp")
    try:
        yield shell
    finally:
        shell.run_line_magic("unload_ext", "jupyter_distcomp")
