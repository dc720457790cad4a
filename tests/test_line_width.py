"""Lesson code reads without scrolling (CONTRIBUTING.md, "Code style"; issue 26 item 5).

In JupyterLab at 1280 x 800 with the file browser open a code cell shows about ``MAX_WIDTH`` characters, so no
code-cell line of a lesson (``notebooks/``) or of a generated exercise (``exercises/``) is longer. An exercise's
lines come from its solution (task text, given code, ``# BEGIN SOLUTION hint: ...`` markers, which become one
``raise NotImplementedError("hint")`` line): fix a long exercise line in ``solutions/`` and run
``python -m ampcourse build``.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
MAX_WIDTH = 95
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb")) + sorted((ROOT / "exercises").glob("*.ipynb"))


def long_lines(path: Path, width: int = MAX_WIDTH, text: str | None = None) -> list[str]:
    """Each code-cell line of ``path`` (or of ``text``, that notebook's JSON) longer than ``width``: cell index, line
    number, length, the line's start."""
    cells = json.loads(text if text is not None else path.read_text(encoding="utf-8"))["cells"]
    found = []
    for index, cell in enumerate(cells):
        if cell["cell_type"] != "code":
            continue
        for number, line in enumerate("".join(cell["source"]).splitlines(), start=1):
            if len(line) > width:
                found.append(f"{path.parent.name}/{path.name} cell {index} line {number}: {len(line)} chars: "
                             f"{line[:60].strip()!r}...")
    return found


def test_long_lines_are_found(tmp_path):
    """The rule can fail: a line one character over the width is reported with where it is."""
    cell = {"cell_type": "code", "source": ["x = 1\n", "y = '" + "a" * (MAX_WIDTH - 5) + "'"],
            "metadata": {}, "outputs": [], "execution_count": None}
    path = tmp_path / "probe.ipynb"
    path.write_text(json.dumps({"cells": [{"cell_type": "markdown", "source": "z" * 200, "metadata": {}}, cell]}))
    assert long_lines(path) == [f"{tmp_path.name}/probe.ipynb cell 1 line 2: {MAX_WIDTH + 1} chars: "
                                f"{cell['source'][1][:60]!r}..."]
    assert long_lines(path, width=MAX_WIDTH + 1) == []


@functools.lru_cache(maxsize=1)
def _generated() -> dict[Path, str]:
    from ampcourse import authoring

    return authoring.generated_files(ROOT)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_code_lines_fit_the_cell(path):
    text = None
    if path.parent.name == "exercises":  # as build generates it: a learner's working copy holds their answers
        text = _generated().get(path)
        if text is None:
            pytest.skip("a notebook of the learner's own in exercises/, not one of the course's")
    found = long_lines(path, text=text)
    assert not found, (f"{len(found)} code line(s) longer than {MAX_WIDTH} characters (CONTRIBUTING.md, "
                       "'Code style'; exercises: fix the solution, then build):\n" + "\n".join(found))
