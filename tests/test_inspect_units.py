"""The small parts behind ``where`` and ``compare``, without ranks."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from jupyter_distcomp.local.command.active import STACK_SITE
from jupyter_distcomp.local.stacks import main_thread_stack, stack_sections

PROGRAM = """
import time
def waiting():
    time.sleep(30)
print("ready", flush=True)
waiting()
"""


def test_the_stack_hook_dumps_on_sigusr1_and_keeps_the_users_sitecustomize(tmp_path):
    own = tmp_path / "own"
    own.mkdir()
    (own / "sitecustomize.py").write_text("import os\nos.environ['OWN_SITE'] = 'ran'\n")
    stacks = tmp_path / "stacks"
    stacks.mkdir()
    program = tmp_path / "train.py"
    program.write_text(PROGRAM)
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([STACK_SITE, str(own)]),
        "DISTCOMP_STACK_DIR": str(stacks),
    }
    check = subprocess.run(
        [sys.executable, "-c", "import os; print(os.environ.get('OWN_SITE'))"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    assert check.stdout.strip() == "ran", "the user's own sitecustomize did not run"
    proc = subprocess.Popen([sys.executable, str(program)], env=env, stdout=subprocess.PIPE)
    try:
        assert proc.stdout is not None and proc.stdout.readline() == b"ready\n"
        (name,) = [n for n in os.listdir(stacks) if n.startswith(f"{proc.pid}-") and ".stack" in n]
        assert os.path.exists(stacks / name.replace(".stack", ".ledger")), "no ledger beside"
        deadline = time.monotonic() + 10
        dump = ""
        while time.monotonic() < deadline and "line 4 in waiting" not in dump:
            proc.send_signal(signal.SIGUSR1)  # until it has reached the sleep
            time.sleep(0.1)
            dump = (stacks / name).read_text()
        assert proc.poll() is None, "SIGUSR1 ended the process"
    finally:
        proc.kill()
        proc.wait()
    thread = int(name.split("-")[1].split(".")[0])

    last = dump[dump.rindex("Current thread") :]
    (section,) = stack_sections({0: main_thread_stack(last, thread)}, "", "running")
    text = "\n".join(section[1])
    assert "in waiting" in text and "time.sleep(30)" in text


def test_identical_stacks_of_ranks_with_different_cell_files_are_one_section():
    frame = 'File "/tmp/ipykernel_{pid}/123.py", line 2 in <module>'
    stacks = {0: frame.format(pid=11), 1: frame.format(pid=12), 2: frame.format(pid=13)}
    sections = stack_sections(stacks, "x = 1\nwait()", "busy")
    assert [heading for heading, _ in sections] == ["ranks 0-2: busy"]
    assert "    wait()" in sections[0][1]
