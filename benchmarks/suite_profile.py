"""Where the suite's time goes: per file and per test, from a ``--junitxml`` report of a pytest run.

    .venv/bin/python -m pytest --nbval -n 2 --dist loadfile --no-loadscope-reorder --junitxml=p1.xml
    python benchmarks/suite_profile.py p1.xml            # the 25 costliest files and the 25 costliest tests
    python benchmarks/suite_profile.py p1.xml --top 40

A file's time is the sum of its tests' times (set-up, call and tear-down, as pytest's report counts them): a
module-scoped fixture is paid by the first test that asks for it (``tests/test_pytest_plugin.py``'s ``graded``,
one inner ``pytest --nbval`` over about 60 notebooks, shows as one test of minutes). Under ``--dist loadfile`` each
file runs on one worker, so no file can take longer than the pass, and the pass takes at least (sum of all files) /
workers. A measurement, not a test: quote it with the machine's load.
"""

from __future__ import annotations

import argparse
import collections
import xml.etree.ElementTree as ET
from pathlib import Path


def read(report: Path) -> list[tuple[str, str, float]]:
    """``(file, test, seconds)`` for every test case of a junit XML report; file as pytest's class name gives it
    (``tests.test_floats``, ``notebooks.09_capstone``, ``tests.browser``)."""
    rows = []
    for case in ET.parse(report).iter("testcase"):
        parts = case.get("classname", "").split(".")
        rows.append((".".join(parts[:2]), f"{case.get('classname')}::{case.get('name')}", float(case.get("time", 0))))
    return rows


def table(rows: list[tuple[str, str, float]], top: int) -> str:
    per_file: collections.Counter[str] = collections.Counter()
    count: collections.Counter[str] = collections.Counter()
    for file, _, seconds in rows:
        per_file[file] += seconds
        count[file] += 1
    total = sum(per_file.values())
    lines = [f"{len(rows)} tests in {len(per_file)} files: {total:.0f} s of test time in all", "",
             f"{'seconds':>8} {'share':>6} {'tests':>6}  file"]
    lines += [f"{s:8.1f} {s / total:6.1%} {count[f]:6d}  {f}" for f, s in per_file.most_common(top)]
    lines += ["", f"{'seconds':>8}  test"]
    lines += [f"{s:8.1f}  {name}" for _, name, s in sorted(rows, key=lambda r: -r[2])[:top]]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("report", type=Path, help="a pytest --junitxml file")
    parser.add_argument("--top", type=int, default=25, help="how many files and tests to list (default 25)")
    args = parser.parse_args(argv)
    if args.top < 1:
        parser.error(f"--top must be 1 or more (got {args.top})")
    if not args.report.is_file():
        parser.error(f"report: no such file: {args.report}")
    print(table(read(args.report), args.top))


if __name__ == "__main__":
    main()
