"""``python -m jupyter_distcomp.standalone.guard [--signal NAME] CMD ...``: CMD dies with the kernel.

The controller and ``mpiexec`` are started through this: on Linux it asks the kernel
(``prctl(PR_SET_PDEATHSIG, sig)``, kept across ``exec``) to signal CMD when the Jupyter
kernel that started it dies, even by SIGKILL, when no atexit hook can run: SIGTERM by
default, so that mpiexec stops its ranks and the controller its schedulers. Elsewhere it
just runs CMD.
"""

from __future__ import annotations

import os
import signal
import sys

PR_SET_PDEATHSIG = 1


def main(argv: list[str]) -> None:
    sig = signal.SIGTERM
    if argv[:1] == ["--signal"] and len(argv) > 2:
        sig, argv = signal.Signals[f"SIG{argv[1]}"], argv[2:]
    if not argv:
        sys.exit("usage: python -m jupyter_distcomp.standalone.guard [--signal NAME] CMD [ARGS...]")
    if sys.platform.startswith("linux"):
        parent = os.getppid()
        try:
            import ctypes

            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0)
        except (OSError, AttributeError):
            pass
        if os.getppid() != parent:  # the kernel died before the request took effect
            sys.exit(1)
    os.execvp(argv[0], argv)


if __name__ == "__main__":
    main(sys.argv[1:])
