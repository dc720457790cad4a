"""The package as a learner or a maintainer gets it: every module's ``>>>`` examples run, and a non-editable
install (a built wheel) holds every subpackage and runs lesson 00's quiz."""

import doctest
import importlib
import os
import pkgutil
import shutil
import subprocess
import sys
import zipfile

import pytest
import torch

import ampcourse
from ampcourse.course import ROOT

# Modules that only make sense as a program (they start processes or read their command line when imported).
NOT_IMPORTABLE = {"ampcourse.__main__", "ampcourse.ddp_train"}
MODULES = sorted(m.name for m in pkgutil.walk_packages(ampcourse.__path__, "ampcourse.")
                 if m.name not in NOT_IMPORTABLE)


@pytest.mark.parametrize("name", MODULES)
def test_module_examples_run(name):
    """Each module's ``>>>`` examples are true (doctest), so a docstring cannot drift from the code."""
    module = importlib.import_module(name)
    flags = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE
    result = doctest.testmod(module, extraglobs={"torch": torch}, optionflags=flags)
    assert result.failed == 0, f"{name}: {result.failed} of {result.attempted} examples failed"


def test_non_editable_install_has_every_module_and_runs_a_quiz(tmp_path):
    """``pip install .`` (not ``-e``): the wheel has every subpackage (``packages.find``), its data, and lesson
    00's quiz builds from it, and the recorder a learner takes to their own model imports from it."""
    source = tmp_path / "source"  # a clean copy: an in-tree build/ folder would leak files of an older build
    shutil.copytree(ROOT / "ampcourse", source / "ampcourse", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, source / name)
    subprocess.run([sys.executable, "-m", "pip", "wheel", str(source), "--no-deps", "--no-build-isolation", "-q",
                    "-w", str(tmp_path / "wheel")], check=True, cwd=tmp_path, capture_output=True)
    (wheel,) = (tmp_path / "wheel").glob("ampcourse-*.whl")
    site = tmp_path / "site"
    with zipfile.ZipFile(wheel) as z:
        z.extractall(site)
    packages = {str(p.parent.relative_to(site)).replace(os.sep, ".") for p in site.rglob("__init__.py")}
    on_disk = {str(p.parent.relative_to(ROOT)).replace(os.sep, ".") for p in (ROOT / "ampcourse").rglob("__init__.py")}
    assert packages == on_disk, f"missing from the wheel: {sorted(on_disk - packages)}"
    code = ("import ampcourse, pathlib, sys; assert pathlib.Path(ampcourse.__file__).is_relative_to(sys.argv[1]), "
            "ampcourse.__file__\n"
            "from ampcourse.quiz import lesson_quiz; from ampcourse import capstone\n"
            "from ampcourse.recorder import AmpRecorder; from ampcourse import own_model  # issue 24: plain install\n"
            "quiz = lesson_quiz('00'); print(type(quiz).__name__, len(capstone.load_digits()) > 0)")
    env = {**os.environ, "PYTHONPATH": str(site)}
    out = subprocess.run([sys.executable, "-c", code, str(site)], cwd=tmp_path, env=env, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
