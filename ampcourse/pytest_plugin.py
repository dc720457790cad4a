"""``pytest --nbval exercises/``: the exercise rules, and a task whose check cell is gone or silenced fails.

nbval runs the cells a notebook holds. A learner who deletes or empties a check cell, edits it, or marks
it ``# NBVAL_SKIP`` / ``# NBVAL_RAISES_EXCEPTION`` (or with a matching tag) would otherwise see that task
"pass". For each exercise notebook nbval collects, this plugin adds one failing test per such task,
naming the task and how to put the check back. What counts as intact is decided by
:func:`ampcourse.grading.check_cell_problems`, the rule ``python -m ampcourse grade`` uses as well.

For every notebook in a folder named ``exercises`` (:func:`in_exercises`) it also applies the exercise rules:
stored outputs are not compared; a cell gets :data:`EXERCISE_CELL_TIMEOUT` seconds unless
``--nbval-cell-timeout`` is given; ``NBVAL_SKIP``/``NBVAL_RAISES_EXCEPTION`` in a check cell are ignored; the
grader's state is guarded around each check (see ``ampcourse.grading``: a forgery made before the check is undone
and named; the guard unable to answer, a trace or audit hook, or a thread running the answers' own code fails the
check as "cannot be graded"; a change while the check ran fails it as altered; a check cell passes only with an "ok"
reply and its check's own ✓ line; a thread running library code only earns a warning); a kernel that dies fails its
cell at once, named, instead of waiting out the timeout (:data:`KERNEL_POLL` seconds between looks); a file that
is not a notebook (a JSON list saved as ``.ipynb``) is one failing test that says so; and a run that deselected a
check (``-k``, ``-m``, ``--deselect``) ends as failed with "not graded".

Where it is loaded: pyproject's ``pytest11`` entry point (``ampcourse = "ampcourse.pytest_plugin"``), so it holds
in the course's environment whatever the folder, with ``--noconftest`` or with ``exercises/conftest.py`` deleted or
emptied; and ``exercises/conftest.py`` registers it too where the entry point is not installed (once: never
twice). Lessons, solutions and any other notebook are left alone, and an intact exercise gets no extra test.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from queue import Empty

import pytest

from .course import ROOT

EXERCISE_CELL_TIMEOUT = 180  # seconds; the same default as ampcourse.grading.DEFAULT_TIMEOUT
NBVAL_DEFAULT_TIMEOUT = 2000
KERNEL_POLL = 1.0  # seconds: how often a wait for the kernel looks whether its process is still alive


def is_exercise(path: Path, root: Path = ROOT) -> bool:
    """Whether ``path`` is a course exercise: ``exercises/NN_topic.ipynb`` with a solution in ``root/solutions``."""
    path = Path(path)
    return path.suffix == ".ipynb" and path.parent.name == "exercises" and (root / "solutions" / path.name).exists()


class CheckCellMissing(Exception):
    """A task's check cell is not the one the course made (the message says which task and how to restore it)."""


class CheckCellItem(pytest.Item):
    """One failing test: a task whose check cell was deleted, emptied, edited or marked to be skipped."""

    def __init__(self, *, message: str, **kwargs):
        super().__init__(**kwargs)
        self.message = message

    def runtest(self) -> None:
        raise CheckCellMissing(self.message)

    def repr_failure(self, excinfo, style=None) -> str:
        if isinstance(excinfo.value, CheckCellMissing):
            return f"✗ {self.message}"
        return super().repr_failure(excinfo, style)

    def reportinfo(self):
        return self.path, None, self.name


class ExerciseCheckCells(pytest.File):
    """Collects a :class:`CheckCellItem` for each task of an exercise whose check cell is not intact."""

    def collect(self):
        from .authoring import read
        from .grading import check_cell_problems, exercise_template

        try:
            learner = read(self.path)
            template = exercise_template(self.path)
        except Exception:  # noqa: BLE001 - an unreadable notebook: nbval's own item reports it
            return
        if template is None:
            return
        for problem in check_cell_problems(learner, template):
            yield CheckCellItem.from_parent(self, name=f"check cell of {problem.task}", message=problem.message())


class NotANotebook(Exception):
    """A file in exercises/ named ``.ipynb`` that nbformat cannot read (the message says why and what to do)."""


class NotANotebookItem(pytest.Item):
    """One failing test in place of nbval's raw collection error for a file that is not a notebook."""

    def __init__(self, *, message: str, **kwargs):
        super().__init__(**kwargs)
        self.message = message

    def runtest(self) -> None:
        raise NotANotebook(self.message)

    def repr_failure(self, excinfo, style=None) -> str:
        if isinstance(excinfo.value, NotANotebook):
            return f"✗ {self.message}"
        return super().repr_failure(excinfo, style)

    def reportinfo(self):
        return self.path, None, self.name


class UnreadableNotebook(pytest.File):
    """Stands for a ``.ipynb`` in exercises/ that nbformat cannot read: collects one :class:`NotANotebookItem`."""

    message = ""

    def collect(self):
        yield NotANotebookItem.from_parent(self, name="not a notebook", message=self.message)


def _unreadable_message(path: Path) -> str | None:
    """Why ``path`` cannot be read as a notebook (grade's wording), or None when it can."""
    from .authoring import read
    from .grading import _unreadable

    try:
        nb = read(path)
        if not isinstance(nb.get("cells"), list):
            raise ValueError("no list of cells")
    except Exception as err:  # noqa: BLE001 - whatever nbformat raises (AttributeError for a JSON list ...)
        return _unreadable(path, err)
    return None


@pytest.hookimpl(wrapper=True)
def pytest_collect_file(file_path: Path, parent):
    """When nbval runs: next to nbval's cells of an exercise, the check-cell items; in place of nbval's file for a
    ``.ipynb`` in exercises/ that is not a notebook (nbval's own collection would end in a raw traceback), one
    failing test that says what is wrong."""
    collected = yield
    option = parent.config.option
    if not (getattr(option, "nbval", False) or getattr(option, "nbval_lax", False)) or not in_exercises(file_path):
        return collected
    message = _unreadable_message(Path(file_path))
    if message is not None:
        node = UnreadableNotebook.from_parent(parent, path=file_path)
        node.message = message
        return [c for c in collected if not _is_nbval_file(c)] + [node]
    if is_exercise(file_path):
        collected.append(ExerciseCheckCells.from_parent(parent, path=file_path))
    return collected


def _is_nbval_file(node) -> bool:
    return type(node).__module__.startswith("nbval")


class KernelDied(RuntimeError):
    """The notebook's kernel process stopped while a cell ran."""


KERNEL_DIED = ("the kernel died while this cell ran (its Python process stopped: a crash such as a segfault, "
               "os._exit(), running out of memory, or it was killed), so the cells after it cannot run. Fix this "
               "cell, then run the notebook again")


def _watch_kernel(kernel) -> None:
    """Make every wait of nbval for ``kernel``'s messages look every :data:`KERNEL_POLL` seconds whether the kernel
    is still alive (nbval itself waits the whole cell timeout for a dead one: 180 s); a dead one raises
    :class:`KernelDied`."""
    if kernel is None or getattr(kernel, "_ampcourse_watched", False):
        return
    original = kernel.get_message

    def get_message(stream, timeout=None):
        deadline = None if timeout is None else time.monotonic() + float(timeout)
        while True:
            wait = KERNEL_POLL if deadline is None else max(0.0, min(KERNEL_POLL, deadline - time.monotonic()))
            try:
                return original(stream, timeout=wait)
            except Empty:
                if not kernel.is_alive():
                    raise KernelDied(KERNEL_DIED) from None
                if deadline is not None and time.monotonic() >= deadline:
                    raise

    kernel.get_message = get_message
    kernel._ampcourse_watched = True


def _with_dead_kernel_named(item, runtest):
    def run():
        kernel = getattr(item.parent, "kernel", None)
        died = getattr(item.parent, "_ampcourse_died", None)
        if died is not None or (kernel is not None and not kernel.is_alive()):
            item.raise_cell_error(f"not run: the kernel died in an earlier cell{f' (cell {died})' if died else ''}, "
                                  "and nbval does not restart it. Fix that cell, then run the notebook again")
        _watch_kernel(kernel)
        try:
            return runtest()
        except KernelDied:
            item.parent._ampcourse_died = item.cell_num
            item.raise_cell_error(KERNEL_DIED)
    return run


def _with_timeout(item, runtest):
    def run():
        option = item.config.option
        if float(option.nbval_cell_timeout) != NBVAL_DEFAULT_TIMEOUT:
            return runtest()  # set on the command line: respect it
        option.nbval_cell_timeout = EXERCISE_CELL_TIMEOUT
        try:
            return runtest()
        finally:
            option.nbval_cell_timeout = NBVAL_DEFAULT_TIMEOUT
    return run


def _sanitize_file_from_anywhere(config) -> None:
    """pyproject's ``--nbval-sanitize-with=tests/nbval_sanitize.cfg`` is relative to the folder pytest started in:
    from ``exercises/`` (a terminal opened there) or with an absolute path from elsewhere, nbval could not find it
    and every cell errored. Resolve it against the course folder instead."""
    given = getattr(config.option, "nbval_sanitize_with", None)
    if given and not Path(given).is_absolute() and not Path(given).exists():
        for base in (Path(str(config.rootpath)), ROOT):
            if (base / given).is_file():
                config.option.nbval_sanitize_with = str(base / given)
                return


SUITE_KERNELS = "AMPCOURSE_KERNEL_ZYGOTE"  # set by the course's own test suite (tests/conftest.py) only


def _suite_kernels(config) -> None:
    """In the course's test suite, nbval's kernels are forked like its other kernels (``tests/kernel_zygote.py``).
    pyproject's ``--nbval-current-env`` makes nbval build ipykernel's kernelspec itself, which would bypass the
    ``python3`` kernelspec ``tests/conftest.py`` puts first on ``JUPYTER_PATH``; where that folder is set and on
    the path, nbval is asked for that kernel by name instead (the same interpreter and environment)."""
    folder = os.environ.get(SUITE_KERNELS, "")
    on_path = folder and folder in os.environ.get("JUPYTER_PATH", "").split(os.pathsep)
    if not (on_path and os.path.isfile(os.path.join(folder, "kernels", "python3", "kernel.json"))):
        return
    if getattr(config.option, "nbval_current_env", False) and not getattr(config.option, "nbval_kernel_name", None):
        config.option.nbval_current_env = False
        config.option.nbval_kernel_name = "python3"


def _guard(item, call: str):
    """Run a grader guard call in nbval's kernel (as ``user_expressions``: no input transformer sees it; see
    ``ampcourse.grading.guard_expression``); its value, or None when it could not run."""
    from .grading import guard_expression, guard_value, new_nonce

    kernel = item.parent.kernel
    nonce = new_nonce()
    msg_id = kernel.kc.execute("", silent=True, store_history=False,
                               user_expressions={"g": guard_expression(call, nonce)}, stop_on_error=False)
    while True:
        msg = kernel.get_message(stream="shell", timeout=60)
        if msg["parent_header"].get("msg_id") == msg_id:
            return guard_value(msg["content"].get("user_expressions", {}).get("g", {}), nonce)


def _with_guard(item, runtest, modules, first, checks=None):
    """Before the notebook's first cell, remember the grader's state; before each check cell, undo what answer
    cells did to it (a patched check module, a rebound ``check``, an input transformer, torch's core namespaces:
    see ``ampcourse.grading.guard_reset``, sent as source) and say so. The check counts only as
    ``ampcourse.grading.guard_verdict`` rules, the rule ``grade`` applies: the guard answered before and after
    it, no hook or thread running the answers' code was there, nothing changed while it ran; and, as
    ``ampcourse.grading.output_problem`` says, the kernel's reply was "ok", the cell printed the check's ✓
    line (an answer cell can hide an error from nbval, which reads only iopub, with ``set_custom_exc``) and the
    course's own check function recorded its pass (a check cell rewritten before it ran prints any line).
    ``checks``: ``{check cell source: task title}`` from the template."""
    def run():
        if first:
            _guard(item, "__import__('ampcourse.checks') and None")
            _guard(item, f"guard_install(shell, {modules!r})")
            return runtest()
        if "check" not in item.cell.metadata.get("tags", []):
            return runtest()
        import warnings

        from .grading import _reset_value, _verify_value, guard_verdict, output_problem

        undone, hazards = _reset_value(_guard(item, "guard_reset(shell)"))
        kernel = item.parent.kernel
        replies: list = []
        original = kernel.await_reply

        def await_reply(msg_id, timeout=None):  # nbval's own loop, keeping the reply (nbval drops it)
            while True:
                msg = kernel.get_message(stream="shell", timeout=timeout)
                if msg["parent_header"].get("msg_id") == msg_id:
                    replies.append(msg["content"])
                    if msg["content"]["status"] == "aborted":
                        raise RuntimeError("Kernel aborted execution request")
                    return

        kernel.await_reply = await_reply
        error = None
        try:
            result = runtest()
        except KernelDied:
            raise
        except (Exception, pytest.fail.Exception, pytest.skip.Exception) as err:  # still say if it was the real one
            error = err
        finally:
            kernel.await_reply = original
        changes, after_hazards, ran = _verify_value(_guard(item, "guard_verify(shell)"))
        reason, notes = guard_verdict(undone, hazards, changes, after_hazards)
        for note in notes:
            warnings.warn(f"{item.name}: {note.replace('counted', 'counts')}", stacklevel=1)
        if reason:
            item.raise_cell_error(f"✗ {reason}")
        if error is None:
            status = replies[-1].get("status", "") if replies else ""
            stdout = "".join(o.get("text", "") for o in getattr(item, "test_outputs", None) or []
                             if o.get("output_type") == "stream" and o.get("name") == "stdout")
            errors = [] if status == "ok" else [(replies[-1].get("ename", "") if replies else "",
                                                 replies[-1].get("evalue", "") if replies else "")]
            # The task as the course's template titles it (``grade`` does the same), never a heading of the
            # learner's own above the cell (review rev25-r3 N6). A check cell that is not the course's (emptied,
            # edited) is failed by its CheckCellItem already.
            task = (checks or {}).get(item.cell.source)
            problem = output_problem(task, "ok", stdout, errors, ran) if task is not None else None
            if problem:
                item.raise_cell_error(f"✗ {problem}")
        if error is not None:
            raise error
        return result
    return run


def in_exercises(path) -> bool:
    """Whether ``path`` is a notebook inside a folder named ``exercises``: a course exercise or the learner's own
    notebook there. nbval runs such a notebook under the exercise rules (see the module docstring)."""
    path = Path(str(path)).resolve()
    return path.suffix == ".ipynb" and any(parent.name == "exercises" for parent in path.parents)


@pytest.hookimpl(trylast=True)  # after -k/-m deselection: the first cell left is the one that runs first
def pytest_collection_modifyitems(config, items):
    _sanitize_file_from_anywhere(config)
    _suite_kernels(config)
    from .authoring import tags, task_title
    from .grading import _guard_modules, exercise_template

    guarded: dict = {}
    checks: dict = {}
    for item in items:
        if hasattr(item, "options") and in_exercises(item.fspath):
            path = Path(str(item.fspath))
            if path not in guarded:
                try:
                    template = exercise_template(path) if is_exercise(path) else None
                except Exception:  # noqa: BLE001 - an unreadable solution: no guard, nbval still runs
                    template = None
                guarded[path] = _guard_modules(template) if template is not None else {}
                checks[path] = {c.source: task_title(template.cells, i) for i, c in enumerate(template.cells)
                                if "check" in tags(c)} if template else {}
                if guarded[path]:
                    item.runtest = _with_guard(item, item.runtest, guarded[path], first=True, checks=checks[path])
            elif guarded[path]:
                item.runtest = _with_guard(item, item.runtest, guarded[path], first=False, checks=checks[path])
    for item in items:
        if hasattr(item, "options") and in_exercises(item.fspath):
            item.options["check"] = False
            item.cell.outputs = []  # a cell saved while running (outputs, no count) is not an error here
            if "check" in item.cell.metadata.get("tags", []):
                item.options["skip"] = False
                item.options["check_exception"] = False
            item.runtest = _with_dead_kernel_named(item, _with_timeout(item, item.runtest))


_DESELECTED = pytest.StashKey[list]()


def _is_check(item) -> bool:
    """A check of a course exercise: a check-cell item of this plugin, or nbval's cell tagged ``check``."""
    if isinstance(item, CheckCellItem):
        return True
    return (hasattr(item, "options") and "check" in item.cell.metadata.get("tags", [])
            and is_exercise(Path(str(item.fspath))))


def pytest_deselected(items):
    """Remember the checks of exercises that ``-k``/``-m``/``--deselect`` left out: that run graded nothing."""
    checks = [item for item in items if _is_check(item)]
    if checks:
        checks[0].config.stash.setdefault(_DESELECTED, []).extend(checks)


def _not_graded(config) -> list[str]:
    deselected = config.stash.get(_DESELECTED, [])
    paths = sorted({Path(str(item.fspath)).name for item in deselected})
    return [f"✗ not graded: {name}: {sum(Path(str(i.fspath)).name == name for i in deselected)} check(s) were "
            "deselected (-k, -m or --deselect), so this run cannot say the tasks pass. Run it without them to "
            "grade the exercise" for name in paths]


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    lines = _not_graded(config)
    if lines:
        terminalreporter.section("not graded")
        for line in lines:
            terminalreporter.write_line(line)


def pytest_sessionfinish(session, exitstatus):
    if _not_graded(session.config) and exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
