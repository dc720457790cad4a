"""ampcourse.source.code_of: the code a lesson prints is the code that ran."""

import doctest

import pytest

from ampcourse import accumulation, source
from ampcourse.source import code_of


def _example(x):
    """A docstring
    over two lines."""
    y = x * 2  # start here
    z = y + 1
    return z  # stop here


def test_whole_function_without_docstring():
    text = code_of(_example)
    assert text.splitlines()[0] == "def _example(x):"
    assert "docstring" not in text and "return z" in text
    assert "A docstring" in code_of(_example, docstring=True)


def test_slice_between_markers_is_dedented():
    assert code_of(_example, start="start here", stop="stop here") == "y = x * 2  # start here\nz = y + 1"
    assert code_of(_example, start="z =") == "z = y + 1\nreturn z  # stop here"


def test_missing_marker_and_bad_arguments_raise():
    with pytest.raises(ValueError, match="start marker 'nowhere' not found"):
        code_of(_example, start="nowhere")
    with pytest.raises(ValueError, match="stop marker"):
        code_of(_example, start="z =", stop="y =")  # stop must come after start
    with pytest.raises(TypeError, match="obj must be a function"):
        code_of(42)
    with pytest.raises(TypeError, match="start must be"):
        code_of(_example, start="")


def test_the_slices_lesson_05_prints_exist():
    # lesson 05 prints these parts of the package; a renamed line must fail here, not only in the notebook
    assert "scaler.unscale_(optimizer)" in code_of(accumulation.clip_demo, start="def right(",
                                                   stop="right_update, right_norm")
    assert code_of(accumulation.multi_model_step, start="optimizer0.zero_grad()",
                   stop="for counter in counters").endswith("scaler.update()")


def test_docstring_examples():
    assert doctest.testmod(source).failed == 0


def test_a_lambda_and_code_without_a_file_are_named_not_raw():
    """Audit r3, finding 29: ``code_of(lambda)`` returned the whole surrounding line, and a function made by
    ``exec`` raised inspect's bare ``OSError: could not get source code``."""
    square, twice = (lambda x: x * x), 2  # noqa: E731 - the line a lambda's source would drag along
    with pytest.raises(ValueError, match=r"obj is a lambda .*write it as a def"):
        code_of(square)
    namespace = {}
    exec("def made_by_exec():\n    return 1\n", namespace)  # noqa: S102
    with pytest.raises(ValueError, match=r"obj: the source of made_by_exec cannot be found .*exec.*'<string>'"):
        code_of(namespace["made_by_exec"])
    assert twice == 2 and code_of(_example).startswith("def _example(x):")  # a def in a file still works
