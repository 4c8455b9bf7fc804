"""The wheel carries the prebuilt JupyterLab extension, and a clean environment with the wheel
alone (no Node.js on PATH) lists it enabled: users never need Node.js.

The wheel build reuses the extension that `pip install -e .` built (skip-if-exists in
pyproject.toml), so this costs a wheel build (~30 s) and a venv with jupyterlab (~40 s from
pip's cache), not a JavaScript build.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import venv
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BUILT = ROOT / "jupyter_distcomp" / "labextension"
#: the wheel's version is the extension's (hatch-nodejs-version, pyproject.toml)
VERSION = json.loads((ROOT / "labextension" / "package.json").read_text())["version"]
SHARE = f"jupyter_distcomp-{VERSION}.data/data/share/jupyter/labextensions/jupyter-distcomp"
DIST_INFO = f"jupyter_distcomp-{VERSION}.dist-info"

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    assert (BUILT / "static" / "style.js").exists(), (
        "the extension is not built: `pip install -e .` (or `jlpm build:prod` in labextension/)"
    )
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(out), str(ROOT)],
        check=True,
        timeout=600,
    )
    (found,) = out.glob("jupyter_distcomp-*.whl")
    assert found.name.startswith(f"jupyter_distcomp-{VERSION}-"), found.name
    return found


def test_wheel_carries_the_license_and_the_version_of_package_json(wheel):
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        assert f"{DIST_INFO}/licenses/LICENSE" in names
        license_text = archive.read(f"{DIST_INFO}/licenses/LICENSE").decode()
        assert license_text == (ROOT / "LICENSE").read_text()
        metadata = archive.read(f"{DIST_INFO}/METADATA").decode()
        assert f"\nVersion: {VERSION}\n" in metadata
        assert "\nLicense-Expression: MIT\n" in metadata
        assert "\nLicense-File: LICENSE\n" in metadata
        package = json.loads(archive.read(f"{SHARE}/package.json"))
        assert package["version"] == VERSION


def test_wheel_contains_the_built_extension(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    for required in ("package.json", "install.json", "static/style.js"):
        assert f"{SHARE}/{required}" in names, required
    assert any(re.match(rf"{SHARE}/static/remoteEntry\.[0-9a-f]+\.js$", n) for n in names)
    assert f"{SHARE}/schemas/jupyter-distcomp/plugin.json" in names
    with zipfile.ZipFile(wheel) as archive:
        package = json.loads(archive.read(f"{SHARE}/package.json"))
        assert package["name"] == "jupyter-distcomp"
        assert package["jupyterlab"]["_build"]["load"].startswith("static/remoteEntry.")
        # the spec schema is the Python package's own file, bundled into the extension
        schema = json.loads(
            archive.read("jupyter_distcomp/core/spec_parsing/component.schema.json")
        )
        chunks = [archive.read(n).decode() for n in names if n.startswith(f"{SHARE}/static/")]
        assert any(schema["title"] in chunk and schema["$id"] in chunk for chunk in chunks)
        # and so are the names the kernel and the extension share
        contracts = json.loads(archive.read("jupyter_distcomp/contracts.json"))
        assert any(
            "v2_distributions" in chunk and contracts["comm"]["target"] in chunk for chunk in chunks
        )


def test_clean_venv_without_node_lists_the_extension_enabled(wheel, tmp_path):
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    python = env_dir / "bin" / "python"
    pip = [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    # the wheel alone, plus what `jupyter labextension list` itself needs
    subprocess.run([*pip, "--no-deps", str(wheel)], check=True, timeout=300)
    subprocess.run([*pip, "jupyterlab>=4,<5"], check=True, timeout=900)
    clean_env = {
        "PATH": f"{env_dir / 'bin'}:/usr/bin/false-dir-without-node",
        "HOME": str(tmp_path),
        "JUPYTER_CONFIG_DIR": str(tmp_path / "config"),
        "JUPYTER_DATA_DIR": str(tmp_path / "data"),
        "LANG": os.environ.get("LANG", "C.UTF-8"),
    }
    node = subprocess.run(
        [str(python), "-c", "import shutil; print(shutil.which('node'))"],
        env=clean_env,
        capture_output=True,
        text=True,
        check=True,
    )
    assert node.stdout.strip() == "None"
    listed = subprocess.run(
        [str(env_dir / "bin" / "jupyter"), "labextension", "list"],
        env=clean_env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    text = re.sub(r"\x1b\[[0-9;]*m", "", listed.stdout + listed.stderr)
    assert listed.returncode == 0, text
    assert re.search(rf"jupyter-distcomp v{re.escape(VERSION)} enabled\s+OK", text), text
    assert str(env_dir) in text  # found in the clean venv's share/, not elsewhere
