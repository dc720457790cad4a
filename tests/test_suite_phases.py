"""``./course test`` in parallel workers, and ``benchmarks/suite_phases.py``, which times its phases (issue 26)."""

import importlib.util
import re
import sys

from ampcourse.course import ROOT

COURSE = (ROOT / "course").read_text()


def _load_benchmark(name: str = "suite_phases"):
    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_both_passes_keep_each_file_on_one_worker_in_collection_order():
    """nbval's cells of one notebook share a kernel: split over workers, a cell would run without the cells before
    it. --dist loadfile keeps a file whole; --no-loadscope-reorder keeps collection order (longest file first)."""
    parallel = re.search(r"^\s*\[ \"\$workers\" -gt 1 \] && parallel=\(([^)]*)\)", COURSE, flags=re.M)
    assert parallel, "course: the test command must set parallel=(...) when it has more than one worker"
    words = parallel.group(1).split()
    assert words[:2] == ["-n", '"$workers"'] and "--dist loadfile" in " ".join(words), words
    assert "--no-loadscope-reorder" in words, words
    runs = re.findall(r'"\$PY" -m pytest --nbval[^|]*?\|\| status=\$\?', COURSE, flags=re.S)
    assert len(runs) == 2 and all('${parallel[@]+"${parallel[@]}"}' in run for run in runs), runs


def test_the_benchmark_splits_at_lines_the_scripts_print():
    bench = _load_benchmark()
    for marker, _ in bench.MARKERS:
        words = marker.removeprefix("[course] ")
        assert re.search(rf'^\s*say "{re.escape(words)}', COURSE, flags=re.M), f"course no longer says {marker!r}"


def test_phases_are_timed_from_the_markers_and_keep_pytests_summary(tmp_path, monkeypatch):
    """A stand-in for .ci/run prints the markers and pytest's summary lines; the clock is a stand-in too (the
    times are read at the start, at each marker and at the end), so the split is checked exactly."""
    bench = _load_benchmark()
    readings = iter([100.0, 130.5, 400.0, 460.25])

    class Clock:
        monotonic = staticmethod(lambda: next(readings))
        strftime = staticmethod(bench.time.strftime)
    monkeypatch.setattr(bench, "time", Clock)
    script = tmp_path / "run"
    script.write_text("import sys\n"
                      "print('installing', flush=True)\n"
                      "print('[course] first pass: the whole suite in 2 workers', file=sys.stderr, flush=True)\n"
                      "print('==== 3 passed, 1 skipped in 0.60s ====', flush=True)\n"
                      "print('[course] second pass: lessons and solutions', file=sys.stderr, flush=True)\n"
                      "print('==== 1 failed, 2 passed in 0.10s ====', flush=True)\n"
                      "sys.exit(1)\n")
    status, phases = bench.run_phases([sys.executable, str(script)], tmp_path, {}, tmp_path / "log")
    assert status == 1
    assert phases == [{"name": "set-up", "summary": "", "seconds": 30.5},
                      {"name": "pass 1", "summary": "3 passed, 1 skipped in 0.60s", "seconds": 269.5},
                      {"name": "pass 2", "summary": "1 failed, 2 passed in 0.10s", "seconds": 60.25}]
    assert "[course] second pass" in (tmp_path / "log").read_text()
    assert bench.minutes(269.5) == "4 min 29.5 s"


def test_only_keeps_the_named_tests_and_notebooks(tmp_path):
    bench = _load_benchmark()
    for name in ["tests/test_a.py", "tests/test_b.py", "tests/browser/test_lab.py", "tests/conftest.py",
                 "notebooks/00_x.ipynb", "notebooks/01_y.ipynb", "solutions/00_x.ipynb", "exercises/00_x.ipynb"]:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("")
    kept = bench.keep_only(tmp_path, ["tests/test_a.py", "notebooks/00_x.ipynb"])
    assert kept == ["notebooks/00_x.ipynb", "tests/test_a.py"]
    left = sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*") if p.is_file())
    assert left == ["exercises/00_x.ipynb", "notebooks/00_x.ipynb", "tests/conftest.py", "tests/test_a.py"]


def test_the_profile_sums_each_files_tests_and_lists_the_costliest(tmp_path, capsys):
    profile = _load_benchmark("suite_profile")
    report = tmp_path / "p.xml"
    report.write_text('<testsuites><testsuite name="pytest">'
                      '<testcase classname="tests.test_a" name="test_one" time="1.5"/>'
                      '<testcase classname="tests.test_a" name="test_two" time="2.5"/>'
                      '<testcase classname="notebooks.09_capstone.ipynb" name="Cell 3" time="6.0"/>'
                      '</testsuite></testsuites>')
    profile.main([str(report), "--top", "2"])
    out = capsys.readouterr().out
    assert "3 tests in 2 files: 10 s of test time" in out, out
    names = ("tests.test_a", "notebooks.09_capstone")
    files = [line.split() for line in out.splitlines() if line.rstrip().endswith(names)]
    assert files == [["6.0", "60.0%", "1", "notebooks.09_capstone"], ["4.0", "40.0%", "2", "tests.test_a"]], out
    assert "test_two" in out and "test_one" not in out, out  # --top 2: the two costliest tests only
