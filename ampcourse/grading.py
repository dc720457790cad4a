"""``python -m ampcourse grade``: grade the exercises and print a progress table.

It runs exactly the learner's grading command, ``pytest --nbval exercises/``, with this module
loaded as a pytest plugin that writes each cell's result to a JSON file; the table is built from
that file. A check cell (a code cell tagged ``check``) is *passed*, *not started* (the task's stub
still raises ``NotImplementedError``) or *failed*.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from .authoring import read, tags
from .course import ROOT

REPORT_ENV = "AMPCOURSE_GRADE_REPORT"


# --- the pytest plugin (loaded with -p ampcourse.grading) ---------------------------------------

_results: dict[str, dict] = {}


def pytest_runtest_logreport(report):
    if report.when == "call" or report.failed:
        entry = _results.setdefault(report.nodeid, {"outcome": "passed", "message": ""})
        if report.failed:
            entry["outcome"] = "failed"
            entry["message"] = report.longreprtext
        elif report.skipped:
            entry["outcome"] = "skipped"


def pytest_sessionfinish(session):
    target = os.environ.get(REPORT_ENV)
    if target:
        Path(target).write_text(json.dumps(_results), encoding="utf-8")


# --- the table ----------------------------------------------------------------------------------

@dataclass(frozen=True)
class ExerciseResult:
    name: str
    checks: list[str]  # "passed" / "not started" / "failed", one per check cell, in order
    other_failures: int  # failing cells that are not checks (e.g. a syntax error in your code)
    first_message: str

    @property
    def status(self) -> str:
        if self.checks and all(c == "passed" for c in self.checks) and not self.other_failures:
            return "passed"
        if self.checks and all(c == "not started" for c in self.checks):
            return "not started"
        return "failed"


def _message_line(text: str) -> str:
    for line in text.splitlines():
        if "CheckFailed:" in line or "NotStarted:" in line or "Error:" in line:
            return line.strip()
    return ""


def summarise(notebook: Path, results: dict[str, dict], root: Path = ROOT) -> ExerciseResult:
    """Turn the per-cell pytest results of one exercise notebook into an :class:`ExerciseResult`."""
    nb = read(notebook)
    code_cells = [cell for cell in nb.cells if cell.cell_type == "code"]
    relative = notebook.resolve().relative_to(root.resolve()).as_posix()
    checks, other, first = [], 0, ""
    for number, cell in enumerate(code_cells):
        entry = results.get(f"{relative}::Cell {number}", {"outcome": "failed", "message": "not run"})
        failed = entry["outcome"] == "failed"
        if failed and not first:
            first = _message_line(entry["message"])
        if "check" in tags(cell):
            if not failed:
                checks.append("passed")
            elif "NotStarted:" in entry["message"]:
                checks.append("not started")
            else:
                checks.append("failed")
        elif failed:
            other += 1
    return ExerciseResult(notebook.stem, checks, other, first)


def format_table(rows: list[ExerciseResult]) -> str:
    width = max([len("exercise")] + [len(row.name) for row in rows])
    lines = [f"{'exercise':<{width}}  checks  status", f"{'-' * width}  ------  ------"]
    for row in rows:
        done = sum(c == "passed" for c in row.checks)
        lines.append(f"{row.name:<{width}}  {done:>2}/{len(row.checks):<3}  {row.status}")
    total = sum(len(r.checks) for r in rows)
    done = sum(c == "passed" for r in rows for c in r.checks)
    lines.append(f"{'-' * width}  ------  ------")
    lines.append(f"{'total':<{width}}  {done:>2}/{total:<3}  "
                 f"{sum(r.status == 'passed' for r in rows)} of {len(rows)} exercises passed")
    for row in rows:
        if row.status == "failed" and row.first_message:
            lines.append(f"\n{row.name}: {row.first_message}")
    return "\n".join(lines)


def grade(paths: list[str] | None = None, root: Path = ROOT) -> tuple[str, int]:
    """Run ``pytest --nbval`` on the exercises; return the table and an exit code (0: all passed)."""
    targets = [Path(p) for p in paths] if paths else sorted((root / "exercises").glob("*.ipynb"))
    targets = [(t if t.is_absolute() else Path.cwd() / t) for t in targets]
    for target in targets:
        if target.suffix != ".ipynb" or not target.exists():
            raise ValueError(f"not an exercise notebook: {target} (give paths like exercises/00_start_here.ipynb)")
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report.json"
        env = dict(os.environ, **{REPORT_ENV: str(report)})
        subprocess.run(
            [sys.executable, "-m", "pytest", "--nbval", "-p", "ampcourse.grading", "-q", "--tb=no",
             *[str(t) for t in targets]],
            cwd=root, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False,
        )
        results = json.loads(report.read_text(encoding="utf-8")) if report.exists() else {}
    rows = [summarise(t, results, root) for t in targets]
    return format_table(rows), 0 if all(r.status == "passed" for r in rows) else 1
