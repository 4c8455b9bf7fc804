"""The rank side of JupyterLab's visual debugger: breakpoints set in the notebook's gutter,
and the frames, variables and evaluations of a rank stopped at them.

Shipped to each engine as source (like ``debug_hook``) and run as module
``distcomp_dap_side``; standard library only. The kernel (local/debug/dap.py) calls:

- :func:`arm` before a ``%%distcomp run`` cell while the debugger is on: the breakpoints of
  that cell (its lines) and of files; the cell then runs traced by the rank's pdb
  (``debug_hook.RankPdb``), which stops only at those lines. ``arm(None, {})`` clears them.
- at a stop, through the rank's pdb prompt (``distcomp_call NAME JSON``): :func:`stack`,
  :func:`scopes`, :func:`variables`, :func:`evaluate`, :func:`rich`, :func:`to_globals`,
  :func:`breaks`. Each answers JSON.

Objects the notebook may expand get a number (``ref``), valid until the rank runs on; what
each shows, and its children, is ``dap_values``'s (shipped beside this module).
"""

from __future__ import annotations

import bdb
import os
import signal
import sys
from typing import Any

try:
    from . import dap_values as _values
except ImportError:  # on an engine: shipped as source, loaded just before this module
    _values = sys.modules["distcomp_dap_values"]

_refs: dict[int, Any] = {}  # ref -> object, until the rank runs on
_armed = False
#: the signal the kernel sends a running rank for the debugger's Pause (kept once set: the
#: default action of SIGUSR2 would end the rank)
PAUSE_SIGNAL = signal.SIGUSR2
_visual = False  # the notebook's visual debugger is on


def _clear_breakpoints() -> None:
    """Every bdb breakpoint gone: ``Breakpoint.clearBreakpoints`` (Python 3.10 and newer),
    by hand on an older Python (an attached job's rank may run one)."""
    clear = getattr(bdb.Breakpoint, "clearBreakpoints", None)
    if clear is not None:
        clear()
        return
    bdb.Breakpoint.next = 1
    bdb.Breakpoint.bplist = {}
    bdb.Breakpoint.bpbynumber = [None]


def _cell_file(code: str) -> str:
    """The file name this engine's IPython gives a cell of ``code`` (pdb stops by it); ''
    in a process that runs no cells (an attached job's rank)."""
    try:
        from IPython import get_ipython
    except ImportError:
        return ""
    shell = get_ipython()
    return str(shell.compile.get_code_name(code, code, 0)) if shell is not None else ""


def arm(code: str | None, cells: dict[str, list[int]], files: dict[str, list[int]]) -> str:
    """Breakpoints for the cell of ``code`` (``cells[""]``), for earlier cells by their file's
    base name, and for ``files``; the rank's file name of the cell ('' without code)."""
    global _armed, _visual
    _visual = code is not None
    _clear_breakpoints()
    here = _cell_file(code) if code is not None else ""
    folder = os.path.dirname(here or _cell_file(""))
    wanted: dict[str, list[int]] = dict(files)
    for name, lines in cells.items():
        wanted[here if name == "" else os.path.join(folder, name)] = lines
    for path, lines in wanted.items():
        if not path:
            continue
        for line in lines:
            bdb.Breakpoint(os.path.abspath(path) if not path.startswith("<") else path, line)
    _armed = bool(bdb.Breakpoint.bplist)
    _register()
    if _visual:
        signal.signal(PAUSE_SIGNAL, _pause)
    return here


def visual(pdb: Any = None) -> bool:
    """The notebook's visual debugger is on for this rank's cells, or serves ``pdb``'s stop
    (:func:`stack`): its steps stop in the user's code only."""
    return _visual or bool(getattr(pdb, "visual_step", False))


def _pause(signum: int, frame: Any) -> None:
    """The debugger's Pause (the kernel sends :data:`PAUSE_SIGNAL`): stop at the next line
    of the user's code (a rank inside a C call stops once it returns)."""
    hook = sys.modules.get("distcomp_debug_hook")
    debugger = hook._debugger() if _visual and hook is not None else None
    if debugger is not None and frame is not None:
        debugger.set_trace(frame)


def _register() -> None:
    from IPython import get_ipython

    shell = get_ipython()
    callbacks = shell.events.callbacks["pre_run_cell"]
    if not any(getattr(c, "__name__", "") == "_trace_cell" for c in callbacks):
        shell.events.register("pre_run_cell", _trace_cell)


def steps_on(pdb: Any, frame: Any) -> bool:
    """Under the visual debugger a step stops at lines only, as debugpy's does: past the end
    of a frame to the caller's next line, or to the cell's next statement (IPython runs each
    top-level statement as code of its own); into a call, at its first line. True when
    ``pdb`` should not stop here (pdb's ``--Return--`` / ``--Call--`` stops)."""
    if not visual(pdb) or frame is None:
        return False
    text = "".join(pdb.channel.output)
    for mark in ("--Return--\n", "--Call--\n"):
        if text.endswith(mark):
            rest = text[: -len(mark)]
            pdb.channel.output = [rest] if rest else []
            if mark == "--Return--\n":  # pdb keeps the value in the frame's locals
                frame.f_locals.pop("__return__", None)
            pdb.set_step()
            return True
    return False


def _trace_cell(*_info: object) -> None:
    """Before each cell, while armed: the rank's pdb traces, stopping only at breakpoints
    (the hook's post_run_cell callback ends the tracing)."""
    if not _armed:
        return
    hook = sys.modules.get("distcomp_debug_hook")
    debugger = hook._debugger() if hook is not None else None
    if debugger is None:
        return
    debugger.reset()  # pdb's set_trace, but stopping at breakpoints only (no step)
    frame: Any = sys._getframe()
    while frame is not None:
        frame.f_trace = debugger.trace_dispatch
        debugger.botframe = frame
        frame = frame.f_back
    debugger.set_continue()
    sys.settrace(debugger.trace_dispatch)


def _user_frames(pdb: Any) -> list[tuple[int, Any, int]]:
    """``(index in pdb.stack, frame, line)`` of the user's frames, innermost first."""
    start = 0
    for index, (frame, _) in enumerate(pdb.stack):
        if pdb.is_skipped_module(frame.f_globals.get("__name__", "")):
            start = index + 1
    return [(i, pdb.stack[i][0], pdb.stack[i][1]) for i in range(len(pdb.stack) - 1, start - 1, -1)]


def stack(pdb: Any) -> list[dict]:
    """The user's frames at this stop. The visual debugger asks them of every rank at each
    of its stops, before any step: so the step that follows is its own (``visual_step``,
    reset at the next stop), also on a rank no cell armed (an attached job's)."""
    pdb.visual_step = True
    _refs.clear()
    return [
        {"index": i, "file": f.f_code.co_filename, "line": line, "name": f.f_code.co_name}
        for i, f, line in _user_frames(pdb)
    ]


def _frame(pdb: Any, index: int) -> Any:
    return pdb.stack[index][0]


def _locals(pdb: Any, frame: Any) -> dict:
    return pdb.curframe_locals if frame is pdb.curframe else frame.f_locals


def _ref(value: Any) -> int:
    """A number to expand ``value`` by (0: nothing to expand)."""
    if not _values.expands(value):
        return 0
    number = len(_refs) + 1
    _refs[number] = value
    return number


def scopes(pdb: Any, index: int) -> list[dict]:
    frame = _frame(pdb, index)
    space = _locals(pdb, frame)
    found = [{"name": "Locals", "ref": _ref(_values.Space(space))}]
    if space is not frame.f_globals:
        found.append({"name": "Globals", "ref": _ref(_values.Space(frame.f_globals))})
    return found


def failure(exc: BaseException) -> str:
    """The text of an error of the user's code run for the debugger; ``exit()`` and
    ``sys.exit()`` are caught there, and an interrupt is the kernel's time limit."""
    if isinstance(exc, SystemExit):
        return f"SystemExit: {exc.code} (caught: the rank stays stopped)"
    if isinstance(exc, KeyboardInterrupt):
        return "KeyboardInterrupt: the evaluation was interrupted"
    try:
        return f"{type(exc).__name__}: {exc}"
    except Exception:  # the exception's own __str__ raised
        return type(exc).__name__


def _describe(name: str, value: Any) -> dict:
    return {**_values.line(name, value), "ref": _ref(value)}


def variables(pdb: Any, ref: int) -> list[dict]:
    value = _refs.get(ref)
    if value is None:
        return []
    return [_describe(name, child) for name, child in _values.children(value)]


def evaluate(pdb: Any, index: int, expression: str) -> dict:
    """``expression`` in the frame ``index`` (a statement is run there)."""
    frame = _frame(pdb, index)
    space = _locals(pdb, frame)
    try:
        try:
            code = compile(expression, "<debug console>", "eval")
        except SyntaxError:
            exec(compile(expression, "<debug console>", "exec"), frame.f_globals, space)
            return {"result": "", "type": "", "ref": 0}
        value = eval(code, frame.f_globals, space)
    except BaseException as exc:  # exit() too: the rank stays at its prompt
        return {"error": failure(exc)}
    described = _describe("", value)
    return {"result": described["value"], "type": described["type"], "ref": described["ref"]}


def _variable(pdb: Any, index: int, name: str) -> Any:
    """The value of the variable ``name`` in frame ``index`` (NameError if it has none)."""
    frame = _frame(pdb, index)
    return eval(name, frame.f_globals, _locals(pdb, frame))


def rich(pdb: Any, index: int, name: str) -> dict:
    """The variable ``name`` of frame ``index`` as the notebook displays it (every format
    IPython's formatter gives: JupyterLab's rich view of a variable). Nothing for a name the
    frame lacks, or a frame that returned (an open view refreshed after a step): JupyterLab
    says "undefined in the active context", as for a plain cell."""
    if not name.isidentifier():
        return {"data": {}, "metadata": {}}
    try:
        value = _variable(pdb, index, name)
    except (NameError, IndexError):
        return {"data": {}, "metadata": {}}
    except BaseException as exc:  # interrupted at the time limit
        return {"error": failure(exc)}
    try:
        from IPython import get_ipython

        data, metadata = get_ipython().display_formatter.format(value)
    except BaseException as exc:  # a display method that fails or exits
        return {"error": failure(exc)}
    return {"data": data, "metadata": {k: v for k, v in metadata.items() if k in data}}


def to_globals(pdb: Any, index: int, source: str, target: str) -> dict:
    """The variable ``source`` of frame ``index`` as ``target`` in the rank's namespace
    (JupyterLab's Copy to Globals): later cells on this rank see it."""
    if not (source.isidentifier() and target.isidentifier()):
        return {"error": f"{source!r} and {target!r} must be variable names"}
    try:
        value = _variable(pdb, index, source)
    except BaseException as exc:
        return {"error": failure(exc)}
    from IPython import get_ipython

    get_ipython().user_ns[target] = value
    described = _describe(target, value)
    return {"value": described["value"], "type": described["type"]}


def breaks(pdb: Any, cells: dict[str, list[int]], files: dict[str, list[int]]) -> bool:
    """New breakpoints while stopped: the cell's file is the one of the frames' cells."""
    global _armed
    _clear_breakpoints()
    folder = os.path.dirname(_cell_file(""))
    wanted = dict(files)
    for name, lines in cells.items() if folder else ():
        wanted[os.path.join(folder, name)] = lines
    for path, lines in wanted.items():
        for line in lines:
            bdb.Breakpoint(path, line)
    pdb.breaks = {}
    pdb._load_breaks()
    _armed = bool(bdb.Breakpoint.bplist)
    return _armed


def noop(pdb: Any) -> bool:
    return True
