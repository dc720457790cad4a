"""``./course update`` keeps a learner's answers across an upstream change to the same exercise.

An "upstream" course repository and a learner's clone of it are made in a temporary folder (only
notebooks/, solutions/ and exercises/ are needed); the learner answers exercise 00 from solutions/,
upstream changes Task 1's text and adds a sentence to Task 2's, and the learner updates.
"""

import os
import re
import shutil
import subprocess

import nbformat
import pytest

from ampcourse import authoring
from ampcourse.course import ROOT
from ampcourse.update import run_update

GIT_ENV = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.invalid", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@example.invalid", "GIT_CONFIG_NOSYSTEM": "1", "HOME": "/nonexistent"}


def git(cwd, *args):
    env = {**os.environ, **GIT_ENV}
    return subprocess.run(["git", "-c", "init.defaultBranch=main", "-c", "protocol.file.allow=always", *args],
                          cwd=cwd, env=env, check=True, capture_output=True, text=True).stdout


def answer_from_solution(learner_root, name, note="LEARNER WORK"):
    """What a learner's saved exercise looks like: the solution's answers, a note, JupyterLab metadata."""
    exercise = learner_root / "exercises" / name
    nb = authoring.read(exercise)
    solution = authoring.read(learner_root / "solutions" / name)
    by_id = {c.get("id"): c for c in solution.cells}
    for cell in nb.cells:
        if cell.cell_type == "code" and "NotImplementedError" in cell.source and cell.get("id") in by_id:
            cell.source = by_id[cell.id].source.replace("### BEGIN SOLUTION", "# " + note).replace(
                "### END SOLUTION", "")
            cell.outputs = [nbformat.v4.new_output("stream", text="ran\n")]
            cell.execution_count = 3
    nb.cells.append(nbformat.v4.new_markdown_cell(f"{note}: my notes"))
    nb.metadata["language_info"] = {"name": "python", "version": "3.11.7", "mimetype": "text/x-python"}
    nbformat.write(nb, exercise)


@pytest.fixture
def clones(tmp_path, course_sources):
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    upstream = course_sources(tmp_path / "upstream")  # blank exercises even in a learner's working copy
    git(upstream, "init", "-q")
    git(upstream, "add", ".")
    git(upstream, "commit", "-qm", "course")
    git(tmp_path, "clone", "-q", str(upstream), "learner")
    return upstream, tmp_path / "learner"


def _reword_upstream(upstream, name):
    """Upstream: Task 1's text changes, Task 2 gets a sentence; the exercise is rebuilt and committed."""
    solution = upstream / "solutions" / name
    nb = authoring.read(solution)
    for cell in nb.cells:
        if cell.cell_type == "markdown" and cell.source.startswith("## Task 1"):
            cell.source = cell.source.replace("Write `tensor_bytes(t)`", "Write a function `tensor_bytes(t)`")
        if cell.cell_type == "markdown" and cell.source.startswith("## Task 2"):
            cell.source += "\n\nUPSTREAM SENTENCE."
    nbformat.write(nb, solution)
    authoring.build(upstream)
    git(upstream, "commit", "-qam", "reword task 1")


def test_update_keeps_answers_across_an_upstream_change_to_the_same_exercise(clones, figures):
    upstream, learner = clones
    name = "00_start_here.ipynb"
    answer_from_solution(learner, name)
    _reword_upstream(upstream, name)

    lines = run_update(learner)
    figures("./course update:\n" + "\n".join(lines))
    text = (learner / "exercises" / name).read_text()
    tasks = sum("check" in authoring.tags(c) for c in authoring.read(ROOT / "solutions" / name).cells)
    assert text.count("LEARNER WORK") == tasks + 1, text  # every answer and the notes cell
    assert "Write a function `tensor_bytes(t)`" in text and "UPSTREAM SENTENCE." in text
    assert any("Task 1" in line and "changed" in line for line in lines), lines
    assert any("kept your answers" in line for line in lines), lines
    assert authoring.stale_files(learner) == []
    assert git(learner, "rev-parse", "HEAD") == git(upstream, "rev-parse", "HEAD")
    backups = list((learner / "exercises" / ".backup").glob(f"*/exercises/{name}"))
    assert len(backups) == 1 and "LEARNER WORK" in backups[0].read_text()


def test_update_that_cannot_fast_forward_changes_nothing(clones):
    upstream, learner = clones
    name = "00_start_here.ipynb"
    answer_from_solution(learner, name)
    before = (learner / "exercises" / name).read_bytes()
    (learner / "mine.txt").write_text("x")
    git(learner, "add", "mine.txt")
    git(learner, "commit", "-qm", "a commit of my own")
    (upstream / "other.txt").write_text("y")
    git(upstream, "add", "other.txt")
    git(upstream, "commit", "-qm", "upstream change")
    from ampcourse.update import UpdateError

    with pytest.raises(UpdateError, match="Nothing was updated"):
        run_update(learner)
    assert (learner / "exercises" / name).read_bytes() == before


def test_dependencies_other_than_torch_are_pinned_to_a_tested_minor_release():
    import re

    try:
        import tomllib
    except ImportError:  # Python 3.10
        tomllib = pytest.importorskip("tomli")
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    for requirement in project["dependencies"] + project["optional-dependencies"]["dev"]:
        name = re.match(r"[A-Za-z0-9_.-]+", requirement).group()
        if name != "torch":  # ./course installs torch itself (AMPCOURSE_TORCH_VERSION)
            pinned = re.search(r">=[\d.]+,<[\d.]+$", requirement.replace(" ", ""))
            assert pinned, f"{requirement}: pin it (>=x.y.z,<x.y+1)"


# --- the update is one transaction (reliability audit r3, findings 1-4, 8, 10) --------------------------------------

LESSON = "00_start_here.ipynb"


def _save_lesson_with_a_note(learner, note="LEARNER WORK lesson 00"):
    path = learner / "notebooks" / LESSON
    nb = authoring.read(path)
    nb.cells.insert(1, nbformat.v4.new_markdown_cell(note))
    nbformat.write(nb, path)


def _learner_state(learner, only=None):
    """The bytes of every notebook in exercises/ and notebooks/ (or of those named in ``only``)."""
    return {p.relative_to(learner).as_posix(): p.read_bytes()
            for folder in ("exercises", "notebooks") for p in sorted((learner / folder).glob("*.ipynb"))
            if only is None or p.relative_to(learner).as_posix() in only}


# What the learner saved in the tests below (a build after a pull may also rewrite other lessons where this checkout
# is itself a working copy, whose saved lessons become the scratch upstream's: those are not the learner's work).
SAVED = (f"exercises/{LESSON}", f"notebooks/{LESSON}")


def _upstream_commit(upstream, name="upstream.txt"):
    (upstream / name).write_text("a newer course\n")
    git(upstream, "add", name)
    git(upstream, "commit", "-qm", "upstream change")


class _Stop(BaseException):
    """What this test's own SIGTERM/SIGHUP handler raises (so code without handlers cannot kill pytest)."""


@pytest.mark.parametrize("how", ["SIGINT", "SIGTERM", "SIGHUP"])
def test_an_update_interrupted_during_the_pull_leaves_every_notebook_as_it_was(clones, monkeypatch, capsys, how):
    """Finding 1: Ctrl-C (or SIGTERM/SIGHUP) while git pulls once left all exercises blank, and the backup held
    lesson 00 under exercise 00's name (finding 2)."""
    import signal

    from ampcourse import update

    upstream, learner = clones
    answer_from_solution(learner, LESSON)
    _save_lesson_with_a_note(learner)
    _upstream_commit(upstream)
    before = _learner_state(learner)
    real = update._git
    blanked = []

    def slow_pull(root, *args, **kwargs):
        if args[0] == "pull":
            blanked.append(b"LEARNER WORK" not in (learner / "exercises" / LESSON).read_bytes())
            if how == "SIGINT":
                raise KeyboardInterrupt  # what Python makes of Ctrl-C
            os.kill(os.getpid(), getattr(signal, how))
            import time
            time.sleep(30)
        return real(root, *args, **kwargs)

    monkeypatch.setattr(update, "_git", slow_pull)
    real_replace = os.replace

    def second_signal(*args):  # a second Ctrl-C (or SIGTERM/SIGHUP) while the notebooks are written back (N3)
        os.kill(os.getpid(), getattr(signal, how))
        return real_replace(*args)

    monkeypatch.setattr(update.os, "replace", second_signal)
    previous = signal.signal(getattr(signal, how, signal.SIGTERM), lambda *a: (_ for _ in ()).throw(_Stop()))
    try:
        code = update.update(learner)
    except (KeyboardInterrupt, _Stop):
        code = None  # the interruption got through the update
    finally:
        signal.signal(getattr(signal, how, signal.SIGTERM), previous)
        monkeypatch.setattr(update.os, "replace", real_replace)
    out = capsys.readouterr().out
    assert blanked == [True]  # the interruption came while the course's files were checked out
    assert _learner_state(learner) == before, "an interrupted update changed the learner's notebooks"
    assert code == 130 and "Nothing was updated; your files are as they were" in out, out
    # The backup keeps exercise 00 and lesson 00 apart, and marks no update as in progress any more.
    backup = next((learner / "exercises" / ".backup").iterdir())
    assert (backup / "exercises" / LESSON).read_bytes() == before[f"exercises/{LESSON}"]
    assert (backup / "notebooks" / LESSON).read_bytes() == before[f"notebooks/{LESSON}"]
    assert not (backup / update.MARKER).exists()


def test_a_killed_update_is_put_back_by_the_next_run_or_by_restore(clones, tmp_path):
    """Finding 1 (kill -9): nothing in the process can clean up, so the marker left in the backup does."""
    import sys

    from ampcourse import update

    upstream, learner = clones
    answer_from_solution(learner, LESSON)
    _save_lesson_with_a_note(learner)
    _upstream_commit(upstream)
    before = _learner_state(learner, SAVED)
    script = tmp_path / "killed.py"
    script.write_text(
        "import os, signal, sys\nfrom pathlib import Path\nfrom ampcourse import update\nreal = update._git\n"
        "def git(root, *args, **kw):\n    if args[0] == 'pull':\n        os.kill(os.getpid(), signal.SIGKILL)\n"
        "    return real(root, *args, **kw)\nupdate._git = git\nsys.exit(update.update(Path(sys.argv[1])))\n")
    env = {**os.environ, **GIT_ENV, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get(
        "PYTHONPATH")]))}
    run = subprocess.run([sys.executable, str(script), str(learner)], env=env, capture_output=True, text=True,
                         timeout=300)
    assert run.returncode == -9, run.stderr[-2000:]
    assert b"LEARNER WORK" not in (learner / "exercises" / LESSON).read_bytes()  # killed with the files checked out
    # Until the next update, grade, build and ./course lab say so (N1); the script looks for the same marker.
    assert update.interrupted_warning(learner).startswith(update.INTERRUPTED)
    assert update.MARKER in (ROOT / "course").read_text()
    # The learner does not notice and works in the blank exercise (N1: that work was once overwritten unseen).
    answer_from_solution(learner, LESSON, note="NEWER WORK")
    newer = (learner / "exercises" / LESSON).read_bytes()
    # The next update puts them back before it pulls (the marker says the last one did not finish), then updates.
    lines = run_update(learner)
    assert any("an earlier update was stopped" in line for line in lines), lines
    text = (learner / "exercises" / LESSON).read_text()
    assert text.count("LEARNER WORK") == 4, lines  # three answers and the note
    kept = [line for line in lines if "since that update stopped" in line]
    assert len(kept) == 1 and f"exercises/{LESSON}" in kept[0], lines
    copies = [p for p in (learner / "exercises" / ".backup").glob(f"*/exercises/{LESSON}") if p.read_bytes() == newer]
    assert copies and copies[0].parent.parent.name in kept[0], (kept, copies)
    assert update.interrupted_warning(learner) is None
    # `./course update --restore` then brings back the notebooks exactly as they were before either update.
    lines = update.restore(learner)
    assert _learner_state(learner, SAVED) == before, lines
    assert git(learner, "rev-parse", "HEAD") == git(upstream, "rev-parse", "HEAD")


def test_an_update_interrupted_after_the_pull_merges_against_the_old_templates_when_rerun(clones, monkeypatch,
                                                                                          capsys):
    """N2: stopped in the merge after the pull, the update once said "run python -m ampcourse build", which takes
    the new templates as the old ones (the learner's old task text then looks like their own edit). The marker now
    stays with the commit the update started from, and rerunning ./course update merges against it."""
    from ampcourse import update

    upstream, learner = clones
    answer_from_solution(learner, LESSON)
    _reword_upstream(upstream, LESSON)
    before = (learner / "exercises" / LESSON).read_bytes()
    real = update.build_after_pull

    def stopped(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(update, "build_after_pull", stopped)
    assert update.update(learner) == 130
    out = capsys.readouterr().out
    assert "The course was pulled" in out and "run ./course update again" in out, out
    assert (learner / "exercises" / LESSON).read_bytes() == before
    assert update.interrupted_warning(learner) is not None  # grade and lab warn, build refuses
    monkeypatch.setattr(update, "build_after_pull", real)
    lines = run_update(learner)
    text = (learner / "exercises" / LESSON).read_text()
    assert "Write a function `tensor_bytes(t)`" in text and "Write `tensor_bytes(t)`" not in text, lines
    assert any("Task 1" in line and "changed" in line for line in lines), lines
    assert text.count("LEARNER WORK") == 4 and update.interrupted_warning(learner) is None, lines


def test_a_refused_update_keeps_saved_lessons_too(clones, capsys):
    """Finding 3: a pull that git refuses once reverted every saved lesson while saying nothing changed."""
    from ampcourse import update

    upstream, learner = clones
    (upstream / "README.md").write_text("course\n")
    git(upstream, "add", "README.md")
    git(upstream, "commit", "-qm", "readme")
    git(learner, "pull", "-q")
    answer_from_solution(learner, LESSON)
    _save_lesson_with_a_note(learner)
    (learner / "README.md").write_text("my notes in the README\n")
    (upstream / "README.md").write_text("course, newer\n")
    git(upstream, "commit", "-qam", "readme changes")
    before = _learner_state(learner)
    assert update.update(learner) == 1
    assert "Nothing was updated; your files are as they were" in capsys.readouterr().out
    assert _learner_state(learner) == before
    assert update.update(learner, remote="nosuchremote") == 1
    assert _learner_state(learner) == before


def test_build_after_the_learner_commits_keeps_added_cells(clones):
    """Finding 4: once the learner committed, build took their committed exercise as the old template and dropped
    every note cell while reporting them kept."""
    upstream, learner = clones
    answer_from_solution(learner, LESSON)
    git(learner, "add", "-A")
    git(learner, "commit", "-qm", "my work")
    report = authoring.build(learner)
    text = (learner / "exercises" / LESSON).read_text()
    assert "LEARNER WORK: my notes" in text, report.lines(learner)
    assert text.count("LEARNER WORK") == 4


def test_an_update_after_an_exercise_was_deleted_brings_it_back(clones):
    """Finding 10: a deleted exercise made the update crash (a raw FileNotFoundError from the backup)."""
    upstream, learner = clones
    answer_from_solution(learner, LESSON)
    (learner / "exercises" / "03_autocast.ipynb").unlink()
    _upstream_commit(upstream)
    lines = run_update(learner)
    assert (learner / "exercises" / "03_autocast.ipynb").exists(), lines
    assert (learner / "exercises" / LESSON).read_text().count("LEARNER WORK") == 4


def test_restore_brings_the_backup_of_an_update_back(clones):
    upstream, learner = clones
    answer_from_solution(learner, LESSON)
    _save_lesson_with_a_note(learner)
    _upstream_commit(upstream)
    before = _learner_state(learner, SAVED)
    run_update(learner)
    assert (learner / "notebooks" / LESSON).read_bytes() != before[f"notebooks/{LESSON}"]  # replaced by the new one
    from ampcourse import update

    lines = update.restore(learner)
    assert _learner_state(learner, SAVED) == before, lines
    assert any("backed up in" in line for line in lines)  # what it overwrote is kept too


def test_an_untitled_notebook_in_exercises_is_the_learners_own(clones):
    """Finding 5: JupyterLab's Untitled.ipynb in exercises/ is not stale, survives build and update untouched."""
    upstream, learner = clones
    own = learner / "exercises" / "Untitled.ipynb"
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("mine = 1")]), own)
    data = own.read_bytes()
    assert authoring.stale_files(learner) == []
    _upstream_commit(upstream)
    lines = run_update(learner)
    assert own.read_bytes() == data
    assert lines.count("left alone: exercises/Untitled.ipynb is your own notebook, not a course exercise") == 1


def test_answers_move_with_an_exercise_renamed_upstream(clones):
    """Audit r3, finding 8: upstream renamed lesson 10's files and the answers stayed in an orphan file next to a
    blank exercise. (The build after the pull runs in a fresh process in a real clone, so the new course map is
    the one used; this scratch clone has no ampcourse/ of its own, so only the move is checked here.)"""
    upstream, learner = clones
    answer_from_solution(learner, "10_fp8.ipynb")
    for folder in ("solutions", "exercises"):
        git(upstream, "mv", f"{folder}/10_fp8.ipynb", f"{folder}/10_fp8_scaling.ipynb")
    git(upstream, "commit", "-qm", "rename lesson 10's exercise")
    lines = run_update(learner)
    assert not (learner / "exercises" / "10_fp8.ipynb").exists(), lines
    assert "LEARNER WORK" in (learner / "exercises" / "10_fp8_scaling.ipynb").read_text()
    assert any("10_fp8.ipynb is now exercises/10_fp8_scaling.ipynb" in line for line in lines), lines


def _ampcourse(root, *args):
    """``python -m ampcourse ARGS`` run in ``root`` with that clone's own package (as ./course runs it there)."""
    import sys

    env = {**os.environ, **GIT_ENV, "PYTHONPATH": str(root)}
    return subprocess.run([sys.executable, "-m", "ampcourse", *args], cwd=root, env=env, capture_output=True,
                          text=True, timeout=600)


def test_the_build_after_the_pull_uses_the_pulled_course_map(tmp_path):
    """Audit r3, finding 8: upstream renamed lesson 10's slug (``fp8`` -> ``fp8_scaling``, in ``ampcourse/course.py``
    and the three files); the build after the pull ran with the *pre-pull* course map still imported, wrote
    "FP8 *(coming soon)*" into lesson 00's and 09's navigation, and ``build --check`` then listed stale files. On a
    scratch clone of the whole course (its own ``ampcourse/``), ``./course update``'s build now runs in a fresh
    process: the learner's notebooks come out exactly as upstream's build wrote them, and nothing is stale."""
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    from test_working_copy import fresh_clone

    upstream = fresh_clone(tmp_path / "upstream")
    git(tmp_path, "clone", "-q", str(upstream), "learner")
    learner = tmp_path / "learner"
    answer_from_solution(learner, "10_fp8.ipynb")
    course = upstream / "ampcourse" / "course.py"
    assert 'Lesson("10", "fp8",' in course.read_text()
    course.write_text(course.read_text().replace('Lesson("10", "fp8",', 'Lesson("10", "fp8_scaling",'))
    for folder in ("notebooks", "solutions", "exercises"):
        git(upstream, "mv", f"{folder}/10_fp8.ipynb", f"{folder}/10_fp8_scaling.ipynb")
    built = _ampcourse(upstream, "build")
    assert built.returncode == 0, built.stdout + built.stderr
    git(upstream, "add", "-A")
    git(upstream, "commit", "-qm", "rename lesson 10's slug")
    nav = [f"notebooks/{n}" for n in ("00_start_here.ipynb", "09_capstone.ipynb")]
    assert all("FP8 *(coming soon)*" not in (upstream / n).read_text() for n in nav)  # upstream's own build

    lines = run_update(learner)  # the scratch clone has ampcourse/: its build runs in a fresh process
    for name in nav + ["notebooks/10_fp8_scaling.ipynb", "CONTRIBUTING.md"]:
        assert (learner / name).read_bytes() == (upstream / name).read_bytes(), (name, lines)
    assert "LEARNER WORK" in (learner / "exercises" / "10_fp8_scaling.ipynb").read_text(), lines
    assert not (learner / "exercises" / "10_fp8.ipynb").exists(), lines
    check = _ampcourse(learner, "build", "--check")
    assert check.returncode == 0 and "stale" not in check.stdout, check.stdout + check.stderr


def _lessons_changed_here() -> bool:
    """Whether this checkout's lessons differ from its commit (a learner's working copy, run and saved)."""
    done = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "notebooks"], capture_output=True,
                          text=True)
    return done.returncode != 0 or bool(done.stdout.strip())


def test_backups_keep_every_version_once(clones):
    """Audit r3, finding 11: ``exercises/.backup/`` grew by a copy of every changed notebook on each update, the same
    bytes again and again. Each update now drops the older copies that a newer backup holds byte for byte; a version
    seen once stays, an interrupted update's backup stays whole, and ``--restore`` still finds the newest."""
    from ampcourse import update

    upstream, learner = clones
    name = "00_start_here.ipynb"
    answer_from_solution(learner, name)
    _save_lesson_with_a_note(learner)
    first_answers = (learner / "exercises" / name).read_bytes()
    for n in range(3):  # three updates with nothing changed by the learner in between
        _upstream_commit(upstream, f"upstream{n}.txt")
        lines = run_update(learner)
    backups = update._backups(learner)
    versions = [(p.relative_to(b).as_posix(), p.read_bytes()) for b in backups for p in b.rglob("*.ipynb")]
    copies = sorted(path for path, _ in versions)
    assert len(set(versions)) == len(versions), (copies, lines)  # no path holds the same bytes twice
    if not _lessons_changed_here():  # a learner's working copy has every lesson run and saved: those are kept too
        assert copies == [f"exercises/{name}", "notebooks/00_start_here.ipynb"], (copies, lines)
        assert any("removed 1 backed-up copy that a newer backup holds" in line for line in lines), lines
    assert {f"exercises/{name}", "notebooks/00_start_here.ipynb"} <= set(copies), (copies, lines)
    assert any(re.search(r"removed \d+ backed-up cop", line) for line in lines), lines
    # A version seen once (the first answers, edited since) is kept, in its own folder, beside the newest.
    exercise = learner / "exercises" / name
    exercise.write_text(exercise.read_text().replace("LEARNER WORK", "LEARNER WORK, edited"))
    _upstream_commit(upstream, "upstream-last.txt")
    lines = run_update(learner)
    kept = {p.read_bytes() for b in update._backups(learner) for p in b.rglob(f"exercises/{name}")}
    assert first_answers in kept and exercise.read_bytes() in kept, lines
    newest = update._backups(learner)[-1]
    assert (newest / "exercises" / name).read_bytes() == exercise.read_bytes()  # --restore's choice did not move
    # An interrupted update's folder is never thinned: the next update puts all of it back.
    marked = update._backups(learner)[0]
    (marked / update.MARKER).write_text('{"head": null}')
    before = sorted(p.relative_to(marked) for p in marked.rglob("*.ipynb"))
    assert update.prune_backups(learner) == [] and sorted(p.relative_to(marked) for p in marked.rglob("*.ipynb")) \
        == before
