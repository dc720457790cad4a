"""The grader can fail: untouched exercises fail every check; solutions pass; the table is right.

The exercises are taken as ``build`` generates them (not the files in exercises/, which may hold a
learner's answers), and graded copies live in temporary folders, never in exercises/.
"""

import re
import shutil
import subprocess
import sys

import nbformat
import pytest
from nbclient import NotebookClient

from ampcourse.authoring import make_exercise, read, tags
from ampcourse.course import ROOT
from ampcourse.grading import grade

# The course's exercises: one per solution (a notebook of the learner's own in exercises/, such as JupyterLab's
# Untitled.ipynb, is not one).
EXERCISES = [ROOT / "exercises" / p.name for p in sorted((ROOT / "solutions").glob("*.ipynb"))]


def _untouched(path):
    return make_exercise(read(ROOT / "solutions" / path.name), path.name)


def _course(tmp_path, notebooks):
    """A course folder: solutions/ as in the repo, exercises/ with ``notebooks`` (name -> notebook)."""
    (tmp_path / "exercises").mkdir()
    shutil.copytree(ROOT / "solutions", tmp_path / "solutions")
    for name, nb in notebooks.items():
        nbformat.write(nb, tmp_path / "exercises" / name)
    return tmp_path


@pytest.mark.parametrize("path", EXERCISES, ids=lambda p: p.name)
def test_every_check_cell_of_an_untouched_exercise_fails(path, figures):
    nb = _untouched(path)
    NotebookClient(nb, timeout=300, kernel_name="python3", allow_errors=True,
                   resources={"metadata": {"path": str(path.parent)}}).execute()
    checks = [cell for cell in nb.cells if "check" in tags(cell)]
    assert checks, f"{path.name} has no check cell"
    for cell in checks:
        errors = [o for o in cell.outputs if o.output_type == "error"]
        assert errors, f"{path.name}: check cell passed on the untouched exercise:\n{cell.source}"
        assert errors[0].ename == "NotStarted", f"{path.name}: {errors[0].ename}: {errors[0].evalue}"
        assert errors[0].traceback == [f"NotStarted: {errors[0].evalue}"], "the grader showed a traceback"
    figures(f"{path.name}: all {len(checks)} check cells fail untouched (NotStarted, no traceback)")


def test_pytest_nbval_fails_on_untouched_exercises_and_passes_on_a_solution(tmp_path):
    run = [sys.executable, "-m", "pytest", "--nbval", "-q", "-p", "no:randomly"]
    # The README's command on two untouched exercises (every exercise is run untouched by the test above).
    folder = tmp_path / "exercises"
    folder.mkdir()
    shutil.copy(ROOT / "exercises" / "conftest.py", folder / "conftest.py")
    for path in (EXERCISES[0], EXERCISES[-1]):
        nbformat.write(_untouched(path), folder / path.name)
    exercises = subprocess.run([*run, "--nbval-current-env", "-p", "no:cacheprovider", "."], cwd=folder,
                               capture_output=True, text=True)
    assert exercises.returncode == 1, exercises.stdout[-2000:]
    assert "NotStarted: ✗ Task 1" in exercises.stdout
    # One answered notebook shows the same command passing; every solution already runs under nbval in this
    # suite (testpaths), so running them all again here would only double the time.
    solutions = subprocess.run([*run, "solutions/00_start_here.ipynb"], cwd=ROOT, capture_output=True, text=True)
    assert solutions.returncode == 0, solutions.stdout[-2000:]


def test_grade_table_for_untouched_and_answered(tmp_path, figures):
    # Two untouched exercises (every one of them is run untouched by the tests above; this is about the table).
    untouched = [EXERCISES[0], EXERCISES[-1]]
    root = _course(tmp_path, {p.name: _untouched(p) for p in untouched})
    table, code = grade([str(root / "exercises" / p.name) for p in untouched], root=root)
    assert code == 1
    for path in untouched:
        assert any(line.startswith(path.stem) and line.endswith("not started") for line in table.splitlines())
    # The answered exercise graded the same way passes.
    (root / "exercises" / "00_start_here.ipynb").write_bytes((ROOT / "solutions" / "00_start_here.ipynb").read_bytes())
    table, code = grade([str(root / "exercises" / "00_start_here.ipynb")], root=root)
    assert code == 0, table
    assert re.search(r"00_start_here\s+3/3\s+passed", table), table
    figures("python -m ampcourse grade:\n" + table)


def test_grade_reports_a_wrong_answer_as_failed(tmp_path):
    nb = nbformat.read(ROOT / "solutions" / "00_start_here.ipynb", as_version=4)
    for cell in nb.cells:
        cell.source = cell.source.replace("return t.numel() * t.element_size()", "return t.numel()")
    root = _course(tmp_path, {"00_start_here.ipynb": nb})
    table, code = grade([str(root / "exercises" / "00_start_here.ipynb")], root=root)
    assert code == 1
    assert re.search(r"00_start_here\s+2/3\s+failed", table), table
    assert "the number of elements" in table


def test_grade_rejects_a_path_that_is_not_a_notebook():
    with pytest.raises(ValueError, match="not an exercise notebook"):
        grade(["exercises/nothing.ipynb"])
