"""The two groups of ``%config`` settings: ``DistComp`` (local ranks) and ``AzureML``.

Both are traitlets Configurables registered in ``shell.configurables`` by ``%load_ext``, so
``%config DistComp.default_timeout = 120`` and ``%config AzureML.compute = "cpu"`` set them,
``%config AzureML`` lists them, and ``c.AzureML.workspace_config = ...`` in an IPython profile's
config file gives their start values.
"""

from __future__ import annotations

import warnings
from typing import Any

from traitlets import Any as AnyTrait
from traitlets import Bool, Dict, Enum, Float, Int, List, Unicode, Union, observe
from traitlets.config import Config, Configurable


class _Settings(Configurable):
    """Says where a setting given to the other group belongs (``%config DistComp.compute``)."""

    def update_config(self, config: Config) -> None:
        """``%config`` calls this; a key of the other group gets a warning with the fix."""
        self._point_to_the_other_group(config)
        super().update_config(config)

    @observe("config")
    def _config_set(self, change: Any) -> None:
        self._point_to_the_other_group(change.new)

    def _point_to_the_other_group(self, config: Config) -> None:
        name = type(self).__name__
        if name not in config:
            return
        for other in _Settings.__subclasses__():
            known = set(other.class_trait_names(config=True)) - set(self.trait_names())
            for key in config[name]:
                if other is not type(self) and key in known:
                    warnings.warn(
                        f"`{key}` is a setting of {other.__name__}, not {name}. "
                        f"Fix: %config {other.__name__}.{key} = ...",
                        UserWarning,
                        stacklevel=2,
                    )


class DistComp(_Settings):
    """Local ranks: ``%config DistComp.<setting> = value``."""

    default_timeout = Float(
        None,
        allow_none=True,
        config=True,
        help="Seconds a `%%distcomp run` cell may take before it ends and names the busy ranks "
        "(None: no limit).",
    )
    fail_fast_grace = Float(
        3.0,
        allow_none=True,
        config=True,
        help="Seconds the other ranks may stay busy after a rank's cell failed before the cell "
        "ends with the failure and where each busy rank waits (None: wait for every rank).",
    )
    check_collectives = Bool(
        False,
        config=True,
        help="Before each collective of torch.distributed or mpi4py, the ranks compare operation, "
        "shape and dtype, and raise on every rank at the call when they differ (costs one exchange "
        "per collective). Per cell: `%%distcomp run NAME --check-collectives`.",
    )
    hang_notice = Float(
        30.0,
        allow_none=True,
        config=True,
        help="Seconds every busy rank of a cell without --timeout may sit in collectives without "
        "progress before one line says so, with what blocks them (None: never); also how long "
        "before a rank of node 1 that looked for node 0 at localhost is named. Nothing is "
        "stopped.",
    )
    default_instance_count = Int(1, config=True, help="Nodes for a newly defined component.")
    default_process_count_per_node = Int(
        1, config=True, help="Processes per node for a newly defined component."
    )
    master_addr = Unicode("127.0.0.1", config=True, help="MASTER_ADDR given to local ranks.")
    node_local_files = Bool(
        True,
        config=True,
        help="`%%distcomp run` ranks on several emulated nodes: True (the default) gives each "
        "node its own copy of the notebook's folder and its own TMPDIR, as Azure ML's nodes "
        "and `%distcomp command` have (the folder itself is os.environ['DISTCOMP_NOTEBOOK_DIR'] "
        "on every rank); False runs every rank in the notebook's folder. Takes effect at the "
        "next start of the ranks.",
    )
    show_widget = Bool(True, config=True, help="Show the run-settings panel below definitions.")
    prestart = Union(
        [Enum(("auto", "always", "never")), Bool()],
        default_value="auto",
        config=True,
        help="When a definition starts its ranks in the background, ahead of its first "
        '`%%distcomp run`: "auto" when the component ran cells before in this kernel, '
        '"always" (or True) at every definition, "never" (or False).',
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
    hosts = List(
        Unicode(),
        config=True,
        help='Nodes that are real hosts: node i of a layout runs on host i, e.g. ["node0", '
        '"node1"]; mpiexec reaches them with ssh_command (empty: every node on this machine).',
    )
    hostfile = Unicode(
        None,
        allow_none=True,
        config=True,
        help="A file with one host a line (`node0 slots=4` allowed), used when hosts is empty.",
    )
    ssh_command = Unicode(
        "ssh", config=True, help='How mpiexec and the kernel reach the hosts, e.g. "ssh -F cfg".'
    )


class AzureML(_Settings):
    """Azure ML defaults of ``%distcomp submit`` / ``export`` and the panel's buttons (flags
    win over these): ``%config AzureML.<setting> = value``."""

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
    follow_poll = Float(
        2.0,
        config=True,
        help="Seconds between reads of a followed job's logs while they grow (`%distcomp "
        "follow`); while nothing changes the wait grows to follow_poll_max.",
    )
    follow_poll_max = Float(
        30.0, config=True, help="The longest wait between reads of a followed job's logs."
    )
    preflight = Bool(
        True,
        config=True,
        help="Check the layout against the compute (max nodes, GPUs per node) before submit.",
    )
    diagnose = Bool(
        True,
        config=True,
        help="Submitted jobs carry the rank side (.distcomp/ in the code snapshot, a "
        "PYTHONPATH prefix on the command): each rank writes a [distcomp rank-state] line "
        "into its log on a stall, SIGTERM or a failure, and nothing otherwise.",
    )
    ssh_command = Unicode(
        "ssh",
        config=True,
        help="The ssh that `%distcomp attach` reaches a job's nodes with (your key and "
        "options, e.g. 'ssh -i ~/.ssh/id_ed25519'); the key never leaves this machine.",
    )
    ssh_user = Unicode(
        "azureuser",
        config=True,
        help="The user `%distcomp attach` logs in as where a node's SSH endpoint names none "
        "(az ml job connect-ssh's).",
    )
    idle_limit = Float(
        30.0,
        config=True,
        help="Minutes a breakpoint() of a job submitted with --debug waits for a notebook "
        "(and a prompt for a command) before the rank runs on (submit --idle-limit).",
    )


__all__ = ["AzureML", "DistComp"]
