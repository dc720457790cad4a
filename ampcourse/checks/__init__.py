"""The autograder: one module per lesson (``ampcourse.checks.lessonNN``), shared tools here.

A check cell in an exercise notebook reads like this::

    from ampcourse.checks import lesson00 as check
    check.tensor_bytes(tensor_bytes)

A check runs the learner's code (on the course device, see :mod:`ampcourse.device`), compares what
it *does* with what it should do, and either prints one line saying what it verified, or raises
:class:`CheckFailed` whose message names the mistake it saw and the fix. A stub that still raises
``NotImplementedError`` gives :class:`NotStarted`. Anything else the learner's code raises is
turned into a :class:`CheckFailed` too, so a check never ends in an internal traceback.

Inside IPython/Jupyter, importing this package installs a display hook for these two exceptions:
the cell shows the message alone, without a traceback through the grader's code. The cell still
counts as failed, so ``pytest --nbval`` reports it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

PASS_MARK = "✓"
FAIL_MARK = "✗"


class CheckFailed(AssertionError):
    """A check saw a mistake. The message says which one and how to fix it."""


class NotStarted(CheckFailed):
    """The task's code still raises the ``NotImplementedError`` stub."""


def fail(task: str, message: str) -> CheckFailed:
    """The exception a check raises: ``raise fail("Task 1", "you returned bits, not bytes ...")``."""
    return CheckFailed(f"{FAIL_MARK} {task}: {message}")


def passed(task: str, what: str) -> None:
    """Print the one line a passing check shows."""
    print(f"{PASS_MARK} {task}: {what}")


def require_callable(task: str, fn: object, name: str) -> Callable[..., Any]:
    """Fail clearly if the learner passed something that is not a function."""
    if not callable(fn):
        raise fail(task, f"`{name}` should be a function, but it is a {type(fn).__name__}. "
                         f"Run the cell that defines `def {name}(...)` first.")
    return fn


def call(task: str, fn: Callable[..., Any], name: str, *args: Any, **kwargs: Any) -> Any:
    """Call the learner's ``fn``; turn a stub or any exception into a readable failure."""
    try:
        return fn(*args, **kwargs)
    except NotImplementedError as err:
        raise NotStarted(
            f"{FAIL_MARK} {task}: not started — `{name}` still raises NotImplementedError. "
            f"Replace the `raise NotImplementedError(...)` line with your code. Hint: {err}"
        ) from None
    except CheckFailed:
        raise
    except Exception as err:  # noqa: BLE001 - anything the learner's code raises is reported
        raise fail(
            task, f"`{name}` raised {type(err).__name__}: {err}. Run it by hand on a small "
                  "input to see where it breaks."
        ) from None
    except KeyboardInterrupt:
        raise fail(task, f"`{name}` was interrupted (KeyboardInterrupt): it ran until it was stopped — a loop "
                         "that never ends? (or your answer raises KeyboardInterrupt itself: don't)") from None
    except BaseException as err:  # noqa: BLE001 - SystemExit, BaseException subclasses raised by the answer
        raise fail(
            task, f"`{name}` raised {type(err).__name__}{': ' + str(err) if str(err) else ''}, which ends a "
                  "program rather than reporting an error: don't call sys.exit()/exit() or raise it in your "
                  "answer; return the value the task asks for."
        ) from None


def _show_without_traceback(shell, etype, value, tb, tb_offset=None):
    """IPython custom-exception handler: show the message alone; the cell still fails."""
    stb = [f"{etype.__name__}: {value}"]
    shell._showtraceback(etype, value, stb)  # publishes the error output, as a traceback would
    return stb


def _install_ipython_handler() -> None:
    try:
        from IPython import get_ipython
    except ImportError:  # pragma: no cover - IPython is a dependency, but stay importable without
        return
    shell = get_ipython()
    if shell is not None:
        shell.set_custom_exc((CheckFailed,), _show_without_traceback)
        from .state import install  # each check cell runs in torch's default global state

        install(shell)


_install_ipython_handler()
