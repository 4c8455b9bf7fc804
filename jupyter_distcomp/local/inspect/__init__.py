"""Looking into running ranks: ``%distcomp where`` (each rank's current stack, for cells and
command runs) and ``%distcomp compare`` (one value, every rank, one table)."""
