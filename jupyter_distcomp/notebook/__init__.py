"""The notebook: what wires the layers below into IPython and JupyterLab.

- ``extension``: ``%load_ext`` / ``%unload_ext``
- ``magics``: ``%%distcomp`` and ``%distcomp``, arguments in, views out
- ``session``: one per shell, every operation the magics, the panel and the comm perform
- ``config``: the ``%config DistComp`` and ``AzureML`` settings
- ``comm``: the JupyterLab ranks panel's channel
- ``attached``: the Azure ML jobs this kernel is attached to (``%distcomp attach``)
- ``views``: how everything is shown, as HTML and text
- ``widgets``: the run-settings panel below each definition
"""
