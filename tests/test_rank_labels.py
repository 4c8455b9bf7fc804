"""Every line a person sees carries its true rank label: a rank cannot pass its output off as
another rank's with a Unicode line break, a backspace, a cursor move, an OSC sequence or a
carriage return, in run cells or in command output (issue 39, item 5); nor with a colour
that it leaves on for the next label (issue 47, item 6)."""

from __future__ import annotations

import re

import pytest

from jupyter_distcomp.core.rank_text import label_safe, labelled_lines
from jupyter_distcomp.local.ranks.output import RankOutput

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
#: rank 1 leaves white on, so that its next label is drawn white (unseen on a light theme)
#: and the line reads as rank 0's
COLOUR_SPOOF = ["ok\x1b[38;2;255;255;255m", "\x1b[0m[rank 0] SGR"]
PROGRAM = "import os\nif os.environ['RANK'] == '1':\n" + "".join(
    f"    print({s!r})\n" for s in SPOOFS + COLOUR_SPOOF
)
LABEL = re.compile(r"\[(?:node \d+ )?rank \d+\] ")
SGR = re.compile(r"\x1b\[([0-9;]*)m")


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


def colours_at_labels(text: str) -> list[tuple[str, tuple[str, ...], tuple[str, ...]]]:
    """Each label JupyterLab's ANSI rendering (or a terminal) draws in ``text`` (one stream's
    output, whose colours carry from line to line): the label, the colour attributes in
    effect where it is drawn and those in effect at its line's text."""
    state: list[str] = []
    found = []
    for line in text.split("\n"):
        for piece in line.split("\r"):
            label = LABEL.match(piece)
            at_label = tuple(state)
            rest = piece[label.end() :] if label else piece
            before = SGR.match(rest)
            while before:  # the colours the line's own text starts with
                state = _applied(state, before.group(1))
                rest = rest[before.end() :]
                before = SGR.match(rest)
            if label:
                found.append((label.group(), at_label, tuple(state)))
            for params in SGR.findall(rest):
                state = _applied(state, params)
    return found


def _applied(state: list[str], params: str) -> list[str]:
    out = list(state)
    for param in params.split(";"):
        out = [] if param in ("", "0") else [*out, param]
    return out


def test_a_colour_left_on_never_reaches_the_next_label_and_still_colours_the_rank_text():
    text = "\n".join(labelled_lines("[rank 1]", "ok\x1b[38;2;255;255;255m\n\x1b[0m[rank 0] SGR"))
    assert [at for _, at, _ in colours_at_labels(text)] == [(), ()]
    # a colour over several lines colours them all; the labels stay plain
    text = "\n".join(labelled_lines("[rank 1]", "\x1b[31mred\nstill red\x1b[0m\nplain"))
    assert colours_at_labels(text) == [
        ("[rank 1] ", (), ("31",)),
        ("[rank 1] ", (), ("31",)),
        ("[rank 1] ", (), ()),
    ]
    text = labelled_lines("[rank 1]", "\x1b[7m10%\r50%")[0]  # a redrawn line's label too
    assert [at for _, at, _ in colours_at_labels(text)] == [(), ()]
    assert labelled_lines("[rank 1]", "plain") == ["[rank 1] plain"]  # no colour, no codes


def test_run_cell_output_resets_colours_before_each_label_across_writes(capsys):
    output = RankOutput(lambda rank: f"[rank {rank}]")  # as a cell's output, written in turns
    output.stream(1, "stdout", "ok\x1b[38;2;255;255;255m\n")
    output.stream(0, "stdout", "rank 0's line\n")
    output.stream(1, "stdout", "\x1b[31mred\n")
    output.stream(1, "stdout", "still red\x1b[0m\n")
    output.finish()
    found = colours_at_labels(capsys.readouterr().out)
    assert [at for _, at, _ in found] == [(), (), (), ()]
    assert [colours[-1] for *_, colours in found[2:]] == ["31", "31"]  # red on both lines


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
    body = "".join(f"    print({s!r})\n" for s in COLOUR_SPOOF)
    cell = run_cell(
        ip,
        f"%%distcomp run spoof\nimport os\nif os.environ['OMPI_COMM_WORLD_RANK'] == '1':\n{body}",
    )
    assert cell.ok, cell.error
    found = colours_at_labels(cell.stdout)
    assert [label for label, at, _ in found if not at] == ["[rank 1] ", "[rank 1] "], found
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
    found = colours_at_labels("\n".join(texts))
    assert len(found) >= len(SPOOFS) + len(COLOUR_SPOOF) and all(not at for _, at, _ in found)
