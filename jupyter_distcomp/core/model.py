"""The component model: what a spec says, after parsing and validation.

Immutable except for ``runsettings``, the live settings that the widget, the magics and
``configure()`` share. Built by :func:`~jupyter_distcomp.core.spec_parsing.load_component`.
Its Azure ML forms are :func:`jupyter_distcomp.azureml.to_azureml_job` and
``to_azureml_component``; how a notebook shows it is in ``notebook/views/component.py``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .layout import Port, RankEnv, ports_needed, rank_environments, rank_places
from .run_settings import RunSettings
from .template import render_command, to_azureml


@dataclass(frozen=True)
class Input:
    """One input: a parameter (``param_type`` set) or a data port (``param_type`` None)."""

    name: str
    type: str | tuple[str, ...]  # as written in the spec; a list of port types becomes a tuple
    param_type: str | None = None  # one of values.PARAMETER_TYPES, None for a data port
    optional: bool = False
    default: Any = None
    description: str | None = None
    min: int | float | None = None
    max: int | float | None = None
    enum: tuple[str, ...] | None = None
    is_control: bool = False
    line: int | None = None  # 1-based line of the input's key in the spec text

    @property
    def is_parameter(self) -> bool:
        return self.param_type is not None

    @property
    def is_data(self) -> bool:
        return self.param_type is None

    @property
    def data_type(self) -> str | None:
        """``uri_file`` for file ports, ``uri_folder`` for every other port, None for parameters."""
        if self.is_parameter:
            return None
        types = self.type if isinstance(self.type, tuple) else (self.type,)
        lowered = {t.lower() for t in types}
        if lowered & {"uri_file", "anyfile", "file"} and not lowered & {
            "anydirectory",
            "path",
            "uri_folder",
        }:
            return "uri_file"
        return "uri_folder"


@dataclass(frozen=True)
class Output:
    name: str
    type: str | tuple[str, ...]
    description: str | None = None
    is_link_mode: bool | None = None
    datastore_mode: str | None = None
    line: int | None = None
    optional: bool = False
    default: Any = None

    @property
    def data_type(self) -> str:
        types = self.type if isinstance(self.type, tuple) else (self.type,)
        return "uri_file" if {t.lower() for t in types} & {"uri_file", "anyfile"} else "uri_folder"


@dataclass(frozen=True)
class Launcher:
    type: str  # normalised: "mpi", "torch.distributed", "tensorflow" or "deepspeed"
    additional_arguments: str  # the command template
    raw_type: str  # as written: "Pytorch", "MPI", ...


@dataclass(frozen=True)
class Environment:
    """The environment section, in every form Azure ML knows (all fields optional)."""

    name: str | None = None
    version: str | None = None
    image: str | None = None
    dockerfile: str | None = None  # path relative to the spec's folder ("file:" stripped)
    base_dockerfile: str | None = None  # inline Dockerfile text
    conda_file: str | None = None  # conda_dependencies_file
    conda_dependencies: dict | None = None  # inline conda environment
    pip_requirements_file: str | None = None
    user_managed: bool = False
    os: str = "Linux"
    raw: dict = field(default_factory=dict)  # the section as written (v2: the string)


@dataclass(frozen=True, eq=False)
class Component:
    name: str
    version: str | None
    display_name: str | None
    description: str | None
    type: str  # "DistributedComponent" or "CommandComponent"
    inputs: dict[str, Input]
    outputs: dict[str, Output]
    launcher: Launcher | None
    environment: Environment | None
    code: str | None  # as written; resolve with code_path
    command_template: str  # launcher.additional_arguments or command
    tags: dict[str, Any] = field(default_factory=dict)
    is_deterministic: bool | None = None
    successful_return_code: str | None = None
    environment_variables: dict[str, str] = field(default_factory=dict)
    schema: str | None = None  # the $schema value
    spec_format: str = "v1.5"  # "v1.5" or "v2"
    source: str = ""  # the YAML text
    base_dir: Path | None = None  # folder of the spec file (or the notebook's cwd)
    warnings: tuple[str, ...] = ()
    #: the layout the spec itself sets (v2 ``resources`` / ``distribution``), by setting name
    spec_layout: dict[str, int] = field(default_factory=dict)
    runsettings: RunSettings = field(default_factory=RunSettings, compare=False, repr=False)

    # -- derived ------------------------------------------------------------------------
    @property
    def launcher_type(self) -> str | None:
        return self.launcher.type if self.launcher else None

    @property
    def code_path(self) -> Path:
        """The code folder resolved against the spec's folder (default: the spec's folder)."""
        base = self.base_dir or Path.cwd()
        if not self.code:
            return base
        code = self.code[5:] if self.code.startswith("file:") else self.code
        path = Path(code).expanduser()
        return path if path.is_absolute() else (base / path).resolve()

    def code_folder_problem(self, path: Path | None = None) -> str | None:
        """What is wrong with the code folder (``path``, default :attr:`code_path`), with the
        fix; None when it is a folder."""
        path = self.code_path if path is None else path
        if path.is_dir():
            return None
        if path.exists():
            return (
                f"the code folder {path} is a file, not a folder. Fix: set `code:` to the "
                f"folder that holds it ({path.parent}), or leave `code:` out for the spec's folder."
            )
        return (
            f"the code folder {path} does not exist. Fix: create it, or set `code:` in the spec "
            "to the folder that holds the scripts."
        )

    # -- command ------------------------------------------------------------------------
    def render_command(
        self, inputs: dict[str, Any] | None = None, outputs: dict[str, Any] | None = None
    ) -> list[str]:
        """The argv a rank executes; parameter defaults apply, every value is one argv item."""
        return render_command(self, inputs or {}, outputs or {})

    def azureml_command(self) -> str:
        """The same template in Azure ML v2 syntax (``${{inputs.x}}``, ``$[[...]]``)."""
        return to_azureml(self.command_template)

    # -- layout -------------------------------------------------------------------------
    @property
    def layout_args(self) -> tuple[str, int, int, int | None, int]:
        """(launcher, instance_count, process_count_per_node, worker_count,
        parameter_server_count) of the current run settings: what the ranks are laid out by."""
        layout = self.runsettings.resource_layout
        return (
            self.launcher_type or "mpi",
            layout.instance_count,
            layout.process_count_per_node,
            layout.worker_count,
            layout.parameter_server_count,
        )

    def rank_environments(
        self,
        master_addr: str = "127.0.0.1",
        master_port: Port | Sequence[int] | None = None,
        node_hosts: Sequence[str] | None = None,
        socket_ifname: str = "lo",
    ) -> list[RankEnv]:
        """The variables of each rank for the current run settings (see layout.py for
        ``master_port``: None gives Azure ML's ports; ``node_hosts``: the host of each node,
        when nodes are real hosts; ``socket_ifname``: NCCL's interface otherwise).

        The spec's ``environment_variables`` are on every rank, as Azure ML sets them on
        every process of the job; the launcher's own variables (RANK, MASTER_PORT, ...) win.
        """
        launcher, nodes, per_node, workers, servers = self.layout_args
        spec = {name: str(value) for name, value in self.environment_variables.items()}
        envs = rank_environments(
            launcher,
            nodes,
            per_node,
            master_addr=master_addr,
            master_port=master_port,
            worker_count=workers,
            parameter_server_count=servers,
            node_hosts=node_hosts,
            socket_ifname=socket_ifname,
        )
        return [{**spec, **env} for env in envs]

    @property
    def world_size(self) -> int:
        """The number of ranks of the current layout (TensorFlow: workers + parameter servers)."""
        return len(rank_places(*self.layout_args))

    @property
    def ports_needed(self) -> int:
        """How many ports the ranks of the current layout listen on (see layout.py)."""
        return ports_needed(*self.layout_args)

    def __repr__(self) -> str:
        launcher = f", launcher={self.launcher.type!r}" if self.launcher else ""
        return (
            f"<Component {self.name!r} {self.type}{launcher}, "
            f"{len(self.inputs)} inputs, {len(self.outputs)} outputs, "
            f"{self.runsettings.resource_layout.instance_count}x"
            f"{self.runsettings.resource_layout.process_count_per_node}>"
        )
