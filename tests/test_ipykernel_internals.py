"""What the kernel side uses of ipykernel beyond its public API still exists in the installed
ipykernel, as test_ranks_ipp.py checks ipyparallel's; and JupyterLab's debugger is not
attached to a kernel that lacks it, with a message that names what and the fix. Fast: no
kernel is started."""

from __future__ import annotations

import warnings

import pytest

from jupyter_distcomp.local import cell_names
from jupyter_distcomp.local.debug import dap
from jupyter_distcomp.local.ranks import output

from .relied_on_support import resolve

USERS = {
    "local/debug/dap.py": dap.RELIES_ON,
    "local/ranks/output.py": output.RELIES_ON,
    "local/cell_names.py": cell_names.RELIES_ON,
}


@pytest.mark.parametrize(
    ("dotted", "user"), [(d, user) for user, names in USERS.items() for d in names]
)
def test_what_the_kernel_side_relies_on_exists(dotted, user):
    try:
        resolve(dotted)
    except (ImportError, AttributeError) as exc:
        pytest.fail(f"{dotted} no longer exists: {exc!r}; adapt {user}")


def test_the_check_finds_a_name_that_is_gone():
    with pytest.raises(AttributeError):
        resolve("ipykernel.kernelbase.Kernel._publish_debug_events")
    with pytest.raises(AttributeError):
        resolve("ipykernel.debugger.Debugger.stopped_thread")


def test_what_install_checks_is_in_the_list():
    for name in dap.KERNEL_NEEDS:
        assert any(d.endswith(f"Kernel.{name}") for d in dap.RELIES_ON), name
    for name in dap.DEBUGGER_NEEDS:
        assert f"ipykernel.debugger.Debugger.{name}" in dap.RELIES_ON


class Debugger:  # what ipykernel's debugger has of what dap.py reads
    is_started = False
    breakpoint_list: dict = {}
    stopped_threads: set = set()


class OldKernel:  # a kernel whose ipykernel has no _publish_debug_event
    def __init__(self):
        self.debugger = Debugger()

    def do_debug_request(self, message):
        return message


def test_a_kernel_without_the_internals_keeps_its_own_debugger_and_says_why():
    kernel = OldKernel()
    original = kernel.do_debug_request
    assert dap.missing_internals(kernel) == ["Kernel._publish_debug_event"]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert dap.install(kernel, dict) is None
    dap.uninstall()
    assert kernel.do_debug_request == original  # not replaced
    (warning,) = [w for w in caught if issubclass(w.category, RuntimeWarning)]
    text = str(warning.message)
    assert "Kernel._publish_debug_event" in text and "ipykernel 6.29 or newer" in text
    assert "Fix: install" in text and "Breakpoints at the pdb prompt still work" in text
