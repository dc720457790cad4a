"""The reusable lesson-07 tools live in ampcourse.diagnostics; ampcourse.troubleshoot keeps the demos and re-exports
the tools, so old imports (and the recorder built on them) keep working."""

import ast
from pathlib import Path

import pytest

from ampcourse import diagnostics, troubleshoot

TOOLS = ("find_nonfinite", "NonFiniteReport", "ModuleRecord", "activation_peaks", "grad_stats", "GradStats",
         "diagnose_scale", "ScaleDiagnosis", "COLLAPSE_WINDOW", "MAX_SKIP_FRACTION", "FP32Island", "fp32_loss",
         "anomaly_message", "AnomalyReport", "anomaly_overhead")


@pytest.mark.parametrize("name", TOOLS)
def test_each_tool_is_defined_in_diagnostics_and_the_same_object_in_troubleshoot(name):
    assert name in diagnostics.__all__
    assert name in troubleshoot.__all__
    assert getattr(troubleshoot, name) is getattr(diagnostics, name)


def test_the_old_import_line_still_works():
    from ampcourse.troubleshoot import COLLAPSE_WINDOW, diagnose_scale, find_nonfinite  # noqa: F401

    assert find_nonfinite.__module__ == "ampcourse.diagnostics"
    assert diagnose_scale.__module__ == "ampcourse.diagnostics"


def test_diagnostics_does_not_import_the_demos():
    """The tools stand alone: diagnostics imports nothing from troubleshoot (the dependency goes one way)."""
    tree = ast.parse(Path(diagnostics.__file__).read_text(encoding="utf-8"))
    imported = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module}
    assert not any("troubleshoot" in module for module in imported)


def test_no_demo_is_left_in_diagnostics():
    demos = ("overflow_model", "train_in_bf16", "scaled_training_run", "underflow_comparison", "WhereSqrt",
             "SeedFP32Loss", "SYMPTOMS", "symptom_table", "scale_history_png", "large_activation_stats")
    assert [name for name in demos if hasattr(diagnostics, name)] == []
