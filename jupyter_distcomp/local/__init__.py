"""Local ranks: notebook cells and the spec's command on real processes of this machine (or
of the hosts the user names), each with the variables Azure ML gives it.

- ``ranks``: ``%%distcomp run``: a world of ipyparallel engines under one mpiexec per
  component, its cells, output, failures, health and collectives ledgers
- ``command``: ``%distcomp command``: the spec's own command, one process per rank
- ``debug``: ``breakpoint()`` on a rank prompts in the notebook (both of the above)
- ``attached``: the ranks of a running Azure ML job, reached through each node's SSH
  service (``%distcomp attach``): its ``breakpoint()`` at the same group prompt
- ``inspect``: where each rank is, its collectives, and one value compared across ranks
- ``runs``: the runs in progress (background cells and commands, ``%distcomp command``
  runs), asked in one place by ``stop``, ``status``, ``where`` and ``interrupt``
- ``jobcells``: ``%%distcomp run NAME --job JOB``: the ranks of an attached job submitted
  with ``--cells`` as engines of the kernel, a world as local ranks are
- ``stacks``: a rank's current Python stack, here or on its host
- ``cell_names``: which notebook cell (``In [5]``) a rank's cell file is

Lower folders never import higher ones: ``inspect``, ``runs`` and ``jobcells`` read
worlds, command runs and attached jobs, which use ``debug``, which uses none of them;
``stacks`` and ``cell_names`` are used by all.
"""
