"""The kernel side of rank debugging: ``breakpoint()`` on a rank prompts in the notebook.

- ``channel``: the authenticated listener one world (or one ``%distcomp command`` run) owns,
  and the queue of ranks stopped at a breakpoint, in order of arrival
- ``listener``: the channel's one thread, which runs the key challenge of every connection
  that has not passed it
- ``serve``: the kernel's main thread serves those stops with ``input()`` (stdin requests in
  a notebook, the terminal in IPython)
- ``stopped``: the ranks stopped at a breakpoint: their stops, messages, and commands sent
  to them at once
- ``group``: the prompt over those stopped ranks, as one group
- ``places``: where ranks stopped, as a person reads it
- ``held``: the stops of a run in the background, served by ``%distcomp wait``
- ``evaluate``: ``%distcomp compare`` in the frames of such stops
- ``cells``: ``%%distcomp run`` cells: the world's start-up hook that puts the hook on each
  engine, ``--debug-ranks``, ranks that quit, the rank ``%distcomp debug`` opens
- ``dap``: JupyterLab's debugger (the bug icon) on the ranks: the kernel answers the debug
  protocol for them and passes the rest to ipykernel's debugger
- ``refs``: the debug protocol's request shapes it checks, and the frame and variable
  numbers it gives
- ``dap_serve``: the stopped ranks served for JupyterLab's debugger, by the same group rule
  as the prompt (``group``)

``%distcomp command`` connects its processes through ``PYTHONBREAKPOINT`` in each rank's
environment (``command/run.py``). The rank side is
:mod:`jupyter_distcomp.rank_side.debug_hook`.
"""
