#!/usr/bin/env bash
# The GPU lane in one run, on a machine with a CUDA GPU and torch installed, from the
# repository root: the GPU tests (tests/test_gpu.py) and the ledger's cost on NCCL
# (bench/bench_ledger_gpu.py). Everything it writes goes under $OUT (default
# /tmp/gpu-check): env.log, gpu-tests.log, bench.log; a summary ends its output.
#
#   OUT=/tmp/gpu-check bash bench/gpu_check.sh
#
# Wheels in .whl/ (no network needed) are installed first, into the Python that runs it
# (so Open MPI's mpiexec lands beside that python3): the package's dependencies, and
# pytest, pluggy, iniconfig, pytest-timeout and psutil for the tests. At most ~6 minutes:
# each test 150 s, the tests 300 s, the bench 90 s.
set -u
OUT=${OUT:-/tmp/gpu-check}
PY=${PYTHON:-python3}
mkdir -p "$OUT"
cd "$(dirname "$0")/.."

if compgen -G ".whl/*.whl" >/dev/null; then
    "$PY" -m pip install -q --no-index --no-deps --no-compile .whl/*.whl >"$OUT/pip.log" 2>&1 ||
        echo "gpu_check: installing .whl/*.whl failed, see pip.log" | tee -a "$OUT/summary.log"
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONDONTWRITEBYTECODE=1

{
    date -u
    nvidia-smi -L 2>&1
    nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv 2>&1
    nproc
    "$PY" -c 'import sys, torch; print(sys.version.split()[0], torch.__version__,
        "cuda", torch.cuda.is_available(), torch.cuda.device_count(),
        [n for n in dir(torch._C._distributed_c10d) if "dump" in n])' 2>&1
    "$PY" -c 'import pytest, psutil, numpy, yaml, jupyter_distcomp, ipyparallel, mpi4py
print("imports ok: pytest", pytest.__version__)' 2>&1
} >"$OUT/env.log"
cat "$OUT/env.log"

TIMEOUT_ARG=""
"$PY" -c "import pytest_timeout" 2>/dev/null && TIMEOUT_ARG="--timeout=150"
# the test file by name: collecting tests/ would import the browser and Azure tests' modules
timeout -k 10 300 "$PY" -m pytest tests/test_gpu.py -m gpu -v -p no:cacheprovider -rfEs \
    $TIMEOUT_ARG 2>&1 | tee "$OUT/gpu-tests.log"
echo "tests exit: ${PIPESTATUS[0]}" | tee -a "$OUT/gpu-tests.log"

timeout -k 10 90 "$PY" bench/bench_ledger_gpu.py --backend nccl >"$OUT/bench.log" 2>&1
echo "bench exit: $?" >>"$OUT/bench.log"

{
    echo "=== summary"
    grep -E "::test_.* (PASSED|FAILED|ERROR|SKIPPED)|^(FAILED|ERROR|SKIPPED) |passed|failed|tests exit" \
        "$OUT/gpu-tests.log" | tail -20
    cat "$OUT/bench.log"
} | tee -a "$OUT/summary.log"
exit 0
