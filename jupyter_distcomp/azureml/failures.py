"""Exceptions from azure-core, azure-identity and azure-ai-ml -> one clear AzureMLError.

Each message says what happened, keeps what the service said (error code, message, request id)
and names the fix. Tokens, SAS signatures, JWTs and client secrets are scrubbed from all of it.
"""

from __future__ import annotations

from typing import Any

from ..core.secrets import mask_secrets as scrub
from ..errors import AzureMLError

SIGN_IN = (
    "Sign in with `az login` (Azure CLI; add --tenant TENANT_ID if you have several), or set "
    "AZURE_TENANT_ID, AZURE_CLIENT_ID and AZURE_CLIENT_SECRET for a service principal (both are "
    "read by DefaultAzureCredential), or pass a credential: credential=... / "
    "%config AzureML.credential = ..."
)


def workspace_label(ml_client: Any) -> str:
    """``workspace 'W' (resource group 'G', subscription 'S')``: where a missing name was
    looked for, in an error's words."""
    return (
        f"workspace '{ml_client.workspace_name}' (resource group "
        f"'{ml_client.resource_group_name}', subscription '{ml_client.subscription_id}')"
    )


def _service_detail(exc: Any) -> str:
    """What the service said: error code, message and request id, scrubbed."""
    error = getattr(exc, "error", None)
    code = getattr(error, "code", None)
    message = getattr(error, "message", None) or getattr(exc, "message", None) or str(exc)
    response = getattr(exc, "response", None)
    request_id = None
    if response is not None:
        headers = getattr(response, "headers", {}) or {}
        request_id = headers.get("x-ms-request-id") or headers.get("x-ms-correlation-request-id")
    text = f"{code}: {message}" if code and code not in str(message) else str(message)
    if request_id:
        text += f" (request id {request_id})"
    return scrub(text.strip())


def explain(exc: BaseException, ml_client: Any, action: str = "submit the job") -> AzureMLError:
    """An AzureMLError for an exception raised by azure-ai-ml, azure-core or azure-identity."""
    from azure.core.exceptions import (
        ClientAuthenticationError,
        HttpResponseError,
        ServiceRequestError,
    )

    status = getattr(getattr(exc, "response", None), "status_code", None)
    if status is None:
        status = getattr(exc, "status_code", None)
    detail = _service_detail(exc)
    where = workspace_label(ml_client)
    if isinstance(exc, ClientAuthenticationError) and status is None:
        first = scrub(str(exc)).splitlines()[0] if str(exc) else type(exc).__name__
        message = (
            f"could not {action}: no Azure credentials were found. {SIGN_IN}\n"
            f"What the credential said: {first}"
        )
    elif status == 401:
        message = (
            f"could not {action}: Azure ML refused the credentials (HTTP 401, {detail}). The "
            f"sign-in may have expired or belong to another tenant. {SIGN_IN}"
        )
    elif status == 403:
        message = (
            f"could not {action}: the signed-in identity may not use {where} (HTTP 403, "
            f"{detail}). Fix: ask for the 'AzureML Data Scientist' (or Contributor) role on "
            "the workspace, or sign in as another identity."
        )
    elif status == 404 and "workspace" in detail.lower():
        message = (
            f"could not {action}: {where} was not found (HTTP 404, {detail}). Fix: check "
            "--subscription, --resource-group and --workspace (or your config.json)."
        )
    elif status == 404:
        message = f"could not {action}: not found in {where} (HTTP 404, {detail})."
    elif status == 400:
        message = (
            f"Azure ML rejected the job (HTTP 400): {detail}. Fix the spec or the input values; "
            "`%distcomp export NAME job.yml` shows exactly what is sent."
        )
    elif status == 429:
        message = (
            f"could not {action}: Azure ML is throttling requests (HTTP 429, {detail}), still "
            "after the client's retries. Fix: wait a minute and submit again."
        )
    elif status is not None and status >= 500:
        message = (
            f"could not {action}: Azure ML answered with a server error (HTTP {status}, "
            f"{detail}), still after the client's retries. Fix: try again later "
            "(https://azure.status.microsoft shows outages)."
        )
    elif isinstance(exc, ServiceRequestError):
        message = (
            f"could not {action}: Azure ML could not be reached ({detail}). Fix: check the "
            "network connection and any proxy (HTTPS_PROXY)."
        )
    elif isinstance(exc, HttpResponseError):
        message = f"could not {action}: HTTP {status} from Azure ML: {detail}."
    else:
        message = f"could not {action}: {type(exc).__name__}: {scrub(str(exc))}"
    error = AzureMLError(message)
    error.status_code = status
    return error
