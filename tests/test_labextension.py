"""The JupyterLab extension's own checks, run by pytest so that `make test` runs them too:
its jest unit tests (first-line detection, schema -> diagnostics), its palette templates
loaded by the kernel's load_component, and the one version the wheel and extension share."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from jupyter_distcomp.core.spec_parsing import load_component

ROOT = Path(__file__).resolve().parent.parent
LABEXTENSION = ROOT / "labextension"
TEMPLATES = json.loads((LABEXTENSION / "templates" / "components.json").read_text())


def test_one_version_for_the_package_and_the_extension():
    """pyproject.toml takes the version from labextension/package.json (hatch-nodejs-version)."""
    import jupyter_distcomp

    source = json.loads((LABEXTENSION / "package.json").read_text())["version"]
    built = json.loads((ROOT / "jupyter_distcomp" / "labextension" / "package.json").read_text())
    assert jupyter_distcomp.__version__ == source == built["version"], (
        "reinstall (pip install -e .) after changing labextension/package.json's version"
    )


def test_the_version_is_read_only_when_asked_for():
    """%load_ext imports the package: importlib.metadata (tens of ms) waits for __version__."""
    code = (
        "import sys, jupyter_distcomp\n"
        "assert 'importlib.metadata' not in sys.modules\n"
        "print(jupyter_distcomp.__version__)"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert (
        result.stdout.strip() == json.loads((LABEXTENSION / "package.json").read_text())["version"]
    )


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
