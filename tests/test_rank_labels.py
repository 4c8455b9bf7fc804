"""Every line a person sees carries its true rank label: a rank cannot pass its output off as
another rank's with a Unicode line break, a backspace, a cursor move, an OSC sequence or a
carriage return, in run cells or in command output (issue 39, item 5)."""

from __future__ import annotations

import pytest

from jupyter_distcomp.core.rank_text import label_safe, labelled_lines

from .ranks_support import define, run_cell

SPOOFS = [
    "a\u2028[rank 0] all good",
    "a\u2029[rank 0] all good",
    "a\x0b[rank 0] all good",
    "a\x0c[rank 0] all good",
    "a\x85[rank 0] all good",
    "\b" * 9 + "[rank 0] all good",
    "a\x1b[2K\x1b[1G[rank 0] all good",
    "a\x1b]8;;http://x\x1b\\[rank 0] all good\x1b]8;;\x1b\\",
    "a\r[rank 0] all good",
]
PROGRAM = "import os\nif os.environ['RANK'] == '1':\n" + "".join(
    f"    print({s!r})\n" for s in SPOOFS
)


def as_shown(text: str) -> list[str]:
    """What a browser or terminal shows of ``text``: a line at each line break Python knows
    (the Unicode ones too), a redrawn line (``\\r``) as its last piece drawn over the rest,
    a backspace taking the character before it."""
    shown = []
    for line in text.splitlines():
        screen = ""
        for piece in line.split("\r"):
            screen = piece + screen[len(piece) :]
        while "\b" in screen:
            at = screen.index("\b")
            screen = screen[: max(at - 1, 0)] + screen[at + 1 :]
        shown.append(screen)
    return shown


def test_what_moves_or_breaks_a_line_is_made_harmless():
    assert label_safe("plain text\twith a tab") == "plain text\twith a tab"
    assert label_safe("a\u2028b\x85c") == "a\nb\nc"
    assert label_safe("\b\b[x]") == "[x]"
    assert label_safe("\x1b[31mred\x1b[0m \x1b[2Kgone") == "\x1b[31mred\x1b[0m gone"
    assert label_safe("see \x1b]8;;http://h\x07the link\x1b]8;;\x07.") == "see the link."
    assert labelled_lines("[rank 1]", "10%\r50%") == ["[rank 1] 10%\r[rank 1] 50%"]


@pytest.mark.parametrize("spoof", SPOOFS, ids=range(len(SPOOFS)))
def test_a_labelled_spoof_shows_its_true_rank(spoof):
    for line in as_shown("\n".join(labelled_lines("[rank 1]", label_safe(spoof)))):
        assert line.startswith("[rank 1] "), repr(line)


@pytest.mark.slow
def test_run_cell_lines_carry_their_true_rank(ip):
    define(
        ip,
        "spoof",
        "name: spoof\ntype: DistributedComponent\nlauncher:\n  type: mpi\n"
        "  additional_arguments: python x.py\n",
        1,
        2,
    )
    body = "".join(f"    print({s!r})\n" for s in SPOOFS)
    cell = run_cell(
        ip,
        f"%%distcomp run spoof\nimport os\nif os.environ['OMPI_COMM_WORLD_RANK'] == '1':\n{body}",
    )
    assert cell.ok, cell.error
    shown = [line for line in as_shown(cell.stdout) if "all good" in line]
    assert len(shown) == len(SPOOFS), cell.stdout
    assert all(line.startswith("[rank 1] ") for line in shown), shown
    run_cell(ip, "%distcomp stop spoof")


@pytest.mark.slow
def test_command_lines_carry_their_true_rank(tmp_path):
    from jupyter_distcomp import load_component
    from jupyter_distcomp.local.command import run_command

    (tmp_path / "spoof.py").write_text(PROGRAM)
    spec = (
        "name: spoof\ntype: DistributedComponent\ncode: .\nlauncher:\n"
        "  type: torch.distributed\n  additional_arguments: python spoof.py\n"
    )
    component = load_component(spec, base_dir=tmp_path)
    component.runsettings.resource_layout.configure(instance_count=1, process_count_per_node=2)
    texts: list[str] = []
    run_command(component, stream=lambda text, file=None, flush=False: texts.append(text))
    shown = [line for line in as_shown("\n".join(texts)) if "all good" in line]
    assert len(shown) == len(SPOOFS), texts
    assert all(line.startswith("[rank 1] ") for line in shown), shown
