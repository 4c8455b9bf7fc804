"""JupyterLab's own debugger (the bug icon) on the ranks of a ``%%distcomp run`` cell, in a
real JupyterLab in headless Chromium: a gutter breakpoint stops every rank, the Call Stack
lists them, the Variables panel shows the chosen rank's locals, Next and Continue act on
all of them."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import TimeoutError as PlaywrightTimeout
from playwright.sync_api import expect

from .browser_support import (
    DOCS_SCREENSHOTS,
    NOTEBOOK,
    cell,
    command,
    open_notebook,
    overflow,
    run_cell_at,
    screenshot,
    wait_kernel_idle,
)
from .debug_support import MPI_SPEC

pytestmark = [pytest.mark.slow, pytest.mark.browser]

RANKS = 3
NB = "visual_debugger.ipynb"
DEBUG_CELL = """%%distcomp run dbg
x = comm.rank * 10
total = comm.allreduce(x)
y = total + 1
print('y', y)"""


ONLY_CELL = """%%distcomp run dbg
a = comm.rank
b = a + 1
c = b * 2
print('c', c)"""


def places(page) -> dict[str, str]:
    """Each Call Stack row's name and line."""
    return page.evaluate(
        """() => Object.fromEntries([...document.querySelectorAll('.jp-DebuggerCallstackFrame')]
            .map(row => [row.querySelector('.jp-DebuggerCallstackFrame-name').textContent.trim(),
                         row.querySelector('.jp-DebuggerCallstackFrame-location')
                            .textContent.trim().split(':').pop()]))"""
    )


def frames(page) -> list[str]:
    return page.locator(".jp-DebuggerCallstackFrame-name").all_inner_texts()


def wait_frames(page, expected: list[str], timeout: float = 60_000) -> None:
    page.wait_for_function(
        """expected => {
            const names = [...document.querySelectorAll('.jp-DebuggerCallstackFrame-name')]
                .map(n => n.textContent.trim()).sort();
            return JSON.stringify(names) === JSON.stringify(expected);
        }""",
        arg=sorted(expected),
        timeout=timeout,
    )


def wait_variable(page, name: str, value: str, timeout: float = 30_000) -> None:
    page.wait_for_function(
        """([name, value]) => {
            const body = document.querySelector('.jp-DebuggerVariables-body');
            if (!body) return false;
            const text = body.innerText.replace(/\\s+/g, ' ');
            return new RegExp('\\\\b' + name + '\\\\s*:?\\\\s*' + value + '\\\\b').test(text);
        }""",
        arg=[name, value],
        timeout=timeout,
    )


def open_rich_view(page, name: str, notebook: str):
    """Click the magnifier of the variable ``name`` (of the selected frame): its rich view
    (JupyterLab keeps one per name and notebook)."""
    row_name = page.locator(".jp-DebuggerVariables-name", has_text=re.compile(f"^{name}$")).first
    row_name.hover()
    row = page.locator(".jp-TreeItem", has=row_name).first
    row.locator(".jp-DebuggerVariables-renderVariable").first.click()
    view = page.locator(
        f'.jp-DebuggerRichVariable[id="jp-debugger-variable-mime-{name}-{notebook}"]'
    )
    view.wait_for(timeout=30_000)
    return view


def expand_until(page, name, shown: str, tries: int = 5) -> None:
    """Click the tree item of ``name`` until what it lists makes ``shown`` true: JupyterLab
    draws the Variables anew (folded) when it fetches them again, which a first click may
    meet."""
    for _ in range(tries):
        if not name.evaluate("n => Boolean(n.closest('.jp-TreeItem').expanded)"):
            name.click()
        try:
            page.wait_for_function(shown, timeout=6_000)
            return
        except PlaywrightTimeout:
            continue
    page.wait_for_function(shown, timeout=1_000)


def wait_text(page, locator, pattern: str, timeout: float = 30_000) -> None:
    page.wait_for_function(
        "([el, pattern]) => new RegExp(pattern).test(el.textContent)",
        arg=[locator.element_handle(), pattern],
        timeout=timeout,
    )


def test_gutter_breakpoint_stops_every_rank_and_next_continue_act_on_all(lab, page):
    url = lab.write_notebook(
        NB,
        [
            "%load_ext jupyter_distcomp",
            f"%%distcomp dbg\n{MPI_SPEC}",
            "dbg.runsettings.resource_layout.configure("
            f"instance_count=1, process_count_per_node={RANKS})",
            "%%distcomp run dbg\nfrom mpi4py import MPI\nimport numpy as np\n"
            "comm = MPI.COMM_WORLD\narr = np.arange(3) * comm.rank",
            DEBUG_CELL,
            ONLY_CELL,
        ],
    )
    open_notebook(page, url)
    for index in range(4):
        run_cell_at(page, index)
        wait_kernel_idle(page, timeout=300_000)
    page.locator(f"{NOTEBOOK} .jp-DebuggerBugButton").first.click()
    command(page, "debugger:show-panel")
    page.locator(".jp-DebuggerCallstack").first.wait_for(timeout=30_000)

    gutter = cell(page, 4).locator(".cm-breakpoint-gutter .cm-gutterElement")
    gutter.nth(3).click()  # line 3, the allreduce (the first element sizes the gutter)
    page.locator(".jp-DebuggerBreakpoint-line", has_text="3").wait_for(timeout=10_000)
    run_cell_at(page, 4)
    expected = [f"rank {r}: <module>" for r in range(RANKS)]
    wait_frames(page, expected)
    page.locator(".jp-DebuggerCallstackFrame-name", has_text="rank 2: <module>").click()
    wait_variable(page, "x", "20")
    # rank 2's array expands to its elements, each drawn with its value, not its type
    name = page.locator(".jp-DebuggerVariables-name", has_text=re.compile("^arr$")).first
    expand_until(
        page,
        name,
        """() => {
            const text = document.querySelector('.jp-DebuggerVariables-body').innerText
                .replace(/\\s+/g, ' ');
            return /\\[0\\]\\s*:?\\s*0\\s*\\[1\\]\\s*:?\\s*2\\s*\\[2\\]\\s*:?\\s*4\\b/
                .test(text) && /\\bmax\\s*:?\\s*4\\b/.test(text);
        }""",
    )
    last = page.locator(".jp-DebuggerVariables-name", has_text=re.compile(r"^\[2\]$")).first
    last.scroll_into_view_if_needed()  # the array's elements in sight, with their values
    screenshot(page, "visual-debugger-array-values")
    DOCS_SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(DOCS_SCREENSHOTS / "visual-debugger.png"))
    name.click()  # folded again
    # the magnifier of rank 2's x opens its rich view, and so does that of an array
    wait_text(page, open_rich_view(page, "x", NB), "\\b20\\b")
    screenshot(page, "visual-debugger-stopped")
    wait_text(page, open_rich_view(page, "arr", NB), "array\\(\\[0, 2, 4\\]\\)")

    command(page, "debugger:next")  # over the collective, on every rank
    page.wait_for_function(
        """n => [...document.querySelectorAll('.jp-DebuggerCallstackFrame-location')]
            .map(e => e.textContent).filter(t => /:4\\b/.test(t)).length >= n""",
        arg=RANKS,
        timeout=60_000,
    )
    wait_frames(page, expected)
    # the rank chosen before the step stays chosen, and the Variables are still its own
    selected = page.locator(".jp-DebuggerCallstackFrame.selected .jp-DebuggerCallstackFrame-name")
    expect(selected).to_have_text("rank 2: <module>", timeout=30_000)
    wait_variable(page, "total", str(sum(10 * r for r in range(RANKS))))
    wait_variable(page, "x", "20")
    screenshot(page, "visual-debugger-next-keeps-rank-2")
    page.locator(".jp-DebuggerCallstackFrame-name", has_text="rank 1: <module>").click()
    wait_variable(page, "total", str(sum(10 * r for r in range(RANKS))))
    # rank 1's x after rank 2's: the one view of x shows rank 1's, and says so
    wait_text(page, open_rich_view(page, "x", NB), "^\\s*10\\s*$")
    assert page.locator(".jp-DebuggerRichVariable").count() == 2  # x and arr
    page.locator(".lm-TabBar-tab", has_text="x (rank 1)").wait_for(timeout=10_000)
    for tab in ("x (rank 1)", "arr"):  # closed: the notebook gets its width back
        page.locator(".lm-TabBar-tab", has_text=tab).locator(".lm-TabBar-tabCloseIcon").click()
    page.locator(".jp-DebuggerRichVariable").first.wait_for(state="detached", timeout=10_000)
    screenshot(page, "visual-debugger-next")

    command(page, "debugger:continue")
    output = cell(page, 4).locator(".jp-OutputArea")
    total = sum(10 * r for r in range(RANKS)) + 1
    page.wait_for_function(
        "([el, n, y]) => (el.textContent.match(new RegExp('\\\\] y ' + y, 'g')) || []).length === n",
        arg=[output.element_handle(), RANKS, total],
        timeout=60_000,
    )
    assert not frames(page)

    # the ranks panel's "this rank only": Next moves rank 1 alone
    wait_kernel_idle(page)
    cell(page, 5).locator(".cm-breakpoint-gutter .cm-gutterElement").nth(3).click()
    page.locator(".jp-DebuggerBreakpoint-line", has_text="3").nth(1).wait_for(timeout=10_000)
    run_cell_at(page, 5)
    wait_frames(page, expected)
    page.evaluate("() => window.jupyterapp.shell.activateById('jupyter-distcomp-ranks')")
    page.locator(".distcomp-step-only").first.wait_for(timeout=10_000)
    assert not overflow(page), overflow(page)  # every stopped rank's toggle, none pressed
    only = page.locator('.distcomp-rank[data-rank="1"] .distcomp-step-only')
    only.click()
    page.locator('.distcomp-rank[data-rank="1"] .distcomp-step-only[aria-pressed="true"]').wait_for(
        timeout=10_000
    )
    assert "rank 1 only" in page.locator(".distcomp-step-only-note").inner_text()
    # the panel fits the sidebar at its default width, the pressed toggle as the others
    assert not overflow(page), overflow(page)
    screenshot(page, "visual-debugger-this-rank-only")
    command(page, "debugger:next")
    want = {f"rank {r}: <module>": "4" if r == 1 else "3" for r in range(RANKS)}
    page.wait_for_function(
        """want => {
            const got = Object.fromEntries([...document.querySelectorAll(
                '.jp-DebuggerCallstackFrame')].map(row => [
                row.querySelector('.jp-DebuggerCallstackFrame-name').textContent.trim(),
                row.querySelector('.jp-DebuggerCallstackFrame-location')
                    .textContent.trim().split(':').pop()]));
            return JSON.stringify(got, Object.keys(got).sort())
                === JSON.stringify(want, Object.keys(want).sort());
        }""",
        arg=want,
        timeout=60_000,
    )
    assert places(page) == want
    page.locator('.distcomp-rank[data-rank="1"] .distcomp-step-only').click()  # all again
    page.locator(
        '.distcomp-rank[data-rank="1"] .distcomp-step-only[aria-pressed="false"]'
    ).wait_for(timeout=10_000)
    command(page, "debugger:continue")
    output = cell(page, 5).locator(".jp-OutputArea")
    page.wait_for_function(
        "([el, n]) => (el.textContent.match(/\\] c \\d/g) || []).length === n",
        arg=[output.element_handle(), RANKS],
        timeout=60_000,
    )
    page.locator(f"{NOTEBOOK} .jp-DebuggerBugButton").first.click()  # the debugger off
    wait_kernel_idle(page)
