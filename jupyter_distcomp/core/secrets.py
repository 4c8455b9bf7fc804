"""Credentials inside values and messages: one rule for what counts as a secret and how it is
masked, used by every view, message and export.

A value may carry a credential the user pasted on purpose (a SAS URL as a data input, a
connection string): Azure ML needs it as it is, but nothing we show, print or write to a file
repeats it. Masked: the signature and token fields of a SAS or presigned URL (``sig=``,
``X-Amz-Signature=``...), a URL's password (``https://user:PASSWORD@host``), connection-string
keys (``AccountKey=``, ``SharedAccessKey=``, ``Password=``), ``client_secret`` /
``access_token`` / ``password`` fields, bearer tokens, JWTs and PEM private keys (an SSH
identity); on a command line, the value of a flag named as a credential (``--token X``). The
rest of the text stays, so a message still says which storage account and container it is
about.

A variable or an input is a credential by its name too (``AZURE_CLIENT_SECRET``, ``HF_TOKEN``,
``WANDB_API_KEY``, ``API_KEYS``, ``DB_PASS``, ``SSH_IDENTITY``, ``api_token``,
``..._CONNECTION_STRING``): its whole value is masked, whatever it looks like, also where it
stands in a command line. Names are read word by word, so ``TOKENIZERS_PARALLELISM`` is no
credential.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

MASK = "***"

_SECRETS = [
    # a PEM private key (an SSH identity, a TLS key): the whole block, cut off or not
    (
        re.compile(
            r"-----BEGIN [A-Z0-9 ]{0,40}PRIVATE KEY-----(?:[A-Za-z0-9+/=\s:,.\\]|-(?!----))*+"
            r"(?:-----END [A-Z0-9 ]{0,40}PRIVATE KEY-----|$)"
        ),
        MASK,
    ),
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
    {"SECRET", "SECRETS", "TOKEN", "PASSWORD", "PASSWD", "PWD", "PASS", "PASSPHRASE", "PAT"}
    | {"APIKEY", "APIKEYS", "CREDENTIAL", "CREDENTIALS", "SAS", "CONNSTR", "CONNECTIONSTRING"}
    | {"PRIVATE"}
)
#: a last word that makes a name a credential (``WANDB_API_KEY``, ``API_KEYS``,
#: ``SSH_IDENTITY``), and endings of a word run together (``MYSQLPASSWORD``)
_SECRET_LAST_WORDS = frozenset({"KEY", "KEYS", "IDENTITY"})
_SECRET_ENDINGS = ("PASSWORD", "PASSWD", "SECRET", "TOKEN", "APIKEY")


def is_secret_name(name: str) -> bool:
    """Does a variable's (or an input's, or a flag's) ``name`` say that its value is a
    credential? A word of it is one of SECRET, TOKEN, PASSWORD, PASS, CREDENTIAL(S), SAS...,
    or ends in PASSWORD, SECRET, TOKEN; or its last word is KEY, KEYS or IDENTITY; or it says
    CONNECTION_STRING. Words, not letters: ``TOKENIZERS_PARALLELISM``, ``max_tokens`` and
    ``BYPASS_CACHE`` are no credentials."""
    humps = re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", name).upper()
    words = [w for w in re.split(r"[_\-.]+", humps) if w]
    return bool(words) and (
        any(w in _SECRET_WORDS or w.endswith(_SECRET_ENDINGS) for w in words)
        or words[-1] in _SECRET_LAST_WORDS
        or "CONNECTION_STRING" in humps
    )


def masked_variable(name: str, value: Any) -> Any:
    """A variable's value as views show it: all of it masked when its name says it is a
    credential, else its credentials masked (:func:`masked`)."""
    if is_secret_name(name) and value not in (None, ""):
        return MASK
    return masked(value)


def secret_values(values: Mapping[str, Any]) -> list[str]:
    """The values of ``values`` (name -> value: a run's inputs) whose names say that they
    are credentials, as text: what :func:`masked_command` masks wherever they stand."""
    return [str(v) for k, v in values.items() if is_secret_name(k) and v not in (None, "")]


#: a flag whose name says its value is a credential, then that value (``--token X``,
#: ``--api-key=X``): the name checked by :func:`is_secret_name`
_FLAG = re.compile(
    r"(?<![\w-])(--?([A-Za-z][\w.-]{0,80}))(=|\s+)(?!-)('[^']*'|\"[^\"]*\"|[^\s'\"]+)"
)


#: a credential's value this long or longer is masked inside a word too (``--x=VALUE``)
_INSIDE_CHARS = 4


def masked_command(argv: Sequence[Any], secrets: Iterable[str] = ()) -> str:
    """A command line as views and messages show it: the credentials in it masked, the value
    of a flag named as a credential (``--token``, ``--db-password``), and each of ``secrets``
    (:func:`secret_values`) wherever it stands."""
    words = [str(a) for a in argv]
    hidden = [s for s in secrets if s]
    if hidden:  # a short value only where it is a whole word (``--n 1`` stays readable)
        inside = [s for s in hidden if len(s) >= _INSIDE_CHARS]
        words = [MASK if w in hidden else _masked_in(w, inside) for w in words]
    text = mask_secrets(shlex.join(words)).replace(shlex.quote(MASK), MASK)

    def flag(match: re.Match) -> str:
        if not is_secret_name(match.group(2)) or match.group(4) == MASK:
            return match.group(0)
        return f"{match.group(1)}{match.group(3)}{MASK}"

    return _FLAG.sub(flag, text)


def _masked_in(word: str, hidden: list[str]) -> str:
    for value in hidden:
        word = word.replace(value, MASK)
    return word


def masked_variable_repr(name: str, value: Any) -> str:
    """``repr`` of a variable's or an input's value as views show it (:func:`masked_variable`)."""
    shown = masked_variable(name, value)
    return repr(shown) if shown == MASK and value != MASK else masked_repr(value)


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
    "masked_command",
    "masked_repr",
    "masked_variable",
    "masked_variable_repr",
    "secret_values",
]
