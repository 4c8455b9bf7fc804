"""Code that runs in the processes we start, not in the kernel: standard library only.

- ``guard``: ``python -m jupyter_distcomp.rank_side.guard CMD``; CMD (the controller,
  mpiexec) and all it starts die with the kernel.
- ``reaper``: the one process-tree killer, and the subreaper the supervisors are; the kernel
  ends the trees it started with it too.
- ``segments``: each rank writes down the shared-memory segments it makes; the world's
  stop, the guard and the next kernel's sweep unlink those a killed rank left.
- ``rank_exec``: the supervisor of each rank of ``%distcomp command``, run as a file.
- ``node_agent``: Open MPI's launch agent for the emulated nodes of a multi-node layout
  (in place of ssh): runs each node's daemon here, as that node (its variables, its host
  name).
- ``engine_start``: ``python -m jupyter_distcomp.rank_side.engine_start FILE ...``: an engine
  on this machine, started beside its controller; it initialises MPI while ipyparallel's
  engine loads, and runs that engine (by name) once the controller's connection FILE is
  written. The one module here that imports ipyparallel.
- ``rank_setup``: code ipyparallel ships into each engine once, right after it registers.
- ``debug_hook``: ``breakpoint()`` on a rank opens a prompt in the notebook.
- ``dap_side``: JupyterLab's debugger's breakpoints, frames and variables on a rank.
- ``dap_values``: what the debugger's Variables panel shows of a rank's value and its children.
- ``compare``: ``%distcomp compare`` on a rank: small summaries of a value, never arrays.
- ``flow``: back-pressure on a rank's output: a rank waits while too much is on its way.
- ``after_import``: a function run on a module right after it is imported (the ledger's
  wrappers, numpy's entry in ipyparallel's canning map).
- ``ledger``: the collectives ledger's ring file (each rank's recent collective and
  point-to-point calls), and torch's record of its NCCL calls read beside it.
- ``ledger_words``: one call on one rank, the verdicts and words on what does not match
  across ranks, and ``format_ranks``, the one wording of ranks (the kernel's core/ too).
- ``ledger_hooks``: records every ``torch.distributed`` and mpi4py call in the ledger and,
  in check mode, compares the call across the group before it runs.
- ``ledger_torch``: the ledger's wrappers of ``torch.distributed``.
- ``ledger_mpi``: the ledger's wrapper of mpi4py.
- ``ledger_horovod``: the ledger's wrappers of Horovod's operations (``horovod.torch``).
- ``check_exchange``: check mode's exchanges of call signatures, apart from the user's own
  channels.
- ``torch_record``: torch's own record of each collective, read beside the ledger, and the
  rank's GPU facts.
- ``stack_site``: put on the path of ``%distcomp command`` ranks (stacks on SIGUSR1, the
  ledger, ``pdb.set_trace`` to the notebook).
- ``job_site``: put on the path of a submitted job's processes (azureml/snapshot.py).
- ``job_watch``: a rank of a submitted job watches itself and says where it is on a stall or
  a failure.
- ``job_line``: the one ``[distcomp rank-state]`` line such a rank writes into its log.
- ``job_sigterm``: SIGTERM in such a rank: its line first, then what SIGTERM did before.
- ``job_attach``: what a job submitted with ``--debug`` carries besides (with ``debug_hook``
  and ``compare``): its ``breakpoint()`` waits for the notebook (``%distcomp attach``).
- ``job_engine``: the command of each rank of a job submitted with ``--debug --cells``: the
  rank becomes an engine of the notebook (``%%distcomp run NAME --job JOB``).

Each starts fast and runs where the package is not installed (a user's own cluster,
another host, a submitted job), so a module that needs a sibling imports it from the
package where there is one and otherwise loads its file by path: ``guard`` imports
``reaper`` (the tree killer), and ``rank_exec``, run as a file, loads it by path;
``ledger_hooks`` imports ``ledger`` (the ring file it writes, which imports
``ledger_words``) and ``ledger_words``, and loads ``ledger_torch``,
``ledger_mpi``, ``ledger_horovod``, ``torch_record`` and ``after_import`` when it installs
the wrappers, which load ``check_exchange``; ``engine_start`` imports ``after_import``;
``rank_setup`` loads ``ledger_hooks`` and ``flow`` into an engine; ``debug_hook`` imports
``compare`` when asked to compare; ``job_site`` loads ``job_watch``, which loads ``job_line``,
``job_sigterm`` and the ledger's files, and in a debugged job ``job_attach``, which loads
``debug_hook``; ``job_engine`` loads ``job_attach`` and ``engine_start``; ``stack_site``
loads ``ledger_hooks``.
"""
