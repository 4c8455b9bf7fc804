"""Code that runs in the processes we start, not in the kernel: standard library only.

- ``guard``: ``python -m jupyter_distcomp.rank_side.guard CMD``; CMD (the controller,
  mpiexec) and all it starts die with the kernel.
- ``reaper``: the one process-tree killer, and the subreaper the supervisors are; the kernel
  ends the trees it started with it too.
- ``rank_exec``: the supervisor of each rank of ``%distcomp command``, run as a file.
- ``node_agent``: Open MPI's launch agent for the emulated nodes of a multi-node layout
  (in place of ssh): runs each node's daemon here, as that node (its variables, its host
  name).
- ``engine_start``: ``python -m jupyter_distcomp.rank_side.engine_start FILE ...``: an engine
  on this machine, started beside its controller; it initialises MPI while ipyparallel's
  engine loads, and runs that engine (by name) once the controller's connection FILE is
  written.
- ``rank_setup``, ``debug_hook``, ``dap_side``, ``compare``: code ipyparallel ships into
  each engine (``dap_side``: JupyterLab's debugger's breakpoints, frames and variables).
- ``after_import``: a function run on a module right after it is imported (the ledger's
  wrappers, numpy's entry in ipyparallel's canning map).
- ``stack_site``: put on the path of ``%distcomp command`` ranks (stacks on SIGUSR1,
  ``pdb.set_trace`` to the notebook).
- ``job_site``, ``job_watch``, ``job_line``, ``job_sigterm``: what a job submitted with
  diagnostics carries in its code snapshot (with the ledger's files, see
  azureml/snapshot.py): each rank writes a ``[distcomp rank-state]`` line into its log on a
  stall, on SIGTERM or on a failure.

None of them imports anything else from this package, so they start fast and run where the
package is not installed (a user's own cluster, another host).
"""
