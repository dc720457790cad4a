"""The course in a real JupyterLab: every lesson runs clean, every widget moves, grading shows its message."""

import os

import nbformat
import pytest

from ampcourse.authoring import KERNELSPEC
from ampcourse.course import ROOT, published
from ampcourse.widgets import REGISTRY

from .conftest import ARTIFACTS
from .lab import (
    PANEL,
    error_outputs,
    interactive_outputs,
    is_dirty,
    move_widget,
    open_notebook,
    overflowing,
    restart_kernel,
    run_all,
    save_and_read,
)

LESSONS = [lesson.filename for lesson in published()]
# Lessons with a figure widget of their own run in the browser (Run All, every control moved). The others,
# whose only widget is the quiz (the same class, moved in every lesson above), are opened and checked on
# their stored outputs — nbval executes them anyway; running them here too cost ~2 of the suite's 15 minutes.
RUN_IN_BROWSER = {name.split(".")[0].removeprefix("lesson") for name in REGISTRY}


@pytest.mark.parametrize("name", LESSONS)
def test_lesson_runs_clean_and_every_widget_moves(lab, page, counts, name):
    path = f"notebooks/{name}"
    open_notebook(page, lab, path)
    page.wait_for_timeout(500)  # the kernel's language_info arrives with its first reply
    assert not is_dirty(page), (f"{name} opens already modified: its stored metadata differs from what the "
                                "kernel fills in (authoring.LANGUAGE_INFO)")
    counts["notebooks opened"] += 1
    areas = []
    if name[:2] in RUN_IN_BROWSER:
        run_all(page)
        counts["notebooks run"] += 1
        errors = error_outputs(save_and_read(page, lab, path))
        assert not errors, f"{name} shows errors after Run All: {errors}"
        areas = interactive_outputs(page)
        expected = sum(1 for cell in nbformat.read(ROOT / path, as_version=4).cells
                       for output in cell.get("outputs", [])
                       if "application/vnd.jupyter.widget-view+json" in output.get("data", {}))
        assert len(areas) == expected, f"{name}: {expected} widget outputs stored, {len(areas)} rendered as widgets"
        for area in areas:
            area.scroll_into_view_if_needed()
            counts["controls moved"] += move_widget(page, area)
            counts["widgets moved"] += 1
    stem = name.removesuffix(".ipynb")
    clipped = overflowing(page)
    assert not clipped, f"{stem} at 1280 px with the file browser open: outputs wider than their cell: {clipped}"
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    for number, area in enumerate(areas):  # every widget, at device-pixel-ratio 2
        area.screenshot(path=str(ARTIFACTS / f"{stem}_widget{number}.png"))
    tables = [t for t in page.locator(f"{PANEL} .jp-OutputArea-output table").all()
              if t.bounding_box() and t.bounding_box()["width"] > 500]
    for number, table in enumerate(tables):  # every wide table
        table.scroll_into_view_if_needed()
        table.screenshot(path=str(ARTIFACTS / f"{stem}_table{number}.png"))
    if areas:
        areas[0].scroll_into_view_if_needed()
    page.screenshot(path=str(ARTIFACTS / f"{stem}.png"))
    if name.startswith("02_") and os.environ.get("AMPCOURSE_README_SCREENSHOT"):
        areas[0].screenshot(path=str(ROOT / "docs" / "lesson02_slider.png"))


def test_grading_path_shows_the_checks_message(lab, page, counts):
    path = "exercises/00_start_here.ipynb"
    open_notebook(page, lab, path)
    page.wait_for_timeout(500)
    assert not is_dirty(page), "the exercise opens already modified (authoring.LANGUAGE_INFO)"
    run_all(page, wait=False)  # Run All stops at the first failing check
    counts["notebooks opened"] += 1
    message = page.locator(f"{PANEL} .jp-OutputArea-output:has-text('NotStarted: ✗ Task 1 (tensor_bytes)')")
    message.first.wait_for(timeout=60_000)
    assert message.count() == 1, "the failed check's message is not shown in the exercise"
    assert "Replace the `raise NotImplementedError(...)` line" in message.first.inner_text()
    assert "Traceback" not in message.first.inner_text()  # the grader shows its message, not a traceback
    page.screenshot(path=str(ARTIFACTS / "exercise_00_untouched.png"))


BROKEN_WIDGET = '''
import ipywidgets as widgets

from ampcourse.widgets.base import LivePlot


def compute(k):
    if k != 0:
        raise RuntimeError("a deliberately broken widget callback")
    return k


def draw(fig, k):
    fig.subplots().plot([0, 1], [k, k])
    return f"k = {k}"


LivePlot(compute, draw, {"k": widgets.IntSlider(value=0, min=0, max=5)})
'''


def test_a_broken_widget_callback_fails_the_check(lab, page):
    path = "broken_widget.ipynb"
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(BROKEN_WIDGET)],
                                  metadata={"kernelspec": KERNELSPEC})
    nbformat.write(nb, lab.root / path)
    open_notebook(page, lab, path)
    run_all(page)
    (area,) = interactive_outputs(page)
    with pytest.raises(AssertionError, match="changed nothing"):
        move_widget(page, area, patience=4)  # a change that never comes: no need to wait the full 15 s


LIVE_WIDGET = """
import ipywidgets as widgets

from ampcourse.widgets.base import LivePlot


def draw(fig, k):
    fig.subplots().plot([0, 1], [k, k])
    return f"k = {k}"


LivePlot(lambda k: k, draw, {"k": widgets.IntSlider(value=0, min=0, max=5)})
"""


def test_a_widget_says_when_its_kernel_is_gone(lab, page):
    path = "live_widget.ipynb"
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(LIVE_WIDGET)], metadata={"kernelspec": KERNELSPEC})
    nbformat.write(nb, lab.root / path)
    open_notebook(page, lab, path)
    run_all(page)
    (area,) = interactive_outputs(page)
    notice = area.locator(".ampcourse-dead-msg")
    assert notice.count() == 1 and not notice.is_visible(), "the dead-kernel notice shows on a live widget"
    move_widget(page, area)
    restart_kernel(page)
    notice.wait_for(state="visible", timeout=30_000)
    assert "Run this cell again" in notice.inner_text()
    area.screenshot(path=str(ARTIFACTS / "widget_after_kernel_restart.png"))


def test_lab_has_no_news_popups(lab):
    import json
    import urllib.request

    url = f"{lab.url}/lab/api/settings/@jupyterlab/apputils-extension:notification"
    defaults = json.load(urllib.request.urlopen(url))["schema"]["properties"]  # overrides change the defaults
    assert defaults["fetchNews"]["default"] == "false" and defaults["checkForUpdates"]["default"] is False, (
        "JupyterLab would show news pop-ups: run ./course once, which installs lab-overrides.json")
