"""The stand-in runs what is submitted: the real azure-ai-ml client submits, streams, downloads,
cancels and reads services of jobs whose ranks run here (jupyter_distcomp/standin/)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from jupyter_distcomp import load_component
from jupyter_distcomp.azureml import submit
from jupyter_distcomp.standin import TOKEN, AzureStandIn
from jupyter_distcomp.standin.blobs import SAS_SIGNATURE, BlobStore

pytest.importorskip("azure.ai.ml")
pytestmark = [pytest.mark.filterwarnings("ignore::UserWarning")]

SPEC = """\
name: train
type: DistributedComponent
inputs:
  data: {type: AnyDirectory}
  steps: {type: Integer, default: 2}
outputs:
  model: {type: path}
launcher:
  type: LAUNCHER
  additional_arguments: >-
    python train.py --data {inputs.data} --steps {inputs.steps} --model {outputs.model}
"""
#: each rank prints its steps, reads its input, writes its output; RAISE_ON fails a rank
TRAIN = """\
import argparse, os, pathlib, sys, time
p = argparse.ArgumentParser()
p.add_argument("--data"); p.add_argument("--steps", type=int); p.add_argument("--model")
a = p.parse_args()
rank = int(os.environ.get("RANK", os.environ.get("OMPI_COMM_WORLD_RANK", "0")))
words = (pathlib.Path(a.data) / "words.txt").read_text().strip()
for step in range(a.steps):
    print(f"rank {rank} step {step} {words}", flush=True)
    time.sleep(float(os.environ.get("STEP_SECONDS", "0")))
print(f"rank {rank} to stderr", file=sys.stderr, flush=True)
if str(rank) == os.environ.get("RAISE_ON"):
    raise RuntimeError(f"rank {rank} ran out of data")
pathlib.Path(a.model, f"rank{rank}.txt").write_text("weights")
"""
DATA = "azureml://datastores/workspaceblobstore/paths/corpus/"


@pytest.fixture
def standin(tmp_path):
    with AzureStandIn(root=tmp_path / "standin") as server:
        (server.datastore("workspaceblobstore") / "corpus").mkdir(parents=True)
        (server.datastore("workspaceblobstore") / "corpus" / "words.txt").write_text("hello\n")
        yield server


def component(tmp_path: Path, launcher="torch.distributed", nodes=2, ppn=1, env=None):
    folder = tmp_path / "project"
    folder.mkdir(exist_ok=True)
    (folder / "train.py").write_text(TRAIN)
    spec = SPEC.replace("LAUNCHER", launcher)
    if env:
        spec += "environment_variables:\n" + "".join(f"  {k}: '{v}'\n" for k, v in env.items())
    (folder / "spec.yaml").write_text(spec)
    comp = load_component(folder / "spec.yaml")
    comp.runsettings.resource_layout.configure(instance_count=nodes, process_count_per_node=ppn)
    return comp


def submitted(standin, comp, **kwargs):
    ml_client = standin.ml_client(show_progress=False)
    job = submit(comp, ml_client, inputs={"data": DATA}, compute="cpu", **kwargs)
    return ml_client, job


@pytest.mark.slow
def test_a_job_runs_streams_rank_0_and_ends_completed(standin, tmp_path, capsys, monkeypatch):
    from azure.ai.ml.operations._run_history_constants import RunHistoryConstants

    monkeypatch.setattr(RunHistoryConstants, "_WAIT_COMPLETION_POLLING_INTERVAL_MIN", 1)
    ml_client, job = submitted(standin, component(tmp_path))
    capsys.readouterr()
    ml_client.jobs.stream(job.name)  # azure-ai-ml's own streaming: rank 0's log alone
    out = capsys.readouterr().out
    assert "Streaming user_logs/std_log_process_0.txt" in out
    assert "rank 0 step 0 hello" in out and "rank 0 step 1 hello" in out
    assert "rank 0 to stderr" in out  # stdout and stderr both in a process's log
    assert "rank 1 step" not in out
    assert "Execution Summary" in out
    final = ml_client.jobs.get(job.name)
    assert final.status == "Completed"
    assert [j.name for j in ml_client.jobs.list()] == [job.name]
    run = standin.job(job.name)
    assert run.statuses == [
        "NotStarted",
        "Queued",
        "Preparing",
        "Running",
        "Finalizing",
        "Completed",
    ]
    # the output landed in the default datastore, where azure-ai-ml looks for it
    model = standin.datastore("workspaceblobstore") / "azureml" / job.name / "model"
    assert sorted(p.name for p in model.iterdir()) == ["rank0.txt", "rank1.txt"]


@pytest.mark.slow
def test_download_all_writes_every_rank_log_and_the_named_outputs(standin, tmp_path):
    ml_client, job = submitted(standin, component(tmp_path, launcher="mpi", nodes=2, ppn=2))
    assert standin.job(job.name).wait(120) == "Completed"
    target = tmp_path / "downloaded"
    with standin.storage_proxy():  # its blob client takes no transport: HTTPS_PROXY does
        ml_client.jobs.download(job.name, all=True, download_path=target)
    logs = target / "artifacts" / "user_logs"
    assert sorted(p.name for p in logs.iterdir()) == [
        f"std_log_process_{rank}.txt" for rank in range(4)
    ]
    for rank in range(4):
        text = (logs / f"std_log_process_{rank}.txt").read_text()
        assert f"rank {rank} step 1 hello" in text and f"rank {rank} to stderr" in text
    assert (target / "artifacts" / "system_logs" / "lifecycler" / "execution-wrapper.log").exists()
    outputs = target / "named-outputs" / "model"
    assert sorted(p.name for p in outputs.iterdir()) == [f"rank{r}.txt" for r in range(4)]


@pytest.mark.slow
def test_a_rank_that_raises_fails_the_job_with_azure_error(standin, tmp_path):
    ml_client, job = submitted(standin, component(tmp_path, env={"RAISE_ON": "1"}))
    run = standin.job(job.name)
    assert run.wait(120) == "Failed"
    assert ml_client.jobs.get(job.name).status == "Failed"
    details = ml_client.jobs._runs_operations.get_run_details(job.name)
    assert details.status == "Failed"
    message = details.error.error.message
    assert "User process 'Rank 1' exited with status code 1" in message
    assert "user_logs/std_log_process_1.txt" in message
    assert "RuntimeError: rank 1 ran out of data" in message
    assert sorted(details.log_files) == [
        "system_logs/lifecycler/execution-wrapper.log",
        "user_logs/std_log_process_0.txt",
        "user_logs/std_log_process_1.txt",
    ]
    assert all(SAS_SIGNATURE in url for url in details.log_files.values())


@pytest.mark.slow
def test_cancel_stops_the_ranks_and_the_job_ends_canceled(standin, tmp_path):
    comp = component(tmp_path, env={"STEP_SECONDS": "1"})
    ml_client = standin.ml_client(show_progress=False)
    job = submit(comp, ml_client, inputs={"data": DATA, "steps": 60}, compute="cpu")
    run = standin.job(job.name)
    deadline = time.monotonic() + 60
    while not run.logs or run.status != "Running":
        assert time.monotonic() < deadline, run.statuses
        time.sleep(0.05)
    services = ml_client.jobs.show_services(job.name, 1)  # a running job, no services asked
    assert services is None
    ml_client.jobs.begin_cancel(job.name).result(timeout=60)
    assert run.status == "Canceled"
    assert ml_client.jobs.get(job.name).status == "Canceled"
    assert run.ended_at - run.started_at < 30  # stopped, not run to its 60 steps


@pytest.mark.slow
def test_interactive_services_of_a_running_job(standin, tmp_path):
    from jupyter_distcomp.azureml.interactive import job_services

    comp = component(tmp_path, env={"STEP_SECONDS": "1"})
    ml_client = standin.ml_client(show_progress=False)
    job = submit(
        comp,
        ml_client,
        inputs={"data": DATA, "steps": 30},
        compute="cpu",
        services=job_services(["jupyterlab"]),
    )
    run = standin.job(job.name)
    deadline = time.monotonic() + 60
    while run.status != "Running":
        assert time.monotonic() < deadline
        time.sleep(0.05)
    services = ml_client.jobs.show_services(job.name, 1)
    assert services["distcomp_jupyterlab"].type == "JupyterLab"
    assert services["distcomp_jupyterlab"].endpoint.endswith("node=1")
    ml_client.jobs.begin_cancel(job.name).result(timeout=60)


def test_blob_reads_honour_ranges():
    store = BlobStore()
    key = "/acct/azureml/log.txt"
    store.append(key, b"0123456789")
    sig = {"sig": [SAS_SIGNATURE]}

    def get(range_header):
        return store.handle("GET", key, sig, {"x-ms-range": range_header}, b"")

    status, body, headers = get("bytes=3-5")
    assert (status, body, headers["Content-Range"]) == (206, b"345", "bytes 3-5/10")
    status, body, headers = get("bytes=7-")
    assert (status, body, headers["Content-Range"]) == (206, b"789", "bytes 7-9/10")
    status, _, headers = get("bytes=10-")
    assert (status, headers["Content-Range"]) == (416, "bytes */10")  # nothing new yet
    store.append(key, b"ab")
    assert get("bytes=10-")[:2] == (206, b"ab")  # a grown log: only the new bytes
    assert store.handle("GET", key, {"sig": ["wrong"]}, {}, b"")[0] == 403
    assert TOKEN not in str(store.blobs)
