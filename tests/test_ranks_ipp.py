"""The ipyparallel adapter: what it relies on still exists, and nothing else reaches
ipyparallel. Fast: no process is started."""

from __future__ import annotations

import asyncio
import inspect
import re
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from jupyter_distcomp.local.ranks import ipp
from jupyter_distcomp.rank_side import rank_setup

from .relied_on_support import resolve

RANKS = Path(ipp.__file__).parent


@pytest.mark.parametrize(
    ("dotted", "user"),
    [(d, "local/ranks/ipp.py") for d in ipp.RELIES_ON]
    + [(d, "rank_side/rank_setup.py") for d in rank_setup.RELIES_ON],
)
def test_what_the_adapters_rely_on_exists(dotted, user):
    try:
        resolve(dotted)
    except (ImportError, AttributeError) as exc:
        pytest.fail(f"{dotted} no longer exists: {exc!r}; adapt {user}")


@pytest.mark.parametrize("dotted", ipp.COROUTINES)
def test_the_cluster_methods_it_drives_are_coroutines(dotted):
    assert dotted in ipp.RELIES_ON
    assert inspect.iscoroutinefunction(resolve(dotted)), f"{dotted} is no coroutine any more"


def test_ipyparallel_is_major_version_nine():
    import ipyparallel

    assert ipyparallel.__version__.split(".")[0] == "9"


def test_only_the_adapter_imports_ipyparallel():
    pattern = re.compile(r"^\s*(import ipyparallel|from ipyparallel\b)", re.M)
    offenders = [
        path.name
        for path in sorted(RANKS.glob("*.py"))
        if path.name != "ipp.py" and pattern.search(path.read_text())
    ]
    assert offenders == []


def test_no_private_ipyparallel_attribute_outside_the_adapter():
    names = re.compile(r"\._(in_thread|children|engine_set|mpiexec_alive)\b")
    offenders = [
        f"{path.name}: {match.group(0)}"
        for path in sorted(RANKS.glob("*.py"))
        if path.name != "ipp.py"
        for match in names.finditer(path.read_text())
    ]
    assert offenders == []


def test_one_shared_daemon_loop_runs_the_coroutines():
    async def where() -> str:
        await asyncio.sleep(0)
        return threading.current_thread().name

    assert ipp.run(where()) == "distcomp-ipyparallel"
    assert ipp.event_loop() is ipp.event_loop()
    threads = [t for t in threading.enumerate() if t.name == "distcomp-ipyparallel"]
    assert len(threads) == 1 and threads[0].daemon


def test_errors_of_a_coroutine_reach_the_caller():
    async def fail() -> None:
        raise ValueError("boom")

    with pytest.raises(ValueError, match="boom"):
        ipp.run(fail())


def test_the_cluster_config_uses_our_mpiexec_and_heartbeat():
    config = ipp.cluster_config(4)
    assert config.MPILauncher.mpi_cmd[: len(ipp.GUARD)] == ipp.GUARD
    assert f"--HeartMonitor.period={ipp.HEARTBEAT_MS}" in (
        config.LocalControllerLauncher.controller_args
    )
    assert config.MPIEngineSetLauncher.environment["PYTHONUNBUFFERED"] == "1"


def test_the_start_environment_is_mpiexecs_and_reaches_other_hosts():
    from jupyter_distcomp.machine.hosts import Placement

    start = {"PYTHONPATH": "/src", "PYTHONUNBUFFERED": "0"}
    local = ipp.cluster_config(4, start_env=start).MPIEngineSetLauncher.environment
    assert local["PYTHONPATH"] == "/src"
    assert local["PYTHONUNBUFFERED"] == "1", "the engines' own variables win"
    remote = ipp.cluster_config(2, Placement(("127.0.0.2", "127.0.0.3")), start_env=start)
    args = remote.MPILauncher.mpi_args
    assert ["-x", "PYTHONPATH"] in [args[i : i + 2] for i in range(len(args))]


def test_local_engines_start_beside_the_controller_without_a_nanny(tmp_path):
    from jupyter_distcomp.machine.hosts import Placement

    local = ipp.cluster_config(4)
    assert "--IPEngine.enable_nanny=False" in local.MPIEngineSetLauncher.engine_args
    # a rank on another host is signalled through its nanny
    remote = ipp.cluster_config(2, Placement(("127.0.0.2", "127.0.0.3")))
    assert "--IPEngine.enable_nanny=False" not in remote.MPIEngineSetLauncher.engine_args

    cluster = ipp.LocalCluster(4, str(tmp_path), 60)._cluster
    path = ipp.engine_connection_file(str(tmp_path), cluster.cluster_id)
    assert cluster.config.MPIEngineSetLauncher.engine_cmd == [*ipp.ENGINE_START, path]
    assert not cluster.send_engines_connection_env
    # the file the controller writes, by ipyparallel's own naming
    from ipyparallel.cluster.launcher import LocalControllerLauncher

    launcher = LocalControllerLauncher(profile_dir=str(tmp_path), cluster_id=cluster.cluster_id)
    assert launcher.connection_files["engine"] == path


def test_an_engine_reads_the_connection_only_once_it_is_whole(tmp_path):
    from jupyter_distcomp.rank_side import engine_start

    path = tmp_path / "engine.json"
    path.write_text('{"interface": "tcp://127.0.0.1", "regis')  # the controller is writing
    whole = '{"interface": "tcp://127.0.0.1", "registration": 5}'
    threading.Timer(0.2, path.write_text, (whole,)).start()
    assert engine_start.read_connection(str(path), wait=10) == whole
    with pytest.raises(SystemExit, match="no controller connection"):
        engine_start.read_connection(str(tmp_path / "never.json"), wait=0.1)


def test_serialization_is_ready_before_two_worlds_can_use_it_at_once():
    """ipyparallel imports its serialization table's types on first use, changing the table
    in place; once a client is ready, nothing in the table is left to import."""
    code = (
        "from ipyparallel.serialize import canning\n"
        "from jupyter_distcomp.local.ranks import ipp\n"
        "class Client: pass\n"
        "pending = lambda: [k for m in (canning.can_map, canning.uncan_map) for k in m "
        "if isinstance(k, str)]\n"
        "assert pending(), 'a fresh interpreter has types to import'\n"
        "ipp.ready_client(Client())\n"
        "print(pending())\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert (done.returncode, done.stdout.strip()) == (0, "[]"), done.stderr
