"""Shared fixtures for the unit tests.

``figures`` lets a test report a measured figure (a count, a ratio); they are all printed in the
terminal summary at the end of the run, so the numbers a test checked are visible in CI's log.
"""

import pytest
import torch

_FIGURES: list[str] = []


@pytest.fixture
def figures():
    """Call ``figures("text")`` to add a line to the end-of-run figure summary."""
    return _FIGURES.append


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
