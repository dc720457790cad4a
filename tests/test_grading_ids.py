"""Grading is keyed on what the learner wrote, not on cell ids (reliability audit r3, finding 12).

An honestly answered exercise 00 saved without ids (nbformat 4.4), with every id regenerated, with duplicate ids,
or with an answer retyped into a new cell once graded "not started" in ``grade`` (the template's stub was put back
after the answer) while ``pytest --nbval`` passed it, and ``build`` wrote that stub into the learner's file. The
unit tests below check the merge and the build on each variant (no kernel); one test runs both graders on all of
them and requires them to agree.
"""

import copy
import json
import re
import shutil
import subprocess
import sys

import nbformat
import pytest

from ampcourse import authoring
from ampcourse.course import ROOT
from ampcourse.grading import grade, plan

NAME = "00_start_here.ipynb"
SOLUTION = authoring.read(ROOT / "solutions" / NAME)
TEMPLATE = authoring.make_exercise(SOLUTION, NAME)
ANSWERS = sorted(authoring.answer_cells(TEMPLATE))
STUB = re.compile(r"^\s*raise NotImplementedError", re.M)


def answered():
    """Exercise 00 answered as a learner types it: the solution's code with a LEARNER line, the markers gone."""
    nb = copy.deepcopy(TEMPLATE)
    by_id = {c.id: c for c in SOLUTION.cells}
    for i in ANSWERS:
        code = [line for line in by_id[nb.cells[i].id].source.splitlines()
                if not (authoring.BEGIN.match(line) or authoring.END.match(line))]
        nb.cells[i].source = "# LEARNER WORK\n" + "\n".join(code)
    return nb


def without_ids(nb):
    nb.nbformat_minor = 4
    for cell in nb.cells:
        cell.pop("id", None)
    return nb


def regenerated_ids(nb):
    for n, cell in enumerate(nb.cells):
        cell.id = f"fresh-{n}"
    return nb


def duplicate_ids(nb):
    for cell in nb.cells:
        cell.id = "same-id"
    return nb


def retyped(nb):
    """The first answer deleted with its stub cell and typed into a new cell (a new id) in its place."""
    new = nbformat.v4.new_code_cell(nb.cells[ANSWERS[0]].source)
    nb.cells[ANSWERS[0]] = new
    return nb


def retyped_below_the_stub(nb):
    """The stub cell emptied and the answer written in a new cell under it."""
    nb.cells.insert(ANSWERS[1] + 1, nbformat.v4.new_code_cell(nb.cells[ANSWERS[1]].source))
    nb.cells[ANSWERS[1]].source = ""
    return nb


VARIANTS = {"no_ids": without_ids, "regenerated_ids": regenerated_ids, "duplicate_ids": duplicate_ids,
            "retyped": retyped, "retyped_below_the_stub": retyped_below_the_stub}


def write_raw(nb, path):
    """Write as a file on disk may be (nbformat.write would repair duplicate ids; JupyterLab does not)."""
    path.write_text(json.dumps(nb, indent=1), encoding="utf-8")


def runs_the_answers(cells):
    """For each task, the last cell before its check that defines the function is the learner's."""
    for name in ("tensor_bytes", "amp_forward", "choose_recipe"):
        check = next(i for i, c in enumerate(cells) if "check" in authoring.tags(c) and f"({name})" in c.source)
        last = [c for c in cells[:check] if c.cell_type == "code" and re.search(rf"^def {name}\b", c.source, re.M)][-1]
        assert "LEARNER WORK" in last.source and not STUB.search(last.source), (name, last.source)


@pytest.mark.parametrize("variant", VARIANTS)
def test_the_grader_runs_the_learners_answers_whatever_their_ids(tmp_path, variant):
    (tmp_path / "solutions").mkdir()
    (tmp_path / "exercises").mkdir()
    shutil.copy(ROOT / "solutions" / NAME, tmp_path / "solutions" / NAME)
    path = tmp_path / "exercises" / NAME
    write_raw(VARIANTS[variant](answered()), path)
    cells, checks, notes = plan(path, tmp_path)
    assert len(checks) == 3 and not notes, notes
    runs_the_answers(cells)


@pytest.mark.parametrize("variant", VARIANTS)
def test_build_never_puts_a_stub_back_after_an_answer(tmp_path, course_sources, variant):
    root = course_sources(tmp_path)
    path = root / "exercises" / NAME
    write_raw(VARIANTS[variant](answered()), path)
    report = authoring.build(root)
    nb = authoring.read(path)
    nbformat.validate(nb)  # ids repaired: present and unique
    assert not [c for c in nb.cells if c.cell_type == "code" and STUB.search(c.source)], report.lines(root)
    assert sum("LEARNER WORK" in c.source for c in nb.cells) == 3
    runs_the_answers(nb.cells)
    assert authoring.stale_files(root) == []
    again = authoring.build(root)
    assert path not in again.changed  # stable


def test_grade_and_pytest_nbval_agree_on_every_variant(tmp_path, figures):
    """Both graders on every variant: each passes all three tasks (one kernel per notebook and grader)."""
    (tmp_path / "solutions").mkdir()
    folder = tmp_path / "exercises"
    folder.mkdir()
    shutil.copy(ROOT / "exercises" / "conftest.py", folder / "conftest.py")
    for variant, edit in VARIANTS.items():
        if variant == "retyped_below_the_stub":
            continue  # not one of the audit's variants: the unit tests above cover it without a kernel
        shutil.copy(ROOT / "solutions" / NAME, tmp_path / "solutions" / f"{variant}.ipynb")
        write_raw(edit(answered()), folder / f"{variant}.ipynb")
    table, code = grade([str(folder)], root=tmp_path)
    figures("grade on exercise 00 saved with other cell ids:\n" + table)
    run = subprocess.run([sys.executable, "-m", "pytest", "--nbval", "-q", "-p", "no:randomly", "-p",
                          "no:cacheprovider", "--nbval-current-env", "."], cwd=folder, capture_output=True, text=True,
                         timeout=1800)
    assert code == 0, table
    for variant in set(VARIANTS) - {"retyped_below_the_stub"}:
        assert re.search(rf"^{variant}\s+3/3\s+passed$", table, flags=re.M), table
    assert run.returncode == 0, run.stdout[-3000:]


def test_an_edited_given_cell_is_set_aside_not_reported_as_an_upstream_change():
    """Audit r3, finding 7: an edit to a given (non-answer) code cell was dropped and reported as "the text or
    check changed: re-read it". Now the course's cell comes back, the learner's copy is kept below it, and the
    report says so."""
    # Exercise 00 has no given code cell: give the template one (between Task 2's text and its answer).
    nb = answered()
    template = copy.deepcopy(TEMPLATE)
    given = ANSWERS[1]
    template.cells.insert(given, nbformat.v4.new_code_cell("SIZE = 4"))
    nb.cells.insert(given, copy.deepcopy(template.cells[given]))
    nb.cells[given].source += "\nprint('LEARNER WORK: my edit')"
    merge = authoring.merge_exercise(nb, template, old_template=template)
    sources = [c.source for c in merge.notebook.cells]
    assert template.cells[given].source in sources
    assert nb.cells[given].source in sources  # the learner's edit, kept
    assert merge.set_aside and not merge.changed_tasks, (merge.set_aside, merge.changed_tasks)


def test_an_untouched_stub_that_changed_upstream_takes_the_new_stub():
    """Audit r3, finding 9: an untouched stub whose signature changed upstream was kept as if it were an answer,
    and an answered task whose stub changed was not listed."""
    old = copy.deepcopy(TEMPLATE)
    new = copy.deepcopy(TEMPLATE)
    i = ANSWERS[0]
    new.cells[i].source = new.cells[i].source.replace("def tensor_bytes(t: torch.Tensor)",
                                                      "def tensor_bytes(t: torch.Tensor, *, strict: bool = True)")
    assert new.cells[i].source != old.cells[i].source
    untouched = authoring.merge_exercise(copy.deepcopy(old), new, old_template=old)
    assert untouched.notebook.cells[i].source == new.cells[i].source
    assert not untouched.kept_answers
    mine = copy.deepcopy(old)
    mine.cells[i].source = answered().cells[i].source
    merge = authoring.merge_exercise(mine, new, old_template=old)
    assert merge.kept_answers == [authoring.task_title(new.cells, i)]
    assert merge.changed_stubs == [authoring.task_title(new.cells, i)]
