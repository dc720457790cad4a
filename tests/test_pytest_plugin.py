"""``pytest --nbval exercises/`` counts a deleted, emptied, edited or skip-marked check cell as not passed.

The rule is :func:`ampcourse.grading.check_cell_problems` (also used by ``python -m ampcourse grade``); the
plugin (:mod:`ampcourse.pytest_plugin`: pyproject's ``pytest11`` entry point, and ``exercises/conftest.py``
where that is not installed) turns each problem into a failing test. The end-to-end tests run the learner's
command in a subprocess on a temporary ``exercises/`` folder that holds a copy of the real
``exercises/conftest.py`` (or none), never on the repository's exercises.
"""

import re
import shutil
import subprocess
import sys

import nbformat
import nbval_batch
import pytest
from review_forgeries import OTHER_FORGERIES, REVIEW_FORGERIES, one_line_forgery

from ampcourse.authoring import make_exercise, merge_exercise, read, tags
from ampcourse.course import ROOT
from ampcourse.grading import check_cell_problems
from ampcourse.pytest_plugin import is_exercise

NAME = "00_start_here.ipynb"
TASK2 = "Task 2 · Your first autocast region"


def _template():
    return make_exercise(read(ROOT / "solutions" / NAME), NAME)


def _second_check(nb):
    return [cell for cell in nb.cells if "check" in tags(cell)][1]


def _deleted(nb):
    nb.cells.remove(_second_check(nb))


def _emptied(nb):
    _second_check(nb).source = ""


def _skip_comment(nb):
    cell = _second_check(nb)
    cell.source = "# NBVAL_SKIP\n" + cell.source


def _raises_comment(nb):
    cell = _second_check(nb)
    cell.source = "# NBVAL_RAISES_EXCEPTION\n" + cell.source


def _skip_tag(nb):
    _second_check(nb).metadata["tags"] = ["check", "nbval-skip"]


def _raises_tag(nb):
    _second_check(nb).metadata["tags"] = ["check", "raises-exception"]


def _edited(nb):
    _second_check(nb).source = 'print("✓ Task 2")'


def _to_markdown(nb):
    index = nb.cells.index(_second_check(nb))
    old = nb.cells[index]
    nb.cells[index] = nbformat.v4.new_markdown_cell(old.source, id=old.get("id"))


def _untagged(nb):
    _second_check(nb).metadata["tags"] = []


BROKEN = {  # edit -> the words the problem must say
    "deleted": (_deleted, "was deleted"),
    "emptied": (_emptied, "was emptied"),
    "# NBVAL_SKIP": (_skip_comment, "carries `# NBVAL_SKIP`"),
    "# NBVAL_RAISES_EXCEPTION": (_raises_comment, "carries `# NBVAL_RAISES_EXCEPTION`"),
    "tag nbval-skip": (_skip_tag, "carries the tag `nbval-skip`"),
    "tag raises-exception": (_raises_tag, "carries the tag `raises-exception`"),
    "edited": (_edited, "was edited"),
    "turned into markdown": (_to_markdown, "was turned into a markdown cell"),
    "check tag removed": (_untagged, "lost its `check` tag"),
}


def test_an_intact_exercise_has_no_problem():
    assert check_cell_problems(_template(), _template()) == []
    answered = read(ROOT / "solutions" / NAME)  # answers in place, the course's check cells intact
    assert check_cell_problems(answered, _template()) == []
    renumbered = _template()  # a notebook whose cell ids changed (copied cells): matched by source
    for cell in renumbered.cells:
        cell["id"] = "x" + cell["id"]
    assert check_cell_problems(renumbered, _template()) == []


@pytest.mark.parametrize(("edit", "words"), BROKEN.values(), ids=BROKEN)
def test_each_broken_check_cell_is_named_with_its_task_and_the_fix(edit, words):
    learner = _template()
    edit(learner)
    problems = check_cell_problems(learner, _template())
    assert [p.task for p in problems] == [TASK2]
    message = problems[0].message()
    assert words in message and message.startswith(TASK2) and "python -m ampcourse build" in message
    # The fix the message gives works: build's merge puts the course's check cell back and keeps the rest.
    assert check_cell_problems(merge_exercise(learner, _template()).notebook, _template()) == []


def test_only_exercises_with_a_solution_are_watched(tmp_path):
    assert is_exercise(ROOT / "exercises" / NAME)
    assert not is_exercise(ROOT / "solutions" / NAME)
    assert not is_exercise(ROOT / "notebooks" / NAME)
    assert not is_exercise(tmp_path / "exercises" / "my_notes.ipynb")  # no solution of that name
    assert not is_exercise(ROOT / "exercises" / "conftest.py")


def _run(tmp_path, nb, name=NAME):
    """The learner's command, ``pytest --nbval exercises/00_start_here.ipynb``, in a copy of the course layout."""
    folder = tmp_path / "exercises"
    folder.mkdir()
    shutil.copy(ROOT / "exercises" / "conftest.py", folder / "conftest.py")
    nbformat.write(nb, folder / name)
    return subprocess.run([sys.executable, "-m", "pytest", "--nbval", "--nbval-current-env", "-q", "-p", "no:randomly",
                           "-p", "no:cacheprovider", f"exercises/{name}"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=600)


SHOWN = ["deleted", "emptied", "# NBVAL_SKIP"]  # the broken check cells run for real, under pytest --nbval
FORGERIES = {
    "patched_checks": "import ampcourse.checks.lesson00 as c\n"
    "c.tensor_bytes = c.amp_forward = c.choose_recipe = lambda f: print('✓')",
    "input_transformer": "get_ipython().input_transformers_cleanup.append(\n"
    "    lambda l: ['pass\\n'] if any('check.' in x for x in l) else l)",
    # The re-check's forgeries, all in one cell (each alone once passed): the guard's own function, the shell's
    # transform_cell and run_code, the checks' helper `call`, and forged checks first on the package's path.
    "guard_shell_and_package": "import ampcourse.grading as g, ampcourse.checks.lesson00 as c\n"
    "g.guard_reset = lambda s: []\nc.tensor_bytes = c.amp_forward = c.choose_recipe = lambda f: print('✓')\n"
    "ip = get_ipython(); _o = ip.transform_cell\n"
    "ip.transform_cell = lambda raw: 'pass\\n' if 'check.' in raw else _o(raw)\n"
    "import ampcourse.checks as p\nclass A(int):\n    __eq__ = lambda s, o: True\n    __hash__ = int.__hash__\n"
    "p.call = lambda *a, **k: A(0)\np.__path__.insert(0, FORGED)\n"
    "_rc = ip.run_code\nasync def _run(code_obj, result=None, *, async_=False):\n"
    "    await _rc(code_obj, result, async_=async_)\n    if result is not None:\n"
    "        result.error_in_exec = None\n    return False\nip.run_code = _run",
}
EXERCISES = sorted(p.name for p in (ROOT / "solutions").glob("[0-9][0-9]_*.ipynb"))


def _with_forgery(forgery):
    """Exercise 00 answered, with Task 1 wrong and ``forgery`` after it in the same cell."""
    nb = read(ROOT / "solutions" / NAME)
    cell = next(c for c in nb.cells if "return t.numel() * t.element_size()" in c.source)
    cell.source = cell.source.replace("return t.numel() * t.element_size()", "return 0") + "\n" + forgery
    return nb


def _review_forgery(name):
    source, _, _, *others = REVIEW_FORGERIES[name]
    nb = read(ROOT / "solutions" / NAME)
    next(c for c in nb.cells if "return t.numel() * t.element_size()" in c.source).source = source
    for needle, cell in (others[0] if others else {}).items():
        next(c for c in nb.cells if c.cell_type == "code" and needle in c.source).source = cell
    return nb


def _other_forgery(label):
    name, edits, *_ = OTHER_FORGERIES[label]
    nb = read(ROOT / "solutions" / name)
    for needle, cell in edits.items():
        next(c for c in nb.cells if c.cell_type == "code" and needle in c.source).source = cell
    return name, nb


def _forged(name):
    """Exercise ``name`` as generated (from its solution: exercises/ may hold a learner's answers), forged."""
    nb = make_exercise(read(ROOT / "solutions" / name), name)
    first = next(i for i, c in enumerate(nb.cells) if "check" in tags(c))
    nb.cells.insert(first, nbformat.v4.new_code_cell(one_line_forgery(f"lesson{name[:2]}")))
    return nb


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    """Every notebook of this file that is graded with the plain ``pytest --nbval`` in a course layout, in one pytest
    start (tests/nbval_batch.py; each notebook in a folder of its own, with a fresh kernel): ``{label: Graded}``."""
    root = tmp_path_factory.mktemp("graded")
    forged = root / "forged"
    forged.mkdir()
    (forged / "lesson00.py").write_text("def tensor_bytes(f):\n    print('✓')\n\n"
                                        "amp_forward = choose_recipe = tensor_bytes\n")
    notebooks = {"intact": (NAME, read(ROOT / "solutions" / NAME))}
    for number, variant in enumerate(SHOWN):
        nb = read(ROOT / "solutions" / NAME)
        BROKEN[variant][0](nb)
        notebooks[f"broken{number}"] = (NAME, nb)
    for label, forgery in FORGERIES.items():
        notebooks[f"forgery-{label}"] = (NAME, _with_forgery(forgery.replace("FORGED", repr(str(forged)))))
    for name in REVIEW_FORGERIES:
        notebooks[f"review-{name}"] = (NAME, _review_forgery(name))
    for label in OTHER_FORGERIES:
        notebooks[f"other-{label}"] = _other_forgery(label)
    for name in EXERCISES:
        notebooks[f"oneline-{name[:2]}"] = (name, _forged(name))
    results, output = nbval_batch.run(root, notebooks, conftest=ROOT / "exercises" / "conftest.py")
    return results, output[-4000:]


@pytest.mark.parametrize("number", range(len(SHOWN)), ids=SHOWN)
def test_pytest_nbval_fails_and_names_the_task(graded, number):
    # Answered, so every remaining cell passes: the run fails only because of the broken check cell.
    results, output = graded
    run = results[f"broken{number}"]
    assert run.failed == [f"check cell of {TASK2}"], (run, output)
    assert f"✗ {TASK2}: its check cell {BROKEN[SHOWN[number]][1]}" in run.text, run


def test_pytest_nbval_on_an_intact_answered_exercise_adds_nothing(graded):
    results, output = graded
    run = results["intact"]
    assert run.ok and run.passed, (run, output)
    assert not any(name.startswith("check cell of") for name in run.passed), run


def test_pytest_nbval_runs_from_inside_exercises(tmp_path):
    """Audit r3, finding 15: `cd exercises && pytest --nbval 00_start_here.ipynb` (a terminal opened while browsing
    exercises/) errored on every cell: pyproject's sanitize file is a path relative to the folder pytest starts in."""
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    (tmp_path / "tests").mkdir()
    shutil.copy(ROOT / "tests" / "nbval_sanitize.cfg", tmp_path / "tests" / "nbval_sanitize.cfg")
    folder = tmp_path / "exercises"
    folder.mkdir()
    shutil.copy(ROOT / "exercises" / "conftest.py", folder / "conftest.py")
    nbformat.write(read(ROOT / "solutions" / NAME), folder / NAME)
    run = subprocess.run([sys.executable, "-m", "pytest", "--nbval", "-q", "-p", "no:randomly", NAME], cwd=folder,
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0 and "FileNotFoundError" not in run.stdout, run.stdout[-3000:]


@pytest.mark.parametrize("label", FORGERIES)
def test_pytest_nbval_undoes_a_forged_pass_and_says_so(graded, label):
    """Audit r3, finding 14: one line in an answer cell made `pytest --nbval` pass a wrong Task 1."""
    results, output = graded
    run = results[f"forgery-{label}"]
    assert len(run.failed) == 1, (run, output)  # Task 1's check, run for real
    assert "changed the grader" in run.text and "only the real check counts" in run.text, run


def _entry_point_env(tmp_path):
    """The environment of a pytest that loads the plugin as an installed course does: through the ``pytest11`` entry
    point that pyproject declares (a dist-info folder on the path holds it, as ``pip install -e .`` writes it)."""
    import os

    section = (ROOT / "pyproject.toml").read_text().split("[project.entry-points.pytest11]\n", 1)[1].split("\n[")[0]
    declared = dict(line.replace('"', "").split(" = ") for line in section.splitlines()
                    if " = " in line and not line.startswith("#"))
    assert declared == {"ampcourse": "ampcourse.pytest_plugin"}
    info = tmp_path / "site" / "ampcourse_entry_point-0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: ampcourse-entry-point\nVersion: 0\n")
    (info / "entry_points.txt").write_text("[pytest11]\n" + "".join(f"{k} = {v}\n" for k, v in declared.items()))
    env = {k: v for k, v in os.environ.items() if k != "PYTEST_DISABLE_PLUGIN_AUTOLOAD"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(info.parent), str(ROOT), env.get("PYTHONPATH")]))
    return env


def _pytest(tmp_path, *args, env=None):
    return subprocess.run([sys.executable, "-m", "pytest", "--nbval", "--nbval-current-env", "-q", "-p", "no:randomly",
                           "-p", "no:cacheprovider", *args], cwd=tmp_path, capture_output=True, text=True,
                          timeout=600, env=env)


@pytest.mark.parametrize("conftest", ["--noconftest", "deleted", "emptied", "kept"])
def test_the_check_cell_rule_holds_without_exercises_conftest(tmp_path, conftest):
    """Audit r3, finding 16: `pytest --nbval --noconftest exercises/`, or a deleted or emptied exercises/conftest.py,
    made a notebook whose check cell was deleted pass. The rule now comes with the course's environment (the
    pytest11 entry point); with the conftest kept as well, the plugin is registered once (one failure, not two)."""
    folder = tmp_path / "exercises"
    folder.mkdir()
    if conftest in ("--noconftest", "kept"):
        shutil.copy(ROOT / "exercises" / "conftest.py", folder / "conftest.py")
    elif conftest == "emptied":
        (folder / "conftest.py").write_text("")
    nb = read(ROOT / "solutions" / NAME)
    _deleted(nb)
    nbformat.write(nb, folder / NAME)
    run = _pytest(tmp_path, *(["--noconftest"] if conftest == "--noconftest" else []), f"exercises/{NAME}",
                  env=_entry_point_env(tmp_path))
    assert run.returncode == 1, run.stdout[-3000:]
    assert f"FAILED exercises/{NAME}::check cell of {TASK2}" in run.stdout, run.stdout[-3000:]
    assert "1 failed" in run.stdout.splitlines()[-1], run.stdout[-3000:]


def test_deselecting_the_checks_is_not_graded(tmp_path):
    """Audit r3, finding 16: `-k "not check"` deselected the failing check-cell tests, and a notebook with a check
    deleted reported only passes. The run now ends as failed and says it graded nothing."""
    nb = read(ROOT / "solutions" / NAME)
    _deleted(nb)
    (tmp_path / "exercises").mkdir()
    shutil.copy(ROOT / "exercises" / "conftest.py", tmp_path / "exercises" / "conftest.py")
    nbformat.write(nb, tmp_path / "exercises" / NAME)
    run = _pytest(tmp_path, "-k", "not check", f"exercises/{NAME}")
    assert run.returncode == 1, run.stdout[-3000:]
    assert f"✗ not graded: {NAME}: 1 check(s) were deselected" in run.stdout, run.stdout[-3000:]
    assert " failed" not in run.stdout.splitlines()[-1], run.stdout[-3000:]  # nothing that ran failed


def test_a_dead_kernel_fails_its_cell_at_once_and_names_it(tmp_path):
    """Audit r3, finding 17: a kernel that died (os._exit, a segfault, SIGKILL) cost the whole 180 s cell timeout
    under pytest, and the later cells came out xfailed/xpassed. Now the cell fails within seconds, saying the kernel
    died, and each later cell says it was not run."""
    import time

    (tmp_path / "exercises").mkdir()
    cells = [nbformat.v4.new_code_cell("x = 1"), nbformat.v4.new_code_cell("import os\nos._exit(1)"),
             nbformat.v4.new_code_cell("y = x + 1")]
    nbformat.write(nbformat.v4.new_notebook(cells=cells), tmp_path / "exercises" / "mine.ipynb")
    start = time.monotonic()
    run = _pytest(tmp_path, "exercises/mine.ipynb", env=_entry_point_env(tmp_path))
    took = time.monotonic() - start
    assert run.returncode == 1, run.stdout[-3000:]
    assert "the kernel died while this cell ran" in run.stdout, run.stdout[-3000:]
    assert "not run: the kernel died in an earlier cell (cell 1)" in run.stdout, run.stdout[-3000:]
    assert "2 failed, 1 passed" in run.stdout.splitlines()[-1], run.stdout[-3000:]
    assert took < 90, f"{took:.0f} s: the run waited for the dead kernel (the cell timeout is 180 s)"


def test_a_json_list_saved_as_ipynb_is_one_named_failure(tmp_path):
    """Audit r3, finding 25: a JSON list saved as ``.ipynb`` in exercises/ gave a raw AttributeError in collection."""
    (tmp_path / "exercises").mkdir()
    (tmp_path / "exercises" / "list.ipynb").write_text("[1, 2, 3]\n")
    run = _pytest(tmp_path, "exercises/list.ipynb", env=_entry_point_env(tmp_path))
    assert run.returncode == 1, run.stdout[-3000:]
    assert "FAILED exercises/list.ipynb::not a notebook" in run.stdout, run.stdout[-3000:]
    assert "cannot read list.ipynb: it is JSON but not a notebook (a list" in run.stdout, run.stdout[-3000:]
    assert "AttributeError:" not in run.stdout and "Traceback" not in run.stdout, run.stdout[-3000:]


@pytest.mark.parametrize("name", sorted(REVIEW_FORGERIES))
def test_pytest_nbval_fails_the_review_forgeries_and_passes_a_finished_thread(graded, name):
    """The no-context review: a thread re-patching the check after the guard's reset, and `torch.Tensor` patched,
    made `pytest --nbval` pass a wrong Task 1 (tests/review_forgeries.py; `grade` gets the same answers)."""
    _, status, words, *_ = REVIEW_FORGERIES[name]
    results, output = graded
    run = results[f"review-{name}"]
    if status == "passed":
        assert run.ok and "changed the grader" not in run.text, (run, output)
        return
    assert run.failed, (run, output)
    text = run.flat()
    assert all(w.lower() in text for w in words), (words, run)
    if "cannot be graded" in words or "altered the grader while this check ran" in words:  # not verified: no claim
        for cell in run.failed:
            assert not re.search(re.escape(cell.lower()) + r": [^:]*only the real check counts", text), run
    if status == "failed":  # Task 1's check cell is among the failures
        nb = _review_forgery(name)
        task1 = [c for c in nb.cells if c.cell_type == "code"].index(
            next(c for c in nb.cells if "check" in tags(c)))
        assert f"Cell {task1}" in run.failed, run


@pytest.mark.parametrize("name", EXERCISES)
def test_pytest_nbval_fails_the_one_line_forgery_in_every_exercise(graded, name):
    """Review rev25-r2 E1: the audit's one-line forgery in each exercise 00-11 (every task a stub): every check cell
    fails (exercises 08 and 11 were not guarded at all), as in ``grade`` (tests/test_grading_integrity.py)."""
    results, output = graded
    nb, run = _forged(name), results[f"oneline-{name[:2]}"]
    code = [c for c in nb.cells if c.cell_type == "code"]
    checks = [k for k, c in enumerate(code) if "check" in tags(c)]
    assert run.failed, (run, output)
    for k in checks:
        assert f"Cell {k}" in run.failed, (k, run)
    assert f"the check module ampcourse.checks.lesson{name[:2]}" in " ".join(run.text.split()), run


@pytest.mark.parametrize("label", sorted(OTHER_FORGERIES))
def test_pytest_nbval_fails_forgeries_of_other_exercises(graded, label):
    """Review rev25-r2 E8 under pytest --nbval (tests/review_forgeries.py; ``grade`` gets the same answers)."""
    name, _, task, status, words = OTHER_FORGERIES[label]
    results, output = graded
    run = results[f"other-{label}"]
    nb = _other_forgery(label)[1]
    code = [c for c in nb.cells if c.cell_type == "code"]
    check = [k for k, c in enumerate(code) if "check" in tags(c)][task]
    assert (f"Cell {check}" in run.failed) == (status == "failed"), (run, output)
    text = " ".join(run.text.split())
    assert all(w in text for w in words), (words, run)
