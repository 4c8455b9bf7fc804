"""A ledger file that is not one (a FIFO, a link, a truncated or foreign file) is refused or
reported, never waited on, never read past its end; a rank whose ledger cannot be made runs
on without one (issue 39, item 9)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from jupyter_distcomp.rank_side import ledger

HOOKS = Path(ledger.__file__).with_name("ledger_hooks.py")


def _filled(path: Path) -> None:
    ring = ledger.Ring(str(path), capacity=8)
    code = test_a_fifo_is_refused_without_blocking.__code__
    ring.end(ring.begin(1, ("c", "g", "all_reduce", "[4] float32", "sum", "", ""), code, 3))
    ring.map.flush()


def test_a_ledger_is_preallocated_and_read_back(tmp_path):
    path = tmp_path / "r.ledger"
    _filled(path)
    assert os.stat(path).st_blocks * 512 >= os.stat(path).st_size  # blocks allocated
    (entry,) = ledger.read_ring(str(path))
    assert entry.op == "all_reduce" and not entry.running


def test_a_fifo_is_refused_without_blocking(tmp_path):
    fifo = tmp_path / "r.ledger"
    os.mkfifo(fifo)
    with pytest.raises(ledger.LedgerDamaged, match="not a regular file"):
        ledger.read_ring(str(fifo))  # a blocking open would never return: no writer
    with pytest.raises(ledger.LedgerDamaged, match="not a regular file"):
        ledger.Ring(str(fifo))


def test_a_link_in_place_of_a_ledger_is_not_followed(tmp_path):
    target = tmp_path / "precious.txt"
    target.write_text("keep me")
    link = tmp_path / "r.ledger"
    link.symlink_to(target)
    with pytest.raises(OSError):
        ledger.Ring(str(link))
    assert target.read_text() == "keep me"
    assert ledger.read_ring(str(link)) == []


def test_a_truncated_or_foreign_ledger_is_reported_once(tmp_path, capsys):
    path = tmp_path / "r.ledger"
    _filled(path)
    os.truncate(path, 100)
    with pytest.raises(ledger.LedgerDamaged, match="truncated"):
        ledger.read_ring(str(path))
    assert ledger.read_ledger(str(path)) == []
    assert ledger.read_ledger(str(path)) == []
    said = capsys.readouterr().err
    assert said.count("a collectives ledger is damaged") == 1 and "truncated" in said
    foreign = tmp_path / "other.ledger"
    foreign.write_bytes(b"PNG!" + bytes(400))
    with pytest.raises(ledger.LedgerDamaged, match="not a collectives ledger"):
        ledger.read_ring(str(foreign))


def test_a_rank_whose_ledger_cannot_be_made_runs_on(tmp_path):
    """A FIFO planted at the ledger's path: the process says so once and its collectives
    run, unrecorded."""
    fifo = tmp_path / "r.ledger"
    os.mkfifo(fifo)
    program = (
        "import importlib.util, sys\n"
        f"spec = importlib.util.spec_from_file_location('ledger_hooks', {str(HOOKS)!r})\n"
        "hooks = importlib.util.module_from_spec(spec); spec.loader.exec_module(hooks)\n"
        f"hooks.install({str(fifo)!r})\n"
        "print('ran on')\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == "ran on\n"
    assert "no collectives ledger" in done.stderr and "not a regular file" in done.stderr
