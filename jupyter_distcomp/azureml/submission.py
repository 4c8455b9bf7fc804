"""Submit a component to an Azure ML workspace and follow its status.

Every failure becomes an AzureMLError that says what happened, keeps what the service said (its
error code, message and request id) and names the fix; the built job is attached to the error
(``exc.job``) so nothing the user prepared is lost. Retries of 429 and 5xx answers are
azure-core's retry policy (tune it with ``retry_total`` / ``retry_backoff_factor`` in the
client keyword arguments); the error comes once those are used up. Tokens, SAS signatures and
client secrets are scrubbed from every message.
"""

from __future__ import annotations

import contextlib
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import AzureMLError, AzureMLWarning
from .checks import outside_package
from .convert import to_azureml_job
from .debugged import ENV_CELLS, cells_command
from .failures import explain, scrub

if TYPE_CHECKING:
    from ..core.model import Component

TERMINAL_STATUSES = ("Completed", "Failed", "Canceled", "NotResponding", "Paused")


def job_status(job: Any) -> str:
    """The job's status as text (``Running``, ``Completed``, ...), empty when it has none."""
    status = getattr(job, "status", None)
    return str(getattr(status, "value", status) or "")


def find_credentials() -> list[str]:
    """Where DefaultAzureCredential could get a token from, judged without any network call.

    A quick, offline check for notebooks and CI: an empty list means "not signed in", so a
    demo can skip submission with a message instead of waiting for token requests to fail.
    (Managed identity on a plain Azure VM, found only by probing IMDS, is not detected.)
    """
    import os
    import shutil

    env = os.environ
    found = []
    secrets = ("AZURE_CLIENT_SECRET", "AZURE_CLIENT_CERTIFICATE_PATH", "AZURE_FEDERATED_TOKEN_FILE")
    if env.get("AZURE_CLIENT_ID") and env.get("AZURE_TENANT_ID") and any(map(env.get, secrets)):
        found.append("environment variables (service principal / workload identity)")
    if env.get("IDENTITY_ENDPOINT") or env.get("MSI_ENDPOINT"):
        found.append("managed identity")
    config_dir = Path(env.get("AZURE_CONFIG_DIR") or Path.home() / ".azure")
    signed_in = any(
        (config_dir / f).exists() for f in ("msal_token_cache.json", "azureProfile.json")
    )
    if shutil.which("az") and signed_in:
        found.append("Azure CLI sign-in (az login)")
    return found


def make_ml_client(
    workspace_config: Any = None,
    subscription_id: str | None = None,
    resource_group: str | None = None,
    workspace_name: str | None = None,
    credential: Any = None,
    **client_kwargs: Any,
):
    """An ``MLClient`` for one workspace: explicit names, else a config.json.

    The credential defaults to ``DefaultAzureCredential`` (``az login``, environment variables,
    managed identity, ...); no token is requested until the first call.
    """
    from azure.ai.ml import MLClient

    if credential is None:
        from azure.identity import DefaultAzureCredential

        credential = DefaultAzureCredential()
    names = {
        "subscription_id": subscription_id,
        "resource_group": resource_group,
        "workspace_name": workspace_name,
    }
    if all(names.values()):
        return MLClient(
            credential,
            subscription_id=subscription_id,
            resource_group_name=resource_group,
            workspace_name=workspace_name,
            **client_kwargs,
        )
    if workspace_config is None and any(names.values()):
        missing = ", ".join(k for k, v in names.items() if not v)
        raise AzureMLError(
            f"to find the workspace, {missing} is needed as well. Fix: pass all of "
            "--subscription, --resource-group and --workspace (or %config AzureML."
            "subscription_id / resource_group / workspace_name), or --workspace-config config.json."
        )
    from azure.ai.ml.exceptions import MlException

    if workspace_config is not None and not Path(workspace_config).expanduser().exists():
        raise AzureMLError(
            f"the workspace configuration '{workspace_config}' does not exist. Fix: download "
            "config.json from the workspace's page in Azure ML studio and give its path."
        )
    try:
        return MLClient.from_config(
            credential, path=str(workspace_config) if workspace_config else None, **client_kwargs
        )
    except (MlException, OSError, ValueError) as exc:
        where = f"'{workspace_config}'" if workspace_config else "this folder or its parents"
        raise AzureMLError(
            f"no Azure ML workspace configuration found in {where}: {scrub(str(exc))}. Fix: "
            "download config.json from the workspace's page in Azure ML studio and pass "
            "--workspace-config PATH (or %config AzureML.workspace_config = 'PATH'), or give "
            "--subscription, --resource-group and --workspace."
        ) from None


def submit(
    component: Component,
    ml_client: Any,
    *,
    wait: bool = False,
    on_status: Callable[[str, str], None] | None = None,
    poll_interval: float = 10.0,
    timeout: float | None = None,
    preflight: bool = True,
    on_warning: Callable[[str], None] | None = None,
    diagnose: bool = False,
    handle: str | None = None,
    debug: bool = False,
    idle_minutes: float | None = None,
    ssh_key: Any = None,
    cells: bool = False,
    **job_kwargs: Any,
):
    """Build the job from the component's run settings and submit it; returns the created Job.

    ``job_kwargs`` are those of :func:`to_azureml_job` (inputs, outputs, compute, ...). With
    ``preflight``, the layout is first checked against the compute (see
    :mod:`~jupyter_distcomp.azureml.preflight`): a layout it cannot run is refused, its
    warnings go to ``on_warning`` (default: an AzureMLWarning). With ``diagnose``, the job's
    code snapshot carries our rank side and its command the prefix that loads it (see
    :mod:`~jupyter_distcomp.azureml.snapshot`): each rank writes a ``[distcomp rank-state]``
    line into its log on a stall, on SIGTERM or on a failure. With ``debug`` (diagnostics
    too), the notebook can attach to the running job (see :mod:`~jupyter_distcomp.azureml.
    attach`): the SSH service on every node with the public key ``ssh_key`` (default: the
    first of ~/.ssh), and each ``breakpoint()`` waits ``idle_minutes`` (default 30) for the
    notebook; with ``cells`` too, the job's ranks run the notebook's cells instead of the
    spec's command (``%%distcomp run NAME --job JOB``, debugged.py). With ``wait``, follows
    the job until it ends (see :func:`wait_for_job`) and returns the final job. ``handle``:
    the notebook's name of the component, which the preflight's fixes name (default: its
    spec's ``name:``).
    """
    attach: dict[str, str] = {}
    if debug:
        from .debugged import debugged

        job_kwargs, attach = debugged(job_kwargs, idle_minutes, ssh_key, cells)
        diagnose = True
    elif cells:
        raise AzureMLError(
            "--cells needs --debug: the notebook reaches the job's ranks through attach. Fix: "
            "`%distcomp submit NAME --compute C --debug --cells`."
        )
    with contextlib.ExitStack() as snapshot:
        created = _create(
            component,
            ml_client,
            snapshot,
            (preflight, handle),
            on_warning,
            diagnose,
            job_kwargs,
            attach,
        )
    if wait:
        return wait_for_job(
            ml_client,
            created.name,
            on_status=on_status,
            poll_interval=poll_interval,
            timeout=timeout,
            first=created,
        )
    return created


def _create(
    component: Component,
    ml_client: Any,
    snapshot: contextlib.ExitStack,
    preflight: tuple[bool, str | None],
    on_warning: Callable[[str], None] | None,
    diagnose: bool,
    job_kwargs: dict[str, Any],
    attach: dict[str, str] | None = None,
) -> Any:
    """The job built (from a snapshot with our rank side, with ``diagnose``; with that of
    attach and its variables too, with ``attach``), checked and created; the snapshot
    lives as long as ``snapshot`` (the upload reads it). ``preflight``: whether to check
    the layout against the compute, and the component's handle."""
    code = None
    if diagnose:
        from .convert import code_folder
        from .snapshot import diagnosed_snapshot

        code = code_folder(component, job_kwargs.get("code"))
        copy = snapshot.enter_context(diagnosed_snapshot(code, bool(attach)))
        job_kwargs = {**job_kwargs, "code": copy}
    job = to_azureml_job(component, **job_kwargs)
    if attach:
        job.environment_variables = {**(job.environment_variables or {}), **attach}
        if attach.get(ENV_CELLS):
            job.command = cells_command(job.command or "")
    plain_command = job.command
    try:
        if code is not None:
            from .convert import validate_job
            from .snapshot import diagnosed_command

            job.command = diagnosed_command(job.command or "")
            validate_job(job, component.name)
        return _checked_and_created(component, ml_client, job, *preflight, on_warning)
    except AzureMLError as error:
        if code is not None:  # the snapshot goes: the job kept is the plain one
            job.code, job.command = str(code), plain_command
        error.job = job
        raise


def _checked_and_created(
    component: Component,
    ml_client: Any,
    job: Any,
    preflight: bool,
    handle: str | None,
    on_warning: Callable[[str], None] | None,
) -> Any:
    if not job.compute:
        raise AzureMLError(
            f"submitting '{handle or component.name}' needs a compute target. Fix: pass "
            "compute='NAME' "
            "(`--compute NAME`), set the component's run settings compute, or "
            "%config AzureML.compute = 'NAME'."
        )
    if preflight:
        from .preflight import check_compute

        for note in check_compute(component, job, ml_client, handle):
            if on_warning is not None:
                on_warning(note)
            else:
                warnings.warn(AzureMLWarning(note), stacklevel=outside_package())
    try:
        return ml_client.jobs.create_or_update(job)
    except Exception as exc:
        raise explain(exc, ml_client) from None


def wait_for_job(
    ml_client: Any,
    name: str,
    *,
    on_status: Callable[[str, str], None] | None = None,
    poll_interval: float = 10.0,
    timeout: float | None = None,
    first: Any = None,
    on_job: Callable[[Any], None] | None = None,
):
    """Poll the job until it reaches a terminal status; ``on_status(old, new)`` on each change,
    ``on_job(job)`` with every job read (its services' endpoints appear once it runs)."""
    deadline = None if timeout is None else time.monotonic() + timeout
    previous = job_status(first) if first is not None else ""
    while True:
        try:
            job = ml_client.jobs.get(name)
        except Exception as exc:
            raise explain(exc, ml_client, f"read the status of job '{name}'") from None
        status = job_status(job)
        if on_job is not None:
            on_job(job)
        if status != previous and on_status is not None:
            on_status(previous, status)
        previous = status
        if status in TERMINAL_STATUSES:
            return job
        if deadline is not None and time.monotonic() > deadline:
            raise AzureMLError(
                f"job '{name}' is still {status} after {timeout:g} s; it keeps running on "
                f"Azure ML. Follow it with wait_for_job(ml_client, '{name}') or in the studio."
            )
        time.sleep(poll_interval)
