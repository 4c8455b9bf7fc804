"""TF_CONFIG's empty ``"ps": []``: what Azure ML sends, why a script crashes on it, the fix.

Azure ML puts ``"ps": []`` into TF_CONFIG even when a job has no parameter servers, and
TensorFlow 2.13 and later crash in native code (SIGSEGV) when MultiWorkerMirroredStrategy
reads such a cluster. The local ranks get the same TF_CONFIG, so a script meets the crash on
the laptop as it would on Azure; this module names the cause and the fix in the error.
Azure/azureml-examples' own TensorFlow job removes the key first (``fix_tf_config``).
"""

from __future__ import annotations

import json
import signal

FIX = """import json, os
tf_config = json.loads(os.environ["TF_CONFIG"])
if not tf_config["cluster"].get("ps"):
    tf_config["cluster"].pop("ps", None)  # Azure ML sends "ps": []
os.environ["TF_CONFIG"] = json.dumps(tf_config)"""


def has_empty_ps(env: dict[str, str]) -> bool:
    """True when the rank's TF_CONFIG lists ``"ps": []``."""
    try:
        cluster = json.loads(env.get("TF_CONFIG", "")).get("cluster", {})
    except (ValueError, AttributeError):
        return False
    return isinstance(cluster, dict) and cluster.get("ps") == []


def is_segfault(death: str | int | None) -> bool:
    """A death by SIGSEGV: a return code (-11), or mpiexec's / our wording of it."""
    if isinstance(death, int):
        return death == -signal.SIGSEGV
    text = (death or "").lower()
    return "sigsegv" in text or "segmentation fault" in text or "signal 11" in text


def empty_ps_hint(envs: list[dict[str, str]], deaths: list[str | int | None]) -> str:
    """The explanation and fix when a rank with ``"ps": []`` died by SIGSEGV, else ``""``."""
    if not any(has_empty_ps(env) for env in envs) or not any(map(is_segfault, deaths)):
        return ""
    return (
        'TF_CONFIG holds "ps": [] (no parameter servers), exactly as Azure ML sends it, and '
        "TensorFlow 2.13 and later crash (SIGSEGV) when MultiWorkerMirroredStrategy reads "
        "it: the job would crash the same way on Azure ML. Fix the script: before creating "
        "the strategy, drop the empty list, as Azure's own TensorFlow example does:\n" + FIX
    )


__all__ = ["FIX", "empty_ps_hint", "has_empty_ps", "is_segfault"]
