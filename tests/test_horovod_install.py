"""``python -m jupyter_distcomp.horovod_install`` (``make horovod``): what it reads from
``horovodrun --check-build`` and ``mpiexec --version``, the cache's key, what it says when a
compiler or cmake is missing, and that a second run does nothing."""

from __future__ import annotations

import subprocess
import sys
import sysconfig

import pytest

from jupyter_distcomp.horovod_install import (
    MISSING,
    HorovodInstallError,
    cache_key,
    has_torch_and_mpi,
    mpi_version,
    prerequisites,
)

from .horovod_support import horovod  # noqa: F401  (the fixture)

#: ``horovodrun --check-build`` of the wheel `make horovod` builds (Horovod 0.28.1)
CHECK_BUILD = """\
Horovod v0.28.1:

Available Frameworks:
    [ ] TensorFlow
    [X] PyTorch
    [ ] MXNet

Available Controllers:
    [X] MPI
    [X] Gloo

Available Tensor Operations:
    [ ] NCCL
    [ ] DDL
    [ ] CCL
    [X] MPI
    [X] Gloo
"""


def test_check_build_needs_pytorch_among_the_frameworks_and_mpi_among_the_controllers():
    assert has_torch_and_mpi(CHECK_BUILD)
    assert not has_torch_and_mpi(CHECK_BUILD.replace("[X] PyTorch", "[ ] PyTorch"))
    # MPI as a tensor operation alone is not the MPI controller the mpi launcher needs
    assert not has_torch_and_mpi(
        CHECK_BUILD.replace(
            "    [X] MPI\n    [X] Gloo\n\nAvailable T", "    [ ] MPI\n    [X] Gloo\n\nAvailable T"
        )
    )
    assert not has_torch_and_mpi("")


def test_the_cache_is_keyed_by_horovod_torch_mpi_python_and_platform():
    assert mpi_version("mpiexec (Open MPI) 5.0.11\n\nReport bugs to ...") == "openmpi-5.0.11"
    assert (
        mpi_version("HYDRA build details:\n    Version:  4.2.0\nMPICH Version: 4.2.0")
        == "mpich-4.2.0"
    )
    assert mpi_version("") == "mpi-unknown"
    key = cache_key("2.13.0+cpu", "openmpi-5.0.11")
    python = f"cp{sys.version_info.major}{sys.version_info.minor}"
    platform = sysconfig.get_platform().replace("-", "_").replace(".", "_")
    assert key == f"horovod-0.28.1-torch-2.13.0+cpu-openmpi-5.0.11-{python}-{platform}"


def test_a_missing_compiler_and_cmake_stop_it_with_the_fix(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))  # this environment's bin/ (mpicxx) is added
    monkeypatch.delenv("CXX", raising=False)
    with pytest.raises(HorovodInstallError) as caught:
        prerequisites()
    assert caught.value.status == MISSING
    said = str(caught.value)
    assert "lacks a C++ compiler (apt-get install g++) and cmake 3.13 or newer" in said
    assert "mpicxx" not in said, "Open MPI's wrapper comes with this environment"
    assert "Fix: install them, then run this again (`make horovod`)." in said


@pytest.mark.slow
def test_a_second_run_does_nothing(horovod):  # noqa: F811
    done = subprocess.run(
        [sys.executable, "-m", "jupyter_distcomp.horovod_install"],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == (
        "Horovod with PyTorch and MPI is installed already (horovodrun --check-build)."
    )
