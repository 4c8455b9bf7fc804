"""Notebook 7 (JupyterLab's components in the classic notebook's one-document page) with the
extension, in headless Chromium: a run cell's labelled lines and its per-rank view, the
line a silent run cell shows while its ranks work (gone at its end), the ranks panel at its
default width, and the group debugger prompt answered in the page, each reply under its
command."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from .browser_support import LabServer, cell, command, open_notebook, overflow, screenshot
from .test_browser_transparency import answered_lines, assert_in_order, outputs, run_answering

pytestmark = [pytest.mark.slow, pytest.mark.browser]

SPEC = """\
name: seven
type: DistributedComponent
launcher:
  type: mpi
  additional_arguments: python train.py
"""
CELLS = [
    "%load_ext jupyter_distcomp\n%config DistComp.default_process_count_per_node = 2",
    f"%%distcomp seven\n{SPEC}",
    "%%distcomp run seven\nprint('hello from', mpi_rank)",
    "%%distcomp run seven\nimport time\ntime.sleep(7)",
    "%%distcomp run seven\nx = 10 + mpi_rank\nbreakpoint()\nprint('done', x)",
]


@pytest.fixture(scope="module")
def notebook7(tmp_path_factory):
    pytest.importorskip("notebook", reason="Notebook 7 is the test extra's `notebook>=7`")
    server = LabServer(tmp_path_factory.mktemp("notebook7"), app="notebook")
    try:
        yield server
    finally:
        server.stop()


def test_run_cell_panel_and_group_prompt_in_notebook_7(notebook7, page):
    open_notebook(page, notebook7.write_notebook("seven.ipynb", CELLS))
    assert page.evaluate("() => window.jupyterapp.name") == "Jupyter Notebook"
    run_answering(page, 0, [])
    run_answering(page, 1, [], timeout=300)

    # the run cell: a line per rank, labelled, and the per-rank view above them
    run_answering(page, 2, [], timeout=300)
    lines = sorted(
        line for text in outputs(page, 2) for line in text.splitlines() if line.startswith("[")
    )
    assert lines == ["[rank 0] hello from 0", "[rank 1] hello from 1"], lines
    bar = cell(page, 2).locator(".distcomp-rankview-bar button")
    expect(bar).to_have_text(["all", "0", "1"], timeout=10_000)
    bar.filter(has_text=re.compile("^1$")).click()
    page.wait_for_function(
        "el => el.innerText.includes('hello from 1') && !el.innerText.includes('[rank')",
        arg=cell(page, 2).locator(".distcomp-rankview-body").element_handle(),
        timeout=10_000,
    )

    # a silent cell says what its ranks do while they work, and nothing once it ended
    page.evaluate(
        """() => {
            window.jupyterapp.shell.currentWidget.content.activeCellIndex = 3;
            void window.jupyterapp.commands.execute('notebook:run-cell');
        }"""
    )
    said = cell(page, 3).locator(".jp-OutputArea-child", has_text="ranks 0-1: at In")
    said.wait_for(timeout=60_000)
    assert re.fullmatch(r"ranks 0-1: at In \[\d+\], line 3 \(\d+ s\)", said.inner_text().strip())
    screenshot(page, "notebook7-silent-cell")
    page.wait_for_function(
        "el => !el.querySelector('.jp-OutputArea-child')",
        arg=cell(page, 3).element_handle(),
        timeout=60_000,
    )

    # the ranks panel, in the notebook's left side panel, at its default width
    command(page, "distcomp:show-ranks")
    rows = page.locator(".distcomp-ranks-panel .distcomp-rank")
    expect(rows).to_have_count(2, timeout=30_000)
    assert rows.evaluate_all("rows => rows.map(r => r.dataset.state)") == ["idle", "idle"]
    assert not overflow(page), overflow(page)
    screenshot(page, "notebook7-ranks-panel")

    # the group prompt: each answer, then both ranks' replies, before the next answer
    run_answering(page, 4, ["p x", "c"], timeout=300)
    assert_in_order(
        answered_lines(page, 4),
        [
            ["[ranks 0-1] stopped at In [5], line 4, in <module>"],
            ["p x"],
            ["[rank 0] 10", "[rank 1] 11"],
            ["c"],
            ["[rank 0] done 10", "[rank 1] done 11"],
        ],
    )
    screenshot(page, "notebook7-group-prompt")
