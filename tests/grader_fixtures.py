"""Wrong- and right-answer fixtures for the graders, in the one shape that the framework test counts.

Every ``tests/test_checks_*.py`` declares two module-level dicts, keyed by ``(lesson, task)`` where ``task``
is the check function's name (the key of that lesson's ``HINTS``)::

    WRONG = {("00", "tensor_bytes"): {
        "counts elements": (answer, "number of elements"),   # the mistake, the words the message must say
        ...}}
    RIGHT = {("00", "tensor_bytes"): {
        "numel times element_size": answer,
        ...}}

``answer`` is what the exercise's check cell passes to ``check.<task>``: one function, or a tuple of them
(``check.checkpoint(save, load)``). A wrong answer's message must contain its fragment (case-insensitive):
the check must not only catch the mistake but name it. Then, at the end of the module::

    test_wrong_answer_is_named, test_right_answer_passes = grader_fixtures.tests(WRONG, RIGHT)

``tests/test_checks_framework.py`` requires at least ``MIN_WRONG`` wrong and ``MIN_RIGHT`` right fixtures
for every task of every lesson, each wrong one with a non-empty fragment.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

import pytest

from ampcourse.checks import CheckFailed

MIN_WRONG = 6
MIN_RIGHT = 2

Key = tuple[str, str]


def _call(lesson: str, task: str, answer: Any) -> None:
    module = importlib.import_module(f"ampcourse.checks.lesson{lesson}")
    args = answer if isinstance(answer, tuple) else (answer,)
    getattr(module, task)(*args)


def _params(table: dict[Key, dict[str, Any]]):
    return [pytest.param(key, label, value, id=f"{key[0]}-{key[1]}-{label}")
            for key, entries in table.items() for label, value in entries.items()]


def tests(wrong: dict[Key, dict[str, tuple[Any, str]]], right: dict[Key, dict[str, Any]]
          ) -> tuple[Callable, Callable]:
    """The two parametrized tests of a module's fixtures: each wrong answer fails naming its mistake, each
    right answer passes."""

    @pytest.mark.parametrize(("key", "label", "fixture"), _params(wrong))
    def test_wrong_answer_is_named(key, label, fixture):
        answer, fragment = fixture
        with pytest.raises(CheckFailed) as failed:
            _call(*key, answer)
        assert fragment.lower() in str(failed.value).lower(), (
            f"{key} {label!r}: the message does not name the mistake ({fragment!r}):\n{failed.value}")

    @pytest.mark.parametrize(("key", "label", "answer"), _params(right))
    def test_right_answer_passes(key, label, answer, capsys):
        _call(*key, answer)
        assert "✓" in capsys.readouterr().out

    return test_wrong_answer_is_named, test_right_answer_passes


# --- forgeries shared by several lessons' fixtures ------------------------------------------------------

class MroMeta(type):
    """Review rev25-r6 E2: a metaclass whose ``__mro__`` property says the class is a plain ``object``."""

    __mro__ = property(lambda cls: (object,))


class VerdictPosingAsStr(metaclass=MroMeta):
    """Equal to every verdict; poses as a str for isinstance() through a ``__class__`` property."""

    __class__ = property(lambda self: str)

    def __init__(self, text):
        self.text = text

    def __eq__(self, other):
        return True

    def __ne__(self, other):
        return False

    __hash__ = object.__hash__

    def __repr__(self):
        return repr(self.text)

    def __str__(self):
        return self.text


def callers_local(name: str, otherwise):
    """What a forging answer reaches through ``sys._getframe``: the nearest caller's local ``name`` (the check's
    expected value), or ``otherwise()`` where no caller has one."""
    import sys

    frame = sys._getframe(2)
    while frame is not None and name not in frame.f_locals:
        frame = frame.f_back
    return frame.f_locals[name] if frame is not None else otherwise()
