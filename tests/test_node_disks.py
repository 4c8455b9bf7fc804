"""Each emulated node of ``%distcomp command`` has its own disk, as Azure ML's nodes do: its
own copy of the code folder as working directory and its own TMPDIR; outputs are shared.

The programs run on real ranks (plain processes and mpiexec ranks) and report what they saw
through the shared output folder, as a user's script would.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from jupyter_distcomp.core.spec_parsing import load_component
from jupyter_distcomp.errors import SpecError
from jupyter_distcomp.local.command import run_command
from jupyter_distcomp.machine import node_disks

#: rank 0 saves a checkpoint in its working directory (as pytorch/examples' multinode.py
#: does) and a result in the shared output; rank 1 looks for both once rank 0 is done
PROGRAM = r"""
import json, os, sys, tempfile, time
out = sys.argv[1]
rank = int(os.environ.get("RANK", os.environ.get("OMPI_COMM_WORLD_RANK", "-1")))
if rank == 0:
    with open("snapshot.pt", "w") as f:
        f.write("node 0's model")
    with open(os.path.join(tempfile.gettempdir(), "cache"), "w") as f:
        f.write("node 0")
    with open(os.path.join(out, "result.txt"), "w") as f:
        f.write("from node 0")
    open(os.path.join(out, "done0"), "w").close()
else:
    deadline = time.time() + 30
    while not os.path.exists(os.path.join(out, "done0")) and time.time() < deadline:
        time.sleep(0.02)
seen = {
    "cwd": os.getcwd(),
    "tmp": tempfile.gettempdir(),
    "snapshot": os.path.exists("snapshot.pt"),
    "tmp_cache": os.path.exists(os.path.join(tempfile.gettempdir(), "cache")),
    "shared_output": os.path.exists(os.path.join(out, "result.txt")),
    "own_code": open("prog.py").read() == open(os.path.join(sys.argv[2], "prog.py")).read(),
}
with open(os.path.join(out, f"rank{rank}.json"), "w") as f:
    json.dump(seen, f)
"""

SPEC = """
name: disks
type: DistributedComponent
outputs:
  out: {{type: path}}
code: {code}
launcher:
  type: {launcher}
  additional_arguments: python prog.py {{outputs.out}} {code}
"""


def make_component(tmp_path: Path, launcher: str, nodes: int):
    code = tmp_path / "code"
    code.mkdir(exist_ok=True)
    (code / "prog.py").write_text(PROGRAM)
    component = load_component(SPEC.format(code=code, launcher=launcher), base_dir=tmp_path)
    component.runsettings.resource_layout.configure(instance_count=nodes, process_count_per_node=1)
    return component


@pytest.mark.slow
@pytest.mark.parametrize("launcher", ["torch.distributed", "mpi"])
def test_a_file_node_0_writes_in_its_folder_is_invisible_to_node_1(tmp_path, launcher):
    component = make_component(tmp_path, launcher, nodes=2)
    out = tmp_path / "out"
    run_command(component, outputs={"out": str(out)}, stream=None, cwd=tmp_path)

    node0, node1 = (json.loads((out / f"rank{r}.json").read_text()) for r in range(2))
    assert node0["snapshot"] and node0["tmp_cache"]  # a node sees what it wrote itself
    assert not node1["snapshot"], "node 1 found node 0's checkpoint in its working directory"
    assert not node1["tmp_cache"], "node 1 found node 0's file in its temp folder"
    assert node1["shared_output"]  # outputs are one shared place, as Azure ML mounts them
    assert node0["own_code"] and node1["own_code"]  # each runs the user's code, copied
    assert node0["cwd"] != node1["cwd"] and node0["tmp"] != node1["tmp"]
    # nothing a node wrote landed in the user's code folder, and the copies are gone
    assert sorted(p.name for p in (tmp_path / "code").iterdir()) == ["prog.py"]
    assert not Path(node0["cwd"]).exists() and not Path(node1["tmp"]).exists()


@pytest.mark.slow
@pytest.mark.parametrize("launcher", ["torch.distributed", "mpi"])
def test_one_node_runs_in_a_copy_too_and_leaves_the_code_folder_as_it_was(tmp_path, launcher):
    """A one-node run that saves a checkpoint in its working directory leaves nothing in the
    code folder, where the next run (or a submit, which uploads it) would find it."""
    component = make_component(tmp_path, launcher, nodes=1)
    out = tmp_path / "out"
    run_command(component, outputs={"out": str(out)}, stream=None, cwd=tmp_path)
    seen = json.loads((out / "rank0.json").read_text())
    assert seen["snapshot"] and seen["cwd"].endswith("/node-0/code")
    assert seen["tmp"].endswith("/node-0/tmp") and not Path(seen["cwd"]).exists()
    assert sorted(p.name for p in (tmp_path / "code").iterdir()) == ["prog.py"]


def test_a_code_folder_over_azure_mls_snapshot_limit_is_refused_before_a_start(tmp_path):
    component = make_component(tmp_path, "torch.distributed", nodes=2)
    data = tmp_path / "code" / "data"
    data.mkdir()
    for i in range(node_disks.SNAPSHOT_MAX_FILES):
        (data / f"{i}.csv").write_text("x")
    out = tmp_path / "out"
    with pytest.raises(SpecError) as caught:
        run_command(component, outputs={"out": str(out)}, stream=None, cwd=tmp_path)
    message = str(caught.value)
    assert "2001 files" in message and "300 MB, 2000 files" in message
    assert ".amlignore" in message and "storage-limits-of-experiment-snapshots" in message
    assert not list(out.glob("rank*.json"))  # no rank started

    # listed in .amlignore, as Azure ML's snapshot leaves it out, the folder is copied
    (tmp_path / "code" / ".amlignore").write_text("# data is an input\ndata/\n")
    run_command(component, outputs={"out": str(out)}, stream=None, cwd=tmp_path)
    assert json.loads((out / "rank1.json").read_text())["own_code"]


def test_a_copy_is_a_separate_file_with_the_same_mode(tmp_path):
    code = tmp_path / "code"
    (code / "sub").mkdir(parents=True)
    script = code / "sub" / "run.sh"
    script.write_text("#!/bin/sh\necho hi\n")
    script.chmod(0o755)
    (code / "link").symlink_to("sub/run.sh")
    (code / "__pycache__").mkdir()
    (code / ".gitignore").write_text("__pycache__/\n*.log\n")
    (code / "x.log").write_text("log")
    disks = node_disks.make_node_disks(code, 2)
    try:
        copy = Path(disks.code[1], "sub", "run.sh")
        assert copy.read_text() == script.read_text() and os.access(copy, os.X_OK)
        assert copy.stat().st_ino != script.stat().st_ino  # not a hard link
        copy.write_text("changed on node 1")
        assert script.read_text() == "#!/bin/sh\necho hi\n"
        link = Path(disks.code[0], "link")  # a link is copied as what it points to
        assert not link.is_symlink() and link.read_text() == script.read_text()
        assert os.access(link, os.X_OK)
        assert sorted(os.listdir(disks.code[0])) == [".gitignore", "link", "sub"]
        assert disks.environment(1) == {"TMPDIR": disks.tmp[1], "PWD": disks.code[1]}
    finally:
        disks.remove()
    assert not Path(disks.root).exists()


# -- what a snapshot holds: a link's content, never a link; no FIFO or device --------------


def test_a_link_is_copied_as_its_content_and_a_write_never_reaches_the_users_file(tmp_path):
    code, shared = tmp_path / "code", tmp_path / "shared"
    (code / "configs").mkdir(parents=True)
    (shared / "lib").mkdir(parents=True)
    default = code / "configs" / "default.json"
    default.write_text('{"lr": 0.1}')
    (code / "config.json").symlink_to(default)  # absolute, inside the folder
    (shared / "settings.txt").write_text("outside")
    (code / "settings.txt").symlink_to("../shared/settings.txt")  # relative, leaves the folder
    (shared / "lib" / "util.py").write_text("X = 1\n")
    (code / "lib").symlink_to(shared / "lib")  # a folder outside the folder
    disks = node_disks.make_node_disks(code, 2)
    try:
        node1 = Path(disks.code[1])
        for name in ("config.json", "settings.txt", "lib", "lib/util.py"):
            assert not (node1 / name).is_symlink(), f"{name} was copied as a link"
        assert (node1 / "settings.txt").read_text() == "outside"  # no dangling link on node 1
        assert (node1 / "lib" / "util.py").read_text() == "X = 1\n"
        (node1 / "config.json").write_text('{"lr": 999}')
        (node1 / "settings.txt").write_text("node 1")
        (node1 / "lib" / "util.py").write_text("X = 999\n")
        assert default.read_text() == '{"lr": 0.1}', "a write on node 1 reached the user's file"
        assert (shared / "settings.txt").read_text() == "outside"
        assert (shared / "lib" / "util.py").read_text() == "X = 1\n"
        assert Path(disks.code[0], "config.json").read_text() == '{"lr": 0.1}'
    finally:
        disks.remove()
    assert default.read_text() == '{"lr": 0.1}' and (code / "config.json").is_symlink()


def test_the_snapshot_limit_counts_what_a_link_points_to(tmp_path):
    code = tmp_path / "code"
    code.mkdir()
    big = tmp_path / "weights.bin"
    with open(big, "wb") as f:  # sparse: no disk used
        f.truncate(node_disks.SNAPSHOT_MAX_BYTES + 1)
    (code / "weights.bin").symlink_to(big)
    with pytest.raises(SpecError) as caught:
        node_disks.make_node_disks(code, 2)
    assert "1 files, 300 MB" in str(caught.value) and "over Azure ML's limit" in str(caught.value)


def test_a_link_to_nothing_or_to_a_folder_above_it_is_refused_saying_which(tmp_path):
    code = tmp_path / "code"
    (code / "sub").mkdir(parents=True)
    (code / "gone.txt").symlink_to(tmp_path / "missing.txt")
    with pytest.raises(SpecError) as caught:
        node_disks.make_node_disks(code, 2)
    message = str(caught.value)
    assert f"gone.txt is a link to {tmp_path / 'missing.txt'}, which does not exist" in message
    assert "Fix: remove the link, or list it in the code folder's .amlignore" in message

    (code / "gone.txt").unlink()
    (code / "sub" / "up").symlink_to("..")  # a snapshot that follows it never ends
    with pytest.raises(SpecError) as caught:
        node_disks.make_node_disks(code, 2)
    message = str(caught.value)
    assert "sub/up" in message and "a folder that holds it" in message and ".amlignore" in message

    (code / ".amlignore").write_text("up\n")
    disks = node_disks.make_node_disks(code, 2)
    disks.remove()


def test_a_fifo_a_device_or_a_socket_is_refused_before_any_copy_and_amlignore_leaves_it_out(
    tmp_path,
):
    import socket

    code = tmp_path / "code"
    code.mkdir()
    (code / "train.py").write_text("print(1)\n")
    os.mkfifo(code / "logpipe")
    (code / "null").symlink_to("/dev/null")  # a character device, through a link
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(code / "control.sock"))
    try:
        with pytest.raises(SpecError) as caught:
            node_disks.make_node_disks(code, 2, root=str(tmp_path))
    finally:
        server.close()
    message = str(caught.value)
    assert "logpipe (a FIFO)" in message and "null (a device)" in message
    assert "control.sock (a socket)" in message
    assert "Fix: list it in the code folder's .amlignore" in message
    assert not list(tmp_path.glob("nodes-*")), "copies were left behind"

    (code / ".amlignore").write_text("logpipe\nnull\ncontrol.sock\n")
    disks = node_disks.make_node_disks(code, 2)
    try:
        assert sorted(os.listdir(disks.code[1])) == [".amlignore", "train.py"]
    finally:
        disks.remove()


def test_a_command_on_two_nodes_with_a_fifo_in_its_code_folder_is_refused_at_once(tmp_path):
    component = make_component(tmp_path, "torch.distributed", nodes=2)
    os.mkfifo(tmp_path / "code" / "logpipe")
    out = tmp_path / "out"
    with pytest.raises(SpecError) as caught:
        run_command(component, outputs={"out": str(out)}, stream=None, cwd=tmp_path, timeout=10)
    assert "logpipe (a FIFO)" in str(caught.value)
    assert not list(out.glob("rank*.json"))  # no rank started
