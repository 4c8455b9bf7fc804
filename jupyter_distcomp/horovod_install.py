"""``python -m jupyter_distcomp.horovod_install`` (``make horovod``): Horovod for PyTorch over
MPI in this Python environment, for the ``mpi`` launcher.

Horovod's last release (0.28.1, an sdist) no longer builds against PyTorch 2.x: its two
CMake files ask for C++14, and PyTorch's headers need C++17 (horovod issues #3996 and
#4014; fixed on its master, never released). This fetches that sdist from PyPI (checked
against its SHA-256), sets those two lines to C++17 in a temporary copy, builds it against
the environment's torch and Open MPI (PyTorch and MPI on, TensorFlow and MXNet off), and
installs the wheel without changing the version of any package already installed.

The wheel is cached (``~/.cache/jupyter-distcomp/wheels/``, keyed by Horovod's, torch's and
Open MPI's versions, the Python and the platform), so a second environment of the same kind
installs it in seconds. Nothing is done when ``horovodrun --check-build`` already shows
PyTorch and MPI. The build needs a C++ compiler and cmake; without them it stops at once and
says how to get them (exit status 3); any other failure is exit status 2.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import tempfile
import time
from pathlib import Path

VERSION = "0.28.1"
#: the sdist on PyPI (https://pypi.org/project/horovod/0.28.1/#files)
SHA256 = "92a43f5a94c43907a56805bad15f19700c62ffc83b7ca483f9e104e229f67ef0"
#: the files whose C++ standard is raised, each holding the line once
PATCHED = ("CMakeLists.txt", "horovod/torch/CMakeLists.txt")
CXX14, CXX17 = "set(CMAKE_CXX_STANDARD 14)", "set(CMAKE_CXX_STANDARD 17)"
BUILD_FLAGS = {
    "HOROVOD_WITH_PYTORCH": "1",
    "HOROVOD_WITH_MPI": "1",
    "HOROVOD_WITHOUT_TENSORFLOW": "1",
    "HOROVOD_WITHOUT_MXNET": "1",
}
MISSING, FAILED = 3, 2


class HorovodInstallError(Exception):
    """Why Horovod is not installed, and the fix; ``status`` is the command's exit status."""

    def __init__(self, message: str, status: int = FAILED) -> None:
        super().__init__(message)
        self.status = status


def _bin() -> Path:
    return Path(sys.executable).parent


def _environment() -> dict[str, str]:
    """The build's variables: this environment's programs (mpicxx, cmake) first on PATH."""
    env = dict(os.environ)
    env["PATH"] = f"{_bin()}{os.pathsep}{env.get('PATH', '')}"
    return env


def check_build() -> tuple[bool, str]:
    """Whether ``horovodrun --check-build`` shows PyTorch and the MPI controller, and what
    it printed ('' where there is no horovodrun)."""
    horovodrun = _bin() / "horovodrun"
    if not horovodrun.exists():
        return False, ""
    done = subprocess.run(
        [str(horovodrun), "--check-build"],
        capture_output=True,
        text=True,
        env=_environment(),
        timeout=300,
        check=False,
    )
    text = done.stdout + done.stderr
    return done.returncode == 0 and has_torch_and_mpi(text), text


def has_torch_and_mpi(text: str) -> bool:
    """``horovodrun --check-build``'s text marks PyTorch among the frameworks and MPI among
    the controllers."""
    sections: dict[str, list[str]] = {}
    current = ""
    for line in text.splitlines():
        if line.strip().endswith(":") and not line.startswith(" "):
            current = line.strip()
        elif line.strip().startswith("[X]"):
            sections.setdefault(current, []).append(line.strip()[3:].strip())
    return "PyTorch" in sections.get("Available Frameworks:", []) and "MPI" in sections.get(
        "Available Controllers:", []
    )


def _version_of(command: list[str]) -> str:
    try:
        done = subprocess.run(
            command, capture_output=True, text=True, env=_environment(), timeout=60, check=False
        )
    except OSError:
        return ""
    return (done.stdout + done.stderr).strip()


def mpi_version(text: str) -> str:
    """``openmpi-5.0.11`` from ``mpiexec --version``'s text (``mpich-4.2.0`` for MPICH)."""
    for pattern, name in (
        (r"Open MPI\)?\s*v?(\d[\w.]*)", "openmpi"),
        (r"MPICH[^\d]*(\d[\w.]*)", "mpich"),
        (r"Intel\(R\) MPI[^\d]*(\d[\w.]*)", "intelmpi"),
    ):
        found = re.search(pattern, text)
        if found:
            return f"{name}-{found.group(1)}"
    return "mpi-unknown"


def torch_version() -> str:
    """The environment's torch (``2.13.0+cpu``), or the fix when it has none."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("torch")
    except PackageNotFoundError:
        raise HorovodInstallError(
            "Horovod for PyTorch is built against the environment's torch, and it has none. "
            "Fix: pip install torch (make test installs it), then run this again.",
            MISSING,
        ) from None


def prerequisites() -> None:
    """A C++ compiler, cmake and Open MPI's compiler wrapper, or the fix for each missing."""
    env_path = _environment()["PATH"]
    compiler = os.environ.get("CXX") or next(
        (c for c in ("c++", "g++", "clang++") if shutil.which(c, path=env_path)), ""
    )
    missing = []
    if not compiler or not shutil.which(compiler, path=env_path):
        missing.append("a C++ compiler (apt-get install g++)")
    if not shutil.which("cmake", path=env_path):
        missing.append("cmake 3.13 or newer (apt-get install cmake, or pip install 'cmake<4')")
    if not shutil.which("mpicxx", path=env_path):
        missing.append("Open MPI's mpicxx (pip install openmpi, a dependency of this package)")
    if missing:
        raise HorovodInstallError(
            f"Horovod {VERSION} is compiled from its source, and this machine lacks "
            f"{' and '.join(missing)}. Fix: install {'them' if len(missing) > 1 else 'it'}, "
            "then run this again (`make horovod`).",
            MISSING,
        )


def cache_key(torch: str, mpi: str) -> str:
    """``horovod-0.28.1-torch-2.13.0+cpu-openmpi-5.0.11-cp311-linux-x86_64``."""
    python = f"cp{sys.version_info.major}{sys.version_info.minor}"
    platform = sysconfig.get_platform().replace("-", "_").replace(".", "_")
    return f"horovod-{VERSION}-torch-{torch}-{mpi}-{python}-{platform}"


def cache_dir() -> Path:
    root = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return root / "jupyter-distcomp" / "wheels"


def _pip(*args: str, log: Path | None = None, env: dict[str, str] | None = None) -> None:
    command = [sys.executable, "-m", "pip", "--disable-pip-version-check", *args]
    if log is None:
        done = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
        status, said = done.returncode, done.stdout + done.stderr
    else:
        with open(log, "a") as out:
            logged = subprocess.run(command, stdout=out, stderr=subprocess.STDOUT, env=env)
        status, said = logged.returncode, log.read_text(errors="replace")
    if status != 0:
        raise HorovodInstallError(
            f"`pip {args[0]}` failed for Horovod {VERSION}:\n{said.strip()[-3000:]}"
            + (f"\n(the whole log: {log})" if log is not None else "")
        )


def fetch_and_patch(folder: Path) -> Path:
    """The release's sdist, fetched with pip and checked, unpacked in ``folder`` with its
    C++ standard raised to 17; the source tree."""
    _pip("download", "--no-deps", "--no-binary", ":all:", f"horovod=={VERSION}", "-d", str(folder))
    archive = folder / f"horovod-{VERSION}.tar.gz"
    digest = hashlib.sha256(archive.read_bytes()).hexdigest()
    if digest != SHA256:
        raise HorovodInstallError(
            f"The sdist of horovod {VERSION} from the package index is not the released one "
            f"(SHA-256 {digest}, expected {SHA256}). Fix: check the index pip uses."
        )
    with tarfile.open(archive) as tar:
        tar.extractall(folder, filter="data")
    source = folder / f"horovod-{VERSION}"
    for name in PATCHED:
        path = source / name
        text = path.read_text()
        if text.count(CXX14) != 1:
            raise HorovodInstallError(f"{name} of horovod {VERSION} is not as expected: no patch.")
        path.write_text(text.replace(CXX14, CXX17))
    return source


def build(source: Path, target: Path, log: Path) -> Path:
    """The wheel of ``source`` built into ``target`` with every core of this machine."""
    log.write_text("")
    env = _environment()
    env.update(BUILD_FLAGS)
    env["MAKEFLAGS"] = f"-j{os.cpu_count() or 1}"
    _pip("wheel", "-v", "--no-deps", "--no-build-isolation", "-w", str(target), str(source),
         log=log, env=env)  # fmt: skip
    wheels = sorted(target.glob(f"horovod-{VERSION}-*.whl"))
    if not wheels:
        raise HorovodInstallError(f"pip built no wheel of horovod {VERSION} (log: {log})")
    return wheels[0]


def install(wheel: Path, folder: Path) -> None:
    """``wheel`` and what it needs, every installed package held at its version."""
    from importlib.metadata import distributions

    pins = sorted(
        {
            f"{d.metadata['Name']}=={d.version}"
            for d in distributions()
            if d.metadata["Name"] and d.metadata["Name"].lower() != "horovod"
        }
    )
    constraints = folder / "installed.txt"
    constraints.write_text("\n".join(pins) + "\n")
    _pip("install", "-q", "-c", str(constraints), str(wheel))


def ensure(quiet: bool = False) -> str:
    """Horovod with PyTorch and MPI in this environment (see the module's text); what was done."""
    ready, _ = check_build()
    if ready:
        return "Horovod with PyTorch and MPI is installed already (horovodrun --check-build)."
    torch = torch_version()
    mpi = mpi_version(_version_of(["mpiexec", "--version"]))
    key = cache_key(torch, mpi)
    cached = cache_dir() / key
    cached.mkdir(parents=True, exist_ok=True)
    import fcntl

    with open(cached / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one build at a time; the second finds the wheel
        wheels = sorted(cached.glob(f"horovod-{VERSION}-*.whl"))
        said = f"the cached wheel {wheels[0]}" if wheels else ""
        with tempfile.TemporaryDirectory(prefix="distcomp-horovod-") as scratch:
            folder = Path(scratch)
            if not wheels:
                prerequisites()
                if not quiet:
                    print(
                        f"Building Horovod {VERSION} for torch {torch} and {mpi} "
                        f"({os.cpu_count()} cores; about 5 minutes on 2)...",
                        flush=True,
                    )
                started = time.monotonic()
                source = fetch_and_patch(folder)
                built = build(source, folder / "wheel", cached / "build.log")
                partial = cached / f"{built.name}.partial"  # a killed copy is no wheel
                shutil.copyfile(built, partial)
                os.replace(partial, cached / built.name)
                wheels = [cached / built.name]
                said = f"built in {time.monotonic() - started:.0f} s, cached as {wheels[0]}"
            install(wheels[0], folder)
    ready, text = check_build()
    if not ready:
        raise HorovodInstallError(
            f"Horovod {VERSION} was installed from {wheels[0]}, but `horovodrun --check-build` "
            f"does not show PyTorch and MPI:\n{text.strip()[-2000:]}\nFix: remove that wheel "
            "(its torch or MPI may have changed in place) and run this again."
        )
    return f"Horovod {VERSION} with PyTorch and MPI installed: {said}."


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m jupyter_distcomp.horovod_install", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--quiet", action="store_true", help="print only the outcome")
    args = parser.parse_args(argv)
    try:
        print(ensure(quiet=args.quiet))
    except HorovodInstallError as exc:
        print(f"horovod_install: {exc}", file=sys.stderr)
        return exc.status
    return 0


if __name__ == "__main__":
    sys.exit(main())
