"""Submission with the real azure-ai-ml client, over real HTTP, to a local stand-in of Azure ML.

Assertions are on the request bodies that reached the stand-in: what Azure ML would receive.
"""

from __future__ import annotations

import json

import pytest

from jupyter_distcomp import AzureMLError, load_component
from jupyter_distcomp.azureml import make_ml_client, submit, wait_for_job

from .azure_standin import (
    INTERACTIVE_ENDPOINT,
    SAS_SIGNATURE,
    TOKEN,
    AzureStandIn,
    FakeCredential,
)

pytest.importorskip("azure.ai.ml")
pytestmark = [
    pytest.mark.slow,
    pytest.mark.filterwarnings("ignore:The `context` parameter is deprecated"),
]

SPEC = """\
name: microsoft.com.distcomp.mpi_train
type: DistributedComponent
inputs:
  data: {type: AnyDirectory}
  epochs: {type: Integer, default: 4}
  tag: {type: String, optional: true}
outputs:
  model: {type: path}
launcher:
  type: LAUNCHER
  additional_arguments: >-
    python train.py --data {inputs.data} --epochs {inputs.epochs} [--tag {inputs.tag}]
    --model {outputs.model}
environment:
  ENVIRONMENT
"""
DATA = "azureml://datastores/workspaceblobstore/paths/mnist/"


@pytest.fixture
def standin():
    with AzureStandIn() as server:
        yield server


def make(tmp_path, launcher="mpi", environment="name: AzureML-Minimal"):
    tmp_path.mkdir(parents=True, exist_ok=True)
    (tmp_path / "train.py").write_text("print('training')\n")
    path = tmp_path / "spec.yaml"
    path.write_text(SPEC.replace("LAUNCHER", launcher).replace("ENVIRONMENT", environment))
    return load_component(path)


def client(standin, **kwargs):
    return standin.ml_client(show_progress=False, **kwargs)


def test_submitted_job_keeps_layout_command_and_inputs(standin, tmp_path):
    component = make(tmp_path)
    component.runsettings.resource_layout.configure(instance_count=3, process_count_per_node=2)
    job = submit(component, client(standin), inputs={"data": DATA}, compute="cpu-cluster")

    def kind(r) -> str:
        if "/computes/" in r.path:
            return "compute"
        if "/codes/" in r.path:
            return {"GET": "code lookup", "POST": "pending upload", "PUT": "code version"}[r.method]
        if "/jobs/" in r.path:
            return "job"
        return "blob metadata" if "comp" in r.query else f"blob {r.method}"

    kinds = [kind(r) for r in standin.requests]
    assert kinds[:3] == ["compute", "code lookup", "pending upload"]  # the preflight reads it
    assert kinds[-2:] == ["code version", "job"]
    assert set(kinds[3:-2]) == {"blob HEAD", "blob PUT", "blob metadata"}
    uploaded = {path.rsplit("/", 1)[-1]: data for path, data in standin.blobs.items()}
    assert uploaded["train.py"] == b"print('training')\n"  # the code folder, uploaded
    assert set(uploaded) == {"train.py", "spec.yaml"}

    (put,) = standin.job_puts()
    body = put.body["properties"]
    assert body["distribution"] == {"distributionType": "Mpi", "processCountPerInstance": 2}
    assert body["resources"]["instanceCount"] == 3  # the instance count the user set
    assert body["command"] == (
        "python train.py --data ${{inputs.data}} --epochs ${{inputs.epochs}} "
        "$[[--tag ${{inputs.tag}}]] --model ${{outputs.model}}"
    )
    assert body["inputs"]["data"] == {"jobInputType": "uri_folder", "uri": DATA}
    assert body["inputs"]["epochs"] == {"jobInputType": "literal", "value": "4"}
    assert body["outputs"]["model"]["jobOutputType"] == "uri_folder"
    assert body["environmentId"] == "azureml:AzureML-Minimal@latest"
    assert body["computeId"].endswith("/workspaces/ws-distcomp/computes/cpu-cluster")
    code_put = standin.find("PUT", "/codes/")[0]
    assert body["codeId"] == code_put.path.split("?")[0]
    assert body["tags"]["distcomp_original_name"] == "microsoft.com.distcomp.mpi_train"
    assert job.status == "NotStarted" and job.studio_url.startswith("https://ml.azure.com/runs/")
    assert job.name in job.studio_url


@pytest.mark.parametrize(
    ("launcher", "kind"), [("torch.distributed", "PyTorch"), ("deepspeed", "PyTorch")]
)
def test_launcher_reaches_the_service_as_its_distribution(standin, tmp_path, launcher, kind):
    component = make(tmp_path, launcher)
    component.runsettings.resource_layout.configure(instance_count=2, process_count_per_node=4)
    submit(component, client(standin), inputs={"data": DATA}, compute="gpu")
    body = standin.job_puts()[0].body["properties"]
    assert body["distribution"] == {"distributionType": kind, "processCountPerInstance": 4}
    assert body["resources"]["instanceCount"] == 2


def test_inline_environment_is_registered_first(standin, tmp_path):
    component = make(tmp_path, environment="docker: {image: 'python:3.11-slim'}")
    submit(component, client(standin), inputs={"data": DATA}, compute="cpu")
    (env_put,) = standin.find("PUT", "/environments/CliV2AnonymousEnvironment/versions/")
    assert env_put.body["properties"]["image"] == "python:3.11-slim"
    body = standin.job_puts()[0].body["properties"]
    assert body["environmentId"] == env_put.path


def _azureml(ip):
    """The AzureML settings of the shell's session (what %config AzureML sets)."""
    return ip.magics_manager.registry["DistCompMagics"].session.azureml


def _configure(ip, standin, **traits):
    settings = _azureml(ip)
    settings.credential = FakeCredential()
    settings.client_kwargs = standin.client_kwargs(show_progress=False)
    settings.subscription_id = standin.subscription
    settings.resource_group = standin.resource_group
    settings.workspace_name = standin.workspace
    settings.poll_interval = 0.01
    for key, value in traits.items():
        setattr(settings, key, value)
    return settings


def _all_text(captured) -> str:
    parts = [captured.stdout, captured.stderr]
    for output in captured.outputs:
        parts.extend(str(v) for v in output.data.values())
    return "\n".join(parts)


def test_submit_magic_shows_link_and_streams_status(ip, standin, tmp_path, monkeypatch):
    from IPython.utils.capture import capture_output

    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").write_text("print('training')\n")
    spec = SPEC.replace("LAUNCHER", "mpi").replace("ENVIRONMENT", "name: AzureML-Minimal")
    assert ip.run_cell(f"%%distcomp train\n{spec}").success
    ip.user_ns["train"].runsettings.resource_layout.configure(
        instance_count=2, process_count_per_node=2
    )
    _configure(ip, standin)
    ip.run_line_magic("config", "AzureML.compute = 'cpu-default'")
    try:
        with capture_output() as captured:
            result = ip.run_cell(
                f"%distcomp submit train --input data={DATA} --input epochs=7 --wait"
            )
    finally:
        ip.run_line_magic("config", "AzureML.compute = None")
    assert result.success, result.error_in_exec
    body = standin.job_puts()[0].body["properties"]
    assert body["inputs"]["epochs"]["value"] == "7"
    assert body["computeId"].endswith("/computes/cpu-default")  # from %config AzureML.compute
    assert body["resources"]["instanceCount"] == 2
    name = standin.job_puts()[0].path.rsplit("/", 1)[-1]
    summary = captured.outputs[0].data
    assert name in summary["text/plain"] and "NotStarted" in summary["text/plain"]
    assert f'href="https://ml.azure.com/runs/{name}?wsid=' in summary["text/html"]
    lines = [line for line in captured.stdout.splitlines() if "->" in line]
    assert [line.split(": ", 1)[1] for line in lines] == [
        "NotStarted -> Queued",
        "Queued -> Running",
        "Running -> Completed",
    ]
    assert f"Job {name} completed" in captured.stdout
    with capture_output() as exported:
        assert ip.run_cell(f"%distcomp export train job.yml --input data={DATA}").success
    for text in (_all_text(captured), _all_text(exported), (tmp_path / "job.yml").read_text()):
        assert TOKEN not in text and SAS_SIGNATURE not in text


def test_interactive_services_reach_the_job_and_their_endpoints_are_printed(
    ip, standin, tmp_path, monkeypatch
):
    from IPython.utils.capture import capture_output

    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").write_text("print('training')\n")
    key = tmp_path / "id_test.pub"
    key.write_text("ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIexample user@laptop\n")
    spec = SPEC.replace("LAUNCHER", "torch.distributed").replace(
        "ENVIRONMENT", "name: AzureML-Minimal"
    )
    assert ip.run_cell(f"%%distcomp train\n{spec}").success
    _configure(ip, standin)
    with capture_output() as captured:
        result = ip.run_cell(
            f"%distcomp submit train --compute cpu --input data={DATA} --wait "
            f"--interactive jupyterlab,vscode,ssh --ssh-key {key}"
        )
    assert result.success, result.error_in_exec
    services = standin.job_puts()[0].body["properties"]["services"]
    assert services["distcomp_jupyterlab"] == {
        "jobServiceType": "JupyterLab",
        "nodes": {"nodesValueType": "All"},
    }
    assert services["distcomp_vscode"]["jobServiceType"] == "VSCode"
    assert services["distcomp_ssh"] == {
        "jobServiceType": "SSH",
        "nodes": {"nodesValueType": "All"},
        "properties": {"sshPublicKeys": key.read_text().strip()},
    }
    for name in ("jupyterlab", "vscode", "ssh"):
        endpoint = INTERACTIVE_ENDPOINT.format(f"distcomp_{name}")
        assert captured.stdout.count(f": {name} at {endpoint}") == 1  # once, when it runs
    # a wrong service name is refused before anything is sent
    result = ip.run_cell("%distcomp submit train --compute cpu --interactive jupyter,shh")
    assert "unknown service 'jupyter'" in str(result.error_in_exec)
    assert len(standin.job_puts()) == 1


def test_submit_magic_reports_a_failed_job(ip, standin, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").write_text("print('training')\n")
    standin.statuses = ("Queued", "Failed")
    spec = SPEC.replace("LAUNCHER", "mpi").replace("ENVIRONMENT", "name: AzureML-Minimal")
    assert ip.run_cell(f"%%distcomp train\n{spec}").success
    _configure(ip, standin)
    result = ip.run_cell(f"%distcomp submit train --compute cpu --input data={DATA} --wait")
    assert isinstance(result.error_in_exec, AzureMLError)
    assert "ended Failed. Its logs are in Azure ML studio: https://ml.azure.com/runs/" in str(
        result.error_in_exec
    )
    result = ip.run_cell(f"%distcomp submit train --input data={DATA}")
    assert "needs a compute target" in str(result.error_in_exec)


def _submit_error(component, ml_client) -> AzureMLError:
    with pytest.raises(AzureMLError) as info:
        submit(component, ml_client, inputs={"data": DATA}, compute="cpu")
    message = str(info.value)
    assert TOKEN not in message and SAS_SIGNATURE not in message
    assert "Traceback" not in message
    return info.value


def test_no_credentials_says_how_to_sign_in(standin, tmp_path, monkeypatch):
    for name in list(__import__("os").environ):
        if name.startswith(("AZURE_", "IDENTITY_", "MSI_")):
            monkeypatch.delenv(name)
    monkeypatch.setenv("AZURE_CONFIG_DIR", str(tmp_path / "no-az-cli"))
    monkeypatch.setenv("PATH", "/nonexistent")
    ml_client = make_ml_client(
        subscription_id=standin.subscription,
        resource_group=standin.resource_group,
        workspace_name=standin.workspace,
        **standin.client_kwargs(show_progress=False),
    )
    error = _submit_error(make(tmp_path), ml_client)
    assert "no Azure credentials were found" in str(error)
    assert "az login" in str(error) and "AZURE_CLIENT_SECRET" in str(error)
    assert "What the credential said: DefaultAzureCredential failed" in str(error)
    assert standin.requests == []  # nothing was sent without a token
    assert error.job.resources.instance_count == 1  # the built job is kept


def test_rejected_token_401(standin, tmp_path):
    error = _submit_error(make(tmp_path), client(standin, credential=FakeCredential("expired")))
    assert "refused the credentials (HTTP 401" in str(error) and "az login" in str(error)
    assert "InvalidAuthenticationToken" in str(error)


def test_forbidden_403(standin, tmp_path):
    standin.fail(
        "GET",
        "/codes/",
        403,
        "The client 'me@example.com' does not have authorization to perform action "
        "'Microsoft.MachineLearningServices/workspaces/codes/versions/read'.",
        code="AuthorizationFailed",
    )
    error = _submit_error(make(tmp_path), client(standin))
    assert "HTTP 403" in str(error) and "AuthorizationFailed" in str(error)
    assert "does not have authorization to perform action" in str(error)
    assert "'AzureML Data Scientist'" in str(error)
    assert error.status_code == 403


def test_unknown_workspace_404(standin, tmp_path):
    from azure.ai.ml import MLClient

    ml_client = MLClient(
        FakeCredential(),
        subscription_id=standin.subscription,
        resource_group_name=standin.resource_group,
        workspace_name="no-such-ws",
        show_progress=False,
        **standin.client_kwargs(),
    )
    error = _submit_error(make(tmp_path), ml_client)
    assert "workspace 'no-such-ws' (resource group 'rg-distcomp'" in str(error)
    assert "was not found (HTTP 404" in str(error) and "--workspace" in str(error)


def test_invalid_job_400_keeps_the_service_message(standin, tmp_path):
    message = "Compute 'cpu' of type 'AmlCompute' does not support MPI with 3 processes."
    standin.fail("PUT", "/jobs/", 400, message, code="UserError")
    error = _submit_error(make(tmp_path), client(standin))
    assert "rejected the job (HTTP 400)" in str(error) and message in str(error)
    assert "request id" in str(error)
    assert len(standin.job_puts()) == 1  # a 400 is not retried


@pytest.mark.parametrize("status", [429, 500, 503])
def test_throttling_and_server_errors_are_retried_then_explained(standin, tmp_path, status):
    standin.fail("PUT", "/jobs/", status, "try later", headers={"Retry-After": "0"})
    error = _submit_error(make(tmp_path), client(standin, retry_total=2))
    assert len(standin.job_puts()) == 3  # the first try and two retries
    expected = "throttling requests (HTTP 429" if status == 429 else f"server error (HTTP {status}"
    assert expected in str(error) and "after the client's retries" in str(error)


def test_transient_server_error_recovers(standin, tmp_path):
    standin.fail("PUT", "/jobs/", 503, "busy", times=2, headers={"Retry-After": "0"})
    job = submit(make(tmp_path), client(standin), inputs={"data": DATA}, compute="cpu")
    assert len(standin.job_puts()) == 3 and job.name in standin.jobs


def test_client_from_workspace_config(standin, tmp_path, monkeypatch):
    (tmp_path / "ws").mkdir()
    config = tmp_path / "ws" / "config.json"
    config.write_text(
        json.dumps(
            {
                "subscription_id": standin.subscription,
                "resource_group": standin.resource_group,
                "workspace_name": standin.workspace,
            }
        )
    )
    ml_client = make_ml_client(
        workspace_config=config, credential=FakeCredential(), **standin.client_kwargs()
    )
    assert ml_client.workspace_name == standin.workspace
    job = submit(make(tmp_path / "p"), ml_client, inputs={"data": DATA}, compute="cpu")
    final = wait_for_job(ml_client, job.name, poll_interval=0.01)
    assert final.status == "Completed"
    with pytest.raises(AzureMLError, match=r"configuration .*missing\.json. does not exist"):
        make_ml_client(workspace_config=tmp_path / "missing.json", credential=FakeCredential())
    with pytest.raises(AzureMLError, match="resource_group, workspace_name is needed as well"):
        make_ml_client(subscription_id="s", credential=FakeCredential())
    (tmp_path / "empty").mkdir()
    monkeypatch.chdir(tmp_path / "empty")
    with pytest.raises(AzureMLError, match="no Azure ML workspace configuration found in this"):
        make_ml_client(credential=FakeCredential())


def test_wait_gives_up_after_timeout_and_says_the_job_runs_on(standin, tmp_path):
    standin.statuses = ("Running",)
    ml_client = client(standin)
    job = submit(make(tmp_path), ml_client, inputs={"data": DATA}, compute="cpu")
    seen = []
    with pytest.raises(AzureMLError, match=r"still Running after 0\.05 s; it keeps running"):
        wait_for_job(
            ml_client,
            job.name,
            poll_interval=0.01,
            timeout=0.05,
            on_status=lambda old, new: seen.append(new),
        )
    assert seen == ["Running"]


def test_scrub_masks_tokens_signatures_and_secrets():
    from jupyter_distcomp.azureml.failures import scrub

    text = (
        "Authorization: Bearer abc.def-ghi "
        "url https://acct.blob.core.windows.net/c?sv=2021&sig=SECRETSIG%3D&se=2030 "
        "client_secret=s3cr3t&x=1 token eyJhbGciOiJIUzI1.eyJzdWIiOiIxMjM0.abcdEFGH"
    )
    masked = scrub(text)
    for secret in ("abc.def-ghi", "SECRETSIG", "s3cr3t", "eyJhbGciOiJIUzI1"):
        assert secret not in masked
    assert "sv=2021" in masked and "Bearer ***" in masked
