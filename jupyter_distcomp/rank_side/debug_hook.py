"""The rank side of the debugger: ``breakpoint()`` on a rank opens a prompt in the notebook.

A rank's pdb talks to the kernel over one TCP connection, authenticated both ways with the
world's key (``multiprocessing.connection``'s HMAC challenge); messages are JSON:

    rank -> kernel   {"hello": rank}  {"stop": {file, line, func, source}}  {"out": text}
                     {"read": true, "written": [cell, units]}  {"running": true}
                     {"end": "continue" | "quit"}
                     {"data": ...}  (the answer to the kernel's ``distcomp_*`` commands)
                     {"ask": {prompt, password}}  (input() / getpass on the rank)
    kernel -> rank   {"go": true} | {"skip": why} | {"interrupt": why}  (answers "stop"), {"line": text}
                     {"line": text} | {"error": why} | {"interrupt": why}  (answers "ask")

Two ways in, both standard library only:

- ``%%distcomp run`` ranks: the kernel ships this file's source to each engine once, runs it
  as module ``distcomp_debug_hook`` and calls :func:`install` (``sys.breakpointhook`` and
  ``pdb.set_trace``); ``post_mortem()`` debugs the rank's last failed cell.
- ``%distcomp command`` ranks: ``PYTHONBREAKPOINT=jupyter_distcomp.rank_side.debug_hook.
  breakpointhook`` with ``DISTCOMP_DEBUG=host:port:rank`` and ``DISTCOMP_DEBUG_KEY=hex``
  (``stack_site/sitecustomize.py`` routes ``pdb.set_trace`` here too). ``q`` ends such a
  process: ``SystemExit("rank N: quit in the debugger")``, exit status 1, no traceback.
"""

from __future__ import annotations

import builtins
import contextlib
import io
import json
import os
import pdb
import socket
import sys
from collections.abc import Iterator
from types import FrameType
from typing import Any, cast

ENV_ADDRESS = "DISTCOMP_DEBUG"
ENV_KEY = "DISTCOMP_DEBUG_KEY"
HOOK = "jupyter_distcomp.rank_side.debug_hook.breakpointhook"

#: modules pdb does not stop in: the machinery that runs a cell (n at a cell's last line
#: goes on to the cell's next statement, as a local IPython does not)
SKIP = (
    "IPython.*",
    "ipykernel.*",
    "ipyparallel.*",
    "traitlets.*",
    "asyncio.*",
    "tornado.*",
    "zmq.*",
    "contextlib",
    "codeop",
    "distcomp_*",  # this package's rank-side modules, loaded by path (debug, ledger, output)
    "jupyter_distcomp.*",
)
#: where library code lives (the standard library, site-packages): a step does not stop in
#: it when the machinery around the user's code (:data:`SKIP`) called it
LIBRARY_ROOTS = tuple(
    os.path.join(os.path.realpath(root), "")
    for root in {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix}
    if os.path.realpath(root) != os.path.sep
)
_library_files: dict[str, bool] = {}
_last_lines: dict[str, int] = {}  # a cell's file: the first line of its last statement
#: how a notebook (which has no Ctrl-D) leaves pdb's ``interact``
LEAVE_INTERACT = ("exit()", "quit()", "EOF")
#: the first line of a ``%%distcomp run`` cell as the ranks get it: its ``%%distcomp run``
#: line, as a comment (the ranks cannot run it); listings show it as the notebook does
MAGIC_LINE = "#%%distcomp"
#: seconds to connect to the kernel, pass the key challenge and hear whether to stop: a
#: kernel that does not answer in time means no prompt, and the rank runs on
HANDSHAKE_SECONDS = 10.0
_channel = None  # this process's _Channel, once install() ran or the environment named one


class _Channel:
    """One authenticated connection to the kernel, reopened after the kernel closed it."""

    def __init__(self, host: str, port: int, key: bytes, rank: int, command: bool = False):
        self.address, self.key, self.rank = (host, port), key, rank
        self.command = command  # a process of `%distcomp command`: q ends it
        self.conn: Any = None
        self.output: list[str] = []  # pdb's text, sent with the next message

    def send(self, connect: bool = False, **message) -> None:
        """Send ``message``; only a new stop (``connect``) opens a connection."""
        if self.conn is None and not connect:
            raise EOFError("the kernel ended this debug session")
        if self.conn is None:
            self.conn = _connect(self.address, self.key)
            self.conn.send_bytes(json.dumps({"hello": self.rank}).encode())
        if self.output:
            message = {"out": "".join(self.output), **message}
            self.output = []
        self.conn.send_bytes(json.dumps(message).encode())

    def session_ended(self) -> str:
        """What pdb reads once the kernel ended the session: a KeyboardInterrupt in the
        rank's code (a job's channel, whose notebook may come back, reads the end of input)."""
        raise KeyboardInterrupt("the notebook ended this debug session") from None

    def request(self, timeout: float | None, **message) -> dict:
        """Send ``message`` (a stop, a question) and return the kernel's answer, within
        ``timeout`` s of each try. The connection of an earlier stop, which the kernel
        closed after its cell, is replaced by a new one; a new connection that fails is
        tried once more, unless the kernel did not answer it in time. Raises OSError /
        EOFError saying why."""
        fresh_tries = 2
        while True:
            reused = self.conn is not None
            try:
                self.send(connect=True, **message)
                return self.recv(timeout)
            except (OSError, EOFError) as exc:
                self.close()
                if reused:
                    continue
                fresh_tries -= 1
                if not fresh_tries or isinstance(exc, TimeoutError):
                    raise

    def recv(self, timeout: float | None = None) -> dict:
        """The kernel's next message; with ``timeout``, a TimeoutError after that long."""
        if self.conn is None:
            raise EOFError("not connected")
        if timeout is None:
            return json.loads(self.conn.recv_bytes())
        _time_out(self.conn, timeout)
        try:
            return json.loads(self.conn.recv_bytes())
        except BlockingIOError:  # SO_RCVTIMEO ran out
            raise TimeoutError(f"no answer within {timeout:g} s") from None
        finally:
            if self.conn is not None:
                _time_out(self.conn, 0)

    def close(self) -> None:
        if self.conn is not None:
            try:
                self.conn.close()
            except OSError:
                pass
        self.conn = None


def _time_out(conn: Any, seconds: float) -> None:
    """Reads and writes of ``conn`` fail after ``seconds`` (0: never)."""
    import struct

    value = struct.pack("ll", int(seconds), int((seconds % 1) * 1e6))
    with socket.socket(fileno=os.dup(conn.fileno())) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, value)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, value)


def _connect(address: tuple[str, int], key: bytes) -> Any:
    """An authenticated connection to the kernel's channel, within
    :data:`HANDSHAKE_SECONDS` (connect and both challenges), or an OSError saying why."""
    from multiprocessing import AuthenticationError
    from multiprocessing.connection import Connection, answer_challenge, deliver_challenge

    try:
        sock = socket.create_connection(address, timeout=HANDSHAKE_SECONDS)
    except OSError as exc:
        error = TimeoutError if isinstance(exc, TimeoutError) else OSError
        raise error(
            f"cannot connect to the notebook's debugger at {address[0]}:{address[1]}: {exc}"
        ) from None
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # prompts are small
    sock.settimeout(None)
    conn = Connection(sock.detach())
    _time_out(conn, HANDSHAKE_SECONDS)
    try:
        answer_challenge(conn, key)
        deliver_challenge(conn, key)
    except (OSError, EOFError, AuthenticationError) as exc:
        conn.close()
        if isinstance(exc, BlockingIOError):
            raise TimeoutError(
                f"the notebook's debugger did not answer within {HANDSHAKE_SECONDS:g} s"
            ) from None
        raise OSError(f"the notebook's debugger refused the connection ({exc!r})") from None
    _time_out(conn, 0)
    return conn


class _Out(io.TextIOBase):
    """pdb's stdout: text goes to the notebook."""

    def __init__(self, channel: _Channel):
        self.channel = channel

    def write(self, text: str) -> int:
        self.channel.output.append(text)
        return len(text)

    def flush(self) -> None:
        pass


def _written() -> dict:
    """What this rank printed goes on its way to the notebook (its streams flushed); how much
    of it its cell's flow counts, ``{"written": [cell, units]}``, so that the kernel shows it
    before the prompt (nothing where no flow counts)."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError, AttributeError):
            pass
    try:
        from IPython import get_ipython
    except ImportError:
        return {}
    flow = getattr(getattr(get_ipython(), "kernel", None), "_distcomp_flow", None)
    if flow is None:
        return {}
    return {"written": [flow.cell or "", flow.sent]}  # no cell yet: nothing written


class _In(io.TextIOBase):
    """pdb's stdin: each line is the answer to a prompt in the notebook. A session the
    kernel ended (an interrupt at the prompt, a stop) is a KeyboardInterrupt, never the end
    of input, which pdb takes for ``q``."""

    def __init__(self, channel: _Channel):
        self.channel = channel

    def readline(self, size: int | None = -1) -> str:  # type: ignore[override]
        try:
            self.channel.send(read=True, **_written())
            reply = self.channel.recv()
        except (OSError, EOFError):  # the kernel ended the session (interrupt, stop)
            self.channel.close()
            return self.channel.session_ended()
        return reply.get("line", "") + "\n"


def _is_library(filename: str) -> bool:
    """``filename`` is the standard library's or an installed package's, or code a library
    made from text (``<frozen ...>``, ``<string>``: namedtuple's, dataclasses')."""
    known = _library_files.get(filename)
    if known is None:
        if len(_library_files) > 10_000:
            _library_files.clear()
        path = os.path.join(os.path.realpath(filename), "")
        known = _library_files[filename] = (
            (filename.startswith("<") and not filename.startswith("<ipython-input"))
            or any(part in path for part in ("/site-packages/", "/dist-packages/"))
            or path.startswith(LIBRARY_ROOTS)
        )
    return known


@contextlib.contextmanager
def _exit_raises() -> Iterator[None]:
    """While the rank is at a prompt, IPython's ``exit()`` / ``quit()`` raise SystemExit,
    which pdb and the debugger's evaluations catch: on an engine they would stop its event
    loop, and the rank would never answer again."""
    try:
        from IPython import get_ipython
    except ImportError:
        yield
        return
    shell = get_ipython()
    if shell is None or "ask_exit" in vars(shell):  # none, or a prompt within a prompt
        yield
        return

    def refuse() -> None:
        raise SystemExit("exit() at the debugger's prompt")

    shell.ask_exit = refuse
    try:
        yield
    finally:
        del shell.ask_exit


class _Lines(list):
    """A file's breakpoint lines, as pdb keeps them (a list), with a set for ``in``: pdb
    asks at every traced line, and loads each breakpoint with an ``in`` check, which makes
    a list quadratic (100,000 breakpoints in one file: minutes)."""

    def __init__(self, lines=()):
        super().__init__(dict.fromkeys(lines))
        self._set = set(self)

    def __contains__(self, line) -> bool:
        return line in self._set

    def append(self, line) -> None:
        if line not in self._set:
            self._set.add(line)
            super().append(line)

    def remove(self, line) -> None:
        super().remove(line)
        self._set.discard(line)


def _last_statement(frame) -> bool:
    """``frame`` (a cell's top-level statement) runs the cell's last statement."""
    import ast
    import linecache

    filename = frame.f_code.co_filename
    last = _last_lines.get(filename)
    if last is None:
        try:
            body = ast.parse("".join(linecache.getlines(filename))).body
        except (SyntaxError, ValueError):
            body = []
        last = _last_lines[filename] = body[-1].lineno if body else 0
        if len(_last_lines) > 1000:
            _last_lines.clear()
    return frame.f_lineno >= last


class RankPdb(pdb.Pdb):
    """pdb whose prompt names the rank and whose terminal is the notebook."""

    def __init__(self, channel: _Channel):
        super().__init__(
            stdin=cast(Any, _In(channel)),
            stdout=cast(Any, _Out(channel)),
            nosigint=True,
            skip=SKIP,
        )
        self.channel = channel
        self.prompt = f"(Pdb rank {channel.rank}) "
        self._ending = ""
        self._cell_goal: int | None = None  # r / unt at a cell's top level: the line to reach
        #: the step under way is the visual debugger's (set by dap_side.stack): it stops at
        #: lines of the user's code only, also where no cell armed the rank (an attached job's)
        self.visual_step = False

    def _print_lines(self, lines, start, breaks=(), frame=None) -> None:
        """pdb's listing (``l``, ``ll``, ``source``), with a cell's first line as the
        notebook shows it: the ``%%distcomp run`` line the user wrote (:data:`MAGIC_LINE`)."""
        if start == 1 and lines and lines[0].startswith(MAGIC_LINE):
            lines = [lines[0][1:], *lines[1:]]
        super()._print_lines(lines, start, breaks, frame)

    def _add_to_breaks(self, filename, lineno) -> None:
        """bdb's, in constant time (:class:`_Lines`)."""
        lines = self.breaks.get(filename)
        if not isinstance(lines, _Lines):
            lines = self.breaks[filename] = _Lines(lines or ())
        lines.append(lineno)

    def stop_here(self, frame) -> bool:
        """pdb's rule, and not in library code that the machinery around the user's line
        called (``print`` on a rank runs ipykernel's and our output code, and the threading
        code they call): a step into ``print`` goes on to the user's next line. Under the
        visual debugger a step stops in the user's code only (debugpy's justMyCode, as
        JupyterLab runs it)."""
        if not super().stop_here(frame):
            return False
        if not _is_library(frame.f_code.co_filename):
            return True
        side = sys.modules.get("distcomp_dap_side")
        if side is not None and side.visual(self):
            return False
        return not self._under_machinery(frame)

    def _cell_statement(self, frame) -> bool:
        """``frame`` runs one top-level statement of a cell: IPython compiles each on its
        own, so to the user they are lines of one frame, not calls and returns."""
        back = frame.f_back
        return (
            frame.f_code.co_name == "<module>"
            and back is not None
            and self.is_skipped_module(back.f_globals.get("__name__", ""))
        )

    def user_call(self, frame, argument_list) -> None:
        """No ``--Call--`` stop as a cell's next statement starts: a step goes on to its
        first line, and ``r`` / ``unt`` go on towards their line (:meth:`_to_cell_line`)."""
        if not self._cell_statement(frame):
            super().user_call(frame, argument_list)
        elif self._cell_goal is not None:
            self._stop_in(frame, self._cell_goal)

    def user_return(self, frame, return_value) -> None:
        """No ``--Return--`` stop as a cell's statement ends (``breakpoint()`` on its own
        line, ``n`` over a statement): the step goes on to the next statement's first line,
        as in one frame. After the cell's last statement it stops, as pdb at the end of a
        script, and leaves no ``__return__`` in the rank's globals."""
        if not self._cell_statement(frame):
            super().user_return(frame, return_value)
        elif _last_statement(frame):
            super().user_return(frame, return_value)
            frame.f_globals.pop("__return__", None)

    def user_exception(self, frame, exc_info) -> None:
        """pdb's, never in the machinery that runs a cell (bdb stops at a coroutine's
        internal StopIteration after a step where it stops nowhere else)."""
        if not self.is_skipped_module(frame.f_globals.get("__name__", "")):
            super().user_exception(frame, exc_info)

    def set_return(self, frame) -> None:
        """``r`` at a cell's top level runs to the cell's end, as pdb's ``r`` at a script's
        top level: its ``--Return--`` after the last statement."""
        if self._cell_statement(frame):
            self._to_cell_line(frame, sys.maxsize)
        else:
            super().set_return(frame)

    def set_until(self, frame, lineno=None) -> None:
        """``unt [LINE]`` at a cell's top level runs to that line of the cell (default: a
        line past this one), also in a later top-level statement, or to the cell's end."""
        if self._cell_statement(frame):
            self._to_cell_line(frame, lineno or frame.f_lineno + 1)
        else:
            super().set_until(frame, lineno)

    def _to_cell_line(self, frame: FrameType, line: int) -> None:
        """Run on to ``line`` of the cell, as in one frame: each top-level statement is a
        frame of its own, so :meth:`user_call` hands the goal on to the next one. At the
        cell's end (its ``--Return--``): on past it, as ``n`` there (pdb would stop in the
        machinery that runs cells)."""
        if frame is self.frame_returning:
            self.set_next(frame)
        else:
            self._cell_goal = line
            self._stop_in(frame, line)

    def _stop_in(self, frame: FrameType, line: int) -> None:
        """Stop in ``frame`` at its first line from ``line`` on, or as it returns (bdb's
        ``until``)."""
        cast(Any, self)._set_stopinfo(frame, frame, line)

    def _under_machinery(self, frame) -> bool:
        while frame is not None and _is_library(frame.f_code.co_filename):
            frame = frame.f_back
            if frame is not None and self.is_skipped_module(frame.f_globals.get("__name__", "")):
                return True
        return False

    def get_stack(self, frame, traceback):
        """bdb's, without the frames of the machinery below the user's code: ``w`` starts
        at the cell, ``u`` at its top level says ``Oldest frame`` as at a script's."""
        stack, index = super().get_stack(frame, traceback)
        start = 0
        for at, (each, _) in enumerate(stack[:index]):
            if self.is_skipped_module(each.f_globals.get("__name__", "")):
                start = at + 1
        return stack[start:], index - start

    def interaction(self, frame, traceback) -> None:
        self._cell_goal = None
        side = sys.modules.get("distcomp_dap_side")
        if side is not None and side.steps_on(self, frame):
            return
        self.visual_step = False  # a stop: the next step is the one its prompt sends
        where = frame
        if where is None and traceback is not None:
            last = traceback
            while last.tb_next is not None:
                last = last.tb_next
            where = last.tb_frame
            line = last.tb_lineno
        else:
            line = where.f_lineno if where is not None else 0
        if not self._announce(where, line):
            self._stop_tracing()
            return
        self._ending = ""
        with _exit_raises():
            super().interaction(frame, traceback)
        try:
            if self._ending == "quit" or frame is None or (self._ending and not self.breaks):
                self.channel.send(end=self._ending or "continue")
            else:
                self.channel.send(running=True)
        except (OSError, EOFError):
            self.channel.close()
        if self._ending == "quit" and self.channel.command:
            sys.settrace(None)
            raise SystemExit(quit_line(self.channel.rank))

    def _announce(self, frame, line: int) -> bool:
        """Tell the kernel where we stopped; False if it says not to stop here."""
        code = frame.f_code if frame is not None else None
        stop = {
            "file": code.co_filename if code else "?",
            "line": line,
            "func": code.co_name if code else "?",
        }
        try:
            reply = self.channel.request(HANDSHAKE_SECONDS, stop=stop)
        except (OSError, EOFError) as exc:
            print(
                f"distcomp: rank {self.channel.rank}: breakpoint() skipped, the rank runs on: "
                f"{exc}",
                file=sys.stderr,
                flush=True,
            )
            return False
        if "interrupt" in reply:  # the cell was interrupted before this rank stopped
            self._stop_tracing()
            raise KeyboardInterrupt(f"the notebook interrupted the cell ({reply['interrupt']})")
        return "skip" not in reply

    def _cmdloop(self) -> None:
        """SIGINT at the prompt (a kernel interrupt) ends the session and the rank's cell;
        pdb's own loop would prompt again."""
        try:
            self.cmdloop()
        except KeyboardInterrupt:  # the session ends: no breakpoint, no tracing is left
            self.channel.close()
            self.clear_all_breaks()
            self.set_continue()
            sys.settrace(None)
            raise

    def _stop_tracing(self) -> None:
        self.set_continue()
        if not self.breaks:
            sys.settrace(None)

    def do_continue(self, arg):
        self._ending = "continue"
        return super().do_continue(arg)

    do_c = do_cont = do_continue

    def do_quit(self, arg):
        self._ending = "quit"
        return super().do_quit(arg)

    do_q = do_exit = do_quit

    def do_EOF(self, arg):
        self._ending = "quit"
        return super().do_EOF(arg)

    def do_distcomp_compare(self, arg):
        """The kernel's ``compare EXPR`` at this prompt: EXPR's summary in the current frame,
        sent to the kernel (the table is made there); an array or mapping is kept for
        ``distcomp_serve`` and ``distcomp_diff``."""
        try:
            compare = _compare()
        except ImportError as exc:
            summary = {"kind": "error", "text": f"compare needs jupyter-distcomp here: {exc}"}
        else:
            frame = self.curframe
            space = frame.f_globals if frame is not None else {}
            summary = compare.summarize_in_frame(arg, compare.SLOT, space, self.curframe_locals)
        self._answer(summary)

    def do_distcomp_serve(self, arg):
        """The reference rank of compare: serve the kept value (``serve_value``'s
        arguments but the slot, as JSON); its address and port."""
        compare = _compare()
        self._answer({"served": compare.serve_value(compare.SLOT, *json.loads(arg))})

    def do_distcomp_diff(self, arg):
        """A rank of compare: max |diff| of the kept value against the served reference
        (``diff_value``'s arguments but the slot, as JSON; no source: forget it)."""
        compare = _compare()
        self._answer(compare.diff_value(compare.SLOT, *json.loads(arg)))

    def do_distcomp_call(self, arg):
        """The visual debugger's question at this stop: ``NAME JSON`` calls
        ``distcomp_dap_side.NAME(self, *JSON)`` and answers its result."""
        name, _, args = arg.partition(" ")
        side = sys.modules.get("distcomp_dap_side")
        function = getattr(side, name, None) if not name.startswith("_") else None
        if function is None:
            self._answer({"error": f"no such debugger call: {name}"})
            return
        try:
            self._answer({"value": function(self, *json.loads(args or "[]"))})
        except BaseException as exc:  # exit() or an interrupt too: the rank stays here
            self._answer({"error": cast(Any, side).failure(exc)})

    def _answer(self, data) -> None:
        """Send the kernel the answer of one of its commands."""
        try:  # a complex or a Decimal in a summary is sent as its text
            self.channel.send(data=json.loads(json.dumps(data, default=str)))
        except (OSError, EOFError):
            self.channel.close()

    def do_interact(self, arg):
        """An interactive interpreter on this rank, its lines read from the notebook;
        ``exit()`` returns to pdb."""
        stdin, stdout, read = sys.stdin, sys.stdout, builtins.input

        def ask(prompt: object = "") -> str:
            self.stdout.write(str(prompt))
            line = self.stdin.readline()
            if not line or line.strip() in LEAVE_INTERACT:
                raise EOFError  # leaves interact, back to pdb
            return line.rstrip("\n")

        prompts = getattr(sys, "ps1", None), getattr(sys, "ps2", None)
        # the kernel puts the rank before the prompt; an engine's own prompt is IPython's
        sys.ps1, sys.ps2 = ">>> ", "... "
        sys.stdin, sys.stdout, builtins.input = self.stdin, self.stdout, ask
        try:
            return super().do_interact(arg)
        except SystemExit as exc:  # code.interact lets it through: the rank stays here
            self.message(f"SystemExit: {exc.code} (caught: back at the rank's prompt)")
        finally:
            sys.stdin, sys.stdout, builtins.input = stdin, stdout, read
            for name, value in zip(("ps1", "ps2"), prompts):
                if value is None:
                    delattr(sys, name)
                else:
                    setattr(sys, name, value)


def _compare() -> Any:
    """rank_side/compare.py: loaded by path in a submitted job (``distcomp_compare``,
    job_attach.py), else this package's."""
    loaded = sys.modules.get("distcomp_compare")
    if loaded is not None:
        return loaded
    from jupyter_distcomp.rank_side import compare

    return compare


def _debugger() -> RankPdb | None:
    global _channel
    if _channel is None:
        where, key = os.environ.get(ENV_ADDRESS, ""), os.environ.get(ENV_KEY, "")
        host, _, rest = where.rpartition(":")
        host, _, port = host.rpartition(":")
        if not (host and port and rest and key):
            return None
        _channel = _Channel(host, int(port), bytes.fromhex(key), int(rest), command=True)
    return RankPdb(_channel)


def ask(prompt: object = "", password: bool = False) -> str:
    """``input()`` / ``getpass`` on this rank: the notebook prompts, naming the rank, and the
    line typed there is the answer (``EOFError`` if the notebook cannot prompt)."""
    for stream in (sys.stdout, sys.stderr):  # what the rank printed shows before the prompt
        try:
            stream.flush()
        except (OSError, ValueError, AttributeError):
            pass
    channel = _channel
    if channel is None:
        raise EOFError("input() on a rank needs the notebook's debugger channel")
    try:
        reply = channel.request(None, ask={"prompt": str(prompt), "password": password})
    except (OSError, EOFError) as exc:
        raise EOFError(f"input() on rank {channel.rank}: no notebook to ask ({exc})") from None
    if "interrupt" in reply:
        raise KeyboardInterrupt(f"the notebook interrupted the cell ({reply['interrupt']})")
    if "error" in reply:
        raise EOFError(f"input() on rank {channel.rank}: {reply['error']}")
    return str(reply.get("line", ""))


def _answer_input_in_the_notebook() -> None:
    """ipykernel points ``input`` and ``getpass.getpass`` at its kernel's own for each cell
    (an engine's cannot prompt): the kernel's are replaced."""
    try:
        from IPython import get_ipython
    except ImportError:
        return
    kernel = getattr(get_ipython(), "kernel", None)
    if kernel is None:
        return
    kernel.raw_input = lambda prompt="": ask(prompt)
    kernel.getpass = lambda prompt="Password: ", stream=None: ask(prompt, password=True)


def quit_line(rank: int) -> str:
    return f"rank {rank}: quit in the debugger"


def install(host: str, port: int, key_hex: str, rank: int) -> None:
    """Route ``breakpoint()`` and ``pdb.set_trace()`` of this process to the kernel."""
    global _channel
    if _channel is not None:
        _channel.close()
    _channel = _Channel(host, int(port), bytes.fromhex(key_hex), int(rank))
    sys.breakpointhook = breakpointhook
    pdb.set_trace = set_trace
    _end_sessions_with_their_cell()
    _answer_input_in_the_notebook()


def _end_sessions_with_their_cell() -> None:
    """After each cell of this engine, no trace function is left on the rank.

    pdb keeps tracing after ``c`` while breakpoints exist, and a new session loads the
    breakpoints of earlier ones: without this, a rank stays traced for good (every later
    cell slower, and an interrupt that lands outside the debugger leaves it traced).
    Breakpoints stay set for the next ``breakpoint()``.
    """
    try:
        from IPython import get_ipython
    except ImportError:
        return
    shell = get_ipython()
    if shell is None:
        return
    callbacks = shell.events.callbacks["post_run_cell"]
    if any(getattr(callback, "__name__", "") == "_untrace" for callback in callbacks):
        return

    def _untrace(*_result: object) -> None:
        sys.settrace(None)

    shell.events.register("post_run_cell", _untrace)


def breakpointhook(*args, **kwargs) -> None:
    debugger = _debugger()
    if debugger is None:
        print("distcomp: breakpoint() skipped: no debugger channel", file=sys.stderr)
        return
    debugger.set_trace(sys._getframe(1))


def set_trace(*, header=None, frame=None) -> None:
    """``pdb.set_trace``: stop in ``frame`` (default: the caller's)."""
    debugger = _debugger()
    if debugger is None:
        return
    if header is not None:
        debugger.message(header)
    debugger.set_trace(frame or sys._getframe(1))


def post_mortem(traceback=None) -> None:
    """pdb on the frame where this process's last failed cell raised."""
    traceback = traceback or getattr(sys, "last_traceback", None)
    debugger = _debugger()
    if traceback is None or debugger is None:
        raise ValueError("no failed cell to debug on this rank")
    debugger.reset()
    debugger.interaction(None, traceback)
