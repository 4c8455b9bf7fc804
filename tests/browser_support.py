"""A real JupyterLab on 127.0.0.1 and headless Debian Chromium, for tests/test_browser.py.

The server runs in its own session (``start_new_session``) with its own config, data-free
runtime and root folders and a random token, so it sees only this project's extension as
installed in the venv; the test stops it with ``os.killpg``, which also ends its kernels (and
with them the ranks they started).
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import nbformat

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
]
ROOT = Path(__file__).resolve().parent.parent
OUTPUT = ROOT / "test-output" / "browser"
NOTEBOOK = ".jp-NotebookPanel:visible"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class LabServer:
    """``python -m jupyterlab`` for one test module (``app="notebook"``: Notebook 7, which
    loads the same extensions). ``disabled``: extensions or plugins the page leaves out
    (``disabledExtensions`` of its page_config)."""

    def __init__(
        self, workdir: Path, disabled: tuple[str, ...] = (), app: str = "jupyterlab"
    ) -> None:
        self.app = app
        self.root = workdir / "notebooks"
        self.root.mkdir(parents=True)
        self.port = free_port()
        self.token = secrets.token_hex(16)
        config = workdir / "config"
        (config / "labconfig").mkdir(parents=True)
        self.page_config = config / "labconfig" / "page_config.json"
        self.disable(disabled)
        env = {
            **os.environ,
            "JUPYTER_CONFIG_DIR": str(config),
            "JUPYTER_RUNTIME_DIR": str(workdir / "runtime"),
            "JUPYTERLAB_SETTINGS_DIR": str(workdir / "settings"),
            "JUPYTERLAB_WORKSPACES_DIR": str(workdir / "workspaces"),
            "PYTHONUNBUFFERED": "1",
        }
        self.log = open(workdir / "jupyterlab.log", "w")  # noqa: SIM115 - closed in stop()
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                app,
                "--no-browser",
                "--allow-root",
                "--ServerApp.ip=127.0.0.1",
                f"--ServerApp.port={self.port}",
                "--ServerApp.port_retries=0",
                f"--IdentityProvider.token={self.token}",
                f"--ServerApp.root_dir={self.root}",
                *(
                    [
                        "--LabApp.expose_app_in_browser=True",
                        "--LabApp.news_url=",
                        "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
                    ]
                    if app == "jupyterlab"
                    else ["--JupyterNotebookApp.expose_app_in_browser=True"]
                ),
            ],
            env=env,
            cwd=self.root,
            stdout=self.log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.wait_ready()

    def disable(self, disabled: tuple[str, ...]) -> None:
        """Leave ``disabled`` (extension names or plugin ids) out of the pages opened from now
        on: the server reads page_config.json at each page load."""
        names = ("@jupyterlab/apputils-extension:announcements", *disabled)
        self.page_config.write_text(json.dumps({"disabledExtensions": dict.fromkeys(names, True)}))

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def wait_ready(self, timeout: float = 90) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"jupyter lab exited: see {self.log.name}")
            try:
                with urllib.request.urlopen(f"{self.url}/api/status?token={self.token}", timeout=2):
                    return
            except OSError:
                time.sleep(0.3)
        raise RuntimeError(f"jupyter lab did not start in {timeout} s: see {self.log.name}")

    def write_notebook(self, name: str, cells: list[str]) -> str:
        nb = nbformat.v4.new_notebook()
        nb.metadata["kernelspec"] = {
            "name": "python3",
            "display_name": "Python 3",
            "language": "python",
        }
        nb.cells = [nbformat.v4.new_code_cell(source) for source in cells]
        nbformat.write(nb, self.root / name)
        if self.app != "jupyterlab":  # Notebook 7's page of one notebook
            return f"{self.url}/notebooks/{name}?token={self.token}"
        return f"{self.url}/lab/tree/{name}?reset&token={self.token}"

    def stop(self) -> None:
        try:
            os.killpg(self.process.pid, signal.SIGTERM)
            self.process.wait(timeout=20)
        except ProcessLookupError:
            pass
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=10)
        self.log.close()


def launch_browser(playwright, profile: Path):
    if not Path(CHROMIUM).exists():
        raise RuntimeError(
            f"{CHROMIUM} is missing: install Debian chromium (`apt-get install -y chromium`, "
            "which `make test` does as root)."
        )
    return playwright.chromium.launch_persistent_context(
        str(profile),
        executable_path=CHROMIUM,
        headless=True,
        args=CHROMIUM_ARGS,
        viewport={"width": 1500, "height": 950},
    )


def open_notebook(page, url: str) -> None:
    """Open a notebook and wait until its kernel has told the editor its language."""
    page.goto(url)
    page.wait_for_selector(f"{NOTEBOOK} .jp-Cell", timeout=60_000)
    page.wait_for_selector(
        f'{NOTEBOOK} .cm-content[data-language="python"], {NOTEBOOK} .cm-content[data-language="yaml"]',
        timeout=60_000,
    )
    wait_kernel_idle(page)


def wait_kernel_idle(page, timeout: float = 60_000) -> None:
    page.wait_for_function(
        """() => {
            const panel = window.jupyterapp.shell.currentWidget;
            const kernel = panel && panel.sessionContext && panel.sessionContext.session
                && panel.sessionContext.session.kernel;
            return kernel && kernel.status === 'idle' && kernel.info !== undefined;
        }""",
        timeout=timeout,
    )


def command(page, name: str, args: dict | None = None) -> None:
    """Start a JupyterLab command, as the menu or palette would (without waiting for it:
    ``notebook:run-all-cells`` resolves only when every cell has run)."""
    page.evaluate(
        "([name, args]) => { void window.jupyterapp.commands.execute(name, args); }",
        [name, args or {}],
    )


def cell(page, index: int):
    return page.locator(f"{NOTEBOOK} .jp-Cell").nth(index)


def languages(page) -> list[str | None]:
    return page.locator(f"{NOTEBOOK} .jp-Cell .cm-content").evaluate_all(
        "nodes => nodes.map(n => n.getAttribute('data-language'))"
    )


def wait_language(page, index: int, language: str, timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while languages(page)[index] != language:
        if time.monotonic() > deadline:
            raise AssertionError(f"cell {index} is {languages(page)[index]}, not {language}")
        time.sleep(0.1)


def screenshot(page, name: str) -> Path:
    OUTPUT.mkdir(parents=True, exist_ok=True)
    path = OUTPUT / f"{name}.png"
    page.screenshot(path=str(path))
    return path


def clean(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)


# the README's screenshots: under test-output/ (ignored), so a test run leaves the tracked tree
# as it found it; `make screenshots` sets DISTCOMP_SCREENSHOTS=docs/screenshots to retake them
DOCS_SCREENSHOTS = ROOT / os.environ.get("DISTCOMP_SCREENSHOTS", "test-output/screenshots")


def doc_screenshot(locator, name: str) -> Path:
    """A screenshot for the README, retaken by every run of the test (DOCS_SCREENSHOTS)."""
    DOCS_SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = DOCS_SCREENSHOTS / f"{name}.png"
    page = locator.page
    viewport = page.viewport_size
    height = locator.evaluate("el => el.getBoundingClientRect().height")
    if height + 200 > viewport["height"]:  # the whole element, not what fits the window
        page.set_viewport_size({"width": viewport["width"], "height": int(height) + 200})
    try:
        locator.scroll_into_view_if_needed()
        locator.screenshot(path=str(path))
    finally:
        page.set_viewport_size(viewport)
    return path


def run_cell_at(page, index: int) -> None:
    """Make cell ``index`` the active one and run it (without waiting for it to end)."""
    page.evaluate(
        """index => {
            window.jupyterapp.shell.currentWidget.content.activeCellIndex = index;
            void window.jupyterapp.commands.execute('notebook:run-cell');
        }""",
        index,
    )


RANKS_PANEL = "#jupyter-distcomp-ranks"


def overflow(page, selector: str = RANKS_PANEL) -> list[str]:
    """What does not fit the ranks panel at its width: the panel's content if wider than the
    panel, and each element that reaches past its inner edge or cuts its own text (a button's
    label clipped); [] when all of it fits. The panel's width is said in each finding."""
    return page.evaluate(
        """selector => {
            const panel = document.querySelector(selector);
            if (!panel) return [`${selector} is not on the page`];
            const style = getComputedStyle(panel);
            const box = panel.getBoundingClientRect();
            const inner = box.right - parseFloat(style.paddingRight)
                - parseFloat(style.borderRightWidth);
            const width = `${Math.round(box.width)} px panel`;
            const found = [];
            if (panel.scrollWidth > panel.clientWidth) {
                found.push(`content ${panel.scrollWidth} px wide in the ${width}`);
            }
            for (const el of panel.querySelectorAll('*')) {
                const r = el.getBoundingClientRect();
                if (r.width === 0 || r.height === 0) continue;
                const name = `${el.tagName.toLowerCase()}.${el.className} "${
                    (el.innerText || '').slice(0, 30)}"`;
                if (r.right > inner + 0.5) {
                    found.push(`${name} ends at ${r.right} px, past ${inner} px (${width})`);
                }
                const clips = getComputedStyle(el).overflowX !== 'visible';
                if (clips && el.scrollWidth > el.clientWidth + 1 && el.tagName !== 'PRE') {
                    found.push(`${name} cuts its text (${el.scrollWidth} in ${el.clientWidth} px)`);
                }
            }
            return found;
        }""",
        selector,
    )
