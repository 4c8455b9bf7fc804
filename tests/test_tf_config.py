"""TF_CONFIG's empty "ps": []: Azure ML sends it, TensorFlow >= 2.13 crashes on it, and the
error of a local run says why and how to fix the script."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from jupyter_distcomp import load_component
from jupyter_distcomp.core.layout import rank_environments
from jupyter_distcomp.core.tf_config import FIX, empty_ps_hint
from jupyter_distcomp.errors import RankError
from jupyter_distcomp.local.command import run_command

SPEC = """\
name: tf_crash
type: DistributedComponent
code: code
launcher:
  type: tensorflow
  additional_arguments: python train.py
"""

#: a script as users write it from TensorFlow's docs, without Azure's fix
UNFIXED = """\
import tensorflow as tf
strategy = tf.distribute.MultiWorkerMirroredStrategy()
print("strategy created", flush=True)
"""


def test_the_hint_needs_an_empty_ps_and_a_segfault():
    envs = rank_environments("tensorflow", 2, 1, master_port="<p>")
    said = "process rank 1 with PID 7 on node x exited on signal 11 (Segmentation fault)."
    assert "TensorFlow 2.13 and later crash" in empty_ps_hint(envs, [None, said])
    assert FIX in empty_ps_hint(envs, [-11, 0])
    assert empty_ps_hint(envs, [1, 0]) == ""  # another failure: no such claim
    with_ps = rank_environments("tensorflow", 2, 1, master_port="<p>", parameter_server_count=1)
    assert empty_ps_hint(with_ps, [-11]) == ""


def test_the_fix_makes_the_config_tensorflow_accepts():
    env = rank_environments("tensorflow", 2, 1, master_port="<p>")[0]
    namespace = {"__name__": "fix"}
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TF_CONFIG", env["TF_CONFIG"])
        exec(compile(FIX, "fix", "exec"), namespace)
        import os

        assert "ps" not in json.loads(os.environ["TF_CONFIG"])["cluster"]


@pytest.mark.slow
def test_a_local_run_meets_the_crash_azure_would_and_is_told_the_fix(tmp_path):
    pytest.importorskip("tensorflow")
    (tmp_path / "code").mkdir()
    (tmp_path / "code" / "train.py").write_text(UNFIXED)
    (tmp_path / "spec.yaml").write_text(SPEC)
    component = load_component(tmp_path / "spec.yaml")
    component.runsettings.resource_layout.configure(instance_count=2)
    component = replace(component, environment_variables={"TF_CPP_MIN_LOG_LEVEL": "2"})
    with pytest.raises(RankError) as caught:
        run_command(component, stream=None, cwd=tmp_path, timeout=400)
    message = str(caught.value)
    assert "SIGSEGV" in message
    assert (
        'TF_CONFIG holds "ps": [] (no parameter servers), exactly as Azure ML sends it' in message
    )
    assert FIX in message
