"""The preflight of a submission: the layout against the compute, with the real azure-ai-ml
client over HTTP against the local stand-in (its computes and VM sizes: tests/azure_standin.py).

A refused layout sends nothing after the compute reads: no upload, no job.
"""

from __future__ import annotations

import pytest

from jupyter_distcomp import AzureMLError, load_component
from jupyter_distcomp.azureml import preflight, submit
from jupyter_distcomp.errors import AzureMLWarning

from .azure_standin import AzureStandIn, FakeCredential

pytest.importorskip("azure.ai.ml")
pytestmark = [
    pytest.mark.slow,
    pytest.mark.filterwarnings("ignore:The `context` parameter is deprecated"),
]

SPEC = """\
name: train
type: DistributedComponent
inputs:
  data: {type: AnyDirectory}
launcher:
  type: LAUNCHER
  additional_arguments: python train.py --data {inputs.data}
environment:
  name: AzureML-Minimal
"""
DATA = "azureml://datastores/workspaceblobstore/paths/mnist/"


@pytest.fixture
def standin():
    preflight._SIZES.clear()  # the VM sizes are cached per subscription and location
    with AzureStandIn() as server:
        yield server


def make(tmp_path, launcher, nodes=1, per_node=1):
    (tmp_path / "train.py").write_text("print('training')\n")
    (tmp_path / "spec.yaml").write_text(SPEC.replace("LAUNCHER", launcher))
    component = load_component(tmp_path / "spec.yaml")
    component.runsettings.resource_layout.configure(
        instance_count=nodes, process_count_per_node=per_node
    )
    return component


def refused(standin, component, compute) -> str:
    before = (len(standin.job_puts()), len(standin.find("POST", "/codes/")))
    with pytest.raises(AzureMLError) as info:
        submit(
            component,
            standin.ml_client(show_progress=False),
            inputs={"data": DATA},
            compute=compute,
        )
    # nothing uploaded or submitted
    assert (len(standin.job_puts()), len(standin.find("POST", "/codes/"))) == before
    assert info.value.job.compute == compute  # the built job is kept
    return str(info.value)


@pytest.mark.parametrize(
    ("launcher", "compute", "per_node", "expected"),
    [
        (
            "torch.distributed",
            "gpu-small",
            8,
            "process_count_per_node 8 > 1 GPU of Standard_NC6s_v3 on compute 'gpu-small' "
            "(torch.distributed starts one process per GPU). Fix: set process_count_per_node "
            "to 1 (%distcomp layout train --process-count-per-node 1, or the panel's processes "
            "per node field), or choose a compute with 8 GPUs",
        ),
        (
            "deepspeed",
            "gpu",
            6,
            "process_count_per_node 6 > 4 GPUs of Standard_NC24s_v3 on compute 'gpu'",
        ),
    ],
)
def test_more_processes_than_gpus_is_refused(
    standin, tmp_path, launcher, compute, per_node, expected
):
    message = refused(standin, make(tmp_path, launcher, per_node=per_node), compute)
    assert expected in message
    assert "--no-preflight" in message


def test_more_nodes_than_the_cluster_has_is_refused(standin, tmp_path):
    message = refused(standin, make(tmp_path, "mpi", nodes=5, per_node=2), "cpu")
    assert (
        "'train' does not fit compute 'cpu' (STANDARD_DS3_V2): instance_count 5 > the 4 nodes "
        "of compute 'cpu'. Fix: set instance_count to 4 or less (%distcomp "
        "layout train --instance-count 4, or the panel's nodes field), raise its maximum (az ml "
        "compute update --name cpu --max-instances 5), or choose a compute with 5 nodes"
    ) in message
    # a compute instance is one node; both problems are named at once
    message = refused(standin, make(tmp_path, "torch.distributed", 2, 2), "my-instance")
    assert "instance_count 2 > the compute instance's 1 node of compute 'my-instance'" in message
    assert "; and process_count_per_node 2 > 1 GPU of Standard_NC6s_v3" in message


def test_unknown_compute_is_refused_with_the_workspace_computes(standin, tmp_path):
    message = refused(standin, make(tmp_path, "mpi"), "gpu-clutser")
    assert "compute 'gpu-clutser' does not exist in workspace 'ws-distcomp'" in message
    assert "'gpu-cluster'" in message and "'my-instance'" in message
    assert "az ml compute create --name gpu-clutser" in message


def test_a_fitting_layout_is_submitted_after_two_reads(standin, tmp_path):
    ml_client = standin.ml_client(show_progress=False)
    component = make(tmp_path, "torch.distributed", nodes=4, per_node=4)
    for _ in range(2):
        submit(component, ml_client, inputs={"data": DATA}, compute="gpu")
    reads = [
        r.path.rsplit("/", 2)[-2:]
        for r in standin.requests
        if r.method == "GET" and ("/computes/" in r.path or r.path.endswith("/vmSizes"))
    ]
    # the compute each time, the VM sizes of its location once (they do not change)
    assert reads == [["computes", "gpu"], ["westeurope", "vmSizes"], ["computes", "gpu"]]
    body = standin.job_puts()[-1].body["properties"]
    assert body["resources"]["instanceCount"] == 4
    assert body["distribution"]["processCountPerInstance"] == 4


def test_idle_gpus_warn_and_unchecked_computes_pass(standin, tmp_path):
    ml_client = standin.ml_client(show_progress=False)
    with pytest.warns(AzureMLWarning, match=r"3 GPU\(s\) per node stay idle") as caught:
        submit(make(tmp_path, "deepspeed"), ml_client, inputs={"data": DATA}, compute="gpu")
    (warning,) = [w for w in caught if issubclass(w.category, AzureMLWarning)]
    assert "set process_count_per_node to 4" in str(warning.message)
    # a Kubernetes compute has no VM size or node limit here: nothing is checked or refused
    submit(
        make(tmp_path, "torch.distributed", 16, 8), ml_client, inputs={"data": DATA}, compute="aks"
    )
    assert len(standin.job_puts()) == 2


def test_compute_not_readable_says_the_check_can_be_skipped(standin, tmp_path):
    standin.fail("GET", r"/computes/gpu$", 403, "may not read computes", "AuthorizationFailed")
    message = refused(standin, make(tmp_path, "torch.distributed"), "gpu")
    assert "could not read the compute 'gpu'" in message and "HTTP 403" in message
    assert "--no-preflight" in message


def test_gpu_launcher_on_a_cpu_vm_warns_and_submits(standin, tmp_path):
    component = make(tmp_path, "torch.distributed", per_node=2)
    with pytest.warns(AzureMLWarning) as caught:
        submit(
            component,
            standin.ml_client(show_progress=False),
            inputs={"data": DATA},
            compute="cpu-cluster",
        )
    (warning,) = [w for w in caught if issubclass(w.category, AzureMLWarning)]
    assert "Standard_DS3_v2 of compute 'cpu-cluster' has no GPUs" in str(warning.message)
    assert "choose a GPU compute" in str(warning.message)
    assert warning.filename == __file__  # shown at the user's call, not inside the package
    assert len(standin.job_puts()) == 1


def test_vm_sizes_not_readable_leaves_the_gpu_check_out(standin, tmp_path):
    standin.fail("GET", r"/vmSizes$", 403, "no subscription-level read", "AuthorizationFailed")
    submit(
        make(tmp_path, "torch.distributed", per_node=8),
        standin.ml_client(show_progress=False),
        inputs={"data": DATA},
        compute="gpu-small",
    )
    assert len(standin.job_puts()) == 1
    # the nodes are still checked: they come from the compute itself
    assert "instance_count 3 > the 2 nodes" in refused(
        standin, make(tmp_path, "torch.distributed", nodes=3), "gpu-small"
    )


def test_magic_refuses_and_no_preflight_skips(ip, standin, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").write_text("print('training')\n")
    assert ip.run_cell(f"%%distcomp train\n{SPEC.replace('LAUNCHER', 'torch.distributed')}").success
    assert ip.run_cell("%distcomp layout train --process-count-per-node 8").success
    settings = ip.magics_manager.registry["DistCompMagics"].session.azureml
    settings.credential = FakeCredential()
    settings.client_kwargs = standin.client_kwargs(show_progress=False)
    settings.subscription_id = standin.subscription
    settings.resource_group = standin.resource_group
    settings.workspace_name = standin.workspace
    line = f"%distcomp submit train --compute gpu-small --input data={DATA}"
    result = ip.run_cell(line)
    assert isinstance(result.error_in_exec, AzureMLError)
    assert "process_count_per_node 8 > 1 GPU of Standard_NC6s_v3" in str(result.error_in_exec)
    assert standin.job_puts() == []
    computes_read = len(standin.find("GET", "/computes/"))
    assert ip.run_cell(line + " --no-preflight").success
    ip.run_line_magic("config", "AzureML.preflight = False")
    try:
        assert ip.run_cell(line).success
    finally:
        ip.run_line_magic("config", "AzureML.preflight = True")
    assert len(standin.job_puts()) == 2
    assert len(standin.find("GET", "/computes/")) == computes_read  # not read when skipped


def test_the_fixes_name_the_notebooks_handle_and_work_as_written(
    ip, standin, tmp_path, monkeypatch
):
    """``%%distcomp mn`` over a spec named multinode_cpu: the refusal's fix is a line that
    runs as written in that notebook."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").write_text("print('training')\n")
    spec = SPEC.replace("LAUNCHER", "mpi").replace("name: train", "name: multinode_cpu")
    assert ip.run_cell(f"%%distcomp mn\n{spec}").success
    assert ip.run_cell("%distcomp layout mn --instance-count 5 --process-count-per-node 1").success
    settings = ip.magics_manager.registry["DistCompMagics"].session.azureml
    for key, value in standin.session_settings().items():
        setattr(settings, key, value)
    line = f"%distcomp submit mn --compute cpu --input data={DATA}"
    result = ip.run_cell(line)
    message = str(result.error_in_exec)
    assert "'mn' does not fit compute 'cpu'" in message, message
    fix = "%distcomp layout mn --instance-count 4"
    assert fix in message and "multinode_cpu" not in message, message
    assert standin.job_puts() == []
    assert ip.run_cell(fix).success  # the fix, as the message writes it
    assert ip.run_cell(line).success
    assert standin.job_puts()[0].body["properties"]["resources"]["instanceCount"] == 4


BARE_SPEC = """\
name: multinode_cpu
type: DistributedComponent
launcher:
  type: mpi
  additional_arguments: python train.py
"""
ASKED = "'mn' names no environment: the job runs in Azure ML's base image"


def test_a_spec_without_environment_is_submitted_only_when_the_user_says_so(tmp_path):
    """A real kernel whose stdin requests are answered as a notebook answers them, with the
    stand-in in it: the question comes before any request, "n" sends nothing, "y" and
    ``--no-environment`` submit, and a frontend without stdin is refused with both fixes."""
    from .debug_support import DebugKernel

    (tmp_path / "train.py").write_text("print('training')\n")
    kernel = DebugKernel(cwd=str(tmp_path))
    try:
        assert kernel.run("%load_ext jupyter_distcomp").ok
        assert kernel.run(f"%%distcomp mn\n{BARE_SPEC}").ok
        started = kernel.run(
            "from jupyter_distcomp.standin import AzureStandIn\n"
            "standin = AzureStandIn(statuses=('Queued',)).start().use_in_notebook()"
        )
        assert started.ok, started.text

        def sent() -> tuple[int, int]:
            out = kernel.run(
                "print('sent', len(standin.requests), len(standin.find('PUT', '/jobs/')))"
            )
            assert out.ok, out.text
            return tuple(int(n) for n in out.text.split("sent ")[1].split()[:2])

        said_no = kernel.run("%distcomp submit mn --compute cpu", ["n"])
        assert said_no.ok, said_no.text
        assert len(said_no.prompts) == 1 and said_no.prompts[0].startswith(ASKED)
        assert said_no.prompts[0].endswith("Submit it in that image all the same? [y/N] ")
        assert "Not submitted: " in said_no.text and "--no-environment" in said_no.text
        assert sent() == (0, 0), "answering no sends nothing to the workspace"

        no_stdin = kernel.run("%distcomp submit mn --compute cpu", stdin=False)
        assert not no_stdin.ok and not no_stdin.prompts
        assert "Not submitted: " + ASKED in no_stdin.text, no_stdin.text
        assert "`%distcomp submit mn --no-environment`" in no_stdin.text
        assert "environment: {name: AzureML-ACPT-pytorch" in no_stdin.text
        assert sent() == (0, 0)

        said_yes = kernel.run("%distcomp submit mn --compute cpu", ["y"])
        assert said_yes.ok and len(said_yes.prompts) == 1, said_yes.text
        assert sent()[1] == 1
        stated = kernel.run("%distcomp submit mn --compute cpu --no-environment")
        assert stated.ok and not stated.prompts, stated.text
        assert sent()[1] == 2
        kernel.run("standin.stop()")
    finally:
        kernel.close()
