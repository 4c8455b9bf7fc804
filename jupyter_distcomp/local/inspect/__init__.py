"""Looking into running ranks: ``%distcomp where`` (each rank's current stack, for cells,
command runs and attached jobs: ``attached``) and ``%distcomp compare`` (one value, every
rank, one table)."""
