"""Authoring tools: everything generated in the repo comes from one source through this module.

* ``exercises/NN_*.ipynb`` are generated from ``solutions/NN_*.ipynb``: each region between
  ``# BEGIN SOLUTION`` and ``# END SOLUTION`` (any number of ``#``) becomes one
  ``raise NotImplementedError("hint")`` line at the marker's indentation; the hint is the text
  after the BEGIN marker (``# BEGIN SOLUTION hint: ...``). Cells tagged ``solution-only`` are
  dropped; outputs and execution counts are cleared.
* Navigation is generated from the course map (:mod:`ampcourse.course`): the table of contents in
  the cell tagged ``toc`` of ``00_start_here`` and the footer in the cell tagged ``nav`` of every
  lesson.
* Every notebook written here has clean metadata (kernelspec and language name only; cell
  metadata reduced to tags).

``python -m ampcourse build`` writes all of it; ``python -m ampcourse build --check`` lists what is
stale and exits 1 (a test runs the same check). ``python -m ampcourse execute FILE...`` runs
notebooks and stores their outputs (lessons and solutions keep outputs; nbval compares them).
"""

from __future__ import annotations

import re
from pathlib import Path

import nbformat

from .course import LESSONS, ROOT, Lesson, published

KERNELSPEC = {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"}
BEGIN = re.compile(r"^(?P<indent>[ \t]*)#+\s*BEGIN SOLUTION\b\s*(?:hint:)?\s*(?P<hint>.*)$")
END = re.compile(r"^[ \t]*#+\s*END SOLUTION\b")
DEFAULT_HINT = "write your code here"


class AuthoringError(ValueError):
    """A notebook breaks an authoring rule (unbalanced markers, a missing tagged cell...)."""


# --- reading, writing, clean metadata ---------------------------------------------------------

def read(path: Path) -> nbformat.NotebookNode:
    return nbformat.read(str(path), as_version=4)


def dumps(nb: nbformat.NotebookNode) -> str:
    """The notebook as the repo stores it (stable key order, trailing newline)."""
    text = nbformat.writes(nb)
    return text if text.endswith("\n") else text + "\n"


def clean_metadata(nb: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """Keep only what a notebook needs: kernelspec + language name; cell tags."""
    nb.metadata = nbformat.NotebookNode(
        kernelspec=dict(KERNELSPEC), language_info={"name": "python"}
    )
    for cell in nb.cells:
        tags = cell.metadata.get("tags", [])
        cell.metadata = nbformat.NotebookNode({"tags": tags} if tags else {})
        for output in cell.get("outputs", []):
            if "metadata" in output and output.metadata:
                output.metadata = {k: v for k, v in output.metadata.items() if k != "execution"}
    return nb


def tags(cell) -> list[str]:
    return list(cell.get("metadata", {}).get("tags", []))


# --- exercises from solutions ------------------------------------------------------------------

def strip_solutions(source: str, where: str = "cell") -> str:
    """Replace each marked solution region in ``source`` by a ``NotImplementedError`` stub.

    >>> print(strip_solutions("def f(x):\\n    # BEGIN SOLUTION hint: double it\\n"
    ...                       "    return 2 * x\\n    # END SOLUTION"))
    def f(x):
        raise NotImplementedError("double it")
    """
    out: list[str] = []
    inside = False
    for line in source.splitlines():
        begin = BEGIN.match(line)
        if begin:
            if inside:
                raise AuthoringError(f"{where}: BEGIN SOLUTION inside another solution region")
            inside = True
            hint = begin.group("hint").strip() or DEFAULT_HINT
            out.append(f"{begin.group('indent')}raise NotImplementedError({hint!r})")
        elif END.match(line):
            if not inside:
                raise AuthoringError(f"{where}: END SOLUTION without BEGIN SOLUTION")
            inside = False
        elif not inside:
            out.append(line)
    if inside:
        raise AuthoringError(f"{where}: BEGIN SOLUTION without END SOLUTION")
    # NotImplementedError("...") with double quotes reads better in a notebook.
    return "\n".join(re.sub(r"NotImplementedError\('([^'\"]*)'\)", r'NotImplementedError("\1")', x)
                     for x in out)


def make_exercise(solution: nbformat.NotebookNode, name: str = "notebook") -> nbformat.NotebookNode:
    """The learner's copy of a solution notebook."""
    nb = nbformat.from_dict(solution)  # a deep copy
    cells = []
    n_regions = 0
    for index, cell in enumerate(nb.cells):
        if "solution-only" in tags(cell):
            continue
        if cell.cell_type == "code":
            before = cell.source
            cell.source = strip_solutions(before, where=f"{name} cell {index}")
            n_regions += before.count("BEGIN SOLUTION")
            cell.outputs = []
            cell.execution_count = None
        cells.append(cell)
    if n_regions == 0:
        raise AuthoringError(f"{name}: no '# BEGIN SOLUTION' region, so the exercise has nothing to do")
    if not any("check" in tags(cell) for cell in cells):
        raise AuthoringError(f"{name}: no code cell tagged 'check', so nothing would be graded")
    nb.cells = cells
    return clean_metadata(nb)


# --- navigation ---------------------------------------------------------------------------------

def _link(item: Lesson, text: str, folder: str, here: str = "notebooks") -> str:
    prefix = "" if folder == here else f"../{folder}/"
    return f"[{text}]({prefix}{item.filename})"


def toc_markdown(root: Path = ROOT) -> str:
    """The table of contents shown in ``00_start_here``."""
    live = {item.number for item in published(root)}
    rows = [
        "## The lessons",
        "",
        "| # | Lesson | Exercise | You leave knowing |",
        "|---|---|---|---|",
    ]
    for item in LESSONS:
        if item.number in live:
            title = _link(item, item.title, "notebooks")
            exercise = (_link(item, "exercise", "exercises")
                        if item.exercise_path(root).exists() else "—")
        else:
            title, exercise = f"{item.title} *(coming soon)*", "—"
        rows.append(f"| {item.number} | {title} | {exercise} | {item.outcome} |")
    rows += ["", "*Generated from `ampcourse/course.py` by `python -m ampcourse build`.*"]
    return "\n".join(rows)


def nav_markdown(item: Lesson, root: Path = ROOT) -> str:
    """The footer of a lesson: previous, the exercise, next."""
    index = LESSONS.index(item)
    live = {x.number for x in published(root)}
    parts = []
    if index > 0:
        prev = LESSONS[index - 1]
        parts.append("← " + _link(prev, f"{prev.number} {prev.title}", "notebooks"))
    if item.exercise_path(root).exists():
        parts.append(_link(item, f"Exercise {item.number}", "exercises"))
    if index + 1 < len(LESSONS):
        nxt = LESSONS[index + 1]
        if nxt.number in live:
            parts.append(_link(nxt, f"{nxt.number} {nxt.title}", "notebooks") + " →")
        else:
            parts.append(f"next: {nxt.number} {nxt.title} *(coming soon)*")
    return "---\n" + " · ".join(parts)


def _set_tagged_markdown(nb, tag: str, text: str, name: str, append: bool) -> None:
    cells = [cell for cell in nb.cells if tag in tags(cell)]
    if len(cells) > 1:
        raise AuthoringError(f"{name}: {len(cells)} cells tagged {tag!r}; there must be one")
    if cells:
        cells[0].source = text
    elif append:
        nb.cells.append(nbformat.v4.new_markdown_cell(text, metadata={"tags": [tag]}))
    else:
        raise AuthoringError(f"{name}: no markdown cell tagged {tag!r}")


def with_navigation(nb: nbformat.NotebookNode, item: Lesson, root: Path = ROOT):
    """A lesson notebook with its generated cells brought up to date."""
    nb = nbformat.from_dict(nb)
    name = item.filename
    if item.number == "00":
        _set_tagged_markdown(nb, "toc", toc_markdown(root), name, append=False)
    _set_tagged_markdown(nb, "nav", nav_markdown(item, root), name, append=True)
    return clean_metadata(nb)


# --- the whole build -----------------------------------------------------------------------------

def generated_files(root: Path = ROOT) -> dict[Path, str]:
    """Every generated file and the text it should have."""
    files: dict[Path, str] = {}
    for item in published(root):
        path = item.lesson_path(root)
        files[path] = dumps(with_navigation(read(path), item, root))
    for item in LESSONS:
        solution = item.solution_path(root)
        if solution.exists():
            files[solution] = dumps(clean_metadata(read(solution)))
            files[item.exercise_path(root)] = dumps(make_exercise(read(solution), solution.name))
    return files


def stale_files(root: Path = ROOT) -> list[Path]:
    """Generated files whose content differs from what ``build`` would write."""
    stale = []
    for path, text in generated_files(root).items():
        if not path.exists() or path.read_text(encoding="utf-8") != text:
            stale.append(path)
    orphans = {p.name for p in (root / "exercises").glob("*.ipynb")} - {
        p.name for p in (root / "solutions").glob("*.ipynb")}
    stale += [root / "exercises" / name for name in sorted(orphans)]
    return stale


def build(root: Path = ROOT) -> list[Path]:
    """Write every generated file; return the ones that changed."""
    changed = []
    for path, text in generated_files(root).items():
        if not path.exists() or path.read_text(encoding="utf-8") != text:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
            changed.append(path)
    return changed


def execute(path: Path, timeout: int = 600) -> None:
    """Run a notebook top to bottom in its folder and store its outputs (clean metadata)."""
    from nbclient import NotebookClient

    nb = read(path)
    NotebookClient(nb, timeout=timeout, kernel_name="python3",
                   resources={"metadata": {"path": str(path.parent)}}).execute()
    path.write_text(dumps(clean_metadata(nb)), encoding="utf-8")
