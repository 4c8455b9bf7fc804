"""The line a rank of a diagnosed job writes (rank_side/job_line.py): who the rank is, by
each launcher's variables, and the line's shape. The processes that write it are in
test_job_side.py."""

from __future__ import annotations

import json
import os

import pytest

from jupyter_distcomp.core.layout import rank_environments
from jupyter_distcomp.rank_side import job_line
from jupyter_distcomp.rank_side.ledger_words import COLLECTIVE, Entry


@pytest.mark.parametrize(
    ("launcher", "rank", "expected"),
    [
        ("torch.distributed", 5, {"rank": 5, "size": 6, "local_rank": 2, "node": 1}),
        ("deepspeed", 0, {"rank": 0, "size": 6, "local_rank": 0, "node": 0}),
        ("mpi", 4, {"rank": 4, "size": 6, "local_rank": 1, "node": 1}),
        ("tensorflow", 1, {"rank": 1, "size": 2, "local_rank": None, "node": 1}),
    ],
)
def test_each_launchers_variables_name_the_rank(launcher, rank, expected):
    """The variables Azure ML gives each rank (core/layout.py): 2 nodes x 3 processes
    (TensorFlow: a worker a node)."""
    envs = rank_environments(launcher, 2, 3)
    assert job_line.identity(envs[rank]) == expected


def test_without_azure_mls_node_rank_open_mpis_local_size_places_the_rank():
    env = {"OMPI_COMM_WORLD_RANK": "7", "OMPI_COMM_WORLD_SIZE": "8"}
    env.update(OMPI_COMM_WORLD_LOCAL_RANK="3", OMPI_COMM_WORLD_LOCAL_SIZE="4")
    assert job_line.identity(env) == {"rank": 7, "size": 8, "local_rank": 3, "node": 1}
    ps = {"cluster": {"worker": ["a:1", "b:1"], "ps": ["c:1"]}, "task": {"type": "ps", "index": 0}}
    assert job_line.identity({"TF_CONFIG": json.dumps(ps)})["rank"] == 2  # after the workers
    assert job_line.identity({"AZUREML_PROCESS_NAME": "rank_3"})["rank"] == 3
    assert job_line.identity({}) == {"rank": 0, "size": 1, "local_rank": None, "node": None}
    assert job_line.identity({"RANK": "x", "TF_CONFIG": "{"})["rank"] == 0


def test_the_users_frames_are_kept_named_from_the_code_folder(tmp_path):
    code = tmp_path / "code"
    (code / "pkg").mkdir(parents=True)
    (code / "pkg" / "train.py").write_text("import x\n\ndef step():\n    dist.all_reduce(t)\n")
    library = str(tmp_path / "site-packages" / "torch") + os.sep
    frames = job_line.Frames(str(code), str(tmp_path / "ours"), lambda: (library,))
    places = [
        ("<frozen runpy>", 88, "_run_code"),
        (str(code / "pkg" / "train.py"), 4, "step"),
        (os.__file__, 1, "fspath"),  # the standard library
        (library + "distributed/c10d.py", 9, "all_reduce"),  # a library the ledger records
        (str(tmp_path / "ours" / "job_watch.py"), 3, "say"),  # ours
        ("<string>", 1, "<module>"),  # python -c: the user's
    ]
    assert frames.named(places) == [
        {"file": "pkg/train.py", "line": 4, "function": "step", "code": "dist.all_reduce(t)"},
        {"file": "<string>", "line": 1, "function": "<module>", "code": ""},
    ]


def test_the_line_is_one_marked_json_line_within_ascii(monkeypatch):
    monkeypatch.setattr(os, "environ", {"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1"})
    call = Entry(3, 1.5, 0.0, COLLECTIVE, "default group", "all_reduce", "[4] float32", "sum")
    calls = [call] * 70
    threads = [{"name": "MainThread", "main": True, "frames": [{"code": "print('é\\n')"}]}]
    data = job_line.line("stall", threads, calls, stalled=301.25, error=None)
    assert data.endswith(b"\n") and data.count(b"\n") == 1
    text = data.decode("ascii")
    assert text.startswith(job_line.MARK)
    state = json.loads(text[len(job_line.MARK) :])
    assert (state["v"], state["rank"], state["size"], state["reason"]) == (1, 1, 2, "stall")
    assert state["pid"] == os.getpid() and state["stalled"] == 301.2
    assert len(state["calls"]) == job_line.MAX_CALLS
    assert state["calls"][0] == {
        "seq": 3,
        "started": 1.5,
        "finished": 0.0,
        "kind": "c",
        "group": "default group",
        "op": "all_reduce",
        "data": "[4] float32",
        "reduce": "sum",
        "root": "",
        "file": "",
        "line": 0,
        "function": "",
        "posted": False,
        "gpu": "",
        "bucket": False,
    }
    assert state["threads"][0]["frames"][0]["code"] == "print('é\\n')"
    assert job_line.error_text(ValueError, ValueError("bad\nshape")) == "ValueError: bad\nshape"
