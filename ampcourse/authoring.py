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

A learner's answers live in ``exercises/`` too, so no command here ever discards them: ``build``
merges each exercise task by task (new template, the learner's answer cells and added cells kept;
see :func:`merge_exercise`), copies every exercise it rewrites to ``exercises/.backup/<time>/``
first, and leaves an unreadable exercise alone. Staleness ignores answers, outputs and metadata.
"""

from __future__ import annotations

import copy
import os
import re
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import nbformat
from nbformat.corpus.words import generate_corpus_id

from . import lesson_map
from .course import LESSONS, ROOT, Lesson, published

KERNELSPEC = {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"}
# What ipykernel reports (``IPythonKernel.language_info``) and JupyterLab writes into a notebook when its
# kernel starts: stored whole, a lesson opens unmodified (JupyterLab compares the two before marking the
# notebook dirty). ``version`` is the Python the course is built and tested with; on another Python a
# notebook still opens "modified" (saving it is harmless). tests/test_authoring.py keeps this in step with
# ipykernel.
PYTHON_VERSION = "3.11.7"
LANGUAGE_INFO = {
    "codemirror_mode": {"name": "ipython", "version": 3}, "file_extension": ".py", "mimetype": "text/x-python",
    "name": "python", "nbconvert_exporter": "python", "pygments_lexer": "ipython3", "version": PYTHON_VERSION,
}
BEGIN = re.compile(r"^(?P<indent>[ \t]*)#+\s*BEGIN SOLUTION\b\s*(?:hint:)?\s*(?P<hint>.*)$")
END = re.compile(r"^[ \t]*#+\s*END SOLUTION\b")
DEFAULT_HINT = "write your code here"


class AuthoringError(ValueError):
    """A notebook breaks an authoring rule (unbalanced markers, a missing tagged cell...)."""


# --- reading, writing, clean metadata ---------------------------------------------------------

def read(path: Path) -> nbformat.NotebookNode:
    """The notebook at ``path``; duplicate cell ids (a copied cell, a hand edit) are repaired without a warning."""
    import warnings

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Non-unique cell id")
        return nbformat.read(str(path), as_version=4)


def dumps(nb: nbformat.NotebookNode) -> str:
    """The notebook as the repo stores it (stable key order, trailing newline)."""
    text = nbformat.writes(nb)
    return text if text.endswith("\n") else text + "\n"


def clean_metadata(nb: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """Keep only what a notebook needs: kernelspec + language name; cell tags."""
    nb.metadata = nbformat.NotebookNode(
        kernelspec=dict(KERNELSPEC), language_info=copy.deepcopy(LANGUAGE_INFO)
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
            # An exercise exists when its solution does (build generates one from the other): reading the
            # exercises folder made a build after a deleted exercise write a map without it.
            exercise = (_link(item, "exercise", "exercises")
                        if item.solution_path(root).exists() else "—")
        else:
            title, exercise = f"{item.title} *(coming soon)*", "—"
        rows.append(f"| {item.number} | {title} | {exercise} | {item.outcome} |")
    # For authors only: an HTML comment, which JupyterLab does not show to the learner.
    rows += ["", "<!-- generated from ampcourse/course.py by python -m ampcourse build -->"]
    return "\n".join(rows)


def nav_markdown(item: Lesson, root: Path = ROOT) -> str:
    """The footer of a lesson: previous, the exercise, next."""
    index = LESSONS.index(item)
    live = {x.number for x in published(root)}
    parts = []
    if index > 0:
        prev = LESSONS[index - 1]
        parts.append("← " + _link(prev, f"{prev.number} {prev.title}", "notebooks"))
    if item.solution_path(root).exists():  # the exercise is generated from it
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


# --- merging a learner's exercise with a new template ------------------------------------------

_STUB_LINE = re.compile(r"^[ \t]*raise NotImplementedError\(.*\)[ \t]*$", re.M)


def _without_stubs(source: str) -> str:
    return _STUB_LINE.sub("", source).strip()


def answer_cells(template: nbformat.NotebookNode) -> set[int]:
    """Indexes of the template's answer cells (code cells holding a ``NotImplementedError`` stub)."""
    return {i for i, cell in enumerate(template.cells)
            if cell.cell_type == "code" and "check" not in tags(cell) and _STUB_LINE.search(cell.source)}


def task_title(cells, index: int) -> str:
    """The heading of the task that cell ``index`` belongs to (the last ``## ...`` above it)."""
    for cell in reversed(cells[: index + 1]):
        if cell.cell_type == "markdown":
            for line in cell.source.splitlines():
                if line.startswith("## "):
                    return line[3:].strip()
    return "the introduction"


def _bound(source: str) -> tuple[set[str], set[str]]:
    """The top-level names a code cell defines: ``(functions and classes, assigned names)``."""
    import ast

    defs: set[str] = set()
    assigned: set[str] = set()
    try:
        tree = ast.parse(source)
    except SyntaxError:  # IPython syntax (magics) or a half-typed answer: read the defining lines
        defs = set(re.findall(r"^(?:async\s+)?(?:def|class)\s+(\w+)", source, flags=re.M))
        return defs, set(re.findall(r"^(\w+)\s*(?::[^=]*)?=(?!=)", source, flags=re.M))
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            defs.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            for target in (node.targets if isinstance(node, ast.Assign) else [node.target]):
                assigned |= {n.id for n in ast.walk(target) if isinstance(n, ast.Name)}
    return defs, assigned


def _answer_names(stub: str) -> set[str]:
    """What a task's answer cell must define: the functions/classes its stub defines (else its assignments)."""
    defs, assigned = _bound(stub)
    return defs or assigned


@dataclass
class Merge:
    """The result of :func:`merge_exercise`."""

    notebook: nbformat.NotebookNode
    kept_answers: list[str] = field(default_factory=list)   # tasks whose answer cell was kept
    kept_extra: int = 0                                       # the learner's own cells kept
    changed_tasks: list[str] = field(default_factory=list)  # tasks whose text or check changed
    set_aside: list[str] = field(default_factory=list)      # tasks where the learner edited a given cell
    changed_stubs: list[str] = field(default_factory=list)  # answered tasks whose stub (signature) changed

    @property
    def learner_work(self) -> bool:
        return bool(self.kept_answers or self.kept_extra)


def _signature(nb) -> list[tuple[str, str, tuple[str, ...]]]:
    return [(c.cell_type, c.source, tuple(tags(c))) for c in nb.cells]


def _keep(mine, new):
    """The learner's cell (source, outputs, metadata) with the template's tags and id."""
    kept = nbformat.from_dict(mine)
    if tags(kept) != tags(new):
        kept.metadata = nbformat.NotebookNode({k: v for k, v in kept.metadata.items() if k != "tags"})
        if tags(new):
            kept.metadata["tags"] = tags(new)
    if new.get("id"):
        kept["id"] = new["id"]
    return kept


def match_cells(learner, template, skip=lambda cell: False) -> dict[int, int]:
    """``{template cell index: learner cell index}``: which learner cell holds each template cell.

    1. by cell id, where the id is unique in the learner's notebook and the cell kind is the same
       (JupyterLab keeps ids; a notebook saved without ids, with regenerated or duplicated ids falls through);
    2. by identical source (untouched task text, given code, checks, stubs);
    3. a task's answer cell that is still unmatched takes the learner's code cell *in the same slot* (between
       the learner's copies of the template cells around it) that defines the function the stub defines: the
       last such cell, as it is the one that runs last. So an answer retyped into a new cell, or saved with
       other ids, is the answer, and the stub is never put back after it.

    ``skip(cell)``: learner cells never matched in step 3 (cells of an old template the new one dropped).
    """
    from collections import Counter

    cells = learner.cells
    ids = Counter(c.get("id") for c in cells if c.get("id"))
    by_id = {c.get("id"): i for i, c in enumerate(template.cells) if c.get("id")}
    matched: dict[int, int] = {}
    taken: set[int] = set()
    for j, cell in enumerate(cells):
        i = by_id.get(cell.get("id"))
        if (i is not None and ids[cell.get("id")] == 1 and i not in matched
                and template.cells[i].cell_type == cell.cell_type):
            matched[i] = j
            taken.add(j)
    for i, new in enumerate(template.cells):
        if i in matched:
            continue
        j = next((j for j, c in enumerate(cells) if j not in taken and c.cell_type == new.cell_type
                  and c.source == new.source), None)
        if j is not None:
            matched[i] = j
            taken.add(j)
    for i in sorted(answer_cells(template)):
        if i in matched:
            continue
        lo = max((j for k, j in matched.items() if k < i), default=-1)
        hi = min((j for k, j in matched.items() if k > i), default=len(cells))
        want = _answer_names(template.cells[i].source)
        slot = [j for j in range(lo + 1, hi) if j not in taken and cells[j].cell_type == "code"
                and cells[j].source.strip() and not skip(cells[j])]
        defining = [j for j in slot if want & set().union(*_bound(cells[j].source))]
        if defining:
            matched[i] = defining[-1]
            taken.add(defining[-1])
    return matched


def merge_exercise(learner: nbformat.NotebookNode, template: nbformat.NotebookNode,
                   old_template: nbformat.NotebookNode | None = None) -> Merge:
    """The exercise ``template`` with the learner's work from ``learner`` put back, task by task.

    Learner cells are matched to template cells by :func:`match_cells` (id, else identical source, else an
    answer by the slot it is in and the function it defines). An answer cell the learner changed is kept
    (with its outputs); an untouched stub (the new one, or the old template's) takes the template's new stub.
    Every other template cell (task text, given code, checks, navigation) comes from the template, so a
    deleted or edited check is restored; a given code cell or task text the learner edited is kept as a copy
    below the course's cell (``set_aside``). Cells the learner added (scratch work, notes) are kept after the
    cell they followed. A learner cell equal to a cell of ``old_template`` that the new template dropped is
    left out; nothing else is ever dropped. Missing or duplicated cell ids are repaired.
    """
    answers = answer_cells(template)
    old_sources = ({c.source for c in old_template.cells} if old_template is not None else set())
    old_by_id = ({c.get("id"): c for c in old_template.cells if c.get("id")} if old_template is not None else {})

    def dropped(cell) -> bool:  # a cell of the old template that the new one dropped
        return bool(cell.source in old_sources and cell.source.strip() and (
            cell.cell_type == "markdown" or "check" in tags(cell) or _STUB_LINE.search(cell.source)))

    pairs = match_cells(learner, template, dropped)
    matched = {i: learner.cells[j] for i, j in pairs.items()}
    at = {j: i for i, j in pairs.items()}
    extras: dict[int, list] = {}  # template index (-1: before the first) -> learner cells after it
    anchor = -1
    for j, cell in enumerate(learner.cells):
        if j in at:
            anchor = at[j]
            continue
        if not cell.source.strip() and not cell.get("outputs"):
            continue  # an empty cell holds no work
        if cell.source not in {t.source for t in template.cells} and dropped(cell):
            continue
        if any(cell.source == t.source and cell.cell_type == t.cell_type for t in template.cells) and (
                cell.cell_type == "markdown" or "check" in tags(cell) or _STUB_LINE.search(cell.source)):
            continue  # a second copy of a template cell (a duplicated check or stub): the template has it
        extras.setdefault(anchor, []).append(cell)
    result = Merge(nbformat.from_dict(template))
    cells = list(extras.get(-1, []))
    for index, new in enumerate(template.cells):
        mine = matched.get(index)
        old = old_by_id.get(new.get("id"))
        if mine is None:
            if index not in answers:
                result.changed_tasks.append(task_title(template.cells, index))
            cells.append(new)
        elif index in answers and (_without_stubs(mine.source) == _without_stubs(new.source)
                                   or (old is not None and mine.source == old.source)):
            cells.append(new)  # an untouched stub (this one or the old template's): the new stub
        elif index in answers:
            cells.append(_keep(mine, new))
            result.kept_answers.append(task_title(template.cells, index))
            if old is not None and old.source != new.source:
                result.changed_stubs.append(task_title(template.cells, index))
        elif mine.source == new.source:
            cells.append(_keep(mine, new))  # unchanged: keep its outputs
        else:
            cells.append(new)
            upstream = old is not None and old.source != new.source
            if upstream or "check" in tags(new):
                result.changed_tasks.append(task_title(template.cells, index))
            if "check" not in tags(new) and mine.source not in old_sources:
                extras.setdefault(index, []).insert(0, mine)  # the learner edited it: keep their copy
                if not upstream:
                    result.set_aside.append(task_title(template.cells, index))
        cells.extend(extras.get(index, []))
    result.kept_extra = sum(len(v) for v in extras.values())
    for name in ("kept_answers", "changed_tasks", "set_aside", "changed_stubs"):
        setattr(result, name, list(dict.fromkeys(getattr(result, name))))
    has_outputs = any(c.get("outputs") for c in learner.cells if c.cell_type == "code")
    seen: set[str] = set()
    cells = [nbformat.from_dict(c) for c in cells]
    for cell in cells:  # a kept copy shares its template cell's id, a 4.4 notebook has none: repair
        if not cell.get("id") or cell.get("id") in seen:
            cell["id"] = generate_corpus_id()
        seen.add(cell.get("id"))
    result.notebook.cells = cells
    if result.learner_work or has_outputs:
        result.notebook.metadata = nbformat.from_dict(learner.metadata)
    return result


def _read_or_none(path: Path):
    try:
        return read(path)
    except Exception:  # noqa: BLE001 - a half-written or conflicted file is handled by the caller
        return None


def _committed(path: Path, root: Path) -> str | None:
    """The text of ``path`` in the last commit (``git show HEAD:path``), or None outside git."""
    try:
        run = subprocess.run(["git", "show", f"HEAD:{path.relative_to(root).as_posix()}"], cwd=root,
                             capture_output=True, text=True, timeout=30)
    except (OSError, ValueError, subprocess.SubprocessError):
        return None
    return run.stdout if run.returncode == 0 else None


def _committed_template(exercise: Path, root: Path):
    """The exercise as ``build`` made it from the last committed solution (``HEAD:solutions/NN_x.ipynb``), or
    None. Never the committed *exercise*: a learner who commits their work would make their own cells look
    like the old template's, and the merge drops those."""
    committed = _committed(root / "solutions" / exercise.name, root)
    if not committed:
        return None
    try:
        return make_exercise(nbformat.reads(committed, as_version=4), exercise.name)
    except Exception:  # noqa: BLE001 - an old solution that no longer builds: no old template
        return None


# --- the whole build -----------------------------------------------------------------------------

def templates(root: Path = ROOT) -> dict[Path, nbformat.NotebookNode]:
    """Every generated notebook as ``build`` makes it from the sources (exercises blank)."""
    files: dict[Path, nbformat.NotebookNode] = {}
    for item in published(root):
        path = item.lesson_path(root)
        files[path] = with_navigation(read(path), item, root)
    for item in LESSONS:
        solution = item.solution_path(root)
        if solution.exists():
            files[solution] = clean_metadata(read(solution))
            files[item.exercise_path(root)] = make_exercise(read(solution), solution.name)
    return files


def generated_files(root: Path = ROOT) -> dict[Path, str]:
    """Every generated file and the text it should have (exercises blank, as committed)."""
    return {path: dumps(nb) for path, nb in templates(root).items()}


def _template_in(template, notebook) -> bool:
    """Every template cell except the answers (task text, checks, navigation) is in ``notebook``, in order."""
    answers = answer_cells(template)
    want = [(c.cell_type, c.source, "check" in tags(c)) for i, c in enumerate(template.cells) if i not in answers]
    have = iter((c.cell_type, c.source, "check" in tags(c)) for c in notebook.cells)
    return all(any(cell == other for other in have) for cell in want)


def _is_exercise(path: Path, root: Path) -> bool:
    return path.parent == root / "exercises"


def stale_files(root: Path = ROOT) -> list[Path]:
    """Generated files whose template differs from what ``build`` would write.

    For an exercise the template is everything but the learner's work: the task text, checks and
    navigation must all be there, in order; answers, added cells, outputs and JupyterLab's metadata
    may differ (an exercise with no work in it must match exactly). For lessons and solutions: cell types, sources
    and tags (a learner's outputs and metadata from running a lesson are not staleness; the exact
    committed text is checked by tests/test_authoring.py).
    """
    stale = []
    for path, template in templates(root).items():
        current = _read_or_none(path) if path.exists() else None
        if current is None:
            stale.append(path)
        elif _is_exercise(path, root):
            merged = merge_exercise(current, template)
            if merged.learner_work or any(c.get("outputs") for c in current.cells if c.cell_type == "code"):
                if not _template_in(template, current):
                    stale.append(path)
            elif path.read_text(encoding="utf-8") != dumps(template):
                stale.append(path)
        elif _signature(current) != _signature(template):
            stale.append(path)
    # A notebook in exercises/ without a solution is the learner's own (JupyterLab's Untitled.ipynb, a scratch
    # copy): not generated, so never stale; see learner_notebooks.
    if lesson_map.is_stale(root):
        stale.append(root / lesson_map.TARGET)
    return stale


def learner_notebooks(root: Path = ROOT) -> list[Path]:
    """The notebooks in ``exercises/`` that are not course exercises (no solution of that name): the learner's own
    (JupyterLab's ``Untitled.ipynb``, a copy of an exercise). ``build``, ``grade`` and the tests leave them alone."""
    return [p for p in sorted((root / "exercises").glob("*.ipynb")) if not (root / "solutions" / p.name).exists()]


def course_exercises(root: Path = ROOT) -> list[Path]:
    """The course's exercise notebooks that exist in ``exercises/`` (those with a solution)."""
    return [p for p in sorted((root / "exercises").glob("*.ipynb")) if (root / "solutions" / p.name).exists()]


def backup(paths: list[Path], root: Path = ROOT) -> Path | None:
    """Copy ``paths`` to ``exercises/.backup/<time>/``, each under its path in the course (``exercises/NN_x.ipynb``
    and ``notebooks/NN_x.ipynb`` apart: they share a name); kept until you delete it. Returns the folder."""
    if not paths:
        return None
    folder = root / "exercises" / ".backup" / time.strftime("%Y%m%d-%H%M%S")
    n = 1
    while folder.exists():
        n += 1
        folder = folder.with_name(f"{folder.name.split('.')[0]}.{n}")
    folder.mkdir(parents=True)
    for path in paths:
        try:
            rel = path.resolve().relative_to(root.resolve())
        except ValueError:
            rel = Path(path.name)
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, folder / rel)
    return folder


@dataclass
class BuildReport:
    """What :func:`build` did."""

    changed: list[Path] = field(default_factory=list)
    backup: Path | None = None
    merges: dict[Path, Merge] = field(default_factory=dict)  # exercises that hold learner work
    unreadable: list[Path] = field(default_factory=list)      # exercises left alone (not JSON...)
    own: list[Path] = field(default_factory=list)             # the learner's own notebooks in exercises/

    def __iter__(self):  # ``for path in build()`` lists what changed
        return iter(self.changed)

    def lines(self, root: Path = ROOT) -> list[str]:
        out = [f"wrote {p.relative_to(root)}" for p in self.changed]
        for path, merge in self.merges.items():
            if merge.kept_answers or merge.kept_extra:
                out.append(f"  {path.relative_to(root)}: kept your answers ({', '.join(merge.kept_answers) or 'none'})"
                           + (f" and {merge.kept_extra} cell(s) you added" if merge.kept_extra else ""))
            for task in merge.changed_tasks:
                out.append(f"  {path.relative_to(root)}: the text or check of '{task}' changed: re-read it")
            for task in merge.changed_stubs:
                out.append(f"  {path.relative_to(root)}: the stub of '{task}' changed (a new signature?): compare "
                           "your answer with the solution's stub in the backup's template")
            for task in merge.set_aside:
                out.append(f"  {path.relative_to(root)}: your edit of a given cell in '{task}' was set aside: the "
                           "course's cell is back, your copy is kept right below it")
        for path in self.unreadable:
            out.append(f"left alone: {path.relative_to(root)} is not a readable notebook (a half-written save or "
                       "merge-conflict markers?); fix it or move it away, then build again")
        for path in self.own:
            out.append(f"left alone: {path.relative_to(root)} is your own notebook, not a course exercise")
        if self.backup is not None:
            out.append(f"your previous exercises are backed up in {self.backup.relative_to(root)}/")
        return out


def build(root: Path = ROOT, old_templates: dict[str, nbformat.NotebookNode] | None = None) -> BuildReport:
    """Write every generated file; never discard a learner's work.

    Exercises are merged task by task (:func:`merge_exercise`): answers and added cells are kept,
    the template is renewed. Before any exercise with work in it is rewritten, it is copied to
    ``exercises/.backup/<time>/``. An unreadable exercise is left alone and reported.
    ``old_templates`` (file name -> the exercise as previously generated) lets a course update drop
    cells of the old template that the new one no longer has.
    """
    report = BuildReport()
    writes: dict[Path, str] = {}
    for path, template in templates(root).items():
        text = dumps(template)
        if _is_exercise(path, root) and path.exists():
            current = _read_or_none(path)
            if current is None:
                report.unreadable.append(path)
                continue
            old = (old_templates or {}).get(path.name)
            if old is None and old_templates is None:
                old = _committed_template(path, root)
            merge = merge_exercise(current, template, old)
            if merge.learner_work or any(c.get("outputs") for c in current.cells if c.cell_type == "code"):
                report.merges[path] = merge
                text = dumps(merge.notebook)
        if not path.exists() or path.read_text(encoding="utf-8") != text:
            writes[path] = text
    report.own = learner_notebooks(root)
    report.backup = backup([p for p in writes if p in report.merges], root)
    for path, text in writes.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.tmp")
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, path)  # atomic: a crash never leaves a half-written notebook
        report.changed.append(path)
    report.merges = {p: m for p, m in report.merges.items() if p in writes}
    if lesson_map.write(root):
        report.changed.append(root / lesson_map.TARGET)
    return report


def execute(path: Path, timeout: int = 600) -> None:
    """Run a notebook top to bottom in its folder and store its outputs (clean metadata)."""
    from nbclient import NotebookClient

    if not isinstance(path, Path):
        raise TypeError(f"path must be a pathlib.Path, got {type(path).__name__}")
    if path.suffix != ".ipynb" or not path.is_file():
        raise ValueError(f"path: no notebook {path} (give a path like notebooks/00_start_here.ipynb)")
    nb = read(path)
    NotebookClient(nb, timeout=timeout, kernel_name="python3",
                   resources={"metadata": {"path": str(path.parent)}}).execute()
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(dumps(clean_metadata(nb)), encoding="utf-8")
    os.replace(tmp, path)
