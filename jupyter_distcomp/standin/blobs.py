"""Azure Blob Storage as the stand-in serves it: the code upload, the jobs' logs, the datastores.

Blobs live at ``/ACCOUNT/CONTAINER/NAME`` (Azurite's path style). Uploaded blobs and the logs
the stand-in's jobs write are held in memory (a log grows while its rank prints); a container
may also be a folder on disk (a datastore: data inputs are read from it, named outputs written
to it). Reads honour ``x-ms-range`` / ``Range`` as Blob Storage does (206 with
``Content-Range``; 416 past the end), so a follower reads only the bytes it has not seen.
Every request must carry the stand-in's SAS signature.
"""

from __future__ import annotations

import re
import threading
from email.utils import formatdate
from pathlib import Path
from typing import Any
from xml.sax.saxutils import escape

SAS_SIGNATURE = "FAKE-SAS-SIGNATURE-93be1d"
_RANGE = re.compile(r"bytes=(\d+)-(\d*)")

Reply = tuple[int, Any, dict]


class BlobStore:
    """The stand-in's storage account(s): memory blobs and disk-backed containers."""

    def __init__(self) -> None:
        self.blobs: dict[str, Any] = {}  # "/account/container/name" -> bytes | bytearray
        self.folders: dict[str, Path] = {}  # "/account/container" -> folder on disk
        self.lock = threading.Lock()

    # -- what the stand-in's jobs do ------------------------------------------------------
    def append(self, key: str, data: bytes) -> None:
        with self.lock:
            blob = self.blobs.get(key)
            if blob is None:
                self.blobs[key] = bytearray(data)
            elif isinstance(blob, bytearray):
                blob.extend(data)
            else:
                self.blobs[key] = bytearray(blob) + data

    def read(self, key: str) -> bytes | None:
        with self.lock:
            blob = self.blobs.get(key)
            if blob is not None:
                return bytes(blob)
        file = self._file(key)
        return file.read_bytes() if file is not None and file.is_file() else None

    def names(self, container: str, prefix: str = "") -> list[str]:
        """The blob names of ``container`` ("/account/container") starting with ``prefix``."""
        with self.lock:
            found = {k[len(container) + 1 :] for k in self.blobs if k.startswith(container + "/")}
        folder = self.folders.get(container)
        if folder is not None and folder.is_dir():
            found.update(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file())
        return sorted(n for n in found if n.startswith(prefix))

    def _file(self, key: str) -> Path | None:
        for container, folder in self.folders.items():
            if key.startswith(container + "/"):
                name = key[len(container) + 1 :]
                path = (folder / name).resolve()
                if path.is_relative_to(folder.resolve()):
                    return path
        return None

    # -- the REST API ---------------------------------------------------------------------
    def handle(self, method: str, path: str, query: dict, headers: dict, data: bytes) -> Reply:
        """Answer one Blob Storage request (the parts azure-storage-blob uses here)."""
        if SAS_SIGNATURE not in query.get("sig", [""])[0]:
            return 403, None, {"x-ms-error-code": "AuthenticationFailed"}
        comp = query.get("comp", [""])[0]
        restype = query.get("restype", [""])[0]
        if comp == "list":  # ContainerClient.list_blobs
            return self._list(path, query.get("prefix", [""])[0])
        if restype == "container":
            return 200, b"", {}
        if method in ("GET", "HEAD") and not comp:  # BlobClient.download_blob / exists
            return self._get(method, path, headers)
        if method == "PUT" and comp == "metadata":
            return 200, b"", {}
        if method == "PUT" and comp in ("block", "blocklist"):
            return 201, b"", {}
        if method == "PUT":
            with self.lock:
                self.blobs[path] = data
            return 201, b"", {"Content-MD5": ""}
        if method == "DELETE":
            with self.lock:
                self.blobs.pop(path, None)
            return 202, b"", {}
        return 400, None, {"x-ms-error-code": "UnsupportedOperation"}

    def _get(self, method: str, path: str, headers: dict) -> Reply:
        content = self.read(path)
        if content is None:
            return 404, None, {"x-ms-error-code": "BlobNotFound"}
        total = len(content)
        props = {
            "x-ms-blob-type": "BlockBlob",
            "ETag": f'"0x{total:X}"',
            "Last-Modified": formatdate(usegmt=True),
            "Accept-Ranges": "bytes",
        }
        wanted = headers.get("x-ms-range") or headers.get("range")
        match = _RANGE.fullmatch(wanted.strip()) if wanted else None
        if match is None:
            body = content if method == "GET" else None
            return 200, body, {**props, "Content-Length": str(total)}
        start = int(match[1])
        if start >= total:
            return (
                416,
                None,
                {"x-ms-error-code": "InvalidRange", "Content-Range": f"bytes */{total}"},
            )
        end = min(int(match[2]) if match[2] else total - 1, total - 1)
        part = content[start : end + 1]
        return (
            206,
            part if method == "GET" else None,
            {
                **props,
                "Content-Length": str(len(part)),
                "Content-Range": f"bytes {start}-{end}/{total}",
            },
        )

    def _list(self, container: str, prefix: str) -> Reply:
        rows = []
        for name in self.names(container, prefix):
            size = len(self.read(f"{container}/{name}") or b"")
            rows.append(
                f"<Blob><Name>{escape(name)}</Name><Properties>"
                f"<Last-Modified>{formatdate(usegmt=True)}</Last-Modified>"
                f"<Etag>0x{size:X}</Etag><Content-Length>{size}</Content-Length>"
                "<Content-Type>application/octet-stream</Content-Type>"
                "<BlobType>BlockBlob</BlobType></Properties><Metadata/></Blob>"
            )
        payload = (
            '<?xml version="1.0" encoding="utf-8"?><EnumerationResults>'
            f"<Prefix>{escape(prefix)}</Prefix><Blobs>{''.join(rows)}</Blobs><NextMarker/>"
            "</EnumerationResults>"
        ).encode()
        return 200, payload, {"Content-Type": "application/xml"}
