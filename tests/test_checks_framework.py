"""The grading framework: tiered hints, stubs that do not give the answer away, quizzes with hidden answers."""

import ast
import importlib
import json
import re

import pytest

from ampcourse import checks
from ampcourse.authoring import BEGIN, END
from ampcourse.course import LESSONS, ROOT
from ampcourse.quiz import KINDS, Question, feedback, feedback_html, lesson_questions, lesson_quiz

SOLUTIONS = sorted((ROOT / "solutions").glob("*.ipynb"))


def _cells(path):
    return json.loads(path.read_text(encoding="utf-8"))["cells"]


def _regions(path):
    """(stub text, solution code) for every solution region of a solution notebook."""
    out = []
    for cell in _cells(path):
        if cell["cell_type"] != "code":
            continue
        hint, body = None, []
        for line in "".join(cell["source"]).splitlines():
            if (m := BEGIN.match(line)):
                hint, body = m.group("hint").strip(), []
            elif END.match(line):
                out.append((hint, "\n".join(body)))
                hint = None
            elif hint is not None:
                body.append(line)
    return out


def _checked_tasks(path):
    """The check functions a solution's check cells call, and the checks module."""
    number = path.name[:2]
    module = importlib.import_module(f"ampcourse.checks.lesson{number}")
    names = []
    for cell in _cells(path):
        if "check" in cell.get("metadata", {}).get("tags", []):
            names += re.findall(r"check\.(\w+)\(", "".join(cell["source"]))
    return module, names


def _called_names(code):
    """Names of the functions and methods a piece of solution code calls."""
    names = set()
    for node in ast.walk(ast.parse(code.strip() and _dedent(code))):
        if isinstance(node, ast.Call):
            f = node.func
            names.add(f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", ""))
    return names - {"", "range", "len", "abs", "float", "int", "enumerate", "zip", "max", "min", "sum",
                    "isinstance", "tuple", "list", "dict", "sorted", "print", "append"}


def _dedent(code):
    import textwrap
    return textwrap.dedent(code)


@pytest.mark.parametrize("path", SOLUTIONS, ids=lambda p: p.stem)
def test_stubs_say_what_not_how(path):
    """A stub's text names no function the solution calls (beyond those the task text names) and repeats no
    line of it: it says what to write, not how."""
    task_text = " ".join("".join(c["source"]) for c in _cells(path) if c["cell_type"] == "markdown")
    for hint, code in _regions(path):
        assert hint, f"{path.name}: a solution region without stub text"
        called = {n for n in _called_names(code) if len(n) > 3 and not re.search(rf"\b{n}\b", task_text)}
        named = {n for n in called if re.search(rf"\b{re.escape(n)}\b", hint)}
        assert not named, f"{path.name}: stub {hint!r} names {named}, which the answer calls"
        for line in code.splitlines():
            line = line.strip()
            if len(line) > 12 and not line.startswith("#"):
                assert line not in hint, f"{path.name}: stub {hint!r} contains the answer line {line!r}"


@pytest.mark.parametrize("path", SOLUTIONS, ids=lambda p: p.stem)
def test_every_task_has_tiered_hints_that_grow(path):
    module, names = _checked_tasks(path)
    assert names, path.name
    assert callable(module.hint)
    for name in names:
        key = name if name in module.HINTS else next((k for k in module.HINTS if k in name), None)
        tiers = module.HINTS.get(key)
        assert tiers and len(tiers) >= 3, f"{path.name}: task {name} needs 3 hint tiers"
        # the gentle tiers do not contain the answer's code lines
        for _hint, code in _regions(path):
            for line in code.splitlines():
                line = line.strip()
                if len(line) > 20 and not line.startswith("#"):
                    assert line not in tiers[0] and line not in tiers[1], (name, line)


def test_hints_come_one_tier_per_failure_and_on_request(capsys):
    from ampcourse.checks import lesson00 as check

    checks.reset_hints()

    def wrong(t):
        return t.numel()

    messages = []
    for _ in range(4):
        with pytest.raises(checks.CheckFailed) as info:
            check.tensor_bytes(wrong)
        messages.append(checks.with_hint(info.value))
    tiers = check.HINTS["tensor_bytes"]
    assert "Hint 1/3" in messages[0] and tiers[0] in messages[0] and tiers[1] not in messages[0]
    assert "check.hint('tensor_bytes')" in messages[0]
    assert "Hint 2/3" in messages[1] and tiers[1] in messages[1]
    assert "Hint 3/3" in messages[2] and tiers[2] in messages[2] and "Stuck" not in messages[2]
    assert "Hint 3/3" in messages[3]
    checks.reset_hints()
    text = check.hint(wrong.__class__ and "tensor_bytes")
    assert tiers[0] in text and tiers[1] not in text
    text = check.hint("tensor_bytes")
    assert tiers[0] in text and tiers[1] in text and tiers[2] not in text
    assert "Hint 2/3" in capsys.readouterr().out
    with pytest.raises(ValueError, match="task must be one of"):
        check.hint("no_such_task")


def test_not_started_shows_no_hint():
    from ampcourse.checks import lesson04 as check

    checks.reset_hints()

    def stub(*args):
        raise NotImplementedError("one float16 AMP training step; return the loss as a Python float")

    with pytest.raises(checks.NotStarted) as info:
        check.amp_step(stub)
    shown = checks.with_hint(info.value)
    assert "not started" in shown and "Hint" not in shown.replace("Hints appear", "")
    for tier in check.HINTS["amp_step"]:
        assert tier not in shown


def test_hints_registry_validates():
    with pytest.raises(ValueError, match="at least 2"):
        checks.hints("x", {"task": ["only one"]})
    with pytest.raises(TypeError, match="non-empty dict"):
        checks.hints("x", {})


def test_raw_torch_errors_are_explained():
    def raises(*args):
        raise RuntimeError("mat1 and mat2 must have the same dtype, but got BFloat16 and Float")

    with pytest.raises(checks.CheckFailed, match="different dtypes met in one operation outside autocast"):
        checks.call("Task 9 (x)", raises, "x")


# --- quizzes ------------------------------------------------------------------------------------

NUMBERS = [item.number for item in LESSONS if item.lesson_path(ROOT).exists()]


@pytest.mark.parametrize("number", NUMBERS)
def test_each_lesson_quiz_has_a_transfer_or_diagnosis_question(number):
    questions = lesson_questions(number)
    assert len(questions) >= 3
    assert all(q.kind in KINDS for q in questions)
    assert any(q.kind in ("transfer", "diagnosis") for q in questions), number
    lesson_quiz(number)  # builds


@pytest.mark.parametrize("number", NUMBERS)
def test_no_quiz_answer_is_visible_in_a_lesson(number):
    item = next(i for i in LESSONS if i.number == number)
    questions = lesson_questions(number)
    for cell in _cells(item.lesson_path(ROOT)):
        source = "".join(cell["source"])
        assert "answer=" not in source and "why=" not in source and "Question(" not in source
        for q in questions:
            assert q.why[:60] not in source, f"lesson {number} shows the explanation of {q.prompt!r}"
        for output in cell.get("outputs", []):
            text = "".join(output.get("text", "")) + "".join(output.get("data", {}).get("text/plain", ""))
            for q in questions:
                assert q.why[:60] not in text


def test_live_quiz_answers_follow_torch():
    import torch

    fp8 = next(q for q in lesson_questions("01") if "float8_e4m3fn" in q.prompt)
    stored = torch.tensor(500.0).to(torch.float8_e4m3fn).float().item()
    assert fp8.options[fp8.answer] == f"{stored:g}"


def test_feedback_html_has_word_and_colour():
    q = Question("2 + 2?", ["3", "4"], 1, "Arithmetic.")
    for choice, word, colour in ((1, "Correct", "#1a7f37"), (0, "Not quite", "#b42318"),
                                 (None, "Pick an answer first", "#6b4f00")):
        correct, message = feedback(q, choice)
        html = feedback_html(correct if choice is not None else None, message)
        assert f"<b>{word}</b>" in html and colour in html
    with pytest.raises(ValueError, match="correct must be"):
        feedback_html("yes", "x")
    with pytest.raises(ValueError, match="number must be"):
        lesson_questions("3")
    with pytest.raises(ValueError, match="kind must be"):
        Question("a?", ["x", "y"], 0, "b", kind="trivia")


def _fixture_tables():
    """WRONG and RIGHT of every tests/test_checks_*.py, merged (tests/grader_fixtures.py says the shape)."""
    wrong, right = {}, {}
    for path in sorted((ROOT / "tests").glob("test_checks_*.py")):
        if path.stem == "test_checks_framework":
            continue
        module = importlib.import_module(path.stem)
        for key, entries in getattr(module, "WRONG", {}).items():
            wrong.setdefault(key, {}).update(entries)
        for key, entries in getattr(module, "RIGHT", {}).items():
            right.setdefault(key, {}).update(entries)
    return wrong, right


@pytest.mark.parametrize("path", SOLUTIONS, ids=lambda p: p.stem)
def test_every_task_has_enough_named_fixtures(path):
    """Every task has >= MIN_WRONG wrong-answer fixtures, each with the words its message must say, and
    >= MIN_RIGHT right answers written differently from the solution (issue: graders that catch every
    typical mistake and name it)."""
    import grader_fixtures

    wrong, right = _fixture_tables()
    _module, names = _checked_tasks(path)
    number = path.name[:2]
    for name in dict.fromkeys(names):
        w = wrong.get((number, name), {})
        r = right.get((number, name), {})
        assert len(w) >= grader_fixtures.MIN_WRONG, (
            f"{path.name}: task {name} has {len(w)} wrong-answer fixtures (need {grader_fixtures.MIN_WRONG})")
        assert len(r) >= grader_fixtures.MIN_RIGHT, (
            f"{path.name}: task {name} has {len(r)} right-answer fixtures (need {grader_fixtures.MIN_RIGHT})")
        for label, fixture in w.items():
            assert isinstance(fixture, tuple) and len(fixture) == 2 and isinstance(fixture[1], str) \
                and fixture[1].strip(), f"{path.name}: wrong answer {label!r} of {name} asserts no message"


def test_fixture_count_rule_fails_on_a_bare_task(monkeypatch):
    """The rule above is not vacuous: a task without fixtures fails it."""
    import grader_fixtures

    monkeypatch.setattr(grader_fixtures, "MIN_WRONG", 10**6)
    with pytest.raises(AssertionError, match="wrong-answer fixtures"):
        test_every_task_has_enough_named_fixtures(SOLUTIONS[0])
