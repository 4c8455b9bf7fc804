"""How ``%distcomp command`` reports ranks that fail: each rank that failed on its own is
named as failed, never as stopped by another's failure, and identical tracebacks show once,
streamed and in the error, for all the ranks that printed them."""

from __future__ import annotations

import pytest

from jupyter_distcomp.errors import RankError
from jupyter_distcomp.local.command import run_command

from .test_command import Lines, make_component, our_processes

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("launcher", ["torch.distributed", "mpi"])
def test_ranks_that_raise_the_same_error_are_one_failure_shown_once(tmp_path, launcher):
    component = make_component(tmp_path, launcher, 1, 4)
    lines = Lines()
    with pytest.raises(RankError) as caught:
        run_command(component, inputs={"mode": "raise"}, stream=lines, cwd=tmp_path)
    message = str(caught.value)
    assert "failed on ranks 0-3:" in message, message
    assert "stopped because of the failure" not in message, message
    assert message.count("ValueError: the shard is empty") == 1, message
    assert [r.stopped for r in caught.value.result.ranks] == [False] * 4
    texts = lines.texts()
    assert texts.count("[ranks 0-3] ValueError: the shard is empty") == 1, texts
    assert "[ranks 0-3] Traceback (most recent call last):" in texts, texts
    assert not [t for t in texts if t.startswith("[rank ") and "Traceback" in t], texts
    for rank in range(4):  # what each rank printed of its own still shows, labelled
        assert f"[rank {rank}] loading {rank}" in texts
    assert our_processes(tmp_path) == []


def test_a_traceback_a_rank_prints_and_goes_on_from_shows_where_it_was_printed(tmp_path):
    from jupyter_distcomp.core.tracebacks import HeldTracebacks

    held = HeldTracebacks()
    assert held.take(0, "stderr", "Traceback (most recent call last):") == ([], True)
    assert held.take(0, "stderr", '  File "x.py", line 1, in <module>') == ([], True)
    assert held.take(0, "stderr", "ValueError: caught") == ([], True)
    assert held.raised(0)
    assert held.take(0, "stdout", "going on") == ([], False)
    assert held.raised(0), "stdout says nothing of when stderr's lines came"
    released, kept = held.take(0, "stderr", "going on")
    assert released[-1] == "ValueError: caught" and not kept and not held.raised(0)
    held.take(1, "stderr", "Traceback (most recent call last):")
    held.take(1, "stderr", "KeyboardInterrupt")
    assert not held.raised(1), "an answer to our SIGINT is no failure of the rank's own"
    assert held.groups() == [([1], ["Traceback (most recent call last):", "KeyboardInterrupt"])]


WRONG = """
import torch.distributed as dist
import helper
dist.init_process_group("gloo")
helper.reduce_wrongly()
"""

HELPER = """
import torch.distributed as dist
def reduce_wrongly():
    dist.all_reduce([1.0])
"""

WRONG_SPEC = """
name: wrong
type: DistributedComponent
code: {code}
launcher:
  type: torch.distributed
  additional_arguments: python prog.py
"""


def test_the_same_error_on_two_nodes_is_shown_once_in_the_users_files_and_frames(tmp_path):
    """torch's ``[rankN]:`` before each line, each node's copy of the code, our ledger's
    wrapper around ``all_reduce``: none of it keeps the four ranks' identical errors apart,
    nor shows."""
    pytest.importorskip("torch")
    from jupyter_distcomp.core.spec_parsing import load_component

    code = tmp_path / "code"
    code.mkdir()
    (code / "prog.py").write_text(WRONG)
    (code / "helper.py").write_text(HELPER)
    component = load_component(WRONG_SPEC.format(code=code), base_dir=tmp_path)
    component.runsettings.resource_layout.configure(instance_count=2, process_count_per_node=2)
    lines = Lines()
    with pytest.raises(RankError) as caught:
        run_command(component, stream=lines, cwd=tmp_path, timeout=180)
    message = str(caught.value)
    texts = lines.texts()
    shown = "\n".join([*texts, message])
    assert "failed on ranks 0-3:" in message, message
    assert texts.count("[ranks 0-3] Traceback (most recent call last):") == 1, texts
    assert f'[ranks 0-3]   File "{code / "helper.py"}", line 4, in reduce_wrongly' in texts, texts
    assert "[ranks 0-3]              but got <class 'list'> instead." in texts, texts
    assert "rank_side" not in shown and "node-" not in shown and "[rank0]:" not in shown, shown
