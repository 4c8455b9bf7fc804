"""``%distcomp diagnose`` of an ended 64-rank job from its downloaded logs, 20 MB a rank,
measured in one run against peers that read the same files.

Run: .venv/bin/python bench/bench_diagnose.py   (not a test; prints its figures)

The folder is laid out as ``az ml job download --all`` lays it out
(``artifacts/user_logs/std_log_process_N.txt``, ``mpi_log.txt``): each rank's log is a
night of training lines, one of our state lines in the middle (a stall that passed), and
at its end the failure: rank 37 a ValueError, every other rank gloo's ``Connection closed
by peer``. Figures (the median of alternating pairs, the files in the page cache, as after
a download):

- ``diagnose_folder`` against ``grep -c Traceback`` over the same files (a peer a user
  reaches for first), target: under 2 s on 2 cores;
- against reading every file whole with Python (what a naive reader pays first).
"""

from __future__ import annotations

import json
import subprocess
import tempfile
import time
from pathlib import Path

from common import alternated, figure, load

RANKS = 64
SIZE = 20 << 20
CULPRIT = 37
MARK = "[distcomp rank-state] "


def _failure(rank: int) -> str:
    if rank == CULPRIT:
        error = "ValueError: batch 81234 has 0 samples"
        code, line = "raise ValueError(f'batch {step} has 0 samples')", 57
    else:
        error = (
            "RuntimeError: [/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:"
            f"553] Connection closed by peer [10.0.0.{rank // 8}]:{40000 + rank}. This is "
            "typically caused by a remote worker crashing."
        )
        code, line = "dist.all_reduce(loss)", 61
    frames = [
        f'[rank{rank}]:   File "/mnt/azureml/cr/j/0a1b/exe/wd/train.py", line 90, in <module>',
        f"[rank{rank}]:     main()",
        f'[rank{rank}]:   File "/mnt/azureml/cr/j/0a1b/exe/wd/train.py", line {line}, in step',
        f"[rank{rank}]:     {code}",
    ]
    return "\n".join(
        [f"[rank{rank}]: Traceback (most recent call last):", *frames, f"[rank{rank}]: {error}", ""]
    )


def _state(rank: int) -> str:
    state = {
        "v": 1,
        "rank": rank,
        "size": RANKS,
        "local_rank": rank % 8,
        "node": rank // 8,
        "host": f"node-{rank // 8}",
        "pid": 4000 + rank,
        "reason": "stall",
        "time": 1.0e9,
        "stalled": 45,
        "threads": [
            {
                "name": "MainThread",
                "main": True,
                "frames": [
                    {
                        "file": "train.py",
                        "line": 61,
                        "function": "step",
                        "code": "dist.all_reduce(loss)",
                    }
                ],
            }
        ],
        "calls": [],
        "error": None,
    }
    return MARK + json.dumps(state) + "\n"


def write_job(root: Path) -> Path:
    """The downloaded job's folder (see the module's text)."""
    logs = root / "artifacts" / "user_logs"
    logs.mkdir(parents=True)
    for rank in range(RANKS):
        lines = []
        size, step = 0, 0
        while size < SIZE // 2:
            text = (
                f"epoch {step // 5000} step {step} loss {1 / (step + 1):.6f} lr 0.000300 "
                f"throughput {1200 + step % 97}.5 samples/s grad_norm 0.{step % 89:02d}\n"
            )
            lines.append(text)
            size += len(text)
            step += 1
        half = "".join(lines)
        with open(logs / f"std_log_process_{rank}.txt", "w") as log:
            log.write(half)
            log.write(_state(rank))
            log.write(half)
            log.write(_failure(rank))
    (logs / "mpi_log.txt").write_text("")
    return root


def main() -> None:
    from jupyter_distcomp.azureml.diagnose import diagnose_folder

    with tempfile.TemporaryDirectory() as tmp:
        tic = time.perf_counter()
        root = write_job(Path(tmp))
        files = sorted((root / "artifacts" / "user_logs").glob("std_log_process_*.txt"))
        total = sum(f.stat().st_size for f in files)
        print(
            f"wrote {len(files)} logs, {total / 2**30:.2f} GiB, in {time.perf_counter() - tic:.1f} s"
        )

        found = diagnose_folder(root)
        assert found.culprits == [CULPRIT], found.verdict
        print(f"verdict: {found.verdict[:150]}")

        def ours() -> None:
            diagnose_folder(root)

        def grep() -> None:
            subprocess.run(["grep", "-c", "Traceback", *map(str, files)], capture_output=True)

        def read_all() -> None:
            for path in files:
                path.read_bytes()

        ratio, mine, theirs = alternated(ours, grep, pairs=5, warm=1)
        print(
            figure(
                "diagnose 64 x 20 MB logs",
                ratio,
                "grep -c Traceback",
                "under 2 s on 2 cores",
                f"{mine:.2f} s vs {theirs:.2f} s",
            )
        )
        ratio, mine, theirs = alternated(ours, read_all, pairs=5, warm=1)
        print(
            figure(
                "diagnose 64 x 20 MB logs",
                ratio,
                "reading each file whole (Python)",
                scale=f"{mine:.2f} s vs {theirs:.2f} s",
            )
        )
        print(load())


if __name__ == "__main__":
    main()
