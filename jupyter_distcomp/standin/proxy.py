"""Blob clients that take no transport reach the stand-in as an HTTPS proxy.

``jobs.download`` builds its blob client from the datastore's account name alone
(``https://ACCOUNT.blob.core.windows.net``, azure-ai-ml's ``get_datastore_info``), with
azure-core's default transport: the ``MLClient``'s transport never reaches it. azure-core's
default transport honours the environment (``use_env_settings``, true by default: requests'
``HTTPS_PROXY`` and ``REQUESTS_CA_BUNDLE``), so :meth:`AzureStandIn.storage_proxy` sets both
while its block runs: the client's ``CONNECT ACCOUNT.blob.core.windows.net:443`` reaches the
stand-in, which answers TLS with a certificate for ``*.blob.core.windows.net`` signed by an
authority of its own (made at first use, kept in the stand-in's folder), and that authority
is added to certifi's bundle for the block. The client's code path stays the real one:
azure-storage-blob, TLS, the SAS token, the blob listing and reads. Any other host is
refused (502): nothing leaves the machine.
"""

from __future__ import annotations

import contextlib
import datetime
import os
import ssl
from collections.abc import Iterator
from pathlib import Path

BLOB_SUFFIX = ".blob.core.windows.net"
_ENVIRONMENT = ("HTTPS_PROXY", "https_proxy", "REQUESTS_CA_BUNDLE", "NO_PROXY", "no_proxy")


def make_authority(folder: Path) -> tuple[Path, Path, Path]:
    """(certificate, key, CA bundle) of the proxy's TLS: a leaf for ``*.blob.core.windows.net``
    signed by a fresh authority; the bundle is certifi's with that authority added."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    folder.mkdir(parents=True, exist_ok=True)
    cert_path, key_path, bundle_path = folder / "blob.pem", folder / "blob.key", folder / "ca.pem"
    if bundle_path.exists():
        return cert_path, key_path, bundle_path
    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "jupyter-distcomp stand-in CA")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=30))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(False, False, False, False, False, True, True, False, False),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), False)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    leaf = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "*" + BLOB_SUFFIX)]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=30))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName("*" + BLOB_SUFFIX)]), False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), False
        )
        .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), False)
        .sign(ca_key, hashes.SHA256())
    )
    pem = serialization.Encoding.PEM
    cert_path.write_bytes(leaf.public_bytes(pem))
    key_path.write_bytes(
        key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    key_path.chmod(0o600)
    import certifi

    bundle_path.write_bytes(Path(certifi.where()).read_bytes() + b"\n" + ca.public_bytes(pem))
    return cert_path, key_path, bundle_path


def server_context(folder: Path) -> ssl.SSLContext:
    cert, key, _ = make_authority(folder)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    return context


@contextlib.contextmanager
def proxy_environment(proxy_url: str, folder: Path) -> Iterator[None]:
    """``HTTPS_PROXY`` and ``REQUESTS_CA_BUNDLE`` set for the block, as they were after it."""
    _, _, bundle = make_authority(folder)
    saved = {name: os.environ.get(name) for name in _ENVIRONMENT}
    os.environ.update(
        {"HTTPS_PROXY": proxy_url, "https_proxy": proxy_url, "REQUESTS_CA_BUNDLE": str(bundle)}
    )
    for name in ("NO_PROXY", "no_proxy"):
        os.environ.pop(name, None)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
