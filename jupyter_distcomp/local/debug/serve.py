"""The kernel's main thread at the ranks' pdb prompt: ``input()`` in, the ranks' answers out.
``input()`` and ``getpass`` on a rank are served here too, as one prompt naming the rank.

``input()`` is what a notebook answers (ipykernel turns it into a stdin request) and what
terminal IPython reads from the terminal, so both work the same. The stopped ranks share one
prompt (group.py): each command goes to all of them at once.
"""

from __future__ import annotations

import getpass
import sys
import time
from collections.abc import Callable

from ...contracts import RankState
from .channel import DebugChannel, RankSession
from .group import GroupPrompt
from .places import describe_stop
from .stopped import StoppedRanks

__all__ = ["describe_stop", "serve", "serve_input"]

ASK_SETTLE = 0.03  # seconds for a rank's output sent before its input() to arrive
NO_STDIN = (
    "rank {rank} stopped at a breakpoint, but this frontend does not answer input() "
    "(stdin): the rank continues. Fix: run the cell in JupyterLab, Notebook or IPython."
)

NO_INPUT = (
    "rank {rank} called input(), but this frontend does not answer input() (stdin): the rank "
    "gets EOFError. Fix: run the cell in JupyterLab, Notebook or IPython."
)


def serve(
    channel: DebugChannel,
    *,
    before_prompt: Callable[[], None] = lambda: None,
    label: Callable[[int], str] | None = None,
    quits: set[int] | None = None,
    states: Callable[[], dict[int, RankState]] | None = None,
    interrupted: dict[int, dict] | None = None,
    name: str = "ranks",
    interrupt: Callable[[list[int]], None] | None = None,
    shown: Callable[[int, str, int], bool] | None = None,
    output_here: bool = True,
) -> float:
    """Serve the stopped ranks at one prompt until none is at it; the seconds spent (0.0 if
    none stopped).

    ``quits`` collects the ranks whose user typed ``q``; ``states`` (the world's rank
    states) tells a rank whose cell ended from one that runs on. A kernel interrupt at a
    prompt propagates: the caller sends SIGINT to the ranks, which ends their debug sessions
    (one interrupt per rank; closing the channel as well would race with it);
    ``interrupted`` then holds where each rank at the prompt had stopped; ``name`` heads
    the table of ``compare EXPR`` at the prompt; ``interrupt`` sends SIGINT to ranks (an
    evaluation past its time limit, stopped.py); ``shown(rank, cell, units)`` tells whether
    ``before_prompt`` has shown that much of a rank's output, which the prompt waits for;
    ``output_here``: False where the ranks' output shows elsewhere (an attached job's logs).
    """
    if not channel.pending():
        return 0.0
    tic = time.monotonic()
    stopped = StoppedRanks(
        channel=channel,
        name=name,
        quits=quits,
        states=states,
        interrupt=interrupt,
        on_input=lambda session, ask: serve_input(session, ask, before_prompt, label),
    )
    group = GroupPrompt(
        stopped=stopped,
        ask=_ask,
        before_prompt=before_prompt,
        label=label,
        shown=shown,
        interrupted=interrupted,
        output_here=output_here,
    )
    group.run()
    return time.monotonic() - tic


def serve_stops(
    channel: DebugChannel,
    *,
    name: str,
    before_prompt: Callable[[], None],
    label: Callable[[int], str],
    quits: set[int],
    states: Callable[[], dict[int, RankState]] | None,
    interrupt: Callable[[list[int]], None] | None,
    output_here: bool = True,
    interrupted: dict[int, dict] | None = None,
    shown: Callable[[int, str, int], bool] | None = None,
) -> float:
    """Serve the stopped ranks of world ``name``: to JupyterLab's debugger, as its threads,
    while it is on (dap_serve.py), else at the group prompt (:func:`serve`); the seconds
    spent. ``interrupted`` and ``shown`` are the prompt's (see :func:`serve`)."""
    from . import dap

    adapter = dap.current()
    if adapter is None:
        return serve(
            channel,
            before_prompt=before_prompt,
            label=label,
            quits=quits,
            states=states,
            interrupted=interrupted,
            name=name,
            interrupt=interrupt,
            shown=shown,
            output_here=output_here,
        )
    from .dap_serve import serve_visual

    return serve_visual(
        adapter,
        channel,
        world_name=name,
        before_prompt=before_prompt,
        label=label,
        quits=quits,
        states=states,
        on_input=lambda session, ask: serve_input(session, ask, before_prompt, label),
        interrupt=interrupt,
        output_here=output_here,
    )


def serve_input(
    session: RankSession,
    ask: dict,
    before_prompt: Callable[[], None],
    label: Callable[[int], str] | None,
) -> None:
    """Answer ``input()`` / ``getpass`` on a rank at one prompt that names the rank."""
    before_prompt()
    time.sleep(ASK_SETTLE)  # the rank's last printed line may still be on its way
    before_prompt()
    session.send(**_answer(session.rank, ask, label))


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
