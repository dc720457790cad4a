"""``pytest --nbval exercises/``: a task whose check cell is gone or silenced counts as not passed.

nbval runs the cells a notebook holds. A learner who deletes or empties a check cell, edits it, or marks
it ``# NBVAL_SKIP`` / ``# NBVAL_RAISES_EXCEPTION`` (or with a matching tag) would otherwise see that task
"pass". For each exercise notebook nbval collects, this plugin adds one failing test per such task,
naming the task and how to put the check back. What counts as intact is decided by
:func:`ampcourse.grading.check_cell_problems`, the rule ``python -m ampcourse grade`` uses as well.

It is loaded by ``exercises/conftest.py`` (so it applies to ``pytest --nbval exercises/`` and
``pytest --nbval exercises/NN_topic.ipynb`` from the course folder) and only acts on a notebook that sits
in a folder named ``exercises`` and has a solution of the same name in the course's ``solutions/``:
lessons, solutions and any other notebook are left alone, and an intact exercise gets no extra test.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from .course import ROOT


def is_exercise(path: Path, root: Path = ROOT) -> bool:
    """Whether ``path`` is a course exercise: ``exercises/NN_topic.ipynb`` with a solution in ``root/solutions``."""
    path = Path(path)
    return path.suffix == ".ipynb" and path.parent.name == "exercises" and (root / "solutions" / path.name).exists()


class CheckCellMissing(Exception):
    """A task's check cell is not the one the course made (the message says which task and how to restore it)."""


class CheckCellItem(pytest.Item):
    """One failing test: a task whose check cell was deleted, emptied, edited or marked to be skipped."""

    def __init__(self, *, message: str, **kwargs):
        super().__init__(**kwargs)
        self.message = message

    def runtest(self) -> None:
        raise CheckCellMissing(self.message)

    def repr_failure(self, excinfo, style=None) -> str:
        if isinstance(excinfo.value, CheckCellMissing):
            return f"✗ {self.message}"
        return super().repr_failure(excinfo, style)

    def reportinfo(self):
        return self.path, None, self.name


class ExerciseCheckCells(pytest.File):
    """Collects a :class:`CheckCellItem` for each task of an exercise whose check cell is not intact."""

    def collect(self):
        from .authoring import read
        from .grading import check_cell_problems, exercise_template

        try:
            learner = read(self.path)
            template = exercise_template(self.path)
        except Exception:  # noqa: BLE001 - an unreadable notebook: nbval's own item reports it
            return
        if template is None:
            return
        for problem in check_cell_problems(learner, template):
            yield CheckCellItem.from_parent(self, name=f"check cell of {problem.task}", message=problem.message())


def pytest_collect_file(file_path: Path, parent):
    """Add the check-cell items next to nbval's cells, for exercise notebooks, when nbval runs."""
    option = parent.config.option
    if (getattr(option, "nbval", False) or getattr(option, "nbval_lax", False)) and is_exercise(file_path):
        return ExerciseCheckCells.from_parent(parent, path=file_path)
    return None
