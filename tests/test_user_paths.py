"""A user reads their own files and frames: the one rule that names a node's copy of a folder
as the user's folder (machine/node_disks.py), and the one that leaves our wrappers' frames
out of a traceback, in the three shapes tracebacks reach us (core/tracebacks.py)."""

from __future__ import annotations

from pathlib import Path

from jupyter_distcomp.core.tracebacks import HookFrames, without_hook_frames
from jupyter_distcomp.machine import node_disks


def test_a_nodes_copy_is_named_as_the_users_folder_while_the_copies_exist(tmp_path):
    code = tmp_path / "project"
    code.mkdir()
    (code / "train.py").write_text("print('hi')\n")
    disks = node_disks.make_node_disks(code, 2)
    one, two = (str(Path(copy, "train.py")) for copy in disks.code)
    line = f'  File "{two}", line 1, in <module>'
    assert node_disks.user_text(line) == f'  File "{code / "train.py"}", line 1, in <module>'
    assert node_disks.user_path(one) == node_disks.user_path(two) == str(code / "train.py")
    assert node_disks.node_paths(str(code / "train.py")) == [one, two]
    assert node_disks.node_paths(str(tmp_path / "elsewhere.py")) == []
    assert node_disks.user_text("no copy here") == "no copy here"
    disks.remove()
    assert node_disks.user_path(two) == two  # gone with its run: nothing to name
    assert node_disks.node_paths(str(code / "train.py")) == []


HOOK = "/venv/site-packages/jupyter_distcomp/rank_side/ledger_torch.py"

PYTHON = [
    "Traceback (most recent call last):",
    '  File "/home/u/train.py", line 9, in <module>',
    "    dist.all_reduce(x)",
    f'  File "{HOOK}", line 322, in call',
    "    return fn(*args, **kwargs)",
    "           ^^^^^^^^^^^^^^^^^^^",
    '  File "/venv/site-packages/torch/distributed/distributed_c10d.py", line 2, in all_reduce',
    "    work = group.allreduce([tensor], opts)",
    "RuntimeError: no tensor",
]


def test_our_wrappers_frames_are_left_out_of_a_python_traceback():
    kept = without_hook_frames(PYTHON)
    assert kept == PYTHON[:3] + PYTHON[6:]


def test_and_behind_torchs_rank_prefix_line_by_line_per_rank():
    frames = HookFrames()
    prefixed = [f"[rank1]: {line}" for line in PYTHON]
    shown = []
    for zero, one in zip(PYTHON, prefixed, strict=True):  # two ranks' lines interleaved
        shown += [line for rank, line in ((0, zero), (1, one)) if frames.keep(rank, line)]
    assert [line for line in shown if "rank_side" in line or "fn(*args" in line] == []
    assert "[rank1]: RuntimeError: no tensor" in shown and "RuntimeError: no tensor" in shown
    assert f"[rank1]: {PYTHON[6]}" in shown


def test_and_out_of_an_ipython_traceback_with_its_marked_line():
    ipython = [
        "Cell In[3], line 2",
        "      1 x = torch.ones(2)",
        "----> 2 dist.all_reduce(x)",
        "",
        f"File {HOOK}:322, in call(*args, **kwargs)",
        "    320 def call(*args, **kwargs):",
        "--> 322     return fn(*args, **kwargs)",
        "",
        "RuntimeError: no tensor",
    ]
    assert without_hook_frames(ipython) == ipython[:4] + ipython[7:]


def test_the_same_traceback_behind_each_ranks_prefix_is_held_as_one():
    from jupyter_distcomp.core.tracebacks import HeldTracebacks

    held = HeldTracebacks()
    body = [*PYTHON[:-1], "TypeError: Invalid function argument.", "     but got a list."]
    for rank in (0, 1):
        for line in body:
            assert held.take(rank, "stderr", f"[rank{rank}]: {line}") == ([], True)
    assert held.raised(0) and held.raised(1)  # the message's second line is still its error
    assert held.groups() == [([0, 1], body)]
