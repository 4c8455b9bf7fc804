"""What a submitted job is, for reading its logs: its status, its layout, and which rank and
node each of its log files belongs to.

Azure ML writes one log per process of a distributed command job,
``user_logs/std_log_process_N.txt`` (N: the global rank), and ``user_logs/std_log.txt`` for
a single process; azure-ai-ml's patterns (``constants/_job/job.py``: ``std_log[\\D]*[0]*
(?:_ps)?\\.txt``) also allow ``std_log_worker_N`` / ``std_log_ps_N`` of TensorFlow tasks.
Each rank sits on the node a local run of the same layout puts it on (``core/layout.py``), and
is labelled as a local ``%distcomp command`` labels it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from ...core.layout import rank_places
from ...core.ranges import rank_label
from ...errors import AzureMLError, LayoutError
from ..failures import explain, workspace_label
from ..submission import TERMINAL_STATUSES

LOG_NAME = re.compile(r"^user_logs/std_log(?:_(?P<kind>process|worker|ps|rank)_(?P<n>\d+))?\.txt$")
#: the distribution's type as azure-ai-ml names it -> the launcher of the local layout
_LAUNCHERS = {"mpi": "mpi", "pytorch": "torch.distributed", "tensorflow": "tensorflow"}


@dataclass(frozen=True)
class JobFacts:
    """One job, as ``jobs.get`` gives it."""

    name: str
    status: str
    instance_count: int
    process_count_per_instance: int
    distribution: str | None  # "mpi", "pytorch", "tensorflow", or None
    worker_count: int | None
    parameter_server_count: int
    command: str
    compute: str
    studio_url: str
    #: the job's environment variables, as (name, value) pairs
    environment_variables: tuple[tuple[str, str], ...] = ()

    def places(self) -> list[tuple[int, int]]:
        """(node, local rank) of every rank the layout has."""
        launcher = _LAUNCHERS.get(self.distribution or "")
        if launcher is None:
            return [(0, 0)]
        try:
            return rank_places(
                launcher,
                self.instance_count,
                self.process_count_per_instance,
                self.worker_count,
                self.parameter_server_count,
            )
        except LayoutError:
            return [(0, 0)]

    @property
    def per_node(self) -> int | None:
        """Processes on each node, where the layout gives every node the same number."""
        if self.distribution in ("mpi", "pytorch"):
            return self.process_count_per_instance
        if self.distribution == "tensorflow":  # one task a node, parameter servers after
            return 1 if (self.worker_count or self.instance_count) == self.instance_count else None
        return 1

    @property
    def final_status(self) -> str | None:
        """The status the job ended with; None while it has not ended."""
        return self.status if self.status in TERMINAL_STATUSES else None

    def node_of(self, rank: int) -> int:
        places = self.places()
        if rank < len(places):
            return places[rank][0]
        return min(rank // max(self.process_count_per_instance, 1), self.instance_count - 1)

    def label(self, rank: int) -> str:
        """``[node 1 rank 3]`` (``[rank 3]`` on one node), as a local run labels the rank."""
        return rank_label(rank, self.node_of(rank), self.instance_count)

    def rank_of(self, log_name: str) -> int | None:
        """The global rank whose output log ``log_name`` holds; None for other logs."""
        match = LOG_NAME.match(log_name)
        if match is None:
            return None
        if match["n"] is None:
            return 0
        index = int(match["n"])
        if match["kind"] == "ps":  # parameter servers come after the workers
            workers = self.worker_count or self.instance_count
            return workers + index
        return index


def job_status(job: Any) -> str:
    status = getattr(job, "status", None)
    return str(getattr(status, "value", status) or "")


def read_job(ml_client: Any, name: str) -> JobFacts:
    """The job ``name`` of the client's workspace; an AzureMLError that says what and the
    fix for an unknown job or one whose logs are not its own (a pipeline)."""
    from azure.core.exceptions import ResourceNotFoundError

    try:
        job = ml_client.jobs.get(name)
    except ResourceNotFoundError:
        raise AzureMLError(
            f"job '{name}' was not found in {workspace_label(ml_client)}. Fix: check the job's "
            "name (Azure ML studio lists the jobs; `ml_client.jobs.list()` too), or point at "
            "its workspace (--workspace, --resource-group, --subscription, or %config "
            "AzureML.workspace_name = ...)."
        ) from None
    except Exception as exc:
        raise explain(exc, ml_client, f"read job '{name}'") from None
    kind = str(getattr(job, "type", "") or "").lower()
    if kind == "pipeline":
        steps = ", ".join(sorted(getattr(job, "jobs", None) or {})) or "none listed"
        raise AzureMLError(
            f"job '{name}' is a pipeline job (steps: {steps}): its logs are those of its child "
            "jobs, each a job of its own. Fix: follow a child job by its name, "
            f"`%distcomp follow CHILD`; `ml_client.jobs.list(parent_job_name='{name}')` "
            "lists their names (Azure ML studio shows them too)."
        )
    if kind not in ("command", ""):
        raise AzureMLError(
            f"job '{name}' is a {kind} job; following reads the logs of command jobs. Fix: "
            "follow one of its command jobs by name, or read it in Azure ML studio."
        )
    distribution = getattr(job, "distribution", None)
    resources = getattr(job, "resources", None)
    dist_type = str(getattr(distribution, "type", "") or "").lower() or None
    return JobFacts(
        name=name,
        status=job_status(job),
        instance_count=int(getattr(resources, "instance_count", None) or 1),
        process_count_per_instance=int(
            getattr(distribution, "process_count_per_instance", None) or 1
        ),
        distribution=dist_type,
        worker_count=getattr(distribution, "worker_count", None),
        parameter_server_count=int(getattr(distribution, "parameter_server_count", None) or 0),
        command=str(getattr(job, "command", "") or ""),
        compute=str(getattr(job, "compute", "") or ""),
        studio_url=str(getattr(job, "studio_url", "") or ""),
        environment_variables=tuple(
            (str(k), str(v)) for k, v in (getattr(job, "environment_variables", None) or {}).items()
        ),
    )


__all__ = ["LOG_NAME", "JobFacts", "job_status", "read_job"]
