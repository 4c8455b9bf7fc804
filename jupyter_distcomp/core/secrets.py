"""Credentials inside values and messages: one rule for what counts as a secret and how it is
masked, used by every view, message and export.

A value may carry a credential the user pasted on purpose (a SAS URL as a data input, a
connection string): Azure ML needs it as it is, but nothing we show, print or write to a file
repeats it. Masked: the signature and token fields of a SAS or presigned URL (``sig=``,
``X-Amz-Signature=``...), a URL's password (``https://user:PASSWORD@host``), connection-string
keys (``AccountKey=``, ``SharedAccessKey=``, ``Password=``), ``client_secret`` /
``access_token`` / ``password`` fields, bearer tokens and JWTs. The rest of the text stays, so
a message still says which storage account and container it is about.
"""

from __future__ import annotations

import re
from typing import Any

MASK = "***"

_SECRETS = [
    (re.compile(r"(?i)(bearer\s+)[A-Za-z0-9._~+/=-]+"), rf"\1{MASK}"),
    # SAS fields that sign or identify the signer (sv, sp, sr, st... stay readable)
    (
        re.compile(
            r"(?i)([?&;](sig|signature|se|skoid|sktid|skt|ske|sks|skv|code|token|api[-_]?key|"
            r"x-amz-signature|x-amz-credential|x-amz-security-token|x-goog-signature|"
            r"x-goog-credential)=)[^&#\s\"']+"
        ),
        rf"\1{MASK}",
    ),
    # a password in a URL: scheme://user:PASSWORD@host
    (re.compile(r"(?i)(\b[a-z][a-z0-9+.-]{0,31}://[^/:@\s\"']*:)[^/@\s\"']+(@)"), rf"\1{MASK}\2"),
    # connection strings: AccountKey=...; SharedAccessSignature=...;
    (
        re.compile(
            r"(?i)((?:^|[;\s\"'])(?:accountkey|sharedaccesskey|sharedaccesssignature|password|pwd)"
            r"\s*=\s*)[^;\s\"']+"
        ),
        rf"\1{MASK}",
    ),
    (
        re.compile(
            r"(?i)((client_secret|access_token|refresh_token|password)[\"']?\s*[=:]\s*[\"']?)"
            r"[^&\s\"',]+"
        ),
        rf"\1{MASK}",
    ),
    (
        re.compile(
            r"(?<![A-Za-z0-9_-])eyJ[A-Za-z0-9_-]{8,8192}\.[A-Za-z0-9_-]{8,8192}\.[A-Za-z0-9_-]*"
        ),
        MASK,
    ),
]


def mask_secrets(text: str) -> str:
    """``text`` with every credential in it replaced by ``***``."""
    for pattern, replacement in _SECRETS:
        text = pattern.sub(replacement, text)
    return text


def masked(value: Any) -> Any:
    """A value as views show it: a string masked, anything else as it is."""
    return mask_secrets(value) if isinstance(value, str) else value


def masked_repr(value: Any) -> str:
    """``repr(value)`` with its credentials masked."""
    return mask_secrets(repr(value))


def has_secret(text: Any) -> bool:
    """Does ``text`` (a value or a message) hold a credential?"""
    return isinstance(text, str) and mask_secrets(text) != text


__all__ = ["MASK", "has_secret", "mask_secrets", "masked", "masked_repr"]
