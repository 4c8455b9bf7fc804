"""``%%distcomp run``: notebook cells on real MPI ranks with Azure ML's per-rank variables.

The session reaches everything through :func:`~.backend.get_backend`, one per kernel::

    backend = get_backend()
    world = backend.start(name, component)         # or wait=False: start in the background
    backend.run_cell(name, component, code, CellOptions(ranks="0,2-3", timeout=60))
    backend.run_cell(..., CellOptions(background=True)).wait()  # a BackgroundCell
    backend.status(name) / stop(name) / restart(name) / interrupt(name) / shutdown()
    backend.add_listener(callback)                 # callback(event dict) on every state change
    world.envs, world.world_size, world.call_each(ranks, function, args)

Importing it is cheap: ipyparallel is imported only when a world starts, and only by
``ipp``, the one module of the kernel that touches it.

- ``backend``: the ranks of every component in this kernel: start, reuse, run, watch, stop
- ``world``: one world, the ranks of one component as engines under one ``mpiexec``
- ``connection``: where a component's engines come from: local mpiexec or the user's cluster
- ``ipp``: ipyparallel behind one adapter (cluster, client, replies, processes)
- ``options``: a cell's options (``CellOptions``), one frozen object from the magic down
- ``run``: one ``%%distcomp run`` cell: send the code, stream, end it well
- ``background``: ``--background`` cells, run while the kernel is free
- ``feed``: a cell's rank output, handed over from ipyparallel's thread
- ``output``: rank output in the notebook, live, each line labelled with its rank
- ``flow``: the kernel's side of the ranks' output back-pressure
- ``rank_widgets``: widgets made on ranks that survive a reload of the page
- ``failures``: failed cells and dead ranks, said once
- ``failfast``: a rank failed while the others wait for it: end the cell, interrupt them
- ``health``: is each rank alive, what mpiexec said, where a rank is stuck
- ``ledgers``: the kernel's side of the collectives ledger: read each rank's ring file,
  the verdicts on it, check mode, the hang watch
- ``gpu``: each rank's GPU facts, as its torch thread writes them beside its ledger
- ``silence``: a cell that shows nothing for a while gets one line saying what its ranks are
  doing (importing, in a collective), updated in place
- ``replay``: ``%distcomp restart --replay``: the cells that succeeded, to run again
"""
