"""How one rank's log ends, and whether its error is its own or only the echo of another
rank's.

The rules, in order (the first that fits decides):

1. out of memory: CUDA's (``torch.OutOfMemoryError: CUDA out of memory ... GPU N``, N the
   device index on the rank's node) and the CPU's (torch's ``DefaultCPUAllocator: can't
   allocate memory``, Python's ``MemoryError``, numpy's ``Unable to allocate``): the rank's
   own failure;
2. an error a rank only gets because another rank failed or never came (a *consequence*):
   a peer that went away (gloo's ``Connection closed by peer``, ``Connection reset by
   peer``, NCCL's ``remote process exited``, ``DistNetworkError``, a broken store), a
   time-out waiting in a collective (gloo's ``Timed out waiting ...ms``, NCCL's watchdog,
   ``DistBackendError``), a signal from the launcher (``SignalException ... signal: 15``,
   ``KeyboardInterrupt``);
3. any other exception: the rank's own failure;
4. no traceback: the NCCL watchdog's lines (a consequence), else no error at all.

The launchers' own reports (torchrun's ``ChildFailedError``) are not a rank's error.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from .tracebacks import Traceback, tracebacks

OWN, CONSEQUENCE, NONE = "own", "consequence", "none"
#: the kinds of a consequence
PEER_GONE, TIMEOUT, STOPPED = "peer-gone", "timeout", "stopped"
GPU_OOM, CPU_OOM = "gpu-oom", "cpu-oom"

_GPU_OOM = re.compile(r"CUDA out of memory|CUDA error: out of memory|OutOfMemoryError")
_GPU_DETAIL = re.compile(
    r"Tried to allocate (?P<want>[\d.]+ \w+)\. GPU (?P<gpu>\d+) has a total capacity of "
    r"(?P<total>[\d.]+ \w+) of which (?P<free>[\d.]+ \w+) is free"
)
_CPU_OOM = re.compile(
    r"DefaultCPUAllocator: can't allocate memory|^MemoryError\b|_ArrayMemoryError|"
    r"Unable to allocate [\d.]+ \w+ for an array|std::bad_alloc",
    re.M,
)
_CPU_DETAIL = re.compile(r"you tried to allocate (\d+) bytes")
_TIMEOUT = re.compile(
    r"Timed out waiting \d+ms|Watchdog caught collective operation timeout|"
    r"timed out in blocking wait|Socket Timeout|DistStoreError: .*[Tt]imeout|"
    r"wait timeout after \d+ms|operation timed out"
)
_PEER_GONE = re.compile(
    r"Connection closed by peer|Connection reset by peer|Broken pipe|DistNetworkError|"
    r"remote process exited or there was a network error|NCCL communicator was aborted|"
    r"ncclRemoteError|recvValue failed|failed to recv, got 0 bytes|Read error \[|"
    r"Connection refused|ProcessGroupNCCL is aborted|Software caused connection abort"
)
_STOPPED = re.compile(r"SignalException: Process \d+ got signal|^KeyboardInterrupt", re.M)
_BACKEND = re.compile(r"DistBackendError")
#: ``[/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:553] ``
#: and ``[enforce fail at alloc_cpu.cpp:127] err == 0. `` (a failed check and its condition)
_SOURCE_PLACE = re.compile(
    r"\[enforce fail at [^\]\s]+:\d+\] [^.]*\. |\[[^\]\s]+\.(?:cc|cpp|h|hpp):\d+\] "
)
#: the launcher's own summary of its failed children (torchrun's agent)
_LAUNCHER = re.compile(r"ChildFailedError")
#: NCCL's watchdog, when no Python traceback follows (the process is taken down)
_WATCHDOG_ONLY = re.compile(
    r"Watchdog caught collective operation timeout|failure detected by watchdog|"
    r"terminate called after throwing an instance of 'c10::DistBackendError'"
)


_RULES = (
    (_CPU_OOM, OWN, CPU_OOM),
    (_TIMEOUT, CONSEQUENCE, TIMEOUT),
    (_PEER_GONE, CONSEQUENCE, PEER_GONE),
    (_STOPPED, CONSEQUENCE, STOPPED),
    (_BACKEND, CONSEQUENCE, PEER_GONE),
)


@dataclass
class RankEnd:
    """How one rank's log ends."""

    rank: int
    side: str = NONE  # OWN, CONSEQUENCE or NONE
    kind: str = ""  # GPU_OOM, CPU_OOM, PEER_GONE, TIMEOUT, STOPPED, "error"
    traceback: Traceback | None = None
    #: the words that decided (the exception line, or the log line)
    evidence: str = ""
    #: the part of them a rule matched (``Connection closed by peer``)
    words: str = ""
    #: CUDA out of memory: (device index on the node, tried, total, free)
    gpu: tuple[str, str, str, str] | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def error(self) -> str:
        """The exception line (the C++ source place torch puts in front of gloo's and
        NCCL's messages left out), or the line that decided."""
        text = self.traceback.exception if self.traceback else self.evidence
        return _SOURCE_PLACE.sub("", text)

    @property
    def place(self) -> str:
        return self.traceback.place() if self.traceback else ""


def kind_of(text: str) -> tuple[str, str]:
    """(OWN or CONSEQUENCE, the kind) of an error's text, by the module's rules 1-3."""
    side, kind, _ = _decide(text)
    return side, kind


def _decide(text: str) -> tuple[str, str, str]:
    """(side, kind, the words that decided)."""
    if "CUDA" in text and (match := _GPU_OOM.search(text)):
        return OWN, GPU_OOM, match[0]
    for pattern, side, kind in _RULES:
        match = pattern.search(text)
        if match:
            return side, kind, match[0]
    return OWN, "error", ""


def classify(rank: int, lines: list[str]) -> RankEnd:
    """How the log ``lines`` of ``rank`` end (see the module's rules)."""
    end = RankEnd(rank)
    found = [t for t in tracebacks(lines) if not _LAUNCHER.search(t.exception)]
    if found:
        last = found[-1]
        end.traceback = last
        end.side, end.kind, end.words = _decide(last.full_text)
        end.evidence = last.exception
        if end.kind == GPU_OOM:
            detail = _GPU_DETAIL.search(last.full_text)
            if detail:
                end.gpu = (detail["gpu"], detail["want"], detail["total"], detail["free"])
        return end
    for line in reversed(lines[-400:]):
        if _WATCHDOG_ONLY.search(line):
            end.side, end.kind, end.evidence = CONSEQUENCE, TIMEOUT, line.strip()
            end.words = "NCCL watchdog time-out"
            return end
    return end


def cpu_bytes(text: str) -> int | None:
    """The bytes a CPU allocation that failed asked for, when its message says."""
    match = _CPU_DETAIL.search(text)
    return int(match[1]) if match else None


def size_text(count: int) -> str:
    """``40000000000000`` -> ``36.4 TiB``."""
    value = float(count)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if value < 1024 or unit == "PiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{count} B"
