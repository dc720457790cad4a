"""Grading rules for ``pytest --nbval exercises/``.

An exercise passes when every cell runs without an error — the check cells raise when an answer is
wrong. Stored outputs are never compared here: your saved notebook has your own outputs (plots,
timings), and they are not what is graded. Grading reads the saved notebooks: save first (Ctrl+S).

* A cell gets ``EXERCISE_CELL_TIMEOUT`` seconds unless ``--nbval-cell-timeout`` is given: a loop that
  never ends fails its cell instead of hanging the run (nbval's own default is 2000 s per cell).
* ``# NBVAL_SKIP`` / ``# NBVAL_RAISES_EXCEPTION`` (or the matching tags) in a check cell are ignored:
  a check always runs and must pass.
* A task whose check cell was deleted, emptied, edited or marked to be skipped gets a failing test of its
  own that names the task and how to restore the cell (:mod:`ampcourse.pytest_plugin`). (``python -m
  ampcourse grade`` goes further: it runs the original checks from ``solutions/`` in their place.)
"""

from pathlib import Path

from ampcourse.pytest_plugin import pytest_collect_file  # noqa: F401 - a hook: the check cells each task must keep

HERE = Path(__file__).resolve().parent
EXERCISE_CELL_TIMEOUT = 180  # seconds; the same default as ampcourse.grading.DEFAULT_TIMEOUT
NBVAL_DEFAULT_TIMEOUT = 2000


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
        for base in (Path(str(config.rootpath)), HERE.parent):
            if (base / given).is_file():
                config.option.nbval_sanitize_with = str(base / given)
                return


def _guard(item, call: str):
    """Run a grader guard call in nbval's kernel (as ``user_expressions``: no input transformer sees it; see
    ``ampcourse.grading.guard_expression``); its value, or None when it could not run."""
    from ampcourse.grading import guard_expression, guard_value, new_nonce

    kernel = item.parent.kernel
    nonce = new_nonce()
    msg_id = kernel.kc.execute("", silent=True, store_history=False,
                               user_expressions={"g": guard_expression(call, nonce)}, stop_on_error=False)
    while True:
        msg = kernel.get_message(stream="shell", timeout=60)
        if msg["parent_header"].get("msg_id") == msg_id:
            return guard_value(msg["content"].get("user_expressions", {}).get("g", {}), nonce)


def _with_guard(item, runtest, modules, first):
    """Before the notebook's first cell, remember the grader's state; before each check cell, undo what answer
    cells did to it (a patched check module, a rebound ``check``, an input transformer: see
    ``ampcourse.grading.guard_reset``, sent as source) and say so, so a forged pass does not count quietly."""
    def run():
        if first:
            _guard(item, "__import__('ampcourse.checks') and None")
            _guard(item, f"guard_install(shell, {modules!r})")
        elif "check" in item.cell.metadata.get("tags", []):
            undone = _guard(item, "guard_reset(shell)")
            if undone is None or undone:
                import warnings

                what = ", ".join(undone) if undone else "its state (the grader could not check it)"
                warnings.warn(f"{item.name}: a cell before this check changed the grader ({what}); it was undone "
                              "before the check, so only the real check counts", stacklevel=1)
        return runtest()
    return run


def pytest_collection_modifyitems(config, items):
    _sanitize_file_from_anywhere(config)
    from ampcourse.grading import _guard_modules, exercise_template
    from ampcourse.pytest_plugin import is_exercise

    guarded: dict = {}
    for item in items:
        if hasattr(item, "options") and HERE in Path(str(item.fspath)).resolve().parents:
            path = Path(str(item.fspath))
            if path not in guarded:
                try:
                    template = exercise_template(path) if is_exercise(path) else None
                except Exception:  # noqa: BLE001 - an unreadable solution: no guard, nbval still runs
                    template = None
                guarded[path] = _guard_modules(template) if template is not None else {}
                if guarded[path]:
                    item.runtest = _with_guard(item, item.runtest, guarded[path], first=True)
            elif guarded[path]:
                item.runtest = _with_guard(item, item.runtest, guarded[path], first=False)
    for item in items:
        if hasattr(item, "options") and HERE in Path(str(item.fspath)).resolve().parents:
            item.options["check"] = False
            item.cell.outputs = []  # a cell saved while running (outputs, no count) is not an error here
            if "check" in item.cell.metadata.get("tags", []):
                item.options["skip"] = False
                item.options["check_exception"] = False
            item.runtest = _with_timeout(item, item.runtest)
