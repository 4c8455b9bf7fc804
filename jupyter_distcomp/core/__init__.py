"""The pure core: a spec's text becomes a :class:`~.model.Component`, whose run settings give
each rank its command and its Azure ML variables.

No IPython, ipyparallel, Azure, sockets or subprocesses: every function here is a function of
its arguments (ports and network interfaces are arguments, chosen by the layers above), so it
is tested directly and runs the same in a notebook, a script and a test.

- ``spec_parsing``: YAML -> Component, with errors at the line of the key
- ``model``: the component, as a spec says it after parsing and validation
- ``run_settings``: the component's live run settings, the single source of truth
- ``template``: the command template, locally and in Azure ML's syntax
- ``layout``: launcher x layout -> each rank's variables
- ``values``: parameter types and the one check every input value goes through
- ``bindings``: what a run binds to inputs and outputs, locally and on Azure ML alike
- ``ranges``: rank lists as users write them and as messages show them; rank labels
- ``tf_config``: TF_CONFIG's known trap (an empty ``"ps": []``) and its fix
- ``rank_view``: each rank's variables as a person reads them, as data
- ``summary``: a component as every view summarises it, as data
- ``rank_text``: what a rank's text may hold under its rank label
- ``tracebacks``: ranks' tracebacks held back, so that ranks failing alike show one
- ``secrets``: what counts as a secret in values and messages, and how it is masked
- ``compare_table``: the table of ``%distcomp compare``, ranks grouped by a value's summary
- ``waitfor``: the collectives ledger's wait-for graph of hung ranks, and its deadlocks
- ``hangs``: what hung ranks wait for, in words: deadlocks, then each group's ledger verdict,
  with the known pattern it fits and its fix
- ``joblog``: a job's verdict from its ranks' logs (``%distcomp diagnose``)
- ``horovod_stall``: Horovod's stall inspector lines, read: who never submitted what
"""
