"""A program run by us behaves as under a bare ``mpiexec``: mpi4py's own test suite.

The suite of the installed mpi4py (the ``test/`` folder of its sdist, fetched from PyPI at
test time into pytest's cache, never into the repository) runs on 2 ranks three ways:

- under a bare ``mpiexec --oversubscribe -n 2`` (the Open MPI the product uses, with only
  what it needs to run as root);
- as the spec's command (``%distcomp command``, launcher ``mpi``, 1 node x 2 processes),
  with the collectives ledger and the output pacing on, as a user gets them;
- inside live ranks (``%%distcomp run``), calling the suite's ``main`` in each rank.

Each way, every rank must end with unittest's "OK" and the same counts: tests run and
tests skipped, per rank, equal to the bare run's. That proves the ledger's wrapping of
mpi4py (ledger_mpi.py) leaves its objects as mpi4py made them (``COMM_WORLD`` still a
predefined constant that ``free()`` leaves alone, classes that pickle and compare, request
objects of mpi4py's own class) and that our launch changes no MPI semantics.

Every module of the suite runs, ``test_spawn`` (``MPI_Comm_spawn``) included: about 50 s
a way on 2 ranks on 2 cores.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from jupyter_distcomp.machine import mpi

from .ranks_support import define, loaded_shell, run_cell

pytestmark = pytest.mark.slow

#: modules left out of every way (none)
LEFT_OUT: list[str] = []

_RAN = re.compile(r"Ran (\d+) tests? in ")
_END = re.compile(r"^(OK|FAILED)(?: \((.*)\))?\s*$")


def _arguments() -> list[str]:
    return ["-q", *(arg for name in LEFT_OUT for arg in ("-e", rf"^{name}\.py$"))]


@pytest.fixture(scope="module")
def suite(request) -> Path:
    """mpi4py's ``test/`` folder for the installed version, from its sdist on PyPI."""
    import mpi4py

    version = mpi4py.__version__
    cache = Path(request.config.cache.mkdir("mpi4py-suite")) / version
    test_dir = cache / f"mpi4py-{version}" / "test"
    if (test_dir / "runtests.py").exists():
        return test_dir
    cache.mkdir(parents=True, exist_ok=True)
    pip = [sys.executable, "-m", "pip", "download", "--disable-pip-version-check", "-q"]
    fetched = subprocess.run(
        [*pip, "--no-deps", "--no-binary", ":all:", f"mpi4py=={version}", "-d", str(cache)],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    archives = sorted(cache.glob(f"mpi4py-{version}.tar.gz"))
    if fetched.returncode != 0 or not archives:
        pytest.skip(
            f"mpi4py {version}'s test suite comes from its sdist on PyPI, which could not be "
            f"fetched: {(fetched.stderr or fetched.stdout).strip()[-300:]}"
        )
    prefix = f"mpi4py-{version}/test/"
    with tarfile.open(archives[0]) as archive:
        members = [m for m in archive.getmembers() if m.name.startswith(prefix)]
        archive.extractall(cache, members=members, filter="data")
    return test_dir


def _summaries(lines: list[tuple[int, str]]) -> dict[int, tuple[int, str]]:
    """Per rank, from its lines of output: (tests run, unittest's last line)."""
    ran: dict[int, int] = {}
    ends: dict[int, str] = {}
    for rank, text in lines:
        found = _RAN.search(text)
        if found:
            ran[rank] = int(found.group(1))
        elif _END.match(text.strip()):
            ends[rank] = text.strip()
    return {rank: (ran.get(rank, -1), ends.get(rank, "no summary")) for rank in (0, 1)}


def _labelled(text: str) -> list[tuple[int, str]]:
    """Lines of the notebook's output labelled ``[rank R]`` or ``[node N rank R]``."""
    found = []
    for line in text.splitlines():
        match = re.match(r"^\[(?:node \d+ )?rank (\d+)\] ?(.*)$", line)
        if match:
            found.append((int(match.group(1)), match.group(2)))
    return found


@pytest.fixture(scope="module")
def bare(suite) -> dict[int, tuple[int, str]]:
    """The suite under a bare mpiexec: each rank's summary (Open MPI tags each line)."""
    argv = [mpi.mpiexec_path(), "--oversubscribe", "-n", "2", "--output", "tag"]
    argv += [sys.executable, "runtests.py", *_arguments()]
    env = mpi.mpiexec_environment(dict(os.environ))
    done = subprocess.run(
        argv, cwd=suite, env=env, capture_output=True, text=True, timeout=900, check=False
    )
    lines = []
    for line in (done.stdout + done.stderr).splitlines():
        match = re.match(r"^\[\d+,(\d+)\]<std(?:out|err)>: ?(.*)$", line)
        if match:
            lines.append((int(match.group(1)), match.group(2)))
    result = _summaries(lines)
    assert done.returncode == 0, (done.returncode, result, done.stderr[-3000:])
    return result


@pytest.fixture(scope="module")
def shell():
    with loaded_shell() as ip:
        yield ip


def _passed(result: dict[int, tuple[int, str]]) -> None:
    for rank, (ran, end) in result.items():
        assert ran > 0 and end.startswith("OK"), (rank, ran, end)


def test_the_bare_run_passes(bare):
    _passed(bare)


def test_as_the_command_the_same_tests_run_and_pass(shell, suite, bare):
    spec = (
        f"name: mpi4py_suite\ntype: DistributedComponent\ncode: {suite}\n"
        "launcher:\n  type: mpi\n"
        f"  additional_arguments: python runtests.py {' '.join(_arguments())}\n"
    )
    define(shell, "mpi4py_suite", spec, nodes=1, per_node=2)
    cell = run_cell(shell, "%distcomp command mpi4py_suite")
    result = _summaries(_labelled(cell.stdout + cell.stderr))
    assert cell.ok, (result, (cell.stdout + cell.stderr)[-3000:])
    assert result == bare


def test_inside_live_ranks_the_same_tests_run_and_pass(shell, suite, bare):
    spec = (
        "name: mpi4py_ranks\ntype: DistributedComponent\n"
        "launcher:\n  type: mpi\n  additional_arguments: python train.py\n"
    )
    define(shell, "mpi4py_ranks", spec, nodes=1, per_node=2)
    argv = ["runtests.py", *_arguments()]
    code = (
        "import os, sys\n"
        "sys.dont_write_bytecode = True\n"
        f"os.chdir({str(suite)!r})\n"
        f"sys.path.insert(0, {str(suite)!r})\n"
        "import main as _suite\n"
        "try:\n"
        f"    _suite.main(module=None, argv={argv!r}, exit=False)\n"
        "except SystemExit as _end:\n"  # the suite's runTests ends with sys.exit
        "    print('suite exit', _end.code)\n"
    )
    cell = run_cell(shell, f"%%distcomp run mpi4py_ranks\n{code}")
    result = _summaries(_labelled(cell.stdout + cell.stderr))
    assert cell.ok, (result, (cell.stdout + cell.stderr)[-3000:])
    assert result == bare


# -- direct checks: a small mpi4py program as the command and under a bare mpiexec ---------
PROGRAM = r"""
import json, os, sys
from mpi4py import MPI
mode, out = sys.argv[1], sys.argv[2]
comm = MPI.COMM_WORLD
rank = comm.Get_rank()
if mode == "semantics":
    seen = {
        "thread level": MPI.Query_thread(),
        "main thread": MPI.Is_thread_main(),
        "initialized": MPI.Is_initialized(),
        "finalized before": MPI.Is_finalized(),
        "errors return": comm.Get_errhandler() == MPI.ERRORS_RETURN,
        "classes": [type(MPI.COMM_WORLD).__name__, type(comm.Dup()).__name__],
        "world is mpi4py's": type(MPI.COMM_WORLD) is MPI.Intracomm,
        "sum": comm.allreduce(rank + 1),
    }
    MPI.COMM_WORLD.free()  # a predefined communicator: free() leaves it as it is
    seen["world after free"] = comm.Get_size()
    MPI.Finalize()
    seen["finalized after"] = MPI.Is_finalized()
    with open(os.path.join(out, f"rank{rank}.json"), "w") as handle:
        json.dump(seen, handle)
elif mode == "bytes":
    comm.Barrier()
    if rank == 1:
        sys.stdout.buffer.write(b"one\n\n\nprogress 10%\rprogress 100%\nbad \xff\xfe bytes\nno end")
        sys.stdout.flush()
        sys.stderr.buffer.write(b"err line\n\nerr \x80 tail")
        sys.stderr.flush()
elif mode == "exit":
    comm.Barrier()
    MPI.Finalize()
    sys.exit(3 if rank == 1 else 0)
elif mode == "abort":
    comm.Barrier()
    if rank == 1:
        comm.Abort(7)
    import time
    time.sleep(30)
"""

SMALL_SPEC = """
name: small
type: DistributedComponent
code: {code}
launcher:
  type: mpi
  additional_arguments: python prog.py {{inputs.mode}} {out}
inputs:
  mode: {{type: String, default: semantics}}
"""


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    from jupyter_distcomp.core.spec_parsing import load_component

    root = tmp_path_factory.mktemp("small")
    (root / "code").mkdir()
    (root / "code" / "prog.py").write_text(PROGRAM)
    spec = SMALL_SPEC.format(code=root / "code", out=root / "out")
    component = load_component(spec, base_dir=root)
    component.runsettings.resource_layout.configure(instance_count=1, process_count_per_node=2)
    return root, component


def _bare_small(root: Path, mode: str) -> subprocess.CompletedProcess:
    argv = [mpi.mpiexec_path(), "--oversubscribe", "-n", "2", sys.executable, "prog.py"]
    return subprocess.run(
        [*argv, mode, str(root / "out")],
        cwd=root / "code",
        env=mpi.mpiexec_environment(dict(os.environ)),
        capture_output=True,
        timeout=120,
        check=False,
    )


def _command_small(component, mode: str):
    from jupyter_distcomp.local.command import run_command

    shown: list[tuple[str, str]] = []

    def stream(text, file=None, flush=False):
        name = "stderr" if file is sys.stderr else "stdout"
        shown.extend((name, line) for line in text.split("\n"))

    result = run_command(component, inputs={"mode": mode}, stream=stream, check=False)
    return result, shown


def _read_ranks(out: Path) -> list[dict]:
    import json

    return [json.loads((out / f"rank{rank}.json").read_text()) for rank in (0, 1)]


def test_mpi_semantics_are_those_of_a_bare_mpiexec(small):
    root, component = small
    (root / "out").mkdir(exist_ok=True)
    bare_run = _bare_small(root, "semantics")
    assert bare_run.returncode == 0, bare_run.stderr[-2000:]
    bare_seen = _read_ranks(root / "out")
    result, _ = _command_small(component, "semantics")
    assert [r.returncode for r in result.ranks] == [0, 0]
    assert _read_ranks(root / "out") == bare_seen
    assert bare_seen[1]["finalized after"] and bare_seen[1]["world is mpi4py's"]


@pytest.mark.parametrize(("mode", "code"), [("exit", 3), ("abort", 7)])
def test_exit_code_and_abort_are_those_of_a_bare_mpiexec(small, mode, code):
    root, component = small
    bare_run = _bare_small(root, mode)
    assert bare_run.returncode == code
    result, _ = _command_small(component, mode)
    assert result.ranks[1].returncode == code


def test_each_rank_shows_the_bytes_it_wrote(small):
    """Blank lines, a carriage return inside a line, bytes that are no UTF-8 and a last
    line without newline reach the notebook as the bare run wrote them (the notebook shows
    text: undecodable bytes as U+FFFD), each line and each redraw labelled."""
    root, component = small
    bare_run = _bare_small(root, "bytes")
    assert bare_run.returncode == 0
    _, shown = _command_small(component, "bytes")
    assert ("stdout", "[rank 1] ") in shown  # a blank line is a line

    def of_rank_1(name: str) -> str:
        # the label starts each line and each redraw after a carriage return (so a rank's
        # text cannot draw over it): without the labels, the bytes are the bare run's
        mine = [text for stream, text in shown if stream == name and text.startswith("[rank 1]")]
        return "\n".join(
            text.replace("\r[rank 1] ", "\r").removeprefix("[rank 1]").removeprefix(" ")
            for text in mine
        )

    def as_text(raw: bytes) -> str:
        return raw.decode("utf-8", errors="replace")

    assert of_rank_1("stdout") == as_text(bare_run.stdout)
    assert of_rank_1("stderr") == as_text(bare_run.stderr)
