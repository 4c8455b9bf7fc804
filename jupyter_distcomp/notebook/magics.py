"""``%%distcomp`` and ``%distcomp``: thin wiring from arguments to the modules that do the work.

Forms::

    %%distcomp NAME            cell body = YAML spec; binds NAME in the notebook
    %%distcomp run NAME [--ranks 0,2-3] [--timeout S] [--group-output] [--background]
                                  [--debug-ranks 0,2] [--check-collectives]
    %distcomp wait NAME [--timeout S] | where NAME [--ranks ...]
    %distcomp collectives NAME [--last N]
    %distcomp compare NAME EXPR [--ranks ...] [--rtol X] [--timeout S]
    %distcomp debug NAME [--rank R]
    %distcomp env NAME [--instance-count N] [--process-count-per-node P]   (flags: a preview)
    %distcomp layout NAME [--instance-count N] [--process-count-per-node P]
    %distcomp command NAME [--input k=v ...] [--output k=path ...] [--timeout S] [--background]
    %distcomp status [NAME] | stop [NAME] | interrupt NAME
    %distcomp restart NAME [--hosts H] [--replay [--yes] [--dry-run] [--skip 2] [--only 1-3]]
    %distcomp replay NAME [--clear]
    %distcomp list
    %distcomp connect NAME [--profile P] [--profile-dir D] [--cluster-id C] [--local]
    %distcomp export NAME PATH [--component] [--input k=v ...]
    %distcomp submit NAME --compute TARGET [--wait | --follow] [--interactive jupyterlab,vscode,ssh]
        [--no-preflight] [--no-environment] [--diagnose | --no-diagnose] [...]
    %distcomp follow [JOB] [--workspace W --resource-group G --subscription S | --workspace-config F]
    %distcomp widget NAME
    %distcomp diagnose [JOB | FOLDER] [--process-count-per-node P] [--status S] [workspace flags]

The work is done by the shell's :class:`~.session.Session`; this module parses the arguments
and displays the results (``views/``). Our own errors reach the cell as they are (a
SpecError keeps its line and key), shown as their message alone; anything else is wrapped
in an InternalError, so no frame of this package shows. Settings: ``%config
DistComp.default_timeout = 120`` (local ranks) and ``%config AzureML.compute = "cpu"``
(Azure ML), see config.py.
"""

from __future__ import annotations

import argparse
import copy
import math
import re
import shlex
from typing import TYPE_CHECKING, Any, NoReturn

from IPython.core.error import UsageError
from IPython.core.magic import Magics, line_cell_magic, magics_class, no_var_expand

from ..contracts import SUBCOMMANDS
from ..core.secrets import mask_secrets
from ..errors import DistcompError, InternalError, RankError, RankInterrupt

if TYPE_CHECKING:
    from .session import Session


class _Help(Exception):
    """``--help`` was asked for: the help text, printed as the cell's output."""


class _Parser(argparse.ArgumentParser):
    """argparse that raises a UsageError (shown without a traceback) instead of exiting,
    and hands ``--help`` back as text to print."""

    def print_help(self, file: Any = None) -> NoReturn:
        raise _Help(self.format_help())

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{self.prog}: {message}\n{self.format_usage().strip()}")

    def exit(self, status: int = 0, message: str | None = None) -> NoReturn:
        if message:
            raise UsageError(message)
        raise UsageError(self.format_help())


def key_values(pairs: list[str] | None, flag: str) -> dict[str, str]:
    """``["lr=0.1", ...]`` of a repeated ``--input`` or ``--output`` flag as a dict."""
    result: dict[str, str] = {}
    for pair in pairs or []:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise UsageError(f"{flag} expects NAME=VALUE, got {pair!r}. Fix: {flag} lr=0.1")
        result[key.strip()] = value
    return result


def _build_parser() -> _Parser:
    parser = _Parser(
        prog="%distcomp",
        description="%%distcomp NAME defines a component from the YAML spec below it; the "
        "subcommands work with it. `%distcomp SUBCOMMAND --help` tells more.",
    )
    sub = parser.add_subparsers(dest="subcommand", parser_class=_Parser)

    run = sub.add_parser("run", help="run the cell on every rank (or --ranks) of NAME")
    run.add_argument("name")
    run.add_argument("--ranks", default=None, help="ranks to run on, e.g. 0,2-3 (default: all)")
    run.add_argument("--timeout", type=float, default=None, help="seconds before the cell ends")
    run.add_argument(
        "--group-output", action="store_true", help="show output grouped by rank, in rank order"
    )
    run.add_argument("--background", action="store_true", help="return at once; see `wait`")
    run.add_argument(
        "--debug-ranks",
        default=None,
        help="ranks whose breakpoint() stops, e.g. 0,2 (default: all)",
    )
    run.add_argument(
        "--check-collectives",
        action="store_true",
        help="compare each collective across ranks before it runs; raise where they differ",
    )
    run.add_argument(
        "--job",
        default=None,
        metavar="JOB",
        help="run on the ranks of Azure ML job JOB (submitted with --debug --cells; attached "
        "on first use)",
    )
    wait = sub.add_parser("wait", help="wait for the background cell of NAME, raise its error")
    wait.add_argument("name")
    wait.add_argument("--timeout", type=float, default=None, help="seconds to wait at most")
    where = sub.add_parser("where", help="each rank's current stack, identical ones once")
    where.add_argument("name")
    where.add_argument("--ranks", default=None, help="ranks to show, e.g. 0,2-3 (default: all)")
    collectives = sub.add_parser(
        "collectives", help="each group's recent collectives, aligned across ranks"
    )
    collectives.add_argument("name")
    collectives.add_argument(
        "--last", type=int, default=10, help="sequence numbers per group (default: 10)"
    )
    compare = sub.add_parser("compare", help="evaluate EXPR on each rank, group equal values")
    compare.add_argument("name")
    compare.add_argument("expr", help="a Python expression: everything after NAME")
    compare.add_argument("--ranks", default=None, help="ranks to compare (default: all)")
    compare.add_argument("--rtol", type=float, default=None, help="relative tolerance")
    compare.add_argument(
        "--timeout", type=float, default=None, help="seconds the evaluation may take (60)"
    )
    debug = sub.add_parser("debug", help="post-mortem pdb on a rank whose last cell failed")
    debug.add_argument("name")
    debug.add_argument("--rank", type=int, default=None, help="default: the lowest failed rank")

    env = sub.add_parser(
        "env", help="table of the variables each rank sees (layout flags: a preview only)"
    )
    layout = sub.add_parser("layout", help="set the layout of NAME, then show its env table")
    for flags in (env, layout):
        flags.add_argument("name")
        flags.add_argument("--instance-count", "--node-count", type=int, dest="instance_count")
        flags.add_argument("--process-count-per-node", type=int, dest="process_count_per_node")
        flags.add_argument("--worker-count", type=int, dest="worker_count")
        flags.add_argument("--parameter-server-count", type=int, dest="parameter_server_count")

    command = sub.add_parser("command", help="run the spec's command on every rank")
    command.add_argument("name")
    command.add_argument("--input", action="append", dest="inputs", metavar="NAME=VALUE")
    command.add_argument("--output", action="append", dest="outputs", metavar="NAME=PATH")
    command.add_argument(
        "--timeout", type=float, default=None, help="seconds before every rank is stopped"
    )
    command.add_argument("--background", action="store_true", help="return at once; see `wait`")

    status = sub.add_parser("status", help="state of each rank")
    status.add_argument("name", nargs="?")
    stop = sub.add_parser(
        "stop",
        help="stop ranks (all components when NAME is omitted); an attached job's name: end "
        "the job whose ranks run cells (--cells)",
    )
    stop.add_argument("name", nargs="?")
    restart = sub.add_parser("restart", help="restart the ranks of NAME")
    restart.add_argument("name")
    restart.add_argument(
        "--hosts", default=None, help='node i on host i: "node0,node1", a hostfile, or "local"'
    )
    restart.add_argument(
        "--replay",
        action="store_true",
        help="list the run cells that succeeded, ask, then re-run them in order",
    )
    restart.add_argument("--yes", action="store_true", help="replay without asking")
    restart.add_argument(
        "--dry-run", action="store_true", dest="dry_run", help="list what --replay runs; no restart"
    )
    restart.add_argument("--skip", default=None, metavar="2,4-5", help="cells left out of --replay")
    restart.add_argument("--only", default=None, metavar="1-3", help="the cells --replay runs")
    replay = sub.add_parser("replay", help="list the cells `restart NAME --replay` runs")
    replay.add_argument("name")
    replay.add_argument("--clear", action="store_true", help="empty the log of NAME")
    interrupt = sub.add_parser("interrupt", help="send SIGINT to the busy ranks of NAME")
    interrupt.add_argument("name")
    connect = sub.add_parser("connect", help="run NAME on your own ipyparallel cluster")
    connect.add_argument("name")
    connect.add_argument("--profile", default=None, help="IPython profile of the cluster")
    connect.add_argument("--profile-dir", default=None, dest="profile_dir")
    connect.add_argument("--cluster-id", default=None, dest="cluster_id")
    connect.add_argument("--local", action="store_true", help="back to local mpiexec ranks")
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
    submit.add_argument(
        "--follow", action="store_true", help="then show every rank's output as the job runs"
    )
    submit.add_argument(
        "--interactive",
        nargs="?",
        const="jupyterlab,vscode,ssh",
        default=None,
        metavar="jupyterlab,vscode,ssh",
        help="add Azure ML's interactive services to every node (default: all three)",
    )
    submit.add_argument("--ssh-key", default=None, dest="ssh_key", metavar="PUBLIC_KEY_FILE")
    submit.add_argument(
        "--no-preflight",
        action="store_false",
        dest="preflight",
        default=None,
        help="skip checking the layout against the compute (max nodes, GPUs per node)",
    )
    submit.add_argument(
        "--no-environment",
        action="store_true",
        dest="no_environment",
        help="submit a spec without `environment:` in Azure ML's base image, without asking",
    )
    submit.add_argument(
        "--diagnose",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="each rank writes where it is into its log on a stall, SIGTERM or a failure "
        "(default: %%config AzureML.diagnose)",
    )
    submit.add_argument(
        "--debug",
        action="store_true",
        help="the notebook can attach to the running job (`attach`): the SSH service on every "
        "node, and breakpoint() waits for the notebook",
    )
    submit.add_argument(
        "--cells",
        action="store_true",
        help="with --debug: the job's ranks run the notebook's cells instead of the spec's "
        "command (`%%%%distcomp run NAME --job JOB`), until `%%distcomp stop JOB` or the idle "
        "limit",
    )
    submit.add_argument(
        "--idle-limit",
        type=float,
        default=None,
        dest="idle_limit",
        metavar="MINUTES",
        help="with --debug: minutes a breakpoint() waits for a notebook, then the rank runs on; "
        "with --cells, minutes without a cell before the job ends (default: %%config "
        "AzureML.idle_limit)",
    )

    attach = sub.add_parser(
        "attach",
        help="reach the ranks of a running job submitted with --debug, through its nodes' SSH "
        "service: breakpoint() stops at the prompt here",
    )
    attach.add_argument(
        "name",
        metavar="JOB",
        nargs="?",
        default=None,
        help="the job's name (default: the job submitted last in this kernel)",
    )
    attach.add_argument(
        "--timeout", type=float, default=600.0, help="seconds to wait for the job to run"
    )
    for flag in ("--workspace-config", "--subscription", "--resource-group", "--workspace"):
        attach.add_argument(flag, default=None)
    detach = sub.add_parser("detach", help="leave an attached job; it keeps running")
    detach.add_argument("name", metavar="JOB", nargs="?", default=None)

    follow = sub.add_parser(
        "follow", help="every rank's output of an Azure ML job, labelled, until it ends"
    )
    follow.add_argument(
        "name",
        metavar="JOB",
        nargs="?",
        default=None,
        help="the Azure ML job's name (default: the job submitted last in this kernel)",
    )
    for flag in ("--workspace-config", "--subscription", "--resource-group", "--workspace"):
        follow.add_argument(flag, default=None)

    widget = sub.add_parser("widget", help="show the run-settings panel of NAME")
    widget.add_argument("name")

    diagnose = sub.add_parser(
        "diagnose",
        help="what ended a job (or holds it up), from every rank's log: an Azure ML job's "
        "name, or the folder it was downloaded to (az ml job download --all)",
    )
    diagnose.add_argument(
        "target",
        metavar="JOB|FOLDER",
        nargs="?",
        default=None,
        help="an Azure ML job's name, or the folder its logs were downloaded to (default: "
        "the job submitted last in this kernel)",
    )
    for flag in ("--workspace-config", "--subscription", "--resource-group", "--workspace"):
        diagnose.add_argument(flag, default=None)
    diagnose.add_argument(
        "--process-count-per-node",
        type=int,
        default=None,
        dest="process_count_per_node",
        help="processes per node, to name each rank's node (default: read from the logs)",
    )
    diagnose.add_argument(
        "--status",
        choices=["Completed", "Failed", "Canceled"],
        default=None,
        help="the job's final status, when the folder does not say",
    )
    return parser


PARSED_KEPT = 256  # subcommand lines whose parsed arguments are remembered
_COMPARE_OPTION = re.compile(r"(?:^|\s+)--(ranks|rtol|timeout)(?:=|\s+)(\S+)\s*$")
_LEADING_OPTION = re.compile(r"^--(ranks|rtol|timeout)(?:=|\s+)(\S+)\s+")


def compare_arguments(line: str) -> argparse.Namespace:
    """``compare NAME EXPR [--ranks R] [--rtol X] [--timeout S]``: everything after NAME but the options
    at either end is EXPR, spaces and quotes as typed (one pair of outer quotes dropped)."""
    rest = line.strip()[len("compare") :].strip()
    options: dict[str, str | None] = {"ranks": None, "rtol": None, "timeout": None}
    while match := _LEADING_OPTION.match(rest):
        options[match[1]], rest = match[2], rest[match.end() :]
    while match := _COMPARE_OPTION.search(rest):
        options[match[1]], rest = match[2], rest[: match.start()]
    name, _, expr = rest.partition(" ")
    expr = expr.strip()
    if len(expr) >= 2 and expr[0] == expr[-1] and expr[0] in "'\"" and expr[0] not in expr[1:-1]:
        expr = expr[1:-1]
    if not name or not expr:
        raise UsageError(
            f"%distcomp {line.strip()}: compare needs a NAME and an expression. "
            "Fix: %distcomp compare NAME EXPR, e.g. %distcomp compare ddp model.state_dict()"
        )
    numbers: dict[str, float | None] = {}
    for option, example in (("rtol", "1e-6"), ("timeout", "120")):
        text = options[option]
        try:
            numbers[option] = None if text is None else float(text)
        except ValueError:
            raise UsageError(
                f"%distcomp compare: --{option} {text!r} is not a number. Fix: --{option} {example}"
            ) from None
    return check_numbers(
        argparse.Namespace(
            subcommand="compare", name=name, expr=expr, ranks=options["ranks"], **numbers
        )
    )


#: each number argument: (what it must be, whether it holds, an example)
_NUMBERS: dict[str, tuple[str, Any, str]] = {
    "timeout": ("a number of seconds above 0", lambda v: math.isfinite(v) and v > 0, "120"),
    "rtol": ("a relative tolerance of 0 or more", lambda v: math.isfinite(v) and v >= 0, "1e-6"),
    "rank": ("a rank of 0 or more", lambda v: v >= 0, "0"),
    "last": ("a count of 1 or more", lambda v: v >= 1, "10"),
    "instance_count": ("a count of 1 or more", lambda v: v >= 1, "2"),
    "process_count_per_node": ("a count of 1 or more", lambda v: v >= 1, "2"),
    "worker_count": ("a count of 1 or more", lambda v: v >= 1, "2"),
    "parameter_server_count": ("a count of 0 or more", lambda v: v >= 0, "1"),
}


def check_numbers(args: argparse.Namespace) -> argparse.Namespace:
    """``args``, once each number in it is one a person would mean (no negative, NaN or
    infinite time-out, say); a UsageError naming the range and an example otherwise."""
    for dest, (meaning, holds, example) in _NUMBERS.items():
        value = getattr(args, dest, None)
        if value is not None and not holds(value):
            flag = "--" + dest.replace("_", "-")
            raise UsageError(
                f"%distcomp {args.subcommand}: {flag} {value:g}: give {meaning}, "
                f"e.g. {flag} {example}."
            )
    return args


@magics_class
class DistCompMagics(Magics):
    """The ``%distcomp`` magics of one shell, acting through its session."""

    def __init__(self, shell: Any, session: Session, **kwargs: Any):
        super().__init__(shell=shell, **kwargs)
        self.session = session
        self._parser = _build_parser()
        #: the arguments of each subcommand line parsed so far (a line parses the same way
        #: each time; a cell run again need not parse it again)
        self._parsed: dict[tuple[str, ...], argparse.Namespace] = {}

    @line_cell_magic
    @no_var_expand  # `{x}` and `$x` stay as written: values never leak in unasked
    def distcomp(self, line: str, cell: str | None = None) -> None:
        """Define a component from a YAML cell, or run a subcommand (see module docs)."""
        # compare's expression is the rest of the line as typed, not shell words
        compare = line.split(None, 1)[:1] == ["compare"] and not {"-h", "--help"} & set(
            line.split()
        )
        words: list[str] = []
        if not compare:
            try:
                words = shlex.split(line)
            except ValueError as exc:
                raise UsageError(f"%distcomp: cannot parse the arguments {line!r}: {exc}") from None
            if not words:
                raise UsageError(
                    "%%distcomp needs a component name (define: %%distcomp NAME) or a "
                    "subcommand: " + ", ".join(SUBCOMMANDS)
                )
        try:
            if compare:
                self._handle_compare(compare_arguments(line), cell)
                return
            if words[0] in SUBCOMMANDS or words[0] in ("-h", "--help"):
                args = self._parse(words)
                getattr(self, f"_handle_{args.subcommand}")(args, cell)
                return
            if len(words) > 1:
                raise UsageError(
                    f"%%distcomp {line}: a definition takes one NAME, got {words!r}. "
                    f"Subcommands are: {', '.join(SUBCOMMANDS)}."
                )
            self._handle_define(words[0], cell)
        except _Help as shown:
            print(shown.args[0].rstrip())
        except (DistcompError, UsageError) as exc:
            _mask_message(exc)
            raise  # shown by their _render_traceback_: the message, no frame of ours
        except KeyboardInterrupt:
            raise RankInterrupt(f"%distcomp {line}: interrupted.") from None
        except Exception as exc:  # the package's own frames are no help to the user
            raise InternalError(exc) from exc

    def _parse(self, words: list[str]) -> argparse.Namespace:
        """The subcommand's arguments (a copy: a handler may change them)."""
        key = tuple(words)
        parsed = self._parsed.get(key)
        if parsed is None:
            parsed = self._parser.parse_args(words)
            check_numbers(parsed)
            if len(self._parsed) < PARSED_KEPT:
                self._parsed[key] = parsed
        return copy.deepcopy(parsed)

    # -- definition ---------------------------------------------------------------------
    def _handle_define(self, name: str, cell: str | None) -> None:
        from IPython.display import display

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
        from .views.live import show_summary

        session = self.session
        component = session.define(name, cell, first_line=2)  # below the `%%distcomp` line
        show_summary(component, live=session.in_kernel)
        if session.in_kernel:
            # a terminal has the summary above; nbconvert gets the panel's text fallback
            if session.local.show_widget:
                display(session.panel(name))
            if session.prestart_likely(name):  # the next `%%distcomp run` then rarely waits
                session.prestart(name)

    def _handle_env(self, args: argparse.Namespace, cell: str | None) -> None:
        from IPython.display import display

        display(
            self.session.env_table(
                args.name,
                instance_count=args.instance_count,
                process_count_per_node=args.process_count_per_node,
                worker_count=args.worker_count,
                parameter_server_count=args.parameter_server_count,
            )
        )

    def _handle_layout(self, args: argparse.Namespace, cell: str | None) -> None:
        from IPython.display import display

        self.session.component(args.name).runsettings.resource_layout.configure(
            instance_count=args.instance_count,
            process_count_per_node=args.process_count_per_node,
            worker_count=args.worker_count,
            parameter_server_count=args.parameter_server_count,
        )
        display(self.session.env_table(args.name))

    def _handle_list(self, args: argparse.Namespace, cell: str | None) -> None:
        from .views.component import component_line

        for name, component in self.session.components.items():
            print(f"{name}: {component_line(component)}")

    def _handle_widget(self, args: argparse.Namespace, cell: str | None) -> None:
        from IPython.display import display

        display(self.session.panel(args.name))

    # -- local ranks --------------------------------------------------------------------
    def _handle_run(self, args: argparse.Namespace, cell: str | None) -> None:
        if cell is None or not cell.strip():
            raise UsageError(
                f"%%distcomp run {args.name}: put the Python code to run on the ranks below "
                "this line (it is a cell magic)."
            )
        from ..local.ranks.options import CellOptions

        options = CellOptions(
            ranks=args.ranks,
            timeout=args.timeout,
            group_output=args.group_output,
            first_line=2,  # below the `%%distcomp run` line
            background=args.background,
            debug_ranks=args.debug_ranks,
            check_collectives=args.check_collectives,
        )
        if args.job:
            from .attached import attached_text

            def attached(job: Any) -> None:
                seconds = self.session.attached.seconds[job.name]
                print(attached_text(job, seconds, cells=True), flush=True)

            self.session.run_job_cell(args.name, args.job, cell, options, attached)
            return
        started = self.session.run_cell(args.name, cell, options)
        if args.background:
            _say_background(started)

    def _handle_debug(self, args: argparse.Namespace, cell: str | None) -> None:
        self.session.debug(args.name, args.rank)

    def _handle_command(self, args: argparse.Namespace, cell: str | None) -> None:
        """Run the spec's command on local ranks; its output streams."""
        self.session.component(args.name)
        inputs = key_values(args.inputs, "--input")
        outputs = key_values(args.outputs, "--output")
        if args.background:
            _say_background(
                self.session.command_in_background(args.name, inputs, outputs, args.timeout)
            )
            return
        try:
            self.session.run_command(
                args.name,
                inputs=inputs,
                outputs=outputs,
                timeout=args.timeout,
            )
        except KeyboardInterrupt:
            raise RankError(
                f"`%distcomp command {args.name}` interrupted: every rank was stopped."
            ) from None

    def _handle_status(self, args: argparse.Namespace, cell: str | None) -> None:
        from IPython.display import display

        if self.session._is_attached(args.name):
            print("\n".join(self.session.attached.describe(args.name)))
            return

        from .views.status import StatusTable

        records = self.session.status(args.name)
        display(StatusTable(records, self.session.pending_changes(args.name)))
        for line in self.session.background(args.name):
            print(line)

    def _handle_wait(self, args: argparse.Namespace, cell: str | None) -> None:
        if self.session._is_attached(args.name):
            job = self.session.attached.get(args.name)
            try:
                why = job.wait(args.timeout, self.session.attached.ended(args.name))
            except KeyboardInterrupt:
                print(f"Stopped waiting; job {args.name} keeps running, still attached.")
                return
            print(f"{args.name}: {why}.")
            return
        try:
            cell_run = self.session.wait_background(args.name, args.timeout)
        except KeyboardInterrupt:
            print(
                f"Stopped waiting; the background job of {args.name} keeps running "
                f"(`%distcomp interrupt {args.name}` stops it)."
            )
            return
        print(f"{args.name}: the {cell_run.what} finished ({cell_run.seconds:.1f} s).")

    def _handle_where(self, args: argparse.Namespace, cell: str | None) -> None:
        print(self.session.where(args.name, args.ranks).text())

    def _handle_collectives(self, args: argparse.Namespace, cell: str | None) -> None:
        print(self.session.collectives(args.name, args.last).text())

    def _handle_compare(self, args: argparse.Namespace, cell: str | None) -> None:
        table = self.session.compare(args.name, args.expr, args.ranks, args.rtol, args.timeout)
        print(table.text())

    def _handle_stop(self, args: argparse.Namespace, cell: str | None) -> None:
        if self.session._is_attached(args.name):  # a job whose ranks run cells: it ends
            print(self.session.attached.end(args.name))
            return
        stopped = self.session.stop(args.name)
        if stopped:
            print(f"Stopped {'; '.join(stopped)}.")
        else:
            print(f"Nothing of {args.name} was running." if args.name else "No ranks running.")

    def _handle_restart(self, args: argparse.Namespace, cell: str | None) -> None:
        if not args.replay and (args.yes or args.dry_run or args.skip or args.only):
            raise UsageError(
                "--yes, --dry-run, --skip and --only go with --replay. "
                f"Fix: `%distcomp restart {args.name} --replay --dry-run`"
            )
        if args.replay:  # the list, the question, then each cell as it replays
            plan = self.session.replay_plan(args.name, args.skip, args.only)
            print(plan.text(), flush=True)
            if args.dry_run:
                print("Dry run: nothing was restarted or run.")
                return
            if plan.runs and not args.yes and not _confirm(args.name, len(plan.runs)):
                print(f"Not replayed: the ranks of {args.name} were left as they are.")
                return
            self.session.restart(args.name, hosts=args.hosts, replay=_announce, plan=plan)
            return
        cleared = len(self.session.replay_cells(args.name))  # fresh ranks, a fresh log
        world = self.session.restart(args.name, hosts=args.hosts)
        note = f" The replay log ({cleared} cell(s)) starts anew." if cleared else ""
        print(f"Restarted {args.name}: {world.describe_layout()}.{note}")

    def _handle_replay(self, args: argparse.Namespace, cell: str | None) -> None:
        if args.clear:
            count = self.session.clear_replay(args.name)
            print(f"Cleared the replay log of {args.name} ({count} cell(s)).")
            return
        print(self.session.replay_plan(args.name).text())

    def _handle_interrupt(self, args: argparse.Namespace, cell: str | None) -> None:
        print(self.session.interrupt_report(args.name))

    def _handle_connect(self, args: argparse.Namespace, cell: str | None) -> None:
        from ..local.ranks.connection import Connection

        connection = Connection(args.profile, args.profile_dir, args.cluster_id)
        if args.local or connection.embedded:
            self.session.connect(args.name, None)
            print(f"{args.name} runs on local mpiexec ranks.")
            return
        self.session.connect(args.name, connection)
        print(f"{args.name} runs on {connection.describe()} from its next run.")

    # -- Azure ML -----------------------------------------------------------------------
    def _handle_diagnose(self, args: argparse.Namespace, cell: str | None) -> None:
        """The verdict on a finished job, then the details (views/diagnosis.py)."""
        from IPython.display import display

        from ..azureml.diagnose import diagnose_folder
        from .views.diagnosis import DiagnosisView

        if args.target is None:
            args.target = self.session.job_name(None)
        if _names_a_job(args.target):
            from .session import Workspace

            if args.process_count_per_node is not None or args.status is not None:
                raise UsageError(
                    f"{args.target} names a job, whose layout and status Azure ML gives: "
                    "--process-count-per-node and --status are for a downloaded folder. "
                    f"Fix: `%distcomp diagnose {args.target}` alone."
                )

            workspace = Workspace(
                args.subscription, args.resource_group, args.workspace, args.workspace_config
            )
            facts, diagnosis = self.session.diagnose_job(args.target, workspace)
            if facts.final_status is None:
                title = (
                    f"job {facts.name} is {facts.status or 'not started'}: what its ranks' "
                    "logs say so far"
                )
            else:
                title = f"job {facts.name} ended {facts.status}: diagnosis of every rank's log"
            display(DiagnosisView(diagnosis, title))
            return
        diagnosis = diagnose_folder(args.target, args.process_count_per_node, args.status)
        display(DiagnosisView(diagnosis, f"{args.target}: diagnosis of the job's logs"))

    def _handle_export(self, args: argparse.Namespace, cell: str | None) -> None:
        """Write the v2 job (or component) YAML; azure-ai-ml is imported only now."""
        path = self.session.export(
            self.session.component(args.name),
            args.path,
            component_form=args.component,
            inputs=key_values(args.inputs, "--input"),
            outputs=key_values(args.outputs, "--output"),
            compute=args.compute,
        )
        from ..azureml.environment import default_image_note

        kind = "component" if args.component else "job"
        print(f"Wrote the Azure ML {kind} of '{args.name}' to {path}")
        note = default_image_note(self.session.component(args.name))
        if note:
            print(note)
        print(f"Create it with: az ml {kind} create -f {path}")

    def _handle_submit(self, args: argparse.Namespace, cell: str | None) -> None:
        """Submit, show name / status / studio link; --wait follows the status."""
        import time

        from IPython.display import display

        from ..azureml.interactive import parse_services, print_endpoints
        from .session import Workspace
        from .views.job import JobSummary

        interactive = parse_services(args.interactive)
        component = self.session.component(args.name)
        no_environment = args.no_environment or _submit_in_base_image(args.name, component)
        if no_environment is False:
            from ..azureml.environment import missing_environment

            print(f"Not submitted: {missing_environment(component, args.name)}")
            return
        submission = self.session.submit(
            component,
            inputs=key_values(args.inputs, "--input"),
            outputs=key_values(args.outputs, "--output"),
            compute=args.compute,
            experiment_name=args.experiment,
            workspace=Workspace(
                args.subscription, args.resource_group, args.workspace, args.workspace_config
            ),
            interactive=interactive,
            ssh_key=args.ssh_key,
            preflight=args.preflight,
            diagnose=args.diagnose,
            no_environment=bool(no_environment),
            debug=args.debug,
            idle_minutes=args.idle_limit,
            cells=args.cells,
        )
        job = submission.job
        display(JobSummary(job, spec_name=args.name))
        if args.debug:
            idle = (
                args.idle_limit if args.idle_limit is not None else self.session.azureml.idle_limit
            )
            if args.cells:
                print(
                    f"{job.name}: its ranks wait for the notebook's cells: `%%distcomp run "
                    f"{args.name} --job {job.name}` (the job ends at `%distcomp stop "
                    f"{job.name}`, or after {idle:g} min without a cell)."
                )
            else:
                print(
                    f"{job.name}: a breakpoint() in its ranks waits for `%distcomp attach "
                    f"{job.name}` (at most {idle:g} min, then the rank runs on)."
                )
        if args.follow:
            self.session.follow(job.name, ml_client=submission.ml_client)
            return
        if not args.wait:
            return

        def show(old: str, new: str) -> None:
            stamp = time.strftime("%H:%M:%S")
            print(f"{stamp}  {job.name}: {old or 'submitted'} -> {new}", flush=True)

        try:
            final = self.session.wait(submission, on_status=show, on_job=print_endpoints())
        except KeyboardInterrupt:
            print(f"Stopped waiting; job {job.name} keeps running on Azure ML: {job.studio_url}")
            return
        print(f"Job {job.name} completed: {final.studio_url or job.studio_url}")

    def _handle_attach(self, args: argparse.Namespace, cell: str | None) -> None:
        """Reach the job's ranks; serve those already waiting at a breakpoint."""
        import time

        from .attached import attached_text
        from .session import Workspace

        name = self.session.job_name(args.name)
        workspace = Workspace(
            args.subscription, args.resource_group, args.workspace, args.workspace_config
        )

        def status(new: str) -> None:
            print(f"{time.strftime('%H:%M:%S')}  {name}: {new}", flush=True)

        job = self.session.attach(name, workspace, args.timeout, status)
        if name in self.session.attached.cell_jobs:  # its ranks become engines now
            self.session.attached.cells(name)
            print(attached_text(job, self.session.attached.seconds[name], cells=True), flush=True)
            job.say_notices()
            return
        print(attached_text(job, self.session.attached.seconds[name]), flush=True)
        job.say_notices()
        try:
            job.serve_arrivals()
        except KeyboardInterrupt:
            print(f"Left the prompt; job {name} keeps running, still attached.")

    def _handle_detach(self, args: argparse.Namespace, cell: str | None) -> None:
        print(self.session.attached.detach(self.session.job_name(args.name)))

    def _handle_follow(self, args: argparse.Namespace, cell: str | None) -> None:
        """Every rank's output of an Azure ML job (any command job, ours or not)."""
        from .session import Workspace

        workspace = Workspace(
            args.subscription, args.resource_group, args.workspace, args.workspace_config
        )
        self.session.follow(self.session.job_name(args.name), workspace)


#: an Azure ML job's name: letters, digits, ``_`` and ``-`` (no path separator, no dot)
_JOB_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,254}")


def _names_a_job(target: str) -> bool:
    """``%distcomp diagnose TARGET``: an existing path is a folder of logs; a job's name is
    anything else that can be one."""
    from pathlib import Path

    return not Path(target).expanduser().exists() and _JOB_NAME.fullmatch(target) is not None


def _announce(text: str) -> None:
    print(text, flush=True)


def _confirm(name: str, count: int) -> bool:
    """Ask in the notebook (stdin) before a replay; a frontend without stdin is refused."""
    from ..local.debug.serve import read_line

    answer = read_line(f"Restart {name} and run these {count} cell(s) again? [y/N] ")
    if answer is None:
        raise UsageError(
            f"`restart {name} --replay` asks before it runs cells again, and this frontend "
            f"does not answer input() (stdin). Fix: `%distcomp restart {name} --replay --yes` "
            "after checking the list above."
        )
    return answer.strip().lower() in ("y", "yes")


def _submit_in_base_image(name: str, component: Any) -> bool | None:
    """A spec without `environment:`: whether to submit it in Azure ML's base image, asked in
    the notebook; None where the spec names one, or where this frontend cannot ask (the
    session then refuses, naming ``--no-environment``)."""
    from ..azureml.environment import base_image_words
    from ..local.debug.serve import read_line

    if component.environment is not None:
        return None
    answer = read_line(f"{base_image_words(name)} Submit it in that image all the same? [y/N] ")
    return None if answer is None else answer.strip().lower() in ("y", "yes")


def _say_background(cell: Any) -> None:
    print(
        f"{cell.name}: running in the background; output keeps arriving here. "
        f"`%distcomp wait {cell.name}` waits for it, `%distcomp where {cell.name}` shows where "
        "each rank is."
    )


__all__ = ["DistCompMagics", "check_numbers", "key_values"]


def _mask_message(exc: BaseException) -> None:
    """The error's message with every credential in it masked (a SAS URL a value holds)."""
    exc.args = tuple(mask_secrets(a) if isinstance(a, str) else a for a in exc.args)
    if isinstance(getattr(exc, "message", None), str):
        exc.message = mask_secrets(exc.message)  # type: ignore[attr-defined]
