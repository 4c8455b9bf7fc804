"""Credentials in values (a SAS URL as a data input, a URL with a password): Azure ML gets
them as they are, but no view, message or exported file repeats them (issue 28, item 7)."""

from __future__ import annotations

import json

import pytest
import yaml
from IPython.utils.capture import capture_output

from jupyter_distcomp import AzureMLError, load_component
from jupyter_distcomp.core.secrets import has_secret, mask_secrets

SIG = "SECRETSIG%3D"
SAS = f"https://acct.blob.core.windows.net/c/data?sv=2020-08-04&sr=c&sp=rl&sig={SIG}"
SPEC = """\
name: sas
type: DistributedComponent
inputs:
  data: {type: path}
  steps: {type: Integer, default: 2}
outputs:
  out: {type: path}
launcher:
  type: mpi
  additional_arguments: python train.py --data {inputs.data} --out {outputs.out}
environment:
  docker: {image: 'python:3.11-slim'}
"""


@pytest.mark.parametrize(
    ("text", "secret", "kept"),
    [
        (SAS, SIG, "https://acct.blob.core.windows.net/c/data?sv=2020-08-04&sr=c&sp=rl&sig=***"),
        ("https://user:hunter2@host/x", "hunter2", "https://user:***@host/x"),
        (
            "DefaultEndpointsProtocol=https;AccountName=acct;AccountKey=KEY0==;EndpointSuffix=x",
            "KEY0==",
            "AccountName=acct;AccountKey=***;",
        ),
        ("s3://b/k?X-Amz-Signature=abc123&X-Amz-Credential=AKIA", "abc123", "X-Amz-Signature=***"),
        ("Authorization: Bearer tok.en-1", "tok.en-1", "Bearer ***"),
    ],
)
def test_credentials_are_masked(text, secret, kept):
    assert secret not in mask_secrets(text) and kept in mask_secrets(text)
    assert has_secret(text)


@pytest.mark.parametrize(
    "text",
    ["azureml://datastores/blob/paths/d/", "https://host/a?x=1", "./data", "azureml:d:1", 3],
)
def test_plain_values_are_not_secrets(text):
    assert not has_secret(text)
    assert mask_secrets(str(text)) == str(text)


@pytest.mark.parametrize(
    "text",
    [
        "a" * 200_000,
        "eyJ" * 70_000,
        "ab:" * 70_000 + "@",
        "https://" * 25_000,
        "-----BEGIN RSA PRIVATE KEY-----" * 7_000,
        "-----BEGIN RSA PRIVATE KEY-----" + "A-" * 100_000 + "!",
        "--token " * 25_000,
    ],
)
def test_masking_a_long_value_takes_linear_time(text):
    """Every message with a value is masked: a 200 KB value must not hang the kernel."""
    import time

    tic = time.perf_counter()
    mask_secrets(text)
    assert time.perf_counter() - tic < 1.0


def _component(tmp_path):
    (tmp_path / "train.py").write_text("print('train')\n")
    (tmp_path / "spec.yaml").write_text(SPEC)
    return load_component(tmp_path / "spec.yaml")


def test_export_refuses_a_credential_and_writes_nothing(tmp_path):
    pytest.importorskip("azure.ai.ml")
    from jupyter_distcomp.azureml import export

    component = _component(tmp_path)
    with pytest.raises(AzureMLError) as caught:
        export(component, tmp_path / "job.yml", inputs={"data": SAS})
    message = str(caught.value)
    assert SIG not in message and "input 'data' holds a credential" in message
    assert "azureml://datastores/" in message and "azureml:NAME:VERSION" in message
    assert not (tmp_path / "job.yml").exists()
    component.runsettings.set_input("data", "azureml://datastores/d/paths/x/")
    with pytest.raises(AzureMLError, match="output 'out' holds a credential"):
        export(component, tmp_path / "job.yml", outputs={"out": "https://u:pw@host/o"})
    assert not (tmp_path / "job.yml").exists()


@pytest.mark.filterwarnings("ignore:The `context` parameter is deprecated")
def test_https_input_is_exported_as_it_is(tmp_path):
    pytest.importorskip("azure.ai.ml")
    from azure.ai.ml import load_job

    from jupyter_distcomp.azureml import export, to_azureml_job

    component = _component(tmp_path)
    url = "https://acct.blob.core.windows.net/c/data/"
    path = export(component, tmp_path / "job.yml", inputs={"data": url})
    assert yaml.safe_load(path.read_text())["inputs"]["data"]["path"] == url  # no azureml:
    assert load_job(path).inputs["data"].path == url
    # a job submitted from the notebook keeps the signed URL: Azure ML needs it
    assert to_azureml_job(component, inputs={"data": SAS}).inputs["data"].path == SAS


def test_magic_messages_mask_the_signature(ip, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").write_text("print('train')\n")
    assert ip.run_cell(f"%%distcomp sas\n{SPEC}").success
    for line in (
        f"%distcomp command sas --input data={SAS}",
        f"%distcomp export sas j.yml --input data={SAS}",
    ):
        with capture_output() as captured:
            result = ip.run_cell(line)
        shown = str(result.error_in_exec) + captured.stdout + captured.stderr
        assert result.error_in_exec is not None
        assert SIG not in shown and "sig=***" in shown, shown
        assert "Fix:" in shown
    assert not (tmp_path / "j.yml").exists()


def test_panel_and_views_mask_the_signature():
    from jupyter_distcomp.notebook.session import Session
    from jupyter_distcomp.notebook.views.preview import preview_html, summary_text
    from jupyter_distcomp.notebook.widgets import RunSettingsPanel

    component = load_component(SPEC)
    component.runsettings.set_input("data", SAS)
    panel = RunSettingsPanel("sas", component, Session())
    try:
        shown = []

        def walk(widget):
            value = getattr(widget, "value", None)
            if isinstance(value, str):
                shown.append(value)
            for child in getattr(widget, "children", ()):
                walk(child)

        walk(panel)
        assert any("sig=***" in text for text in shown)
        assert not [text for text in shown if SIG in text]
        for text in (summary_text(component, "sas"), preview_html(component)):
            assert SIG not in text
        # the box shows the masked value; leaving it as it is keeps the real value
        (box,) = [t for t in _texts(panel) if "sig=***" in t.value]
        box.value = box.value
        assert component.runsettings.inputs["data"] == SAS
        # edited around the mask: refused, the value stays
        box.value = box.value.replace("sv=2020", "sv=2021")
        assert component.runsettings.inputs["data"] == SAS
        box.value = "azureml://datastores/d/paths/x/"
        assert component.runsettings.inputs["data"] == "azureml://datastores/d/paths/x/"
    finally:
        panel.close()


def _texts(widget):
    import ipywidgets as w

    found = [widget] if isinstance(widget, w.Text) else []
    for child in getattr(widget, "children", ()):
        found += _texts(child)
    return found


FAILING_SPEC = """\
name: leaky
type: DistributedComponent
inputs:
  url: {type: String}
launcher:
  type: mpi
  additional_arguments: python fail.py {inputs.url}
"""


@pytest.mark.slow
def test_a_failed_command_shows_its_command_line_masked(ip, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "fail.py").write_text("import sys\nsys.exit(3)\n")
    assert ip.run_cell(f"%%distcomp leaky\n{FAILING_SPEC}").success
    with capture_output() as captured:
        result = ip.run_cell(f"%distcomp command leaky --input url={SAS}")
    shown = str(result.error_in_exec) + captured.stdout + captured.stderr
    assert result.error_in_exec is not None and "command: python fail.py" in shown, shown
    assert SIG not in shown and "sig=***" in shown, shown


# -- credentials by a variable's name (issue 39, item 7) ----------------------------------

ENV_SPEC = """\
name: envy
type: DistributedComponent
launcher:
  type: torch.distributed
  additional_arguments: python train.py
environment_variables:
  AZURE_CLIENT_SECRET: s3cr3t-client
  HF_TOKEN: hf_abcdefgh
  WANDB_API_KEY: wandb-0123
  STORAGE: DefaultEndpointsProtocol=https;AccountName=acct;AccountKey=KEY0==;EndpointSuffix=x
  DATABASE_URL: postgresql://admin:pw1234@db/x
  TOKENIZERS_PARALLELISM: "false"
environment:
  docker: {image: 'python:3.11-slim'}
"""
ENV_SECRETS = ("s3cr3t-client", "hf_abcdefgh", "wandb-0123", "KEY0==", "pw1234")


@pytest.mark.parametrize(
    ("name", "secret"),
    [
        ("AZURE_CLIENT_SECRET", True),
        ("HF_TOKEN", True),
        ("WANDB_API_KEY", True),
        ("AWS_SECRET_ACCESS_KEY", True),
        ("DB_PASSWORD", True),
        ("GITHUB_PAT", True),
        ("STORAGE_CONNECTION_STRING", True),
        ("AccountKey", True),
        ("api-key", True),
        ("TOKENIZERS_PARALLELISM", False),
        ("MONKEY", False),
        ("KEYS_DIR", False),
        ("MASTER_PORT", False),
        ("PYTHONHASHSEED", False),
        ("NCCL_DEBUG", False),
        # issue 47, item 7
        ("DB_PASS", True),
        ("API_KEYS", True),
        ("SSH_IDENTITY", True),
        ("api_token", True),
        ("dbPassword", True),
        ("MYSQLPASSWORD", True),
        ("max_tokens", False),
        ("BYPASS_CACHE", False),
        ("IDENTITY_FILE_DIR", False),
    ],
)
def test_a_variable_is_a_credential_by_its_name(name, secret):
    from jupyter_distcomp.core.secrets import is_secret_name

    assert is_secret_name(name) is secret


def test_env_views_and_panel_mask_credentials_by_name_and_value(ip):
    """`%distcomp env` (text and HTML) and the run-settings panel's widgets, whose state is
    saved in the notebook, show none of the spec's credentials; other variables stay."""
    from jupyter_distcomp.notebook.session import Session
    from jupyter_distcomp.notebook.views.preview import preview_html
    from jupyter_distcomp.notebook.widgets import RunSettingsPanel

    assert ip.run_cell(f"%%distcomp envy\n{ENV_SPEC}").success
    with capture_output() as captured:
        assert ip.run_cell("%distcomp env envy").success
    shown = captured.stdout + "".join(
        o.data.get("text/html", "") + o.data.get("text/plain", "") for o in captured.outputs
    ).replace("<wbr>", "")
    assert "HF_TOKEN" in shown and "TOKENIZERS_PARALLELISM" in shown, shown
    assert "AccountName=acct" in shown and "postgresql://admin:***@db/x" in shown, shown
    assert not [s for s in ENV_SECRETS if s in shown], shown
    component = load_component(ENV_SPEC)
    panel = RunSettingsPanel("envy", component, Session())
    try:
        state = repr(panel.get_state()) + preview_html(component)
        for child in panel.children:
            state += repr(child.get_state())
        assert not [s for s in ENV_SECRETS if s in state]
    finally:
        panel.close()


def test_export_refuses_a_variable_named_as_a_credential(tmp_path):
    from jupyter_distcomp.azureml.exporter import export

    component = load_component(ENV_SPEC)
    with pytest.raises(AzureMLError) as raised:
        export(component, tmp_path / "job.yml")
    assert "AZURE_CLIENT_SECRET is named as a credential" in str(raised.value)
    assert "Fix:" in str(raised.value) and "s3cr3t" not in str(raised.value)
    assert not (tmp_path / "job.yml").exists()


def test_an_exported_file_is_its_owners_alone(tmp_path):
    import os
    import stat

    from jupyter_distcomp.azureml.exporter import export

    (tmp_path / "train.py").write_text("print('train')\n")
    target = tmp_path / "job.yml"
    target.write_text("old")
    target.chmod(0o644)
    component = load_component(SPEC.replace("python train.py", "python train.py"))
    path = export(component, target, inputs={"data": str(tmp_path)})
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert yaml.safe_load(path.read_text())["type"] == "command"


# -- more names, a PEM key, an input named as a credential (issue 47, item 7) -------------

PEM = (
    "-----BEGIN OPENSSH PRIVATE KEY-----\n"
    "b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQPEMSECRETBODY\n"
    "-----END OPENSSH PRIVATE KEY-----"
)
TOKEN = "tok_INPUTSECRET123"
SAS_SIG = "SASSIG123SECRET"
LEAKY_SPEC = f"""\
name: leaky2
type: DistributedComponent
inputs:
  data: {{type: path, default: 'https://acct.blob.core.windows.net/c/d?sv=2020&sig={SAS_SIG}'}}
  url: {{type: String, default: 'https://acct.blob.core.windows.net/c/d?sv=2020&sig={SAS_SIG}'}}
  api_token: {{type: String, default: {TOKEN}}}
launcher:
  type: torch.distributed
  additional_arguments: python fail.py --token {{inputs.api_token}}
environment_variables:
  DB_PASS: pg-pass-999
  API_KEYS: "k1-SECRETKEY,k2-SECRETKEY"
  SSH_IDENTITY: {json.dumps(PEM)}
environment:
  docker: {{image: 'python:3.11-slim'}}
"""
LEAKED = ("pg-pass-999", "SECRETKEY", "PEMSECRETBODY", TOKEN, SAS_SIG)


def test_a_private_key_and_a_secret_flag_on_a_command_line_are_masked():
    from jupyter_distcomp.core.secrets import masked_command

    shown = mask_secrets(f"key: {PEM} end")
    assert "PEMSECRETBODY" not in shown and shown.startswith("key: ***") and shown.endswith(" end")
    assert masked_command(["python", "p.py", "--token", TOKEN, "--max-tokens", "5"]) == (
        "python p.py --token *** --max-tokens 5"
    )
    assert masked_command(["python", "p.py", f"--api-key={TOKEN}"]) == "python p.py --api-key=***"
    # a credential's value where no flag names it: masked as the value of its input
    assert masked_command(["python", "p.py", TOKEN], [TOKEN]) == "python p.py ***"


def _widget_state(root) -> str:
    """Everything the notebook would save of ``root``'s widgets: every model's state."""
    from ipywidgets.widgets.widget import _instances

    seen, todo, states = set(), [root.model_id], []
    while todo:
        model_id = todo.pop()
        if model_id in seen or model_id not in _instances:
            continue
        seen.add(model_id)
        state = _instances[model_id].get_state()
        states.append(repr(state))
        todo.extend(
            ref[len("IPY_MODEL_") :]
            for ref in _refs(state)
            if isinstance(ref, str) and ref.startswith("IPY_MODEL_")
        )
    return "\n".join(states)


def _refs(value):
    if isinstance(value, dict):
        for item in value.values():
            yield from _refs(item)
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _refs(item)
    else:
        yield value


def test_views_panel_and_widget_state_hold_no_credential_by_name_or_value(ip, tmp_path):
    from jupyter_distcomp.notebook.session import Session
    from jupyter_distcomp.notebook.views.preview import preview_html, summary_text
    from jupyter_distcomp.notebook.widgets import RunSettingsPanel

    assert ip.run_cell(f"%%distcomp leaky2\n{LEAKY_SPEC}").success
    with capture_output() as captured:
        assert ip.run_cell("%distcomp env leaky2").success
        assert ip.run_cell("leaky2").success  # the definition's summary
        assert ip.run_cell("%distcomp list").success
    shown = captured.stdout + "".join(
        o.data.get("text/html", "") + o.data.get("text/plain", "") for o in captured.outputs
    ).replace("<wbr>", "")
    assert "DB_PASS" in shown and "api_token" in shown, shown
    assert not [s for s in LEAKED if s in shown], shown
    component = load_component(LEAKY_SPEC)
    panel = RunSettingsPanel("leaky2", component, Session())
    try:
        state = _widget_state(panel)
        assert "api_token" in state and "sig=***" in state  # the fields are there, masked
        assert not [s for s in LEAKED if s in state]
        assert not [s for s in LEAKED if s in summary_text(component, "leaky2")]
        assert not [s for s in LEAKED if s in preview_html(component)]
        # setting the input keeps its default, not the mask the box shows
        field = panel.input_fields["api_token"]
        field.toggle.value = True
        assert component.runsettings.inputs["api_token"] == TOKEN
        assert TOKEN not in _widget_state(panel)
        panel.input_fields["url"].toggle.value = True
        assert SAS_SIG in component.runsettings.inputs["url"]
        assert SAS_SIG not in _widget_state(panel)
    finally:
        panel.close()


def test_export_refuses_an_input_named_as_a_credential_and_the_new_names(tmp_path):
    from jupyter_distcomp.azureml.exporter import export

    component = load_component(LEAKY_SPEC.replace("  DB_PASS: pg-pass-999\n", ""))
    component.runsettings.set_input("data", "azureml://datastores/d/paths/x/")
    for name in ("API_KEYS", "SSH_IDENTITY"):
        with pytest.raises(AzureMLError, match=f"{name} is named as a credential"):
            export(component, tmp_path / "job.yml")
        del component.environment_variables[name]
    with pytest.raises(AzureMLError) as raised:
        export(component, tmp_path / "job.yml")
    message = str(raised.value)
    assert "input 'api_token' is named as a credential" in message and TOKEN not in message
    assert not (tmp_path / "job.yml").exists()


@pytest.mark.slow
def test_a_failed_command_masks_a_credential_input_on_its_command_line(ip, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "fail.py").write_text("import sys\nsys.exit(3)\n")
    spec = LEAKY_SPEC.replace(
        "  data: {type: path, default:", "  data: {type: path, optional: true, default:"
    )
    assert ip.run_cell(f"%%distcomp leaky2\n{spec}").success
    with capture_output() as captured:
        result = ip.run_cell("%distcomp command leaky2 --input data=.")
    shown = str(result.error_in_exec) + captured.stdout + captured.stderr
    assert result.error_in_exec is not None and "command: python fail.py" in shown, shown
    assert not [s for s in LEAKED if s in shown], shown
