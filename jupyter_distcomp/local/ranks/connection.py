"""Where a component's engines come from: local mpiexec, or the user's own cluster."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ...errors import RankError
from . import ipp

if TYPE_CHECKING:
    from .ipp import Client


@dataclass(frozen=True)
class Connection:
    """Where the engines come from: None fields mean the embedded local cluster."""

    profile: str | None = None
    profile_dir: str | None = None
    cluster_id: str | None = None

    @property
    def embedded(self) -> bool:
        return not (self.profile or self.profile_dir or self.cluster_id)

    def client_file(self) -> str:
        """Where ipyparallel writes the client connection file of this cluster."""
        from IPython.paths import get_ipython_dir

        profile_dir = self.profile_dir or os.path.join(
            get_ipython_dir(), f"profile_{self.profile or 'default'}"
        )
        name = (
            f"ipcontroller-{self.cluster_id}-client.json"
            if self.cluster_id
            else ("ipcontroller-client.json")
        )
        return os.path.join(os.path.abspath(profile_dir), "security", name)

    def describe(self) -> str:
        if self.embedded:
            return "local mpiexec"
        parts = [f"{k}={v}" for k, v in vars(self).items() if v]
        return "your cluster (" + ", ".join(parts) + ")"


def connect_client(
    connection: Connection,
    name: str,
    world_size: int,
    layout: str,
    progress: Callable[[int], None],
    timeout: float = 10,
) -> tuple[Client, list[int]]:
    """A client of the user's cluster and the engine ids to use as ranks 0..N-1."""
    fix = (
        "Fix: start it first (ipcluster start --profile P --cluster-id C), or check the "
        "profile and cluster id."
    )
    expected = connection.client_file()
    if not os.path.exists(expected):
        raise RankError(
            f"Cannot connect to {connection.describe()} for {name!r}: no connection file "
            f"{expected}. {fix}"
        )
    kwargs = {k: v for k, v in vars(connection).items() if v}
    try:
        client = ipp.connect(timeout, **kwargs)
    except Exception as exc:
        raise RankError(f"Cannot connect to {connection.describe()} for {name!r}: {exc}. {fix}")
    deadline = time.monotonic() + timeout
    while len(ipp.engine_ids(client)) < world_size and time.monotonic() < deadline:
        progress(len(ipp.engine_ids(client)))
        time.sleep(0.1)
    ids = sorted(ipp.engine_ids(client))
    if len(ids) < world_size:
        ipp.close(client)
        raise RankError(
            f"{connection.describe()} has {len(ids)} engine(s); {name!r} needs {world_size} "
            f"({layout}). Fix: start more engines, or make the layout smaller with "
            "NAME.runsettings.resource_layout.configure(...)."
        )
    return client, ids[:world_size]
