"""``./course test`` passes on a learner's working copy (issue 17).

A learner clones the course, answers the exercises, runs the lessons (moving their sliders) and saves
everything in JupyterLab. ``./course test`` must still pass there: the staleness check
(``tests/test_authoring.py``) must not take answers, outputs or JupyterLab's metadata for a stale
template, the answered exercises must grade, and the lessons' *new* stored outputs must pass strict
nbval. This module makes such a working copy in a temporary folder and runs those parts of
``./course test`` in it (the copy's own package first on ``PYTHONPATH``, so its kernels import the
copy's ``ampcourse``):

* the copy: every file ``git ls-files`` lists in this checkout (committed or not), the exercises blank and
  the notebooks' metadata clean as ``build`` writes them, committed in a new repository — a fresh clone of
  the course as it is now, even when this checkout is itself a learner's working copy (``git`` needed: the
  metadata test reads the committed notebooks with ``git show``);
* every exercise answered: the code between the solution's ``BEGIN``/``END SOLUTION`` markers typed
  into each task cell. The exercises in :data:`EXECUTE_EXERCISES` are then run by a kernel (nbclient)
  and saved as JupyterLab saves them (:func:`save_like_jupyterlab`); the others get the outputs the
  solution notebook stored for the same cells — what running them gives — and JupyterLab's metadata;
* every lesson saved as JupyterLab saves it: the lessons in :data:`EXECUTE` run by a kernel and saved
  with their fresh outputs, execution counts, ``language_info`` and widget state (a slider moved); the
  others keep their stored outputs with new execution counts and the same metadata.

Running every exercise and lesson takes most of ``./course test``'s time, so by default only lesson 00 is
run and saved, and only exercise 00 and lesson 00 are graded / compared by nbval in the copy (about 30-40 s
on 2 cores); ``AMPCOURSE_WORKING_COPY=all`` runs every exercise and lesson. To try the real ``./course
test`` on a working copy by hand::

    python tests/test_working_copy.py DEST --all   # a new folder DEST, everything run: 2 min on 2 idle cores
    cd DEST && ./course test                       # its own .venv; about 15 minutes
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from ampcourse import authoring
from ampcourse.course import LESSONS, ROOT

EVERYTHING = os.environ.get("AMPCOURSE_WORKING_COPY", "") == "all"
#: Lesson/exercise numbers run by a kernel (the others are saved with the outputs they already store).
EXECUTE = [item.number for item in LESSONS] if EVERYTHING else ["00"]
#: Exercises run by a kernel before they are saved (the others get the outputs their solution stored); the
#: grader runs the exercises in ``EXECUTE`` again in the copy either way.
EXECUTE_EXERCISES = EXECUTE if EVERYTHING else []
GIT_ENV = {"GIT_AUTHOR_NAME": "learner", "GIT_AUTHOR_EMAIL": "learner@example.invalid",
           "GIT_COMMITTER_NAME": "learner", "GIT_COMMITTER_EMAIL": "learner@example.invalid",
           "GIT_CONFIG_NOSYSTEM": "1", "HOME": "/nonexistent"}
NOTE = "my answer"
#: The cheap tests of ``./course test`` that read the notebooks in notebooks/, solutions/ or exercises/.
READERS = ("tests/test_authoring.py", "tests/test_update.py", "tests/test_nbval_markers.py",
           "tests/test_checks_framework.py", "tests/test_line_width.py")


def _git(cwd: Path, *args: str) -> str:
    run = subprocess.run(["git", "-c", "init.defaultBranch=main", *args], cwd=cwd, capture_output=True, text=True,
                         env={**os.environ, **GIT_ENV})
    if run.returncode != 0:
        raise RuntimeError(f"git {' '.join(args)}: {run.stderr.strip()}")
    return run.stdout


def fresh_clone(dest: Path) -> Path:
    """Every file of this checkout that git tracks or would track, committed in a new repository at ``dest``,
    with the notebooks that ``build`` generates as it writes them (so the exercises are blank)."""
    files = _git(ROOT, "ls-files", "-z", "--cached", "--others", "--exclude-standard").split("\0")
    dest.mkdir(parents=True, exist_ok=True)
    for name in filter(None, files):
        source = ROOT / name
        own = name.startswith("exercises/") and not (ROOT / "solutions" / source.name).exists()
        if own and name.endswith(".ipynb"):
            continue  # the learner's own notebook (JupyterLab's Untitled.ipynb): not part of the course
        if source.is_file():  # a file deleted but not yet committed is not part of the course now
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, dest / name)
    # The course's notebooks as build writes them: blank exercises, clean metadata. This checkout may itself be
    # a learner's working copy; its answers and JupyterLab's metadata are not the course a clone would get.
    for path, text in authoring.generated_files(ROOT).items():
        (dest / path.relative_to(ROOT)).write_text(text, encoding="utf-8")
    _git(dest, "init", "-q")
    _git(dest, "add", "-A")
    _git(dest, "commit", "-qm", "the course")
    return dest


# --- saving as JupyterLab does ----------------------------------------------------------------------------

def _remove_overwritten(text: str) -> str:
    """JupyterLab's ``removeOverwrittenChars``: ``\\r`` rewinds to the line start, ``\\b`` deletes a character."""
    while re.search(r"[^\n]\x08", text):
        text = re.sub(r"[^\n]\x08", "", text, count=1)
    text = re.sub(r"\r+\n", "\n", text)
    return re.sub(r"^.*\r(?=[^\n])", "", text, flags=re.M)


def save_like_jupyterlab(nb: nbformat.NotebookNode, path: Path, count_from: int = 1) -> None:
    """Write ``nb`` (already run, or with stored outputs) as JupyterLab 4 saves a notebook it ran.

    Consecutive stream outputs of one name are one output whose ``\\r``/``\\b`` have been applied (the
    output area merges them as they arrive); execution counts follow the kernel's counter; the kernel's
    full ``language_info`` and the widget state (every slider moved to its maximum) are stored in the
    notebook's metadata; a cell whose output was scrolled or collapsed keeps ``scrolled``/``jupyter``.
    """
    count = count_from
    for index, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        merged = []
        for output in cell.outputs:
            if output.output_type == "stream" and merged and merged[-1].output_type == "stream" and \
                    merged[-1].name == output.name:
                merged[-1].text += output.text
            else:
                merged.append(output)
        for output in merged:
            if output.output_type == "stream":
                output.text = _remove_overwritten(output.text)
            if output.output_type == "execute_result":
                output.execution_count = count
        cell.outputs = merged
        cell.execution_count = count
        count += 1
        if index % 3 == 0:
            cell.metadata["scrolled"] = True
        if index % 5 == 0:
            cell.metadata["jupyter"] = {"outputs_hidden": False, "source_hidden": False}
    from ipykernel.ipkernel import IPythonKernel

    nb.metadata["language_info"] = dict(IPythonKernel.language_info)
    state = nb.metadata.setdefault("widgets", {}).setdefault(
        "application/vnd.jupyter.widget-state+json", {"state": {}, "version_major": 2, "version_minor": 0})
    for model in state["state"].values():
        values = model.get("state", {})
        if isinstance(values.get("value"), (int, float)) and "max" in values:
            values["value"] = values["max"]  # the learner moved the slider
    nbformat.write(nb, str(path))


def execute(nb: nbformat.NotebookNode, folder: Path, env: dict[str, str]) -> nbformat.NotebookNode:
    """Run ``nb`` top to bottom in ``folder`` with the copy's package (a kernel started with ``env``)."""
    from nbclient import NotebookClient

    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)  # the kernel inherits this process's environment
    try:
        NotebookClient(nb, timeout=600, kernel_name="python3", store_widget_state=True,
                       resources={"metadata": {"path": str(folder)}}).execute()
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    return nb


def answered(exercise: nbformat.NotebookNode, solution: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """The exercise with each task cell holding the solution's code (markers dropped, as a learner types it)
    and a note, plus a scratch cell of the learner's own."""
    by_id = {cell.get("id"): cell for cell in solution.cells}
    tasks = authoring.answer_cells(exercise)
    for index in tasks:
        cell = exercise.cells[index]
        lines = by_id[cell.id].source.splitlines()
        code = [line for line in lines if not (authoring.BEGIN.match(line) or authoring.END.match(line))]
        cell.source = f"# {NOTE}\n" + "\n".join(code)
    exercise.cells.insert(min(tasks) + 1, nbformat.v4.new_code_cell("scratch = 2 + 2\nscratch"))
    return exercise


def with_solution_outputs(exercise: nbformat.NotebookNode, solution: nbformat.NotebookNode):
    """The outputs a run of the answered exercise gives: those the solution stored for the same cells."""
    by_id = {cell.get("id"): cell for cell in solution.cells}
    for cell in exercise.cells:
        if cell.cell_type == "code":
            stored = by_id.get(cell.get("id"))
            cell.outputs = [nbformat.from_dict(o) for o in stored.outputs] if stored is not None else []
    return exercise


def make_working_copy(dest: Path, execute_numbers: list[str] = EXECUTE,
                      execute_exercises: list[str] = EXECUTE_EXERCISES, log=lambda line: None) -> Path:
    """A learner's working copy of this checkout at ``dest``: every exercise answered and saved, every lesson
    saved after a run (see the module's docstring); the lessons in ``execute_numbers`` and the exercises in
    ``execute_exercises`` really run."""
    root = fresh_clone(dest)
    env = {"PYTHONPATH": os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)}
    for item in LESSONS:
        solution_path = item.solution_path(root)
        if solution_path.exists():
            exercise_path = item.exercise_path(root)
            solution = authoring.read(solution_path)
            nb = answered(authoring.read(exercise_path), solution)
            if item.number in execute_exercises:
                log(f"running exercises/{exercise_path.name}")
                execute(nb, exercise_path.parent, env)
            else:
                with_solution_outputs(nb, solution)
            save_like_jupyterlab(nb, exercise_path)
        lesson_path = item.lesson_path(root)
        if lesson_path.exists():
            nb = authoring.read(lesson_path)
            if item.number in execute_numbers:
                log(f"running notebooks/{lesson_path.name}")
                execute(nb, lesson_path.parent, env)
            save_like_jupyterlab(nb, lesson_path, count_from=3)
    return root


# --- the tests --------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def working_copy(tmp_path_factory):
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("needs git and a git checkout of the course")
    return make_working_copy(tmp_path_factory.mktemp("learner"))


def test_the_working_copy_holds_the_learners_work_and_is_not_stale(working_copy):
    # The fixture did what a learner does (else the test below proves nothing) ...
    for item in LESSONS:
        if item.solution_path(working_copy).exists():
            blank = authoring.make_exercise(authoring.read(item.solution_path(working_copy)))
            nb = authoring.read(item.exercise_path(working_copy))
            assert not authoring.answer_cells(nb), f"{item.filename}: a task cell still holds its stub"
            assert sum(c.source.startswith(f"# {NOTE}") for c in nb.cells) == len(authoring.answer_cells(blank))
            assert all(c.outputs for c in nb.cells if "check" in authoring.tags(c)), f"{item.filename}: not run"
        if item.lesson_path(working_copy).exists():
            nb = authoring.read(item.lesson_path(working_copy))
            assert nb.metadata["widgets"] and "codemirror_mode" in nb.metadata["language_info"]
    changed = _git(working_copy, "status", "--porcelain").splitlines()
    assert len(changed) == len(list((working_copy / "exercises").glob("*.ipynb"))) + len(
        list((working_copy / "notebooks").glob("*.ipynb"))), changed
    # ... and neither answers nor outputs nor metadata are staleness; a changed task text still is.
    assert authoring.stale_files(working_copy) == []
    solution = working_copy / "solutions" / "00_start_here.ipynb"
    original = solution.read_text()
    nb = authoring.read(solution)
    next(c for c in nb.cells if c.cell_type == "markdown" and c.source.startswith("## ")).source += "\nNew."
    try:
        nbformat.write(nb, solution)
        assert authoring.stale_files(working_copy) == [working_copy / "exercises" / "00_start_here.ipynb"]
    finally:
        solution.write_text(original)


def test_course_test_passes_on_the_working_copy(working_copy):
    """In the copy: the tests that read the notebooks (the staleness test among them), the grader
    (``pytest --nbval`` with exercises/conftest.py) on the answered exercises and strict nbval on the
    lessons the learner ran and saved — one pytest run, as ``./course test`` makes it."""
    exercises = [f"exercises/{item.filename}" for item in LESSONS
                 if item.number in EXECUTE and item.solution_path(working_copy).exists()]
    lessons = [f"notebooks/{item.filename}" for item in LESSONS
               if item.number in EXECUTE and item.lesson_path(working_copy).exists()]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(working_copy),
                                                                      os.environ.get("PYTHONPATH")]))}
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:randomly", "-rfEs", "--nbval", *READERS,
                          *exercises, *lessons], cwd=working_copy, env=env, capture_output=True, text=True,
                         timeout=3600)
    assert run.returncode == 0, run.stdout[-6000:] + run.stderr[-2000:]
    cells = sum(c.cell_type == "code" for p in exercises + lessons for c in authoring.read(working_copy / p).cells)
    counts = dict((word, int(n)) for n, word in re.findall(r"(\d+) (passed|skipped|failed)", run.stdout))
    assert counts.get("passed", 0) > cells, run.stdout[-2000:]  # every notebook cell and the tests ran
    assert not re.search(r"^SKIPPED.*exercises/", run.stdout, flags=re.M), run.stdout[-2000:]  # every check ran


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description="Make a learner's working copy of this checkout (see the docstring).")
    parser.add_argument("dest", type=Path, help="an empty or new folder")
    parser.add_argument("--all", action="store_true", help="run every lesson and exercise (default: only 00)")
    args = parser.parse_args()
    if args.dest.exists() and any(args.dest.iterdir()):
        parser.error(f"{args.dest} is not empty")
    every = [item.number for item in LESSONS]
    make_working_copy(args.dest, every if args.all else EXECUTE, every if args.all else EXECUTE_EXERCISES, log=print)
    print(f"made {args.dest}: cd {args.dest} && ./course test")


def test_the_browser_tests_get_blank_exercises_on_a_working_copy(tmp_path):
    """Audit r3, finding 6: the browser tests copied exercises/ as it was, so on a working copy with exercise 00
    answered, the test that waits for "NotStarted: ✗ Task 1" failed. The lab's copy is the blank course."""
    from browser.lab import copy_course

    root = fresh_clone(tmp_path / "clone")
    exercise = root / "exercises" / "00_start_here.ipynb"
    nbformat.write(answered(authoring.read(exercise), authoring.read(root / "solutions" / exercise.name)), exercise)
    nbformat.write(nbformat.v4.new_notebook(), root / "exercises" / "Untitled.ipynb")
    copy_course(root, tmp_path / "lab")
    generated = authoring.generated_files(root)
    for path in (root / "solutions").glob("*.ipynb"):
        lab = tmp_path / "lab" / "exercises" / path.name
        assert lab.read_text() == generated[root / "exercises" / path.name]
    assert not (tmp_path / "lab" / "exercises" / "Untitled.ipynb").exists()
