"""Review rev25-r3 of the grading guard: the rules that need no kernel, tested in this process.

The forgeries themselves run in both graders from ``tests/review_forgeries.py`` (tests/test_grading_integrity.py,
tests/test_pytest_plugin.py); here: the pass record (E1), torch's own wrappers told from a spoof (E7), thread code
judged by the code compiled from its file (E4), threads started during a check (E5), course classes (E3), and the
nits' wordings (N1, N3, N5). Review rev25-r4: every learner call noted (E5, an AST scan), a guarded function's
``__dict__`` and ``__wrapped__`` chain (E4), library code run with other globals and the started-thread note (E2),
the claimed-file wording (N2).
"""

import dataclasses
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
    other than ``call``/``noted_call``/``require_callable``, inspection (``inspect.getsource``, ``getattr``) or a
    check module's own function taking ``fn`` (itself scanned) — ``functools.partial(fn)``, ``map(fn, ...)`` — is
    flagged. Not seen: a callable the answer returned, or a learner object's methods (an object a check receives
    is the check's to handle)."""
    import ast
    from pathlib import Path

    paths = sorted((Path(grading.ROOT) / "ampcourse" / "checks").glob("lesson*.py"))
    trees = {path: ast.parse(path.read_text(encoding="utf-8")) for path in paths}
    inspection = {"isfunction", "getsource", "getattr", "signature", "getclosurevars"}  # these do not call it
    takes_fn = {"call", "noted_call", "require_callable", *inspection} | {
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
