"""Which rank a log file of a job belongs to, by the names Azure ML gives them.

A command job's processes write ``user_logs/std_log_process_N.txt`` (N the global rank,
zero-padded on some runtimes: ``std_log_process_03.txt``), one process ``std_log.txt``, and
TensorFlow's tasks ``std_log_node_NN_worker.txt`` / ``std_log_node_NN_ps.txt``: the names
azure-ai-ml's ``COMMON_RUNTIME_ALL_USER_LOG_PATTERN`` (constants/_job/job.py,
``user_logs/std_log.*\\.txt``) matches, as its tests list them
(tests/job_common/unittests/test_job_ops_helper.py). TensorFlow's workers are ranks 0..W-1
and its parameter servers the ranks after them.
"""

from __future__ import annotations

import re

_PROCESS = re.compile(r"^std_log_process_(\d+)\.txt$")
_SINGLE = re.compile(r"^std_log\.txt$")
_TASK = re.compile(r"^std_log_node_(\d+)_(worker|ps)\.txt$")
#: every per-process log Azure ML writes (azure-ai-ml's pattern, file name only)
USER_LOG = re.compile(r"^std_log.*\.txt$")


def rank_files(names: list[str]) -> tuple[dict[int, tuple[str, str]], list[str]]:
    """``{rank: (file name, role)}`` of the per-process logs among ``names`` (role: ""
    or a TensorFlow task, ``"worker 1"``), and the other names (a launcher's log)."""
    ranks: dict[int, tuple[str, str]] = {}
    workers: list[tuple[int, str]] = []
    servers: list[tuple[int, str]] = []
    others = []
    for name in sorted(names):
        process = _PROCESS.match(name)
        task = _TASK.match(name)
        if process:
            ranks[int(process[1])] = (name, "")
        elif _SINGLE.match(name):
            ranks.setdefault(0, (name, ""))
        elif task:
            (workers if task[2] == "worker" else servers).append((int(task[1]), name))
        else:
            others.append(name)
    offset = len(workers)
    for index, name in sorted(workers):
        ranks[index] = (name, f"worker {index}")
    for index, name in sorted(servers):
        ranks[offset + index] = (name, f"ps {index}")
    return ranks, others
