"""Single source of truth: exercises and navigation are generated, and stale copies are caught."""

import json
import re

import nbformat
import pytest

from ampcourse import authoring
from ampcourse.course import LESSONS, ROOT, published

SOLUTION = '''def f(x):
    """Double it."""
    ### BEGIN SOLUTION hint: multiply by two
    y = 2 * x
    return y
    ### END SOLUTION


class A:
    def g(self):
        # BEGIN SOLUTION
        return 1
        # END SOLUTION'''


def test_solution_regions_become_indented_stubs():
    out = authoring.strip_solutions(SOLUTION)
    assert "BEGIN" not in out and "END SOLUTION" not in out and "2 * x" not in out
    assert '    raise NotImplementedError("multiply by two")' in out.splitlines()
    assert '        raise NotImplementedError("write your code here")' in out.splitlines()
    namespace = {}
    exec(out, namespace)  # the stubbed code is valid Python
    with pytest.raises(NotImplementedError, match="multiply by two"):
        namespace["f"](1)


@pytest.mark.parametrize(
    ("source", "words"),
    [
        ("# BEGIN SOLUTION\nx = 1", "without END"),
        ("x = 1\n# END SOLUTION", "without BEGIN"),
        ("# BEGIN SOLUTION\n# BEGIN SOLUTION\n# END SOLUTION", "inside another"),
    ],
)
def test_unbalanced_markers_are_errors(source, words):
    with pytest.raises(authoring.AuthoringError, match=words):
        authoring.strip_solutions(source)


def _solution_nb(with_check=True):
    cells = [
        nbformat.v4.new_markdown_cell("# Exercise"),
        nbformat.v4.new_markdown_cell("answers", metadata={"tags": ["solution-only"]}),
        nbformat.v4.new_code_cell(SOLUTION, execution_count=3,
                                  outputs=[nbformat.v4.new_output("stream", text="hi")]),
    ]
    if with_check:
        cells.append(nbformat.v4.new_code_cell("check(f)", metadata={"tags": ["check"], "collapsed": True}))
    nb = nbformat.v4.new_notebook(cells=cells)
    nb.metadata["language_info"] = {"name": "python", "version": "3.11.7"}
    return nb


def test_exercise_has_no_answers_outputs_or_solution_only_cells():
    nb = authoring.make_exercise(_solution_nb())
    assert [c.source for c in nb.cells if c.cell_type == "markdown"] == ["# Exercise"]
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert all(c.outputs == [] and c.execution_count is None for c in code)
    assert code[1].metadata == {"tags": ["check"]}
    assert nb.metadata == {"kernelspec": authoring.KERNELSPEC, "language_info": authoring.LANGUAGE_INFO}


def test_exercise_without_a_check_or_a_region_is_refused():
    with pytest.raises(authoring.AuthoringError, match="no code cell tagged 'check'"):
        authoring.make_exercise(_solution_nb(with_check=False))
    nb = _solution_nb()
    nb.cells[2].source = "x = 1"
    with pytest.raises(authoring.AuthoringError, match="no '# BEGIN SOLUTION' region"):
        authoring.make_exercise(nb)


def test_repo_is_up_to_date():
    # Answers, outputs and JupyterLab metadata in a learner's working copy are not staleness (see below).
    stale = [str(p.relative_to(ROOT)) for p in authoring.stale_files()]
    assert stale == [], (f"generated files are stale: {stale}. Run: python -m ampcourse build (it keeps the "
                         "answers in exercises/ and backs them up to exercises/.backup/ first)")


def test_no_exercise_holds_an_out_of_date_stub():
    """A stub cell (a code cell still raising NotImplementedError, never run) that is not the current build's stub:
    an exercise built before its stub changed. ``build`` keeps such a cell as if it were the learner's work, and
    test_repo_is_up_to_date cannot tell the two apart. (A learner's unfinished, never-run edit of a stub in their
    own working copy is reported too: that copy's answers are theirs to keep.)"""
    old = []
    for path, template in authoring.templates().items():
        if path.parent != ROOT / "exercises" or not path.exists():
            continue
        stubs = {c.source for c in template.cells if c.cell_type == "code"}
        for cell in authoring.read(path).cells:
            if (cell.cell_type == "code" and "check" not in authoring.tags(cell) and not cell.get("outputs")
                    and authoring._STUB_LINE.search(cell.source) and cell.source not in stubs):
                first = next((line for line in cell.source.splitlines() if line.startswith("def ")), cell.source)
                old.append(f"{path.name}: {first[:60]}")
    assert old == [], (f"exercise cells that are an older build's stub: {old}. Delete those exercises and run "
                       "python -m ampcourse build")


def _answer_everything(root, note="LEARNER WORK"):
    """A learner's working copy: every exercise answered from solutions/ and saved by JupyterLab (outputs,
    metadata, a notes cell, a scratch cell); every lesson run and saved (outputs, JupyterLab metadata)."""
    for exercise in sorted((root / "exercises").glob("*.ipynb")):
        nb = authoring.read(exercise)
        solution = {c.get("id"): c for c in authoring.read(root / "solutions" / exercise.name).cells}
        for cell in nb.cells:
            answer = "NotImplementedError" in cell.source and "check" not in authoring.tags(cell)
            if cell.cell_type == "code" and answer:
                cell.source = solution[cell.id].source.replace("### BEGIN SOLUTION", f"# {note}")
            if cell.cell_type == "code":
                cell.outputs = [nbformat.v4.new_output("stream", text="ran\n")]
                cell.execution_count = 1
                cell.metadata["execution"] = {"iopub.status.busy": "2026-01-01T00:00:00Z"}
        nb.cells.insert(2, nbformat.v4.new_code_cell("scratch = 1  # my own cell"))
        nb.cells.append(nbformat.v4.new_markdown_cell(f"{note}: my notes"))
        nb.metadata["language_info"] = {"name": "python", "version": "3.11.7", "mimetype": "text/x-python"}
        nbformat.write(nb, exercise)
    for lesson in sorted((root / "notebooks").glob("*.ipynb")):
        nb = authoring.read(lesson)
        nb.metadata["language_info"] = {"name": "python", "version": "3.11.7"}
        for cell in nb.cells:
            if cell.cell_type == "code":
                cell.execution_count = (cell.execution_count or 0) + 7
                cell.metadata["scrolled"] = True
        nbformat.write(nb, lesson)


def _answers(path, note="LEARNER WORK"):
    return path.read_text().count(note)


def test_a_learner_working_copy_is_not_stale_and_build_keeps_every_answer(tmp_path, course_sources):
    root = course_sources(tmp_path)
    _answer_everything(root)
    before = {p.name: _answers(p) for p in (root / "exercises").glob("*.ipynb")}
    assert all(n >= 2 for n in before.values()), before  # at least one answer and the notes cell each
    assert authoring.stale_files(root) == []
    untouched = authoring.build(root)  # nothing to renew: the learner's files are not even rewritten
    assert untouched.backup is None and not [p for p in untouched.changed if p.parent.name == "exercises"]
    # A solution changes (the course moved on): build renews the template and keeps every answer.
    solution = root / "solutions" / "00_start_here.ipynb"
    nb = authoring.read(solution)
    nb.cells[0].source += "\nA new sentence."
    nbformat.write(nb, solution)
    assert root / "exercises" / "00_start_here.ipynb" in authoring.stale_files(root)
    report = authoring.build(root)
    assert {p.name: _answers(p) for p in (root / "exercises").glob("*.ipynb")} == before
    assert "A new sentence." in (root / "exercises" / "00_start_here.ipynb").read_text()
    assert "scratch = 1  # my own cell" in (root / "exercises" / "00_start_here.ipynb").read_text()
    assert report.backup is not None
    assert _answers(report.backup / "exercises" / "00_start_here.ipynb") == before["00_start_here.ipynb"]
    assert authoring.stale_files(root) == []
    # A second build changes nothing and makes no backup.
    again = authoring.build(root)
    assert again.backup is None and not [p for p in again.changed if p.parent.name == "exercises"]


def test_build_restores_a_deleted_check_and_leaves_an_unreadable_exercise_alone(tmp_path, course_sources):
    root = course_sources(tmp_path)
    _answer_everything(root)
    exercise = root / "exercises" / "00_start_here.ipynb"
    nb = authoring.read(exercise)
    nb.cells = [c for c in nb.cells if "check" not in authoring.tags(c)]
    nbformat.write(nb, exercise)
    assert exercise in authoring.stale_files(root)
    broken = root / "exercises" / "01_float_formats.ipynb"
    broken.write_text(broken.read_text()[:3000])
    report = authoring.build(root)
    assert broken in report.unreadable and broken.read_text() == broken.read_text()[:3000]
    assert any("not a readable notebook" in line for line in report.lines(root))
    solution = authoring.read(root / "solutions" / exercise.name)
    checks_in_solution = sum("check" in authoring.tags(c) for c in solution.cells)
    assert sum("check" in authoring.tags(c) for c in authoring.read(exercise).cells) == checks_in_solution >= 3
    assert _answers(exercise) >= 3


def test_stale_exercise_is_detected_and_rebuilt(tmp_path, course_sources):
    root = course_sources(tmp_path)
    exercise = root / "exercises" / "00_start_here.ipynb"
    nb = nbformat.read(exercise, as_version=4)
    nb.cells[0].source += "\nedited by hand"
    nbformat.write(nb, exercise)
    # A notebook without a solution is the learner's own (JupyterLab's Untitled.ipynb): never stale, left alone.
    (root / "exercises" / "Untitled.ipynb").write_text("{}")
    stale = {p.name for p in authoring.stale_files(root)}
    assert stale == {"00_start_here.ipynb"}
    report = authoring.build(root)
    assert authoring.stale_files(root) == []
    assert (root / "exercises" / "Untitled.ipynb").read_text() == "{}"
    assert [line for line in report.lines(root) if "Untitled" in line] == [
        "left alone: exercises/Untitled.ipynb is your own notebook, not a course exercise"]


def test_one_build_restores_a_deleted_exercise_and_nothing_else(tmp_path, course_sources):
    """The lesson map and a lesson's footer link an exercise because its solution exists, not because the file is
    there: a build after deleting an exercise once wrote them without it, and only a second build put it back."""
    root = course_sources(tmp_path)
    (root / "exercises" / "05_accumulation_clipping.ipynb").unlink()
    assert {p.name for p in authoring.stale_files(root)} == {"05_accumulation_clipping.ipynb"}
    authoring.build(root)
    assert authoring.stale_files(root) == []
    assert "../exercises/05_accumulation_clipping.ipynb" in (root / "notebooks" / "00_start_here.ipynb").read_text()


def test_changed_solution_makes_the_exercise_stale(tmp_path, course_sources):
    root = course_sources(tmp_path)
    solution = root / "solutions" / "00_start_here.ipynb"
    nb = nbformat.read(solution, as_version=4)
    nb.cells[0].source += "\nA new sentence."
    nbformat.write(nb, solution)
    assert root / "exercises" / "00_start_here.ipynb" in authoring.stale_files(root)


def test_navigation_links_resolve():
    link = re.compile(r"\]\(([^)#]+\.ipynb)\)")
    checked = 0
    for folder in ("notebooks", "exercises", "solutions"):
        for path in (ROOT / folder).glob("*.ipynb"):
            for cell in nbformat.read(path, as_version=4).cells:
                if cell.cell_type == "markdown":
                    for target in link.findall(cell.source):
                        assert (path.parent / target).resolve().exists(), f"{path.name}: broken link {target}"
                        checked += 1
    assert checked >= len(published()) + 1


def test_every_published_lesson_has_its_files_and_nav():
    for lesson in published():
        nb = nbformat.read(lesson.lesson_path(), as_version=4)
        assert nb.cells[-1].metadata.get("tags") == ["nav"], f"{lesson.filename}: last cell is not the nav"
        assert lesson.solution_path().exists() and lesson.exercise_path().exists()
    toc = authoring.toc_markdown()
    assert all(lesson.title in toc for lesson in LESSONS)


PERSONAL = re.compile(r"/(home|Users|root|work|tmp)/[\w.-]+")


@pytest.mark.parametrize("folder", ["notebooks", "solutions", "exercises"])
def test_notebook_metadata_is_clean(folder):
    # The committed notebooks are checked (git show HEAD:path; the file itself outside a git clone): a
    # learner's saved copy carries JupyterLab metadata and their outputs, and that is theirs to keep.
    paths = authoring.course_exercises(ROOT) if folder == "exercises" else (ROOT / folder).glob("*.ipynb")
    for path in paths:  # a learner's own notebook in exercises/ (Untitled.ipynb) is theirs, not the course's
        text = authoring._committed(path, ROOT) or path.read_text()
        raw = json.loads(text)
        assert raw["metadata"] == {"kernelspec": authoring.KERNELSPEC, "language_info": authoring.LANGUAGE_INFO}
        for cell in raw["cells"]:
            assert set(cell["metadata"]) <= {"tags"}, f"{path.name}: cell metadata {cell['metadata']}"
        assert not PERSONAL.search(text), f"{path.name}: a machine path {PERSONAL.search(text).group()}"
        if folder == "exercises":  # committed blank, exactly as generated
            solution = authoring._committed(ROOT / "solutions" / path.name, ROOT) or (
                ROOT / "solutions" / path.name).read_text()
            blank = authoring.make_exercise(nbformat.reads(solution, as_version=4), path.name)
            assert text == authoring.dumps(blank), f"{path.name}: the committed exercise is not the generated one"


def test_every_lesson_has_objectives_prerequisites_recap_and_quiz():
    from ampcourse.course import LESSONS

    for lesson in published():
        cells = nbformat.read(lesson.lesson_path(), as_version=4).cells
        first = cells[0].source
        assert first.startswith(f"# {lesson.number} · {lesson.title}"), f"{lesson.filename}: title"
        assert "**In this notebook you will**" in first, f"{lesson.filename}: no objectives in the first cell"
        assert "**Prerequisites:**" in first, f"{lesson.filename}: no prerequisites in the first cell"
        index = LESSONS.index(lesson)
        if index > 0:
            previous = LESSONS[index - 1]
            assert f"({previous.filename})" in first, f"{lesson.filename}: prerequisites must link {previous.filename}"
        assert any(c.cell_type == "markdown" and "## Recap" in c.source for c in cells), f"{lesson.filename}: recap"
        assert any(c.cell_type == "code" and f'lesson_quiz("{lesson.number}")' in c.source
                   for c in cells), f"{lesson.filename}: quiz (answers in ampcourse/quizzes, not in the cell)"


def test_generated_exercises_pass_ruff():
    # ruff skips exercises/ (a learner's answer may leave an unused variable); the blank exercises as
    # generated must pass it, with the exercises' per-file rules (given the path through --stdin-filename).
    import subprocess
    import sys

    for path, text in authoring.generated_files().items():
        if path.parent.name != "exercises":
            continue
        run = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache",
                              "--stdin-filename", f"exercises/{path.name}", "-"], cwd=ROOT, input=text,
                             capture_output=True, text=True)
        assert run.returncode == 0, f"{path.name}: " + run.stdout + run.stderr


def test_stored_language_info_is_what_the_kernel_reports():
    """JupyterLab writes the kernel's language_info into the notebook when the kernel starts; if it differs
    from the stored one, an untouched lesson opens "modified" and closing it asks to save."""
    from ipykernel.ipkernel import IPythonKernel

    reported = IPythonKernel.language_info
    assert {**reported, "version": authoring.PYTHON_VERSION} == authoring.LANGUAGE_INFO, (
        "ipykernel now reports other language_info fields: update authoring.LANGUAGE_INFO and rebuild")
    if reported["version"] != authoring.PYTHON_VERSION:
        pytest.skip(f"notebooks store Python {authoring.PYTHON_VERSION}'s language_info; this kernel is "
                    f"{reported['version']}, so here they open 'modified'")
