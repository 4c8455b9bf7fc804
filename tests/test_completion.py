"""Tab in a ``%%distcomp NAME`` cell offers the spec's keys and the allowed ``type:`` values,
in IPython's completer (a terminal) and through a kernel's complete_request (JupyterLab)."""

from __future__ import annotations

import pytest

from jupyter_distcomp.notebook.completion import spec_completions

from .ranks_support import loaded_shell

CELL = """\
%%distcomp t
name: x
version: 0.0.1
ty
launcher:
  type: to
  ad
inputs:
  lr:
    ty
    type: Int
$sch"""


def at_end(cell: str, line: int) -> tuple[str, list[str]] | None:
    text = cell.split("\n")[line]
    return spec_completions(cell, line, len(text))


def test_keys_follow_the_indentation_and_values_the_key_they_follow():
    assert at_end(CELL, 3) == ("ty", ["type"])
    assert at_end(CELL, 5) == ("to", ["torch.distributed"])
    assert at_end(CELL, 6) == ("ad", ["additional_arguments"])
    assert at_end(CELL, 9) == ("ty", ["type"])  # an input's own keys
    assert at_end(CELL, 10) == ("Int", ["Integer"])
    assert at_end(CELL, 11) == ("$sch", ["$schema"])
    typed, offered = spec_completions("%%distcomp t\nlauncher:\n  type: ", 2, 8)
    assert typed == "" and {"mpi", "torch.distributed", "tensorflow", "deepspeed"} <= set(offered)
    _, top = spec_completions("%%distcomp t\n", 1, 0)
    assert {"name", "type", "inputs", "outputs", "launcher", "environment"} <= set(top)
    # a run cell's body is Python, and the magic's own line is no spec
    assert spec_completions("%%distcomp run t\nx", 1, 1) is None
    assert spec_completions("%%distcomp t\nname: x", 0, 5) is None


def test_the_shells_completer_offers_them_instead_of_the_cells_tokens():
    from IPython.core.completer import provisionalcompleter

    with loaded_shell() as shell, provisionalcompleter():
        cell = "%%distcomp t\nname: x\nversion: 0.0.1\nlauncher:\n  type: "
        found = list(shell.Completer.completions(cell, len(cell)))
        assert sorted(c.text for c in found) == [
            "deepspeed",
            "mpi",
            "tensorflow",
            "torch.distributed",
        ]
        cell = "%%distcomp t\nname: x\nversion: 0.0.1\nla"
        (only,) = list(shell.Completer.completions(cell, len(cell)))
        assert (only.text, only.start, only.end) == ("launcher", len(cell) - 2, len(cell))
        # a value of the user's own: nothing to offer, and no Python names either
        shell.user_ns["print_me"] = 1
        for cell in ("%%distcomp t\nname: pr", "%%distcomp t\nname: x\ncommand: python pr"):
            assert list(shell.Completer.completions(cell, len(cell))) == []
        cell = "%%distcomp run t\npr"  # a run cell's body is Python
        assert "print_me" in [c.text for c in shell.Completer.completions(cell, len(cell))]
    with provisionalcompleter():  # unloaded: the matcher is gone
        found = [c.text for c in shell.Completer.completions(cell, len(cell))]
        assert "launcher" not in found


@pytest.mark.slow
def test_a_kernel_answers_jupyterlabs_complete_request_with_spec_keys():
    from .test_ranks_kernel import Kernel

    kernel = Kernel()
    try:
        reply, text, _ = kernel.run("%load_ext jupyter_distcomp")
        assert reply["status"] == "ok", text
        cell = "%%distcomp t\nname: x\ninputs:\n  lr:\n    type: Float\n    de"
        kernel.kc.complete(cell, len(cell))
        content = kernel.kc.get_shell_msg(timeout=60)["content"]
        assert content["status"] == "ok", content
        assert content["matches"] == ["default", "description"], content
        assert content["cursor_start"] == len(cell) - 2
    finally:
        kernel.close()
