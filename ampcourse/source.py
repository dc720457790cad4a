"""Show the code that ran: the source of a package function, or the part of it between two markers.

Lessons print the AMP code of their experiments from the package with :func:`code_of`, so what the
learner reads is what produced the output below it (a markdown snippet could drift from the code).
"""

from __future__ import annotations

import inspect
import textwrap
from collections.abc import Callable
from typing import Any

__all__ = ["code_of"]


def _drop_docstring(lines: list[str]) -> list[str]:
    """Remove the first triple-quoted block after the ``def`` line (the docstring), if there is one."""
    for i, line in enumerate(lines[:40]):
        stripped = line.strip()
        if stripped.startswith(('"""', "r\"\"\"")) and i > 0 and lines[i - 1].rstrip().endswith(":"):
            quote_closes_here = stripped.count('"""') >= 2
            end = i if quote_closes_here else next(
                (j for j in range(i + 1, len(lines)) if '"""' in lines[j]), None)
            if end is None:
                return lines
            return lines[:i] + lines[end + 1:]
    return lines


def code_of(obj: Callable[..., Any] | type, start: str | None = None, stop: str | None = None, *,
            docstring: bool = False) -> str:
    """The source of ``obj`` (a function or class), dedented, without its docstring unless ``docstring``.

    ``start``: keep from the first line that contains this text; ``stop``: keep up to, not including,
    the first later line that contains this text. A marker that is not found raises ``ValueError`` (so a
    lesson that prints a slice fails loudly when the code changes under it).

    Example (lesson 05): ``print(code_of(clip_demo, start="def right(", stop="right_update"))`` prints the
    right-order and wrong-order clipping functions that the demo runs.
    """
    if not (inspect.isfunction(obj) or inspect.ismethod(obj) or inspect.isclass(obj)):
        raise TypeError(f"obj must be a function or a class (got {type(obj).__name__})")
    for name, marker in (("start", start), ("stop", stop)):
        if marker is not None and (not isinstance(marker, str) or not marker):
            raise TypeError(f"{name} must be a non-empty str or None (got {marker!r})")
    name = getattr(obj, "__qualname__", repr(obj))
    if getattr(obj, "__name__", None) == "<lambda>":
        raise ValueError(f"obj is a lambda ({name}): its source is the whole line it sits on, not the function; "
                         "write it as a def to print it with code_of")
    try:
        source = inspect.getsource(obj)
    except (OSError, TypeError) as err:
        where = getattr(getattr(obj, "__code__", None), "co_filename", None) or getattr(obj, "__module__", "?")
        raise ValueError(f"obj: the source of {name} cannot be found (it was made by exec/eval or typed at an "
                         f"interactive prompt, from {where!r}; {err}): code_of shows code that lives in a file, "
                         "such as a function of the ampcourse package") from None
    lines = textwrap.dedent(source).splitlines()
    if not docstring:
        lines = _drop_docstring(lines)
    first = 0
    if start is not None:
        first = next((i for i, line in enumerate(lines) if start in line), -1)
        if first < 0:
            raise ValueError(f"start marker {start!r} not found in the source of {obj.__qualname__}")
    last = len(lines)
    if stop is not None:
        last = next((i for i in range(first + 1, len(lines)) if stop in lines[i]), -1)
        if last < 0:
            raise ValueError(f"stop marker {stop!r} not found after {start!r} in the source of {obj.__qualname__}")
    return textwrap.dedent("\n".join(lines[first:last])).rstrip()
