"""How the ranks of a ``%distcomp command`` run ended, and the words for it.

:class:`CommandResult` is what ``run_command`` returns (and attaches to its RankError as
``.result``); :func:`failure_message` is that error's text. The message leads with what the
user must look at: which ranks failed and how (exit code, or the signal's name, with a hint
for the usual causes; a CUDA call where there is no usable GPU, named once with the change
for a check on CPU; a rank aborted by a thread left running at exit, named with the
call that ends it), then each failing rank's last stderr lines, then which ranks we
stopped because of it. Ranks that fail the same way with
the same stderr are shown once ("ranks 1-3").
"""

from __future__ import annotations

import signal
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ...core.ranges import format_ranks
from ...core.secrets import masked_command, secret_values
from ...machine.gpus import no_gpu_notice

TAIL_LINES = 20

_SIGNAL_HINTS = {
    "SIGKILL": "killed: out of memory, or killed from outside",
    "SIGSEGV": "segmentation fault in native code",
    "SIGABRT": "aborted, usually by a failed check in native code",
    "SIGBUS": "bus error in native code",
    "SIGINT": "interrupted",
    "SIGTERM": "terminated",
}


@dataclass
class RankResult:
    """How one rank ended. ``returncode`` < 0 is the number of the signal that ended it."""

    rank: int
    node: int
    pid: int | None = None
    returncode: int | None = None
    stopped: bool = False  # ended by us (another rank failed, timeout, interrupt)
    quit: bool = False  # its user typed q at its debugger prompt
    raised: bool = False  # its last words were a traceback (not of KeyboardInterrupt)
    stdout_tail: deque = field(default_factory=lambda: deque(maxlen=TAIL_LINES))
    stderr_tail: deque = field(default_factory=lambda: deque(maxlen=TAIL_LINES))

    @property
    def status(self) -> str:
        return rank_status(self)


@dataclass
class CommandResult:
    """One run: what ran where, with which bound values, and how each rank ended."""

    component: str
    launcher: str
    argv: list[str]
    cwd: Path
    inputs: dict[str, Any]
    outputs: dict[str, str]
    ranks: list[RankResult]
    seconds: float = 0.0
    timeout: float | None = None
    timed_out: list[int] = field(default_factory=list)
    interrupted: bool = False
    launcher_tail: list[str] = field(default_factory=list)  # mpiexec's own messages
    zero_or_greater: bool = False  # the spec's successful_return_code: ZeroOrGreater

    def succeeded(self, code: int | None) -> bool:
        return code == 0 or (self.zero_or_greater and code is not None and code > 0)

    def __repr__(self) -> str:
        codes = sorted({r.status for r in self.ranks})
        outputs = ", ".join(f"{k}={v}" for k, v in self.outputs.items())
        return (
            f"<CommandResult {self.component}: {len(self.ranks)} ranks, {'; '.join(codes)}, "
            f"{self.seconds:.1f} s{', outputs: ' + outputs if outputs else ''}>"
        )

    @property
    def returncodes(self) -> list[int | None]:
        return [r.returncode for r in self.ranks]

    @property
    def ok(self) -> bool:
        return not self.failed and not self.timed_out and not self.interrupted

    @property
    def failed(self) -> list[RankResult]:
        return [r for r in self.ranks if not r.stopped and not self.succeeded(r.returncode)]


def signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def rank_status(outcome: Any) -> str:
    code = outcome.returncode
    if code is None:
        if outcome.stopped:
            return "stopped"
        return "ended without an exit status" if outcome.pid else "never started"
    if code == 0:
        return "exit code 0"
    if code < 0:
        name = signal_name(-code)
        if getattr(outcome, "raised", False) and not outcome.stopped:
            return f"raised an exception, then ended by {name} as it exited"
        prefix = "stopped with " if outcome.stopped else "killed by "
        hint = "" if outcome.stopped else f" ({_SIGNAL_HINTS.get(name, 'a signal')})"
        return f"{prefix}{name}{hint}"
    if getattr(outcome, "quit", False):
        return f"quit in the debugger (exit code {code})"
    return f"exit code {code}" + (" (after being stopped)" if outcome.stopped else "")


#: what the C++ runtime prints when a thread object is destroyed still running (std::terminate)
_LEFT_THREAD = "terminate called without an active exception"


def exit_abort_notice(failed: list[Any]) -> str | None:
    """What to say when a failing rank's last lines (its stderr here, its log on Azure ML)
    say a native thread was still running as the process exited: with torch, usually a
    process group never destroyed (gloo's and NCCL's threads meet the interpreter's
    shutdown; pytorch/pytorch#190489); None otherwise."""
    aborted = [
        r.rank
        for r in failed
        if any(_LEFT_THREAD in line for line in (*r.stderr_tail, *r.stdout_tail))
    ]
    if not aborted:
        return None
    return (
        f"{format_ranks(aborted)} aborted as the process ended: a native thread was still "
        f"running ({_LEFT_THREAD!r}). With torch.distributed this is usually a process group left "
        f"to the interpreter's shutdown; it happens only now and then, and under any launcher, "
        f"Azure ML's too. Fix: call torch.distributed.destroy_process_group() after the last "
        f"collective and keep no reference to the group; where a library holds it to the end "
        f"(DeepSpeed does), end the process with os._exit(0) once its output is flushed."
    )


def _tail(outcome: Any) -> list[str]:
    lines = list(outcome.stderr_tail) or list(outcome.stdout_tail)
    which = getattr(outcome, "tail_name", None) or ("stderr" if outcome.stderr_tail else "stdout")
    if not lines:
        return ["    (no output)"]
    return [f"  last {len(lines)} lines of {which}:", *(f"    {line}" for line in lines)]


def _grouped(outcomes: list[Any]) -> list[tuple[list[int], str, Any]]:
    """Ranks whose last lines (of stderr, else stdout: what :func:`_tail` shows) are the
    same, once: (ranks, how each ended, one of them)."""
    groups: dict[tuple, list[Any]] = {}
    for outcome in outcomes:
        key = (
            tuple(outcome.stderr_tail),
            () if outcome.stderr_tail else tuple(outcome.stdout_tail),
        )
        groups.setdefault(key, []).append(outcome)
    grouped = []
    for members in groups.values():
        ranks = [o.rank for o in members]
        statuses: dict[str, list[int]] = {}
        for outcome in members:
            statuses.setdefault(outcome.status, []).append(outcome.rank)
        if len(statuses) == 1:
            how = next(iter(statuses))
        else:
            how = "; ".join(f"{format_ranks(rs)}: {status}" for status, rs in statuses.items())
        grouped.append((ranks, how, members[0]))
    return grouped


def failure_message(result: Any) -> str:
    name = result.component
    lines: list[str] = []
    if result.timed_out:
        lines.append(
            f"`{name}` timed out after {result.timeout:g} s: {format_ranks(result.timed_out)} "
            f"still running, stopped (SIGINT, then SIGKILL). Their last lines are below."
        )
        for ranks, how, outcome in _grouped([result.ranks[r] for r in result.timed_out]):
            lines.append(f"{format_ranks(ranks)}: {how}")
            lines.extend(_tail(outcome))
    failed = result.failed if not result.timed_out else []
    if failed:
        lines.append(f"`{name}` failed on {format_ranks([r.rank for r in failed])}:")
        for notice in (
            no_gpu_notice(line for r in failed for line in r.stderr_tail),
            exit_abort_notice(failed),
        ):
            if notice:
                lines.append(notice)
        for ranks, how, outcome in _grouped(failed):
            lines.append(f"{format_ranks(ranks)}: {how}")
            lines.extend(_tail(outcome))
    stopped = [r.rank for r in result.ranks if r.stopped and r.rank not in result.timed_out]
    if stopped and not result.timed_out:
        lines.append(f"{format_ranks(stopped)} stopped because of the failure.")
    if all(r.pid is None and r.returncode is None for r in result.ranks) and result.launcher_tail:
        lines.append("mpiexec said:")
        lines.extend(f"    {line}" for line in result.launcher_tail)
    argv = masked_command(result.argv, secret_values(result.inputs))
    lines.append(f"command: {argv}  (in {result.cwd})")
    return "\n".join(lines)
