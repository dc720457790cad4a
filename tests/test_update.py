"""``./course update`` keeps a learner's answers across an upstream change to the same exercise.

An "upstream" course repository and a learner's clone of it are made in a temporary folder (only
notebooks/, solutions/ and exercises/ are needed); the learner answers exercise 00 from solutions/,
upstream changes Task 1's text and adds a sentence to Task 2's, and the learner updates.
"""

import os
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


def test_update_keeps_answers_across_an_upstream_change_to_the_same_exercise(clones, figures):
    upstream, learner = clones
    name = "00_start_here.ipynb"
    answer_from_solution(learner, name)
    # Upstream: Task 1's text changes, Task 2 gets a sentence; the exercise is rebuilt and committed.
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
