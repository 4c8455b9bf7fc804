"""A local Azure ML: a test double of Azure ML's REST API, for tests, demos and notebooks
without an Azure account. It is NOT Azure; what it serves is taken from azure-ai-ml's own
code (each route names the azure-ai-ml function that calls it), and the real azure-ai-ml
client talks to it over HTTP on loopback.

A submitted command job runs on local ranks exactly as ``%distcomp command`` runs it, moves
through Azure's states, and writes each process's log where Azure writes it, so
``jobs.stream``, ``jobs.download``, ``jobs.get``, ``jobs.begin_cancel``, ``jobs.show_services``
and ``%distcomp follow`` work against it::

    from jupyter_distcomp.standin import AzureStandIn
    standin = AzureStandIn().start()
    ml_client = standin.ml_client()                  # an azure.ai.ml.MLClient
    settings = standin.session_settings()            # or point %config AzureML at it

How azure-ai-ml reaches it: ``MLClient(transport=standin.transport())`` (transport.py) is
passed by azure-ai-ml to every pipeline it builds from the client (ARM, run history, the data
plane, the requests pipeline that reads the discovery document and the log files' SAS URLs),
and the transport sends Azure's hosts to the stand-in. The code upload's blob client gets
its SAS URI from the stand-in (it points back here). ``jobs.download`` builds its blob
client from the datastore's account name alone (``https://ACCOUNT.blob.core.windows.net``,
azure-ai-ml's ``get_datastore_info``), with azure-core's default transport: it is served
through :meth:`AzureStandIn.storage_proxy`, an HTTPS proxy that azure-core honours through
the ``HTTPS_PROXY`` variable (its default ``use_env_settings``), with a certificate
authority of the stand-in's own trusted through ``REQUESTS_CA_BUNDLE`` while the block runs.

- ``server``: the HTTP server, :class:`AzureStandIn`, faults
- ``arm``: ARM routes: workspace, code upload, jobs, cancel, datastores, computes
- ``runhistory``: discovery, run details and their log URLs, service instances, run data
- ``blobs``: Blob Storage with range reads, disk-backed datastores
- ``jobs``: a job's states, ranks and logs
- ``plan``: a job's REST body as a local run
- ``catalog``: the workspace's names, computes, sizes, datastores
- ``transport``: Azure's hosts -> the stand-in
- ``proxy``: the HTTPS proxy for blob clients that take no transport
"""

from __future__ import annotations

from .blobs import SAS_SIGNATURE
from .catalog import (
    ACCOUNT,
    COMPUTES,
    INTERACTIVE_ENDPOINT,
    LOCATION,
    RESOURCE_GROUP,
    SUBSCRIPTION,
    TOKEN,
    VM_SIZES,
    WORKSPACE,
)
from .server import AzureStandIn, FakeCredential, Recorded
from .transport import ARM

__all__ = [
    "ACCOUNT",
    "ARM",
    "COMPUTES",
    "INTERACTIVE_ENDPOINT",
    "LOCATION",
    "RESOURCE_GROUP",
    "SAS_SIGNATURE",
    "SUBSCRIPTION",
    "TOKEN",
    "VM_SIZES",
    "WORKSPACE",
    "AzureStandIn",
    "FakeCredential",
    "Recorded",
]
