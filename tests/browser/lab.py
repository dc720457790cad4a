"""Drive the course in a real JupyterLab with Debian's Chromium (Playwright): helpers for the browser tests.

The server serves a *copy* of the course (so autosave cannot touch the committed notebooks), with a
throw-away settings directory; Chromium is the system one (``/usr/bin/chromium``) — no browser download.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import nbformat

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-sync",
                 "--disable-background-networking", "--disable-component-update"]
# How long a wait for the page may take (a lesson's Run All, a kernel going idle): a lesson runs in under 60 s on
# 2 idle cores, but ./course test runs other test files in parallel workers beside it, on the same cores.
TIMEOUT_MS = 300_000
PANEL = ".jp-NotebookPanel:not(.lm-mod-hidden)"  # the notebook on show


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class LabServer:
    root: Path
    url: str
    process: subprocess.Popen
    log: Path

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.process.kill()


def copy_course(course_root: Path, work: Path) -> None:
    """The course's notebooks in ``work``: notebooks/ and solutions/ as they are, exercises/ blank as ``build``
    generates them (the checkout may be a learner's working copy: their answers are not what the tests expect, and
    their own notebooks there are not the course's; audit r3, finding 6)."""
    from ampcourse import authoring

    for folder in ("notebooks", "solutions"):
        shutil.copytree(course_root / folder, work / folder)
    (work / "exercises").mkdir()
    if (course_root / "exercises" / "conftest.py").exists():
        shutil.copy2(course_root / "exercises" / "conftest.py", work / "exercises" / "conftest.py")
    for path, text in authoring.generated_files(course_root).items():
        if path.parent == course_root / "exercises":
            (work / "exercises" / path.name).write_text(text, encoding="utf-8")


def start_lab(course_root: Path, work: Path, extra_files: dict[str, Path] | None = None) -> LabServer:
    """Copy the course into ``work`` (:func:`copy_course`) and start ``jupyter lab`` on a free localhost port,
    without a token."""
    copy_course(course_root, work)
    for name, source in (extra_files or {}).items():
        shutil.copy(source, work / name)
    settings = work / "_settings" / "@jupyterlab" / "notebook-extension"
    settings.mkdir(parents=True)
    # Render every cell (no virtual scrolling), so the tests see every output.
    (settings / "tracker.jupyterlab-settings").write_text(json.dumps({"windowingMode": "none"}))
    port = free_port()
    log = work / "server.log"
    env = dict(os.environ, JUPYTERLAB_SETTINGS_DIR=str(work / "_settings"),
               JUPYTERLAB_WORKSPACES_DIR=str(work / "_workspaces"))
    command = [sys.executable, "-m", "jupyter", "lab", "--no-browser", f"--port={port}", "--ServerApp.ip=127.0.0.1",
               f"--ServerApp.root_dir={work}", "--IdentityProvider.token=", "--ServerApp.password="]
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        command.append("--allow-root")
    process = subprocess.Popen(command, env=env, stdout=log.open("w"), stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(url + "/api", timeout=2)
            return LabServer(work, url, process, log)
        except OSError:
            if process.poll() is not None:
                break
            time.sleep(0.3)
    process.kill()
    raise RuntimeError(f"jupyter lab did not answer on {url}:\n{log.read_text()[-3000:]}")


def open_notebook(page, server: LabServer, path: str) -> None:
    """Open ``path`` (relative to the served root) and wait until its kernel is idle."""
    page.goto(f"{server.url}/lab/tree/{path}?reset")  # ?reset: a fresh workspace, no tabs from earlier tests
    page.wait_for_selector(".jp-StatusBar-TextItem:has-text('| Idle')", timeout=TIMEOUT_MS)


def run_all(page, wait: bool = True) -> None:
    """Run → Run All Cells; with ``wait``, until every code cell has an execution count and the kernel is idle.

    (JupyterLab stops at the first cell that raises, so a notebook with errors never gets there: wait for
    something else then.)
    """
    page.click("div.lm-MenuBar-itemLabel:text-is('Run')")
    page.click("li.lm-Menu-item:has-text('Run All Cells')")
    if not wait:
        return
    page.wait_for_function(
        """() => {
            const panel = document.querySelector('.jp-NotebookPanel:not(.lm-mod-hidden)');
            const prompts = panel ? [...panel.querySelectorAll('.jp-CodeCell .jp-InputPrompt')] : [];
            return prompts.length > 0 && prompts.every(p => /\\[\\d+\\]/.test(p.textContent));
        }""", timeout=TIMEOUT_MS)
    page.wait_for_selector(".jp-StatusBar-TextItem:has-text('| Idle')", timeout=TIMEOUT_MS)


def save_and_read(page, server: LabServer, path: str) -> nbformat.NotebookNode:
    """Save the open notebook (Ctrl+S) and read it back from disk."""
    before = (server.root / path).stat().st_mtime_ns
    page.locator(f"{PANEL} .jp-Notebook").click(position={"x": 5, "y": 5})
    page.keyboard.press("Control+s")
    deadline = time.monotonic() + 30
    while (server.root / path).stat().st_mtime_ns == before and time.monotonic() < deadline:
        time.sleep(0.2)
    # The server writes the file in place (truncate, then write): read just after the truncation, it is empty or
    # cut short. Read again until it parses (on a loaded machine, with parallel test workers, this happens).
    while True:
        try:
            return nbformat.read(server.root / path, as_version=4)
        except (nbformat.reader.NotJSONError, json.JSONDecodeError):
            if time.monotonic() >= deadline:
                raise
            time.sleep(0.2)


def error_outputs(nb: nbformat.NotebookNode) -> list[str]:
    """``"cell N: Ename: evalue"`` for every error output in the notebook."""
    found = []
    for number, cell in enumerate(nb.cells):
        for output in cell.get("outputs", []):
            if output.get("output_type") == "error":
                found.append(f"cell {number}: {output.ename}: {output.evalue}")
    return found


def is_dirty(page) -> bool:
    """Whether the notebook on show has unsaved changes (JupyterLab's dot on its tab)."""
    return page.locator(".lm-TabBar-tab.jp-mod-current.jp-mod-dirty").count() > 0


OVERFLOW_JS = """(panel) => {
    const name = (el) => el.tagName.toLowerCase() + (el.className && typeof el.className === 'string'
        ? '.' + el.className.trim().split(/\\s+/).slice(0, 2).join('.') : '');
    const bad = [];
    for (const area of panel.querySelectorAll('.jp-OutputArea-output')) {
        const box = area.getBoundingClientRect();
        if (box.width === 0) continue;
        for (const el of area.querySelectorAll('*')) {
            const r = el.getBoundingClientRect();
            if (r.width === 0 || r.height === 0) continue;
            const text = (el.innerText || el.getAttribute('src') || '').trim().slice(0, 60);
            if (r.right > box.right + 1 || r.left < box.left - 1) {
                bad.push(`${name(el)} spans ${Math.round(r.left - box.left)}..${Math.round(r.right - box.left)} px ` +
                         `of a ${Math.round(box.width)}-px output: ${JSON.stringify(text)}`);
            } else if ((el.tagName === 'TD' || el.tagName === 'TH') && el.scrollWidth > el.clientWidth + 1) {
                bad.push(`${name(el)} content ${el.scrollWidth} px in a ${el.clientWidth}-px cell: ` +
                         JSON.stringify(text));
            }
            if (bad.length >= 10) return bad;
        }
    }
    return bad;
}"""


def overflowing(page) -> list[str]:
    """Elements of the notebook's outputs that stick out of their output area (or out of their table cell):
    what a learner would find clipped or would have to scroll to."""
    return page.locator(PANEL).evaluate(OVERFLOW_JS)


def restart_kernel(page) -> None:
    """Kernel → Restart Kernel…, confirmed, and wait until the new kernel is idle."""
    page.click("div.lm-MenuBar-itemLabel:text-is('Kernel')")
    page.click("li.lm-Menu-item:has-text('Restart Kernel…')")
    page.click(".jp-Dialog button.jp-mod-accept")
    page.wait_for_selector(".jp-StatusBar-TextItem:has-text('| Idle')", timeout=TIMEOUT_MS)


def _snapshot(area) -> tuple:
    """What the widget *shows*: its images and its HTML readouts — not the controls' own labels, which
    change whenever they are moved, even when the callback behind them is broken."""
    images = tuple(img.get_attribute("src") for img in area.locator("img").all())
    return images, tuple(html.inner_text() for html in area.locator(".widget-html").all())


def _wait_for_change(page, area, before, seconds: float = 15) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if _snapshot(area) != before:
            return True
        page.wait_for_timeout(200)
    return False


def interactive_outputs(page) -> list:
    """The output areas that hold a live widget view."""
    return [area for area in page.locator(f"{PANEL} .jp-OutputArea-output").all()
            if area.locator(".jupyter-widgets").count() > 0]


def move_widget(page, area, patience: float = 15) -> int:
    """Move every control of the widget in ``area`` as a learner would; return how many were moved.

    Each slider: focus its handle and press ArrowRight. Each text box: type a value and press Enter. Each
    dropdown: pick its second option. A row of toggle buttons: click the first. A quiz: pick the first answer
    and click *Check*. After each move the rendered output (images and HTML readouts)
    must change; otherwise this raises ``AssertionError``.
    """
    text = area.inner_text()
    if "Error displaying widget" in text or "model not found" in text:
        raise AssertionError(f"the widget did not render: {text[:200]!r}")
    moves = []
    for handle in area.locator(".noUi-handle").all():
        moves.append(("slider", lambda handle=handle: (handle.focus(), page.keyboard.press("ArrowRight"))))
    for box in area.locator(".widget-text input").all():
        moves.append(("text box", lambda box=box: (box.fill("65504"), box.press("Enter"))))
    for select in area.locator(".widget-dropdown select").all():
        moves.append(("dropdown", lambda select=select: select.select_option(index=1)))
    if area.locator(".widget-toggle-button").count():
        moves.append(("bit toggle", lambda: area.locator(".widget-toggle-button").first.click()))
    if area.locator(".widget-radio-box input").count():
        moves.append(("quiz", lambda: (area.locator(".widget-radio-box input").first.check(),
                                       area.locator("button:has-text('Check')").first.click())))
    if not moves:
        raise AssertionError(f"no control to move in this widget: {text[:200]!r}")
    for what, move in moves:
        before = _snapshot(area)
        move()
        if not _wait_for_change(page, area, before, patience):
            raise AssertionError(f"moving a {what} changed nothing in the rendered output (figure and text "
                                 f"unchanged): is the widget's callback broken? Output: {text[:300]!r}")
    return len(moves)
