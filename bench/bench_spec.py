"""Foundation figures: what `%load_ext jupyter_distcomp` adds to `import IPython`, and how long
loading and validating the largest public spec takes.

Each start-up figure comes from fresh interpreters, measured in this same run, so the ratio
compares like with like. Run: .venv/bin/python bench/bench_spec.py
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SPECS = sorted((ROOT.parent / "shared" / "specs" / "public").glob("*.yaml")) or sorted(
    (ROOT / "tests" / "data" / "public").glob("*.yaml")
)

PROBE = """
import json, time
t0 = time.perf_counter()
import IPython
from IPython.core.interactiveshell import InteractiveShell
shell = InteractiveShell.instance()
t1 = time.perf_counter()
shell.run_line_magic("load_ext", "jupyter_distcomp")
t2 = time.perf_counter()
print(json.dumps({"ipython": t1 - t0, "load_ext": t2 - t1}))
"""


def startup(runs: int = 7) -> tuple[float, float]:
    ipython, load_ext = [], []
    for _ in range(runs):
        out = subprocess.run(
            [sys.executable, "-c", PROBE], capture_output=True, text=True, check=True
        ).stdout
        figures = json.loads(out.strip().splitlines()[-1])
        ipython.append(figures["ipython"])
        load_ext.append(figures["load_ext"])
    return statistics.median(ipython), statistics.median(load_ext)


def spec_load(runs: int = 500) -> tuple[str, float, float]:
    from jupyter_distcomp import SpecWarning, load_component

    largest = max(SPECS, key=lambda p: p.stat().st_size)
    text = largest.read_text()
    times = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SpecWarning)
        first = time.perf_counter()
        load_component(text)
        first = time.perf_counter() - first
        for _ in range(runs):
            t0 = time.perf_counter()
            load_component(text)
            times.append(time.perf_counter() - t0)
    return largest.name, statistics.median(times), first


def main() -> None:
    ipython, load_ext = startup()
    print(f"import IPython + shell       median {ipython * 1000:7.1f} ms")
    print(
        f"%load_ext jupyter_distcomp   median {load_ext * 1000:7.1f} ms   "
        f"(ratio to import IPython {load_ext / ipython:.3f}; target: adds < 300 ms)"
    )
    name, median, first = spec_load()
    print(
        f"load + validate {name}: median {median * 1000:.2f} ms "
        f"(first call, with imports: {first * 1000:.1f} ms; target < 5 ms)"
    )


if __name__ == "__main__":
    main()
