"""Code that runs in processes other than the kernel: standard library only.

- ``guard``: ``python -m jupyter_distcomp.standalone.guard CMD``; CMD dies with the kernel.
- ``rank_exec``: the supervisor of each rank of ``%distcomp command``, run as a file.
- ``rank_setup``: functions ipyparallel ships into each engine as code, run there once.

None of them imports anything else from this package, so they start fast and run where the
package is not installed (a user's own cluster).
"""
