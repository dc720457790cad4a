"""Project hygiene: set-up files agree, CI runs the README's command, code and notebooks pass ruff."""

import re
import subprocess
import sys

import pytest
import yaml

try:
    import tomllib
except ImportError:  # Python 3.10
    tomllib = pytest.importorskip("tomli")

from ampcourse.course import ROOT

CONDA_NAMES = {"torch": "pytorch"}  # conda-forge spells a few packages differently


def _split(requirement):
    match = re.fullmatch(r"\s*([A-Za-z0-9_.-]+)\s*(.*)", requirement)
    return match.group(1).lower().replace("_", "-"), match.group(2).replace(" ", "")


def test_environment_yml_lists_the_same_dependencies_as_pyproject():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    wanted = [_split(r) for r in project["dependencies"] + project["optional-dependencies"]["dev"]]
    wanted = {CONDA_NAMES.get(name, name): spec for name, spec in wanted}
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    listed = dict(_split(d) for d in env["dependencies"] if isinstance(d, str))
    python = listed.pop("python")
    assert python == project["requires-python"]
    assert listed == wanted


def test_ci_runs_the_readme_test_command():
    readme = (ROOT / "README.md").read_text()
    ci = (ROOT / ".ci" / "run").read_text()
    commands = re.findall(r"^(\./course \w+)\s*(?:#.*)?$", readme, flags=re.M)
    assert commands[:2] == ["./course lab", "./course test"], commands
    assert re.search(r"^\s*(exec\s+)?\./course test\s*$", ci, flags=re.M), ".ci/run must call ./course test"


def test_ruff_passes_on_package_tests_and_notebooks():
    result = subprocess.run([sys.executable, "-m", "ruff", "check", "."], cwd=ROOT,
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_course_test_runs_lessons_and_solutions_again_under_other_cpu_kernels():
    """Issue 12: stored outputs must hold on every CPU, so `./course test` (what CI runs) has a second pass
    of the lessons and solutions under other kernels; CONTRIBUTING.md says how to run it by hand."""
    script = (ROOT / "course").read_text()
    default = re.search(r'^OTHER_CPU_DEFAULT="([^"]+)"', script, flags=re.M)
    assert default, "course must define OTHER_CPU_DEFAULT"
    settings = dict(word.split("=", 1) for word in default.group(1).split())
    assert settings == {"ATEN_CPU_CAPABILITY": "default", "DNNL_MAX_CPU_ISA": "AVX2", "OMP_NUM_THREADS": "1"}
    second_pass = r'env \$other TORCHINDUCTOR_CACHE_DIR="\$inductor_cache" "\$PY" -m pytest --nbval notebooks solutions'
    assert re.search(second_pass, script)
    contributing = (ROOT / "CONTRIBUTING.md").read_text()
    for name in settings:
        assert name in contributing, f"CONTRIBUTING.md must say how to run the second pass ({name})"
