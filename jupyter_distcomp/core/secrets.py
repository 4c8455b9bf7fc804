"""Credentials inside values and messages: one rule for what counts as a secret and how it is
masked, used by every view, message and export.

A value may carry a credential the user pasted on purpose (a SAS URL as a data input, a
connection string): Azure ML needs it as it is, but nothing we show, print or write to a file
repeats it. Masked: the signature and token fields of a SAS or presigned URL (``sig=``,
``X-Amz-Signature=``...), a URL's password (``https://user:PASSWORD@host``), connection-string
keys (``AccountKey=``, ``SharedAccessKey=``, ``Password=``), ``client_secret`` /
``access_token`` / ``password`` fields, bearer tokens and JWTs. The rest of the text stays, so
a message still says which storage account and container it is about.

A variable is a credential by its name too (``AZURE_CLIENT_SECRET``, ``HF_TOKEN``,
``WANDB_API_KEY``, ``DB_PASSWORD``, ``..._CONNECTION_STRING``): its whole value is masked,
whatever it looks like. Names are read word by word, so ``TOKENIZERS_PARALLELISM`` is no
credential.
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


#: a word of a variable's name (split at ``_``, ``-``, ``.`` and camelCase humps) that makes
#: it a credential (PAT: a personal access token)
_SECRET_WORDS = frozenset(
    {"SECRET", "SECRETS", "TOKEN", "PASSWORD", "PASSWD", "PWD", "PASSPHRASE", "APIKEY", "PAT"}
    | {"CREDENTIAL", "CREDENTIALS", "SAS", "CONNSTR", "CONNECTIONSTRING", "PRIVATE"}
)


def is_secret_name(name: str) -> bool:
    """Does a variable's ``name`` say that its value is a credential? A word of it is one of
    SECRET, TOKEN, PASSWORD, CREDENTIAL(S), SAS...; or its last word is KEY
    (``WANDB_API_KEY``, ``AccountKey``); or it says CONNECTION_STRING."""
    humps = re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", name).upper()
    words = [w for w in re.split(r"[_\-.]+", humps) if w]
    return bool(words) and (
        any(w in _SECRET_WORDS for w in words) or words[-1] == "KEY" or "CONNECTION_STRING" in humps
    )


def masked_variable(name: str, value: Any) -> Any:
    """A variable's value as views show it: all of it masked when its name says it is a
    credential, else its credentials masked (:func:`masked`)."""
    if is_secret_name(name) and value not in (None, ""):
        return MASK
    return masked(value)


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


__all__ = [
    "MASK",
    "has_secret",
    "is_secret_name",
    "mask_secrets",
    "masked",
    "masked_repr",
    "masked_variable",
]
