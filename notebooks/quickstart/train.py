"""The MPI quickstart's command (notebooks/mpi_quickstart.ipynb), as a script.

Azure ML's mpi launcher (and ``%distcomp command`` or the panel's "run command" locally)
starts this once per rank under mpiexec: the same allreduce the notebook ran cell by cell,
then each rank writes what it computed to the model folder.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import numpy as np
from mpi4py import MPI


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--scale", type=int, default=1)
    parser.add_argument("--model-dir", required=True)
    args = parser.parse_args()

    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    mine = np.array([(rank + 1.0) * args.scale])
    total = np.zeros(1)
    comm.Allreduce(mine, total, op=MPI.SUM)
    expected = args.scale * size * (size + 1) / 2
    assert total[0] == expected, (total[0], expected)
    local = os.environ["OMPI_COMM_WORLD_LOCAL_RANK"]
    print(f"rank {rank} of {size} (local rank {local}): allreduce sum = {total[0]:g}", flush=True)

    out = Path(args.model_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"rank{rank}.json").write_text(json.dumps({"rank": rank, "sum": total[0]}))


if __name__ == "__main__":
    main()
