"""Code that runs inside each rank once, right after it registers.

ipyparallel ships these functions to the engines as code objects; they import what they need
inside and use no module globals. ipyparallel first imports a function's module on the
engine (for the function's globals), so what ranks run at start-up lives here, in a module
that imports nothing heavy: the debugger's hook (:func:`load_hook`) too, not beside the
debugger's own code, which a rank never needs.
"""

from __future__ import annotations

from typing import Any

#: variables Open MPI sets per process that would contradict an emulated layout when the
#: launcher's own variables do not replace them (say, a 2x2 torch.distributed layout)
OPEN_MPI_WORLD_KEYS = (
    "OMPI_COMM_WORLD_RANK",
    "OMPI_COMM_WORLD_SIZE",
    "OMPI_COMM_WORLD_LOCAL_RANK",
    "OMPI_COMM_WORLD_LOCAL_SIZE",
    "OMPI_COMM_WORLD_NODE_RANK",
)
#: the metadata key of a lean execute request (a ``%%distcomp run`` cell's): the rank
#: publishes neither its busy status nor the echo of its code, which nobody reads (a cell
#: ends on the idle status; its code is the notebook's own): two messages less per rank;
#: and IPython (9 and later) keeps no copy of what the cell prints in the rank's output
#: history, which nobody reads either (the notebook's kernel keeps what it shows) and
#: which otherwise costs every write a third of its time and grows with every line
LEAN_REQUEST = "distcomp_lean"
#: the metadata key of the notebook's number for a ``%%distcomp run`` cell (``"12"`` for
#: ``In[12]``): the rank's tracebacks name the cell so, and a function defined in it keeps
#: that name while later cells call it
CELL_LABEL = "distcomp_cell"
#: what setup_rank uses of ipykernel and IPython beyond their public API (a test checks each
#: exists)
RELIES_ON = (
    "ipykernel.kernelbase.Kernel._publish_status",
    "ipykernel.kernelbase.Kernel._publish_execute_input",
    "ipykernel.kernelbase.Kernel.get_parent",
    "ipykernel.kernelbase.Kernel.execute_request",
    "ipykernel.kernelbase.Kernel.shell_handlers",  # execute_request's handler replaced
    "IPython.core.interactiveshell.InteractiveShell._tee",
    "IPython.core.compilerop.CachingCompiler.cache",
)


def setup_rank(
    env: dict,
    drop: list,
    stack_path: str | None,
    ledger: tuple[str, str] | None = None,
    flow: tuple[str, str] | None = None,
    lean: str = "",
    cwd: str = "",
    cell_label: str = "",
    segments: tuple[str, str] | None = None,
) -> dict:
    """Apply this rank's variables, arm the stack dump and the collectives ledger, keep cells
    that follow a failed one (and give them a working stdout and stderr), and say who we are.

    ``ledger`` is ``(ledger_hooks.py, ledger file)``: the rank records its torch.distributed
    and mpi4py calls there (see ledger_hooks.py); skipped where that file is not on the
    rank's host.

    ``flow`` is ``(flow.py, flow file)``: the rank's output waits while the notebook is behind
    (see flow.py); skipped where that file is not on the rank's host.

    ``lean`` is :data:`LEAN_REQUEST`: requests whose metadata has it publish no busy status
    and no echo of their code, and keep no copy of their printed text.

    ``cwd``: the rank's working directory from now on (its node's copy of the notebook's
    folder); empty: where the rank started.

    ``cell_label`` is :data:`CELL_LABEL`: a request's cell is named by its value in the
    rank's tracebacks (IPython's ``Cell In[12]``), not by the engine's own count, and in
    the ledger's call sites (``In [12], line 7``, in check mode's errors).

    ``segments`` is ``(segments.py, record file)``: the rank writes down the shared-memory
    segments it makes, which go with it even when a SIGKILL ends its resource tracker.

    ``drop`` lists variables to remove unless ``env`` sets them. SIGUSR1 makes faulthandler
    write every thread's Python stack to ``stack_path`` even while the main thread is stuck
    in C code (an MPI collective), which is how a timed-out cell shows where each rank hangs.
    """
    import contextlib
    import faulthandler
    import os
    import signal
    import socket
    import sys
    import threading

    # the notebook's number of each cell this rank ran ("12" for In [12]), by the name of
    # the file IPython ran it as (the code's hash: the same on every rank): the ledger's
    # call sites are named by it, also those of other ranks
    cell_numbers: dict[str, str] = {}
    for key in drop:
        if key not in env:
            os.environ.pop(key, None)
    os.environ.update(env)
    if cwd:
        os.chdir(cwd)
    if "TMPDIR" in env:  # tempfile reads it once: read it again
        import tempfile

        tempfile.tempdir = None
    if stack_path:
        # on another host the folder is new: it is the kernel's, named the same there; one
        # that is a link or another user's is not written into
        folder = os.path.dirname(stack_path) or "."
        os.makedirs(folder, mode=0o700, exist_ok=True)
        info = os.lstat(folder)
        if not os.path.islink(folder) and info.st_uid == os.getuid():
            flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0)
            stack_file = os.fdopen(os.open(stack_path, flags, 0o600), "a")
            faulthandler.register(signal.SIGUSR1, file=stack_file, all_threads=True)
            sys._distcomp_stack_file = stack_file  # type: ignore[attr-defined]  # kept alive
    try:  # fatal errors (segfaults) print a Python stack into mpiexec's output
        if sys.__stderr__ is not None:
            faulthandler.enable(file=sys.__stderr__, all_threads=False)
    except Exception:
        pass
    try:
        # ipykernel drops (TaskAborted) the execute requests that reach it while it ends a
        # failed or interrupted cell (``stop_on_error``, true unless the request says
        # otherwise; ipyparallel's cannot). The kernel sends a rank its next cell as soon as
        # the rank replied, so that cell could be dropped: requests default to false here.
        from IPython import get_ipython

        kernel = get_ipython().kernel
        handle = kernel.shell_handlers["execute_request"]
        if not getattr(handle, "keeps_cells", False):
            # a cell that closed sys.stdout or sys.stderr (ipykernel's streams) leaves the
            # next cell a new one on the same publisher, instead of a rank that cannot print
            opened = {
                name: (type(stream), stream.session, stream.pub_thread, stream.topic)
                for name in ("stdout", "stderr")
                for stream in [getattr(sys, name)]
                if getattr(stream, "pub_thread", None) is not None
            }

            def reopen_streams(parent: dict) -> None:
                for name, (kind, session, thread, topic) in opened.items():
                    if getattr(getattr(sys, name), "closed", False):
                        fresh = kind(session, thread, name, watchfd=False)
                        fresh.topic = topic  # ipyparallel's: names the engine
                        fresh.set_parent(parent)  # this request's, set before it reached us
                        setattr(sys, name, fresh)

            def execute_request(stream, ident, parent):
                parent["content"].setdefault("stop_on_error", False)
                try:
                    reopen_streams(parent)
                except Exception:  # the cell then reports the closed stream itself
                    pass
                return handle(stream, ident, parent)

            execute_request.keeps_cells = True  # type: ignore[attr-defined]
            kernel.shell_handlers["execute_request"] = execute_request

            # what the engine does on SIGTERM and SIGINT (stop its event loop; ignore):
            # nothing a process forked from it can do, so such a child ends on SIGTERM and
            # raises KeyboardInterrupt on SIGINT, as Python does by default (multiprocessing's
            # Pool.terminate waited forever for a worker that ignored SIGTERM)
            engine_handlers: dict[int, tuple[object, Any]] = {
                signal.SIGTERM: (signal.getsignal(signal.SIGTERM), signal.SIG_DFL),
                signal.SIGINT: (signal.getsignal(signal.SIGINT), signal.default_int_handler),
            }

            def in_child() -> None:
                for number, (engine, default) in engine_handlers.items():
                    if callable(engine) and signal.getsignal(number) == engine:
                        signal.signal(number, default)
                fd_streams()

            def fd_streams() -> None:
                # a process forked from the rank has neither the iopub thread nor its socket
                # that ipykernel's streams send through: what it printed went nowhere. Its
                # streams write to fds 1 and 2 instead, a line at a time (as on a terminal),
                # pipes the rank's streams watch: the text shows in the rank's current
                # cell, labelled with the rank, as what a subprocess of the rank prints
                for name in opened:
                    if getattr(getattr(sys, name, None), "pub_thread", None) is not None:
                        fd = 1 if name == "stdout" else 2
                        text = open(  # noqa: SIM115  # the child's stream while it lives
                            fd, "w", buffering=1, errors="backslashreplace", closefd=False
                        )
                        setattr(sys, name, text)

            os.register_at_fork(after_in_child=in_child)
            if lean:
                publish_status = kernel._publish_status
                publish_input = kernel._publish_execute_input

                def is_lean(parent: dict | None) -> bool:
                    return bool(((parent or {}).get("metadata") or {}).get(lean))

                def lean_status(status, channel, parent=None):
                    if status == "busy" and is_lean(parent or kernel.get_parent(channel)):
                        return
                    publish_status(status, channel, parent)

                def lean_input(code, parent, execution_count):
                    if not is_lean(parent):
                        publish_input(code, parent, execution_count)

                kernel._publish_status = lean_status
                kernel._publish_execute_input = lean_input
                tee = getattr(kernel.shell, "_tee", None)  # IPython 9: output into history
                if tee is not None:

                    def lean_tee(channel):
                        if is_lean(kernel.get_parent("shell")):
                            return contextlib.nullcontext()
                        return tee(channel)

                    kernel.shell._tee = lean_tee
            if cell_label:
                compiler = get_ipython().compile
                cache = compiler.cache

                def labelled_cache(transformed_code, number=0, raw_code=None):
                    name = cache(transformed_code, number, raw_code)
                    metadata = (kernel.get_parent("shell") or {}).get("metadata") or {}
                    if metadata.get(cell_label) is not None:
                        label = compiler._filename_map[name] = metadata[cell_label]
                        cell_numbers[os.path.basename(name)] = label
                    return name

                compiler.cache = labelled_cache
    except Exception:  # not an ipykernel engine
        pass

    def by_path(name: str, path: str):
        """The module of the file ``path``, loaded once as ``name``: no package needed."""
        import importlib.util

        module = sys.modules.get(name)
        if module is None:
            spec = importlib.util.spec_from_file_location(name, path)
            assert spec is not None and spec.loader is not None
            module = importlib.util.module_from_spec(spec)
            sys.modules[name] = module
            spec.loader.exec_module(module)
        return module

    if ledger is not None and os.path.exists(ledger[0]):
        try:
            by_path("distcomp_ledger_hooks", ledger[0]).install(ledger[1], cells=cell_numbers)
        except Exception as exc:
            print(f"distcomp: no collectives ledger on this rank: {exc!r}", file=sys.stderr)
    if flow is not None and os.path.exists(flow[0]) and os.path.exists(flow[1]):
        try:
            by_path("distcomp_flow", flow[0]).install(flow[1])
        except Exception as exc:
            print(f"distcomp: this rank's output is not paced: {exc!r}", file=sys.stderr)
    if segments is not None and os.path.exists(segments[0]):
        try:
            by_path("distcomp_segments", segments[0]).install(segments[1])
        except Exception as exc:
            print(f"distcomp: this rank's shared memory is not recorded: {exc!r}", file=sys.stderr)
    mpi_rank = mpi_size = None
    if "mpi4py.MPI" in sys.modules:
        comm = sys.modules["mpi4py.MPI"].COMM_WORLD
        mpi_rank, mpi_size = comm.Get_rank(), comm.Get_size()
    return {
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "main_thread": threading.main_thread().ident,
        "mpi_rank": mpi_rank,
        "mpi_size": mpi_size,
    }


def load_hook(
    source: str, host: str, port: int, key: str, rank: int, dap: str = "", values: str = ""
) -> None:
    """The debugger's hook module (debug_hook.py) from its ``source``, installed; the visual
    debugger's side (dap_side.py, from ``dap``, and the values it shows, dap_values.py, from
    ``values``) beside it."""
    import sys
    import types

    modules = (
        ("distcomp_dap_values", values),
        ("distcomp_dap_side", dap),
        ("distcomp_debug_hook", source),
    )
    for name, text in modules:
        if text:
            module = types.ModuleType(name)
            exec(compile(text, f"{name}.py", "exec"), module.__dict__)
            sys.modules[name] = module
    sys.modules["distcomp_debug_hook"].install(host, port, key, rank)


def arm_rank(code: str | None, cells: dict, files: dict) -> str:
    """The visual debugger's breakpoints on this rank (dap_side.arm)."""
    import sys

    return str(sys.modules["distcomp_dap_side"].arm(code, cells, files))


def check_collectives(on: bool, epoch: int = 0) -> None:
    """Check mode of this rank's ledger on or off, in its ``epoch`` (nothing without a
    ledger)."""
    import sys

    hooks = sys.modules.get("distcomp_ledger_hooks")
    if hooks is not None:
        hooks.configure(on, epoch)
