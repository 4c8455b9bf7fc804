"""What a person sees in JupyterLab (headless Chromium): states that are true in the widget,
the ranks panel and the status bar; errors gathered across ranks in the notebook's own cell;
``%distcomp env`` that fits its output; the editor marking what the kernel refuses; panels of
a restarted kernel that say so. The screenshots of the README are taken here
(`make screenshots` writes them to docs/screenshots/).
"""

from __future__ import annotations

import re
import shutil
import time
from pathlib import Path

import pytest

from .browser_support import (
    NOTEBOOK,
    cell,
    command,
    doc_screenshot,
    open_notebook,
    run_cell_at,
    screenshot,
    wait_kernel_idle,
)
from .test_browser import SPEC, wait_linted

pytestmark = [pytest.mark.slow, pytest.mark.browser]

INTERNALS = ("magics.py", "backend.py", "run.py", "threading.py", "site-packages")
STATUS = ".distcomp-ranks-status"


def texts_until(page, selectors: list[str], final: str, timeout: float) -> list[list[str]]:
    """Each element's texts, in order, until the first one reads ``final``."""
    seen: list[list[str]] = [[] for _ in selectors]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for texts, selector in zip(seen, selectors, strict=True):
            found = page.locator(selector)
            text = found.first.inner_text() if found.count() else ""
            if not texts or texts[-1] != text:
                texts.append(text)
        if seen[0][-1] == final:
            return seen
        time.sleep(0.05)
    raise AssertionError(f"{selectors[0]} never read {final!r}: {seen}")


def output_of(page, index: int):
    return cell(page, index).locator(".jp-OutputArea")


def wait_text(page, index: int, pattern: str, timeout: float = 120) -> str:
    """The output of cell ``index`` once it matches the regular expression ``pattern``."""
    page.wait_for_function(
        "([el, pattern]) => new RegExp(pattern).test(el.textContent)",
        arg=[output_of(page, index).element_handle(), pattern],
        timeout=timeout * 1000,
    )
    return output_of(page, index).inner_text()


def prompt_number(page, index: int) -> int:
    """The cell's execution count. The prompt shows ``[*]`` until the kernel's reply arrives,
    which can be after the cell's output is already shown."""
    prompt = cell(page, index).locator(".jp-InputPrompt", has_text=re.compile(r"\d"))
    prompt.wait_for(timeout=30_000)
    return int(re.sub(r"\D", "", prompt.inner_text()))


def test_states_errors_and_views_a_person_sees(lab, page):
    url = lab.write_notebook(
        "views.ipynb",
        [
            "%load_ext jupyter_distcomp\n%config DistComp.default_instance_count = 2\n"
            "%config DistComp.default_process_count_per_node = 2\n"
            '%config DistComp.prestart = "always"',  # the panels show a start ahead
            f"%%distcomp views_demo\n{SPEC}",
            "%%distcomp run views_demo\nprint('hello from', mpi_rank, 'of', mpi_size)",
            "%%distcomp run views_demo\nx = mpi_rank\nif mpi_rank > 0:\n    1 / 0",
            "%distcomp env views_demo",
            "%%distcomp run views_demo\nimport time\nprint('napping', flush=True)\ntime.sleep(120)",
            "%distcomp stop views_demo",
        ],
    )
    open_notebook(page, url)
    command(page, "distcomp:show-ranks")
    run_cell_at(page, 0)
    page.locator(STATUS, has_text="distcomp: 0 ranks").wait_for(timeout=60_000)

    # the background start after a definition: "starting k of 4" until the ranks are up
    wait_kernel_idle(page)
    run_cell_at(page, 1)
    seen, widget = texts_until(
        page, [STATUS, f"{NOTEBOOK} .distcomp-ranks"], "distcomp: 4 ranks", timeout=180
    )
    starting = [i for i, t in enumerate(seen) if re.fullmatch(r"distcomp: starting \d of 4", t)]
    assert starting, seen
    assert "distcomp: 0 ranks" not in seen[starting[0] :], seen
    # the widget says the ranks are starting, not "not started"
    assert any(re.search(r"\b4 starting\b", t) for t in widget), widget
    panel = cell(page, 1).locator(".distcomp-panel")
    panel.locator(".distcomp-ranks", has_text="4 idle").wait_for(timeout=30_000)
    panel.locator(".distcomp-progress-text", has_text="4 of 4").wait_for(timeout=30_000)
    assert not panel.locator(".distcomp-btn-stop").is_disabled()
    doc_screenshot(cell(page, 1), "definition-panel")

    # a run: each line labelled with its rank
    wait_kernel_idle(page)
    run_cell_at(page, 2)
    text = wait_text(page, 2, r"(hello from \d of 4[\s\S]*){4}")
    for rank in range(4):
        assert f"[node {rank // 2} rank {rank}] hello from {rank} of 4" in text, text
    doc_screenshot(cell(page, 2), "run-labelled-output")
    # the ranks panel: its three buttons on one row, none wrapped
    tops = page.locator(".distcomp-world-actions button").evaluate_all(
        "buttons => buttons.map(b => [b.getBoundingClientRect().top, b.scrollHeight,"
        " b.clientHeight])"
    )
    assert len({top for top, _, _ in tops}) == 1, tops
    assert all(scroll <= client for _, scroll, client in tops), tops
    doc_screenshot(page.locator(".distcomp-ranks-panel .distcomp-world"), "ranks-panel")

    # an error on three ranks: one section, in the notebook's cell and lines, no internals
    wait_kernel_idle(page)
    run_cell_at(page, 3)
    text = wait_text(page, 3, "ZeroDivisionError: division by zero")
    assert "--- ranks 1-3 ---" in text and text.count("ZeroDivisionError: division") == 1, text
    assert f"Cell In[{prompt_number(page, 3)}], line 4" in text, text
    for internal in INTERNALS:
        assert internal not in text, (internal, text)
    doc_screenshot(cell(page, 3), "error-across-ranks")

    # %distcomp env fits a narrow output (716 px, as in the issue): shared values once,
    # then a compact row per rank
    wait_kernel_idle(page)
    run_cell_at(page, 4)
    env = output_of(page, 4).locator(".distcomp-env")
    env.wait_for(timeout=60_000)
    fits = """el => {
        const box = el.closest('.jp-OutputArea-output');
        return [el.scrollWidth, box.clientWidth];
    }"""
    viewport = page.viewport_size
    _, room = env.evaluate(fits)
    page.set_viewport_size(
        {"width": viewport["width"] - (room - 716), "height": viewport["height"]}
    )
    page.wait_for_function(
        "el => el.closest('.jp-OutputArea-output').clientWidth <= 720",
        arg=env.element_handle(),
        timeout=10_000,
    )
    width, room = env.evaluate(fits)
    assert width <= room, (width, room)
    doc_screenshot(cell(page, 4), "env-table")
    page.set_viewport_size(viewport)
    assert env.locator(".distcomp-env-ranks tr").count() == 5  # the header and 4 ranks
    shared = env.locator(".distcomp-env-shared").inner_text()
    assert "OMPI_COMM_WORLD_SIZE" in shared and "AZ_BATCH_MASTER_NODE" in shared

    # an interrupt from the ranks panel; its "Interrupted." clears when the ranks move on
    wait_kernel_idle(page)
    run_cell_at(page, 5)
    wait_text(page, 5, r"(napping[\s\S]*){4}")
    page.locator(".distcomp-world[data-name='views_demo'] .distcomp-ranks-interrupt").click()
    message = page.locator(".distcomp-ranks-message", has_text="Interrupted.")
    message.wait_for(timeout=30_000)
    text = wait_text(page, 5, "stopped at")
    assert "ranks 0-3: stopped at" in text and "time.sleep(120)" in text, text
    wait_kernel_idle(page)
    run_cell_at(page, 2)
    message.wait_for(state="detached", timeout=60_000)

    # the summary above the panel follows the layout the panel sets
    wait_kernel_idle(page)
    summary = output_of(page, 1).locator(".distcomp-summary")
    assert "2 node(s) x 2 process(es) = 4 rank(s)" in summary.inner_text()
    nodes = panel.locator(".distcomp-instance-count input")
    nodes.fill("1")
    nodes.press("Enter")
    summary.filter(has_text="1 node(s) x 2 process(es) = 2 rank(s)").wait_for(timeout=30_000)
    # the ranks ran cells: they stay as they are until the next run, and both panels say so
    pending = "running mpi, 2 node(s) x 2 process(es); next run restarts as mpi, 1 node(s) x 2"
    panel.locator(".distcomp-pending", has_text=pending).wait_for(timeout=30_000)
    page.locator(".distcomp-world-pending", has_text=pending).wait_for(timeout=30_000)
    assert page.locator(".distcomp-world-layout").inner_text().startswith("2 nodes x 2")

    # after a stop: no "4 of 4 ready", nothing left to stop
    run_cell_at(page, 6)
    panel.locator(".distcomp-ranks", has_text="stopped").wait_for(timeout=60_000)
    page.wait_for_function(
        "el => el.textContent.startsWith('0 of')",
        arg=panel.locator(".distcomp-progress-text").element_handle(),
        timeout=30_000,
    )
    assert panel.locator(".distcomp-btn-stop").is_disabled()
    page.locator(STATUS, has_text="distcomp: 0 ranks").wait_for(timeout=30_000)
    said = panel.locator(".distcomp-status")
    assert said.inner_text().strip(), "the stop left no status line to clear"

    # a kernel restart: the panel says it no longer reaches the kernel
    wait_kernel_idle(page)
    command(page, "notebook:restart-kernel")
    page.locator(".jp-Dialog .jp-mod-accept").click(timeout=30_000)
    note = cell(page, 1).locator(".distcomp-stale-note")
    note.wait_for(timeout=60_000)
    assert "Re-run the cell" in note.inner_text()
    assert panel.locator(".distcomp-btn-start").is_disabled()
    assert said.inner_text().strip() == "", "the last action's line outlived the kernel"
    screenshot(page, "views-restarted")


def test_the_editor_marks_what_the_kernel_refuses(lab, page):
    text = SPEC.replace("    default: 2\n", "    default: two\n  m:\n    type: Integr\n")
    url = lab.write_notebook("refused.ipynb", [f"%%distcomp refused\n{text}"])
    open_notebook(page, url)
    assert wait_linted(page, 0) == 2
    marks = cell(page, 0).locator(".cm-lintRange-error")
    assert sorted(marks.all_inner_texts()) == ["Integr", "two"]
    marks.filter(has_text="two").hover()
    tooltip = page.locator(".cm-tooltip-lint")
    tooltip.wait_for(timeout=10_000)
    assert "'two' is not a number" in tooltip.inner_text()


TF_SPEC = """\
name: tf_views
type: DistributedComponent
launcher:
  type: tensorflow
  additional_arguments: python train.py
"""


def test_every_layout_field_shows_its_whole_value(lab, page):
    url = lab.write_notebook(
        "tf_fields.ipynb",
        [
            "%load_ext jupyter_distcomp\n%config DistComp.prestart = False",
            f"%%distcomp tf_views\n{TF_SPEC}",
        ],
    )
    open_notebook(page, url)
    run_cell_at(page, 0)
    wait_kernel_idle(page)
    run_cell_at(page, 1)
    panel = cell(page, 1).locator(".distcomp-panel")
    panel.wait_for(timeout=60_000)
    fields = panel.locator(".distcomp-layout input")
    # nodes, workers, parameter servers: a TensorFlow layout has no processes per node
    assert fields.count() == 3
    fields.nth(1).fill("123456")
    # each box has room for six digits beside its label: nothing clipped
    sizes = fields.evaluate_all(
        "inputs => inputs.map(i => [i.scrollWidth, i.clientWidth, i.value])"
    )
    for scroll, client, _value in sizes:
        assert scroll <= client, sizes
        assert client >= 50, sizes
    screenshot(page, "tf-layout-fields")


WIDE_SPEC = """\
name: mpi_quickstart
display_name: MPI quickstart
type: DistributedComponent
description: every input kind and two outputs, on 2 nodes x 2 processes
inputs:
  scale: {type: Integer, default: 1, min: 1, description: every rank contributes (rank + 1) * scale}
  learning_rate: {type: Float, default: 0.01}
  optimizer: {type: Enum, enum: [sgd, adam, adamw], default: adam}
  use_checkpointing: {type: Boolean, default: true}
  training_data: {type: path, optional: true}
outputs:
  model_dir: {type: path}
  metrics_and_logs_dir: {type: path}
launcher:
  type: mpi
  additional_arguments: >-
    python train.py --scale {inputs.scale} --learning-rate {inputs.learning_rate}
    --optimizer {inputs.optimizer} --use-checkpointing {inputs.use_checkpointing}
    [--training-data {inputs.training_data}] --model-dir {outputs.model_dir}
    --metrics-and-logs-dir {outputs.metrics_and_logs_dir}
"""

#: what of an element sticks out of ``panel`` or is cut inside itself
OVERFLOW = """([panel, selector]) => {
    const box = panel.getBoundingClientRect();
    return [...panel.querySelectorAll(selector)].filter(el => el.offsetParent !== null)
        .map(el => {
            const r = el.getBoundingClientRect();
            return {
                text: (el.innerText || el.value || el.className).slice(0, 40),
                out: Math.round(Math.max(r.right - box.right, box.left - r.left)),
                cut: el.scrollWidth - el.clientWidth,
            };
        }).filter(found => found.out > 1 || found.cut > 1);
}"""


def test_the_panel_fits_1280x800_with_both_sidebars_open(lab, page):
    url = lab.write_notebook(
        "fits.ipynb",
        [
            "%load_ext jupyter_distcomp\n%config DistComp.prestart = False\n"
            "%config DistComp.default_instance_count = 2\n"
            "%config DistComp.default_process_count_per_node = 2",
            f"%%distcomp quickstart\n{WIDE_SPEC}",
        ],
    )
    page.set_viewport_size({"width": 1280, "height": 800})
    open_notebook(page, url)
    # the ranks panel on the left, the debugger's sidebar on the right: both in view
    command(page, "distcomp:show-ranks")
    command(page, "debugger:show-panel")
    page.locator(".distcomp-ranks-panel").wait_for(timeout=30_000)
    page.locator(".jp-DebuggerSidebar").wait_for(timeout=30_000)
    run_cell_at(page, 0)
    wait_kernel_idle(page)
    run_cell_at(page, 1)
    panel = cell(page, 1).locator(".distcomp-panel")
    panel.locator(".distcomp-rank-table").wait_for(timeout=60_000)
    time.sleep(0.5)  # the widgets' layout settles
    panel.scroll_into_view_if_needed()
    screenshot(page, "panel-1280x800")
    handle = panel.element_handle()
    # the panel itself never scrolls sideways: what is wide scrolls inside it, visibly
    width, room = panel.evaluate("el => [el.scrollWidth, el.clientWidth]")
    assert width <= room + 1, (width, room)
    # every control whole and inside the panel: buttons, text boxes, labels
    assert page.evaluate(OVERFLOW, [handle, "button, input, select, .widget-label"]) == []
    labels = panel.locator("button").all_inner_texts()
    assert {"start ranks", "run command", "stop ranks", "export YAML", "submit to Azure ML"} <= {
        label.strip() for label in labels
    }, labels
    # the per-rank table (7 variable columns) scrolls in its own box when it is wider
    scroller = panel.locator(".distcomp-table-scroll").first
    style = scroller.evaluate("el => getComputedStyle(el).overflowX")
    assert style == "auto", style
    # small things: the title names the component once; headings above their column
    assert panel.locator(".distcomp-header").inner_text().strip() == "run settings of quickstart"
    heading = output_of(page, 1).locator(".distcomp-summary th", has_text="inputs")
    assert heading.evaluate("el => getComputedStyle(el).textAlign") in ("left", "start")
    # rank 0's command wraps: all of it is on screen
    command_line = panel.locator(".distcomp-command").first
    assert command_line.evaluate("el => el.scrollWidth <= el.clientWidth + 1")


SHIPPED = Path(__file__).resolve().parent.parent / "notebooks"
#: each shipped notebook, and how long its command may take on two shared cores
SHIPPED_NOTEBOOKS = [
    ("mpi_quickstart.ipynb", 180),
    ("azureml_export.ipynb", 180),
    ("tensorflow_layout.ipynb", 600),
    ("pytorch_ddp.ipynb", 600),
    ("debugging.ipynb", 600),
    ("deepspeed_zero.ipynb", 900),
]


def status_of(panel) -> str:
    return panel.locator(".distcomp-status").inner_text()


def wait_status(panel, pattern: str, timeout: float, before: str = "") -> str:
    """The panel's status line once it matches ``pattern``; a failure other than the
    status ``before`` the click fails the test."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        text = status_of(panel)
        if re.search(pattern, text):
            return text
        if text != before and re.search(r"failed|Traceback", text):
            raise AssertionError(text)
        time.sleep(0.2)
    raise AssertionError(f"the status never matched {pattern!r}: {status_of(panel)!r}")


@pytest.mark.parametrize(
    ("name", "seconds"), SHIPPED_NOTEBOOKS, ids=[n for n, _ in SHIPPED_NOTEBOOKS]
)
def test_every_button_of_every_shipped_notebook_works(lab, page, name, seconds):
    """Opened in a folder of its own under the server's root, as shipped: the cells up to
    its definition, then each of the panel's buttons."""
    folder = lab.root / f"shipped-{Path(name).stem}"
    shutil.copytree(SHIPPED, folder, ignore=shutil.ignore_patterns("outputs", ".ipynb_*"))
    open_notebook(page, f"{lab.url}/lab/tree/{folder.name}/{name}?reset&token={lab.token}")
    sources = page.evaluate(
        "() => window.jupyterapp.shell.currentWidget.content.model.sharedModel.cells"
        ".map(c => c.cell_type === 'code' ? c.source : '')"
    )
    definition = next(
        i for i, s in enumerate(sources) if s.startswith("%%distcomp ") and " run " not in s
    )
    for index in range(definition + 1):
        if sources[index]:
            wait_kernel_idle(page)
            run_cell_at(page, index)
    panel = cell(page, definition).locator(".distcomp-panel")
    panel.wait_for(timeout=120_000)
    wait_kernel_idle(page)

    panel.locator(".distcomp-btn-start").click()
    wait_status(panel, r"ranks ready", 300)
    panel.locator(".distcomp-btn-run-command").click()
    wait_status(panel, r"every rank succeeded", seconds)
    panel.locator(".distcomp-btn-export").click()
    text = wait_status(panel, r"Wrote the Azure ML job", 120)
    written = Path(re.search(r" to (\S+)\. Create it", text).group(1))
    assert written.is_file() and "type: command" in written.read_text()
    # without an Azure account: a message that says why, no traceback
    panel.locator(".distcomp-compute input").fill("cpu-cluster")
    panel.locator(".distcomp-btn-submit").click()
    deadline = time.monotonic() + 120
    while not re.match(r"submit(ted| failed)", status_of(panel)):
        assert time.monotonic() < deadline, status_of(panel)
        time.sleep(0.2)
    said = status_of(panel)
    assert "Traceback" not in said and "unexpected" not in said, said
    assert panel.locator(".distcomp-log").inner_text().strip() == "", "a traceback in the log"
    panel.locator(".distcomp-btn-stop").click()
    wait_status(panel, r"Stopped the ranks", 120, before=said)
    screenshot(page, f"shipped-{Path(name).stem}")
