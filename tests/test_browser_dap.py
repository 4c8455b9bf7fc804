"""JupyterLab's own debugger (the bug icon) on the ranks of a ``%%distcomp run`` cell, in a
real JupyterLab in headless Chromium: a gutter breakpoint stops every rank, the Call Stack
lists them, the Variables panel shows the chosen rank's locals, Next and Continue act on
all of them."""

from __future__ import annotations

import pytest

from .browser_support import (
    DOCS_SCREENSHOTS,
    NOTEBOOK,
    cell,
    command,
    open_notebook,
    run_cell_at,
    screenshot,
    wait_kernel_idle,
)
from .debug_support import MPI_SPEC

pytestmark = [pytest.mark.slow, pytest.mark.browser]

RANKS = 3
DEBUG_CELL = """%%distcomp run dbg
x = comm.rank * 10
total = comm.allreduce(x)
y = total + 1
print('y', y)"""


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


def test_gutter_breakpoint_stops_every_rank_and_next_continue_act_on_all(lab, page):
    url = lab.write_notebook(
        "visual_debugger.ipynb",
        [
            "%load_ext jupyter_distcomp",
            f"%%distcomp dbg\n{MPI_SPEC}",
            "dbg.runsettings.resource_layout.configure("
            f"instance_count=1, process_count_per_node={RANKS})",
            "%%distcomp run dbg\nfrom mpi4py import MPI\ncomm = MPI.COMM_WORLD",
            DEBUG_CELL,
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
    screenshot(page, "visual-debugger-stopped")
    DOCS_SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(DOCS_SCREENSHOTS / "visual-debugger.png"))

    command(page, "debugger:next")  # over the collective, on every rank
    page.wait_for_function(
        """n => [...document.querySelectorAll('.jp-DebuggerCallstackFrame-location')]
            .map(e => e.textContent).filter(t => /:4\\b/.test(t)).length >= n""",
        arg=RANKS,
        timeout=60_000,
    )
    wait_frames(page, expected)
    page.locator(".jp-DebuggerCallstackFrame-name", has_text="rank 1: <module>").click()
    wait_variable(page, "total", str(sum(10 * r for r in range(RANKS))))
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
    page.locator(f"{NOTEBOOK} .jp-DebuggerBugButton").first.click()  # the debugger off
    wait_kernel_idle(page)
