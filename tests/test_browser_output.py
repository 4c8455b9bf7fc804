"""What ranks print, as a person sees it in JupyterLab (headless Chromium), with 16 ranks: a
progress line and tqdm bars, one per rank, updated in place to their end; a run cell read
merged (labelled lines) or one rank at a time, switched without re-running. The README's
screenshot of the per-rank view is taken here.
"""

from __future__ import annotations

import re
import time

import pytest
from playwright.sync_api import expect

from .browser_support import cell, doc_screenshot, open_notebook, run_cell_at, wait_kernel_idle

pytestmark = [pytest.mark.slow, pytest.mark.browser]

RANKS = 16
#: a line too long for the cell's width
LONG = ("its loss is high, which the next 40 steps may or may not bring down; " * 4).strip()
SPEC = """\
name: many
type: DistributedComponent
launcher:
  type: mpi
  additional_arguments: python train.py
"""


def output_of(page, index: int):
    return cell(page, index).locator(".jp-Cell-outputArea")


# the cell's per-rank view (before its output wrapper) and its outputs, as the page shows them
SHOWN = (
    "el => [...el.querySelectorAll('.distcomp-rankview, .jp-Cell-outputWrapper')]"
    ".filter(n => n.checkVisibility()).map(n => n.innerText).join('\\n')"
)


def shown_text(page, index: int) -> str:
    """What the cell shows below its input (hidden outputs excluded)."""
    return cell(page, index).evaluate(SHOWN)


def run_and_wait(page, index: int, done: str, timeout: float = 180) -> list[str]:
    """Run cell ``index``; what its output showed, sampled, until ``done`` matched."""
    wait_kernel_idle(page, timeout=timeout * 1000)
    run_cell_at(page, index)
    seen: list[str] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        text = shown_text(page, index)
        if not seen or seen[-1] != text:
            seen.append(text)
        if re.search(done, text):
            wait_kernel_idle(page, timeout=timeout * 1000)
            seen.append(shown_text(page, index))
            return seen
        time.sleep(0.05)
    raise AssertionError(f"cell {index} never showed {done!r}: {seen[-1:]}")


def rank_lines(text: str) -> dict[int, list[str]]:
    lines: dict[int, list[str]] = {}
    for line in text.splitlines():
        match = re.match(r"\[rank (\d+)\] ?(.*)", line)
        if match:
            lines.setdefault(int(match[1]), []).append(match[2])
    return lines


def test_progress_bars_and_the_per_rank_view_with_16_ranks(lab, page):
    url = lab.write_notebook(
        "output.ipynb",
        [
            f"%load_ext jupyter_distcomp\n%config DistComp.default_process_count_per_node = {RANKS}",
            f"%%distcomp many\n{SPEC}",
            "%%distcomp run many\nimport time\nfor i in range(5):\n"
            "    print(f'\\rstep {i}/5', end='', flush=True)\n    time.sleep(0.4)",
            "%%distcomp run many\nfrom tqdm import tqdm\nimport time\n"
            "for i in tqdm(range(5)):\n    time.sleep(0.2)",
            "%%distcomp run many\nfrom tqdm.notebook import tqdm\nimport time\n"
            "for i in tqdm(range(5)):\n    time.sleep(0.2)",
            "%%distcomp run many\nimport sys\nprint('hello from', mpi_rank)\n"
            "print('loss', round(1 / (1 + mpi_rank), 3))\n"
            f"if mpi_rank == 3:\n    print('rank 3 warns', {LONG!r}, file=sys.stderr)",
        ],
    )
    open_notebook(page, url)
    run_and_wait(page, 0, r"^$|.*", timeout=60)
    run_and_wait(page, 1, rf"ranks ready {RANKS} of {RANKS}|{RANKS} rank\(s\)", timeout=300)

    # a line redrawn with \r: one line per rank, updated in place, its last state kept
    seen = run_and_wait(page, 2, r"(step 4/5[\s\S]*){16}")
    final = rank_lines(seen[-1])
    assert final == {rank: ["step 4/5"] for rank in range(RANKS)}, seen[-1]
    middle = [rank_lines(text) for text in seen[:-1]]
    assert any(
        all(len(lines) == 1 for lines in view.values()) and "step 2/5" in str(view)
        for view in middle
    ), "no state between the first and the last showed"

    # tqdm: one bar per rank, at its end, and no empty or garbled line
    seen = run_and_wait(page, 3, r"(100%\|[\s\S]*){16}")
    bars = rank_lines(seen[-1])
    assert sorted(bars) == list(range(RANKS)), seen[-1]
    for lines in bars.values():
        assert len(lines) == 1 and lines[0].startswith("100%|") and "5/5" in lines[0], lines
    # one rank's bar alone: without its label, as that rank's printed lines are
    cell(page, 3).locator(".distcomp-rankview-bar button", has_text=re.compile("^3$")).click()
    page.wait_for_function(
        f"el => /100%\\|/.test(({SHOWN})(el)) && !/\\[rank/.test(({SHOWN})(el))",
        arg=cell(page, 3).element_handle(),
        timeout=10_000,
    )
    alone = [line for line in shown_text(page, 3).splitlines() if "%|" in line]
    assert len(alone) == 1 and alone[0].startswith("100%|"), alone

    # tqdm.notebook on the ranks: a progress widget per rank, each at its end
    run_and_wait(page, 4, r"(5/5[\s\S]*){16}")
    widgets = output_of(page, 4).locator(".widget-hprogress")
    assert widgets.count() == RANKS
    ends = output_of(page, 4).locator(".widget-hbox", has_text="100%")
    assert ends.count() == RANKS

    # the per-rank view: merged (labelled lines) or one rank alone, switched without re-running
    seen = run_and_wait(page, 5, r"(loss[\s\S]*){16}")
    merged = rank_lines(seen[-1])
    assert sorted(merged) == list(range(RANKS))
    bar = cell(page, 5).locator(".distcomp-rankview-bar")
    # the bar follows the output after a short redraw delay
    expect(bar.locator("button")).to_have_text(["all", *map(str, range(RANKS))], timeout=10_000)
    tops = bar.locator("button").evaluate_all(
        "buttons => buttons.map(b => b.getBoundingClientRect().top)"
    )
    assert len(set(tops)) == 1, "the 17 buttons do not fit one row"
    count = cell(page, 5).locator(".jp-InputPrompt").inner_text()

    bar.locator("button", has_text=re.compile("^3$")).click()
    page.wait_for_function(
        f"el => (text => !/\\[rank/.test(text) && /hello from 3/.test(text))(({SHOWN})(el))",
        arg=cell(page, 5).element_handle(),
        timeout=10_000,
    )
    alone = [line for line in shown_text(page, 5).splitlines() if line.strip()]
    warning = f"rank 3 warns {LONG}"
    assert alone[alone.index("hello from 3") :] == ["hello from 3", "loss 0.25", warning]
    assert not any(re.search(r"hello from (?!3$)", line) for line in alone), alone
    # the long line wraps as in the cell's own outputs: nothing of it is cut off
    items = (
        cell(page, 5)
        .locator(".distcomp-rankview-item")
        .evaluate_all(
            """items => items.map(item => {
            const pre = item.querySelector('pre') || item;
            return [pre.innerText.slice(0, 20), pre.scrollWidth - pre.clientWidth,
                    item.getBoundingClientRect().height];
        })"""
        )
    )
    assert all(cut <= 0 for _, cut, _ in items), items
    assert max(height for *_, height in items) > 40, items  # the warning takes several lines
    doc_screenshot(cell(page, 5), "per-rank-view")

    bar.locator("button", has_text=re.compile("^all$")).click()
    page.wait_for_function(
        f"el => (({SHOWN})(el).match(/\\[rank \\d+\\] hello from/g) || []).length === 16",
        arg=cell(page, 5).element_handle(),
        timeout=10_000,
    )
    assert rank_lines(shown_text(page, 5)) == merged
    assert cell(page, 5).locator(".jp-InputPrompt").inner_text() == count, "it ran again"


def test_rank_widgets_survive_a_page_reload(lab, page):
    url = lab.write_notebook(
        "reload.ipynb",
        [
            "%load_ext jupyter_distcomp\n%config DistComp.default_process_count_per_node = 2",
            "%%distcomp pair\n" + SPEC.replace("many", "pair"),
            "%%distcomp run pair\nfrom tqdm.notebook import tqdm\nimport time\n"
            "for i in tqdm(range(5), desc=f'rank {mpi_rank}'):\n    time.sleep(0.1)",
        ],
    )
    open_notebook(page, url)
    run_and_wait(page, 0, r"^$|.*", timeout=60)
    run_and_wait(page, 1, r"2 rank\(s\)", timeout=300)
    run_and_wait(page, 2, r"(5/5[\s\S]*){2}")
    bars = output_of(page, 2).locator(".widget-hprogress")
    assert bars.count() == 2
    wait_kernel_idle(page)
    page.keyboard.press("Control+s")  # the outputs (the bars' views) are in the file now
    page.wait_for_function(
        "() => !window.jupyterapp.shell.currentWidget.context.model.dirty", timeout=30_000
    )

    missing: list[str] = []
    page.on("console", lambda msg: missing.append(msg.text) if "not found" in msg.text else None)
    page.reload()
    page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=60_000)
    wait_kernel_idle(page)
    # the kernel runs on: each rank's bar comes back at its end, as a plain cell's would
    ends = output_of(page, 2).locator(".widget-hbox", has_text="100%")
    expect(ends).to_have_count(2, timeout=30_000)
    texts = [text.replace("\u2007", " ") for text in ends.all_inner_texts()]  # tqdm's spaces
    assert all("5/5" in text for text in texts) and "rank 0" in " ".join(texts), texts
    assert not missing, missing
    assert "not found" not in output_of(page, 2).inner_text()
