"""Preflight: the job's layout against the compute it goes to, before anything is uploaded.

Reads the compute target (``ml_client.compute.get``: its VM size and, for a cluster, its
maximum nodes) and the GPUs of that VM size (``ml_client.compute.list_sizes`` for the
compute's location; cached per subscription and location, as GPU counts do not change), then:

- refuses an ``instance_count`` above the cluster's maximum nodes (a compute instance is one
  node);
- refuses, for torch.distributed and deepspeed (one process per GPU), a
  ``process_count_per_node`` above the GPUs of a GPU VM size;
- warns when one of those launchers targets a VM size without GPUs (it may train on CPUs with
  gloo, so this is not refused), or leaves GPUs of each node idle;
- refuses a compute that does not exist in the workspace, naming those that do.

Other computes (Kubernetes, attached VMs) and VM sizes the location does not list pass
unchecked. ``submit(..., preflight=False)`` / ``--no-preflight`` /
``%config AzureML.preflight = False`` skip it all.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

from ..errors import AzureMLError
from .failures import explain, workspace_label

if TYPE_CHECKING:
    from ..core.model import Component

#: launchers that start one process per GPU
GPU_LAUNCHERS = ("torch.distributed", "deepspeed")
SKIP = (
    "(to skip this check: --no-preflight, %config AzureML.preflight = False, or "
    "submit(..., preflight=False))"
)
#: (subscription, location) -> {lowercase VM size name: (its name, its GPUs)}
_SIZES: dict[tuple[str, str], dict[str, tuple[str, int]]] = {}
_SIZES_LOCK = threading.Lock()


def compute_name(compute: str) -> str:
    """``azureml:NAME`` or a compute's ARM id -> NAME."""
    name = compute.split("/computes/")[-1] if "/computes/" in compute else compute
    return name.removeprefix("azureml:").strip("/")


def vm_gpus(ml_client: Any, size: str, location: str | None) -> tuple[str, int] | None:
    """(the VM size's name as Azure lists it, its GPUs); None when the location does not list
    it, or the identity may not read the list (a role on the workspace alone: HTTP 403)."""
    from azure.core.exceptions import HttpResponseError

    key = (str(ml_client.subscription_id), (location or "").lower())
    with _SIZES_LOCK:
        sizes = _SIZES.get(key)
    if sizes is None:
        try:
            listed = ml_client.compute.list_sizes(location=location)
            sizes = {str(s.name).lower(): (str(s.name), int(s.gpus or 0)) for s in listed}
        except HttpResponseError as exc:
            if exc.status_code != 403:
                raise explain(exc, ml_client, f"list the VM sizes of {location}") from None
            sizes = {}  # not allowed to read them: the GPU check is left out
        with _SIZES_LOCK:
            _SIZES[key] = sizes
    return sizes.get(size.lower())


def _read_compute(ml_client: Any, name: str) -> Any:
    """The compute; a missing one is refused with the names the workspace has."""
    from azure.core.exceptions import ResourceNotFoundError

    action = f"read the compute '{name}'"
    try:
        return ml_client.compute.get(name)
    except ResourceNotFoundError as missing:
        try:  # the workspace answers the list only if it exists: tells the two 404s apart
            names = sorted(c.name for c in ml_client.compute.list())
        except Exception:
            raise explain(missing, ml_client, action) from None
        have = ", ".join(f"'{n}'" for n in names) or "none"
        raise AzureMLError(
            f"compute '{name}' does not exist in {workspace_label(ml_client)}; its computes: "
            f"{have}. Fix: pass one of them (--compute NAME, the panel's compute field or "
            f"%config AzureML.compute), or create it (az ml compute create --name {name} "
            "--type amlcompute --size VM_SIZE --max-instances N)."
        ) from None
    except Exception as exc:
        error = explain(exc, ml_client, action)
        if error.status_code == 403:  # may submit, not read computes: the check can be left out
            hinted = AzureMLError(f"{error} {SKIP}")
            hinted.status_code = 403
            raise hinted from None
        raise error from None


def check_compute(
    component: Component, job: Any, ml_client: Any, handle: str | None = None
) -> list[str]:
    """Refuse (AzureMLError) a layout the compute cannot run; return warnings to show. They
    name the component by ``handle``, the notebook's name for it (default: the spec's
    ``name:``), which their fixes (``%distcomp layout HANDLE ...``) take."""
    handle = handle or component.name
    name = compute_name(str(job.compute))
    compute = _read_compute(ml_client, name)
    kind = str(getattr(compute, "type", "") or "").lower()
    if kind not in ("amlcompute", "computeinstance"):
        return []
    size = str(getattr(compute, "size", "") or "")
    max_nodes = 1 if kind == "computeinstance" else getattr(compute, "max_instances", None)
    nodes = int(getattr(job.resources, "instance_count", None) or 1)
    where = f"compute '{name}'" + (f" ({size})" if size else "")
    problems: list[str] = []
    warnings: list[str] = []
    if max_nodes is not None and nodes > int(max_nodes):
        limit = (
            "the compute instance's 1 node"
            if kind == "computeinstance"
            else (f"the {max_nodes} nodes")
        )
        grow = (
            f"raise its maximum (az ml compute update --name {name} --max-instances {nodes}), "
            if kind == "amlcompute"
            else ""
        )
        problems.append(
            f"instance_count {nodes} > {limit} of compute '{name}'. Fix: set instance_count to "
            f"{max_nodes} or less (%distcomp layout {handle} --instance-count "
            f"{max_nodes}, or the panel's nodes field), {grow}or choose a compute with "
            f"{nodes} nodes"
        )
    launcher = component.launcher_type
    if launcher in GPU_LAUNCHERS and size:
        found = vm_gpus(ml_client, size, getattr(compute, "location", None))
        per_node = int(getattr(job.distribution, "process_count_per_instance", None) or 1)
        if found is not None and found[1] == 0:
            warnings.append(
                f"'{handle}' uses the {launcher} launcher, which usually runs one "
                f"process per GPU, but {found[0]} of compute '{name}' has no GPUs: its "
                f"{per_node} process(es) per node will run on CPUs (gloo). Fix: choose a GPU "
                "compute (--compute NAME), or ignore this if the script trains on CPUs."
            )
        elif found is not None and per_node > found[1]:
            gpus = found[1]
            problems.append(
                f"process_count_per_node {per_node} > {gpus} GPU{'s' * (gpus != 1)} of "
                f"{found[0]} on compute '{name}' ({launcher} starts one process per GPU). "
                f"Fix: set process_count_per_node to {gpus} (%distcomp layout "
                f"{handle} --process-count-per-node {gpus}, or the panel's "
                f"processes per node field), or choose a compute with {per_node} GPUs"
            )
        elif found is not None and per_node < found[1]:
            idle = found[1] - per_node
            warnings.append(
                f"'{handle}' runs {per_node} process(es) per node on compute '{name}' "
                f"({found[0]}, {found[1]} GPUs): {idle} GPU(s) per node stay idle, as "
                f"{launcher} uses one GPU per process. Fix: set process_count_per_node to "
                f"{found[1]} (%distcomp layout {handle} --process-count-per-node "
                f"{found[1]}), or ignore this if each process uses several GPUs."
            )
    if problems:
        raise AzureMLError(
            f"'{handle}' does not fit {where}: " + "; and ".join(problems) + f". {SKIP}"
        )
    return warnings


__all__ = ["GPU_LAUNCHERS", "check_compute", "compute_name", "vm_gpus"]
