"""The rank side of ``%distcomp attach`` (rank_side/job_attach.py) on a real process, without
SSH: the kernel's side is a debugger channel here and the attach file the notebook would
write over SSH; the rank runs on the base interpreter of this virtual environment, which has
no package of ours (the job's rank side is standard library only, in a code snapshot).

A ``breakpoint()`` waits for the notebook and stops at the group prompt (``p``, ``compare``,
``c``); without a notebook for the idle limit the rank runs on, as it does when the notebook
goes away at the prompt; a folder another user could read turns attach off.
"""

from __future__ import annotations

import builtins
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from jupyter_distcomp.azureml.snapshot import job_files
from jupyter_distcomp.local.attached import nodes as node_side
from jupyter_distcomp.local.debug.channel import DebugChannel
from jupyter_distcomp.local.debug.serve import serve

pytestmark = pytest.mark.slow

PROGRAM = """\
import os
x = int(os.environ["RANK"]) * 10 + 7
breakpoint()
print("after", x, flush=True)
"""
BASE_PYTHON = getattr(sys, "_base_executable", sys.executable)


def _snapshot(tmp_path: Path) -> Path:
    """The code folder as a job submitted with --debug has it (the program, .distcomp/)."""
    code = tmp_path / "code"
    for source, name in job_files(debug=True):
        (code / name).parent.mkdir(parents=True, exist_ok=True)
        (code / name).write_bytes(source.read_bytes())
    (code / "train.py").write_text(PROGRAM)
    return code


def _start(
    tmp_path: Path, idle_minutes: float = 5.0, rank: int = 1
) -> tuple[subprocess.Popen, str]:
    code = _snapshot(tmp_path)
    folder = str(tmp_path / "attach")
    env = {
        "PATH": os.environ["PATH"],
        "PYTHONPATH": str(code / ".distcomp/rank_side/job_site"),
        "DISTCOMP_ATTACH_DIR": folder,
        "DISTCOMP_IDLE_MINUTES": str(idle_minutes),
        "RANK": str(rank),
        "WORLD_SIZE": "2",
        "AZUREML_CR_NODE_RANK": "0",
    }
    proc = subprocess.Popen(
        [BASE_PYTHON, "train.py"],
        cwd=code,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    return proc, folder


def _waiting(folder: str, timeout: float = 60, after: float = 0.0) -> dict:
    """The rank's beacon once it says it waits at a breakpoint (since later than ``after``)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for name in os.listdir(folder) if os.path.isdir(folder) else ():
            if name.startswith("proc-") and name.endswith(".json"):
                try:
                    data = json.loads(Path(folder, name).read_text())
                except ValueError:
                    continue
                if data.get("waiting") and data["waiting"]["since"] > after:
                    return data
        time.sleep(0.05)
    raise AssertionError(f"no rank waits at a breakpoint in {folder}")


def _attach(folder: str, channel: DebugChannel, session: str = "s1") -> None:
    data = node_side.attach_data(session, channel.port, channel.key_hex, 0)
    path = Path(node_side.attach_file(folder, 0))
    path.write_text(data)
    path.chmod(0o600)


def _answers(monkeypatch, lines: list[str]) -> list[str]:
    prompts: list[str] = []
    pending = list(lines)

    def person(prompt: str = "") -> str:
        prompts.append(prompt)
        return pending.pop(0) if pending else "c"

    monkeypatch.setattr(builtins, "input", person)
    return prompts


def _serve(channel: DebugChannel, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not channel.pending():
        assert time.monotonic() < deadline, "the rank never stopped at the prompt"
        channel.wait_change(channel.version, 0.1)
    serve(channel, label=lambda r: f"[rank {r}]", name="job")


def test_a_breakpoint_waits_for_the_notebook_then_stops_at_its_prompt(
    tmp_path, monkeypatch, capsys
):
    proc, folder = _start(tmp_path)
    channel = DebugChannel("127.0.0.1")
    try:
        beacon = _waiting(folder)
        assert beacon["rank"] == 1 and beacon["node"] == 0 and beacon["pid"] == proc.pid
        assert oct(os.stat(folder).st_mode & 0o777) == "0o700"
        time.sleep(0.5)
        assert proc.poll() is None  # still waiting: nobody attached
        prompts = _answers(monkeypatch, ["p x", "compare x", "c"])
        _attach(folder, channel)
        _serve(channel)
        out, err = proc.communicate(timeout=30)
    finally:
        channel.close()
        proc.kill()
    shown = capsys.readouterr().out
    assert prompts[:3] == ["(Pdb rank 1) "] * 3, prompts
    assert "17" in shown and "compare `x` on 1 rank" in shown, shown
    assert proc.returncode == 0 and "after 17" in out, err
    assert "waiting for the notebook (`%distcomp attach`) for 5 min at most" in err
    assert "jupyter_distcomp" not in err  # nothing of the package was needed


def test_without_a_notebook_the_rank_runs_on_after_the_idle_limit(tmp_path):
    proc, _ = _start(tmp_path, idle_minutes=0.03)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0 and "after 17" in out, err
    assert "no notebook attached within 0.03 min (DISTCOMP_IDLE_MINUTES)" in err, err
    assert "the rank runs on" in err


def test_a_notebook_that_goes_away_at_the_prompt_lets_the_rank_run_on(tmp_path, monkeypatch):
    proc, folder = _start(tmp_path)
    channel = DebugChannel("127.0.0.1")
    try:
        _waiting(folder)

        def gone(prompt: str = "") -> str:
            channel.end_sessions()  # as a detach or a dead kernel does
            raise KeyboardInterrupt

        monkeypatch.setattr(builtins, "input", gone)
        _attach(folder, channel)
        with pytest.raises(KeyboardInterrupt):
            _serve(channel)
        out, err = proc.communicate(timeout=30)
    finally:
        channel.close()
        proc.kill()
    assert proc.returncode == 0 and "after 17" in out, err
    assert "rank 1: the notebook detached; the rank runs on" in err


def test_a_stale_attach_is_skipped_and_the_next_one_is_waited_for(tmp_path, monkeypatch):
    proc, folder = _start(tmp_path)
    gone = DebugChannel("127.0.0.1")
    gone.close()  # a notebook whose tunnel no longer answers (a killed kernel's)
    channel = DebugChannel("127.0.0.1")
    try:
        first = _waiting(folder)["waiting"]["since"]
        _attach(folder, gone, "old")
        _waiting(folder, after=first)  # the stale tunnel refused: the rank waits again
        assert proc.poll() is None
        _answers(monkeypatch, ["c"])
        _attach(folder, channel, "new")
        _serve(channel)
        out, err = proc.communicate(timeout=30)
    finally:
        channel.close()
        proc.kill()
    assert proc.returncode == 0 and "after 17" in out, err


def test_a_folder_others_can_read_turns_attach_off(tmp_path):
    folder = tmp_path / "attach"
    folder.mkdir(mode=0o755)
    folder.chmod(0o755)
    proc, _ = _start(tmp_path, idle_minutes=0.01)
    _, err = proc.communicate(timeout=60)
    assert "is not a folder of this user's alone: `%distcomp attach` is off here" in err, err
    assert not list(folder.glob("proc-*"))  # the rank left nothing there


QUIET = """\
import sys
print("out", sum(range(10)), flush=True)
print("err", file=sys.stderr, flush=True)
sys.exit(3)
"""


def test_a_job_nobody_attaches_to_ends_as_without_debug(tmp_path):
    """No breakpoint(): the same exit status and output with the rank side of attach armed
    as with the diagnostics alone."""
    code = _snapshot(tmp_path)
    (code / "quiet.py").write_text(QUIET)
    env = {
        "PATH": os.environ["PATH"],
        "PYTHONPATH": str(code / ".distcomp/rank_side/job_site"),
        "RANK": "0",
        "WORLD_SIZE": "1",
    }
    runs = []
    for extra in ({}, {"DISTCOMP_ATTACH_DIR": str(tmp_path / "attach")}):
        done = subprocess.run(
            [BASE_PYTHON, "quiet.py"],
            cwd=code,
            env={**env, **extra},
            capture_output=True,
            text=True,
        )
        runs.append((done.returncode, done.stdout, done.stderr))
    assert runs[0] == runs[1] == (3, "out 45\n", "err\n")
    assert [p.name.split("-")[0] for p in (tmp_path / "attach").iterdir()] == ["proc", "proc"]


SIGNALS = """\
import signal
print("usr2", signal.getsignal(signal.SIGUSR2) in (signal.SIG_IGN, signal.SIG_DFL), flush=True)
"""


def test_pause_takes_sigusr2_only_where_the_program_left_it_at_its_default(tmp_path):
    """JupyterLab's Pause reaches a job's rank by the signal local ranks take it by, through
    a handler of the rank side; a rank whose SIGUSR2 was set before it started (ignored, by
    its launcher) keeps it, and its file tells attach that Pause does not reach it."""
    from jupyter_distcomp.rank_side import dap_side, job_attach

    assert job_attach.PAUSE_SIGNAL == dap_side.PAUSE_SIGNAL
    code = _snapshot(tmp_path)
    (code / "signals.py").write_text(SIGNALS)
    said = {}
    for name, before in (("default", signal.SIG_DFL), ("ignored", signal.SIG_IGN)):
        folder = tmp_path / name
        done = subprocess.run(
            [BASE_PYTHON, "signals.py"],
            cwd=code,
            env={
                "PATH": os.environ["PATH"],
                "PYTHONPATH": str(code / ".distcomp/rank_side/job_site"),
                "RANK": "0",
                "WORLD_SIZE": "1",
                "DISTCOMP_ATTACH_DIR": str(folder),
            },
            capture_output=True,
            text=True,
            preexec_fn=lambda before=before: signal.signal(signal.SIGUSR2, before),
        )
        assert done.returncode == 0, done.stderr
        (beacon,) = folder.glob("proc-*.json")
        said[name] = (done.stdout, json.loads(beacon.read_text()).get("pause", False))
    assert said == {"default": ("usr2 False\n", True), "ignored": ("usr2 True\n", False)}
