"""The azure-core transport that carries azure-ai-ml's requests to the stand-in.

azure-ai-ml passes an ``MLClient``'s ``transport=`` keyword to every pipeline it builds from
the client: the ARM clients, the run history and data-plane clients (``_service_client_kwargs``)
and the ``requests_pipeline`` that reads the workspace's discovery document and the log
files' SAS URLs (``download_text_from_url``). This transport sends, after azure-core's
policies ran (so the bearer-token policy still sees an https URL and attaches the token):

- ``https://management.azure.com/...`` (ARM) to ``STANDIN/...``
- ``https://LOCATION.api.azureml.ms/...`` (discovery, run history, data plane) to ``STANDIN/...``
- ``https://ACCOUNT.blob.core.windows.net/...`` to ``STANDIN/ACCOUNT/...`` (Azurite's style)

Anything else goes out unchanged.
"""

from __future__ import annotations

import re
from typing import Any

ARM = "https://management.azure.com"
LOCATION = "westeurope"
#: the workspace's region API host, as the discovery document names it
API = f"https://{LOCATION}.api.azureml.ms"
ACCOUNT = "devstoreaccount1"
_BLOB_HOST = re.compile(r"^https://(?P<account>[a-z0-9]+)\.blob\.core\.windows\.net(?=/|$)")


def standin_url(url: str, base_url: str) -> str:
    """``url`` as the stand-in at ``base_url`` serves it (unchanged when it serves no such host)."""
    for host in (ARM, API):
        if url.startswith(host):
            return base_url + url[len(host) :]
    match = _BLOB_HOST.match(url)
    if match:
        return f"{base_url}/{match['account']}{url[match.end() :]}"
    return url


def make_transport(base_url: str, **kwargs: Any):
    from azure.core.pipeline.transport import RequestsTransport

    class StandInTransport(RequestsTransport):
        """Sends requests meant for Azure's hosts to the stand-in (after all policies)."""

        def send(self, request, **send_kwargs):
            original = request.url
            request.url = standin_url(original, base_url)
            try:
                return super().send(request, **send_kwargs)
            finally:  # a retry goes through the policies again, which expect the https URL
                request.url = original

    kwargs.setdefault("use_env_settings", False)
    return StandInTransport(**kwargs)
