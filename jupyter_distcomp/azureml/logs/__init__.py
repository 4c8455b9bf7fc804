"""A submitted job's logs, every rank's: read while the job runs, followed, fetched.

azure-ai-ml's ``jobs.stream`` shows rank 0's log alone; these read every process's log
through the client's own run history operations (``get_run_details``: each log's SAS URL)
and its requests pipeline (HTTP range reads of the new bytes only).

- ``job``: the job's status, layout, and the rank and node of each log file; clear errors
  for an unknown job and a pipeline job
- ``reader``: incremental, bounded reads of every log
- ``follow``: :class:`~.follow.Follower`, a job's output in the words of a local run
- ``fetch``: :func:`~.fetch.fetch_logs`, every log into a folder, as ``jobs.download`` lays it
"""

from __future__ import annotations

from .fetch import fetch_logs
from .follow import Follower, FollowOutcome, FollowSettings
from .job import JobFacts, read_job

__all__ = ["FollowOutcome", "FollowSettings", "Follower", "JobFacts", "fetch_logs", "read_job"]
