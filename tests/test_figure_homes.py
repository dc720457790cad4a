"""CONTRIBUTING "Code style" → Figures: a static figure is a ``*_png`` function returning ``widgets.base.Png``, in
the lesson's widget module when the lesson has one (``ampcourse/widgets/lessonNN.py``), else in its topic module."""

import ast
import re

from ampcourse.course import LESSONS, ROOT

# Figures that break the rule today, each named with why it is left: the test fails when one is moved (drop it
# here then) and when a new one breaks the rule.
PENDING: dict[str, str] = {}


def _png_functions():
    for path in sorted((ROOT / "ampcourse").rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in tree.body:
            if isinstance(node, ast.FunctionDef) and node.name.endswith("_png"):
                yield path.relative_to(ROOT).as_posix(), node.name


def home_lesson(path: str) -> str | None:
    """The lesson a topic module serves: the first "Lesson NN" of its docstring (``fp8.py``: "Lesson 10 …"), one of
    the lessons whose ``Lesson.modules`` list it."""
    doc = ast.get_docstring(ast.parse((ROOT / path).read_text(encoding="utf-8"))) or ""
    module = path.removeprefix("ampcourse/").removesuffix(".py").removesuffix("/__init__").replace("/", ".")
    listed = {item.number for item in LESSONS if module in item.modules}
    return next((n for n in re.findall(r"[Ll]esson (\d\d)", doc) if n in listed), None)


def misplaced() -> dict[str, str]:
    """``"file:function"`` -> why it breaks the rule, for every module-level ``*_png`` of the package."""
    out = {}
    for path, name in _png_functions():
        if path.startswith("ampcourse/widgets/lesson"):
            continue
        if path == "ampcourse/widgets/base.py":  # figure_png: the helper every figure returns through
            continue
        number = home_lesson(path)
        if number is None:
            out[f"{path}:{name}"] = "its module's docstring names no lesson"
        elif (ROOT / "ampcourse" / "widgets" / f"lesson{number}.py").exists():
            out[f"{path}:{name}"] = f"lesson {number} has a widget module: the figure belongs there"
    return out


def test_every_static_figure_lives_where_the_rule_says():
    assert set(misplaced()) == set(PENDING), misplaced()


def test_the_rule_would_catch_a_figure_in_a_topic_module_of_a_lesson_with_widgets():
    """bench is lesson 06's topic module and lesson 06 has widgets/lesson06.py: a figure in bench would be named."""
    assert home_lesson("ampcourse/bench/__init__.py") == "06"
    assert (ROOT / "ampcourse/widgets/lesson06.py").exists()  # so a *_png in bench would be named by misplaced()
    assert home_lesson("ampcourse/fp8.py") == "10" and home_lesson("ampcourse/capstone.py") == "09"
    found = {(path, name) for path, name in _png_functions()}
    assert ("ampcourse/widgets/lesson06.py", "throughput_png") in found
    assert ("ampcourse/troubleshoot.py", "scale_history_png") in found  # lesson 07 has no widget module
    assert ("ampcourse/capstone.py", "curves_png") in found  # lesson 09 has none either


def test_the_topic_module_figures_return_png():
    from ampcourse import capstone
    from ampcourse.widgets.base import Png

    assert isinstance(capstone.digits_png(capstone.load_digits(), n=4), Png)


def test_lesson10_figures_moved_to_its_widget_module_and_keep_their_old_names():
    from ampcourse import fp8
    from ampcourse.widgets import lesson10

    assert fp8.range_png is lesson10.range_png and fp8.curves_png is lesson10.curves_png
