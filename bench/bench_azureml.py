"""Azure ML figures: `%load_ext` is not slowed by the Azure ML support, and building the job.

1. `%load_ext jupyter_distcomp` in fresh interpreters, without and with importing our
   `jupyter_distcomp.azureml` package afterwards, against `import azure.ai.ml` (what an eager
   import would add); each run reports whether azure.ai.ml is in sys.modules.
2. Build + validate the job for the largest public spec with `to_azureml_job`, against
   azure-ai-ml's own `command(...)` + validation for the equivalent hand-written job, measured
   in this same run (ratio ours / azure-ai-ml).
3. `submit` over HTTP to the local stand-in (each answer delayed 50 ms, a round trip to
   Azure), with and without the preflight of the layout against the compute.

Run: .venv/bin/python bench/bench_azureml.py
"""

from __future__ import annotations

import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
SPECS = sorted((ROOT.parent / "shared" / "specs" / "public").glob("*.yaml")) or sorted(
    (ROOT / "tests" / "data" / "public").glob("*.yaml")
)

PROBE = """
import json, sys, time
from IPython.core.interactiveshell import InteractiveShell
shell = InteractiveShell.instance()
t0 = time.perf_counter()
shell.run_line_magic("load_ext", "jupyter_distcomp")
t1 = time.perf_counter()
loaded = "azure.ai.ml" in sys.modules
if MODE == "azureml_package":
    import jupyter_distcomp.azureml
elif MODE == "azure_ai_ml":
    import azure.ai.ml
t2 = time.perf_counter()
print(json.dumps({"load_ext": t1 - t0, "after": t2 - t1, "azure_after_load_ext": loaded,
                  "azure_at_end": "azure.ai.ml" in sys.modules}))
"""


def probe(mode: str, runs: int) -> dict:
    results = []
    for _ in range(runs):
        out = subprocess.run(
            [sys.executable, "-c", f"MODE = {mode!r}\n{PROBE}"],
            capture_output=True,
            text=True,
            check=True,
            cwd=ROOT,
        ).stdout
        results.append(json.loads(out.strip().splitlines()[-1]))
    return {
        "load_ext": statistics.median(r["load_ext"] for r in results),
        "after": statistics.median(r["after"] for r in results),
        "azure_after_load_ext": any(r["azure_after_load_ext"] for r in results),
        "azure_at_end": all(r["azure_at_end"] for r in results),
    }


def startup(runs: int = 5) -> None:
    plain = probe("plain", runs)
    package = probe("azureml_package", runs)
    eager = probe("azure_ai_ml", runs)
    print(f"%load_ext jupyter_distcomp                 median {plain['load_ext'] * 1000:7.1f} ms")
    print(
        f"  + import jupyter_distcomp.azureml         median {package['after'] * 1000:7.1f} ms "
        f"(azure.ai.ml imported: {package['azure_at_end']})"
    )
    print(
        f"  + import azure.ai.ml (an eager import)    median {eager['after'] * 1000:7.1f} ms "
        f"= {eager['after'] / plain['load_ext']:.1f}x the whole %load_ext"
    )
    leaked = plain["azure_after_load_ext"] or package["azure_at_end"]
    print(f"azure.ai.ml in sys.modules after %load_ext: {leaked} (must be False)")
    if leaked:
        raise SystemExit("azure.ai.ml was imported by %load_ext or by jupyter_distcomp.azureml")


def _median_time(func, runs: int) -> float:
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        func()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def build_job(runs: int = 30) -> None:
    from azure.ai.ml import Input, MpiDistribution, command
    from azure.ai.ml.entities import BuildContext, Environment

    from jupyter_distcomp.azureml import to_azureml_job
    from tests.azure_standin import prepare_spec, required_values

    largest = max(SPECS, key=lambda p: p.stat().st_size)
    folder = Path(tempfile.mkdtemp(prefix="bench-azureml-"))
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            component = prepare_spec(largest, folder)
            component.runsettings.resource_layout.configure(
                instance_count=4, process_count_per_node=2
            )
            values = required_values(component)
            ours = to_azureml_job(component, inputs=values, compute="cpu-cluster")

            # the same job written by hand with azure-ai-ml, from what ours produced
            literal = {k: v._data for k, v in ours.inputs.items() if not hasattr(v._data, "path")}
            data = {
                k: Input(type=v._data.type, path=v._data.path)
                for k, v in ours.inputs.items()
                if hasattr(v._data, "path")
            }
            env = component.environment
            dockerfile = folder / env.dockerfile

            def by_hand():
                job = command(
                    command=ours.command,
                    code=str(folder),
                    inputs={**literal, **data},
                    outputs={n: {"type": "uri_folder"} for n in component.outputs},
                    environment=Environment(
                        build=BuildContext(
                            path=str(dockerfile.parent), dockerfile_path=dockerfile.name
                        )
                    ),
                    compute="cpu-cluster",
                    instance_count=4,
                    distribution=MpiDistribution(process_count_per_instance=2),
                    display_name=component.display_name,
                    tags={str(k): str(v) for k, v in component.tags.items()},
                )
                assert job._validate().passed
                job._to_job()._validate()

            def ours_build():
                to_azureml_job(component, inputs=values, compute="cpu-cluster")

            by_hand()
            ours_build()
            t_hand = _median_time(by_hand, runs)
            t_ours = _median_time(ours_build, runs)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    print(
        f"build + validate the job for {largest.name} ({len(component.inputs)} inputs): "
        f"ours median {t_ours * 1000:.1f} ms, azure-ai-ml command() + validate by hand "
        f"{t_hand * 1000:.1f} ms, ratio {t_ours / t_hand:.2f}"
    )


def submit_preflight(runs: int = 9, latency: float = 0.05) -> None:
    """Submit with and without the preflight, over HTTP to the stand-in, each answer delayed
    by ``latency`` (a network round trip); the preflight's own requests are counted."""
    from jupyter_distcomp.azureml import preflight, submit
    from tests.azure_standin import AzureStandIn

    folder = Path(tempfile.mkdtemp(prefix="bench-preflight-"))
    try:
        with warnings.catch_warnings(), AzureStandIn(latency=latency) as standin:
            warnings.simplefilter("ignore")
            component = prepare_gpu_spec(folder)
            ml_client = standin.ml_client(show_progress=False)

            def run(check: bool) -> None:
                submit(
                    component,
                    ml_client,
                    inputs={"data": "azureml://x/"},
                    compute="gpu",
                    preflight=check,
                )

            def requests(check: bool, fresh: bool = False) -> int:
                if fresh:
                    preflight._SIZES.clear()
                count = len(standin.requests)
                run(check)
                return len(standin.requests) - count

            total = requests(False)
            first = requests(True, fresh=True) - total
            cached = requests(True) - total
            times: dict[bool, list[float]] = {False: [], True: []}
            for _ in range(runs):  # interleaved, so load on the machine hits both alike
                for check in (False, True):
                    t0 = time.perf_counter()
                    run(check)
                    times[check].append(time.perf_counter() - t0)
            t_without, t_with = (statistics.median(times[c]) for c in (False, True))
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    print(
        f"submit (torch.distributed, {latency * 1000:.0f} ms a round trip, {total} requests): "
        f"median {t_without * 1000:.0f} ms without the preflight, {t_with * 1000:.0f} ms with "
        f"it (+{(t_with - t_without) * 1000:.0f} ms); the preflight sends {first} request(s) "
        f"the first time in a location, then {cached}"
    )


def prepare_gpu_spec(folder: Path):
    from jupyter_distcomp import load_component

    (folder / "train.py").write_text("print('training')\n")
    (folder / "spec.yaml").write_text(
        "name: train\ntype: DistributedComponent\ninputs:\n  data: {type: AnyDirectory}\n"
        "launcher:\n  type: torch.distributed\n  additional_arguments: python train.py "
        "--data {inputs.data}\nenvironment:\n  name: AzureML-Minimal\n"
    )
    component = load_component(folder / "spec.yaml")
    component.runsettings.resource_layout.configure(instance_count=2, process_count_per_node=4)
    return component


def main() -> None:
    startup()
    build_job()
    submit_preflight()


if __name__ == "__main__":
    main()
