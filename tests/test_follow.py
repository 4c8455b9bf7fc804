"""``%distcomp follow JOB`` and ``submit --follow`` in a real IPython shell, through the real
azure-ai-ml client, against the stand-in that runs the jobs (jupyter_distcomp/standin/)."""

from __future__ import annotations

import re
import signal
import sys
import threading
import time
from collections import Counter

import pytest
from IPython.utils.capture import capture_output

from jupyter_distcomp import AzureMLError
from jupyter_distcomp.standin import TOKEN, AzureStandIn, FakeCredential

from .azure_standin import session_on
from .waiting import wait_for

pytest.importorskip("azure.ai.ml")
pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore::UserWarning")]

SPEC = """\
name: train
type: DistributedComponent
inputs:
  steps: {type: Integer, default: 2}
launcher:
  type: torch.distributed
  additional_arguments: python train.py --steps {inputs.steps}
environment:
  name: AzureML-Minimal
"""
TRAIN = """\
import os, sys, time
steps = int(sys.argv[2])
rank = int(os.environ["RANK"])
time.sleep(float(os.environ.get("FIRST_WORDS_AFTER", "0")))
for step in range(steps):
    print(f"rank {rank} step {step}", flush=True)
    time.sleep(float(os.environ.get("STEP_SECONDS", "0")))
if str(rank) in os.environ.get("RAISE_ON", "").split(","):
    raise RuntimeError("the batch was empty")
"""


@pytest.fixture
def standin(tmp_path):
    with AzureStandIn(root=tmp_path / "standin") as server:
        yield server


@pytest.fixture
def shell(ip, standin, tmp_path, monkeypatch):
    """The shell, its session pointed at the stand-in, a component `train` defined."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").write_text(TRAIN)
    with session_on(ip, standin):
        yield ip


def define(ip, nodes=2, ppn=2, env=None):
    spec = SPEC
    if env:
        spec += "environment_variables:\n" + "".join(f"  {k}: '{v}'\n" for k, v in env.items())
    assert ip.run_cell(f"%%distcomp train\n{spec}").success
    ip.user_ns["train"].runsettings.resource_layout.configure(
        instance_count=nodes, process_count_per_node=ppn
    )


def states(captured) -> list[str]:
    """The texts the state line showed, in order (its first display, then its updates)."""
    return [
        o.data["text/plain"]
        for o in captured.outputs
        if o.transient and "Azure ML job" in o.data.get("text/plain", "")
    ]


def submit_job(standin, ip, *extra):
    ip.run_cell("%distcomp submit train --compute cpu " + " ".join(extra))
    return standin.job_puts()[-1].path.rsplit("/", 1)[-1]


def test_a_job_followed_from_its_start(shell, standin):
    define(shell, env={"STEP_SECONDS": "0.3"})
    with capture_output() as captured:
        result = shell.run_cell("%distcomp submit train --compute cpu --follow")
    assert result.success, result.error_in_exec
    lines = captured.stdout.splitlines()
    for node, rank in ((0, 0), (0, 1), (1, 2), (1, 3)):
        for step in (0, 1):
            assert lines.count(f"[node {node} rank {rank}] rank {rank} step {step}") == 1
    seen = states(captured)
    assert any(text.endswith(": Running") or ": Running:" in text for text in seen), seen
    assert seen[-1].endswith(": Completed")
    updates = [o for o in captured.outputs if o.transient and o.update]
    assert updates  # one line, updated in place
    ids = {o.transient["display_id"] for o in captured.outputs if o.transient}
    assert len(ids) == 1
    assert TOKEN not in captured.stdout and "sig=" not in captured.stdout


def test_rank_3_raises_its_traceback_once_and_the_summary_names_it(shell, standin):
    define(shell, env={"RAISE_ON": "3"})
    job = submit_job(standin, shell)
    standin.job(job).wait(120)
    with capture_output() as captured:
        result = shell.run_cell(f"%distcomp follow {job}")
    error = result.error_in_exec
    assert isinstance(error, AzureMLError)
    assert captured.stderr.count("RuntimeError: the batch was empty") == 1
    assert "[node 1 rank 3] Traceback (most recent call last):" in captured.stderr
    message = str(error)
    assert f"`{job}` failed on rank 3:" in message, (message, captured.stdout, captured.stderr)
    assert "rank 3: exit code 1" in message
    assert "last 3 lines of its log" not in message or "RuntimeError" in message
    assert "ranks 0-2 stopped because of the failure." in message
    assert "User process 'Rank 3'" in message  # Azure ML's own words, quoted
    assert states(captured)[-1].endswith(": Failed")


def test_identical_tracebacks_show_once_for_all_their_ranks(shell, standin):
    define(shell, env={"RAISE_ON": "0,1,2,3"})
    job = submit_job(standin, shell)
    standin.job(job).wait(120)
    with capture_output() as captured:
        shell.run_cell(f"%distcomp follow {job}")
    text = captured.stderr
    tracebacks = text.count("RuntimeError: the batch was empty")
    assert 1 <= tracebacks < 4, text  # ranks whose text is identical share one


def test_unknown_job_says_where_it_looked_and_the_fix(shell):
    result = shell.run_cell("%distcomp follow no_such_job")
    message = str(result.error_in_exec)
    assert isinstance(result.error_in_exec, AzureMLError)
    assert "job 'no_such_job' was not found in workspace 'ws-distcomp'" in message
    assert "Fix:" in message and "Traceback" not in message


def test_pipeline_job_points_at_its_children(shell, standin):
    standin.add_pipeline_job("my_pipeline")
    result = shell.run_cell("%distcomp follow my_pipeline")
    message = str(result.error_in_exec)
    assert "is a pipeline job" in message and "%distcomp follow CHILD" in message
    assert "jobs.list(parent_job_name='my_pipeline')" in message


def test_no_logs_yet_says_so_in_the_state_line(shell, standin):
    define(shell, nodes=1, ppn=1, env={"FIRST_WORDS_AFTER": "2"})
    with capture_output() as captured:
        result = shell.run_cell("%distcomp submit train --compute cpu --follow")
    assert result.success, result.error_in_exec
    assert any("no rank has written yet; waiting..." in s for s in states(captured))
    assert "[rank 0] rank 0 step 1" in captured.stdout


def test_a_log_that_stops_growing_is_waited_for_without_a_busy_loop(shell, standin):
    define(shell, nodes=1, ppn=1, env={"STEP_SECONDS": "3"})
    job = submit_job(standin, shell)
    with capture_output() as captured:
        result = shell.run_cell(f"%distcomp follow {job}")
    assert result.success, result.error_in_exec
    assert "[rank 0] rank 0 step 1" in captured.stdout  # no false end after the silence
    details = standin.find("GET", f"/runs/{job}/details")
    seconds = 6  # two silent steps of 3 s
    assert len(details) < seconds / 0.2  # the polls backed off (0.2 s growing to 0.5 s)


def test_network_errors_mid_follow_are_retried_nothing_twice_nothing_lost(shell, standin):
    define(shell, nodes=1, ppn=2, env={"STEP_SECONDS": "0.3"})
    job = submit_job(standin, shell, "--input steps=6")
    run = standin.job(job)
    deadline = time.monotonic() + 60
    while not run.logs:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    standin.drop("GET", "std_log_process_1", times=6)  # resets, beyond azure-core's retries
    standin.fail("GET", f"/runs/{job}/details", 503, times=5, headers={"Retry-After": "0"})
    refusal = threading.Timer(1.0, standin.refuse, args=(1.0,))  # then: nobody listens
    refusal.start()
    with capture_output() as captured:
        result = shell.run_cell(f"%distcomp follow {job}")
    refusal.join()
    assert result.success, result.error_in_exec
    for rank in (0, 1):
        for step in range(6):
            assert captured.stdout.count(f"[rank {rank}] rank {rank} step {step}\n") == 1
    assert any("network error, retrying" in s for s in states(captured))


def test_network_down_for_good_says_what_where_and_the_fix(shell, standin):
    settings = shell.magics_manager.registry["DistCompMagics"].session.azureml
    define(shell, nodes=1, ppn=1)
    job = submit_job(standin, shell)
    standin.job(job).wait(120)
    standin.drop("GET", "/details")
    from jupyter_distcomp.azureml.logs import FollowSettings

    session = shell.magics_manager.registry["DistCompMagics"].session
    with pytest.raises(AzureMLError) as info:
        from jupyter_distcomp.notebook.follow import follow_job

        follow_job(
            session.ml_client(),
            job,
            FollowSettings(poll=0.05, poll_max=0.1, give_up=0.5),
            show=lambda text, stream: None,
            state=lambda text: None,
        )
    message = str(info.value)
    assert f"could not read the logs of job '{job}'" in message
    assert "keeps running on Azure ML" in message and "HTTPS_PROXY" in message
    assert settings.follow_poll == 0.2


def test_expired_credentials_say_how_to_sign_in(shell, standin):
    settings = shell.magics_manager.registry["DistCompMagics"].session.azureml
    settings.credential = FakeCredential("expired-token")
    result = shell.run_cell("%distcomp follow any_job")
    message = str(result.error_in_exec)
    assert "refused the credentials (HTTP 401" in message and "az login" in message
    assert "expired-token" not in message


def test_missing_credentials_say_how_to_sign_in(shell, standin, tmp_path, monkeypatch):
    for name in list(__import__("os").environ):
        if name.startswith(("AZURE_", "IDENTITY_", "MSI_")):
            monkeypatch.delenv(name)
    monkeypatch.setenv("AZURE_CONFIG_DIR", str(tmp_path / "no-az-cli"))
    monkeypatch.setenv("PATH", "/nonexistent")
    settings = shell.magics_manager.registry["DistCompMagics"].session.azureml
    settings.credential = None
    result = shell.run_cell("%distcomp follow any_job")
    message = str(result.error_in_exec)
    assert "no Azure credentials were found" in message and "az login" in message
    assert "Traceback" not in message
    assert standin.requests == []  # nothing was sent without a token


def test_a_job_cancelled_while_followed(shell, standin):
    define(shell, nodes=1, ppn=1, env={"STEP_SECONDS": "0.5"})
    job = submit_job(standin, shell, "--input steps=200")
    ml_client = standin.ml_client(show_progress=False)

    def cancel_after_output() -> None:
        run = standin.job(job)
        log = run.log_name(0)
        wait_for(lambda: "step 1\n" in run.log_text(log), 60, "rank 0's first steps")
        ml_client.jobs.begin_cancel(job)

    threading.Thread(target=cancel_after_output, daemon=True).start()
    with capture_output() as captured:
        result = shell.run_cell(f"%distcomp follow {job}")
    assert result.success, result.error_in_exec
    assert states(captured)[-1].endswith(": Canceled")
    assert f"Job {job} ended Canceled; its output above is complete." in captured.stdout
    log = standin.store.read(
        f"/devstoreaccount1/azureml/ExperimentRun/dcid.{job}/user_logs/std_log_process_0.txt"
    ).decode()
    both = (captured.stdout + captured.stderr).splitlines()  # a traceback goes to stderr
    shown = [line for line in both if line.startswith("[rank 0]")]
    assert Counter(shown) == Counter(f"[rank 0] {line}" for line in log.splitlines())


def test_interrupting_stops_following_never_the_job(shell, standin):
    import _thread

    define(shell, nodes=1, ppn=1, env={"STEP_SECONDS": "0.5"})
    # steps enough to outlast a slow start and the follow's longest wait between polls:
    # the job is canceled below
    job = submit_job(standin, shell, "--input steps=600")

    following = threading.Event()

    def interrupt_while_following() -> None:
        """Ctrl-C once the cell shows the rank's steps, and again 5 s later while the cell
        has not said that it stopped (an interrupt that lands in a finaliser is lost, as
        for a person, who presses it again)."""
        deadline = time.monotonic() + 240
        while following.is_set() and time.monotonic() < deadline:
            shown = getattr(sys.stdout, "getvalue", lambda: "")()
            if "Stopped following" in shown:
                return
            if "rank 0 step 1" in shown:
                _thread.interrupt_main()
                time.sleep(5.0)
                continue
            time.sleep(0.05)

    following.set()
    threading.Thread(target=interrupt_while_following, daemon=True).start()
    # Ctrl-C raises KeyboardInterrupt in the cell, as ipykernel has it while a cell runs
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    with capture_output() as captured:
        try:
            result = shell.run_cell(f"%distcomp follow {job}")
        finally:
            following.clear()
            signal.signal(signal.SIGINT, previous)
    assert result.success, result.error_in_exec
    assert f"job {job} keeps running on Azure ML; `%distcomp follow {job}` picks it up" in (
        captured.stdout
    )
    assert standin.job(job).status == "Running"
    standin.job(job).cancel()


def test_follow_reads_a_job_submitted_without_us(shell, standin, tmp_path):
    """A command job built with azure-ai-ml alone: only the logs Azure writes."""
    from azure.ai.ml import MpiDistribution, command

    (tmp_path / "hello.py").write_text(
        "import os\nprint('hi from', os.environ['OMPI_COMM_WORLD_RANK'])\n"
    )
    ml_client = standin.ml_client(show_progress=False)
    job = ml_client.jobs.create_or_update(
        command(
            code=str(tmp_path),
            command="python hello.py",
            environment="azureml:AzureML-Minimal@latest",
            compute="cpu",
            instance_count=2,
            distribution=MpiDistribution(process_count_per_instance=1),
        )
    )
    with capture_output() as captured:
        result = shell.run_cell(f"%distcomp follow {job.name}")
    assert result.success, result.error_in_exec
    assert re.search(r"^\[node 1 rank 1\] hi from 1$", captured.stdout, re.M)
    assert re.search(r"^\[node 0 rank 0\] hi from 0$", captured.stdout, re.M)
