"""Shared fixtures for the unit tests.

``figures`` lets a test report a measured figure (a count, a ratio); they are all printed in the
terminal summary at the end of the run, so the numbers a test checked are visible in CI's log.
"""

import shutil

import pytest
import torch

from ampcourse.course import ROOT

_FIGURES: list[str] = []


@pytest.fixture
def figures():
    """Call ``figures("text")`` to add a line to the end-of-run figure summary."""
    return _FIGURES.append


@pytest.fixture
def course_sources():
    """``copy(dest)`` puts the course's notebooks at ``dest``: notebooks/ and solutions/ of this checkout, and
    exercises/ as ``python -m ampcourse build`` generates them (blank), with exercises/conftest.py.

    Not a copy of exercises/: in a learner's working copy it holds their answers, and a test that answers the
    exercises itself must start from the blank ones (tests/test_working_copy.py runs the suite on such a copy).
    """
    from ampcourse import authoring

    def copy(dest):
        for folder in ("notebooks", "solutions"):
            shutil.copytree(ROOT / folder, dest / folder)
        (dest / "exercises").mkdir()
        shutil.copy2(ROOT / "exercises" / "conftest.py", dest / "exercises" / "conftest.py")
        for path, text in authoring.generated_files(ROOT).items():
            if path.parent == ROOT / "exercises":
                (dest / "exercises" / path.name).write_text(text, encoding="utf-8")
        return dest
    return copy


def pytest_terminal_summary(terminalreporter):
    if _FIGURES:
        terminalreporter.section("figures checked by the tests")
        for line in _FIGURES:
            terminalreporter.write_line(line)


def pytest_collection_modifyitems(config, items):
    """Tests marked ``gpu`` need CUDA: without it they skip (``python -m ampcourse gpucheck`` runs them)."""
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU (run: python -m ampcourse gpucheck on a GPU machine)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
