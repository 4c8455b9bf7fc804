"""This machine: Open MPI's ``mpiexec``, addresses and ports, the hosts nodes run on,
scratch folders, and the shim that keeps listeners on loopback and makes each emulated node
a host of its own.

Below the local ranks, above the pure core: what binds a port, resolves a host or runs a
compiler lives here, so the core can stay a function of its arguments.

- ``mpi``: which mpiexec, its flags and environment (one Open MPI daemon per emulated node)
- ``network``: addresses, free ports, where we listen; the emulated nodes' names and
  addresses
- ``hosts``: the hosts a layout's nodes run on (:class:`~.hosts.Placement`), and each
  rank's variables there
- ``shim``: the preloaded library (``listen_shim.c``, ``host_shim.c``) that binds Open
  MPI's listeners to one address, and gives each emulated node its own address, ports,
  host name and network interface
- ``node_disks``: each emulated node's copy of the code folder and its TMPDIR, and the
  one rule that names those copies as the user's files
- ``gpus``: each emulated node's share of this machine's GPUs
- ``scratch``: folders a killed kernel does not leave behind for good
- ``remote``: commands on the hosts, over the ssh mpiexec uses
- ``tunnels``: SSH master connections to a job's nodes, the remote forwards on them that end
  on each node's loopback, and commands over them (``%distcomp attach``)
- ``node_disks``: each emulated node's own disk: a copy of the code folder, a temporary folder
- ``gpus``: each emulated node's share of this machine's GPUs

Process trees end through ``rank_side/reaper.py``'s ``kill_tree``, the one tree killer, which
the supervisors of the ranks (standard library only) share with the kernel.
"""
