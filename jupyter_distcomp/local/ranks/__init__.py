"""``%%distcomp run``: notebook cells on real MPI ranks with Azure ML's per-rank variables.

The session reaches everything through :func:`~.backend.get_backend`, one per kernel::

    backend = get_backend()
    world = backend.start(name, component)         # or wait=False: start in the background
    backend.run_cell(name, component, code, ranks="0,2-3", timeout=60, group_output=False)
    backend.run_cell(..., background=True).wait()  # a BackgroundCell; backend.wait(name)
    backend.status(name) / stop(name) / restart(name) / interrupt(name) / shutdown()
    backend.add_listener(callback)                 # callback(event dict) on every state change
    world.envs, world.world_size, world.call_each(ranks, function, args)

Importing it is cheap: ipyparallel is imported only when a world starts (``ipp.py``, the
only module that touches it).
"""
