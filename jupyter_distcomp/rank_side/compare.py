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

Bounded: a mapping is summarised by its first :data:`MAX_ENTRIES` entries (nested ones
counted), an array travels as its own bytes (no pickled copy) into one buffer on the reader,
and the difference is computed in chunks, so a comparison of two large arrays takes about one
more copy of the array on the differing rank and none on the reference. Whatever the user's
value does while it is summarised (a raising ``__repr__``, an unpicklable entry) is the
user's error, shown in the table. The server answers only holders of the token, drops a
connection idle for :data:`IDLE_SECONDS`, and :func:`forget` closes it once the comparison
ends, however it ends.
"""

from __future__ import annotations

from typing import Any

#: values kept on this rank between the calls of one comparison
_KEPT: dict[str, Any] = {}
#: the listening sockets of :func:`serve_value`, by slot
_SERVERS: dict[str, Any] = {}
#: accept() calls of the value servers that failed for want of a file descriptor (they try
#: again): how a test sees that a server lived through it
accept_errors = 0
#: the name compare keeps its value under
SLOT = "compare"
#: a list's or tuple's repr up to this many characters is shown whole
SEQUENCE_CHARS = 2000
#: entries of a mapping (nested ones too) that a summary holds at most
MAX_ENTRIES = 1000
#: a connection to the value server that sends or reads nothing for this long is dropped
IDLE_SECONDS = 5.0
#: elements per step of the difference
CHUNK = 1 << 20


def _error_text(exc: BaseException) -> str:
    try:
        return f"{type(exc).__name__}: {exc}"
    except Exception:  # the exception's own __str__ raised
        return type(exc).__name__


def _is_tensor(v: Any) -> bool:
    return type(v).__module__.split(".")[0] == "torch" and hasattr(v, "detach")


def _as_numpy(v: Any) -> Any:
    """``v`` as a contiguous numpy array without a copy where it can (a CPU tensor, an
    ndarray); None when it is neither. A CUDA tensor is copied to the host: only
    :func:`diff_value` and :func:`_frames` do that, a chunk at a time (:func:`_chunks`)."""
    if _is_tensor(v):
        t = v.detach().cpu().contiguous()
        if str(t.dtype) == "torch.bfloat16":
            t = t.float()
        return t.numpy()
    module = type(v).__module__.split(".")[0]
    if module == "numpy" and hasattr(v, "shape") and hasattr(v, "tobytes"):
        import numpy

        return numpy.ascontiguousarray(v)
    return None


def _tensor_summary(v: Any) -> dict:
    """A torch tensor's summary computed where the tensor is (a CUDA tensor's on its GPU,
    with no copy to the host): shape, dtype, a checksum of its bytes (:func:`_checksum`),
    NaN and Inf counts of a floating-point one."""
    import torch

    t = v.detach()
    summary: dict[str, Any] = {
        "kind": "array",
        "type": "torch",
        "shape": tuple(t.shape),
        "dtype": str(t.dtype).replace("torch.", ""),
        "digest": _checksum(t),
    }
    if t.is_floating_point() or t.is_complex():
        counts = torch.stack([torch.isnan(t).sum(), torch.isinf(t).sum()]).tolist()
        summary["nan"], summary["inf"] = int(counts[0]), int(counts[1])
    return summary


def _checksum(t: Any) -> str:
    """A digest of a tensor's bytes, computed by torch where the tensor is: two sums of its
    32-bit words (or bytes) weighted by position, in int64 arithmetic (wrapping, so the same
    on every device and in any order of summation), over CHUNK words at a time; equal
    tensors (bit for bit, same dtype and shape) give equal digests on a CPU and a GPU."""
    import hashlib

    import torch

    flat = t.reshape(-1)
    if not flat.is_contiguous():
        flat = flat.contiguous()  # on its device
    words = flat.view(torch.uint8) if flat.numel() else flat.new_zeros(0, dtype=torch.uint8)
    if words.numel() % 4 == 0:
        words = words.view(torch.int32)
    first = torch.zeros((), dtype=torch.int64, device=flat.device)
    second = torch.zeros((), dtype=torch.int64, device=flat.device)
    for start in range(0, words.numel(), CHUNK):
        w = words[start : start + CHUNK].to(torch.int64)
        at = torch.arange(start, start + w.numel(), dtype=torch.int64, device=flat.device)
        first += (w * (at * 2 + 1) * 0x9E3779B1).sum()
        second += ((w + at * 0x85EBCA6B) * (w ^ 0x27D4EB2F) + at).sum()
    sums = torch.stack([first, second]).tolist()
    key = f"{t.dtype}:{tuple(t.shape)}:{words.dtype}:{sums[0]}:{sums[1]}"
    return hashlib.sha1(key.encode()).hexdigest()


def _chunks(v: Any, start: int, stop: int) -> Any:
    """Elements ``start:stop`` of the flattened ``v`` as a numpy array (a tensor's copied
    to the host a chunk at a time)."""
    if _is_tensor(v):
        t = v.detach().reshape(-1)[start:stop].cpu()
        if str(t.dtype) == "torch.bfloat16":
            t = t.float()
        return t.numpy()
    return v.reshape(-1)[start:stop]


def _digest(array: Any) -> str:
    import hashlib

    if array.dtype.hasobject:
        return hashlib.sha1(array.tobytes()).hexdigest()
    return hashlib.sha1(array.reshape(-1).view("u1")).hexdigest()  # no copy of the bytes


def summarize(expr: str, slot: str) -> dict:
    """Evaluate ``expr`` in the rank's namespace; its summary (``kind`` says which). An error
    of the expression, or of the value while it is summarised, is ``kind: error``."""
    from IPython import get_ipython

    shell = get_ipython()
    forget(slot)
    try:
        value = eval(expr, shell.user_ns if shell is not None else {})
    except BaseException as exc:  # the user's error (or an interrupt), shown in the table
        return {"kind": "error", "text": _error_text(exc)}
    return summarize_value(value, slot)


def summarize_in_frame(expr: str, slot: str, globals_: dict, locals_: Any) -> dict:
    """``expr`` evaluated in a stopped frame (the rank's debugger prompt); its summary."""
    forget(slot)
    try:
        value = eval(expr, globals_, locals_)
    except BaseException as exc:  # the user's error, shown in the table
        return {"kind": "error", "text": _error_text(exc)}
    return summarize_value(value, slot)


def summarize_value(value: Any, slot: str) -> dict:
    """The summary of ``value``; an array or mapping is kept under ``slot``. An error of the
    value while it is summarised (a raising ``__repr__``) is ``kind: error``."""
    try:
        summary, kept = _summary(value)
    except BaseException as exc:  # the user's error (or an interrupt), shown in the table
        return {"kind": "error", "text": _error_text(exc)}
    if summary["kind"] in ("array", "dict"):
        _KEPT[slot] = kept
    return summary


def _summary(value: Any) -> tuple[dict, Any]:
    """(summary, what to keep for the difference): a mapping keeps a plain dict of the
    entries summarised."""
    import hashlib
    import math
    import numbers

    budget = [MAX_ENTRIES]

    def number(v: Any) -> dict:
        if isinstance(v, float) and math.isnan(v):
            return {"kind": "number", "value": "nan"}  # NaN equals NaN here
        return {"kind": "number", "value": v}

    def one(v: Any) -> tuple[dict, Any]:
        if isinstance(v, numbers.Number) and not hasattr(v, "shape"):
            return number(v), v
        if isinstance(v, str | bytes):
            data = v.encode("utf-8", "surrogatepass") if isinstance(v, str) else v
            return {
                "kind": "str",
                "text": repr(v[:60]),
                "digest": hashlib.sha1(data).hexdigest(),
            }, v
        if _is_tensor(v):
            if v.dim() == 0 and not v.dtype.is_complex:
                return number(v.item()), v  # a loss
            return _tensor_summary(v), v
        array = _as_numpy(v)
        if array is not None and array.ndim == 0 and array.dtype.kind in "biufc":
            return number(array.item()), v  # a numpy scalar
        if array is not None:
            summary: dict[str, Any] = {
                "kind": "array",
                "type": type(v).__module__.split(".")[0],
                "shape": tuple(array.shape),
                "dtype": str(getattr(v, "dtype", array.dtype)).replace("torch.", ""),
                "digest": _digest(array),
            }
            if array.dtype.kind in "fc":
                import numpy

                summary["nan"] = int(numpy.isnan(array).sum())
                summary["inf"] = int(numpy.isinf(array).sum())
            return summary, v
        if hasattr(v, "keys") and hasattr(v, "__getitem__"):
            items: dict[str, Any] = {}
            kept: dict[Any, Any] = {}
            summary = {"kind": "dict", "items": items}
            for key in v:  # an endless mapping ends at the budget
                if budget[0] <= 0:
                    summary["truncated"] = True
                    break
                budget[0] -= 1
                items[str(key)], kept[key] = one(v[key])
            return summary, kept
        text = repr(v)
        shown = text if len(text) <= SEQUENCE_CHARS else text[:SEQUENCE_CHARS] + " ..."
        if not isinstance(v, list | tuple):
            shown = text[:60]
        return {
            "kind": "other",
            "text": shown,
            "digest": hashlib.sha1(text.encode()).hexdigest(),
        }, v

    return one(value)


def forget(slot: str) -> None:
    """Drop what a comparison kept on this rank under ``slot`` and close its value server."""
    _KEPT.pop(slot, None)
    server = _SERVERS.pop(slot, None)
    if server is not None:
        _close(server)


def _close(server: Any) -> None:
    """Stop listening now: shut down first, which also wakes a thread blocked in accept()."""
    import contextlib
    import socket

    with contextlib.suppress(OSError):
        server.shutdown(socket.SHUT_RDWR)
    server.close()


class _TensorBody:
    """A tensor's bytes, sent a chunk at a time (a CUDA tensor's copied to the host one
    chunk at a time, never whole)."""

    def __init__(self, t: Any) -> None:
        import torch

        self.t = t.detach().reshape(-1)
        if self.t.dtype == torch.bfloat16:  # numpy has no bfloat16: sent as float32
            self.dtype = "<f4"
            self.nbytes = self.t.numel() * 4
        else:
            self.dtype = torch.empty(0, dtype=self.t.dtype).numpy().dtype.str
            self.nbytes = self.t.numel() * self.t.element_size()

    def __iter__(self) -> Any:
        for start in range(0, self.t.numel(), CHUNK):
            yield memoryview(_chunks(self.t, start, start + CHUNK).reshape(-1).view("u1"))


def _frames(value: Any) -> Any:
    """The kept value as (header, body) frames: an array's body is its own memory (a
    tensor's, its bytes a chunk at a time), anything else pickled; a mapping one frame per
    entry."""
    import pickle

    def frame(key: Any, v: Any) -> tuple[dict, Any]:
        if _is_tensor(v):
            body = _TensorBody(v)
            return {"key": key, "dtype": body.dtype, "shape": tuple(v.shape)}, body
        array = _as_numpy(v)
        if array is not None and not array.dtype.hasobject:
            flat = array.reshape(-1).view("u1")
            return {"key": key, "dtype": array.dtype.str, "shape": array.shape}, memoryview(flat)
        return {"key": key, "pickled": True}, pickle.dumps(v, protocol=pickle.HIGHEST_PROTOCOL)

    if isinstance(value, dict):
        return [frame(k, v) for k, v in value.items()], True
    return [frame(None, value)], False


def serve_value(
    slot: str, toward: str | None, readers: int, token: str, timeout: float
) -> tuple[str, int] | str:
    """The reference rank: serve the kept value to ``readers`` connections, each of which
    must first send ``token``, on this host's address on the route to host ``toward``
    (None: loopback); return that address and the port (or, when it cannot, why: a value
    that cannot be sent is the user's). Threads serve them; the socket closes when all have
    read, after ``timeout`` seconds, or at :func:`forget`."""
    import pickle
    import socket
    import threading
    import time

    try:
        frames, is_mapping = _frames(_KEPT.get(slot))
        heads = [
            pickle.dumps({**head, "size": body.nbytes if hasattr(body, "nbytes") else len(body)})
            for head, body in frames
        ]
    except Exception as exc:  # the user's value: an entry that cannot be pickled
        return f"the reference value cannot be sent to the other ranks ({_error_text(exc)})"
    address = "127.0.0.1"
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        if toward is not None:
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
                probe.connect((toward, 22))  # UDP: picks the route, sends nothing
                address = probe.getsockname()[0]
        server.bind((address, 0))
        server.listen(max(readers, 1) + 4)
    except OSError as exc:
        server.close()
        return f"the reference rank cannot serve its value toward {toward}: {exc}"
    earlier = _SERVERS.pop(slot, None)
    if earlier is not None:
        _close(earlier)
    _SERVERS[slot] = server
    deadline = time.monotonic() + timeout
    served = [0]
    lock = threading.Lock()

    def answer(conn: Any) -> None:
        with conn:
            conn.settimeout(IDLE_SECONDS)
            try:
                import hmac

                typed = _read_exactly(conn, len(token.encode()))
                if not hmac.compare_digest(typed, token.encode()):
                    return
                _send(conn, pickle.dumps({"frames": len(frames), "mapping": is_mapping}))
                for head, (_, body) in zip(heads, frames):
                    _send(conn, head)
                    _send(conn, body, framed=False)
            except OSError:
                return
        with lock:
            served[0] += 1
            if served[0] >= readers:
                _close(server)

    def accept() -> None:
        global accept_errors
        try:
            while time.monotonic() < deadline:
                try:
                    server.settimeout(max(min(deadline - time.monotonic(), 0.5), 0.01))
                    conn, _ = server.accept()
                except TimeoutError:
                    continue
                except OSError:
                    if server.fileno() < 0:  # closed: everyone was served, or forget()
                        return
                    accept_errors += 1
                    time.sleep(0.05)  # out of file descriptors, for now: try again
                    continue
                threading.Thread(target=answer, args=(conn,), daemon=True).start()
        finally:
            _close(server)
            if _SERVERS.get(slot) is server:
                _SERVERS.pop(slot, None)

    threading.Thread(target=accept, name="distcomp-compare-serve", daemon=True).start()
    return address, int(server.getsockname()[1])


def _send(conn: Any, data: Any, framed: bool = True) -> None:
    """Send ``data`` (with its length first when ``framed``) in steps, each of which may
    take at most the socket's time-out: a reader that stops reading is dropped."""
    if isinstance(data, _TensorBody):
        for chunk in data:
            _send(conn, chunk, framed=False)
        return
    view = memoryview(data).cast("B")
    if framed:
        conn.sendall(len(view).to_bytes(8, "big"))
    step = 1 << 22
    for start in range(0, len(view), step):
        conn.sendall(view[start : start + step])


def _read_exactly(conn: Any, size: int) -> bytes:
    return bytes(_read_into(conn, bytearray(size)))


def _read_into(conn: Any, buffer: bytearray) -> bytearray:
    view, got = memoryview(buffer), 0
    while got < len(buffer):
        count = conn.recv_into(view[got:], min(len(buffer) - got, 1 << 22))
        if not count:
            raise ConnectionError("the reference rank closed the connection")
        got += count
    return buffer


def fetch_value(source: tuple[str, int, str], timeout: float) -> Any:
    """The value that :func:`serve_value` serves at ``(address, port, token)``: an array
    in one buffer of its own bytes (no further copy)."""
    import pickle
    import socket

    import numpy

    address, port, token = source

    def framed(conn: Any) -> Any:
        size = int.from_bytes(_read_exactly(conn, 8), "big")
        return pickle.loads(_read_exactly(conn, size))

    with socket.create_connection((address, port), timeout=timeout) as conn:
        conn.sendall(token.encode())
        intro = framed(conn)
        values = {}
        for _ in range(intro["frames"]):
            head = framed(conn)
            body = _read_into(conn, bytearray(head["size"]))
            if head.get("pickled"):
                value = pickle.loads(body)
            else:
                value = numpy.frombuffer(body, dtype=numpy.dtype(head["dtype"]))
                value = value.reshape(head["shape"])
            values[head["key"]] = value
    return values if intro["mapping"] else values.get(None)


def diff_value(
    slot: str, source: tuple[str, int, str] | None, rtol: float | None, timeout: float = 120.0
) -> dict:
    """max |diff| of the kept value against the reference served at ``source`` (see
    :func:`fetch_value`; None: nothing to compare); forget the value.

    A mapping gives one result per key; keys only one side has are listed. ``close`` is
    True when every element is within ``rtol`` of the reference (numpy's ``allclose``).
    """
    import math

    value = _KEPT.pop(slot, None)
    if source is None:
        return {}
    try:
        reference = fetch_value(source, timeout)
    except Exception as exc:
        return {"maxdiff": None, "close": False, "why": f"cannot fetch the reference: {exc}"}

    def flat(v: Any) -> Any:
        """A tensor as is (read a chunk at a time by :func:`_chunks`), else an array."""
        import numpy

        if _is_tensor(v):
            return v
        array = _as_numpy(v)
        return array if array is not None else numpy.asarray(v)

    def one(v: Any, ref: Any) -> dict:
        import numpy

        try:
            a, b = flat(v), flat(ref)
            shape_a, shape_b = tuple(a.shape), tuple(b.shape)
            if shape_a != shape_b:
                return {"maxdiff": None, "close": False, "why": f"shape {shape_a} != {shape_b}"}
            diff, close = 0.0, True
            for start in range(0, math.prod(shape_a), CHUNK):  # bounded temporaries
                x = numpy.asarray(_chunks(a, start, start + CHUNK), dtype=float)
                y = numpy.asarray(_chunks(b, start, start + CHUNK), dtype=float)
                diff = max(diff, float(numpy.max(numpy.abs(x - y))), key=_nan_first)
                close = close and bool(
                    numpy.allclose(x, y, rtol=rtol or 0.0, atol=0.0, equal_nan=True)
                )
            return {"maxdiff": diff, "close": close}
        except Exception as exc:  # not numeric: only the digest says it differs
            return {"maxdiff": None, "close": False, "why": type(exc).__name__}

    if isinstance(value, dict) and isinstance(reference, dict):
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


def _nan_first(x: float) -> tuple[bool, float]:
    """Order for max(): NaN above every number (a NaN difference stays NaN, as numpy's max)."""
    return (x != x, x if x == x else 0.0)
