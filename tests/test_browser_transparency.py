"""The JupyterLab extension leaves every notebook's outputs as JupyterLab shows them: a plain
notebook (prints around sleeps, an error after output, interleaved ``input()``, display
updates, ``clear_output(wait=True)``) renders the same with the extension and without it
(headless Chromium); at the group debugger prompt of a ``%%distcomp run`` cell each reply
shows under the command that asked for it.
"""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from .browser_support import NOTEBOOK, cell, open_notebook

pytestmark = [pytest.mark.slow, pytest.mark.browser]

PACKAGE = "jupyter-distcomp"
PLAIN = [
    "import time\nprint('printed before the error')\ntime.sleep(1.5)\n"
    "raise ValueError('raised after the output')",
    "import sys, time\nprint('out 1')\ntime.sleep(0.5)\nprint('err 1', file=sys.stderr)\n"
    "time.sleep(0.5)\nprint('out 2')",
    "print('before')\na = input('q1 ')\nprint('after1', a)\nb = input('q2 ')\nprint('after2', b)",
    "from IPython.display import display\nimport time\n"
    "handle = display('first', display_id=True)\nprint('between')\ntime.sleep(0.5)\n"
    "handle.update('updated')\ndisplay('second')\nprint('end')",
    "from IPython.display import clear_output, display\nimport time\n"
    "print('kept until cleared')\nfor i in range(3):\n    time.sleep(0.3)\n"
    "    clear_output(wait=True)\n    print('frame', i)\ndisplay('shown last')",
]
ANSWERS = {2: ["A", "B"]}


def outputs(page, index: int) -> list[str]:
    """The text of each output of cell ``index``, in the order the page shows them."""
    return (
        cell(page, index)
        .locator(".jp-OutputArea > .jp-OutputArea-child")
        .evaluate_all("nodes => nodes.map(n => n.innerText.trim())")
    )


def run_answering(page, index: int, answers: list[str], timeout: float = 120) -> None:
    """Run cell ``index``, answer its ``input()`` prompts in the page as a person types
    them, and wait until the cell is done and its answered prompts are gone."""
    page.evaluate(
        """index => {
            window.distcompDone = false;
            window.jupyterapp.shell.currentWidget.content.activeCellIndex = index;
            void window.jupyterapp.commands.execute('notebook:run-cell')
                .then(() => { window.distcompDone = true; });
        }""",
        index,
    )
    waiting = ".jp-OutputArea-stdin-item:not(.jp-OutputArea-stdin-hiding) .jp-Stdin-input"
    for answer in answers:
        box = cell(page, index).locator(waiting).first
        box.wait_for(timeout=timeout * 1000)
        handle = box.element_handle()
        box.fill(answer)
        box.press("Enter")
        # the answered prompt hides before the next one is looked for
        page.wait_for_function(
            "el => el.closest('.jp-OutputArea-stdin-hiding')", arg=handle, timeout=10_000
        )
    page.wait_for_function("() => window.distcompDone", timeout=timeout * 1000)
    page.wait_for_function(
        "el => !el.querySelector('.jp-OutputArea-stdin-item')",
        arg=cell(page, index).element_handle(),
        timeout=10_000,
    )


def answered_lines(page, index: int) -> list[str]:
    """Cell ``index``'s output lines, an answered prompt's as its answer alone
    ("(Pdb ranks 0-1)  p x" reads "p x")."""
    return [
        re.sub(r"^\(Pdb [^)]*\)\s*", "", line.strip())
        for text in outputs(page, index)
        for line in text.splitlines()
        if line.strip()
    ]


def assert_in_order(lines: list[str], order: list[list[str]]) -> None:
    """Each group of ``order`` in ``lines`` (in any order within the group), after the
    group before it."""
    start = 0
    for group in order:
        at = [lines.index(line, start) if line in lines[start:] else -1 for line in group]
        assert -1 not in at, f"{group} not after line {start}: {lines}"
        start = max(at) + 1


def rendered(page, lab, name: str) -> list[list[str]]:
    open_notebook(page, lab.write_notebook(name, PLAIN))
    shown = []
    for index in range(len(PLAIN)):
        run_answering(page, index, ANSWERS.get(index, []))
        shown.append(outputs(page, index))
    return shown


def test_a_plain_notebook_renders_the_same_with_and_without_the_extension(lab, page):
    try:
        lab.disable((PACKAGE,))
        without = rendered(page, lab, "plain-without.ipynb")
        assert not page.evaluate(f"() => window.jupyterapp.hasPlugin('{PACKAGE}:rank-view')"), (
            "the extension was not disabled"
        )
    finally:
        lab.disable(())
    with_it = rendered(page, lab, "plain-with.ipynb")
    assert page.evaluate(f"() => window.jupyterapp.isPluginActivated('{PACKAGE}:rank-view')")

    # what JupyterLab alone shows, in the order the cells printed it
    error, streams, answered, displays, cleared = without
    assert error[0] == "printed before the error" and "ValueError" in error[1], error
    assert streams == ["out 1", "err 1", "out 2"], streams
    assert answered[0] == "before" and answered[-1].endswith("after2 B"), answered
    assert "'updated'" in displays[0] and displays[-1].endswith("end"), displays
    assert cleared == ["frame 2", "'shown last'"], cleared
    assert with_it == without
    assert page.locator(".distcomp-rankview").count() == 0, "a plain cell got a per-rank view"


GEOMETRY = ["import math\nx = math.pi", "def f(a):\n    return a + 1", "print('plain')"]
#: each plain cell's boxes, from the cell to its first line of text
BOXES = """cells => cells.map(c => ({
    boxes: ['.jp-Cell', '.jp-InputArea-editor', '.cm-editor', '.cm-scroller', '.cm-content',
            '.cm-line'].map(s => {
        const r = (c.matches(s) ? c : c.querySelector(s)).getBoundingClientRect();
        return [s, r.x, r.y, r.width, r.height].map(v => typeof v === 'number'
            ? Math.round(v * 100) / 100 : v);
    }),
    gutters: c.querySelectorAll('.cm-gutters').length,
    panels: c.querySelectorAll('.cm-panels').length
}))"""


def test_a_plain_cell_is_drawn_to_the_pixel_as_without_the_extension(lab, page):
    """No gutter, panel or anything else of ours in a plain Python cell's editor: every box
    of it, from the cell to its first line, where JupyterLab alone puts it."""
    try:
        lab.disable((PACKAGE,))
        open_notebook(page, lab.write_notebook("geometry-without.ipynb", GEOMETRY))
        without = page.locator(f"{NOTEBOOK} .jp-Cell").evaluate_all(BOXES)
    finally:
        lab.disable(())
    open_notebook(page, lab.write_notebook("geometry-with.ipynb", GEOMETRY))
    assert page.evaluate(f"() => window.jupyterapp.isPluginActivated('{PACKAGE}:plugin')")
    with_it = page.locator(f"{NOTEBOOK} .jp-Cell").evaluate_all(BOXES)
    assert all(c["gutters"] == c["panels"] == 0 for c in with_it), with_it
    assert with_it == without


SPEC = """\
name: order
type: DistributedComponent
launcher:
  type: mpi
  additional_arguments: python train.py
"""
DEBUG_CELL = """%%distcomp run order
def step(x):
    breakpoint()
    x = x * 2
    return x

print('done', step(10 + mpi_rank))"""


def test_replies_at_the_group_debugger_prompt_show_under_their_command(lab, page):
    url = lab.write_notebook(
        "prompt-order.ipynb",
        [
            "%load_ext jupyter_distcomp\n%config DistComp.default_process_count_per_node = 2",
            f"%%distcomp order\n{SPEC}",
            DEBUG_CELL,
        ],
    )
    open_notebook(page, url)
    run_answering(page, 0, [])
    run_answering(page, 1, [], timeout=300)
    run_answering(page, 2, ["p x", "n", "p x", "c"], timeout=300)
    # the per-rank view is there, before the outputs, and they are in order all the same
    expect(cell(page, 2).locator(".distcomp-rankview-bar button")).to_have_text(["all", "0", "1"])
    # an answer shows after its prompt: "(Pdb ranks 0-1)  p x" reads "p x"
    # each answer, then the replies of both ranks, before the next answer
    assert_in_order(
        answered_lines(page, 2),
        [
            ["[ranks 0-1] stopped at In [3], line 4, in step"],  # the third cell run
            ["p x"],
            ["[rank 0] 10", "[rank 1] 11"],
            ["n"],
            ["p x"],
            ["[rank 0] 20", "[rank 1] 22"],
            ["c"],
            ["[rank 0] done 20", "[rank 1] done 22"],
        ],
    )
