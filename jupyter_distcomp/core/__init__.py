"""The pure core: a spec's text becomes a :class:`~.model.Component`, whose run settings give
each rank its command and its Azure ML variables.

No IPython, ipyparallel, Azure, sockets or subprocesses: every function here is a function of
its arguments (ports and network interfaces are arguments, chosen by the layers above), so it
is tested directly and runs the same in a notebook, a script and a test.

- ``spec_parsing``: YAML -> Component, with errors at the line of the key
- ``model``, ``run_settings``: the component and its live run settings
- ``template``: the command template, locally and in Azure ML's syntax
- ``layout``: launcher x layout -> each rank's variables
- ``values``, ``bindings``: the one check of a value, and of what a run binds
- ``ranges``, ``tf_config``: rank lists and labels; TF_CONFIG's known trap
- ``rank_view``, ``summary``: what the views show, as data
- ``rank_text``, ``tracebacks``: what a rank's text may hold under a label; its tracebacks,
  held so that ranks failing alike show one
- ``joblog``: a job's verdict from its ranks' logs (``%distcomp diagnose``)
- ``horovod_stall``: Horovod's stall inspector lines, read: who never submitted what
"""
