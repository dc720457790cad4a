"""The grader counts what it expects and never hangs: tiny copies of exercise 00 graded in a temporary folder.

Each learner notebook below is the answered exercise 00 with one thing done wrong in Task 1 (or to the
checks); the grader must fail that with a readable reason within its timeout, and still pass Task 2.
"""

import re
import shutil
import subprocess
import sys

import nbformat

from ampcourse import authoring
from ampcourse.course import ROOT
from ampcourse.grading import grade

TIMEOUT = 25  # seconds per cell: a correct answer takes well under 1 s, but a fresh kernel after os._exit
# imports torch again first, which took over 15 s on a loaded 2-core machine (a flaky NameError in the next task)
LOOP_TIMEOUT = 12  # the never-ending loop's: its kernel's first cell (importing torch) must still fit in it
SOLUTION = ROOT / "solutions" / "00_start_here.ipynb"
RIGHT_TASK1 = "return t.numel() * t.element_size()"
# Exercise 00's number of checks, read from its solution (the source of truth), as text for the table's "k/N".
N = str(sum("check" in authoring.tags(c) for c in authoring.read(ROOT / "solutions" / "00_start_here.ipynb").cells))
ALL_BUT_ONE = str(int(N) - 1)


def _course(tmp_path, variants):
    """A course folder with one solution per variant name (all exercise 00) and the learner copies."""
    (tmp_path / "solutions").mkdir()
    (tmp_path / "exercises").mkdir()
    for name, edit in variants.items():
        shutil.copy(SOLUTION, tmp_path / "solutions" / f"{name}.ipynb")
        nb = authoring.read(SOLUTION)
        nb = (edit(nb) if edit else None) or nb
        nbformat.write(nb, tmp_path / "exercises" / f"{name}.ipynb")
    return tmp_path


def _task1(body):
    def edit(nb):
        for cell in nb.cells:
            cell.source = cell.source.replace(RIGHT_TASK1, body)
    return edit


def _checks(edit_check):
    def edit(nb):
        for cell in nb.cells:
            if "check" in authoring.tags(cell):
                edit_check(cell)
    return edit


def _section(table, name):
    """The table's detail lines for one exercise."""
    match = re.search(rf"^{name}:\n((?:  .*\n?)*)", table, flags=re.M)
    return match.group(1) if match else ""


def _row(table, name):
    return re.search(rf"^{name}\s+(\d+)/(\d+)\s+(\S.*)$", table, flags=re.M).groups()


def test_a_misbehaving_task_fails_readably_and_the_next_task_still_passes(tmp_path, figures):
    root = _course(tmp_path, {
        "a_exit": _task1("import os; os._exit(1)"),
        "b_loop": _task1("while True:\n        pass"),
        "c_float16": _task1("torch.set_default_dtype(torch.float16)\n    return t.numel()"),
        "d_autocast_left_open": _autocast_left_open_and_task2_wrong,
        "e_keyboard_interrupt": _task1("raise KeyboardInterrupt"),
        "f_sys_exit": _task1("import sys; sys.exit(0)"),
    })
    notebooks = sorted((root / "exercises").glob("*.ipynb"))
    table, code = grade([str(p) for p in notebooks if p.stem != "b_loop"], root=root, timeout=TIMEOUT)
    # The loop waits out its whole timeout on a busy core: a shorter one (the kernel is interrupted, not
    # restarted, so nothing is imported again after it).
    loop_table, loop_code = grade([str(root / "exercises" / "b_loop.ipynb")], root=root, timeout=LOOP_TIMEOUT)
    assert code == 1 and loop_code == 1
    table += "\n" + loop_table
    figures("grade on misbehaving answers:\n" + table)
    reasons = {
        "a_exit": "your code stopped the Python process",
        "b_loop": f"stopped after {LOOP_TIMEOUT} s: the code ran too long",
        "c_float16": "Task 1",
        "e_keyboard_interrupt": "KeyboardInterrupt",
        "f_sys_exit": "SystemExit",
    }
    for name, reason in reasons.items():
        assert _row(table, name) == (ALL_BUT_ONE, N, "failed"), table  # the other tasks still pass
        detail = _section(table, name)
        assert "Task 1" in detail and reason in detail, table
        assert "Traceback" not in detail and "\x1b[" not in detail
    # autocast left open in Task 1 must not make a wrong Task 2 pass.
    assert _row(table, "d_autocast_left_open") == (ALL_BUT_ONE, N, "failed"), table
    assert "Task 2" in _section(table, "d_autocast_left_open")


def _autocast_left_open_and_task2_wrong(nb):
    for cell in nb.cells:
        cell.source = cell.source.replace(
            RIGHT_TASK1, "return t.numel() * t.element_size()\n\n\n"
                         "torch.autocast('cpu', dtype=torch.bfloat16).__enter__()  # left open")
        if "def amp_forward" in cell.source:
            body = cell.source.split("### BEGIN SOLUTION")[1].split("### END SOLUTION")[0]
            cell.source = cell.source.replace(body, "\n    return model(x)  # no autocast\n    ")


def test_deleted_emptied_or_skipped_checks_are_not_passed(tmp_path):
    def delete_task2_check(nb):
        _task1(RIGHT_TASK1)(nb)
        nb.cells = [c for c in nb.cells if not ("check" in authoring.tags(c) and "amp_forward" in c.source)]
        for cell in nb.cells:  # and Task 2 not done
            if "def amp_forward" in cell.source:
                body = cell.source.split("### BEGIN SOLUTION")[1].split("### END SOLUTION")[0]
                cell.source = cell.source.replace(body, '\n    raise NotImplementedError("x")\n    ')

    def blank(nb):
        exercise = authoring.make_exercise(nb)
        nb.cells = exercise.cells

    def blank_and(edit_check):
        def edit(nb):
            blank(nb)
            _checks(edit_check)(nb)
        return edit

    root = _course(tmp_path, {
        "a_deleted": delete_task2_check,
        "b_skip": blank_and(lambda c: setattr(c, "source", "# NBVAL_SKIP\n" + c.source)),
        "c_raises": blank_and(lambda c: setattr(c, "source", "# NBVAL_RAISES_EXCEPTION\n" + c.source)),
        "d_emptied": blank_and(lambda c: setattr(c, "source", "")),
        "e_fake": blank_and(lambda c: setattr(c, "source", 'print("✓ Task: passed")')),
    })
    table, code = grade([str(p) for p in sorted((root / "exercises").glob("*.ipynb"))], root=root, timeout=TIMEOUT)
    assert code == 1
    assert _row(table, "a_deleted") == (ALL_BUT_ONE, N, "failed"), table
    assert "Task 2" in _section(table, "a_deleted") and "not started" in _section(table, "a_deleted")
    for name in ("b_skip", "c_raises", "d_emptied", "e_fake"):
        assert _row(table, name) == ("0", N, "not started"), table


def test_ordinary_errors_show_their_type_and_line_and_an_unreadable_notebook_is_reported(tmp_path):
    def scratch_name_error(nb):
        nb.cells.insert(4, nbformat.v4.new_code_cell("x = 1\ny = undefined_name + x"))

    root = _course(tmp_path, {"a_name_error": scratch_name_error, "b_conflict": None, "c_fine": None})
    conflicted = root / "exercises" / "b_conflict.ipynb"
    text = conflicted.read_text().splitlines()
    conflicted.write_text("\n".join(text[:40] + ["<<<<<<< HEAD", "=======", ">>>>>>> upstream"] + text[40:]))
    table, code = grade([str(p) for p in sorted((root / "exercises").glob("*.ipynb"))], root=root, timeout=TIMEOUT)
    assert code == 1
    assert "NameError: name 'undefined_name' is not defined (line 2)" in _section(table, "a_name_error"), table
    assert "merge-conflict markers (line 41)" in _section(table, "b_conflict"), table
    assert _row(table, "b_conflict") == ("0", N, "failed"), table
    assert _row(table, "c_fine") == (N, N, "passed"), table
    assert "save first" in table


def test_pytest_nbval_on_exercises_ignores_skip_markers_in_check_cells_and_times_out_a_loop(tmp_path):
    """The README's ``pytest --nbval exercises/...`` path: exercises/conftest.py's rules."""
    folder = tmp_path / "exercises"
    folder.mkdir()
    shutil.copy(ROOT / "exercises" / "conftest.py", folder / "conftest.py")
    nb = authoring.make_exercise(authoring.read(SOLUTION))
    _checks(lambda c: setattr(c, "source", "# NBVAL_SKIP\n" + c.source))(nb)
    nbformat.write(nb, folder / "skip.ipynb")
    looping = authoring.make_exercise(authoring.read(SOLUTION))
    looping.cells.insert(1, nbformat.v4.new_code_cell("while True:\n    pass"))
    nbformat.write(looping, folder / "loop.ipynb")
    conftest = (folder / "conftest.py").read_text()
    # 15 s, not 5: under load, importing torch took longer than 5 s and nbval could not interrupt the kernel in
    # 5 s either (audit r3, finding 25).
    # The exercise rules live in ampcourse/pytest_plugin.py (which the conftest registers): set its default there.
    (folder / "conftest.py").write_text(conftest + "\n\nfrom ampcourse import pytest_plugin as _rules\n\n"
                                        "_rules.EXERCISE_CELL_TIMEOUT = 15\n")
    run = subprocess.run([sys.executable, "-m", "pytest", "--nbval", "--nbval-current-env", "-q", "-p", "no:randomly",
                          "-p", "no:cacheprovider", "skip.ipynb", "loop.ipynb"], cwd=folder,
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 1, run.stdout[-3000:]
    assert "skipped" not in run.stdout.splitlines()[-1], run.stdout[-3000:]
    assert "NotStarted" in run.stdout and "Timeout of 15 seconds exceeded" in run.stdout, run.stdout[-3000:]
