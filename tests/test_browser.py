"""The JupyterLab extension in a real JupyterLab, driven in headless Debian Chromium.

One server and one browser for the module (a cold start costs ~10 s; the ``lab``,
``browser`` and ``page`` fixtures are in conftest.py); each test opens its own notebook with
``?reset`` and saves a screenshot under test-output/browser/.
"""

from __future__ import annotations

import time

import psutil
import pytest

from .browser_support import (
    cell,
    command,
    languages,
    open_notebook,
    overflow,
    run_cell_at,
    screenshot,
    wait_kernel_idle,
    wait_language,
)

pytestmark = [pytest.mark.slow, pytest.mark.browser]

SPEC = """\
name: browser_demo
version: 0.0.1
type: DistributedComponent
description: a spec typed in a notebook
inputs:
  n:
    type: Integer
    default: 2
outputs:
  out:
    type: AnyDirectory
launcher:
  type: mpi
  additional_arguments: python train.py --n {inputs.n} --out {outputs.out}
"""


def test_spec_cell_is_yaml_and_run_cell_stays_python(lab, page):
    url = lab.write_notebook(
        "highlight.ipynb",
        [f"%%distcomp demo\n{SPEC}", "%%distcomp run demo\nprint('hello', mpi_rank)", "x = 1"],
    )
    open_notebook(page, url)
    # after the kernel's language_info reset every code cell to Python, the spec stays YAML
    time.sleep(1.0)
    assert languages(page) == ["yaml", "python", "python"]
    spec_tokens = cell(page, 0).locator(".cm-line span[class]").count()
    assert spec_tokens >= 10, "the YAML body has no highlighted tokens"
    screenshot(page, "highlight-loaded")

    # switching live: typing the magic line makes a cell YAML, removing it makes it Python
    editor = cell(page, 2).locator(".cm-content")
    editor.click()
    page.keyboard.press("Control+Home")
    page.keyboard.type("%%distcomp live\n")
    wait_language(page, 2, "yaml")
    assert wait_linted(page, 2) >= 1  # a spec now: checked, and `x = 1` is no spec
    screenshot(page, "highlight-typed")
    page.keyboard.press("Control+Home")
    page.keyboard.press("Shift+End")
    page.keyboard.press("Delete")
    wait_language(page, 2, "python")
    assert languages(page) == ["yaml", "python", "python"]
    # Python again: our gutter and count are gone with the magic line
    page.wait_for_function(
        "c => !c.querySelector('.cm-gutters, .cm-panels')", arg=cell(page, 2).element_handle()
    )
    assert ours_in_editor(page, 1)["gutters"] == ours_in_editor(page, 1)["panels"] == 0

    # the palette's template command inserts a spec cell: YAML, and valid (no marks)
    command(page, "distcomp:insert-template", {"launcher": "torch.distributed"})
    page.wait_for_function(
        "() => window.jupyterapp.shell.currentWidget.content.widgets.length === 4", timeout=10_000
    )
    wait_language(page, 3, "yaml")
    inserted = cell(page, 3)
    assert "type: torch.distributed" in inserted.locator(".cm-content").inner_text()
    assert wait_linted(page, 3) == 0  # the linter ran on the whole cell and found nothing
    assert inserted.locator("[class*='cm-lintRange']").count() == 0


def test_misspelt_keys_get_marks_at_their_lines(lab, page):
    text = SPEC.replace("description:", "descripton:").replace("default: 2", "defualt: 2")
    url = lab.write_notebook(
        "diagnostics.ipynb",
        [
            f"%%distcomp demo\n{text}",
            "%%distcomp run demo\nlancher = 1",
            "%%distcomp other\nversion: 1\ntype: CommandComponent\ncommand: python x.py",
        ],
    )
    open_notebook(page, url)
    spec = cell(page, 0)
    spec.locator(".cm-lintRange-error").first.wait_for(timeout=15_000)
    warning = spec.locator(".cm-lintRange-warning")
    error = spec.locator(".cm-lintRange-error")
    assert warning.count() == 1 and error.count() == 1
    # each mark sits on the misspelt key, in the line that holds it
    assert warning.inner_text() == "descripton"
    assert (
        "descripton: a spec typed"
        in warning.locator("xpath=ancestor::div[@class='cm-line']").inner_text()
    )
    assert error.inner_text() == "defualt"
    assert (
        error.locator("xpath=ancestor::div[@class='cm-line']").inner_text().strip() == "defualt: 2"
    )
    # a sign in the gutter beside each marked line, and a count under the editor
    assert spec.locator(".cm-gutter-lint .cm-lint-marker-error").count() == 1
    assert spec.locator(".cm-gutter-lint .cm-lint-marker-warning").count() == 1
    assert spec.locator(".distcomp-diagnostic-count").inner_text() == (
        "1 error, 1 warning in this spec"
    )
    # the run cell is Python: nothing of ours in its editor (no linter, gutter or count)
    assert ours_in_editor(page, 1) == {"gutters": 0, "panels": 0, "linted": False}
    assert cell(page, 1).locator("[class*='cm-lintRange']").count() == 0

    error.hover()
    tooltip = page.locator(".cm-tooltip-lint")
    tooltip.wait_for(timeout=10_000)
    assert "unknown key 'defualt' in inputs.n. Did you mean 'default'?" in tooltip.inner_text()
    screenshot(page, "diagnostics-hover")

    # a message with code in it: the code drawn as code, no backticks
    page.mouse.move(0, 0)
    tooltip.wait_for(state="detached", timeout=10_000)
    missing = cell(page, 2).locator(".cm-lintRange-error").first
    missing.wait_for(timeout=15_000)
    missing.hover()
    tooltip.wait_for(timeout=10_000)
    assert "Fix: add name: my_component." in tooltip.inner_text(), tooltip.inner_text()
    assert "`" not in tooltip.inner_text()
    assert tooltip.locator("code", has_text="name: my_component").count() == 1


def completer_offers(page) -> list[str]:
    """What JupyterLab's completer popup offers, once it shows (the kernel's and the
    context completer's offers merged)."""
    items = page.locator(".jp-Completer .jp-Completer-item")
    items.first.wait_for(timeout=30_000)
    return [
        text.strip() for text in page.locator(".jp-Completer .jp-Completer-match").all_inner_texts()
    ]


def test_tab_in_a_spec_cell_offers_launcher_types_and_spec_keys(lab, page):
    url = lab.write_notebook(
        "complete.ipynb",
        [
            "%load_ext jupyter_distcomp",
            "%%distcomp t\nname: x\nversion: 0.0.1\n$schema: http://x\nlauncher:\n  type: torch.d",
            "print(zebra_word)\nzeb",
        ],
    )
    open_notebook(page, url)
    run_cell_at(page, 0)
    page.wait_for_function(
        "el => el.textContent.includes('[1]')",
        arg=cell(page, 0).locator(".jp-InputPrompt").element_handle(),
        timeout=60_000,
    )
    editor = cell(page, 1).locator(".cm-content")
    editor.click()
    page.keyboard.press("Control+End")
    page.keyboard.press("Tab")
    # the launcher types, not the words of the cell (`name`, `:`, `0.0.1`, `$schema`)
    assert completer_offers(page) == ["torch.distributed"]
    # its type label, whole, on the offer's one line inside the completer's box
    fits = page.locator(".jp-Completer-typeExtended").evaluate_all(
        """labels => labels.map(label => {
            const box = label.closest('.jp-Completer').getBoundingClientRect();
            const r = label.getBoundingClientRect();
            const item = label.closest('.jp-Completer-item').getBoundingClientRect();
            return [label.textContent, r.right <= box.right + 0.5,
                    r.top >= item.top - 0.5 && r.bottom <= item.bottom + 0.5,
                    label.scrollWidth <= label.clientWidth];
        })"""
    )
    assert fits == [["spec", True, True, True]], fits
    screenshot(page, "complete-launcher-type")
    page.keyboard.press("Enter")
    page.wait_for_function(
        "el => el.textContent.endsWith('type: torch.distributed')", arg=editor.element_handle()
    )
    page.keyboard.press("Enter")  # a new key of the launcher, indented under it
    page.keyboard.type("ad")
    page.keyboard.press("Tab")
    assert completer_offers(page) == ["additional_arguments"]
    page.keyboard.press("Enter")
    lines = editor.locator(".cm-line").all_inner_texts()
    assert lines[-2:] == ["  type: torch.distributed", "  additional_arguments"], lines

    # a Python cell keeps its own words among the offers (the context completer)
    page.keyboard.press("Escape")
    cell(page, 2).locator(".cm-content").click()
    page.keyboard.press("Control+End")
    page.keyboard.press("Tab")
    assert "zebra_word" in completer_offers(page)


def _rank_rows(page):
    return page.locator(".distcomp-ranks-panel .distcomp-rank")


def test_ranks_panel_follows_a_running_cell_and_stops_ranks(lab, page):
    url = lab.write_notebook(
        "panel.ipynb",
        [
            "%load_ext jupyter_distcomp",
            f"%%distcomp panel_demo\n{SPEC}",
            "panel_demo.runsettings.resource_layout.configure(instance_count=2, process_count_per_node=2)",
            "%%distcomp run panel_demo\nimport time\nprint('start', mpi_rank, flush=True)\n"
            "time.sleep(5 if mpi_rank == 0 else 0.2)\nprint('end', mpi_rank)",
            "%%distcomp run panel_demo\nprint('sleeping', flush=True)\ntime.sleep(120)",
        ],
    )
    open_notebook(page, url)
    command(page, "distcomp:show-ranks")
    command(page, "notebook:run-all-cells")

    # while a cell runs: 4 ranks; rank 0 still busy (long sleep) after the others went idle
    wait_states(page, ["busy", "idle", "idle", "idle"], timeout=120)
    layout = page.locator(".distcomp-world-layout").inner_text()
    assert layout == "2 nodes x 2 processes per node = 4 ranks"
    assert page.locator(".distcomp-ranks-status").inner_text() == "distcomp: 4 ranks (1 busy)"
    assert not overflow(page), overflow(page)  # 2 nodes: every column, at the default width
    screenshot(page, "panel-busy")
    output = cell(page, 3).locator(".jp-OutputArea")
    output.get_by_text("end 0").wait_for(timeout=30_000)
    for rank in range(4):
        assert f"rank {rank}] end {rank}" in output.inner_text()

    # the next cell sleeps on every rank: Interrupt ends it, and the ranks stay usable
    wait_states(page, ["busy"] * 4, timeout=30)
    cell(page, 4).get_by_text("sleeping").first.wait_for(timeout=30_000)
    pids = [int(p) for p in page.locator(".distcomp-rank-pid").all_inner_texts()]
    assert len(pids) == 4 and all(_alive(pid) for pid in pids)
    page.locator(".distcomp-world[data-name='panel_demo'] .distcomp-ranks-interrupt").click()
    wait_states(page, ["idle"] * 4, timeout=30)
    wait_kernel_idle(page, timeout=30_000)
    # the interrupt says where the ranks were (in the 120 s sleep: they did not finish it),
    # grouped, in the notebook's own cell, and nothing of the package
    said = cell(page, 4).locator(".jp-OutputArea").inner_text()
    prompt = cell(page, 4).locator(".jp-InputPrompt").inner_text().strip()  # "[5]:"
    assert "Interrupted: sent SIGINT to ranks 0-3 of 'panel_demo'" in said, said
    assert "ranks 0-3: stopped at" in said and said.count("stopped at") == 1, said
    assert f"Cell In{prompt.rstrip(':')}, line 3" in said and "time.sleep(120)" in said, said
    for internal in ("magics.py", "backend.py", "run.py", "threading.py", "site-packages"):
        assert internal not in said, said
    assert all(_alive(pid) for pid in pids)
    page.locator(".distcomp-ranks-message", has_text="Interrupted.").wait_for(timeout=5_000)
    assert not overflow(page), overflow(page)
    screenshot(page, "panel-interrupted")

    # Restart asks first, as JupyterLab does before a kernel restart: Cancel keeps the ranks
    page.locator(".distcomp-world[data-name='panel_demo'] .distcomp-ranks-restart").click()
    dialog = page.locator(".jp-Dialog")
    dialog.wait_for(timeout=10_000)
    assert "Restart the ranks of panel_demo?" in dialog.inner_text()
    assert "the variables the ranks hold are lost" in dialog.inner_text()
    dialog.locator(".jp-mod-reject").click()
    dialog.wait_for(state="detached", timeout=10_000)
    time.sleep(1.0)
    assert [int(p) for p in page.locator(".distcomp-rank-pid").all_inner_texts()] == pids
    assert all(_alive(pid) for pid in pids)

    # idle ranks stop at once
    page.locator(".distcomp-world[data-name='panel_demo'] .distcomp-ranks-stop").click()
    page.wait_for_selector(".distcomp-ranks-panel .distcomp-ranks-empty", timeout=60_000)
    assert page.locator(".distcomp-ranks-status").inner_text() == "distcomp: 0 ranks"
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and any(_alive(pid) for pid in pids):
        time.sleep(0.2)
    assert not [pid for pid in pids if _alive(pid)], "rank processes left after Stop"
    kernel_children = _kernel_descendants(lab)
    assert not [p for p in kernel_children if _is_rank_process(p)], kernel_children
    assert not overflow(page), overflow(page)
    screenshot(page, "panel-stopped")


def ours_in_editor(page, index: int) -> dict:
    """What this extension put into cell ``index``'s editor: gutters, panels, and whether
    its linter ever ran there."""
    return cell(page, index).evaluate(
        """c => ({gutters: c.querySelectorAll('.cm-gutters').length,
                  panels: c.querySelectorAll('.cm-panels').length,
                  linted: c.querySelector('.cm-editor').dataset.distcompLinted !== undefined})"""
    )


def wait_linted(page, index: int, timeout: float = 15) -> int:
    """Wait until the spec linter has checked cell ``index``'s current text; the number of
    diagnostics it found."""
    editor = cell(page, index).locator(".cm-editor")
    page.wait_for_function(
        """([index, editor]) => {
            const cells = window.jupyterapp.shell.currentWidget.content.widgets;
            const length = cells[index].model.sharedModel.getSource().length;
            return editor.dataset.distcompLinted === String(length);
        }""",
        arg=[index, editor.element_handle()],
        timeout=timeout * 1000,
    )
    return int(editor.get_attribute("data-distcomp-diagnostics"))


def wait_states(page, expected: list[str], timeout: float) -> None:
    """Poll the panel's rows until their states are ``expected`` (rank order)."""
    deadline = time.monotonic() + timeout
    seen = None
    while time.monotonic() < deadline:
        seen = _rank_rows(page).evaluate_all("rows => rows.map(r => r.dataset.state)")
        if seen == expected:
            return
        time.sleep(0.05)
    raise AssertionError(f"rank states {seen}, expected {expected}")


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _kernel_descendants(lab) -> list[psutil.Process]:
    """Processes started by this test's kernels (the server's children's children)."""
    return psutil.Process(lab.process.pid).children(recursive=True)


def _is_rank_process(process: psutil.Process) -> bool:
    try:
        cmdline = " ".join(process.cmdline())
    except psutil.NoSuchProcess:
        return False
    return "mpiexec" in cmdline or "ipengine" in cmdline or "ipyparallel.engine" in cmdline


def test_widget_sets_layout_starts_ranks_and_a_run_cell_prints_from_4_ranks(lab, page):
    url = lab.write_notebook(
        "widget.ipynb",
        [
            "%load_ext jupyter_distcomp",
            f"%%distcomp widget_demo\n{SPEC}",
            "%%distcomp run widget_demo\nprint('hello from', mpi_rank, 'of', mpi_size)",
        ],
    )
    open_notebook(page, url)
    cell(page, 0).click()
    command(page, "notebook:run-cell-and-select-next")
    command(page, "notebook:run-cell-and-select-next")
    panel = cell(page, 1).locator(".distcomp-panel")
    panel.wait_for(timeout=60_000)
    screenshot(page, "widget-rendered")

    for selector, value in ((".distcomp-instance-count", "2"), (".distcomp-process-count", "2")):
        field = panel.locator(f"{selector} input")
        field.fill(value)
        field.press("Enter")
    panel.locator(".distcomp-btn-start").click()
    status = panel.locator(".distcomp-status")
    page.wait_for_function(
        "el => /\\b4 of 4\\b|4 rank\\(?s\\)? (ready|started|running)/i.test(el.textContent)",
        arg=status.element_handle(),
        timeout=120_000,
    )
    screenshot(page, "widget-started")

    wait_kernel_idle(page)
    cell(page, 2).click()
    command(page, "notebook:run-cell")
    output = cell(page, 2).locator(".jp-OutputArea")
    page.wait_for_function(
        "el => (el.textContent.match(/hello from \\d of 4/g) || []).length === 4",
        arg=output.element_handle(),
        timeout=120_000,
    )
    text = output.inner_text()
    for rank in range(4):
        node = rank // 2
        assert f"[node {node} rank {rank}] hello from {rank} of 4" in text, text
    screenshot(page, "widget-run-output")


def test_ranks_panel_shows_a_debugging_rank_and_where_for_a_background_cell(lab, page):
    url = lab.write_notebook(
        "background.ipynb",
        [
            "%load_ext jupyter_distcomp",
            f"%%distcomp bg_demo\n{SPEC}",
            "bg_demo.runsettings.resource_layout.configure(instance_count=1, process_count_per_node=2)",
            "%%distcomp run bg_demo --background\nimport time\n"
            "def load_batch():\n    time.sleep(120)\nload_batch()",
            # what the debugger of a rank does while rank 1 is at a pdb prompt
            "from jupyter_distcomp.local.ranks.backend import get_backend\n"
            "get_backend().world('bg_demo').set_state([1], 'debugging')",
        ],
    )
    open_notebook(page, url)
    command(page, "distcomp:show-ranks")
    command(page, "notebook:run-all-cells")
    wait_states(page, ["busy", "debugging"], timeout=120)
    wait_kernel_idle(page, timeout=30_000)  # the background cell leaves the kernel free
    world = page.locator(".distcomp-world[data-name='bg_demo']")
    assert "background cell runs" in world.locator(".distcomp-world-background").inner_text()
    assert "debugging" in world.locator(".distcomp-state-debugging").inner_text()
    status = page.locator(".distcomp-ranks-status").inner_text()
    assert status == "distcomp: 2 ranks (1 busy, 1 debugging)"
    # "debugging" beside its pid: both whole, nothing clipped
    cells = world.locator(".distcomp-rank-state, .distcomp-rank-pid").evaluate_all(
        """cells => cells.map(c => {
            const panel = c.closest('.distcomp-ranks-panel').getBoundingClientRect();
            const r = c.getBoundingClientRect();
            return [c.innerText, c.scrollWidth - c.clientWidth, r.right - panel.right];
        })"""
    )
    assert all(cut <= 0 and out <= 0 for _, cut, out in cells), cells
    world.locator(".distcomp-ranks-where").click()
    where = world.locator(".distcomp-where")
    where.wait_for(timeout=15_000)
    text = where.inner_text()
    assert "rank 0: busy, current stack" in text and "rank 1: at a debugger prompt" in text
    assert "in load_batch" in text and "time.sleep(120)" in text
    assert not overflow(page), overflow(page)  # debugging, the background line, where's stacks
    screenshot(page, "panel-where")

    # a stop of busy ranks asks first
    page.locator(".distcomp-world[data-name='bg_demo'] .distcomp-ranks-stop").click()
    dialog = page.locator(".jp-Dialog")
    dialog.wait_for(timeout=10_000)
    assert "Stop the ranks of bg_demo?" in dialog.inner_text()
    dialog.locator(".jp-mod-accept").click()
    page.wait_for_selector(".distcomp-ranks-panel .distcomp-ranks-empty", timeout=60_000)
    assert not page.locator(".distcomp-ranks-where").count()
