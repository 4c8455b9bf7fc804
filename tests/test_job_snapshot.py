"""What a submit with diagnostics sends: the code snapshot with ``.distcomp/`` in it and the
command with its prefix, through the real azure-ai-ml client to the local stand-in of
Azure ML; the user's folder untouched. The rank side itself runs in test_job_side.py.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from jupyter_distcomp import AzureMLError, load_component
from jupyter_distcomp.azureml import submit
from jupyter_distcomp.azureml.snapshot import (
    DEBUG_FILES,
    JOB_FILES,
    RANK_SIDE,
    diagnosed_command,
    job_files,
)

from .azure_standin import AzureStandIn

SPEC = """\
name: train
type: DistributedComponent
inputs:
  epochs: {type: Integer, default: 4}
  tag: {type: String, optional: true}
launcher:
  type: mpi
  additional_arguments: python train.py --epochs {inputs.epochs} [--tag {inputs.tag}]
environment:
  name: AzureML-Minimal
"""
PLAIN = "python train.py --epochs ${{inputs.epochs}} $[[--tag ${{inputs.tag}}]]"
PREFIX = 'PYTHONPATH="$PWD/.distcomp/rank_side/job_site${PYTHONPATH:+:$PYTHONPATH}" '
OURS = {f".distcomp/rank_side/{name}" for name in JOB_FILES}


def test_what_travels_runs_on_python_3_8_and_needs_nothing_else():
    paths = [str(source) for source, _ in job_files(debug=True)]
    found = subprocess.run(
        [Path(sys.executable).with_name("vermin"), "--target=3.8-", "--violations", *paths],
        capture_output=True,
        text=True,
    )
    assert found.returncode == 0, found.stdout + found.stderr
    # every sibling a travelling file loads travels too (check mode's exchange aside: a
    # job never turns check mode on)
    # (a job submitted with --debug carries DEBUG_FILES too: the rank side of attach)
    travels = {Path(name).stem for name in JOB_FILES + DEBUG_FILES}
    everything = set()
    for source, _ in job_files(debug=True):
        text = source.read_text()
        loaded = set(re.findall(r'_sibling\("(\w+)"\)', text))
        loaded |= set(re.findall(r'"(\w+)\.py"\)', text))  # os.path.join(here, "x.py")
        assert loaded - travels <= {"check_exchange"}, (source.name, loaded - travels)
        if source.name != "debug_hook.py":  # its package import is for %distcomp command
            # ranks; in a job, compare.py is loaded by path (tests/test_job_attach.py runs it
            # on an interpreter without the package)
            assert "import jupyter_distcomp" not in text and "from jupyter_distcomp" not in text
        everything |= loaded
    # and nothing travels that no other travelling file loads (the sitecustomize aside, and
    # job_engine, the command of a job submitted with --cells)
    assert everything - {"check_exchange"} == travels - {"sitecustomize", "job_engine"}


@pytest.mark.parametrize(
    ("command", "form"),
    [
        ("python train.py --lr 0.1 > log.txt 2>&1", "assignment"),
        ("A=1 python 'a b.py' \"$X\" $[[--tag ${{inputs.tag}}]]", "assignment"),
        ("cd src && python train.py", "export"),
        ("pip install -r req.txt; python train.py", "export"),
        ("python a.py | tee out.txt", "export"),
        ("python a.py \\\n  --x 1", "export"),
        ("exec python train.py", "export"),
        ("python 'open quote", "export"),
    ],
)
def test_the_prefix_reaches_every_python_of_the_command(tmp_path, command, form):
    wrapped = diagnosed_command(command)
    if form == "assignment":
        assert wrapped == PREFIX + command
    else:
        assert wrapped == "export " + PREFIX.rstrip() + " && " + command


@pytest.mark.parametrize(
    "command",
    [
        "python -c 'import os; print(os.getpid(), os.environ[\"PYTHONPATH\"])'",
        "cd sub && python -c 'import os; print(os.getpid(), os.environ[\"PYTHONPATH\"])'",
    ],
)
@pytest.mark.parametrize("before", [None, "/opt/mine"])
def test_bash_puts_the_job_side_first_on_the_path(tmp_path, command, before):
    (tmp_path / "sub").mkdir()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}"
    if before:
        env["PYTHONPATH"] = before
    proc = subprocess.Popen(
        ["bash", "-c", diagnosed_command(command)],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        text=True,
    )
    out, _ = proc.communicate(timeout=60)
    pid, path = out.split()
    site = f"{tmp_path}/.distcomp/rank_side/job_site"
    assert path == (f"{site}:{before}" if before else site)  # $PWD before any cd
    if not command.startswith("cd "):
        assert int(pid) == proc.pid  # bash ran python in its place, as it did without


# -- through azure-ai-ml to the stand-in ----------------------------------------------------
def _tree(folder: Path) -> dict[str, tuple[bytes, int]]:
    return {
        str(p.relative_to(folder)): (p.read_bytes(), p.stat().st_mtime_ns)
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def _project(tmp_path: Path) -> Path:
    code = tmp_path / "proj"
    (code / "data").mkdir(parents=True)
    (code / "train.py").write_text("print('training')\n")
    (code / "data" / "big.bin").write_bytes(b"\0" * 1024)
    (code / ".gitignore").write_text(".*\n!.gitignore\ndata/\n")  # would hide .distcomp
    (code / "spec.yaml").write_text(SPEC)
    return code


def _submit(standin, code: Path) -> None:
    """The project's spec submitted with diagnostics."""
    spec = load_component(code / "spec.yaml")
    submit(spec, standin.ml_client(show_progress=False), compute="cpu", diagnose=True)


def _uploaded(standin, code_id: str = "") -> dict[str, bytes]:
    """The blobs uploaded (those of the code asset ``code_id``), by their path from the
    code folder's name on."""
    name = code_id.split("/codes/")[-1].split("/")[0][:8]
    return {
        path.split("/", 3)[3]: data
        for path, data in standin.blobs.items()
        if f"/azureml-blobstore-{name}" in path
    }


def _snapshots() -> set[str]:
    return {p.name for p in Path(tempfile.gettempdir()).glob("distcomp-snapshot-*")}


@pytest.fixture
def standin():
    pytest.importorskip("azure.ai.ml")
    with AzureStandIn() as server:
        yield server


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:The `context` parameter is deprecated")
def test_the_snapshot_carries_the_rank_side_and_the_user_folder_stays_as_it_was(standin, tmp_path):
    code = _project(tmp_path)
    before, snapshots = _tree(code), _snapshots()
    _submit(standin, code)
    uploaded = _uploaded(standin)
    assert set(uploaded) == {"proj/train.py", "proj/spec.yaml", "proj/.gitignore"} | {
        f"proj/{name}" for name in OURS
    }  # the user's ignore rules held: data/ stayed home
    for name in JOB_FILES:
        assert uploaded[f"proj/.distcomp/rank_side/{name}"] == (RANK_SIDE / name).read_bytes()
    assert uploaded["proj/train.py"] == b"print('training')\n"
    (put,) = standin.job_puts()
    assert put.body["properties"]["command"] == PREFIX + PLAIN
    assert _tree(code) == before  # nothing written, nothing touched
    assert _snapshots() == snapshots  # the temporary copy is gone


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:The `context` parameter is deprecated")
def test_the_users_own_amlignore_travels_with_ours_let_in(standin, tmp_path):
    code = _project(tmp_path)
    rules = "data/\n.*\n!.amlignore\n"
    (code / ".amlignore").write_text(rules)
    _submit(standin, code)
    uploaded = _uploaded(standin)
    assert {name for name in uploaded if ".distcomp" in name} == {f"proj/{n}" for n in OURS}
    assert uploaded["proj/.amlignore"].decode().startswith(rules.rstrip())
    assert "!/.distcomp/**" in uploaded["proj/.amlignore"].decode()
    assert "proj/.gitignore" not in uploaded and "proj/data/big.bin" not in uploaded
    assert (code / ".amlignore").read_text() == rules  # the user's file, unchanged


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:The `context` parameter is deprecated")
def test_a_refused_job_keeps_the_plain_job_and_leaves_no_copy(standin, tmp_path):
    code = _project(tmp_path)
    snapshots = _snapshots()
    standin.fail("PUT", "/jobs/", 400, "no such compute", code="UserError")
    with pytest.raises(AzureMLError, match="no such compute") as info:
        _submit(standin, code)
    assert (Path(info.value.job.code), info.value.job.command) == (code, PLAIN)
    assert _snapshots() == snapshots


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:The `context` parameter is deprecated")
def test_submit_magic_diagnoses_by_default_and_not_when_told(ip, standin, tmp_path, monkeypatch):
    from .test_azureml_submit import _configure

    code = _project(tmp_path)
    monkeypatch.chdir(code)
    assert ip.run_cell(f"%%distcomp train\n{SPEC}").success
    _configure(ip, standin)
    runs = [
        "%distcomp submit train --compute cpu",
        "%distcomp submit train --compute cpu --no-diagnose",
        "%distcomp submit train --compute cpu --diagnose",
    ]
    for line in runs:
        result = ip.run_cell(line)
        assert result.success, result.error_in_exec
    ip.run_line_magic("config", "AzureML.diagnose = False")
    try:
        assert ip.run_cell(runs[0]).success
    finally:
        ip.run_line_magic("config", "AzureML.diagnose = True")
    bodies = [put.body["properties"] for put in standin.job_puts()]
    assert [body["command"] for body in bodies] == [PREFIX + PLAIN, PLAIN, PREFIX + PLAIN, PLAIN]
    ours = [{n for n in _uploaded(standin, b["codeId"]) if ".distcomp/" in n} for b in bodies]
    assert ours == [{f"proj/{name}" for name in OURS}, set()] * 2


def _defined_with_a_key(ip, standin, tmp_path, monkeypatch) -> Path:
    """The component ``train`` defined in its project, the session on ``standin``; the
    user's public SSH key file."""
    from .test_azureml_submit import _configure

    code = _project(tmp_path)
    monkeypatch.chdir(code)
    public = tmp_path / "me.pub"
    public.write_text(
        "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIJustATestKeyForTheJobsSshService me@here\n"
    )
    assert ip.run_cell(f"%%distcomp train\n{SPEC}").success
    _configure(ip, standin)
    return public


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:The `context` parameter is deprecated")
def test_submit_debug_sends_the_ssh_service_the_attach_side_and_its_variables(
    ip, standin, tmp_path, monkeypatch
):
    public = _defined_with_a_key(ip, standin, tmp_path, monkeypatch)
    line = f"%distcomp submit train --compute cpu --debug --idle-limit 12 --ssh-key {public}"
    result = ip.run_cell(line)
    assert result.success, result.error_in_exec
    bad = ip.run_cell(
        f"%distcomp submit train --compute cpu --debug --idle-limit 0 --ssh-key {public}"
    )
    assert "--idle-limit 0: a breakpoint must wait some minutes" in str(bad.error_in_exec)
    (put,) = standin.job_puts()
    name, body = put.path.rsplit("/", 1)[-1], put.body["properties"]
    assert body["environmentVariables"] == {
        "DISTCOMP_ATTACH_DIR": f"/tmp/distcomp-attach-{name}",
        "DISTCOMP_IDLE_MINUTES": "12",
    }
    (ssh,) = [s for s in body["services"].values() if s["jobServiceType"] == "SSH"]
    assert ssh["properties"]["sshPublicKeys"] == public.read_text().strip()
    assert ssh["nodes"] == {"nodesValueType": "All"}
    assert body["command"] == PREFIX + PLAIN
    ours = {n for n in _uploaded(standin, body["codeId"]) if ".distcomp/" in n}
    assert ours == {f"proj/{n}" for n in OURS} | {
        f"proj/.distcomp/rank_side/{n}" for n in DEBUG_FILES
    }


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:The `context` parameter is deprecated")
def test_submit_debug_cells_runs_the_engine_in_the_specs_python_instead_of_its_command(
    ip, standin, tmp_path, monkeypatch
):
    public = _defined_with_a_key(ip, standin, tmp_path, monkeypatch)
    alone = ip.run_cell(f"%distcomp submit train --compute cpu --cells --ssh-key {public}")
    assert "--cells needs --debug" in str(alone.error_in_exec)
    line = f"%distcomp submit train --compute cpu --debug --cells --ssh-key {public}"
    result = ip.run_cell(line)
    assert result.success, result.error_in_exec
    (put,) = standin.job_puts()
    body = put.body["properties"]
    assert body["environmentVariables"]["DISTCOMP_CELLS"] == "1"
    assert body["command"] == PREFIX + "python .distcomp/rank_side/job_engine.py"


@pytest.mark.parametrize(
    ("command", "expected"),
    [
        ("python train.py --epochs 3", "python"),
        ("/opt/conda/bin/python3.10 -u train.py", "/opt/conda/bin/python3.10"),
        ("torchrun --nproc_per_node 2 train.py", "python"),
        ("", "python"),
    ],
)
def test_a_cells_job_runs_the_engine_in_the_python_its_command_names(command, expected):
    from jupyter_distcomp.azureml.debugged import cells_command

    assert cells_command(command) == f"{expected} .distcomp/rank_side/job_engine.py"


def test_each_sitecustomize_on_the_path_runs_once(tmp_path):
    """The job's, then ``%distcomp command``'s (a job the stand-in runs has both), then the
    image's own: each chains to the next one on the path, none back to an earlier one."""
    mine = tmp_path / "image_site"
    mine.mkdir()
    (mine / "sitecustomize.py").write_text("print('the image site ran')\n")
    ours = [str(RANK_SIDE / "job_site"), str(RANK_SIDE / "stack_site")]
    env = {k: v for k, v in os.environ.items() if not k.startswith("DISTCOMP_")}
    for path in ([*ours, str(mine)], [ours[0], *ours, str(mine)]):
        env["PYTHONPATH"] = os.pathsep.join(path)
        done = subprocess.run(
            [sys.executable, "-c", "print('the program ran')"],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert (done.stdout, done.stderr) == ("the image site ran\nthe program ran\n", "")
