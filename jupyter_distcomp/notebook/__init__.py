"""The notebook: what wires the layers below into IPython and JupyterLab.

- ``extension``: ``%load_ext`` / ``%unload_ext``
- ``magics``: ``%%distcomp`` and ``%distcomp``, arguments in, views out
- ``session``: one per shell, every operation the magics, the panel and the comm perform
- ``config``: the ``%config DistComp`` and ``AzureML`` settings
- ``comm``: the JupyterLab ranks panel's channel
- ``attached``: the Azure ML jobs this kernel is attached to (``%distcomp attach``)
- ``completion``: tab completion of the spec's keys and values in a ``%%distcomp NAME`` cell
- ``follow``: ``%distcomp follow JOB``: an Azure ML job's ranks in the cell
- ``views``: how everything is shown, as HTML and text
- ``widgets``: the run-settings panel below each definition
"""
