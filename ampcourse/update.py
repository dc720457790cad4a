"""``./course update`` (``python -m ampcourse update``): bring in a newer course and keep your answers.

Your answers live in ``exercises/``, which the course also updates, so a plain ``git pull`` either
refuses ("your local changes would be overwritten") or leaves merge-conflict markers in a notebook.
This does it safely:

1. copies every changed notebook in ``exercises/`` and ``notebooks/`` to ``exercises/.backup/<time>/``;
2. reads your exercises, then puts the course's files back (``git checkout``) and runs
   ``git pull --ff-only``;
3. puts your answers into the new exercises task by task (:func:`ampcourse.authoring.build`) and
   lists every task whose text or check changed, so you can re-read it.

Lessons you ran and saved are replaced by the new version (rerun them; your copies are in the backup).
If anything fails, your files are put back as they were.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from . import authoring
from .course import ROOT


class UpdateError(RuntimeError):
    """The update could not be done; the message says why and what to do."""


def _git(root: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    run = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True)
    if check and run.returncode != 0:
        raise UpdateError(f"`git {' '.join(args)}` failed: {(run.stderr or run.stdout).strip()}")
    return run


def _changed(root: Path) -> list[Path]:
    status = _git(root, "status", "--porcelain", "--", "exercises", "notebooks").stdout
    paths = []
    for line in status.splitlines():
        name = line[3:].split(" -> ")[-1].strip('"')
        if name.endswith(".ipynb") and line[:2] != "??":
            paths.append(root / name)
    return paths


def update(root: Path = ROOT, remote: str | None = None) -> int:
    """Run the update; print what happened; return 0 on success, 1 otherwise."""
    try:
        lines = run_update(root, remote)
    except UpdateError as err:
        print(f"[update] {err}")
        return 1
    for line in lines:
        print(f"[update] {line}")
    return 0


def run_update(root: Path = ROOT, remote: str | None = None) -> list[str]:
    """The update itself (see the module docstring); returns the report lines."""
    if not isinstance(root, Path):
        raise TypeError(f"root must be a pathlib.Path, got {type(root).__name__}")
    if _git(root, "rev-parse", "--is-inside-work-tree", check=False).returncode != 0:
        raise UpdateError(f"{root} is not a git clone: download the new course next to this one and copy "
                          "your exercises/ notebooks into it, then run `python -m ampcourse build` there")
    old_templates = {path.name: nb for path, nb in authoring.templates(root).items()
                     if path.parent == root / "exercises"}
    changed = _changed(root)
    backup = authoring.backup(changed, root)
    learner = {}
    for path in sorted((root / "exercises").glob("*.ipynb")):
        try:
            learner[path] = path.read_bytes()
            authoring.read(path)
        except Exception as err:  # noqa: BLE001
            raise UpdateError(f"{path.relative_to(root)} is not a readable notebook ({type(err).__name__}); fix it "
                              "or restore it from exercises/.backup/ first. Nothing was changed.") from None
    head = _git(root, "rev-parse", "HEAD").stdout.strip()
    try:
        if changed:
            _git(root, "checkout", "--", *[str(p.relative_to(root)) for p in changed])
        pull = ["pull", "--ff-only"] + ([remote] if remote else [])
        _git(root, *pull)
    except UpdateError as err:
        for path, data in learner.items():  # put everything back as it was
            path.write_bytes(data)
        where = f" (a copy is in {backup.relative_to(root)}/)" if backup else ""
        raise UpdateError(f"{err}\nNothing was updated; your files are as they were{where}. If your clone has commits "
                          "of its own, `git log` shows them; the course expects you not to commit.") from None
    new_head = _git(root, "rev-parse", "HEAD").stdout.strip()
    report = [f"course updated {head[:8]} -> {new_head[:8]}" if new_head != head else "the course was up to date"]
    # Put the learner's exercises back, then merge them into the new templates.
    for path, data in learner.items():
        path.write_bytes(data)
    result = authoring.build(root, old_templates=old_templates)
    if result.backup and result.backup != backup:
        shutil.rmtree(result.backup)  # the update's own backup already holds these files
        result.backup = backup
    else:
        result.backup = backup
    report += result.lines(root)
    lessons = [p for p in changed if p.parent == root / "notebooks"]
    if lessons:
        report.append(f"lessons you had run were replaced by the new version ({', '.join(p.name for p in lessons)}); "
                      "run them again")
    return report
