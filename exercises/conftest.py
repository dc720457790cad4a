"""Grading rules for ``pytest --nbval exercises/``.

An exercise passes when every cell runs without an error — the check cells raise when an answer is
wrong. Stored outputs are never compared here: your saved notebook has your own outputs (plots,
timings), and they are not what is graded.
"""

from pathlib import Path

HERE = Path(__file__).resolve().parent


def pytest_collection_modifyitems(items):
    for item in items:
        if hasattr(item, "options") and HERE in Path(str(item.fspath)).resolve().parents:
            item.options["check"] = False
