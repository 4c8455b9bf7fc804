"""The JupyterLab extension's own checks, run by pytest so that `make test` runs them too:
its jest unit tests (first-line detection, schema -> diagnostics), and its palette templates
loaded by the kernel's load_component."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from jupyter_distcomp.spec import load_component

LABEXTENSION = Path(__file__).resolve().parent.parent / "labextension"
TEMPLATES = json.loads((LABEXTENSION / "templates" / "components.json").read_text())


@pytest.mark.parametrize("template", TEMPLATES, ids=[t["launcher"] for t in TEMPLATES])
def test_palette_template_is_a_spec_the_kernel_accepts(template):
    first, *body = template["lines"]
    name = first.split()[1]
    component = load_component("\n".join(body), source_name=f"%%distcomp {name}")
    assert component.name == name
    assert component.launcher_type == template["launcher"]
    argv = component.render_command({"epochs": 3}, {"model_dir": "/tmp/model"})
    assert argv[:4] == ["python", argv[1], "--epochs", "3"] and "--data" not in argv


@pytest.mark.slow
def test_jest_unit_tests_pass():
    jlpm = shutil.which("jlpm", path=str(Path(sys.executable).parent)) or shutil.which("jlpm")
    assert jlpm, "jlpm (from the jupyter-builder package) is missing from the venv"
    assert (LABEXTENSION / "node_modules").is_dir(), (
        "labextension/node_modules is missing: `pip install -e .` runs `jlpm install` there"
    )
    env = {**os.environ, "CI": "1", "FORCE_COLOR": "0"}
    result = subprocess.run(
        [jlpm, "jest", "--ci"],
        cwd=LABEXTENSION,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert (
        "Tests:" in result.stderr
        and "failed" not in result.stderr.split("Tests:")[1].splitlines()[0]
    )
