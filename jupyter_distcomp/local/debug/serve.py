"""The kernel's main thread at a rank's pdb prompt: ``input()`` in, the rank's answer out.
``input()`` and ``getpass`` on a rank are served here too, as one prompt naming the rank.

``input()`` is what a notebook answers (ipykernel turns it into a stdin request) and what
terminal IPython reads from the terminal, so both work the same. One rank is served at a
time; after ``n`` / ``s`` / ``r`` the same rank keeps the prompt if it stops again within
:data:`STEP_WAIT` seconds, otherwise the next stopped rank (in order of arrival) gets it.
"""

from __future__ import annotations

import getpass
import os
import queue
import sys
import time
from collections.abc import Callable

from ...contracts import RankState
from .channel import DebugChannel, RankSession

STEP_WAIT = 1.0  # seconds the prompt stays with a rank that stepped (n, s, r, until)
ASK_SETTLE = 0.03  # seconds for a rank's output sent before its input() to arrive
NO_STDIN = (
    "rank {rank} stopped at a breakpoint, but this frontend does not answer input() "
    "(stdin): the rank continues. Fix: run the cell in JupyterLab, Notebook or IPython."
)

NO_INPUT = (
    "rank {rank} called input(), but this frontend does not answer input() (stdin): the rank "
    "gets EOFError. Fix: run the cell in JupyterLab, Notebook or IPython."
)


def describe_stop(rank: int, where: dict, label: Callable[[int], str] | None = None) -> str:
    """``[rank 1] stopped at cell line 3, in <module>`` (a file: ``train.py:12, in main``)."""
    name = label(rank) if label else f"[rank {rank}]"
    if "ask" in where:
        return (
            f"{name} waits for input ({str(where['ask'].get('prompt', '')).strip() or 'input()'})"
        )
    path, line, func = str(where.get("file", "?")), where.get("line", 0), where.get("func", "?")
    if os.path.basename(os.path.dirname(path)).startswith("ipykernel_") or path.startswith(
        "<ipython-input"
    ):
        place = f"cell line {line}"
    else:
        place = f"{path}:{line}"
    return f"{name} stopped at {place}, in {func}"


def serve(
    channel: DebugChannel,
    *,
    before_prompt: Callable[[], None] = lambda: None,
    label: Callable[[int], str] | None = None,
    quits: set[int] | None = None,
) -> float:
    """Serve every stopped rank, one at a time; the seconds spent (0.0 if none stopped).

    ``quits`` collects the ranks whose user typed ``q``. A kernel interrupt at a prompt
    propagates: the caller sends SIGINT to the ranks, which ends their debug sessions (one
    interrupt per rank; closing the channel as well would race with it).
    """
    if not channel.pending():
        return 0.0
    tic = time.monotonic()
    last: RankSession | None = None
    while True:
        stop = channel.take(prefer=last, wait=STEP_WAIT if last else 0.0)
        if stop is None:
            break
        session, where = stop
        if "ask" in where:  # input() on the rank
            before_prompt()
            time.sleep(ASK_SETTLE)  # the rank's last printed line may still be on its way
            before_prompt()
            session.send(**_answer(session.rank, where["ask"], label))
            last = None
            continue
        if last is not session:
            print(describe_stop(session.rank, where, label), flush=True)
        ending = _dialog(session, before_prompt)
        last = session if ending == "running" else None
        if ending == "quit" and quits is not None:
            quits.add(session.rank)
    return time.monotonic() - tic


def _dialog(session: RankSession, before_prompt: Callable[[], None]) -> str:
    """Relay one stop of one rank until it runs again; how it ended."""
    pending = ""
    while True:
        try:
            message = session.messages.get(timeout=0.2)
        except queue.Empty:
            continue
        if "out" in message:  # pdb's text, alone or before a prompt or the rank's going on
            pending += message["out"]
            text, newline, pending = pending.rpartition("\n")
            if newline:
                print(text, flush=True)
        if "read" in message:
            before_prompt()
            session.send(line=_ask(session, pending))
            pending = ""
        elif set(message) & {"running", "end"}:
            if pending:
                print(pending, flush=True)
            state = "running" if "running" in message else str(message.get("end"))
            session.channel.on_state(session.rank, RankState.BUSY)
            return state


def _ask(session: RankSession, prompt: str) -> str:
    line = read_line(prompt)
    if line is None:
        print(NO_STDIN.format(rank=session.rank), file=sys.stderr, flush=True)
        return "continue"
    return line


def read_line(prompt: str, password: bool = False) -> str | None:
    """A line typed in the notebook (``EOF`` for Ctrl-D in a terminal); None if this
    frontend does not answer input()."""
    try:
        return getpass.getpass(prompt) if password else input(prompt)
    except EOFError:  # Ctrl-D in a terminal: as in pdb, quit
        return "EOF"
    except Exception as exc:
        if type(exc).__name__ != "StdinNotImplementedError":
            raise
        return None


def _answer(rank: int, ask: dict, label: Callable[[int], str] | None) -> dict:
    """The answer to ``input()`` / ``getpass`` on ``rank``: the prompt names the rank."""
    name = label(rank) if label else f"[rank {rank}]"
    line = read_line(f"{name} {ask.get('prompt', '')}", bool(ask.get("password")))
    if line is None:
        print(NO_INPUT.format(rank=rank), file=sys.stderr, flush=True)
        return {"error": "this frontend does not answer input()"}
    if line == "EOF":
        return {"error": "EOF"}
    return {"line": line}
