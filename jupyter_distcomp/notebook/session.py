"""One ``Session`` per IPython shell: the components of the notebook, the rank backend, the
``%config`` settings and every operation the magics, the run-settings panel and the
JupyterLab ranks panel perform.

The magics parse arguments and display results; the panel and the comm call the same
methods, so a setting is resolved in one place (e.g. the compute target of a submission in
:meth:`Session.resolve_compute`, the workspace client in :meth:`Session.ml_client`).

Importing this module is cheap: the rank backend's module is imported when ranks are first
needed (ipyparallel only when they start), azure-ai-ml on the first export or submission,
ipywidgets with the first panel.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import AzureMLError, DistcompError, RankError
from .attached import AttachedJobs
from .config import AzureML, DistComp

if TYPE_CHECKING:
    from IPython.core.interactiveshell import InteractiveShell

    from ..core.model import Component
    from ..local.command import CommandResult
    from ..local.command.active import ActiveRun
    from ..local.inspect.compare import CompareTable
    from ..local.inspect.where import WhereReport
    from ..local.ranks.backend import RankBackend
    from ..local.ranks.background import BackgroundCell
    from ..local.ranks.connection import Connection
    from ..local.ranks.options import CellOptions
    from ..local.ranks.replay import Plan, Replayed
    from ..local.ranks.world import World
    from ..local.runs import Runs
    from ..machine.hosts import Placement
    from .comm import RanksChannel
    from .views.env import EnvTable
    from .widgets import RunSettingsPanel


@dataclass(frozen=True)
class Workspace:
    """Workspace flags of one submission; ``None`` fields fall back to the AzureML settings."""

    subscription_id: str | None = None
    resource_group: str | None = None
    workspace_name: str | None = None
    workspace_config: str | None = None


@dataclass
class Submission:
    """A submitted job and the client that follows it."""

    job: Any
    ml_client: Any


class Session:
    """The application service behind ``%distcomp``, the run-settings panel and the comm.

    ``shell`` is the IPython shell whose namespace receives defined components (``None``
    for a session used from plain Python, e.g. a panel made directly).
    """

    def __init__(
        self,
        shell: InteractiveShell | None = None,
        *,
        local: DistComp | None = None,
        azureml: AzureML | None = None,
    ) -> None:
        parent = shell if shell is not None and hasattr(shell, "config") else None
        self.shell = shell
        self.local = local if local is not None else DistComp(parent=parent)
        self.azureml = azureml if azureml is not None else AzureML(parent=parent)
        self.components: dict[str, Component] = {}
        self._backend: RankBackend | None = None
        self._channel: RanksChannel | None = None
        #: the components that ran `%%distcomp run` cells in this kernel
        self._ran: set[str] = set()
        #: the name of the Azure ML job submitted last in this kernel ('' before any)
        self.last_job = ""
        #: where the logs of the Azure ML jobs followed or diagnosed here are kept
        self._job_logs: str | None = None
        #: the Azure ML jobs attached in this kernel (`%distcomp attach JOB`)
        self.attached = AttachedJobs(self.azureml)

    # -- settings -----------------------------------------------------------------------
    @property
    def configurables(self) -> tuple[DistComp, AzureML]:
        return (self.local, self.azureml)

    @property
    def master_addr(self) -> str:
        return self.local.master_addr or "127.0.0.1"

    @property
    def placement(self) -> Placement:
        """Where the nodes run: ``DistComp.hosts`` (or its hostfile), reached by ssh."""
        from ..machine.hosts import Placement, check_hosts, read_hostfile

        hosts = self.local.hosts
        if hosts:
            clean = check_hosts(hosts)
        elif self.local.hostfile:
            clean = read_hostfile(self.local.hostfile)
        else:
            clean = []
        return Placement(tuple(clean), self.local.ssh_command or "ssh")

    @property
    def in_kernel(self) -> bool:
        return getattr(self.shell, "kernel", None) is not None

    # -- components ---------------------------------------------------------------------
    def define(
        self, name: str, spec: str, base_dir: Path | None = None, first_line: int = 1
    ) -> Component:
        """Load ``spec`` as component ``name``: a redefinition keeps the user's run settings,
        a new one gets the default layout; ``name`` is bound in the shell's namespace.

        ``first_line`` is the line of the cell where ``spec`` starts: errors and warnings
        count lines as the cell shows them. Warnings are not emitted but kept on the
        component (``component.warnings``), which its summary shows.
        """
        import warnings

        from ..core.spec_parsing import carry_over_settings, load_component
        from ..errors import SpecWarning

        with warnings.catch_warnings():
            warnings.simplefilter("ignore", SpecWarning)
            component = load_component(
                "#\n" * (first_line - 1) + spec,
                base_dir=base_dir or Path.cwd(),
                source_name=f"%%distcomp {name}",
            )
        previous = self.components.get(name)
        if previous is not None:
            component = carry_over_settings(previous, component)
        else:  # the defaults fill in what the spec's own layout (v2) leaves open
            defaults = {
                "instance_count": self.local.default_instance_count,
                "process_count_per_node": self.local.default_process_count_per_node,
            }
            component.runsettings.resource_layout.configure(**{**defaults, **component.spec_layout})
        self.components[name] = component
        if self.shell is not None:
            self.shell.user_ns[name] = component
        return component

    def handle(self, component: Component) -> str:
        """The notebook's name of ``component`` (``%%distcomp NAME``), else its spec's name."""
        for name, defined in self.components.items():
            if defined is component:
                return name
        return component.name

    def component(self, name: str) -> Component:
        """The component defined as ``name``; an error naming the close ones otherwise."""
        try:
            return self.components[name]
        except KeyError:
            from ..errors import did_you_mean

            known = ", ".join(sorted(self.components)) or "none yet"
            raise DistcompError(
                f"No component named {name!r} in this notebook.{did_you_mean(name, self.components)}"
                f" Defined: {known}. Fix: run its `%%distcomp {name}` cell first."
            ) from None

    def env_table(
        self,
        name: str,
        *,
        instance_count: int | None = None,
        process_count_per_node: int | None = None,
        worker_count: int | None = None,
        parameter_server_count: int | None = None,
    ) -> EnvTable:
        """The variables each rank of ``name`` sees. A layout given here is a preview: the
        settings and any running ranks stay as they are."""
        from dataclasses import replace

        from .views.env import EnvTable, files_text

        component = self.component(name)
        flags = {
            "instance_count": instance_count,
            "process_count_per_node": process_count_per_node,
            "worker_count": worker_count,
            "parameter_server_count": parameter_server_count,
        }
        if any(value is not None for value in flags.values()):
            settings = component.runsettings.copy()
            settings.resource_layout.configure(**flags)
            preview = replace(component, runsettings=settings)
            placement = self._placement_of(component)
            envs = placement.rank_environments(preview, self.master_addr, chosen_at_start=True)
            nodes = settings.resource_layout.instance_count
            files = files_text(nodes, self.local.node_local_files, placement.local)
            return EnvTable(preview, envs, preview_of=name, files=files)
        envs, held = self.rank_values(name, component)
        nodes = component.runsettings.resource_layout.instance_count
        files = files_text(nodes, self.local.node_local_files, self._placement_of(component).local)
        return EnvTable(component, envs, held=held, pending=self.pending(name), files=files)

    def pending(self, name: str) -> str | None:
        """What the next run of ``name`` changes, while its running ranks no longer match its
        settings (``core/summary.py`` ``pending_text``); None while they match or none run."""
        from ..local.ranks.backend import existing_backend

        component = self.component(name)
        backend = self._backend or existing_backend()
        if backend is None:
            return None
        backend.master_addr = self.master_addr
        backend.node_local_files = self.local.node_local_files
        return backend.pending(name, component)

    def rank_values(
        self, name: str, component: Component | None = None
    ) -> tuple[list[dict[str, str]], bool]:
        """(the variables of each rank, whether running ranks hold them): every view shows
        these. The ranks' own values while their layout is current; before that, the
        layout's, with ``PORT_AT_START`` for the ports each world chooses when it starts."""
        from ..local.ranks.backend import existing_backend

        component = component or self.component(name)
        backend = self._backend or existing_backend()
        if backend is not None:
            backend.master_addr = self.master_addr
            envs = backend.current_envs(name, component)
            if envs is not None:
                return envs, True
        placement = self._placement_of(component)
        envs = placement.rank_environments(component, self.master_addr, chosen_at_start=True)
        return envs, False

    def panel(self, name: str, component: Component | None = None) -> RunSettingsPanel:
        """The run-settings panel of ``name`` (one per component object), acting through
        this session."""
        from .widgets import panel_for

        return panel_for(name, component or self.component(name), self)

    # -- local ranks --------------------------------------------------------------------
    @property
    def backend(self) -> RankBackend:
        """The kernel's rank backend, told the current ``DistComp`` settings."""
        from ..local.ranks.backend import get_backend
        from ..local.ranks.connection import Connection
        from .views.progress import StartProgress

        if self._backend is None:
            self._backend = get_backend()
            kernel = self.in_kernel
            self._backend.progress = lambda name, total: StartProgress(name, total, kernel)
        self._backend.master_addr = self.master_addr
        self._backend.node_local_files = self.local.node_local_files
        self._backend.placement = self.placement
        self._backend.default_connection = Connection(
            profile=self.local.cluster_profile or None, cluster_id=self.local.cluster_id or None
        )
        return self._backend

    def prestart_likely(self, name: str) -> bool:
        """Whether the definition of ``name`` starts its ranks ahead (``DistComp.prestart``):
        "auto" only where a run cell is likely, as ``name`` ran cells before in this kernel."""
        mode = self.local.prestart
        if mode in (True, "always"):
            return True
        return mode == "auto" and name in self._ran

    def prestart(self, name: str) -> None:
        self.backend.prestart(name, self.component(name))

    def run_cell(
        self, name: str, code: str, options: CellOptions | None = None
    ) -> BackgroundCell | None:
        """Run ``code`` on the ranks of ``name`` as ``options`` say, the settings filling
        what they leave open: ``timeout`` defaults to the setting, ``check_collectives``
        (or the setting) compares each collective before it runs, and the fail-fast grace
        and hang notice are the settings'. With ``options.background``: return a running
        :class:`~jupyter_distcomp.local.ranks.background.BackgroundCell` at once."""
        component = self.component(name)
        self._ran.add(name)
        options = self._cell_options(options)
        return self.backend.run_cell(name, component, code, options, shell=self.shell)

    def _cell_options(self, options: CellOptions | None) -> CellOptions:
        """``options`` with what they leave open filled from the settings."""
        from dataclasses import replace

        from ..local.ranks.options import CellOptions

        options = options or CellOptions()
        return replace(
            options,
            timeout=options.timeout if options.timeout is not None else self.local.default_timeout,
            fail_fast=self.local.fail_fast_grace,
            check_collectives=options.check_collectives or self.local.check_collectives,
            hang_notice=self.local.hang_notice,
        )

    def run_job_cell(
        self,
        name: str,
        job: str,
        code: str,
        options: CellOptions | None = None,
        on_attach: Callable[[Any], None] | None = None,
    ) -> None:
        """Run ``code`` on the ranks of Azure ML job ``job`` (submitted with ``--debug
        --cells``), attached first if it is not (``on_attach(the attached job)``)."""
        from ..local.jobcells import refuse_background, run_job_cell

        self.component(name)
        refuse_background(options, job)
        attaching = job not in self.attached
        if attaching:
            self.attach(job)
        world = self.attached.cells(job)
        if attaching and on_attach is not None:
            on_attach(self.attached.get(job))
        run_job_cell(world, code, self._cell_options(options), shell=self.shell)

    def debug(self, name: str, rank: int | None = None) -> None:
        """Post-mortem pdb on rank ``rank`` (default: the lowest failed) of ``name``."""
        self.component(name)
        self.backend.post_mortem(name, rank, self.shell)

    def run_command(
        self,
        name: str,
        *,
        component: Component | None = None,
        inputs: dict[str, str] | None = None,
        outputs: dict[str, str] | None = None,
        timeout: float | None = None,
        stream: Callable[..., Any] | None = print,
        background: Any = None,
    ) -> CommandResult:
        """Run the spec's command of ``name`` (``component``: the one a panel shows; default:
        the notebook's) on every rank of its layout; ``background``: the BackgroundCell
        whose thread this is."""
        from ..local.command import run_command

        if background is None and self._backend is not None:  # one command of NAME at a time
            self._backend.background.refuse_beside(name, "command", kinds="command")
        component = component or self.component(name)
        return run_command(
            component,
            inputs=inputs,
            outputs=outputs,
            timeout=timeout,
            stream=stream,
            master_addr=self.master_addr,
            placement=self._placement_of(component),
            background=background,
            name=name,
        )

    def _placement_of(self, component: Component) -> Placement:
        """The hosts of ``component``: its own (``restart --hosts``), else DistComp.hosts."""
        names = [name for name, known in self.components.items() if known is component]
        backend = self._backend
        if backend is None:  # no ranks yet: the settings say (ipyparallel stays unimported)
            return self.placement
        return backend.placement_of(names[0]) if names else backend.placement

    def wait_background(self, name: str, timeout: float | None = None) -> Any:
        """Wait for the background cell of ``name``; raise its error."""
        self.component(name)
        return self.backend.wait(name, timeout)

    def background(self, name: str | None = None) -> list[str]:
        """One line per background cell (of ``name``, or of every component)."""
        return self.runs.describe(name)

    @property
    def runs(self) -> Runs:
        """The runs in progress: background cells and commands, `%distcomp command` runs."""
        from ..local.runs import Runs

        return Runs(lambda: self._backend)

    def where(self, name: str, ranks: str | None = None) -> WhereReport:
        """Where each rank of ``name`` is: its `%distcomp command` processes while that
        command runs, else its ranks."""
        from ..core.ranges import parse_ranks
        from ..local.inspect.where import where, where_processes

        if self._is_attached(name):
            from ..local.inspect.attached import where_job

            job = self.attached.get(name)
            return where_job(job, parse_ranks(ranks, job.world_size))
        self.component(name)
        command = self._running_command(name)
        if command is None:
            world = self.backend.running_world(name)
            return where(world, parse_ranks(ranks, world.world_size))
        chosen = parse_ranks(ranks, command.world_size)
        title = f"{name}: where the `%distcomp command` processes of {len(chosen)} rank(s) are"
        return where_processes(title, chosen, command)

    def compare(
        self,
        name: str,
        expr: str,
        ranks: str | None = None,
        rtol: float | None = None,
        timeout: float | None = None,
    ) -> CompareTable:
        """``expr`` evaluated on each rank of ``name``, as one table of rank groups; ranks
        stopped at a breakpoint (a background cell's) evaluate it in their stopped frame;
        ``timeout``: seconds the evaluation may take."""
        from ..contracts import RankState
        from ..core.ranges import parse_ranks
        from ..local.debug.evaluate import compare_stopped
        from ..local.inspect.compare import compare

        if self._is_attached(name):  # a job's ranks: in their stopped frames only
            job = self.attached.get(name)
            chosen = parse_ranks(ranks, job.world_size)
            return compare_stopped(job, chosen, expr, rtol, job._interrupt_late)  # type: ignore[arg-type]
        self.component(name)
        world = self.backend.running_world(name)
        chosen = parse_ranks(ranks, world.world_size)
        states = world.states()
        if any(states[r] == RankState.DEBUGGING for r in chosen):  # in their stopped frames
            return compare_stopped(world, chosen, expr, rtol)
        return compare(world, chosen, expr, rtol, timeout)

    def command_in_background(
        self,
        name: str,
        inputs: dict[str, str] | None = None,
        outputs: dict[str, str] | None = None,
        timeout: float | None = None,
    ) -> Any:
        """``%distcomp command NAME --background``: a started BackgroundCell that
        ``%distcomp wait NAME`` waits for and ``%distcomp where NAME`` looks into."""
        from ..local.ranks.background import BackgroundCell

        size = self.component(name).world_size
        self.backend.background.refuse_beside(name, "background command")

        def run() -> None:
            try:
                self.run_command(
                    name, inputs=inputs, outputs=outputs, timeout=timeout, background=cell
                )
            except KeyboardInterrupt:
                raise RankError(
                    f"`%distcomp command {name}` interrupted: every rank was stopped."
                ) from None

        cell = BackgroundCell(name, list(range(size)), run, kind="command")
        return self.backend.background.add(name, cell).start()

    def status(self, name: str | None = None) -> list[dict]:
        if name is not None:
            self.component(name)
        return self.backend.status(name)

    def pending_changes(self, name: str | None = None) -> dict[str, str]:
        """:meth:`pending` of ``name``, or of every component: name -> what the next run
        changes, for those whose running ranks no longer match their settings."""
        names = [name] if name is not None else list(self.components)
        found = {n: self.pending(n) for n in names}
        return {n: text for n, text in found.items() if text}

    def stop(self, name: str | None = None) -> list[str]:
        """Stop everything of ``name`` (of every component when None): its background
        `%distcomp command` run (SIGINT, SIGKILL after the grace) and its ranks, with their
        background cell. What was stopped, one phrase each ("the ranks of NAME", ...)."""
        if name is not None:
            self.component(name)
        return self.end_runs(name)

    def end_runs(self, name: str | None) -> list[str]:
        """:meth:`stop`, for a name known to be a component's (the panel's own)."""
        said = self.runs.stop(name)
        backend = self._backend
        if backend is None:
            return said
        stopped = backend.stop(name)
        if stopped:
            said.insert(0, f"the ranks of {', '.join(stopped)}")
        return said

    def replay_plan(self, name: str, skip: str | None = None, only: str | None = None) -> Plan:
        """The cells `restart NAME --replay` would run now, and on which ranks."""
        return self.backend.replay_plan(name, self.component(name), skip, only)

    def replay_cells(self, name: str) -> list[Replayed]:
        """The cells in the replay log of ``name``, oldest first."""
        self.component(name)
        return self.backend.replays.cells(name)

    def clear_replay(self, name: str) -> int:
        """Empty the replay log of ``name``; how many cells it held."""
        self.component(name)
        return self.backend.replays.clear(name)

    def restart(
        self,
        name: str,
        hosts: str | None = None,
        replay: Callable[[str], None] | None = None,
        plan: Plan | None = None,
    ) -> World:
        """Restart the ranks of ``name``; ``hosts`` (names, or a hostfile) places its nodes
        on those hosts from now on ("local": back to this machine). ``replay(text)``: then
        run the cells of ``plan`` (default: every logged cell), naming each with it."""
        component = self.component(name)
        if hosts is not None:
            from ..machine.hosts import Placement, check_hosts, read_hostfile

            if hosts.strip() == "local":
                chosen: list[str] = []
            elif Path(hosts).expanduser().is_file():
                chosen = read_hostfile(hosts)
            else:
                chosen = check_hosts(hosts, "--hosts")
            self.backend.place(name, Placement(tuple(chosen), self.local.ssh_command or "ssh"))
        if replay is not None:
            cells = plan or self.backend.replay_plan(name, component)
            return self.backend.replay(name, component, cells, replay)
        return self.backend.restart(name, component)

    def _running_command(self, name: str) -> ActiveRun | None:
        """The `%distcomp command` run of ``name`` in progress, if any (:meth:`Runs.command`)."""
        return self.runs.command(name)

    def _is_attached(self, name: str | None) -> bool:
        """``name`` is an attached job's, not a component's."""
        return name is not None and name in self.attached and name not in self.components

    def interrupt(self, name: str) -> list[int]:
        """SIGINT to the busy ranks of ``name`` (its `%distcomp command` run, while one runs)."""
        self.component(name)
        command = self._running_command(name)
        if command is not None:
            command.interrupt()
            return list(range(command.world_size))
        return self.backend.interrupt(name)

    def interrupt_report(self, name: str) -> str:
        """SIGINT to the busy ranks of ``name``; which stopped, which could not, what to do."""
        from ..core.ranges import format_ranks
        from ..local.ranks.ledgers import stuck_fix, verdict_lines

        if self._is_attached(name):
            sent = self.attached.get(name).interrupt()
            return (
                f"Sent SIGINT to {format_ranks(sent)} of job {name}."
                if sent
                else "No running rank."
            )
        self.component(name)
        if self._running_command(name) is not None:
            sent = self.interrupt(name)
            return f"Sent SIGINT to {format_ranks(sent)} of {name} (its `%distcomp command` run)."
        sent, still = self.backend.interrupt_and_wait(name)
        if not sent:
            return "No busy rank."
        stopped = [r for r in sent if r not in still]
        text = f"Sent SIGINT to {format_ranks(sent)} of {name}: " + (
            f"{format_ranks(stopped)} stopped" if stopped else "none stopped"
        )
        if not still:
            return text + "; every rank is ready for the next cell."
        world = self.backend.running_world(name)
        waits = "".join(f"\n{line}" for line in verdict_lines(world, still))
        return f"{text}.{waits}\n{stuck_fix(world, still)}"

    def collectives(self, name: str, last: int = 10) -> WhereReport:
        """The recent collectives of ``name``'s ranks (or of its `%distcomp command` run)."""
        from ..local.inspect.collectives import collectives, collectives_processes

        if self._is_attached(name):
            from ..local.inspect.attached import collectives_job

            return collectives_job(self.attached.get(name), last)
        self.component(name)
        command = self._running_command(name)
        if command is None:
            return collectives(self.backend.running_world(name), last)
        title = f"{name}: the last {last} collective(s) of its `%distcomp command` processes"
        return collectives_processes(title, command, last)

    def connect(self, name: str, connection: Connection | None) -> None:
        """Run ``name`` on ``connection``'s cluster from its next run (``None``: local)."""
        self.component(name)
        self.backend.connect(name, connection)

    # -- Azure ML -----------------------------------------------------------------------
    def resolve_compute(
        self, component: Component | None = None, explicit: str | None = None
    ) -> str | None:
        """The compute target: the flag or field, else the component's run settings, else
        ``%config AzureML.compute``."""
        own = component.runsettings.compute if component is not None else None
        return explicit or own or self.azureml.compute or None

    def ml_client(self, workspace: Workspace | None = None) -> Any:
        """An MLClient: explicit flags, else the AzureML settings, else a config.json."""
        from ..azureml import make_ml_client

        flags = workspace or Workspace()
        names = (flags.subscription_id, flags.resource_group, flags.workspace_name)
        config = flags.workspace_config
        if not config:
            defaults = (
                self.azureml.subscription_id,
                self.azureml.resource_group,
                self.azureml.workspace_name,
            )
            names = (names[0] or defaults[0], names[1] or defaults[1], names[2] or defaults[2])
            config = None if all(names) else self.azureml.workspace_config
        return make_ml_client(
            workspace_config=config,
            subscription_id=names[0],
            resource_group=names[1],
            workspace_name=names[2],
            credential=self.azureml.credential,
            **self.azureml.client_kwargs,
        )

    def export(
        self,
        component: Component,
        path: str | Path,
        *,
        component_form: bool = False,
        inputs: dict[str, str] | None = None,
        outputs: dict[str, str] | None = None,
        compute: str | None = None,
    ) -> Path:
        """Write the Azure ML v2 job (or, with ``component_form``, component) YAML."""
        from ..azureml import export

        job_args: dict[str, Any] = {}
        if not component_form:
            job_args["compute"] = self.resolve_compute(component, compute)
            job_args["experiment_name"] = self.azureml.experiment_name
        elif compute:
            job_args["compute"] = compute
        return export(
            component,
            path,
            component_form=component_form,
            inputs=inputs,
            outputs=outputs,
            **job_args,
        )

    def submit(
        self,
        component: Component,
        *,
        inputs: dict[str, str] | None = None,
        outputs: dict[str, str] | None = None,
        compute: str | None = None,
        experiment_name: str | None = None,
        workspace: Workspace | None = None,
        interactive: tuple[str, ...] = (),
        ssh_key: str | None = None,
        preflight: bool | None = None,
        on_warning: Callable[[str], None] | None = None,
        diagnose: bool | None = None,
        no_environment: bool = False,
        debug: bool = False,
        idle_minutes: float | None = None,
        cells: bool = False,
    ) -> Submission:
        """Submit the component as an Azure ML job; ``interactive`` adds Azure ML's
        interactive services (jupyterlab, vscode, ssh with ``ssh_key``) on every node.
        ``preflight`` (default ``%config AzureML.preflight``) checks the layout against the
        compute first; its warnings go to ``on_warning`` (default: an AzureMLWarning).
        ``diagnose`` (default ``%config AzureML.diagnose``): the job carries our rank side,
        and each rank says where it is in its log on a stall, SIGTERM or a failure.
        A spec that names no environment is refused, before anything reaches the workspace,
        unless ``no_environment`` says to submit it in Azure ML's base image.
        ``debug``: the notebook can attach to the running job (`%distcomp attach`); its
        ``breakpoint()`` waits ``idle_minutes`` (default ``%config AzureML.idle_limit``);
        ``cells`` (with ``debug``): its ranks run the notebook's cells (``run_job_cell``)."""
        from ..azureml import submit
        from ..azureml.environment import missing_environment

        handle = self.handle(component)
        refusal = None if no_environment else missing_environment(component, handle)
        if refusal:
            raise AzureMLError(f"Not submitted: {refusal}")

        extra: dict[str, Any] = {}
        if interactive:
            from ..azureml.interactive import job_services

            extra["services"] = job_services(interactive, ssh_key)
        ml_client = self.ml_client(workspace)
        job = submit(
            component,
            ml_client,
            inputs=inputs,
            outputs=outputs,
            compute=self.resolve_compute(component, compute),
            experiment_name=experiment_name or self.azureml.experiment_name,
            preflight=self.azureml.preflight if preflight is None else preflight,
            on_warning=on_warning,
            diagnose=self.azureml.diagnose if diagnose is None else diagnose,
            handle=handle,
            debug=debug,
            idle_minutes=self.azureml.idle_limit if idle_minutes is None else idle_minutes,
            ssh_key=ssh_key,
            cells=cells,
            **extra,
        )
        self.last_job = job.name
        return Submission(job, ml_client)

    def attach(
        self,
        name: str,
        workspace: Workspace | None = None,
        timeout: float = 600.0,
        on_status: Callable[[str], None] | None = None,
    ) -> Any:
        """Attach to Azure ML job ``name`` (submitted with ``--debug``) once it runs: its
        ranks become a world of this kernel's debugger (notebook/attached.py)."""
        return self.attached.attach(name, self.ml_client(workspace), timeout, on_status)

    def job_name(self, name: str | None) -> str:
        """``name``, or the job submitted last in this kernel when it is None."""
        if name:
            return name
        if not self.last_job:
            raise AzureMLError(
                "no job named, and none was submitted in this kernel. Fix: give the job's "
                "name (Azure ML studio shows it; `ml_client.jobs.list()` lists them)."
            )
        return self.last_job

    def wait(
        self,
        submission: Submission,
        on_status: Callable[[str, str], None] | None = None,
        on_job: Callable[[Any], None] | None = None,
    ) -> Any:
        """Follow the job until it ends; its final state, or an error unless it completed."""
        from ..azureml.submission import job_status, wait_for_job

        job = submission.job
        final = wait_for_job(
            submission.ml_client,
            job.name,
            on_status=on_status,
            poll_interval=self.azureml.poll_interval,
            first=job,
            on_job=on_job,
        )
        status = job_status(final) or "unknown"
        if status != "Completed":
            raise AzureMLError(
                f"job {job.name} ended {status}. Its logs are in Azure ML studio: "
                f"{final.studio_url or job.studio_url}"
            )
        return final

    def follow(
        self,
        name: str,
        workspace: Workspace | None = None,
        *,
        ml_client: Any = None,
        show: Callable[[str, str], None] | None = None,
        state: Callable[[str], None] | None = None,
    ) -> Any:
        """Follow Azure ML job ``name`` (every rank's log, labelled) until it ends; see
        notebook/follow.py. ``ml_client``: the client that submitted it (default: the
        workspace's, as ``ml_client`` resolves it)."""
        from ..azureml.logs import FollowSettings
        from .follow import follow_job

        settings = FollowSettings(
            poll=self.azureml.follow_poll,
            poll_max=max(self.azureml.follow_poll_max, self.azureml.follow_poll),
        )
        kwargs: dict[str, Any] = {"state": state, "folder": self.job_logs(name)}
        if show is not None:
            kwargs["show"] = show
        return follow_job(ml_client or self.ml_client(workspace), name, settings, **kwargs)

    def job_logs(self, name: str) -> Path:
        """The folder this kernel keeps Azure ML job ``name``'s logs in, laid out as
        ``jobs.download(all=True)`` lays them out (removed when the kernel ends)."""
        from ..machine import scratch

        if self._job_logs is None or not os.path.isdir(self._job_logs):
            self._job_logs = scratch.make_folder("distcomp-joblogs-")
        return Path(self._job_logs) / name

    def diagnose_job(self, name: str, workspace: Workspace | None = None) -> Any:
        """The diagnosis of Azure ML job ``name`` from every rank's log (running or ended):
        the logs are fetched into :meth:`job_logs` (only what is new since the last fetch or
        follow), then read as ``%distcomp diagnose FOLDER`` reads them. Returns
        ``(JobFacts, Diagnosis)``."""
        from ..azureml.diagnose import diagnose_folder
        from ..azureml.logs import fetch_logs, read_job

        ml_client = self.ml_client(workspace)
        facts = read_job(ml_client, name)
        folder = self.job_logs(name)
        fetch_logs(ml_client, name, folder)
        return facts, diagnose_folder(folder, facts.per_node, facts.final_status)

    # -- lifecycle ----------------------------------------------------------------------
    def open_channel(self) -> None:
        """In a kernel, open the JupyterLab ranks panel's comm (a no-op elsewhere)."""
        if self._channel is None and self.in_kernel:
            from .comm import install

            self._channel = install(self.shell, self.backend, self.stop)
            from ..local.debug import dap

            backend = self.backend
            kernel = getattr(self.shell, "kernel", None)
            attached = self.attached.jobs  # an attached job's ranks are threads too
            adapter = dap.install(kernel, lambda: {**backend.worlds, **attached})
            if adapter is not None:  # JupyterLab's debugger: rank threads come and go
                backend.add_listener(adapter.sync_threads)

    def shutdown(self) -> None:
        """Stop every rank this session started (at kernel exit); remove the job logs kept."""
        self.attached.shutdown()  # the jobs run on
        if self._backend is not None:
            self._backend.shutdown()
        if self._job_logs is not None:
            from ..machine import scratch

            scratch.remove(self._job_logs)
            self._job_logs = None

    def close(self) -> None:
        """Stop the ranks and close the ranks panel's comm (``%unload_ext``)."""
        self.shutdown()
        if self._channel is not None:
            from ..local.debug import dap

            dap.uninstall()
            self._channel.close()
            self._channel = None


__all__ = ["Session", "Submission", "Workspace"]
