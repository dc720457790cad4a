"""The generated lesson → module map (CONTRIBUTING.md) lists every ampcourse module a lesson imports."""

import pytest

from ampcourse import lesson_map
from ampcourse.course import LESSONS, ROOT, published


@pytest.mark.parametrize("item", published(), ids=lambda item: item.number)
def test_every_module_a_lesson_imports_is_listed(item):
    unlisted = lesson_map.unlisted_imports(lesson_map.lesson_code(item), item.modules, item.number)
    assert not unlisted, (f"lesson {item.number} imports {sorted(unlisted)}: add them to its Lesson(..., modules=) "
                          "in ampcourse/course.py, then run python -m ampcourse build")


@pytest.mark.parametrize("item", LESSONS, ids=lambda item: item.number)
def test_every_listed_module_exists(item):
    for module in item.modules:
        path = ROOT / "ampcourse" / module.replace(".", "/")
        assert path.with_suffix(".py").exists() or (path / "__init__.py").exists(), (item.number, module)


def test_an_unlisted_import_is_caught():
    code = "from ampcourse.bench import time_fn\nimport ampcourse.fp8\nfrom ampcourse import capstone as c, device"
    assert lesson_map.unlisted_imports(code, ("bench",), "06") == {"fp8", "capstone"}
    assert lesson_map.unlisted_imports("from ampcourse.widgets.lesson06 import x", (), "06") == set()
    assert lesson_map.unlisted_imports("from ampcourse.widgets.lesson05 import x", (), "06") == {"widgets.lesson05"}


def test_the_map_in_contributing_is_current_and_stale_when_edited(tmp_path):
    text = (ROOT / lesson_map.TARGET).read_text(encoding="utf-8")
    assert lesson_map.apply(text) == text, "the lesson map is stale: run python -m ampcourse build"
    assert "| 06 Speed and memory | `ampcourse/bench/` (`flops.py`, `hardware.py`, `memory.py`, `steps.py`, " in text
    edited = text.replace("`ampcourse/bench/` (", "`ampcourse/bench_old/` (", 1)
    assert lesson_map.apply(edited) != edited
    with pytest.raises(ValueError, match="markers"):
        lesson_map.apply("no markers here")


def test_a_package_is_listed_with_its_modules():
    assert lesson_map.module_path("bench") == ("`ampcourse/bench/` (`flops.py`, `hardware.py`, `memory.py`, "
                                               "`steps.py`, `sweeps.py`, `timing.py`, `units.py`)")
    assert lesson_map.module_path("diagnostics") == "`ampcourse/diagnostics.py`"
