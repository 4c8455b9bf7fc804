"""What the stand-in's workspace holds before anything is submitted: its computes, the VM
sizes of its region, its datastores, and the names everything is known by."""

from __future__ import annotations

from .transport import ACCOUNT, LOCATION

SUBSCRIPTION = "00000000-1111-2222-3333-444444444444"
RESOURCE_GROUP = "rg-distcomp"
WORKSPACE = "ws-distcomp"
TOKEN = "FAKE-BEARER-TOKEN-6f1d2c9a"  # a test greps outputs and files for it

#: the VM sizes of the location, as ``locations/LOC/vmSizes`` lists them (real sizes' figures)
VM_SIZES = [
    {
        "name": name,
        "family": family,
        "vCPUs": cpus,
        "gpus": gpus,
        "osVhdSizeMB": 1047552,
        "maxResourceVolumeMB": disk,
        "memoryGB": memory,
        "lowPriorityCapable": True,
        "premiumIO": True,
        "supportedComputeTypes": ["Cluster", "ComputeInstance"],
    }
    for name, family, cpus, gpus, memory, disk in (
        ("Standard_DS3_v2", "standardDSv2Family", 4, 0, 14.0, 28672),
        ("Standard_NC6s_v3", "standardNCSv3Family", 6, 1, 112.0, 344064),
        ("Standard_NC24s_v3", "standardNCSv3Family", 24, 4, 448.0, 1376256),
        ("Standard_ND96asr_v4", "standardNDASv4_A100Family", 96, 8, 900.0, 6830080),
    )
]
#: the workspace's computes: name -> (computeType, VM size as Azure writes it, max nodes)
COMPUTES = {
    "cpu": ("AmlCompute", "STANDARD_DS3_V2", 4),
    "cpu-cluster": ("AmlCompute", "STANDARD_DS3_V2", 4),
    "cpu-default": ("AmlCompute", "STANDARD_DS3_V2", 4),
    "gpu": ("AmlCompute", "STANDARD_NC24S_V3", 4),
    "gpu-cluster": ("AmlCompute", "STANDARD_NC24S_V3", 4),
    "gpu-small": ("AmlCompute", "STANDARD_NC6S_V3", 2),
    "my-instance": ("ComputeInstance", "STANDARD_NC6S_V3", 1),
    "aks": ("Kubernetes", "", 0),
}
#: the workspace's datastores: name -> blob container (all in the account ACCOUNT). The
#: artifact store holds each job's logs under ``ExperimentRun/dcid.JOB/``, the default
#: blob store the data inputs and the named outputs (``azureml/JOB/OUTPUT/``)
DATASTORES = {
    "workspaceblobstore": "azureml-blobstore-standin",
    "workspaceartifactstore": "azureml",
    "workspacefilestore": "azureml-filestore-standin",
}
DEFAULT_DATASTORE = "workspaceblobstore"
ARTIFACT_DATASTORE = "workspaceartifactstore"

#: where the stand-in says a running job's interactive service listens
INTERACTIVE_ENDPOINT = "https://standin.instances.azureml.ms/{}"

__all__ = ["ACCOUNT", "LOCATION"]
