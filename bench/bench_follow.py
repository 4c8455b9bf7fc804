"""How soon a rank's line reaches the notebook: ``%distcomp follow`` against azure-ai-ml's
``jobs.stream``, on the same jobs, both polling once a second, against the stand-in.

Each job's two ranks print marker lines at set times; the stand-in notes when each marker
lands in its rank's log, and each follower when it shows it. ``jobs.stream`` shows rank 0's
log alone (azure-ai-ml's ``COMMON_RUNTIME_STREAM_LOG_PATTERN``); follow shows both. The
figure: the median delay of follow over that of ``jobs.stream`` for rank 0's markers (at
most 1 means follow is no later), and follow's median delay for rank 1's, which
``jobs.stream`` never shows.

    python bench/bench_follow.py [--jobs 3]
"""

from __future__ import annotations

import argparse
import io
import re
import statistics
import sys
import tempfile
import threading
import time
import warnings
from contextlib import redirect_stdout
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

MARKS = 4
PROGRAM = f"""\
import os, time
rank = os.environ["RANK"]
start = time.time()
for index in range({MARKS}):
    time.sleep(max(0.0, start + 1.5 + 0.7 * index - time.time()))
    print(f"MARK r{{rank}} i{{index}}", flush=True)
time.sleep(0.5)
"""
SPEC = """\
name: bench_follow
type: DistributedComponent
launcher:
  type: torch.distributed
  additional_arguments: python marks.py
"""
_MARK = re.compile(rb"MARK r(\d) i(\d)")


class Stamped(io.TextIOBase):
    """stdout of ``jobs.stream``: when each marker was written."""

    def __init__(self, seen: dict) -> None:
        self.seen = seen

    def write(self, text: str) -> int:
        now = time.monotonic()
        for match in _MARK.finditer(text.encode()):
            self.seen.setdefault((int(match[1]), int(match[2])), now)
        return len(text)


def one_job(standin, component, poll: float) -> tuple[list[float], list[float], list[float]]:
    """(follow's delays for rank 0, jobs.stream's for rank 0, follow's for rank 1)."""
    from jupyter_distcomp.azureml import submit
    from jupyter_distcomp.azureml.logs import Follower, FollowSettings

    landed: dict = {}
    append = standin.store.append

    def noting(key: str, data: bytes) -> None:
        append(key, data)
        for match in _MARK.finditer(data):
            landed.setdefault((int(match[1]), int(match[2])), time.monotonic())

    standin.store.append = noting
    ml_client = standin.ml_client(show_progress=False)
    job = submit(component, ml_client, compute="cpu", preflight=False)
    followed: dict = {}

    def show(text: str, stream: str) -> None:
        now = time.monotonic()
        for match in _MARK.finditer(text.encode()):
            followed.setdefault((int(match[1]), int(match[2])), now)

    follower = Follower(
        ml_client, job.name, show, lambda text: None, FollowSettings(poll=poll, poll_max=poll)
    )
    thread = threading.Thread(target=follower.run)
    thread.start()
    streamed: dict = {}
    with redirect_stdout(Stamped(streamed)):
        ml_client.jobs.stream(job.name)
    thread.join()
    standin.store.append = append

    def delays(shown: dict, rank: int) -> list[float]:
        return [shown[k] - landed[k] for k in landed if k[0] == rank and k in shown]

    return delays(followed, 0), delays(streamed, 0), delays(followed, 1)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", type=int, default=3)
    args = parser.parse_args()
    from azure.ai.ml.operations._run_history_constants import RunHistoryConstants

    from jupyter_distcomp import load_component
    from jupyter_distcomp.standin import AzureStandIn

    poll = 1.0  # jobs.stream's shortest interval is a whole number of seconds
    RunHistoryConstants._WAIT_COMPLETION_POLLING_INTERVAL_MIN = 1
    RunHistoryConstants._WAIT_COMPLETION_POLLING_INTERVAL_MAX = 1
    folder = Path(tempfile.mkdtemp(prefix="bench-follow-"))
    (folder / "marks.py").write_text(PROGRAM)
    (folder / "spec.yaml").write_text(SPEC)
    component = load_component(folder / "spec.yaml")
    component.runsettings.resource_layout.configure(instance_count=1, process_count_per_node=2)
    ours0: list[float] = []
    theirs0: list[float] = []
    ours1: list[float] = []
    with warnings.catch_warnings(), AzureStandIn(root=folder / "standin") as standin:
        warnings.simplefilter("ignore")
        for _ in range(args.jobs):
            a, b, c = one_job(standin, component, poll)
            ours0 += a
            theirs0 += b
            ours1 += c
    if not theirs0 or not ours0:
        raise SystemExit("no marker was shown: the bench is broken")
    follow0, stream0 = statistics.median(ours0), statistics.median(theirs0)
    print(
        f"a rank's line shown after it lands in its log ({args.jobs} jobs, {len(ours0)} lines "
        f"of rank 0, polls every {poll:g} s): follow median {follow0:.2f} s, jobs.stream "
        f"{stream0:.2f} s, ratio {follow0 / stream0:.2f}; rank 1 (jobs.stream never shows "
        f"it): follow median {statistics.median(ours1):.2f} s over {len(ours1)} lines"
    )


if __name__ == "__main__":
    main()
