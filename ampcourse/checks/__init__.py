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

Hints come in tiers and live with the checks, never in the stub: each ``lessonNN`` module defines
``HINTS = {"function_name": [tier1, tier2, tier3]}`` and ``hint = hints(__name__, HINTS)``. The stub only
says *what* to write. The first failed check of a task shows tier 1 (a question or a pointer to the
lesson), each later failure the next tier, and ``check.hint("function_name")`` reveals the next one on
request. A task that was never attempted shows no hint (``NotStarted`` carries none).
"""

from __future__ import annotations

import collections
import collections.abc
import itertools
import operator
import os
import re
import sys
import time
import types
from collections.abc import Callable
from typing import Any

PASS_MARK = "✓"
FAIL_MARK = "✗"


class CheckFailed(AssertionError):
    """A check saw a mistake. The message says which one and how to fix it.

    ``hint_key`` is ``(module, task name)`` when the lesson defines tiered hints for the task: the display
    hook (or :func:`with_hint`) then adds the next tier to the message.
    """

    hint_key: tuple[str, str] | None = None


class NotStarted(CheckFailed):
    """The task's code still raises the ``NotImplementedError`` stub."""


# --- tiered hints ---------------------------------------------------------------------------------

_REGISTRY: dict[str, dict[str, list[str]]] = {}
_SHOWN: dict[tuple[str, str], int] = {}  # how many tiers of each task's hints the learner has seen


def task_key(task: str) -> str:
    """``"Task 1 (tensor_bytes)"`` → ``"tensor_bytes"``: the name the hints are filed under."""
    found = re.search(r"\(([^()]+)\)", task)
    return found.group(1) if found else task


def hints(module: str, table: dict[str, list[str]]) -> Callable[..., str]:
    """Register a lesson's hint tiers and return its ``hint(task)`` function.

    ``table`` maps each task's function name to its tiers, gentlest first (at least two, each a non-empty
    string). The returned ``hint(task)`` takes the function or its name, shows every tier seen so far plus
    the next one, prints them and returns the text.
    """
    if not isinstance(module, str) or not module:
        raise ValueError("module must be the checks module's __name__")
    if not isinstance(table, dict) or not table:
        raise TypeError("table must be a non-empty dict {task name: [hint tiers]}")
    for name, tiers in table.items():
        if not isinstance(tiers, (list, tuple)) or len(tiers) < 2 or not all(
                isinstance(t, str) and t.strip() for t in tiers):
            raise ValueError(f"hints for {name!r} must be a list of at least 2 non-empty strings")
    _REGISTRY[module] = {name: list(tiers) for name, tiers in table.items()}

    def hint(task: object) -> str:
        name = getattr(task, "__name__", task)
        if not isinstance(name, str) or name not in _REGISTRY[module]:
            raise ValueError(f"task must be one of {sorted(_REGISTRY[module])} (or the function itself); "
                             f"got {task!r}")
        tiers = _REGISTRY[module][name]
        key = (module, name)
        _SHOWN[key] = min(_SHOWN.get(key, 0) + 1, len(tiers))
        text = "\n".join(f"Hint {i}/{len(tiers)}: {tiers[i - 1]}" for i in range(1, _SHOWN[key] + 1))
        print(text)
        return text

    hint.__doc__ = (f"Show the next hint for a task of this exercise ({', '.join(sorted(table))}): "
                    "pass the function or its name.")
    return hint


def last_tier_next(module: str, name: str) -> bool:
    """Whether the next failure of task ``name`` (of the checks module ``module``) shows its last hint tier: a
    check may then say more (every wrong key of a prediction), since the last tier gives the answer anyway."""
    tiers = _REGISTRY.get(module, {}).get(name)
    return not tiers or _SHOWN.get((module, name), 0) + 1 >= len(tiers)


def reset_hints() -> None:
    """Forget which hints were shown (tests use it; a fresh kernel starts this way)."""
    _SHOWN.clear()


def _hint_module() -> str | None:
    """The registered checks module that is raising (the nearest such frame on the stack)."""
    frame = sys._getframe(2)
    while frame is not None:
        name = frame.f_globals.get("__name__")
        if name in _REGISTRY:
            return name
        frame = frame.f_back
    return None


def with_hint(err: CheckFailed) -> str:
    """The failure message plus the next tier of its task's hints (counts as one more failed attempt)."""
    text = str(err)
    if isinstance(err, NotStarted) or err.hint_key is None:
        return text
    module, name = err.hint_key
    tiers = _REGISTRY.get(module, {}).get(name)
    if not tiers:
        return text
    shown = _SHOWN[err.hint_key] = min(_SHOWN.get(err.hint_key, 0) + 1, len(tiers))
    text += f"\nHint {shown}/{len(tiers)}: {tiers[shown - 1]}"
    if shown < len(tiers):
        text += f" (Stuck? `check.hint({name!r})` shows the next hint.)"
    return text


def fail(task: str, message: str) -> CheckFailed:
    """The exception a check raises: ``raise fail("Task 1", "you returned bits, not bytes ...")``."""
    err = CheckFailed(f"{FAIL_MARK} {task}: {message}")
    module = _hint_module()
    if module is not None and task_key(task) in _REGISTRY[module]:
        err.hint_key = (module, task_key(task))
    return err


def passed(task: str, what: str) -> None:
    """Print the one line a passing check shows, and, when the grader's guard is in the kernel
    (``ampcourse.grading.guard_reset``), record the pass for it: the reset's nonce, ``task``, and the code and
    globals of the function that called this one. The grader counts a check cell as passed only with a record made
    by a function of the real check module (``ampcourse.grading.guard_verify``), never by the printed line alone.
    Before it prints, it runs the guard's comparison (the reset's ``compare``) and keeps what changed for the verify:
    code the answer left in ``sys.stdout`` or a display hook runs only after it (review rev25-r4 E1)."""
    run = compare_now()  # the guard's comparison, before anything the answer left in sys.stdout runs (rev25-r4 E1)
    print(f"{PASS_MARK} {task}: {what}")
    if run is not None and isinstance(run.get("ran"), list):
        caller = sys._getframe(1)
        run["ran"].append((run.get("nonce"), task, caller.f_code, caller.f_globals))


def compare_now() -> dict | None:
    """Run the guard's comparison (the reset's ``compare``) now and keep what changed for the verify; the run record,
    None outside the grader. :func:`passed` calls it before it prints, and :func:`collect` (lesson 04's own call loop
    too) at the end of the call pass, before the check makes its cases again: a swap that helps the check must be in
    place then, where it is seen, even one that undoes itself when the check next calls the swapped helper (review
    rev25-r8 E1)."""
    run = _guard_run()
    compare = run.get("compare") if run is not None else None
    if callable(compare) and isinstance(run.get("early"), list):
        run["early"].extend(compare())
    return run


def require_callable(task: str, fn: object, name: str) -> Callable[..., Any]:
    """Fail clearly if the learner passed something that is not a function."""
    if not callable(fn):
        raise fail(task, f"`{name}` should be a function, but it is a {type(fn).__name__}. "
                         f"Run the cell that defines `def {name}(...)` first.")
    return fn


def _numpy_scalar_types() -> tuple[type, ...]:
    """numpy's own scalar types (C types: a class an answer adds to ``numpy.sctypeDict`` is a heap type, left out)."""
    return _NUMPY_SCALARS


def _find_numpy_scalars() -> tuple[type, ...]:
    try:
        import numpy
    except ImportError:  # pragma: no cover - numpy comes with torch here
        return ()
    return tuple({t for t in numpy.sctypeDict.values() if type(t) is type and issubclass(t, numpy.generic)
                  and not _TYPE_FLAGS(t) & _HEAP_TYPE})


# A class's facts read from ``type``'s own slots, never through the class: a metaclass can define ``__mro__``,
# ``__flags__``, ``__name__`` or ``__dict__`` as properties that say anything (review rev25-r6 E2).
_TYPE_MRO = type.__dict__["__mro__"].__get__
_TYPE_FLAGS = type.__dict__["__flags__"].__get__
_TYPE_DICT = type.__dict__["__dict__"].__get__
_TYPE_NAME = type.__dict__["__name__"].__get__
_HEAP_TYPE = 1 << 9  # Py_TPFLAGS_HEAPTYPE: a class made by a class statement (or type()), not a C type
_NUMPY_SCALARS = _find_numpy_scalars()
_LIBRARIES = ("torch", "numpy", "collections", "enum", "fractions", "decimal", "numbers", "abc", "typing")


def _find_library_classes() -> frozenset[type]:
    """Every class of torch, numpy and the standard library's value modules loaded now (when ``ampcourse.checks`` is
    imported, before any answer cell runs), found by walking those modules: a later class is never one of them,
    whatever its ``__module__`` says or wherever an answer puts it (review rev25-r6 E2)."""
    import abc  # noqa: F401 - loaded so that their classes are found
    import decimal  # noqa: F401
    import enum  # noqa: F401
    import fractions  # noqa: F401
    import typing  # noqa: F401

    import torch  # noqa: F401

    found = set()
    for name, module in list(sys.modules.items()):
        if module is None or name.split(".")[0] not in _LIBRARIES or type(module) is not type(sys):
            continue
        found.update(v for v in list(vars(module).values()) if issubclass(type(v), type))
    import collections as mine  # its User* wrappers compare what they wrap, which an answer chooses: not taken
    return frozenset(found - {mine.UserDict, mine.UserList, mine.UserString})


_LIBRARY_CLASSES = _find_library_classes()
_NDARRAY = getattr(sys.modules.get("numpy"), "ndarray", None)  # taken when this module is imported
_VALUE_TYPES = (bool, int, float, complex, str, bytes, tuple, list, dict, set, frozenset)
#: what each value type's content is read with: its own C method, unbound, so no method of a subclass runs
_AS_BASE = {int: int.__int__, float: float.__float__, complex: complex.__complex__, str: str.__str__,
            bytes: bytes.__bytes__}
#: the dunders through which a check's comparison or conversion of an object runs the object's own code
_COMPARE_DUNDERS = ("__eq__", "__ne__", "__lt__", "__le__", "__gt__", "__ge__", "__bool__", "__index__", "__int__",
                    "__float__", "__complex__", "__round__", "__trunc__", "__floor__", "__ceil__", "__array__",
                    "__torch_function__", "__torch_dispatch__", "__class__", "__instancecheck__",
                    "__subclasscheck__")


#: what each heap library class's own ``__dict__`` held for :data:`_COMPARE_DUNDERS` when ``ampcourse.checks`` was
#: imported: a library class an answer patches later (``enum.Enum.__eq__ = ...``, ``numbers.Rational.__float__``) is
#: no longer trusted (review rev25-r7 E2)
_LIBRARY_DUNDERS = {cls: tuple(_TYPE_DICT(cls).get(name) for name in _COMPARE_DUNDERS)
                    for cls in _LIBRARY_CLASSES if _TYPE_FLAGS(cls) & _HEAP_TYPE}


def _fraction_slots():
    import fractions

    own = _TYPE_DICT(fractions.Fraction)
    return fractions.Fraction, own["_numerator"].__get__, own["_denominator"].__get__


_FRACTION, _NUMERATOR_OF, _DENOMINATOR_OF = _fraction_slots()  # Fraction's own slot readers, taken at import
#: the most values (containers and their items) :func:`plain` reads in one answer (review rev25-r7 W2)
PLAIN_BUDGET = 100_000
#: C containers whose subclasses pass nowhere as they are: refused, read through their own methods otherwise
_REFUSED_CONTAINERS = (collections.ChainMap, types.MappingProxyType, types.SimpleNamespace)


class _Refused(Exception):
    """What :func:`_plain_value` found that a check cannot judge: ``what`` (words) and ``fix`` (a sentence)."""

    def __init__(self, what: str, fix: str, depth: int) -> None:
        super().__init__(what)
        self.what, self.fix, self.depth = what, fix, depth


#: the course's own result classes that a check gets through ``call`` from a course function (lesson 09 calls
#: ``capstone.train``): looked up by identity when a check runs (the grader puts back a course module's attribute
#: rebound by an answer), never by the ``__module__`` a class claims
_COURSE_RESULTS = {"ampcourse.capstone": ("TrainResult",)}


def _a_course_result(kind: type) -> bool:
    return any(getattr(sys.modules.get(module), name, None) is kind
               for module, names in _COURSE_RESULTS.items() for name in names)


def _dunders_of_its_own(kind: type) -> list[str]:
    """The comparison/conversion dunders ``kind`` or a class it inherits from defines, other than C types' and the
    library classes' (:data:`_LIBRARY_CLASSES`, by identity); the same for its metaclass."""
    found = []
    for owner in (kind, type(kind)):
        for cls in _TYPE_MRO(owner):
            if not _TYPE_FLAGS(cls) & _HEAP_TYPE:
                continue
            if cls in _LIBRARY_CLASSES:  # trusted as it was at import: a dunder changed since is the answer's
                then, now = _LIBRARY_DUNDERS.get(cls, ()), _TYPE_DICT(cls)
                found += [name for name, was in zip(_COMPARE_DUNDERS, then, strict=False)
                          if now.get(name) is not was and name not in found]
                continue
            found += [name for name in _COMPARE_DUNDERS if name in _TYPE_DICT(cls) and name not in found]
    return found


def _library_dunders_changed(kind: type) -> list[str]:
    """``Class.__dunder__`` of each library class on ``kind``'s MRO (and its metaclass's) whose comparison or
    conversion dunders changed since ``ampcourse.checks`` was imported."""
    found = []
    for owner in (kind, type(kind)):
        for cls in _TYPE_MRO(owner):
            if cls in _LIBRARY_DUNDERS:
                now = _TYPE_DICT(cls)
                found += [f"{_TYPE_NAME(cls)}.{name}" for name, was in zip(_COMPARE_DUNDERS, _LIBRARY_DUNDERS[cls],
                                                                          strict=True) if now.get(name) is not was]
    return list(dict.fromkeys(found))


class _Walk:
    """One :func:`plain` conversion: what it converted, by ``id``, with the number of values under it, and how many
    values the answer holds counted as a tree (a list shared by many places counts at each place, as ``repr`` and
    ``==`` would walk it, but is read once: ``[[x] * 20] * 20 ...`` is refused after a few thousand steps, not walked
    20**17 times; review rev25-r7 W2)."""

    __slots__ = ("done", "count")

    def __init__(self) -> None:
        self.done: dict[int, tuple[object, object, int]] = {}  # id -> (the original, kept alive; its conversion; size)
        self.count = 0

    def add(self, values: int, depth: int) -> None:
        self.count += values
        if self.count > PLAIN_BUDGET:
            raise _Refused(f"a structure too large to judge (more than {PLAIN_BUDGET:,} values, counting a shared "
                           "part at each place it appears)",
                           "return only what the task asks for: a few numbers, a short tuple, list or dict.", depth)


def _plain_value(value: object, depth: int = 0, walk: _Walk | None = None) -> Any:
    """``value`` made of plain values only (:func:`plain`); raises :class:`_Refused` for what cannot be."""
    walk = _Walk() if walk is None else walk
    kind = type(value)  # type() is the object's real class: a `__class__` property does not change it
    if depth > 20:
        raise _Refused("a container nested more than 20 levels deep", "return a flat tuple, list or dict.", depth)
    if kind in (bool, int, float, complex, str, bytes, type(None)) or kind in _NUMPY_SCALARS:
        walk.add(1, depth)
        return value
    seen = walk.done.get(id(value))
    if seen is not None and seen[0] is value:
        walk.add(seen[2], depth)
        return seen[1]
    before = walk.count
    walk.add(1, depth)
    converted = _plain_container(value, kind, depth, walk)
    walk.done[id(value)] = (value, converted, walk.count - before)
    return converted


def _plain_container(value: object, kind: type, depth: int, walk: _Walk) -> Any:
    import torch

    def each(v):
        return _plain_value(v, depth + 1, walk)

    if kind is torch.Size:
        return torch.Size([each(v) for v in tuple.__iter__(value)])
    if kind in (tuple, list, set, frozenset, collections.deque):
        items = [each(v) for v in value]  # an exact C container: its own C iteration
        return value if all(a is b for a, b in zip(items, value, strict=True)) else kind(items)
    if kind is dict or kind is collections.OrderedDict:
        pairs = list(dict.items(value))
        items = [(each(k), each(v)) for k, v in pairs]
        if all(a is k and b is v for (a, b), (k, v) in zip(items, pairs, strict=True)):
            return value
        converted = kind(items)
        if len(converted) != len(items):  # two str-subclass keys with one content (review rev25-r7 N1)
            raise _Refused("a dict with two keys that are the same string (or number) once read as built-in values",
                           "return a plain dict whose keys are plain strings.", depth)
        return converted
    if kind in (torch.Tensor, torch.nn.Parameter):
        shadowing = sorted(str(k) for k in vars(value) if type(k) is not str or hasattr(torch.Tensor, k))
        if shadowing:  # t.float = lambda: ... (review rev25-r6 E3); a buffer's `persistent` shadows nothing
            raise _Refused(f"a torch.Tensor with {', '.join(f'`{k}`' for k in shadowing)} set on it as an "
                           "attribute of its own, replacing the tensor's method",
                           "return the tensor itself, without attributes that replace its methods.", depth)
        return value
    mro = _TYPE_MRO(kind)
    name = _TYPE_NAME(kind)
    base = next((b for b in mro if b in _VALUE_TYPES), None)
    if base is not None:  # a subclass (a namedtuple, torch's result tuples, an IntEnum, a str subclass): its content
        if base in _AS_BASE:
            return _AS_BASE[base](value)
        if base is dict:
            return _plain_value(dict(dict.items(value)), depth, walk)
        iterate = {tuple: tuple.__iter__, list: list.__iter__, set: set.__iter__, frozenset: frozenset.__iter__}
        return _plain_value(base(iterate[base](value)), depth, walk)
    changed = _library_dunders_changed(kind)
    if changed:  # enum.Enum.__eq__ = ... in an answer cell (review rev25-r7 E2)
        listed = ", ".join(f"`{c}`" for c in changed)
        raise _Refused(f"an object of type `{name}`, whose library class has had {listed} replaced since the course "
                       "was loaded", "do not patch library classes; return a plain int, float, str, bool, tuple, list "
                                     "or dict.", depth)
    if issubclass(kind, torch.Tensor):
        raise _Refused(f"an object of type `{name}` (a subclass of torch.Tensor)",
                       "return a plain torch.Tensor (a result of torch's own operations).", depth)
    refused = next((b for b in mro if b in _REFUSED_CONTAINERS), None)
    if refused is not None:  # a subclass too (review rev25-r7 E3: `class _Map(ChainMap): pass`)
        what = name if refused is kind else f"{name} (a {_TYPE_NAME(refused)})"
        raise _Refused(f"a {what}", "return a plain dict (`dict(result)`), so that the check reads its items.", depth)
    if collections.deque in mro:  # a deque subclass: its items, read with deque's own C iteration
        return _plain_value(collections.deque(collections.deque.__iter__(value)), depth, walk)
    if kind is _NDARRAY and value.dtype.kind == "O":
        raise _Refused("a numpy array of Python objects (dtype=object)",
                       "return numbers: a float array, a tensor, or a list of floats.", depth)
    if any("__next__" in _TYPE_DICT(cls) for cls in mro):
        raise _Refused(f"an iterator (a {name})", "return a list (`list(...)`) or a tuple of the values.", depth)
    if _FRACTION in mro:  # a library class holds what it is given: its fields must be exact ints (rev25-r7 E2)
        top, bottom = _NUMERATOR_OF(value), _DENOMINATOR_OF(value)
        if type(top) is not int or type(bottom) is not int or bottom <= 0:
            raise _Refused(f"a Fraction holding an object of type `{_TYPE_NAME(type(top))}` as its numerator and "
                           f"one of type `{_TYPE_NAME(type(bottom))}` as its denominator (a Fraction of the course "
                           "is two ints)", "return a float (or `Fraction(int, int)`).", depth)
        if kind is not _FRACTION and not _dunders_of_its_own(kind):
            return _FRACTION(top, bottom)
    own = _dunders_of_its_own(kind)
    if own and not _a_course_result(kind):
        if any("__dataclass_fields__" in _TYPE_DICT(cls) for cls in mro):  # rev25-r7 M1: @dataclass wrote them
            raise _Refused(f"a dataclass (`{name}`: @dataclass gives it an `__eq__`, which a check does not run)",
                           "return built-in values: the tuple or dict the task asks for "
                           "(`dataclasses.astuple(result)` or `dataclasses.asdict(result)` makes one).", depth)
        raise _Refused(f"an object of type `{name}`, whose class defines {', '.join(f'`{d}`' for d in own)}",
                       "a check compares built-in values only: return a plain int, float, str, bool, tuple, list "
                       "or dict (or a torch.Tensor).", depth)
    if issubclass(kind, collections.abc.Mapping):
        # a Mapping of its own (collections.abc.Mapping): read once, here in the call pass, into a plain dict, so no
        # method of it runs while the check judges (review rev25-r7 E4: a __getitem__ reading the caller's frame)
        try:
            pairs = [(k, value[k]) for k in list(iter(value))]
        except Exception as err:  # noqa: BLE001 - the answer's own methods
            raise _Refused(f"a {name} (a Mapping) whose items could not be read ({type(err).__name__})",
                           "return a plain dict.", depth) from None
        return _plain_value(dict(pairs), depth, walk)
    return value


def plain(task: str, value: object, name: str) -> Any:
    """``value`` (what the learner's ``name`` returned) converted to plain values, else a failure saying what was
    found. ``int``/``float``/``str``/``bool``/``None``, numpy's scalars, a dtype or device, an exact ``torch.Tensor`` or
    ``Parameter`` (with no attribute of its own that replaces a method: ``t.float = ...``), and tuples, lists, sets,
    deques, dicts, ``OrderedDict``s and ``torch.Size`` of them are taken as they are; a subclass of a built-in value
    type (a namedtuple, torch's result tuples such as ``torch.return_types.max``, an ``IntEnum``, a str subclass) or
    of ``deque`` becomes its built-in content, read with the base type's own C method (``tuple.__iter__``,
    ``str.__str__``), so none of its methods runs again; a ``collections.abc.Mapping`` of the answer's own is read once,
    here, into a plain dict (rev25-r7 E4); a ``Fraction`` only with two exact ints inside (a library class holds
    whatever it is given: rev25-r7 E2). An object of any other class passes as it is unless that class (or its
    metaclass) defines comparison or conversion dunders (:data:`_COMPARE_DUNDERS`), other than C types and the library
    classes loaded before any answer (torch's, numpy's, the standard library's value modules'), which are trusted only
    with the dunders they had at that import (``enum.Enum.__eq__`` replaced by a cell is seen). Refused: such an
    object (a dataclass named as one), a tensor subclass or a tensor with a method shadowed, an iterator, a
    ChainMap/mappingproxy/SimpleNamespace or a subclass of one (return a dict), a dict whose keys merge once read as
    built-in values, nesting deeper than 20, more than :data:`PLAIN_BUDGET` values (a container shared by many places
    is read once). A check calls this in its call pass (:func:`call` does, and :func:`noted_call` with ``plain_as``)
    and judges only what it returns (review rev25-r5 E1/E2, rev25-r6 E1-E4, rev25-r7 E2-E4, W2)."""
    try:
        return _plain_value(value)
    except _Refused as refused:
        where = f" (inside the {_TYPE_NAME(type(value))} it returned)" if refused.depth else ""
        err = fail(task, f"`{name}` returned {refused.what}{where}: {refused.fix}")
        err.hint_key = None  # a type refusal: the task's hints (about its algorithm) do not apply (rev25-r6 M1)
        raise err from None


def exact_number(value: object) -> int | float | None:
    """``value`` as an exact ``int`` (an ``int``, not bool, or one of numpy's integer scalars) or an exact ``float``
    (a ``float`` or one of numpy's floating scalars: float16, float32, float64, longdouble, converted by numpy's own
    C code), else None. A check compares what this returns, so the comparison is ``int``'s or ``float``'s own, never
    the answer's type's; an ``int``/``float`` subclass or a class registered as ``numbers.Integral`` is refused (None),
    since converting it would run its ``__index__`` (review rev25-r5 E1; :func:`plain` has already turned a subclass
    returned through :func:`call` into its content)."""
    kind = type(value)
    if kind is int or kind is float:
        return value
    if kind in _NUMPY_SCALARS:
        import numpy

        if issubclass(kind, numpy.integer):
            return int.__index__(operator.index(value))
        if issubclass(kind, numpy.floating):
            return float.__float__(float(value))
    return None


def exact_bool(value: object) -> bool | None:
    """``value`` as a ``bool``: a ``bool``, or numpy's ``bool_`` (a C type, read by its C value: an answer that
    compares numpy numbers returns one honestly; review rev25-r8 N3); None otherwise (0 and 1 included)."""
    if type(value) is bool:
        return value
    numpy = sys.modules.get("numpy")
    if numpy is not None and type(value) is numpy.bool_ and numpy.bool_ in _NUMPY_SCALARS:
        return numpy.bool_.__bool__(value)  # the C type's own slot
    return None


def real_number(value: object) -> int | float | None:
    """:func:`exact_number`, or a ``Fraction`` (two exact ints inside, as :func:`plain` leaves it) or a C ``Decimal``
    (finite) as the nearest float, computed by ``int``'s own true division or the C type's own conversion: an honest
    exact number is judged by its value (review rev25-r7 M1), never through code an answer could change; None
    otherwise."""
    number = exact_number(value)
    if number is not None:
        return number
    kind = type(value)
    if kind is _FRACTION:
        top, bottom = _NUMERATOR_OF(value), _DENOMINATOR_OF(value)
        if type(top) is int and type(bottom) is int and bottom > 0:
            try:
                return int.__truediv__(top, bottom)
            except OverflowError:
                return None
    if kind is _DECIMAL and not _TYPE_FLAGS(kind) & _HEAP_TYPE and _DECIMAL.is_finite(value):
        return float.__float__(_DECIMAL.__float__(value))
    return None


def _decimal_type() -> type:
    import decimal

    return decimal.Decimal


_DECIMAL = _decimal_type()


def _short_repr():
    import reprlib

    short = reprlib.Repr()
    short.maxlevel, short.maxtuple, short.maxlist, short.maxdict, short.maxset = 4, 8, 8, 8, 8
    short.maxstring = short.maxother = short.maxlong = 200
    return short


_SHORT_REPR = _short_repr()


class _ReprEnded(Exception):
    """A returned object's ``__repr__`` raised ``SystemExit``/``KeyboardInterrupt`` (or another ``BaseException``)."""

    def __init__(self, kind: str, error: BaseException) -> None:
        super().__init__(kind)
        self.kind, self.error = kind, error


class Returned:
    """What an answer returned that is not a frozen value (:func:`frozen`): only its class's name, whether it was a
    tensor, and its ``repr``, taken right after the call, for the check's message. A check judges it as "not what the
    task asks for", never by its content (the object itself is not kept, so nothing can change it later). The
    ``repr`` runs the answer's own code, outside its call: what it raises is a placeholder text, and a
    ``SystemExit``/``KeyboardInterrupt`` fails the call (:func:`answer_of`, with :func:`call`'s words)."""

    __slots__ = ("kind", "tensor", "text")

    def __init__(self, value: object) -> None:
        import torch

        self.kind = _TYPE_NAME(type(value))
        self.tensor = type(value) in (torch.Tensor, torch.nn.Parameter)
        try:
            text = _SHORT_REPR.repr(value)  # bounded: a few items per level, a few levels (review rev25-r7 W2)
        except Exception:  # noqa: BLE001 - the answer's own __repr__
            text = f"<a {self.kind}>"
        except BaseException as err:  # SystemExit, KeyboardInterrupt: failed by answer_of, as _call does (rev25-r8 N2)
            raise _ReprEnded(self.kind, err) from None
        self.text = text if len(text) <= 300 else text[:297] + "..."

    def __repr__(self) -> str:
        return self.text


def frozen(value: object) -> object:
    """``value`` if nothing can change it once it is kept (``None``, a bool, int, float, complex, str or bytes, a numpy
    scalar, a torch dtype or device, and tuples and frozensets of them), else a :class:`Returned` that only describes
    it. A check that calls first and judges afterwards keeps its answers so (review rev25-r7 E1): an answer's function
    can reach every object alive (its frames, ``gc.get_objects()``) and change a list, a dict or a tensor the check
    kept, but not these."""
    import torch

    kind = type(value)
    if value is None or kind in (bool, int, float, complex, str, bytes, torch.dtype, torch.device) \
            or kind in _NUMPY_SCALARS:
        return value
    if kind in (tuple, frozenset) and all(frozen(v) is v for v in value):
        return value
    return Returned(value)


def answer_of(task: str, fn: Callable[..., Any], name: str, args: tuple,
              convert: Callable[[Any], Any] | None = None, *,
              freeze: bool = True) -> tuple[object, CheckFailed | None]:
    """One call of the learner's ``fn(*args)`` through :func:`call`, as ``(answer, None)`` or ``(None, failure)``: the
    answer converted by ``convert`` (a check's own reading, right after the call: a one-element tensor's item) and
    then :func:`frozen`; with ``freeze=False``, as :func:`call` converted it (lesson 00's ``amp_forward`` judges the
    tensor returned, and keeps nothing it judges by in its frame while the answer runs: review rev25-r12 E1).

    A trace or profile function set while this ran (``sys.settrace``/``setprofile``, or ``frame.f_trace`` on a frame of
    the check's stack) is the one way Python code can rebind a running function's locals (CPython 3.11 writes
    ``frame.f_locals`` back into the frame after each trace event): it is taken out again and the call fails, raised
    here, so no trace event in the caller can replace the answers it keeps (review rev25-r7 E1). Under the grader the
    hooks are compared with those the guard recorded (the run record's ``hooks``), not with a local of this frame,
    which such a trace function could rewrite before the comparison (review rev25-r8 E2); outside it, with the hooks
    on when this was called. The hooks are switched off by C calls only, with no bytecode between the two (a profile
    function's ``c_call`` event or a trace's ``opcode`` event between them could switch the other on again), and only
    a hook ``sys.gettrace()``/``getprofile()`` shows: a C profiler installed with no object (yappi's, where
    ``sys.getprofile()`` is None) is left on. Those wanted are switched on again in this frame, after the frames begun
    while they were off have returned: a C tracer (coverage's) counts the return of a frame it never saw enter, and
    its own stack of frames slips (review rev25-r10 W2: under ``coverage run`` the module lines after a check went
    unrecorded). Which hooks come back, and which cannot: :func:`_put_back`."""
    hooks = (sys.gettrace(), sys.getprofile())
    try:
        try:
            got = call(task, fn, name, *args)
        except CheckFailed as error:
            return None, error
        try:
            got = convert(got) if convert is not None else got
            return (frozen(got) if freeze else got), None
        except _ReprEnded as ended:  # the returned object's __repr__ (review rev25-r8 N2)
            return None, _ended(task, f"the {ended.kind} `{name}` returned: its `__repr__`", ended.error)
    finally:
        # C calls only, and no local read: the hooks are read, then switched off inside one C call (tuple), the
        # profile first, each only where its getter shows one (review rev25-r10 W3), before any trace event can
        # rewrite a local again. A line or opcode event before the switch can rewrite nothing this line reads.
        left = (sys.gettrace(), sys.getprofile(), tuple(map(_WITH_NONE, itertools.compress(
            _HOOK_SETTERS, map(operator.is_not, map(_NO_ARGS, _HOOK_GETTERS), itertools.repeat(None))))))
        back, failure = _no_trace_left(task, name, hooks, left[:2], sys._getframe())
        for install, hook in back:  # here, not in a callee begun with the hooks off (review rev25-r10 W2)
            install(hook)
        if failure is not None:
            raise failure


_Install = tuple[Callable[[Any], Any], object]  # a C function that switches a hook on, and the hook (_put_back)


def _no_trace_left(task: str, name: str, before: tuple, left: tuple,
                   frame: types.FrameType) -> tuple[tuple[_Install, ...], CheckFailed | None]:
    """What :func:`answer_of` switches on again (``(install, hook)`` pairs, :func:`_put_back`), and the failure of
    ``name``'s call when it had left other hooks (``left``) on, or a ``frame.f_trace`` on the check's own frames
    (taken out here): ``frame`` and its callers up to the first whose code is not of this package's files, the
    frames that hold what a check judges. A stale ``f_trace`` above them is no answer's: pdb's ``q`` (bdb's
    ``set_quit``) switches the trace function off but leaves the ``f_trace`` its ``set_trace`` put on every frame up
    to the outermost, ipykernel's long-lived loop among them, and a check after it blamed the learner's function
    (review rev25-r12 E2). While a trace function of the learner's is on (``want[0]``, outside the grader only:
    there one on at the reset makes the check "cannot be graded"), the ``f_trace`` on the frames is its own, and is
    not looked at (rev25-r12 W1). The hooks wanted are those the guard recorded (the run record's ``hooks``);
    ``before``, a local of ``answer_of``, only outside the grader. There a hook of the learner's that is off when the
    call returns is the learner's tracer gone, no answer's: pdb's ``cl`` then ``c`` inside the answer (bdb's
    ``set_continue`` calls ``sys.settrace(None)`` once no breakpoint is left) fails nothing and is not switched on
    again (review rev25-r13 E3), and its own ``f_trace``s on the check's frames (the learner's ``sys.settrace(None)``
    inside the answer), inert with no trace on, are taken out and fail nothing (rev25-r14 E3); only a hook other than
    the one wanted, left on, fails the call. A bdb debugger's hook left (pdb's ``q`` at a ``breakpoint()`` in the
    answer, ``c`` with other breakpoints set) fails with a message that names the debugger (rev25-r14 E4, W1)."""
    run = _guard_run()
    recorded = run.get("hooks") if run is not None else None
    graded = type(recorded) is tuple and len(recorded) == 2
    want = recorded if graded else before
    gone = False  # outside the grader, the learner's own tracer switched off inside the answer (rev25-r14 E3)
    if not graded:  # a hook of the learner's own, off when the call returned: that tracer is gone (rev25-r13 E3)
        gone = want[0] is not None and left[0] is None
        want = tuple(None if got is None else wanted for got, wanted in zip(left, want, strict=True))
    frames = []
    while frame is not None and _CHECKS_FILE(frame.f_code.co_filename):
        if want[0] is None and frame.f_trace is not None:
            frames.append(frame)
        frame = frame.f_back
    debugger = _debugger(left[0]) or any(_debugger(frame.f_trace) for frame in frames)
    for frame in frames:
        frame.f_trace = None
    again = (_put_back("trace", want[0]), _put_back("profile", want[1]))
    back = tuple(pair for pair in again[::-1] if pair is not None)  # the profile first, then the trace
    # By identity, never the hook's ==. A wanted hook that cannot be switched on again (_put_back) is off from the
    # first call on: off is then no hook of the answer's.
    left_on = any(got is not wanted and not (got is None and on is None) for got, wanted, on in zip(left, want, again,
                                                                                                strict=True))
    if (left_on or frames) and debugger:  # pdb's `q`, or `c` with breakpoints still set (rev25-r14 E4, W1; r15 N2)
        return back, fail(task, f"a debugger (pdb / breakpoint()) was still tracing when your function `{name}` "
                                "returned, or you quit it with `q`: finish debugging (c, or remove the breakpoint() "
                                "call) and run the check again.")
    if left_on:
        return back, fail(task, f"`{name}` set a trace or profile function (sys.settrace/sys.setprofile) and left it "
                                "on when it returned: through it code of yours runs inside the check. Take it out "
                                "(`sys.settrace(None)`) before your function returns.")
    if frames and not gone:  # gone: the learner's tracer's own f_trace, inert with no trace on, taken out above
        return back, fail(task, f"`{name}` set a trace function on the check's frames (`frame.f_trace`) and left it "
                                "there when it returned: through it code of yours runs inside the check. Set no "
                                "`f_trace` on frames that are not your own.")
    return back, None


def _debugger(hook: object) -> bool:
    """Whether ``hook`` is a method of a bdb debugger (pdb's ``trace_dispatch``, ``breakpoint()``'s), told from the
    method's type and its instance's type's own MRO slot, without calling code of the hook's; bdb is not imported
    here (a debugger has loaded it)."""
    bdb = sys.modules.get("bdb")
    if bdb is None or type(hook) is not types.MethodType:
        return False
    return getattr(bdb, "Bdb", None) in _TYPE_MRO(type(hook.__self__))


def _lsprof_profiler() -> type | None:
    try:
        import _lsprof
    except ImportError:  # pragma: no cover - CPython has it
        return None
    return _lsprof.Profiler


def _coverage_tracer() -> type | None:
    """coverage's C tracer class, if coverage is loaded (``coverage run`` loads it before the script; never imported
    here), taken once, at import, so that no class planted later counts as it."""
    tracer = getattr(sys.modules.get("coverage.tracer"), "CTracer", None)
    return tracer if type(tracer) is type and not _TYPE_FLAGS(tracer) & _HEAP_TYPE else None


_LSPROF = _lsprof_profiler()  # cProfile's C profiler (cProfile.Profile, IPython's %prun), taken at import
_CTRACER = _coverage_tracer()  # coverage's C tracer: callable as a Python trace function, by coverage's design
# answer_of's switch-off, C functions only: each getter called, and its setter called with None where it showed a hook
# the files of this package's modules (the check modules, this one, facts, state): _no_trace_left's frame walk stops
# at the first frame whose code is of none of them (str's own C method, its prefix taken at import)
_CHECKS_FILE = operator.methodcaller("startswith", os.path.join(os.path.dirname(__file__), ""))
_HOOK_GETTERS, _HOOK_SETTERS = (sys.getprofile, sys.gettrace), (sys.setprofile, sys.settrace)
_NO_ARGS, _WITH_NONE = operator.methodcaller("__call__"), operator.methodcaller("__call__", None)


_TYPE_MODULE = type.__dict__["__module__"].__get__


def _line_profiler(hook: object) -> bool:
    """Whether ``hook`` is line_profiler's ``LineProfiler`` (or a subclass: kernprof's, ``%lprun``'s), the object of
    its C trace function, told by the classes of its type's MRO (module ``line_profiler...`` or a class named
    ``LineProfiler``), from ``type``'s own slots, without importing line_profiler. Its ``__call__(func)`` is a
    decorator, not a trace function: ``sys.settrace`` would make it a Python hook that raises TypeError at the next
    event, inside the learner's code (review rev25-r10 W3)."""
    for kind in _TYPE_MRO(type(hook)):
        try:
            module = _TYPE_MODULE(kind)
        except AttributeError:  # pragma: no cover - every type has one
            module = ""
        if _TYPE_NAME(kind) == "LineProfiler" or (type(module) is str and module.split(".")[0] == "line_profiler"):
            return True
    return False


def _put_back(which: str, hook: object) -> _Install | None:
    """How :func:`answer_of` switches ``hook`` on again as the ``"trace"`` or ``"profile"`` function: ``(install,
    hook)``, a C function and its argument, or None to leave it as the switch-off left it. By the hook's type:

    - None: nothing to switch on (a C hook installed with no object, which the getter shows as None, was left on).
    - cProfile's C profiler (``cProfile.Profile().enable()``, ``%prun``): its own C ``enable``, which keeps its
      subcalls/builtins settings (review rev25-r9 E2: ``sys.setprofile`` made it a Python hook that raised TypeError
      at the next event).
    - coverage's C tracer: ``sys.settrace``, which coverage supports (its tracer is callable as a Python trace
      function, and switches itself back to C at the next call).
    - line_profiler's ``LineProfiler`` (:func:`_line_profiler`): left off (review rev25-r10 W3). It is the object of
      a C trace function, Python cannot install a C function, and ``sys.settrace`` would call the decorator as
      ``(frame, event, arg)``: ``%lprun`` around a check cell records nothing after the first check that uses
      :func:`answer_of`.
    - anything else callable: ``sys.settrace`` / ``sys.setprofile``, as it was set. A function, a method (pdb's), a
      ``functools.partial``, a class whose ``__call__`` has defaulted parameters, a Cython tracer (pydevd's
      ``ThreadTracer`` and ``trace_dispatch``, JupyterLab's debugger) are all set so; leaving one off made the next
      call fail on the ``f_trace`` it had set on the check's frames (review rev25-r11 E1)."""
    if hook is None:
        return None
    install = sys.settrace if which == "trace" else sys.setprofile
    if which == "profile" and _LSPROF is not None and _LSPROF in _TYPE_MRO(type(hook)):
        return _LSPROF.enable, hook  # the C type's method, whatever a subclass defines
    if which == "trace" and _CTRACER is not None and type(hook) is _CTRACER:
        return install, hook
    if _line_profiler(hook):
        return None
    return (install, hook) if callable(hook) else None


def collect(task: str, fn: Callable[..., Any], name: str, calls: Any,
            convert: Callable[[Any], Any] | None = None) -> tuple[tuple[object, CheckFailed | None], ...]:
    """The call pass of a check that calls first and judges afterwards (review rev25-r3 E6, rev25-r7 E1): ``fn(*args)``
    for each ``args`` of ``calls``, up to the first that raised, as a tuple of :func:`answer_of` pairs, built by
    rebinding a tuple (a write to ``frame.f_locals`` does not reach a function's locals in CPython 3.11, and a tuple
    of frozen values cannot be changed in place). The check then judges these against cases it makes *after* this
    returns, from its constants, never against the objects it handed the answer (which the answer's function could
    change, as it could any list or dict the check held while it ran). Under the grader the guard's comparison runs
    at the end (:func:`compare_now`): a module global or a function's code swapped during the calls, to be put back
    when the check calls it while it judges, is seen there (review rev25-r8 E1)."""
    answers: tuple = ()
    for args in tuple(tuple(args) for args in calls):  # taken before the first call: no later case can be swapped
        answers = (*answers, answer_of(task, fn, name, args, convert))
        if answers[-1][1] is not None:
            break
    compare_now()
    return answers


def call(task: str, fn: Callable[..., Any], name: str, *args: Any, **kwargs: Any) -> Any:
    """Call the learner's ``fn``; turn a stub or any exception into a readable failure. Under the grader's guard the
    call's start and end are noted (a thread ``fn`` starts that ends, joined or finished, before it returns is its own
    work:
    ``ampcourse.grading.guard_hazards``)."""
    return noted_call(_call, task, fn, name, *args, **kwargs)


def noted_call(fn: Callable[..., Any], *args: Any, plain_as: tuple[str, str] | None = None, **kwargs: Any) -> Any:
    """``fn(*args, **kwargs)`` as it is (what it raises is raised), with the call's start and end noted for the
    grader's guard, as :func:`call` does: for a check that handles the learner's exceptions itself (a ValueError
    it requires, a hook DDP calls). Every call of a learner's function goes through one of the two (review rev25-r4
    E5: a thread the answer joins before it returns was "still running after your function returned" otherwise).
    With ``plain_as=(task, name)`` what it returns goes through :func:`plain` (a check that uses the value must ask
    for it: review rev25-r6 E1); a refusal is raised as the check's failure, inside the noted call."""
    began = time.monotonic()
    got = None
    try:
        got = fn(*args, **kwargs)
        return got if plain_as is None else plain(plain_as[0], got, plain_as[1])
    finally:
        run = _guard_run()
        if run is not None and isinstance(run.get("calls"), list):
            run["calls"].append((began, time.monotonic()))
        keep(args, kwargs, got)


def keep(*objects: Any) -> None:
    """Under the grader, keep ``objects`` (what a check handed the answer, what it returned) alive until the guard's
    verify, which lets them go before its own comparison: a finalizer the answer hung on them (``__del__``,
    ``weakref.finalize``) runs where that comparison sees what it did, never between the end of the call pass
    (:func:`compare_now`) and :func:`passed` (review rev25-r9 E3: a self-undoing swap of
    ``lesson00._tensor_bytes_cases`` from the ``__del__`` of an object hung on a case's tensor). :func:`noted_call`
    keeps what it passes and returns; outside the grader, nothing is kept. The cost (review rev25-r10 W4, on the CPU,
    the first right answer of each check of lessons 01-11): at most 243 KiB of tensor storage reachable from what is
    kept, graphs included and most of it the check's own objects, alive anyway (lesson 10's ``block_cast``; lesson
    09's ``train_window``, 9 calls: 6 KiB). Everything is kept, not only what a finalizer could be hung on: the
    answer can hang one on any object it is handed or returns (``del_swap`` in tests/review_forgeries.py)."""
    run = _guard_run()
    if run is not None and isinstance(run.get("kept"), list):
        run["kept"].append(objects)


def call_named(task: str, fn: Callable[..., Any], name: str, *args: Any, fields: tuple[str, ...],
               misplaced: list[tuple[str, ...]] | None = None, **kwargs: Any) -> Any:
    """:func:`call`, with a namedtuple answer whose fields include every name of ``fields`` read by those names: a
    dict of them (then :func:`plain`), so a check that reads a dict by its keys reads ``Diagnosis(kind=...,
    fix=..., where=...)`` by name too, whatever the fields' order. A namedtuple named otherwise (``Ans(kind, module,
    fix)``) is a tuple, read by position, as :func:`plain` makes it (review rev24-r10: it was refused). With
    ``misplaced`` (a list), the field names of such a namedtuple that names some of ``fields`` at other positions
    than theirs (``H(where, kind, remedy)``) are appended to it, so that the check can say so if reading it by
    position fails (review rev24-r11 N1: it blamed the value)."""
    return noted_call(_call, task, _NamedFields(fn, fields, misplaced), name, *args, **kwargs)


def _namedtuple_fields(value: object) -> dict | None:
    """A namedtuple's fields as a dict, else None: the names from its class's own ``__dict__`` (read with ``type``'s
    slots), the values with ``tuple``'s C iteration, so none of the answer's methods runs."""
    kind = type(value)
    mro = _TYPE_MRO(kind)
    if kind is tuple or tuple not in mro:
        return None
    fields = next((_TYPE_DICT(c)["_fields"] for c in mro if "_fields" in _TYPE_DICT(c)), None)
    items = tuple(tuple.__iter__(value))
    if (type(fields) is not tuple or len(fields) != len(items) or not all(type(f) is str for f in fields)
            or len(set(fields)) != len(fields)):
        return None
    return dict(zip(fields, items, strict=True))


class _NamedFields:
    """The learner's function, its namedtuple result holding every name of ``fields`` turned into a dict of its
    fields (:func:`call_named`)."""

    def __init__(self, fn: Callable[..., Any], fields: tuple[str, ...],
                 misplaced: list[tuple[str, ...]] | None = None) -> None:
        self.fn, self.fields, self.misplaced = fn, fields, misplaced

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        value = self.fn(*args, **kwargs)
        named = _namedtuple_fields(value)
        if named is None:
            return value
        if all(f in named for f in self.fields):
            return named
        names = tuple(named)
        if self.misplaced is not None and any(f in self.fields and self.fields.index(f) != i
                                              for i, f in enumerate(names)):
            self.misplaced.append(names)
        return value


def _guard_run() -> dict | None:
    """The grader's record of the check now running (``ampcourse.grading.guard_reset``), None outside the grader."""
    guard = sys.modules.get("_ampcourse_grader_guard")
    run = vars(guard).get("state", {}).get("run") if isinstance(guard, type(sys)) else None
    return run if isinstance(run, dict) else None


def _call(task: str, fn: Callable[..., Any], name: str, *args: Any, **kwargs: Any) -> Any:
    try:
        got = fn(*args, **kwargs)
        keep(got)  # the object itself, which plain() may replace by its content
        return plain(task, got, name)
    except NotImplementedError as err:
        if not _a_stub(err):  # torch's own (an op without a kernel for a dtype): a failure (review rev25-r6 W2)
            raise fail(task, raised_message(name, err)) from None
        task_text = f" (the task: {err})" if str(err).strip() else ""  # a bare `raise NotImplementedError`
        raise NotStarted(
            f"{FAIL_MARK} {task}: not started — `{name}` still raises NotImplementedError. "
            f"Replace the `raise NotImplementedError(...)` line with your code{task_text}. "
            "Hints appear after your first attempt."
        ) from None
    except CheckFailed:
        raise
    except Exception as err:  # noqa: BLE001 - anything the learner's code raises is reported
        raise fail(task, raised_message(name, err)) from None
    except BaseException as err:  # noqa: BLE001 - KeyboardInterrupt, SystemExit, other BaseExceptions of the answer
        raise _ended(task, f"`{name}`", err) from None


def _ended(task: str, who: str, err: BaseException) -> CheckFailed:
    """The failure for a ``KeyboardInterrupt``/``SystemExit`` (any ``BaseException`` but an ``Exception``) that ``who``
    (the learner's function, or the ``__repr__`` of what it returned) raised."""
    if isinstance(err, KeyboardInterrupt):
        return fail(task, f"{who} was interrupted (KeyboardInterrupt): it ran until it was stopped — a loop "
                          "that never ends? (or your answer raises KeyboardInterrupt itself: don't)")
    return fail(task, f"{who} raised {type(err).__name__}{': ' + str(err) if str(err) else ''}, which ends a "
                      "program rather than reporting an error: don't call sys.exit()/exit() or raise it in your "
                      "answer; return the value the task asks for.")


def _a_stub(err: BaseException) -> bool:
    """Whether ``err`` was raised by a ``raise`` statement of code outside torch, numpy and the standard library (the
    learner's stub), not by torch (its Python code, or a C kernel missing for a dtype, raised inside the learner's
    own line)."""
    import dis
    import sysconfig

    tb = err.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    if tb is None:
        return True
    code = tb.tb_frame.f_code
    raw = code.co_code
    if not (0 <= tb.tb_lasti < len(raw)) or raw[tb.tb_lasti] != dis.opmap["RAISE_VARARGS"]:
        return False  # raised from C inside an operation of that line, not by its `raise`
    roots = {sysconfig.get_paths()[k] for k in ("stdlib", "purelib", "platlib")}
    return not any(code.co_filename.startswith(root) for root in roots if root)


def raised_message(name: str, err: BaseException) -> str:
    """A readable sentence for an exception the learner's code raised (torch's common ones explained)."""
    text = str(err).strip().splitlines()[0] if str(err).strip() else ""
    explained = [
        ("must have the same dtype", "two tensors of different dtypes met in one operation outside autocast "
                                     "(autocast casts them for you inside its region; outside, cast yourself)"),
        # torch raises two "No inf checks" texts with different causes (torch/amp/grad_scaler.py): keep them apart
        ("No inf checks were recorded for this optimizer", "`scaler.step(optimizer)` found no gradients to check: no "
                                                           "parameter of the optimizer has a `.grad` (backward never "
                                                           "ran, ran on a loss these parameters are not part of, or "
                                                           "the gradients were cleared (zero_grad) between backward "
                                                           "and step)"),
        ("No inf checks were recorded prior to update", "`scaler.update()` found no inf check to use: it ran "
                                                        "twice in one step, or before `scaler.step(optimizer)`. Call "
                                                        "it once per step, right after `scaler.step(optimizer)`"),
        ("but _scale is None", "the scaler was asked to unscale, step or update (`unscale_`, `step`, `update`) "
                               "but the loss never went through `scaler.scale(loss)`: backward must run on "
                               "`scaler.scale(loss)`"),
        ("is being called after step()", "`scaler.update()` did not run after the previous `scaler.step`: call "
                                         "it once per step, right after `scaler.step(optimizer)`"),
        ("unscale_() has already been called", "`scaler.unscale_(optimizer)` ran twice in one step: call it once, "
                                               "after the last backward and before clipping"),
        ("Attempting to unscale FP16 gradients", "the parameters themselves are float16 (`.half()` on the "
                                                 "model): autocast needs float32 weights"),
        ("does not require grad", "backward ran on a tensor with no graph: compute the loss from the model's "
                                  "output, inside the function, without `torch.no_grad()` or `.detach()`"),
    ]
    for needle, meaning in explained:
        if needle in text:
            return f"`{name}` raised {type(err).__name__}: {meaning}."
    return (f"`{name}` raised {type(err).__name__}: {text[:200]}. Run it by hand on a small input to see "
            "where it breaks.")


def _show_without_traceback(shell, etype, value, tb, tb_offset=None):
    """IPython custom-exception handler: show the message alone; the cell still fails."""
    stb = [f"{etype.__name__}: {with_hint(value) if isinstance(value, CheckFailed) else value}"]
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
