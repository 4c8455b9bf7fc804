"""Shared fixtures: the public specs, and a real IPython shell with the extension loaded."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PUBLIC_SPECS = sorted((ROOT.parent / "shared" / "specs" / "public").glob("*.yaml"))
if not PUBLIC_SPECS:  # CI clones main with shared/ beside it; keep a clear failure otherwise
    PUBLIC_SPECS = sorted((ROOT / "tests" / "data" / "public").glob("*.yaml"))


def public_spec_ids() -> list[str]:
    return [p.stem for p in PUBLIC_SPECS]


@pytest.fixture(scope="session")
def public_specs() -> list[Path]:
    assert PUBLIC_SPECS, "no public specs found beside the project (../shared/specs/public)"
    return PUBLIC_SPECS


@pytest.fixture
def ip():
    """A real IPython shell that raises on cell errors, with the extension loaded."""
    from .ranks_support import loaded_shell

    with loaded_shell() as shell:
        yield shell


# -- the browser tests: one JupyterLab server and one Chromium per test module ------------


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    from .browser_support import LabServer

    server = LabServer(tmp_path_factory.mktemp("lab"))
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    from playwright.sync_api import sync_playwright

    from .browser_support import launch_browser

    with sync_playwright() as playwright:
        context = launch_browser(playwright, tmp_path_factory.mktemp("chromium"))
        try:
            yield context
        finally:
            context.close()


@pytest.fixture
def page(browser, request):
    from .browser_support import screenshot

    page = browser.new_page()
    yield page
    screenshot(page, f"{request.node.name}-final")
    page.close()
