"""Many learner notebooks graded by one ``pytest --nbval`` start, each result read back per notebook.

The plugin's end-to-end tests (tests/test_pytest_plugin.py) run the learner's command on notebooks they made. One
``pytest`` start per notebook cost about 2.5 s each (Python, pytest, nbval and the course's plugin), and they are
dozens: :func:`run` writes every notebook into a folder of its own (``LABEL/exercises/NAME``, beside a copy of the
real ``exercises/conftest.py``), starts ``pytest --nbval`` once on all of them — each notebook still gets a fresh
kernel of its own, as a learner's run does — and hands back a :class:`Graded` per label.

This file is also the pytest plugin that records the results: copied beside the folders and loaded with ``-p``, it
writes every item's outcome, failure text and warnings (by node id) to the JSON file ``$NBVAL_BATCH_REPORT`` names.
It imports nothing but the standard library.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

REPORT_ENV = "NBVAL_BATCH_REPORT"


@dataclass
class Graded:
    """One notebook's items after the run: names (``Cell 3``, ``check cell of Task 2 · …``) by outcome, and
    ``text``: every failure's message and every warning, as ``name: text`` lines (what the learner reads)."""

    failed: list[str] = field(default_factory=list)
    passed: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    text: str = ""

    @property
    def ok(self) -> bool:
        return not self.failed

    def flat(self) -> str:
        """``text`` on one line, lower case, spaces collapsed (pytest and the plugin wrap long lines)."""
        return " ".join(self.text.split()).lower()


def run(root: Path, notebooks: dict, *, conftest: Path, timeout: float = 1800) -> tuple[dict[str, Graded], str]:
    """Grade ``notebooks`` (``{label: (file name, notebook)}``) with one ``pytest --nbval`` in ``root``; each
    label's :class:`Graded`, and the run's whole output (for an assertion's message)."""
    import nbformat

    root.mkdir(parents=True, exist_ok=True)
    paths = []
    for label, (name, nb) in notebooks.items():
        folder = root / label / "exercises"
        folder.mkdir(parents=True)
        shutil.copy(conftest, folder / "conftest.py")
        nbformat.write(nb, folder / name)
        paths.append(f"{label}/exercises/{name}")
    shutil.copy(__file__, root / "nbval_batch_report.py")
    report = root / "report.json"
    env = {**os.environ, REPORT_ENV: str(report)}
    done = subprocess.run([sys.executable, "-m", "pytest", "--nbval", "--nbval-current-env", "-q", "-p", "no:randomly",
                           "-p", "no:cacheprovider", "-p", "nbval_batch_report", *paths], cwd=root, env=env,
                          capture_output=True, text=True, timeout=timeout)
    output = done.stdout + done.stderr
    if not report.exists():
        raise AssertionError(f"pytest wrote no report (exit {done.returncode}):\n{output[-3000:]}")
    items = json.loads(report.read_text())
    results = {label: Graded() for label in notebooks}
    for nodeid, item in items.items():
        label, _, name = nodeid.partition("/exercises/")
        graded = results[label]
        name = name.split("::", 1)[1] if "::" in name else name
        getattr(graded, item["outcome"]).append(name)
        lines = [f"{name}: {item['longrepr']}"] if item["longrepr"] else []
        graded.text += "".join(f"{line}\n" for line in lines + item["warnings"])
    return results, output


# --- the plugin (loaded in the pytest that run() starts) -------------------------------------------------------------
_ITEMS: dict[str, dict] = {}


def _item(nodeid: str) -> dict:
    return _ITEMS.setdefault(nodeid, {"outcome": "passed", "longrepr": "", "warnings": []})


def pytest_runtest_logreport(report):
    item = _item(report.nodeid)
    if report.failed:
        item["outcome"] = "failed"
        item["longrepr"] += report.longreprtext
    elif report.skipped and item["outcome"] != "failed":
        item["outcome"] = "skipped"


def pytest_collectreport(report):
    if report.failed:
        item = _item(report.nodeid)
        item["outcome"] = "failed"
        item["longrepr"] += report.longreprtext


def pytest_warning_recorded(warning_message, when, nodeid, location):
    if nodeid:
        _item(nodeid)["warnings"].append(str(warning_message.message))


def pytest_sessionfinish(session, exitstatus):
    path = os.environ.get(REPORT_ENV)
    if path:
        Path(path).write_text(json.dumps(_ITEMS, indent=1))
