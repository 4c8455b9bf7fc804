"""Code that runs inside each rank for ``%distcomp compare``: small summaries, never arrays.

ipyparallel ships these functions to the engines by reference (this module is imported on
the rank); they evaluate the user's expression in the rank's IPython namespace and import
what they need inside. numpy and torch are used only when the value is one of theirs (they
are then already imported on the rank).

:func:`summarize` evaluates the expression and returns its summary: a number as is, a
string's first characters and digest, an array's or tensor's shape, dtype and SHA-1 of its
bytes, a mapping (a ``state_dict()``) as the summary of each value. Arrays and mappings stay
on the rank under ``slot`` for :func:`serve_value` (the reference rank serves its value to
the differing ranks over TCP, on its own host, to holders of a token) and :func:`diff_value`
(a differing rank fetches that value, on any host, and computes its max |diff|). The value
travels from rank to rank only, never through the kernel.
"""

from __future__ import annotations

from typing import Any

#: values kept on this rank between the calls of one comparison
_KEPT: dict[str, Any] = {}
#: the name compare keeps its value under
SLOT = "compare"


#: a list's or tuple's repr up to this many characters is shown whole
SEQUENCE_CHARS = 2000


def summarize(expr: str, slot: str) -> dict:
    """Evaluate ``expr`` in the rank's namespace; its summary (``kind`` says which)."""
    from IPython import get_ipython

    shell = get_ipython()
    _KEPT.pop(slot, None)
    try:
        value = eval(expr, shell.user_ns if shell is not None else {})
    except BaseException as exc:  # the user's error, shown in the table
        return {"kind": "error", "text": f"{type(exc).__name__}: {exc}"}
    return summarize_value(value, slot)


def summarize_in_frame(expr: str, slot: str, globals_: dict, locals_: Any) -> dict:
    """``expr`` evaluated in a stopped frame (the rank's debugger prompt); its summary."""
    _KEPT.pop(slot, None)
    try:
        value = eval(expr, globals_, locals_)
    except BaseException as exc:  # the user's error, shown in the table
        return {"kind": "error", "text": f"{type(exc).__name__}: {exc}"}
    return summarize_value(value, slot)


def summarize_value(value: Any, slot: str) -> dict:
    """The summary of ``value``; an array or mapping is kept under ``slot``."""
    import hashlib
    import math
    import numbers

    def as_numpy(v: Any) -> Any:
        module = type(v).__module__.split(".")[0]
        if module == "torch" and hasattr(v, "detach"):
            t = v.detach().cpu().contiguous()
            if str(t.dtype) == "torch.bfloat16":
                t = t.float()
            return t.numpy()
        if module == "numpy" and hasattr(v, "shape") and hasattr(v, "tobytes"):
            import numpy

            return numpy.ascontiguousarray(v)
        return None

    def number(v: Any) -> dict:
        if isinstance(v, float) and math.isnan(v):
            return {"kind": "number", "value": "nan"}  # NaN equals NaN here
        return {"kind": "number", "value": v}

    def one(v: Any) -> dict:
        if isinstance(v, numbers.Number) and not hasattr(v, "shape"):
            return number(v)
        if isinstance(v, str | bytes):
            data = v.encode() if isinstance(v, str) else v
            return {"kind": "str", "text": repr(v[:60]), "digest": hashlib.sha1(data).hexdigest()}
        array = as_numpy(v)
        if array is not None and array.ndim == 0 and array.dtype.kind in "biufc":
            return number(array.item())  # a loss, a numpy scalar
        if array is not None:
            summary: dict[str, Any] = {
                "kind": "array",
                "type": type(v).__module__.split(".")[0],
                "shape": tuple(array.shape),
                "dtype": str(getattr(v, "dtype", array.dtype)).replace("torch.", ""),
                "digest": hashlib.sha1(array.tobytes()).hexdigest(),
            }
            if array.dtype.kind in "fc":
                import numpy

                summary["nan"] = int(numpy.isnan(array).sum())
                summary["inf"] = int(numpy.isinf(array).sum())
            return summary
        if hasattr(v, "keys") and hasattr(v, "__getitem__"):
            return {"kind": "dict", "items": {str(k): one(v[k]) for k in v}}
        text = repr(v)
        shown = text if len(text) <= SEQUENCE_CHARS else text[:SEQUENCE_CHARS] + " ..."
        if not isinstance(v, list | tuple):
            shown = text[:60]
        return {"kind": "other", "text": shown, "digest": hashlib.sha1(text.encode()).hexdigest()}

    summary = one(value)
    if summary["kind"] in ("array", "dict"):
        _KEPT[slot] = value
    return summary


def serve_value(
    slot: str, toward: str | None, readers: int, token: str, timeout: float
) -> tuple[str, int] | str:
    """The reference rank: serve the kept value to ``readers`` connections, each of which
    must first send ``token``, on this host's address on the route to host ``toward``
    (None: loopback); return that address and the port (or, when it cannot, why). A thread
    serves them and closes the socket when all have read or ``timeout`` seconds passed."""
    import hmac
    import pickle
    import socket
    import threading
    import time

    address = "127.0.0.1"
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        if toward is not None:
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
                probe.connect((toward, 22))  # UDP: picks the route, sends nothing
                address = probe.getsockname()[0]
        server.bind((address, 0))
        server.listen(max(readers, 1))
    except OSError as exc:
        server.close()
        return f"the reference rank cannot serve its value toward {toward}: {exc}"
    data = pickle.dumps(_KEPT.get(slot), protocol=pickle.HIGHEST_PROTOCOL)
    deadline = time.monotonic() + timeout

    def serve() -> None:
        served = 0
        try:
            while served < readers and time.monotonic() < deadline:
                server.settimeout(max(deadline - time.monotonic(), 0.01))
                try:
                    conn, _ = server.accept()
                except OSError:
                    return
                with conn:
                    conn.settimeout(max(deadline - time.monotonic(), 0.01))
                    try:
                        typed = _read_exactly(conn, len(token.encode()))
                        if not hmac.compare_digest(typed, token.encode()):
                            continue
                        conn.sendall(len(data).to_bytes(8, "big") + data)
                        served += 1
                    except OSError:
                        continue
        finally:
            server.close()

    threading.Thread(target=serve, name="distcomp-compare-serve", daemon=True).start()
    return address, int(server.getsockname()[1])


def _read_exactly(conn: Any, size: int) -> bytes:
    chunks = []
    while size:
        chunk = conn.recv(min(size, 1 << 20))
        if not chunk:
            raise ConnectionError("the reference rank closed the connection")
        chunks.append(chunk)
        size -= len(chunk)
    return b"".join(chunks)


def fetch_value(source: tuple[str, int, str], timeout: float) -> Any:
    """The value that :func:`serve_value` serves at ``(address, port, token)``."""
    import pickle
    import socket

    address, port, token = source
    with socket.create_connection((address, port), timeout=timeout) as conn:
        conn.sendall(token.encode())
        size = int.from_bytes(_read_exactly(conn, 8), "big")
        return pickle.loads(_read_exactly(conn, size))


def diff_value(
    slot: str, source: tuple[str, int, str] | None, rtol: float | None, timeout: float = 120.0
) -> dict:
    """max |diff| of the kept value against the reference served at ``source`` (see
    :func:`fetch_value`; None: nothing to compare); forget the value.

    A mapping gives one result per key; keys only one side has are listed. ``close`` is
    True when every element is within ``rtol`` of the reference (numpy's ``allclose``).
    """
    value = _KEPT.pop(slot, None)
    if source is None:
        return {}
    try:
        reference = fetch_value(source, timeout)
    except OSError as exc:
        return {"maxdiff": None, "close": False, "why": f"cannot fetch the reference: {exc}"}

    def as_float(v: Any) -> Any:
        import numpy

        if type(v).__module__.split(".")[0] == "torch":
            v = v.detach().cpu().float().numpy()
        return numpy.asarray(v, dtype=float)

    def one(v: Any, ref: Any) -> dict:
        try:
            a, b = as_float(v), as_float(ref)
            if a.shape != b.shape:
                return {"maxdiff": None, "close": False, "why": f"shape {a.shape} != {b.shape}"}
            import numpy

            diff = float(numpy.max(numpy.abs(a - b))) if a.size else 0.0
            close = bool(numpy.allclose(a, b, rtol=rtol or 0.0, atol=0.0, equal_nan=True))
            return {"maxdiff": diff, "close": close}
        except Exception as exc:  # not numeric: only the digest says it differs
            return {"maxdiff": None, "close": False, "why": type(exc).__name__}

    if hasattr(value, "keys") and hasattr(reference, "keys"):
        keys = {str(k): k for k in value}
        ref_keys = {str(k): k for k in reference}
        return {
            "items": {
                name: one(value[keys[name]], reference[ref_keys[name]])
                for name in keys
                if name in ref_keys
            },
            "missing": sorted(set(ref_keys) - set(keys)),
            "extra": sorted(set(keys) - set(ref_keys)),
        }
    return one(value, reference)
