"""``%%distcomp`` and ``%distcomp``: thin wiring from arguments to the modules that do the work.

Forms::

    %%distcomp NAME            cell body = YAML spec; binds NAME in the notebook
    %%distcomp run NAME [--ranks 0,2-3] [--timeout S] [--group-output]
    %distcomp env NAME [--instance-count N] [--process-count-per-node P]
    %distcomp command NAME [--input k=v ...] [--output k=path ...] [--timeout S]
    %distcomp status [NAME] | stop [NAME] | restart NAME | interrupt NAME | list
    %distcomp connect NAME [--profile P] [--profile-dir D] [--cluster-id C] [--local]
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
from traitlets import Any as AnyTrait
from traitlets import Bool, Dict, Float, Int, Unicode

from .errors import DistcompError, RankError

SUBCOMMANDS = (
    "run",
    "env",
    "command",
    "status",
    "stop",
    "restart",
    "interrupt",
    "connect",
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
    command.add_argument(
        "--timeout", type=float, default=None, help="seconds before every rank is stopped"
    )

    status = sub.add_parser("status", help="state of each rank")
    status.add_argument("name", nargs="?")
    stop = sub.add_parser("stop", help="stop ranks (all components when NAME is omitted)")
    stop.add_argument("name", nargs="?")
    restart = sub.add_parser("restart", help="restart the ranks of NAME")
    restart.add_argument("name")
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
    cluster_profile = Unicode(
        None,
        allow_none=True,
        config=True,
        help="Run ranks on the engines of your own ipyparallel cluster with this profile "
        "(e.g. SSH or Slurm engines) instead of local mpiexec. Per component: %distcomp connect.",
    )
    cluster_id = Unicode(
        None, allow_none=True, config=True, help="Cluster id of your own cluster (with a profile)."
    )
    # -- Azure ML defaults for `%distcomp submit` / `export` (flags win over these) ------------
    subscription_id = Unicode(None, allow_none=True, config=True, help="Azure subscription id.")
    resource_group = Unicode(None, allow_none=True, config=True, help="Azure resource group.")
    workspace_name = Unicode(None, allow_none=True, config=True, help="Azure ML workspace name.")
    workspace_config = Unicode(
        None, allow_none=True, config=True, help="Path of a workspace config.json (or its folder)."
    )
    compute = Unicode(None, allow_none=True, config=True, help="Default Azure ML compute target.")
    experiment_name = Unicode(
        None, allow_none=True, config=True, help="Experiment of submitted jobs (default: spec)."
    )
    credential = AnyTrait(
        None, config=True, help="A TokenCredential for Azure (default: DefaultAzureCredential)."
    )
    client_kwargs = Dict(
        config=True, help="Extra MLClient keyword arguments (retry_total, transport, ...)."
    )
    poll_interval = Float(10.0, config=True, help="Seconds between status checks of --wait.")

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
        except RankError:
            raise  # its _render_traceback_ shows each failing rank's traceback
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
            component = carry_over_settings(previous, component)
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
        """Display the component and, in a kernel, its run-settings panel; pre-start ranks."""
        from IPython.display import display

        display(component)
        if self.show_widget and getattr(self.shell, "kernel", None) is not None:
            # a terminal has the summary above; nbconvert gets the panel's text fallback
            display(self._panel(name, component))
        if self.prestart and getattr(self.shell, "kernel", None) is not None:
            # in a notebook the first `%%distcomp run` then rarely waits for ranks
            self._rank_backend().prestart(name, component)

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
    def _rank_backend(self):
        """The kernel's rank backend, told the current %config settings."""
        from .ranks import Connection, get_backend

        backend = get_backend()
        backend.master_addr = self.master_addr
        backend.default_connection = Connection(
            profile=self.cluster_profile or None, cluster_id=self.cluster_id or None
        )
        return backend

    def _handle_run(self, args, cell):
        if cell is None or not cell.strip():
            raise UsageError(
                f"%%distcomp run {args.name}: put the Python code to run on the ranks below "
                "this line (it is a cell magic)."
            )
        component = self.component(args.name)
        timeout = args.timeout if args.timeout is not None else self.default_timeout
        self._rank_backend().run_cell(
            args.name,
            component,
            cell,
            ranks=args.ranks,
            timeout=timeout,
            group_output=args.group_output,
        )

    def _handle_command(self, args, cell):
        """Run the spec's command on local ranks (see ranks/command.py); output streams."""
        from .command import run_command
        from .errors import RankError

        component = self.component(args.name)
        try:
            return run_command(
                component,
                inputs=_key_values(args.inputs, "--input"),
                outputs=_key_values(args.outputs, "--output"),
                timeout=args.timeout,
                master_addr=self.master_addr,
            )
        except KeyboardInterrupt:
            raise RankError(
                f"`%distcomp command {args.name}` interrupted: every rank was stopped."
            ) from None

    def _handle_status(self, args, cell):
        from IPython.display import display

        from .ranks.status import StatusTable

        if args.name is not None:
            self.component(args.name)
        display(StatusTable(self._rank_backend().status(args.name)))

    def _handle_stop(self, args, cell):
        if args.name is not None:
            self.component(args.name)
        stopped = self._rank_backend().stop(args.name)
        print(f"Stopped the ranks of {', '.join(stopped)}." if stopped else "No ranks running.")

    def _handle_restart(self, args, cell):
        world = self._rank_backend().restart(args.name, self.component(args.name))
        print(f"Restarted {args.name}: {world.describe_layout()}.")

    def _handle_interrupt(self, args, cell):
        from .ranges import format_ranks

        self.component(args.name)
        sent = self._rank_backend().interrupt(args.name)
        print(f"Sent SIGINT to {format_ranks(sent)} of {args.name}." if sent else "No busy rank.")

    def _handle_connect(self, args, cell):
        from .ranks import Connection

        self.component(args.name)
        connection = Connection(args.profile, args.profile_dir, args.cluster_id)
        if args.local or connection.embedded:
            self._rank_backend().connect(args.name, None)
            print(f"{args.name} runs on local mpiexec ranks.")
            return
        self._rank_backend().connect(args.name, connection)
        print(f"{args.name} runs on {connection.describe()} from its next run.")

    # -- Azure ML (issue 4) -------------------------------------------------------------
    def _handle_export(self, args, cell):
        """Write the v2 job (or component) YAML; azure-ai-ml is imported only now."""
        from .azureml import export

        component = self.component(args.name)
        job_args = {}
        if not args.component:
            job_args = {"compute": args.compute or component.runsettings.compute or self.compute}
            job_args["experiment_name"] = self.experiment_name
        elif args.compute:
            job_args["compute"] = args.compute
        path = export(
            component,
            args.path,
            component_form=args.component,
            inputs=_key_values(args.inputs, "--input"),
            outputs=_key_values(args.outputs, "--output"),
            **job_args,
        )
        kind = "component" if args.component else "job"
        print(f"Wrote the Azure ML {kind} of '{args.name}' to {path}")
        print(f"Create it with: az ml {kind} create -f {path}")

    def _ml_client(self, args):
        from .azureml import make_ml_client

        flags = (args.subscription, args.resource_group, args.workspace)
        if args.workspace_config:
            names, config = flags, args.workspace_config
        else:
            defaults = (self.subscription_id, self.resource_group, self.workspace_name)
            names = tuple(f or d for f, d in zip(flags, defaults, strict=True))
            config = None if all(names) else self.workspace_config
        return make_ml_client(
            workspace_config=config,
            subscription_id=names[0],
            resource_group=names[1],
            workspace_name=names[2],
            credential=self.credential,
            **self.client_kwargs,
        )

    def _handle_submit(self, args, cell):
        """Submit with MLClient, show name / status / studio link; --wait streams the status."""
        import time

        from IPython.display import display

        from .azureml import submit, wait_for_job
        from .azureml.summary import JobSummary
        from .errors import AzureMLError

        component = self.component(args.name)
        ml_client = self._ml_client(args)
        job = submit(
            component,
            ml_client,
            inputs=_key_values(args.inputs, "--input"),
            outputs=_key_values(args.outputs, "--output"),
            compute=args.compute or component.runsettings.compute or self.compute,
            experiment_name=args.experiment or self.experiment_name,
        )
        self.last_job = job
        display(JobSummary(job, spec_name=args.name))
        if not args.wait:
            return

        def show(old: str, new: str) -> None:
            stamp = time.strftime("%H:%M:%S")
            print(f"{stamp}  {job.name}: {old or 'submitted'} -> {new}", flush=True)

        try:
            final = wait_for_job(
                ml_client, job.name, on_status=show, poll_interval=self.poll_interval, first=job
            )
        except KeyboardInterrupt:
            print(f"Stopped waiting; job {job.name} keeps running on Azure ML: {job.studio_url}")
            return
        self.last_job = final
        status = JobSummary(final).status
        if status != "Completed":
            raise AzureMLError(
                f"job {job.name} ended {status}. Its logs are in Azure ML studio: "
                f"{final.studio_url or job.studio_url}"
            )
        print(f"Job {job.name} completed: {final.studio_url or job.studio_url}")

    # -- widget (issue 5) ---------------------------------------------------------------
    def _handle_widget(self, args, cell):
        from IPython.display import display

        display(self._panel(args.name, self.component(args.name)))

    def _panel(self, name: str, component: Any):
        """The component's panel (widgets/), its actions going where the magics' go."""
        from .widgets import panel_for

        no_flags = argparse.Namespace(
            workspace_config=None, subscription=None, resource_group=None, workspace=None
        )
        return panel_for(
            name,
            component,
            master_addr=lambda: self.master_addr,
            backend=self._rank_backend,
            ml_client=lambda: self._ml_client(no_flags),
            default_compute=lambda: self.compute,
            experiment_name=lambda: self.experiment_name,
        )

    def shutdown(self) -> None:
        """Called on %unload_ext and at kernel exit: stop everything we started."""
        import sys

        ranks = sys.modules.get("jupyter_distcomp.ranks.backend")
        if ranks is not None and ranks._backend is not None:
            ranks._backend.shutdown()


__all__ = ["SUBCOMMANDS", "DistComp", "_key_values"]
