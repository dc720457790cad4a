"""The GPU check's machinery, on the CPU: nbval results parsed right, the dry run ends to end."""

import json
import subprocess
import sys

import nbformat
import pytest
import torch

from ampcourse import gpucheck


def _notebook(path, cells):
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    for n, (source, stored) in enumerate(cells, 1):
        cell = nbformat.v4.new_code_cell(source, execution_count=n)
        cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text=stored)] if stored else []
        nb.cells.append(cell)
    nbformat.write(nb, path)


def test_nbval_results_tell_a_raising_cell_from_a_differing_one(tmp_path):
    _notebook(tmp_path / "demo.ipynb", [
        ("print('same')", "same\n"),
        ("print('here')", "stored elsewhere\n"),
        ("raise ValueError('boom')", None),
    ])
    junit = tmp_path / "out.xml"
    subprocess.run([sys.executable, "-m", "pytest", "--nbval", "demo.ipynb", "-p", "no:cacheprovider",
                    "--nbval-current-env", f"--junitxml={junit}", "-q"],
                   cwd=tmp_path, capture_output=True, text=True, timeout=300)
    [result] = gpucheck.parse_nbval_junit(junit)
    assert result.path == "demo.ipynb"
    assert result.cells == 3
    assert result.errors == ["Cell 2"]
    assert result.differs == ["Cell 1"]
    assert result.status == "FAILED"


def test_without_cuda_the_check_says_how_to_dry_run(capsys):
    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    assert gpucheck.main([]) == 2
    assert "--cpu" in capsys.readouterr().err


def test_dry_run_of_the_tests_and_the_benchmark_writes_a_report(tmp_path, figures):
    code = gpucheck.main(["--cpu", "--skip-notebooks", "--report-dir", str(tmp_path)])
    report = json.loads((tmp_path / "gpu-check-cpu-dry-run.json").read_text())
    markdown = (tmp_path / "gpu-check-cpu-dry-run.md").read_text()
    assert code == 0, markdown
    assert report["ok"] and report["cpu_dry_run"]
    assert report["gpu_tests"]["failed"] == 0 and report["gpu_tests"]["skipped"] > 0  # no CUDA here
    assert "fp32" in report["benchmark"]["table"] and "bf16" in report["benchmark"]["table"]
    assert "## Lesson-06 benchmark" in markdown
    figures(f"gpucheck --cpu --skip-notebooks: {report['gpu_tests']['skipped']} GPU tests skipped, "
            f"benchmark table of {report['benchmark']['table'].count(chr(10)) + 1} lines")


def test_render_lists_every_notebook_and_the_verdict():
    report = {"cpu_dry_run": False, "environment": {"gpu": "X"}, "ok": False, "seconds": 1.0,
              "notebooks": [{"path": "notebooks/a.ipynb", "cells": 3, "status": "FAILED",
                             "errors": ["Cell 2"], "differs": []}],
              "gpu_tests": {"passed": 1, "failed": 0, "skipped": 0}, "logs": {}}
    text = gpucheck.render(report)
    assert "**Result: FAIL**" in text and "| notebooks/a.ipynb | 3 | FAILED | Cell 2 | – |" in text
    bench = {"sizes": {}, "table": "the table", "matmuls": [], "noise": None}
    assert "Warning" not in gpucheck.render({**report, "benchmark": bench})
    noisy = gpucheck.render({**report, "benchmark": {**bench, "noise": "Warning: the 4 rounds of fp16 disagreed"}})
    assert "the table\n```\n\nWarning: the 4 rounds of fp16 disagreed\n" in noisy  # under the benchmark table


def test_fp8_row_skips_with_a_reason_without_fp8_tensor_cores():
    if torch.cuda.is_available() and torch.cuda.get_device_capability() >= (8, 9):
        pytest.skip("this GPU has FP8 Tensor Cores")
    row = gpucheck.fp8_speed_row("cuda" if torch.cuda.is_available() else "cpu")
    assert set(row) == {"skipped"} and "FP8 Tensor Cores" in row["skipped"]


def test_fp8_row_dry_run_times_bf16_and_emulated_fp8_and_renders():
    """The GPU code path, at tiny sizes with emulated FP8: what runs on a compute-capability >= 8.9 GPU."""
    row = gpucheck.fp8_speed_row("cpu", dry_run=True, repeats=2)
    assert row["emulated"] and not row["compiled"] and row["fp8 speed-up"] > 0
    report = {"cpu_dry_run": True, "environment": {}, "ok": True, "seconds": 1.0, "notebooks": [],
              "gpu_tests": {"passed": 0, "failed": 0, "skipped": 0}, "logs": {}, "fp8": row}
    text = gpucheck.render(report)
    assert "## Lesson-10 FP8 row" in text and "| 2 × Linear(64), batch 64 | False | True |" in text
    skipped = gpucheck.render({**report, "fp8": {"skipped": "no FP8 Tensor Cores on cpu"}})
    assert "Skipped: no FP8 Tensor Cores on cpu." in skipped


def test_speed_problems_fail_a_cuda_run_whose_16_bit_products_are_not_faster():
    from ampcourse import gpucheck

    rows = [{"dtype": "float32", "n": 8192, "TFLOP/s": 50.0}, {"dtype": "bfloat16", "n": 8192, "TFLOP/s": 400.0},
            {"dtype": "float16", "n": 8192, "TFLOP/s": 55.0}]
    problems = gpucheck.speed_problems(rows, "cuda")
    assert len(problems) == 1 and problems[0].startswith("float16 8192³: 1.1×")
    assert gpucheck.speed_problems(rows, "cpu") == []  # no Tensor Cores to check on a CPU
