"""Review rev25-r3 of the grading guard: the rules that need no kernel, tested in this process.

The forgeries themselves run in both graders from ``tests/review_forgeries.py`` (tests/test_grading_integrity.py,
tests/test_pytest_plugin.py); here: the pass record (E1), torch's own wrappers told from a spoof (E7), thread code
judged by the code compiled from its file (E4), threads started during a check (E5), course classes (E3), and the
nits' wordings (N1, N3, N5). Review rev25-r4: every learner call noted (E5, an AST scan), a guarded function's
``__dict__`` and ``__wrapped__`` chain (E4), library code run with other globals and the started-thread note (E2),
the claimed-file wording (N2).
"""

import dataclasses
import functools
import sys
import threading
import types
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch

from ampcourse import grading
from ampcourse.checks import CheckFailed, NotStarted, call, lesson03, passed


@pytest.fixture
def guard(monkeypatch):
    """The guard's kernel-side state (``grading._GUARD``), empty, with the thread roots of this process."""
    monkeypatch.setattr(grading, "_GUARD", {})
    grading._GUARD["roots"] = grading._code_roots()
    return grading._GUARD


def test_a_pass_is_recorded_with_its_callers_code_and_globals(monkeypatch):
    """E1: ``passed`` notes the nonce, the task and who called it; outside the grader it records nothing."""
    passed("Task 1 (x)", "fine")  # no guard module: nothing to record, no error
    state = {"run": {"nonce": "n1", "ran": [], "calls": []}}
    module = types.ModuleType("_ampcourse_grader_guard")
    module.state = state
    monkeypatch.setitem(sys.modules, "_ampcourse_grader_guard", module)

    def check():
        passed("Task 1 (x)", "fine")

    check()
    [(nonce, task, code, space)] = state["run"]["ran"]
    assert (nonce, task, code, space) == ("n1", "Task 1 (x)", check.__code__, globals())
    call("Task 1 (x)", lambda: 1, "f")
    assert len(state["run"]["calls"]) == 1 and state["run"]["calls"][0][0] <= state["run"]["calls"][0][1]


def test_a_check_cell_without_the_real_checks_record_never_passes():
    """E1: the ✓ line alone (a check cell rewritten to print it) is not a pass; the record of its own task is."""
    task = "Task 2 · Your first autocast region"
    line = "✓ Task 2: ok\n"
    assert grading.output_problem(task, "ok", line, [], []) == grading.NOT_RUN
    assert grading.NOT_RUN.startswith("cannot be graded") and "rewrote the check cell" in grading.NOT_RUN
    assert grading.output_problem(task, "ok", line, [], ["Task 1 (tensor_bytes)"]) == grading.NOT_RUN
    assert grading.output_problem(task, "ok", line, [], ["Task 20 (x)"]) == grading.NOT_RUN
    assert grading.output_problem(task, "ok", line, [], ["Task 2 (amp_forward)"]) is None
    assert grading.output_problem(task, "error", "", [("CheckFailed", "x")], []) is None  # failed on its own


def test_the_compiler_and_the_transformer_manager_are_guarded():
    """E1: the objects on IPython's path the review rewrote a check cell through."""
    assert {"ast_parse", "__call__", "cache"} <= set(grading.GUARDED_METHODS["shell.compile"])
    assert "transform_cell" in grading.GUARDED_METHODS["shell.input_transformer_manager"]
    assert "compile" in grading.GUARDED_METHODS["shell"]


def test_torchs_own_wrappers_are_told_from_a_spoof(guard):
    """E7: a replacement with torch's file name and ``__wrapped__`` is a change; the wrappers torch installs are not."""
    import torch._dynamo  # noqa: F401 - wraps torch.manual_seed (torch/_dynamo/__init__.py)

    seed = torch.random.manual_seed
    assert grading._torch_wrapper(torch.manual_seed, seed, "manual_seed")

    class Opt(torch.optim.SGD):
        def step(self, closure=None):
            return super().step(closure)

    own_step = Opt.__dict__["step"]
    Opt([torch.zeros(1, requires_grad=True)])  # the first instance wraps the class's step (profile_hook_step)
    assert Opt.__dict__["step"] is not own_step and grading._torch_wrapper(Opt.__dict__["step"], own_step, "step")

    def kernel(*args):
        return None

    kernel.__code__ = kernel.__code__.replace(co_filename=torch.__file__)
    kernel.__wrapped__ = seed
    assert not grading._torch_wrapper(kernel, seed, "manual_seed")
    # torch's real wrapper code, but over something else (or under another name), is no wrapper of `seed` either
    assert not grading._torch_wrapper(torch.manual_seed, torch.random.seed, "manual_seed")
    assert not grading._torch_wrapper(torch.manual_seed, seed, "element_size")


def test_thread_code_is_judged_by_what_it_is_not_the_file_it_claims(guard):
    """E4: a cell's function renamed to threading.py is the learner's code; a pool worker is library code."""
    def _w():
        return None

    spoof = threading.Thread(target=types.FunctionType(_w.__code__.replace(co_filename=threading.__file__), {}))
    assert grading._thread_code(spoof)[0] == "cell"
    with ThreadPoolExecutor(1) as pool:
        pool.submit(lambda: None).result()
        worker = next(t for t in threading.enumerate() if t.name.startswith("ThreadPoolExecutor"))
        assert grading._thread_code(worker) == ("library", "")


def test_a_thread_started_during_the_check_is_judged_finished_or_not(guard, monkeypatch):
    """E5: the recorder notes each start with its target; a thread the answer's call joined is its own work."""
    starts = guard["starts"] = []
    monkeypatch.setattr(threading, "_start_new_thread", grading._thread_starter(threading._start_new_thread, starts))
    guard["run"] = {"calls": []}
    guard.update(threads=set(), hooks={"sys.settrace": sys.gettrace(), "sys.setprofile": sys.getprofile(),
                                       "threading.settrace": threading.gettrace(),
                                       "threading.setprofile": threading.getprofile()},
                 audit=[], starters={}, **{"hidden threads": 10**6})
    monkeypatch.setattr(grading, "_thread_entry_points", lambda: [])

    def undo():
        return None

    thread = threading.Thread(target=undo)
    thread.start()
    thread.join()
    [entry] = starts
    assert entry[3][0] is undo and entry[5] is not None  # the target as it was, and when it ended
    found = grading.guard_hazards(notes=False)
    assert any("undo" in h and h.endswith(grading.STARTED_IN_CHECK) for h in found), found
    assert "your code started" in grading.cannot_grade(found)
    guard["run"]["calls"].append((entry[4] - 1, entry[5] + 1))  # the answer's function started and joined it
    assert not any("undo" in h for h in grading.guard_hazards(notes=False))


@dataclasses.dataclass(frozen=True)
class _Row:
    dtype: str


def test_a_course_class_changed_in_place_is_seen_and_put_back():
    """E3: a property put on a frozen dataclass, a method replaced, a method's code replaced in place."""
    class Spy:
        def step(self):
            return "real"

    saved = grading._class_state(Spy)
    real_code = Spy.step.__code__
    Spy.step.__code__ = (lambda self: "forged").__code__
    assert grading._class_changes("m.Spy", saved, restore=True) == ["m.Spy.step"]
    assert Spy().step() == "real" and Spy.step.__code__ is real_code
    saved = grading._class_state(_Row)
    _Row.dtype = property(lambda s: "bfloat16", lambda s, v: None)
    assert grading._class_changes("m._Row", saved, restore=True) == ["m._Row.dtype"]
    assert "dtype" not in vars(_Row) and _Row("float16").dtype == "float16"
    assert grading._class_changes("m._Row", saved, restore=False) == []


def test_the_cannot_be_graded_sentence_fits_each_kind_of_hazard():
    """N1: a value the grader could not put back is not "left running"."""
    value = grading.cannot_grade([f"{grading.LEFT_VALUE}ampcourse.checks.facts.BYTES_PER_ELEMENT (its values))"])
    assert "changed ampcourse.checks.facts.BYTES_PER_ELEMENT (its values), which the grader could not put back" \
        in value and "running" not in value
    hook = grading.cannot_grade(["a sys.settrace hook"])
    assert "left a sys.settrace hook running" in hook


def test_a_bare_not_implemented_error_gives_no_empty_parenthesis():
    """N5: ``raise NotImplementedError`` without a message."""
    def stub():
        raise NotImplementedError

    with pytest.raises(NotStarted) as info:
        call("Task 2 (amp_forward)", stub, "amp_forward")
    assert "(the task: )" not in str(info.value) and "with your code. Hints" in str(info.value)


def test_one_wrong_key_is_not_called_one_of_several():
    """N3: "1 of 6 wrong. One: ..." read as if there were more."""
    right = lesson03.observed_dtypes()
    wrong = dict(right, loss=torch.bfloat16)
    with pytest.raises(CheckFailed) as info:
        lesson03.predict_dtypes(lambda: wrong)
    assert "1 of 6 wrong. 'loss'" in str(info.value) and "One:" not in str(info.value)


def test_dynamos_own_patch_of_a_course_module_class_is_not_a_change(guard):
    """E3 beside torch.compile: dynamo's ``ensure_patched`` wraps an nn.Module subclass's inherited ``__setattr__``
    and flags the class (torch/_dynamo/mutation_guard.py); on a course class that is no forgery."""
    from torch._dynamo import mutation_guard

    class Model(torch.nn.Module):
        pass

    saved = grading._class_state(Model)
    mutation_guard.ensure_patched(Model)
    assert {"__setattr__", "___needs_mutation_patch"} <= set(vars(Model))
    assert grading._class_changes("m.Model", saved, restore=False) == []
    Model.__setattr__ = lambda self, k, v: None  # anything else still is
    assert grading._class_changes("m.Model", saved, restore=False) == ["m.Model.__setattr__"]


def test_every_check_calls_the_learners_function_through_call():
    """Review rev25-r4 E5: a check that calls the learner's ``fn`` itself notes no call interval, so a thread the
    answer joins before it returns was judged "still running after your function returned". An AST scan of every
    check module (review rev25-r5 N1: widened): in every function with a parameter ``fn``, and any name bound from it
    (``hook = fn``), a call of it (``fn(...)``), of its attribute (``fn.method(...)``), or passing it to a callable
    other than ``call``/``noted_call``/``require_callable``/``collect``/``answer_of``, inspection
    (``inspect.getsource``, ``getattr``) or a
    check module's own function taking ``fn`` (itself scanned) — ``functools.partial(fn)``, ``map(fn, ...)`` — is
    flagged. Not seen: a callable the answer returned, or a learner object's methods (an object a check receives
    is the check's to handle)."""
    import ast
    from pathlib import Path

    paths = sorted((Path(grading.ROOT) / "ampcourse" / "checks").glob("lesson*.py"))
    trees = {path: ast.parse(path.read_text(encoding="utf-8")) for path in paths}
    inspection = {"isfunction", "getsource", "getattr", "signature", "getclosurevars"}  # these do not call it
    # checks.collect/answer_of call it through call (review rev25-r7 E1)
    takes_fn = {"call", "call_named", "noted_call", "require_callable", "collect", "answer_of", *inspection} | {
        f.name for tree in trees.values() for f in ast.walk(tree)
        if isinstance(f, ast.FunctionDef) and "fn" in [a.arg for a in f.args.args]}
    direct = []
    for path, tree in trees.items():
        for function in ast.walk(tree):
            if not isinstance(function, ast.FunctionDef) or "fn" not in [a.arg for a in function.args.args]:
                continue
            names = {"fn"}
            for node in ast.walk(function):
                if isinstance(node, ast.Assign) and isinstance(node.value, ast.Name) and node.value.id in names:
                    names |= {t.id for t in node.targets if isinstance(t, ast.Name)}
            for node in ast.walk(function):
                if not isinstance(node, ast.Call):
                    continue
                callee = node.func
                if isinstance(callee, ast.Name) and callee.id in names:
                    direct.append(f"{path.name}:{node.lineno} calls it")
                elif isinstance(callee, ast.Attribute) and isinstance(callee.value, ast.Name) \
                        and callee.value.id in names:
                    direct.append(f"{path.name}:{node.lineno} calls its attribute")
                elif any(isinstance(a, ast.Name) and a.id in names
                         for a in [*node.args, *(k.value for k in node.keywords)]):
                    name = callee.id if isinstance(callee, ast.Name) else getattr(callee, "attr", "")
                    if name not in takes_fn:
                        direct.append(f"{path.name}:{node.lineno} passes it to {name or 'a callable'}")
    assert direct == [], direct


def test_noted_call_notes_the_interval_and_raises_what_the_answer_raises(monkeypatch):
    """E5: ``noted_call`` is ``call`` without the readable failure (a check that requires a ValueError)."""
    from ampcourse.checks import noted_call

    module = types.ModuleType("_ampcourse_grader_guard")
    module.state = {"run": {"nonce": "n", "ran": [], "calls": []}}
    monkeypatch.setitem(sys.modules, "_ampcourse_grader_guard", module)

    def refuses(x):
        raise ValueError("x")

    with pytest.raises(ValueError):
        noted_call(refuses, 1)
    assert noted_call(abs, -2) == 2
    assert len(module.state["run"]["calls"]) == 2


def test_a_functions_dict_is_guarded_and_dynamos_own_cache_is_not_a_change(guard):
    """Review rev25-r4 E4: ``Optimizer.zero_grad`` dispatches through ``zero_grad.__wrapped__.__dynamo_disable``;
    torch caches its own there at the first call (accepted), anything else is a change, and the reset deletes it."""
    zero_grad = torch.optim.Optimizer.zero_grad
    wrapped = zero_grad.__wrapped__
    saved = dict(vars(wrapped))
    try:
        vars(wrapped).pop("__dynamo_disable", None)
        chain = grading._function_dicts(zero_grad)
        assert [fn for fn, _ in chain] == [zero_grad, wrapped]
        torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=0.1).zero_grad()  # torch's own cache
        assert "__dynamo_disable" in vars(wrapped)
        assert grading._function_dict_changes("O", "zero_grad", chain, restore=False) == []
        wrapped.__dynamo_disable = lambda self, set_to_none=True: None  # a forgery's
        assert grading._function_dict_changes("O", "zero_grad", chain, restore=True) == [
            "O.zero_grad.__wrapped__.__dynamo_disable"]
        assert grading._function_dict_changes("O", "zero_grad", chain, restore=False) == []
    finally:
        vars(wrapped).clear()
        vars(wrapped).update(saved)


def test_library_code_run_with_other_globals_is_the_learners_and_a_claimed_file_is_named_as_claimed(guard):
    """Review rev25-r4 E2: threading's own ``_newname`` code made into a function with the answer's globals runs the
    answer's ``_counter``; N2: a code object claiming a library file is named as claiming it."""
    forged = types.FunctionType(threading._newname.__code__, {"_counter": lambda: 0, "__builtins__": __builtins__})
    assert grading._thread_code(function=forged, args=("%d",)) == (
        "cell", "_newname (code of threading.py run with other globals)")
    assert grading._thread_code(function=threading._newname, args=("%d",)) == ("library", "")

    def _w():
        return None

    spoof = types.FunctionType(_w.__code__.replace(co_filename=threading.__file__), globals())
    assert grading._thread_code(function=spoof) == ("cell", "_w (code claiming threading.py, not that file's)")


def test_a_library_thread_the_answer_started_during_the_check_is_a_note():
    """Review rev25-r4 E2: a ThreadPoolExecutor's worker started from the answer's code while the check ran: what it
    was handed is not seen, so it is said, never silently passed; a thread of the answer's own code still blocks."""
    started = f"{grading.STARTED_NOTE}ThreadPoolExecutor-0_0, from tensor_bytes in 1.py)"
    reason, notes = grading.guard_verdict([], [], [], [started])
    assert reason is None and any(n.startswith(started) and "is not seen" in n for n in notes), notes
    own = f"{grading.CELL_THREAD}Thread-1: undo in 1.py{grading.STARTED_IN_CHECK}"
    reason, _ = grading.guard_verdict([], [], [], [started, own])
    assert reason.startswith("cannot be graded") and "undo in 1.py" in reason


# --- review rev25-r6 -------------------------------------------------------------------------------------------------
def _refusal(value) -> str | None:
    from ampcourse.checks import plain

    try:
        plain("Task 1 (f)", value, "f")
    except CheckFailed as failed:
        return str(failed)
    return None


def test_plain_turns_value_type_subclasses_into_their_content():
    """M1: a namedtuple, torch's result tuples (structseqs), ``sys.float_info``, an IntEnum, a str subclass equal to
    everything: each becomes its built-in content (read with the base type's C method), so none of its methods
    runs in the judgement and an honest one passes."""
    import collections
    import enum

    from ampcourse.checks import plain

    update = collections.namedtuple("Update", "scale tracker")
    for value, want in ((update(2048.0, 0), (2048.0, 0)), (torch.aminmax(torch.tensor([1.0, 3.0])), None),
                        (torch.max(torch.tensor([[1.0, 3.0]]), dim=1), None), (sys.float_info, tuple(sys.float_info))):
        got = plain("Task 1 (f)", value, "f")
        assert type(got) is tuple and len(got) == len(value), (value, got)
        assert want is None or got == want

    class Level(enum.IntEnum):
        HIGH = 3

    class Always(str):
        def __eq__(self, other):
            return True

        __hash__ = str.__hash__

    assert type(plain("T", Level.HIGH, "f")) is int and plain("T", Level.HIGH, "f") == 3
    got = plain("T", {"kind": Always("overflow"), "n": [Always("x")]}, "f")
    assert type(got["kind"]) is str and got["kind"] != "nan" and type(got["n"][0]) is str
    same = [1, (2.0, "a"), {"k": None}]
    assert plain("T", same, "f") is same  # nothing to convert: the answer's own object, unchanged


def test_plain_reads_class_facts_from_types_own_slots_and_library_classes_by_identity():
    """E2: a metaclass ``__flags__``/``__mro__`` property, a ``__module__`` naming a library (with the class put into
    that module, or a module of its own made up), and a ``__class__`` property do not make an object plain."""
    import fractions
    import types as types_module

    class Flags(type):
        __flags__ = property(lambda cls: 0)

    class Mro(type):
        __mro__ = property(lambda cls: (object,))

    class EqFlags(metaclass=Flags):
        def __eq__(self, other):
            return True

    class PosingAsStr(metaclass=Mro):
        __class__ = property(lambda self: str)

        def __eq__(self, other):
            return True

        __hash__ = object.__hash__

    class ClaimsFractions:
        def __float__(self):
            return 1.0

    ClaimsFractions.__module__ = "fractions"
    fractions.ClaimsFractions = ClaimsFractions

    class ClaimsNumpy:
        def __eq__(self, other):
            return True

        __hash__ = object.__hash__

    ClaimsNumpy.__module__ = "numpy._fake"
    sys.modules["numpy._fake"] = types_module.SimpleNamespace(ClaimsNumpy=ClaimsNumpy)
    try:
        assert "an object of type `EqFlags`, whose class defines `__eq__`" in _refusal(EqFlags())
        assert "`PosingAsStr`, whose class defines `__eq__`, `__class__`" in _refusal(PosingAsStr())
        assert "`ClaimsFractions`, whose class defines `__float__`" in _refusal(ClaimsFractions())
        assert "`ClaimsNumpy`, whose class defines `__eq__`" in _refusal((1, ClaimsNumpy()))
        assert "(inside the tuple it returned)" in _refusal((1, ClaimsNumpy()))
    finally:
        del sys.modules["numpy._fake"], fractions.ClaimsFractions
    # M1: a type refusal shows no hint tier of the task (its hints are about the algorithm)
    from ampcourse.checks import lesson04, plain, with_hint

    with pytest.raises(CheckFailed) as failed:
        plain("Task 2 (update_scale)", (EqFlags(), 0), "update_scale")
    assert failed.value.hint_key is None and "Hint" not in with_hint(failed.value)
    assert lesson04.HINTS["update_scale"]
    # N1: no "a I" / "a Update": a class's name is quoted after "an object of type"
    assert " a I," not in _refusal(EqFlags()) and "returned an object of type" in _refusal(EqFlags())


def test_plain_refuses_a_tensor_with_a_method_shadowed_and_containers_it_cannot_read():
    """E3: ``t.float = ...`` on an exact tensor is refused (a buffer's ``persistent``, a ``retain_grad`` output's
    empty ``__dict__``, a Parameter pass); E4: a ChainMap or mappingproxy (lesson 11 Task 1's forgery carried str
    subclasses in one), an iterator, nesting past 20 are refused with what to return instead."""
    import collections
    import types as types_module

    from ampcourse.checks import plain

    shadowed = torch.zeros(2)
    shadowed.float = lambda: torch.ones(2)
    assert "a torch.Tensor with `float` set on it as an attribute of its own" in _refusal(shadowed)
    assert _refusal(torch.nn.Buffer(torch.zeros(1))) is None and _refusal(torch.nn.Parameter(torch.ones(1))) is None
    out = torch.ones(2, requires_grad=True) * 2
    out.retain_grad()
    assert plain("T", out, "f") is out
    answer = {"kind": "overflow", "where": "nowhere", "fix": "mean_loss"}
    assert "a ChainMap: return a plain dict (`dict(result)`)" in _refusal(collections.ChainMap(answer))
    assert "a mappingproxy: return a plain dict" in _refusal(types_module.MappingProxyType(answer))
    assert "an iterator (a generator)" in _refusal(x for x in (1, 2))
    import numpy as np

    assert "a numpy array of Python objects (dtype=object)" in _refusal(np.array([1, "a"], dtype=object))
    assert _refusal(np.ones(2)) is None
    assert "`UserString`, whose class defines `__eq__`" in _refusal(collections.UserString("healthy"))
    nested: list = []
    for _ in range(30):
        nested = [nested]
    assert "nested more than 20 levels deep" in _refusal(nested)


def test_exact_number_takes_every_numpy_float_and_a_tracker_with_a_fraction_is_named():
    """M1: numpy's float16/float32/longdouble scalars are numbers (numpy's own C conversion); W1: lesson 04 names a
    growth tracker of 1.5 instead of truncating it to 1."""
    import numpy as np

    from ampcourse.checks import exact_number, lesson04

    for kind in (np.float16, np.float32, np.float64, np.longdouble):
        assert type(exact_number(kind(1.5))) is float and exact_number(kind(1.5)) == 1.5
    assert exact_number(np.bool_(True)) is None and exact_number(np.complex64(1)) is None
    assert lesson04._as_pair((np.float32(2048.0), 0)) == ((2048.0, 0), None)
    assert lesson04._as_pair((1024.0, 1.0)) == ((1024.0, 1), None)
    pair, problem = lesson04._as_pair((1024.0, 1.5))
    assert pair is None and "the growth tracker counts steps, a whole number: you returned 1.5" in problem


def test_torchs_own_not_implemented_error_is_a_failure_not_a_stub():
    """W2: only a ``raise`` of the learner's own code is "not started"; torch's kernel missing for a dtype is named."""
    def stub(x):
        raise NotImplementedError("scale, then cast")

    def float8_multiply(x):
        return x.to(torch.float8_e4m3fn) * 0

    with pytest.raises(NotStarted, match="not started"):
        call("Task 1 (f)", stub, "f", torch.ones(2))
    with pytest.raises(CheckFailed) as failed:
        call("Task 1 (f)", float8_multiply, "f", torch.ones(2))
    assert not isinstance(failed.value, NotStarted) and "raised NotImplementedError" in str(failed.value)


def test_noted_call_converts_when_asked():
    """E1: ``noted_call(..., plain_as=(task, name))`` hands back plain values, and refuses what plain refuses."""
    import collections

    from ampcourse.checks import noted_call

    pair = collections.namedtuple("Pair", "a b")
    assert type(noted_call(lambda: pair(1, 2), plain_as=("Task 1 (f)", "f"))) is tuple
    assert type(noted_call(lambda: pair(1, 2))) is pair  # not asked: as it is (a check that only reads its type)
    shadowed = torch.zeros(1)
    shadowed.item = lambda: 1.0
    with pytest.raises(CheckFailed, match="`item` set on it"):
        noted_call(lambda: shadowed, plain_as=("Task 1 (f)", "f"))


def test_every_noted_call_whose_value_is_used_converts_it():
    """E1: an AST scan: ``x = noted_call(fn, ...)`` in a check module without ``plain_as`` is flagged, except where
    the value's real type alone is read (listed here with why)."""
    import ast
    from pathlib import Path

    only_type_read = {("lesson08.py", "result"),  # the DDP hook's Future: issubclass(type(result), Future), then()
                      ("lesson10.py", "result")}  # an empty history must raise: only type(result).__name__ is shown
    flagged = []
    for path in sorted((Path(grading.ROOT) / "ampcourse" / "checks").glob("lesson*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not (isinstance(node, ast.Assign) and isinstance(node.value, ast.Call)
                    and getattr(node.value.func, "id", None) == "noted_call"):
                continue
            if any(k.arg == "plain_as" for k in node.value.keywords):
                continue
            for target in node.targets:
                if isinstance(target, ast.Name) and (path.name, target.id) not in only_type_read:
                    flagged.append(f"{path.name}:{node.lineno} {target.id}")
    assert flagged == [], flagged


def test_gc_callbacks_and_torch_modes_left_by_an_answer_are_hazards(guard):
    """E5: code that runs inside the judgement without a thread: a gc callback, a changed gc threshold, a torch
    function or dispatch mode left entered; ``torch.set_default_device``'s own mode is not one."""
    import gc

    from torch.overrides import TorchFunctionMode
    from torch.utils._python_dispatch import TorchDispatchMode

    class Equal(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            return func(*args, **(kwargs or {}))

    class Spy(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            return func(*args, **(kwargs or {}))

    guard["gc"] = (list(gc.callbacks), gc.get_threshold())
    guard["modes"] = grading._mode_stacks()
    assert grading._code_without_a_thread() == []
    threshold = gc.get_threshold()
    callback = lambda phase, info: None  # noqa: E731
    torch.set_default_device("cpu")
    try:
        assert grading._code_without_a_thread() == []  # set_default_device's DeviceContext
        gc.callbacks.append(callback)
        gc.set_threshold(1, 1, 1)
        function_mode, dispatch_mode = Equal(), Spy()
        function_mode.__enter__()
        dispatch_mode.__enter__()
        try:
            found = grading._code_without_a_thread()
        finally:
            dispatch_mode.__exit__(None, None, None)
            function_mode.__exit__(None, None, None)
    finally:
        if callback in gc.callbacks:
            gc.callbacks.remove(callback)
        gc.set_threshold(*threshold)
        torch.set_default_device(None)
    assert found == ["a gc callback (gc.callbacks)",
                     f"a gc threshold of (1, 1, 1) (gc.set_threshold){grading.IN_EFFECT}",
                     f"a torch function mode (TorchFunctionMode: Equal){grading.IN_EFFECT}",
                     f"a torch dispatch mode (TorchDispatchMode: Spy){grading.IN_EFFECT}"]
    reason = grading.cannot_grade(found)
    assert reason.startswith("cannot be graded") and "left a gc callback (gc.callbacks) running" in reason
    assert "a torch function mode (TorchFunctionMode: Equal), a torch dispatch mode (TorchDispatchMode: Spy) " \
           "in effect, through which code of theirs can run inside the check" in reason
    assert grading._code_without_a_thread() == []


# --- review rev25-r7 ----------------------------------------------------------------------------------------------

def test_a_write_to_frame_f_locals_does_not_reach_a_functions_locals():
    """E1's premise, on this interpreter (CPython 3.11): ``frame.f_locals`` is a snapshot; what a callee writes into it
    does not rebind the caller's local (``checks.collect`` relies on it, with tuples that cannot change in place)."""
    def callee():
        sys._getframe(1).f_locals["answers"] = ("forged",)

    def caller():
        answers = ("mine",)
        callee()
        return answers

    assert caller() == ("mine",), ("on this Python a write to frame.f_locals reaches a function's locals (PEP 667, "
                                   "3.13+): checks.collect must keep its answers where a frame cannot rebind them")

    def tracer(frame, event, arg):  # but a trace event writes f_locals back: why answer_of refuses a trace left on
        if frame.f_code.co_name == "traced" and event == "line" and frame.f_locals.get("answers") == ("mine",):
            frame.f_locals["answers"] = ("forged",)
        return tracer

    def traced():
        answers = ("mine",)
        sys._getframe().f_trace = tracer
        sys.settrace(tracer)
        try:
            return answers
        finally:
            sys.settrace(before)

    before = sys.gettrace()
    assert traced() == ("forged",)


def test_a_trace_function_the_answer_leaves_to_rebind_collects_answers_fails_the_call():
    """E1: the answer sets ``sys.settrace`` and ``f_trace`` on collect's frame, so that a trace event there would
    rebind its tuple of answers: ``answer_of`` takes the hook out and fails the call, raised through collect."""
    from ampcourse.checks import collect

    def tracer(frame, event, arg):
        if frame.f_code.co_name == "collect" and event == "line":
            frame.f_locals["answers"] = (("forged", None),) * 3
        return tracer

    def answer(x):
        f = sys._getframe(1)
        while f.f_code.co_name != "collect":
            f = f.f_back
        f.f_trace = tracer
        sys.settrace(tracer)
        return x

    before = sys.gettrace()
    try:
        with pytest.raises(CheckFailed, match="set a trace or profile function"):
            collect("Task 1 (f)", answer, "f", [(1,), (2,)])
        assert sys.gettrace() is before
    finally:
        sys.settrace(before)


def test_collect_keeps_frozen_answers_that_the_answers_function_cannot_change():
    """E1: a function that reaches collect's frames and every list it can find there changes nothing collect
    returns; what is not a frozen value is kept as words only (a Returned)."""
    from ampcourse.checks import Returned, collect, frozen

    kept = []

    def answer(x):
        f = sys._getframe(1)
        while f is not None and str(f.f_globals.get("__name__")).startswith("ampcourse.checks"):
            for value in list(f.f_locals.values()):
                if isinstance(value, list):
                    value[:] = ["forged"] * len(value)
            f.f_locals["answers"] = (("forged", None),)
            f = f.f_back
        out = [x, x]
        kept.append(out)
        return out if x == 3 else (x, torch.float32)

    got = collect("Task 1 (f)", answer, "f", [(1,), (2,), (3,)])
    for out in kept:
        out.append("changed later")
    assert [a for a, _ in got[:2]] == [(1, torch.float32), (2, torch.float32)] and got[0][1] is None
    assert isinstance(got[2][0], Returned) and repr(got[2][0]) == "[3, 3]" and got[2][0].kind == "list"
    assert frozen(torch.ones(1)).tensor and frozen((1, "a", None, 2.5)) == (1, "a", None, 2.5)
    failed = collect("Task 1 (f)", lambda x: 1 // x, "f", [(1,), (0,), (2,)])
    assert len(failed) == 2 and failed[1][0] is None and "raised ZeroDivisionError" in str(failed[1][1])


def test_plain_refuses_subclasses_of_the_containers_it_cannot_read_and_reads_a_deque_subclass():
    """E3: ``class _Map(ChainMap): pass`` (and of mappingproxy's kin, SimpleNamespace) is refused like the class
    itself; a deque subclass becomes a deque of its converted items (a str subclass inside becomes a str)."""
    import collections

    from ampcourse.checks import plain

    class AnyStr(str):
        def __eq__(self, other):
            return True

        __hash__ = str.__hash__

    class Map(collections.ChainMap):
        pass

    class Space(types.SimpleNamespace):
        pass

    class Queue(collections.deque):
        pass

    assert "returned a Map (a ChainMap): return a plain dict" in _refusal(Map({"kind": AnyStr("overflow")}))
    assert "returned a Space (a SimpleNamespace): return a plain dict" in _refusal(Space(kind="overflow"))
    converted = plain("T", Queue([AnyStr("a"), 1]), "f")
    assert type(converted) is collections.deque and [type(v) for v in converted] == [str, int]


def test_plain_reads_a_mapping_of_the_answers_own_once_into_a_dict():
    """E4: a ``collections.abc.Mapping`` that is no dict becomes a plain dict of plain values in the call pass: its
    ``__getitem__`` runs there, never in the judgement."""
    from collections.abc import Mapping

    from ampcourse.checks import plain

    reads = []

    class Record(Mapping):
        def __iter__(self):
            return iter(("stepped", "loss"))

        def __len__(self):
            return 2

        def __getitem__(self, key):
            reads.append(key)
            return {"stepped": True, "loss": 0.5}[key]

    converted = plain("T", Record(), "f")
    assert type(converted) is dict and converted == {"stepped": True, "loss": 0.5} and reads == ["stepped", "loss"]


def test_plain_takes_a_fraction_only_with_two_ints_and_refuses_patched_library_classes():
    """E2: an exact Fraction holding the answer's object is refused (``float()`` of it would run the answer's
    ``__int__``); an honest Fraction, Decimal passes and ``real_number`` reads it by int's/the C type's own code; a
    library class whose ``__eq__`` an answer replaced (``enum.Enum``) is no longer trusted."""
    import decimal
    import enum
    import fractions

    from ampcourse.checks import plain, real_number

    class Num:
        def __int__(self):
            return 3

    forged = fractions.Fraction.__new__(fractions.Fraction)
    forged._numerator, forged._denominator = Num(), 1
    assert "a Fraction holding an object of type `Num` as its numerator" in _refusal(forged)
    assert plain("T", fractions.Fraction(3, 4), "f") == fractions.Fraction(3, 4)
    assert _refusal(decimal.Decimal(1)) is None
    assert real_number(fractions.Fraction(3, 4)) == 0.75 and type(real_number(decimal.Decimal("0.5"))) is float
    assert real_number(decimal.Decimal("NaN")) is None and real_number(True) is None and real_number("1") is None

    class Color(enum.Enum):
        RED = 1

    assert _refusal(Color.RED) is None
    original = enum.Enum.__dict__.get("__eq__")
    enum.Enum.__eq__ = lambda self, other: True
    try:
        assert "whose library class has had `Enum.__eq__` replaced" in _refusal(Color.RED)
    finally:
        if original is None:
            del enum.Enum.__eq__
        else:
            enum.Enum.__eq__ = original
    assert _refusal(Color.RED) is None


def test_plain_refuses_a_huge_shared_structure_at_once_and_a_dataclass_by_name():
    """W2: 17 levels of ``[x] * 20`` (20**17 paths) is refused in well under a second; N1: two str-subclass keys that
    are one string; M1: a dataclass is named as one, with the fix."""
    import time

    wide: list = [False]
    for _ in range(17):
        wide = [wide] * 20
    began = time.monotonic()
    assert "a structure too large to judge" in _refusal((torch.float32, wide))
    assert time.monotonic() - began < 2
    shared = [1.0] * 10
    assert _refusal([shared] * 100) is None  # 1,101 values, read once

    class Key(str):  # a key of its own in the answer's dict, the string "a" once read as a str
        def __eq__(self, other):
            return self is other

        __hash__ = object.__hash__

    assert "two keys that are the same string" in _refusal({Key("a"): 1, "a": 2})

    @dataclasses.dataclass
    class Pair:
        scale: float
        tracker: int

    assert "a dataclass (`Pair`" in _refusal(Pair(1.0, 0)) and "dataclasses.astuple(result)" in _refusal(Pair(1.0, 0))


def test_a_signal_handler_or_an_interval_timer_left_by_an_answer_is_a_hazard(guard):
    """W1: a SIGALRM handler of the learner's code runs between any two bytecodes of the check; an interval timer
    started since the guard was installed too."""
    import gc
    import signal

    guard["gc"] = (list(gc.callbacks), gc.get_threshold())
    guard["modes"] = grading._mode_stacks()
    guard["signals"] = grading._signal_state()
    assert grading._code_without_a_thread() == []
    before = signal.getsignal(signal.SIGALRM)
    signal.signal(signal.SIGALRM, lambda signum, frame: None)
    signal.setitimer(signal.ITIMER_REAL, 1000.0)
    try:
        found = grading._code_without_a_thread()
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, before)
    assert found == [f"a signal handler for SIGALRM (signal.signal){grading.IN_EFFECT}",
                     f"an interval timer (ITIMER_REAL, signal.setitimer){grading.IN_EFFECT}"]
    assert "left a signal handler for SIGALRM (signal.signal), an interval timer" in grading.cannot_grade(found)
    assert grading._code_without_a_thread() == []


# --- review rev25-r8 ----------------------------------------------------------------------------------------------

def _guard_run(monkeypatch, compare=lambda: []) -> dict:
    """A guard's run record in this process, with a ``compare`` of the test's and the hooks on now as recorded."""
    module = types.ModuleType("_ampcourse_grader_guard")
    module.state = {"run": {"nonce": "n", "ran": [], "calls": [], "early": [], "kept": [], "compare": compare,
                            "hooks": (sys.gettrace(), sys.getprofile())}}
    monkeypatch.setitem(sys.modules, "_ampcourse_grader_guard", module)
    return module.state["run"]


@pytest.mark.parametrize(("lesson", "name", "task"), [("00", "_tensor_bytes_cases", "tensor_bytes"),
                                                      ("04", "TORCH_UPDATES", "update_scale")])
def test_a_swap_that_undoes_itself_is_seen_at_the_end_of_the_call_pass(monkeypatch, capsys, lesson, name, task):
    """E1: the answer rebinds a helper the check uses after its calls to one that puts the real one back when the
    check uses it: by passed() nothing is changed, but the comparison at the end of the call pass saw the swap."""
    import importlib

    import review_forgeries

    module = importlib.import_module(f"ampcourse.checks.lesson{lesson}")
    real = getattr(module, name)
    run = _guard_run(monkeypatch, lambda: [name] if getattr(module, name) is not real else [])
    space: dict = {}
    exec(getattr(review_forgeries, f"SWAP_UNDONE_{lesson}"), space)
    try:
        getattr(module, task)(space[task])  # the forged cases fit the wrong answer: it "passes"
    finally:
        setattr(module, name, real)
    assert "✓" in capsys.readouterr().out
    assert run["early"] == [name], run["early"]


def test_a_trace_function_that_rewrites_answer_ofs_own_record_of_the_hooks_fails_the_call(monkeypatch):
    """E2: the trace rewrites answer_of's local copy of the hooks before its comparison: the guard's record is used."""
    import review_forgeries

    from ampcourse.checks import lesson00

    _guard_run(monkeypatch)
    space: dict = {}
    exec(review_forgeries.TRACE_REWRITES_HOOKS_00, space)
    before = sys.gettrace()
    try:
        with pytest.raises(CheckFailed, match="set a trace or profile function"):
            lesson00.tensor_bytes(space["tensor_bytes"])
        assert sys.gettrace() is before
    finally:
        sys.settrace(before)


def test_a_swap_from_the_del_of_an_object_hung_on_a_handed_tensor_is_not_in_place_while_the_check_judges(
        monkeypatch, capsys):
    """Review rev25-r9 E3: the answer hangs an object on each tensor it is handed whose ``__del__`` installs a
    self-undoing swap of ``_tensor_bytes_cases``: the check keeps its tensors alive (``checks.keep``) until the guard's
    verify, so the wrong answer is judged on the real cases, and the swap happens where the verify compares."""
    import review_forgeries

    from ampcourse.checks import lesson00

    real = lesson00._tensor_bytes_cases
    run = _guard_run(monkeypatch, lambda: ["swapped"] if lesson00._tensor_bytes_cases is not real else [])
    space: dict = {}
    exec(review_forgeries.DEL_SWAP_00, space)
    try:
        with pytest.raises(CheckFailed, match="the size of the whole storage"):
            lesson00.tensor_bytes(space["tensor_bytes"])
        assert run["early"] == []
        run["kept"].clear()  # what the verify does before its comparison: the swap is made there
        assert lesson00._tensor_bytes_cases is not real
    finally:
        lesson00._tensor_bytes_cases = real
    assert "✓" not in capsys.readouterr().out


def _after_the_check():  # a function the profiler must still see once the check has returned
    return 1


@pytest.mark.parametrize("graded", [False, True], ids=["learner's notebook", "under the guard"])
def test_a_check_run_under_cprofile_passes_and_leaves_the_profiler_on(monkeypatch, capsys, graded):
    """Review rev25-r9 E2: under cProfile (IPython's ``%prun``) ``sys.getprofile()`` is the Profile object, no Python
    callable: answer_of switches it on again with its own ``enable``, not ``sys.setprofile`` (a TypeError before)."""
    import cProfile
    import pstats

    from ampcourse.checks import lesson00

    profiler = cProfile.Profile()
    trace = sys.gettrace()
    profiler.enable()
    try:
        if graded:
            _guard_run(monkeypatch)
        lesson00.tensor_bytes(lambda t: t.numel() * t.element_size())
        still_on = sys.getprofile() is profiler
        _after_the_check()
    finally:
        profiler.disable()
        sys.settrace(trace)
    assert "✓ Task 1 (tensor_bytes)" in capsys.readouterr().out
    assert still_on
    seen = {name for _, _, name in pstats.Stats(profiler).stats}
    assert "_after_the_check" in seen


def test_an_f_trace_left_on_the_checks_frames_fails_the_call(monkeypatch):
    """E2: the docstring's claim: a ``frame.f_trace`` the answer sets on collect's frames (with no trace function on
    now) is taken out, and the call fails."""
    from ampcourse.checks import collect

    if sys.gettrace() is not None:
        pytest.skip("a trace function is on (a debugger, coverage): f_trace is its own")
    _guard_run(monkeypatch)

    frames = []

    def answer(x):
        f = sys._getframe(1)
        while f is not None:
            f.f_trace = lambda *a: None
            frames.append(f)
            f = f.f_back
        return x

    try:
        with pytest.raises(CheckFailed, match=r"set a trace function on the check's frames \(`frame.f_trace`\)"):
            collect("Task 1 (f)", answer, "f", [(1,), (2,)])
        checks = [f for f in frames if f.f_code.co_name in ("answer_of", "collect")]  # call's had returned
        assert len(checks) == 2 and all(f.f_trace is None for f in checks)  # taken out
        # the test's frame, and pytest's, are no check's: left as they are (review rev25-r12 E2)
        assert sys._getframe() in frames and sys._getframe().f_trace is not None
    finally:
        f = sys._getframe()
        while f is not None:
            f.f_trace = None
            f = f.f_back


@pytest.mark.parametrize("graded", [False, True])
def test_a_stale_f_trace_left_by_pdbs_quit_above_the_check_does_not_fail_a_right_answer(monkeypatch, capsys, graded):
    """Review rev25-r12 E2: pdb's ``set_trace`` puts ``f_trace`` on every frame up to the outermost, and its ``q``
    switches the trace function off but leaves them; in a kernel, ipykernel's long-lived frames are on every later
    check's stack. The frame walk stops at the check's own frames: a right answer passes, and the stale ``f_trace``
    above the check is left alone."""
    import bdb
    import io
    import pdb

    from ampcourse.checks import lesson00

    if sys.gettrace() is not None:
        pytest.skip("a trace function is on (a debugger, coverage): f_trace is its own")
    if graded:
        _guard_run(monkeypatch)

    def debugged():
        pdb.Pdb(stdin=io.StringIO("q\n"), stdout=io.StringIO()).set_trace()
        return 1

    def long_lived():  # ipykernel's loop: a frame begun before pdb ran, still running at the next check
        try:
            debugged()
        except bdb.BdbQuit:  # what `q` raises in the cell, as IPython catches it
            pass
        stale = sys._getframe().f_trace
        assert sys.gettrace() is None and stale is not None, "pdb's q left no stale f_trace: nothing tested"
        lesson00.tensor_bytes(lambda t: t.numel() * t.element_size())
        lesson00.tensor_bytes(lambda t: t.numel() * t.element_size())
        return stale, sys._getframe().f_trace

    try:
        stale, after = long_lived()
    finally:
        f = sys._getframe()
        while f is not None:
            f.f_trace = None
            f = f.f_back
    out = capsys.readouterr().out
    assert out.count("✓ Task 1 (tensor_bytes)") == 2, out
    assert after is stale


# --- review rev25-r10 ---------------------------------------------------------------------------------------------

class LineProfiler:  # its name is line_profiler's: _put_back tells it by its name and module
    """A stand-in for line_profiler's ``LineProfiler`` (not installed here): callable, but as a decorator,
    ``__call__(func)``, not as a trace function. line_profiler installs it as the object of a C trace function."""

    def __call__(self, func):
        return func


class _TracerClass:
    """A trace function written as a class: ``__call__(frame, event, arg)``."""

    def __call__(self, frame, event, arg):
        return None


def _tracer_function(frame, event, arg):
    return None


def test_put_back_switches_on_only_hooks_it_knows_how_to():
    """W3: by the hook's type. A Python function, a method and a class whose ``__call__`` takes (frame, event, arg) go
    back through sys.settrace/setprofile, cProfile's profiler through its own enable; a callable object of another
    kind (line_profiler's LineProfiler: a stand-in, the package is not installed) is left off, never made a Python
    hook that raises TypeError at the next event; None switches nothing on (a C hook with no object stays)."""
    import cProfile

    from ampcourse import checks

    tracer_object, method = _TracerClass(), _TracerClass().__call__
    assert checks._put_back("trace", _tracer_function) == (sys.settrace, _tracer_function)
    assert checks._put_back("profile", _tracer_function) == (sys.setprofile, _tracer_function)
    assert checks._put_back("trace", method) == (sys.settrace, method)
    assert checks._put_back("trace", tracer_object) == (sys.settrace, tracer_object)
    profiler = cProfile.Profile()
    assert checks._put_back("profile", profiler) == (checks._LSPROF.enable, profiler)
    assert checks._put_back("trace", LineProfiler()) is None
    partial = functools.partial(_tracer_function)
    assert checks._put_back("trace", partial) == (sys.settrace, partial)  # rev25-r11 E1: any other callable
    assert checks._put_back("profile", partial) == (sys.setprofile, partial)
    assert checks._put_back("trace", len) == (sys.settrace, len)  # a C callable (pydevd's Cython tracers)
    assert checks._put_back("trace", object()) is None
    assert checks._put_back("trace", None) is None and checks._put_back("profile", None) is None


_TRACEFUNC = None  # ctypes' Py_tracefunc type, made on first use


def _c_hook(which: str, obj: object, events: list):
    """Install a C trace or profile function (``PyEval_SetTrace``/``PyEval_SetProfile``, as line_profiler and yappi do)
    with ``obj`` as its object (None: a NULL object, yappi's), counting its events into ``events``; returns the
    callback, to be kept alive while it is installed."""
    import ctypes

    global _TRACEFUNC
    if _TRACEFUNC is None:
        _TRACEFUNC = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p)
    callback = _TRACEFUNC(lambda o, frame, what, arg: events.append(what) or 0)
    setter = getattr(ctypes.PyDLL(None), "PyEval_SetTrace" if which == "trace" else "PyEval_SetProfile")
    setter.argtypes = [_TRACEFUNC, ctypes.py_object if obj is not None else ctypes.c_void_p]
    setter.restype = None
    setter(callback, obj)
    return callback


@pytest.mark.parametrize("graded", [False, True], ids=["learner's notebook", "under the guard"])
def test_a_c_profiler_with_no_object_stays_on_through_a_check(monkeypatch, capsys, graded):
    """W3: yappi installs its C profile function with a NULL object, so ``sys.getprofile()`` is None: answer_of's
    switch-off calls ``sys.setprofile(None)`` only where the getter shows a hook, and the profiler keeps receiving
    events after the check (it was switched off for good before). Stand-in: a ctypes callback, yappi is not
    installed here."""
    from ampcourse.checks import lesson00

    if sys.gettrace() is not None or sys.getprofile() is not None:
        pytest.skip("a trace or profile function is on (a debugger, coverage)")
    events: list = []
    callback = _c_hook("profile", None, events)
    try:
        assert sys.getprofile() is None
        if graded:
            _guard_run(monkeypatch)
        lesson00.tensor_bytes(lambda t: t.numel() * t.element_size())
        seen = len(events)
        _after_the_check()
        after = len(events)
    finally:
        sys.setprofile(None)
        del callback
    assert "✓ Task 1 (tensor_bytes)" in capsys.readouterr().out
    assert after > seen, "the C profiler received no event after the check: answer_of switched it off"


@pytest.mark.parametrize("graded", [False, True], ids=["learner's notebook", "under the guard"])
def test_a_c_tracer_with_a_callable_object_is_left_off_not_made_a_python_trace(monkeypatch, capsys, graded):
    """W3: line_profiler installs a C trace function whose object, the LineProfiler, is callable as a decorator.
    answer_of used to give it to ``sys.settrace`` (``callable(hook)``), so the next event called it as (frame, event,
    arg) and its TypeError surfaced in the learner's code; it is left off now (the documented limit)."""
    from ampcourse.checks import lesson00

    if sys.gettrace() is not None or sys.getprofile() is not None:
        pytest.skip("a trace or profile function is on (a debugger, coverage)")
    events: list = []
    profiler = LineProfiler()
    callback = _c_hook("trace", profiler, events)
    try:
        assert sys.gettrace() is profiler
        if graded:
            _guard_run(monkeypatch)
        lesson00.tensor_bytes(lambda t: t.numel() * t.element_size())
        _after_the_check()
        left = sys.gettrace()
    finally:
        sys.settrace(None)
        del callback
    assert "✓ Task 1 (tensor_bytes)" in capsys.readouterr().out
    assert left is None


def test_a_check_under_coverage_run_leaves_the_modules_later_lines_recorded(tmp_path):
    """W2: under ``coverage run`` (its C tracer) a check using answer_of at module level left every later module
    line unrecorded: answer_of put the tracer back from a callee begun with it off, the next call switched coverage
    back to C, and the returns of frames it never saw enter popped its own stack. The tracer now goes back in
    answer_of's frame, after those frames have returned."""
    import json
    import pathlib
    import subprocess

    pytest.importorskip("coverage")
    script = tmp_path / "script.py"
    script.write_text("from ampcourse import checks\n"
                      "\n"
                      "\n"
                      "def answer(x):\n"
                      "    return x\n"
                      "\n"
                      "\n"
                      "checks.collect('Task 1 (f)', answer, 'answer', [(1,), (2,)])\n"
                      "a = 1\n"
                      "b = 2\n"
                      "\n"
                      "\n"
                      "def later():\n"
                      "    return 3\n"
                      "\n"
                      "\n"
                      "later()\n"
                      "c = 4\n")
    root = pathlib.Path(__file__).resolve().parents[1]
    env = {**__import__("os").environ, "PYTHONPATH": str(root)}
    data, report = tmp_path / ".coverage", tmp_path / "coverage.json"
    subprocess.run([sys.executable, "-m", "coverage", "run", f"--data-file={data}", str(script)], check=True,
                   cwd=tmp_path, env=env, timeout=120)
    subprocess.run([sys.executable, "-m", "coverage", "json", f"--data-file={data}", "-o", str(report),
                    f"--include={script}"], check=True, cwd=tmp_path, env=env, timeout=120, capture_output=True)
    files = json.loads(report.read_text())["files"]  # named relative to the directory it ran in
    assert len(files) == 1, files
    missing = next(iter(files.values()))["missing_lines"]
    assert missing == [], f"coverage missed lines {missing} of the script after the check"


# --- review rev25-r11 ---------------------------------------------------------------------------------------------

class _DefaultedTracer:
    """A trace function written as a class whose ``__call__`` has an extra defaulted parameter."""

    def __init__(self, events: list) -> None:
        self.events = events

    def __call__(self, frame, event, arg, extra=None):
        self.events.append(event)
        return self


@pytest.mark.parametrize("which", ["trace", "profile"])
@pytest.mark.parametrize("kind", ["partial", "defaulted __call__"])
@pytest.mark.parametrize("graded", [False, True], ids=["learner's notebook", "under the guard"])
def test_a_trace_function_of_any_python_kind_stays_on_through_two_checks(monkeypatch, capsys, graded, kind, which):
    """E1: a trace function answer_of did not recognise (a functools.partial, a class whose ``__call__`` has a
    defaulted parameter; pydevd's Cython tracers, JupyterLab's debugger) was left off, and the next call failed on
    the ``f_trace`` it had set on the check's frames, blaming the learner. Every callable hook but line_profiler's
    goes back now, and sees the code after the checks."""
    from ampcourse.checks import lesson00

    if sys.gettrace() is not None or sys.getprofile() is not None:
        pytest.skip("a trace or profile function is on (a debugger, coverage)")
    events: list = []

    def tracer(frame, event, arg):
        events.append(event)
        return tracer_hook if which == "trace" else None

    tracer_hook = functools.partial(tracer) if kind == "partial" else _DefaultedTracer(events)
    setter, getter = (sys.settrace, sys.gettrace) if which == "trace" else (sys.setprofile, sys.getprofile)
    setter(tracer_hook)
    try:
        if graded:
            _guard_run(monkeypatch)
        lesson00.tensor_bytes(lambda t: t.numel() * t.element_size())
        lesson00.tensor_bytes(lambda t: t.numel() * t.element_size())
        seen = len(events)
        _after_the_check()
        left = getter()
        after = len(events)
    finally:
        setter(None)
    out = capsys.readouterr().out
    assert out.count("✓ Task 1 (tensor_bytes)") == 2, out
    assert left is tracer_hook and after > seen
