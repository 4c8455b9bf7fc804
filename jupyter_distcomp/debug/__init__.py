"""The kernel side of rank debugging: ``breakpoint()`` on a rank prompts in the notebook.

- ``channel``: the authenticated listener one world (or one ``%distcomp command`` run) owns,
  and the queue of ranks stopped at a breakpoint, in order of arrival.
- ``serve``: the kernel's main thread serves those stops one at a time with ``input()``
  (stdin requests in a notebook, the terminal in IPython).

Users: :mod:`jupyter_distcomp.ranks.debugger` (``%%distcomp run``: the hook on each engine,
``--debug-ranks``, ranks that quit, ``%distcomp debug``) and ``command/run.py`` (``%distcomp
command``: ``PYTHONBREAKPOINT`` in each rank's environment).

The rank side is :mod:`jupyter_distcomp.standalone.debug_hook`.
"""
