"""Fixtures for the browser tests: a JupyterLab server on a copy of the course, and Chromium.

Without ``/usr/bin/chromium`` these tests skip with a message saying how to install it — except in CI
(``CI`` set), where a missing browser is a failure: CI must never pass by skipping them.
"""

import os

import pytest

from ampcourse.course import ROOT

from .lab import CHROMIUM, CHROMIUM_ARGS, start_lab

ARTIFACTS = ROOT / "artifacts" / "screenshots"


def _require_browser():
    if not CHROMIUM.exists():
        message = f"{CHROMIUM} not found: install Debian's chromium (apt-get install chromium) to run the browser tests"
        if os.environ.get("CI"):
            pytest.fail(message + " — CI must run them")
        pytest.skip(message)
    return pytest.importorskip("playwright.sync_api")


@pytest.fixture(scope="session")
def lab(tmp_path_factory):
    _require_browser()
    server = start_lab(ROOT, tmp_path_factory.mktemp("lab"))
    yield server
    server.stop()


@pytest.fixture(scope="session")
def browser():
    sync_api = _require_browser()
    with sync_api.sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()


@pytest.fixture
def page(browser):
    # A laptop screen: 1280 × 800 CSS pixels, HiDPI (device-pixel-ratio 2, so the screenshots show whether
    # figures are crisp), with JupyterLab's file browser open (its default).
    page = browser.new_page(viewport={"width": 1280, "height": 800}, device_scale_factor=2)
    yield page
    page.close()


_COUNTS = {"notebooks opened": 0, "notebooks run": 0, "widgets moved": 0, "controls moved": 0}


@pytest.fixture(scope="session")
def counts():
    return _COUNTS


def _counts_line() -> str:
    return ", ".join(f"{n} {what}" for what, n in _COUNTS.items())


def pytest_sessionfinish(session):
    """In a pytest-xdist worker: hand the counts to the controller (tests/conftest.py prints them there)."""
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None and any(_COUNTS.values()):
        workeroutput.setdefault("ampcourse_sections", []).append(("browser tests", _counts_line()))


def pytest_terminal_summary(terminalreporter):
    if any(_COUNTS.values()):
        terminalreporter.section("browser tests")
        terminalreporter.write_line(_counts_line())
