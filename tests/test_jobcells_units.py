"""``%%distcomp run NAME --job JOB`` without a job: what each node's engines are told (the
ports where the tunnels end there), and what is refused before anything is reached.
End to end on a stand-in job: tests/test_job_cells.py."""

from __future__ import annotations

from jupyter_distcomp.local.jobcells import node_connection

#: an engine connection as ipyparallel 9's controller writes it (ports, key, interface)
CONNECTION = {
    "ssh": "",
    "interface": "tcp://127.0.0.1",
    "registration": 40001,
    "control": 40002,
    "mux": 40003,
    "task": 40004,
    "iopub": 40005,
    "hb_ping": 40006,
    "hb_pong": 40007,
    "broadcast": [40008, 40009],
    "key": "",
    "curve_serverkey": "a-public-key",
    "location": "10.0.0.5",
    "pack": "json",
    "unpack": "json",
    "signature_scheme": "hmac-sha256",
}


def test_each_port_becomes_where_its_tunnel_ends_on_the_node():
    ports = {port: port + 1000 for port in range(40001, 40010)}
    found = node_connection(CONNECTION, ports)
    assert [found[k] for k in ("registration", "control", "mux", "task", "iopub")] == [
        41001,
        41002,
        41003,
        41004,
        41005,
    ]
    assert (found["hb_ping"], found["hb_pong"], found["broadcast"]) == (
        41006,
        41007,
        [41008, 41009],
    )
    # the engine reaches the node's own loopback, with the controller's key
    assert found["interface"] == "tcp://127.0.0.1" and found["location"] == "127.0.0.1"
    assert found["curve_serverkey"] == "a-public-key"
    assert CONNECTION["registration"] == 40001  # the controller's own is left as it was


def test_a_background_cell_on_a_jobs_ranks_is_refused_before_any_attach(ip):
    ip.run_cell(
        "%%distcomp train\nname: train\ntype: DistributedComponent\nlauncher:\n  type: mpi\n"
        "  additional_arguments: python train.py\n"
    )
    result = ip.run_cell("%%distcomp run train --job some_job --background\nx = 1\n")
    error = str(result.error_in_exec)
    assert "--background is not available with --job" in error, error
    assert "Fix: run it without --background" in error
