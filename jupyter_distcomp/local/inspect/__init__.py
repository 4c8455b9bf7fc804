"""Looking into running ranks (cells, command runs and attached jobs alike).

- ``where``: ``%distcomp where``: each rank's current Python stack, grouped
- ``tree``: many ranks' stacks as one prefix tree, as LLNL's STAT shows them
- ``progress``: which busy ranks moved since the last look, and which did not (a hang)
- ``collectives``: ``%distcomp collectives``: each group's recent collectives from the
  ranks' ledgers, aligned across ranks, with the verdict on top
- ``compare``: ``%distcomp compare``: one value, every rank, one table
- ``attached``: ``where`` and ``collectives`` of an attached Azure ML job, read over its
  nodes' SSH connections
"""
