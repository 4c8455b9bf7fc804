"""``%%distcomp`` and ``%distcomp``: thin wiring from arguments to the modules that do the work.

Forms::

    %%distcomp NAME            cell body = YAML spec; binds NAME in the notebook
    %%distcomp run NAME [--ranks 0,2-3] [--timeout S] [--group-output]
    %distcomp env NAME [--instance-count N] [--process-count-per-node P]
    %distcomp command NAME [--input k=v ...] [--output k=path ...]
    %distcomp status [NAME] | stop [NAME] | restart NAME | list
    %distcomp export NAME PATH [--component] [--input k=v ...]
    %distcomp submit NAME --compute TARGET [...]
    %distcomp widget NAME

Settings are traitlets on this class: ``%config DistComp.default_timeout = 120``.
"""

from __future__ import annotations

import argparse
import shlex
from pathlib import Path
from typing import Any

from IPython.core.error import UsageError
from IPython.core.magic import Magics, line_cell_magic, magics_class
from traitlets import Bool, Float, Int, Unicode

from .errors import DistcompError

SUBCOMMANDS = (
    "run",
    "env",
    "command",
    "status",
    "stop",
    "restart",
    "list",
    "export",
    "submit",
    "widget",
)


class _Parser(argparse.ArgumentParser):
    """argparse that raises a UsageError (shown without a traceback) instead of exiting."""

    def error(self, message: str):
        raise UsageError(f"{self.prog}: {message}\n{self.format_usage().strip()}")

    def exit(self, status: int = 0, message: str | None = None):
        if message:
            raise UsageError(message)
        raise UsageError(self.format_help())


def _key_values(pairs: list[str] | None, flag: str) -> dict[str, str]:
    result: dict[str, str] = {}
    for pair in pairs or []:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise UsageError(f"{flag} expects NAME=VALUE, got {pair!r}. Fix: {flag} lr=0.1")
        result[key.strip()] = value
    return result


def _build_parser() -> _Parser:
    parser = _Parser(prog="%distcomp", add_help=False)
    sub = parser.add_subparsers(dest="subcommand", parser_class=_Parser)

    run = sub.add_parser("run", help="run the cell on every rank (or --ranks) of NAME")
    run.add_argument("name")
    run.add_argument("--ranks", default=None, help="ranks to run on, e.g. 0,2-3 (default: all)")
    run.add_argument("--timeout", type=float, default=None, help="seconds before the cell ends")
    run.add_argument(
        "--group-output", action="store_true", help="show output grouped by rank, in rank order"
    )

    env = sub.add_parser("env", help="table of the variables each rank sees")
    env.add_argument("name")
    env.add_argument("--instance-count", "--node-count", type=int, dest="instance_count")
    env.add_argument("--process-count-per-node", type=int, dest="process_count_per_node")
    env.add_argument("--worker-count", type=int, dest="worker_count")
    env.add_argument("--parameter-server-count", type=int, dest="parameter_server_count")

    command = sub.add_parser("command", help="run the spec's command on every rank")
    command.add_argument("name")
    command.add_argument("--input", action="append", dest="inputs", metavar="NAME=VALUE")
    command.add_argument("--output", action="append", dest="outputs", metavar="NAME=PATH")
    command.add_argument("--timeout", type=float, default=None)

    status = sub.add_parser("status", help="state of each rank")
    status.add_argument("name", nargs="?")
    stop = sub.add_parser("stop", help="stop ranks (all components when NAME is omitted)")
    stop.add_argument("name", nargs="?")
    restart = sub.add_parser("restart", help="restart the ranks of NAME")
    restart.add_argument("name")
    sub.add_parser("list", help="components defined in this notebook")

    export = sub.add_parser("export", help="write Azure ML v2 YAML for NAME")
    export.add_argument("name")
    export.add_argument("path")
    export.add_argument("--component", action="store_true", help="a component, not a job")
    export.add_argument("--input", action="append", dest="inputs", metavar="NAME=VALUE")
    export.add_argument("--output", action="append", dest="outputs", metavar="NAME=PATH")
    export.add_argument("--compute", default=None)

    submit = sub.add_parser("submit", help="submit NAME to Azure ML")
    submit.add_argument("name")
    submit.add_argument("--compute", default=None)
    submit.add_argument("--input", action="append", dest="inputs", metavar="NAME=VALUE")
    submit.add_argument("--output", action="append", dest="outputs", metavar="NAME=PATH")
    submit.add_argument("--workspace-config", default=None)
    submit.add_argument("--subscription", default=None)
    submit.add_argument("--resource-group", default=None)
    submit.add_argument("--workspace", default=None)
    submit.add_argument("--experiment", default=None)
    submit.add_argument("--wait", action="store_true")

    widget = sub.add_parser("widget", help="show the run-settings panel of NAME")
    widget.add_argument("name")
    return parser


@magics_class
class DistComp(Magics):
    """The ``%distcomp`` magics. Configure with ``%config DistComp.<setting> = value``."""

    default_timeout = Float(
        None,
        allow_none=True,
        config=True,
        help="Seconds a `%%distcomp run` cell may take before it ends and names the busy ranks "
        "(None: no limit).",
    )
    default_instance_count = Int(1, config=True, help="Nodes for a newly defined component.")
    default_process_count_per_node = Int(
        1, config=True, help="Processes per node for a newly defined component."
    )
    master_addr = Unicode("127.0.0.1", config=True, help="MASTER_ADDR given to local ranks.")
    show_widget = Bool(True, config=True, help="Show the run-settings panel below definitions.")
    prestart = Bool(
        True, config=True, help="Start ranks in the background as soon as a component is defined."
    )

    def __init__(self, shell=None, **kwargs: Any):
        super().__init__(shell=shell, **kwargs)
        self.components: dict[str, Any] = {}
        self._parser = _build_parser()

    # -- entry point --------------------------------------------------------------------
    @line_cell_magic
    def distcomp(self, line: str, cell: str | None = None):
        """Define a component from a YAML cell, or run a subcommand (see module docs)."""
        try:
            words = shlex.split(line)
        except ValueError as exc:
            raise UsageError(f"%distcomp: cannot parse the arguments {line!r}: {exc}") from None
        if not words:
            raise UsageError(
                "%%distcomp needs a component name (define: %%distcomp NAME) or a subcommand: "
                + ", ".join(SUBCOMMANDS)
            )
        try:
            if words[0] in SUBCOMMANDS or words[0] in ("-h", "--help"):
                args = self._parser.parse_args(words)
                return getattr(self, f"_handle_{args.subcommand}")(args, cell)
            if len(words) > 1:
                raise UsageError(
                    f"%%distcomp {line}: a definition takes one NAME, got {words!r}. "
                    f"Subcommands are: {', '.join(SUBCOMMANDS)}."
                )
            return self._handle_define(words[0], cell)
        except DistcompError as exc:
            # Shown as the message alone (IPython hides tracebacks only for UsageError).
            raise UsageError(str(exc)) from None

    # -- helpers ------------------------------------------------------------------------
    def component(self, name: str):
        try:
            return self.components[name]
        except KeyError:
            from .errors import did_you_mean

            known = ", ".join(sorted(self.components)) or "none yet"
            raise UsageError(
                f"No component named {name!r} in this notebook.{did_you_mean(name, self.components)}"
                f" Defined: {known}. Fix: run its `%%distcomp {name}` cell first."
            ) from None

    # -- definition ---------------------------------------------------------------------
    def _handle_define(self, name: str, cell: str | None):
        from .spec import carry_over_settings, load_component

        if not name.isidentifier():
            raise UsageError(
                f"%%distcomp {name}: NAME must be a Python identifier (it becomes a variable). "
                f"Fix: %%distcomp {name.replace('-', '_').replace('.', '_')}"
            )
        if cell is None or not cell.strip():
            raise UsageError(
                f"%%distcomp {name}: the cell body must hold the component's YAML spec. "
                f"Fix: put the spec below the `%%distcomp {name}` line."
            )
        component = load_component(cell, base_dir=Path.cwd(), source_name=f"%%distcomp {name}")
        previous = self.components.get(name)
        if previous is not None:
            carry_over_settings(previous, component)
        else:
            component.runsettings.resource_layout.configure(
                instance_count=self.default_instance_count,
                process_count_per_node=self.default_process_count_per_node,
            )
        self.components[name] = component
        self.shell.user_ns[name] = component
        self._after_define(name, component, previous)
        return None

    def _after_define(self, name: str, component: Any, previous: Any) -> None:
        """Display the component (and, once available, its panel); pre-start ranks."""
        from IPython.display import display

        display(component)

    # -- issue 2 ------------------------------------------------------------------------
    def _handle_env(self, args, cell):
        from IPython.display import display

        from .display import EnvTable

        component = self.component(args.name)
        component.runsettings.resource_layout.configure(
            instance_count=args.instance_count,
            process_count_per_node=args.process_count_per_node,
            worker_count=args.worker_count,
            parameter_server_count=args.parameter_server_count,
        )
        display(EnvTable(component, master_addr=self.master_addr))

    def _handle_list(self, args, cell):
        for name, component in self.components.items():
            print(f"{name}: {component!r}")

    # -- local ranks (issue 3) ----------------------------------------------------------
    def _handle_run(self, args, cell):
        raise UsageError("`%%distcomp run` is not available yet.")

    def _handle_command(self, args, cell):
        raise UsageError("`%distcomp command` is not available yet.")

    def _handle_status(self, args, cell):
        raise UsageError("`%distcomp status` is not available yet.")

    def _handle_stop(self, args, cell):
        raise UsageError("`%distcomp stop` is not available yet.")

    def _handle_restart(self, args, cell):
        raise UsageError("`%distcomp restart` is not available yet.")

    # -- Azure ML (issue 4) -------------------------------------------------------------
    def _handle_export(self, args, cell):
        raise UsageError("`%distcomp export` is not available yet.")

    def _handle_submit(self, args, cell):
        raise UsageError("`%distcomp submit` is not available yet.")

    # -- widget (issue 5) ---------------------------------------------------------------
    def _handle_widget(self, args, cell):
        raise UsageError("`%distcomp widget` is not available yet.")

    def shutdown(self) -> None:
        """Called on %unload_ext and at kernel exit: stop everything we started."""


__all__ = ["SUBCOMMANDS", "DistComp", "_key_values"]
