"""``./course`` finds a broken or half-built environment and repairs it (issue 17, "Set-up repairs itself").

Each test builds a scratch venv in seconds (``python -m venv --without-pip``, with empty stand-in packages for the
course's dependencies and, where a test needs one, a stand-in ``pip`` that records what it is asked to do and
"installs" a stand-in package) and points ``./course`` at it with ``AMPCOURSE_VENV``. ``./course doctor`` reports
what set-up would do without changing anything; ``./course setup`` does it.
"""

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ampcourse.course import ROOT

pytestmark = pytest.mark.skipif(sys.platform == "win32" or shutil.which("bash") is None, reason="./course is bash")

COURSE = (ROOT / "course").read_text()
DEPENDENCIES = re.search(r'^DEPENDENCIES="([^"]+)"', COURSE, flags=re.M).group(1).split()
KERNEL_MODULES = re.search(r'^KERNEL_MODULES="([^"]+)"', COURSE, flags=re.M).group(1).split()

FAKE_PIP = '''
import os, pathlib, sys
args = sys.argv[1:]
with open(os.environ["FAKE_PIP_LOG"], "a") as log:
    log.write(" ".join(args) + "\\n")
if args[:1] == ["--version"]:
    print("pip 0 (a stand-in for the tests)")
    sys.exit(0)
if os.environ.get("FAKE_PIP_FAIL") and args[:1] == ["install"]:
    sys.exit(1)  # offline
if os.environ.get("FAKE_PIP_WAIT") and args[:1] == ["install"]:
    import time
    try:
        time.sleep(60)  # until a Ctrl-C: then, like pip, "Operation cancelled by user" and exit status 1
    except KeyboardInterrupt:
        print("ERROR: Operation cancelled by user", file=sys.stderr)
        sys.exit(1)
site = pathlib.Path(__file__).resolve().parent.parent
names = os.environ.get("FAKE_PIP_INSTALLS", "").split()
for arg in args:
    if arg == ".[dev]":  # the course package and all its dependencies
        wanted = names
    else:
        wanted = [n for n in names if arg.split("=")[0].split(">")[0].split("<")[0] == n]
    for name in wanted:
        (site / name).mkdir(exist_ok=True)
        (site / name / "__init__.py").write_text("")
'''


def _site_packages(venv: Path) -> Path:
    return next((venv / "lib").glob("python3*/site-packages"))


def make_venv(tmp_path: Path, *, pip: bool = True, modules=None, stamp: bool = True) -> Path:
    """A scratch venv with a real python, empty stand-ins for ``modules`` (default: every dependency but the
    course package, which Python finds in the repository), a stand-in pip and the "installed" stamp."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    site = _site_packages(venv)
    for name in modules if modules is not None else [d for d in DEPENDENCIES if d != "ampcourse"]:
        (site / name).mkdir()
        (site / name / "__init__.py").write_text("")
    for dotted in KERNEL_MODULES:  # the submodules ./course doctor imports, under the stand-ins made above
        top, _, rest = dotted.partition(".")
        if rest and (site / top).is_dir():
            (site / top / f"{rest}.py").write_text("")
    if pip:
        (site / "pip").mkdir()
        (site / "pip" / "__init__.py").write_text("")
        (site / "pip" / "__main__.py").write_text(FAKE_PIP)
    if stamp:
        checksum = subprocess.run(["cksum"], stdin=open(ROOT / "pyproject.toml", "rb"), capture_output=True,
                                  text=True, check=True).stdout
        (venv / ".ampcourse-installed").write_text(checksum)
    return venv


def course(venv: Path, *args: str, tmp_path: Path, **env: str) -> subprocess.CompletedProcess:
    environment = {k: v for k, v in os.environ.items() if not k.startswith(("AMPCOURSE_", "VIRTUAL_ENV"))}
    environment.update(AMPCOURSE_VENV=str(venv), FAKE_PIP_LOG=str(tmp_path / "pip.log"), **env)
    return subprocess.run([str(ROOT / "course"), *args], capture_output=True, text=True, env=environment,
                          timeout=120)


def pip_calls(tmp_path: Path) -> list[str]:
    log = tmp_path / "pip.log"
    return [c for c in log.read_text().splitlines() if c != "--version"] if log.exists() else []


def _tree(path: Path) -> list[str]:
    return sorted(str(p.relative_to(path)) for p in path.rglob("*"))


def test_a_healthy_venv_is_left_alone(tmp_path):
    venv = make_venv(tmp_path)
    before = _tree(venv)
    done = course(venv, "doctor", tmp_path=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "is healthy" in done.stderr
    assert _tree(venv) == before and pip_calls(tmp_path) == []


def test_doctor_finds_a_deleted_torch_folder_and_changes_nothing(tmp_path):
    venv = make_venv(tmp_path)
    shutil.rmtree(_site_packages(venv) / "torch")
    before = _tree(venv)
    done = course(venv, "doctor", tmp_path=tmp_path)
    assert done.returncode == 1
    assert "torch does not import: set-up would reinstall torch==" in done.stderr, done.stderr
    assert _tree(venv) == before and pip_calls(tmp_path) == []


def test_setup_reinstalls_a_deleted_torch_and_checks_the_result(tmp_path):
    venv = make_venv(tmp_path)
    shutil.rmtree(_site_packages(venv) / "torch")
    done = course(venv, "setup", tmp_path=tmp_path, FAKE_PIP_INSTALLS="torch")
    assert done.returncode == 0, done.stderr
    assert "repairing" in done.stderr and "torch does not import" in done.stderr
    calls = pip_calls(tmp_path)
    assert len(calls) == 1 and re.search(r"install .*--force-reinstall --no-deps .*torch==\S+", calls[0]), calls
    assert (_site_packages(venv) / "torch" / "__init__.py").exists()
    assert "is ready" in done.stderr


def test_setup_stops_with_a_message_when_the_repair_did_not_take(tmp_path):
    # pip "succeeds" but torch still does not import (FAKE_PIP_INSTALLS is empty): no start on a broken venv.
    venv = make_venv(tmp_path)
    shutil.rmtree(_site_packages(venv) / "torch")
    done = course(venv, "setup", tmp_path=tmp_path)
    assert done.returncode == 1
    assert "still broken after the repair: torch did not import" in done.stderr, done.stderr
    assert "rm -rf" in done.stderr and "is ready" not in done.stderr


def test_a_missing_dependency_is_reinstalled_at_the_version_pyproject_asks_for(tmp_path):
    venv = make_venv(tmp_path)
    shutil.rmtree(_site_packages(venv) / "nbval")
    doctor = course(venv, "doctor", tmp_path=tmp_path)
    assert doctor.returncode == 1 and "these packages do not import: nbval" in doctor.stderr, doctor.stderr
    done = course(venv, "setup", tmp_path=tmp_path, FAKE_PIP_INSTALLS="nbval")
    assert done.returncode == 0, done.stderr
    calls = pip_calls(tmp_path)
    assert any(re.search(r"--force-reinstall --no-deps nbval\S*", c) for c in calls), calls
    assert any(c.endswith("-e .[dev]") for c in calls), calls


@pytest.mark.parametrize("how", ["without-pip", "no-python"])
def test_doctor_finds_a_venv_without_pip_or_python(tmp_path, how):
    venv = make_venv(tmp_path, pip=False)
    if how == "no-python":
        for python in (venv / "bin").glob("python*"):
            python.unlink()
    done = course(venv, "doctor", tmp_path=tmp_path)
    assert done.returncode == 1
    words = "it has no pip" if how == "without-pip" else "no python in it"
    assert f"is broken ({words}" in done.stderr and "set-up would delete and rebuild it" in done.stderr, done.stderr
    assert venv.exists()


def test_setup_rebuilds_a_venv_without_pip(tmp_path):
    # The rebuild is cut short by a PYTHON that does not exist: what matters is that the old venv went.
    venv = make_venv(tmp_path, pip=False)
    done = course(venv, "setup", tmp_path=tmp_path, PYTHON=str(tmp_path / "no-such-python"))
    assert done.returncode == 1
    assert "it has no pip" in done.stderr and "rebuilding it" in done.stderr, done.stderr
    assert "no '" in done.stderr and "found" in done.stderr  # make_venv's message about PYTHON
    assert not venv.exists()


def test_a_python_without_ensurepip_gets_a_way_out(tmp_path):
    """A Python whose ``venv`` makes no pip (Debian without python3-venv): the half-made venv is removed and the
    message says what to install."""
    fake_python = tmp_path / "python3-without-ensurepip"
    fake_python.write_text(f'#!/bin/sh\nif [ "$1" = -m ] && [ "$2" = venv ]; then shift 2; '
                           f'exec "{sys.executable}" -m venv --without-pip "$@"; fi\nexec "{sys.executable}" "$@"\n')
    fake_python.chmod(0o755)
    venv = tmp_path / "venv"
    done = course(venv, "setup", tmp_path=tmp_path, PYTHON=str(fake_python))
    assert done.returncode == 1
    assert "made a .venv without pip" in done.stderr and "python3-venv" in done.stderr, done.stderr
    assert not venv.exists()


def test_changed_requirements_reinstall_the_course_package(tmp_path):
    venv = make_venv(tmp_path, stamp=False)
    doctor = course(venv, "doctor", tmp_path=tmp_path)
    assert doctor.returncode == 1 and "not installed for this pyproject.toml" in doctor.stderr, doctor.stderr
    done = course(venv, "setup", tmp_path=tmp_path)
    assert done.returncode == 0, done.stderr
    assert pip_calls(tmp_path) == ["install --quiet -e .[dev]"]
    assert course(venv, "doctor", tmp_path=tmp_path).returncode == 0


def test_doctor_imports_what_the_kernel_needs(tmp_path):
    """Audit r3, finding 19: with pyzmq deleted or matplotlib emptied (a namespace package), doctor said healthy
    and grade blamed the notebook. Doctor now imports each dependency, the kernel's among them."""
    venv = make_venv(tmp_path)
    shutil.rmtree(_site_packages(venv) / "zmq")
    done = course(venv, "doctor", tmp_path=tmp_path)
    assert done.returncode == 1 and re.search(r"do not import: .*zmq", done.stderr), done.stderr
    venv2 = make_venv(tmp_path / "second")
    (_site_packages(venv2) / "matplotlib" / "__init__.py").unlink()
    (_site_packages(venv2) / "matplotlib" / "pyplot.py").unlink()
    done = course(venv2, "doctor", tmp_path=tmp_path)
    assert done.returncode == 1 and "matplotlib" in done.stderr, done.stderr
    venv3 = make_venv(tmp_path / "third")
    (_site_packages(venv3) / "nbval" / "plugin.py").write_text("raise ImportError('a broken nbval')\n")
    done = course(venv3, "doctor", tmp_path=tmp_path)
    assert done.returncode == 1 and "nbval.plugin" in done.stderr, done.stderr


def test_offline_a_changed_pyproject_only_warns_when_everything_imports(tmp_path):
    """Audit r3, finding 21: offline, a comment added to pyproject.toml made every ./course command stop with the
    "Offline?" hint although every dependency was installed."""
    venv = make_venv(tmp_path)
    (venv / ".ampcourse-installed").write_text("an older pyproject.toml\n")
    done = course(venv, "setup", tmp_path=tmp_path, FAKE_PIP_FAIL="1")
    assert done.returncode == 0 and "going on" in done.stderr, done.stderr
    assert (venv / ".ampcourse-installed").read_text() == "an older pyproject.toml\n"  # tried again next time
    shutil.rmtree(_site_packages(venv) / "numpy")  # a real gap still stops, with the hint
    done = course(venv, "setup", tmp_path=tmp_path, FAKE_PIP_FAIL="1")
    assert done.returncode == 1 and "Offline or behind a proxy?" in done.stderr, done.stderr


def test_a_python_that_does_not_run_is_not_called_too_old(tmp_path):
    """Audit r3, finding 23: a pyenv shim for a Python that is not installed was reported as "too old"."""
    shim = tmp_path / "python3.13"
    shim.write_text("#!/bin/sh\necho 'pyenv: python3.13: command not found' >&2\nexit 127\n")
    shim.chmod(0o755)
    done = course(tmp_path / "no-venv", "setup", tmp_path=tmp_path, PYTHON=str(shim))
    assert done.returncode == 1 and "does not run: pyenv: python3.13: command not found" in done.stderr, done.stderr
    assert "too old" not in done.stderr


def test_a_folder_name_that_is_not_utf8_is_named_not_blamed_on_torch(tmp_path):
    """Audit r3, finding 24: in a folder whose name is not valid UTF-8, ``import torch`` fails (UnicodeEncodeError),
    and doctor offered to reinstall torch, which cannot help. Now doctor and set-up name the folder and stop,
    without calling pip; a folder with spaces and accents in its name still works."""
    venv = make_venv(tmp_path)
    for name, bad in ((os.fsdecode(b"course-caf\xe9"), True), ("my course café", False)):
        folder = tmp_path / name
        folder.mkdir()
        for file in ("course", "pyproject.toml", "lab-overrides.json"):
            shutil.copy2(ROOT / file, folder / file)
        environment = {k: v for k, v in os.environ.items() if not k.startswith(("AMPCOURSE_", "VIRTUAL_ENV"))}
        # the copied folder has no ampcourse/ of its own: the course's package comes from this checkout
        environment.update(AMPCOURSE_VENV=str(venv), FAKE_PIP_LOG=str(tmp_path / "pip.log"), PYTHONPATH=str(ROOT))
        for command in ("doctor", "setup"):
            done = subprocess.run([str(folder / "course"), command], capture_output=True, env=environment, timeout=120)
            err = done.stderr.decode("utf-8", "replace")
            if bad:
                assert done.returncode == 1 and "the course folder's path is not valid UTF-8" in err, err
                assert "reinstall torch" not in err and "Rename or move the folder" in err, err
            else:
                assert "not valid UTF-8" not in err and done.returncode == 0, err
        assert pip_calls(tmp_path) == []


def _half_written(site: Path, name: str, version: str = "1.0") -> Path:
    """pip's record of ``name`` as a Ctrl-C in mid-install leaves it: METADATA cut off after its Name line."""
    record = site / f"{name}-{version}.dist-info"
    record.mkdir()
    (record / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\n")
    return record


def test_real_pip_fails_on_a_half_written_record(tmp_path):
    """Audit r3, finding 22, the mechanism: a run after a Ctrl-C in the first set-up's install failed with pip's
    `TypeError: expected string or bytes-like object, got 'NoneType'`. pip (the course's own) fails so on any
    dist-info whose METADATA has a Name and no Version (cut off while pip wrote it)."""
    pip_dir = Path(__import__("pip").__file__).parent
    site = tmp_path / "site"
    site.mkdir()
    _half_written(site, "jupyterlab")
    env = {**os.environ, "PYTHONPATH": f"{site}{os.pathsep}{pip_dir.parent}", "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    done = subprocess.run([sys.executable, "-m", "pip", "list", "--path", str(site)], capture_output=True,
                          text=True, env=env, timeout=120)
    assert done.returncode != 0 and "expected string or bytes-like object" in done.stderr, done.stderr[-2000:]


def test_setup_removes_half_written_records_and_installs_again(tmp_path):
    """Audit r3, finding 22: doctor names the half-written records; set-up removes them and installs again (torch's
    through install_torch, so never the default build pip would pull)."""
    venv = make_venv(tmp_path)
    site = _site_packages(venv)
    lab, torch_record = _half_written(site, "jupyterlab"), _half_written(site, "torch", "2.13.0")
    (site / "numpy-2.0.dist-info").mkdir()  # a record without METADATA at all
    before = _tree(venv)
    doctor = course(venv, "doctor", tmp_path=tmp_path)
    assert doctor.returncode == 1 and "half-written" in doctor.stderr, doctor.stderr
    assert all(n in doctor.stderr for n in ("jupyterlab-1.0.dist-info", "torch-2.13.0.dist-info", "numpy-2.0"))
    assert _tree(venv) == before and pip_calls(tmp_path) == []
    done = course(venv, "setup", tmp_path=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "removing pip's half-written record jupyterlab-1.0.dist-info" in done.stderr, done.stderr
    assert not lab.exists() and not torch_record.exists() and not (site / "numpy-2.0.dist-info").exists()
    calls = pip_calls(tmp_path)
    assert len(calls) == 2 and re.search(r"install .*--force-reinstall --no-deps .*torch==\S+", calls[0]), calls
    assert calls[1] == "install --quiet -e .[dev]", calls
    assert "torch does not import" not in done.stderr  # it does: only its record was damaged
    assert course(venv, "doctor", tmp_path=tmp_path).returncode == 0


def test_ctrl_c_during_setup_says_interrupted_not_offline(tmp_path):
    """Audit r3, finding 22: Ctrl-C in set-up's install printed the "Offline or behind a proxy?" hint."""
    import signal
    import time

    venv = make_venv(tmp_path, stamp=False)
    environment = {k: v for k, v in os.environ.items() if not k.startswith(("AMPCOURSE_", "VIRTUAL_ENV"))}
    environment.update(AMPCOURSE_VENV=str(venv), FAKE_PIP_LOG=str(tmp_path / "pip.log"), FAKE_PIP_WAIT="1")
    # its own process group, as a terminal's foreground job, with Ctrl-C's default action (a pytest-xdist worker
    # ignores SIGINT, and a signal ignored when bash starts cannot be trapped: a terminal's job does not ignore it)
    run = subprocess.Popen([str(ROOT / "course"), "setup"], stderr=subprocess.PIPE, text=True, env=environment,
                           start_new_session=True, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.monotonic() + 60
    while not any(c.startswith("install") for c in pip_calls(tmp_path)) and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.3)  # pip is inside its sleep
    os.killpg(run.pid, signal.SIGINT)  # what Ctrl-C does: the signal to the whole foreground group
    _, stderr = run.communicate(timeout=60)
    assert run.returncode == 130, stderr
    assert "set-up interrupted: run ./course setup again" in stderr and "Offline" not in stderr, stderr


def test_setup_skips_the_slow_rfc3987_syntax_import_and_nbformat_still_validates(tmp_path):
    """Set-up writes a .pth line that keeps rfc3987_syntax (2 s of Lark grammar per process importing nbformat)
    from being imported; nbformat validates every course notebook with it in force."""
    venv = make_venv(tmp_path)
    done = course(venv, "setup", tmp_path=tmp_path)
    assert done.returncode == 0, done.stderr
    line = re.search(r'^SKIP_IMPORT_LINE="(.+)"$', COURSE, flags=re.M).group(1)
    assert [p.read_text() for p in _site_packages(venv).glob("*.pth") if "rfc3987" in p.name] == [line + "\n"]
    notebooks = sorted(str(p) for folder in ("notebooks", "solutions", "exercises")
                       for p in (ROOT / folder).glob("*.ipynb"))
    script = (f"{line}\nimport sys, nbformat\n"
              "for path in sys.argv[1:]:\n    nbformat.validate(nbformat.read(path, as_version=4))\n"
              "assert sys.modules['rfc3987_syntax'] is None\nprint(len(sys.argv) - 1)")
    checked = subprocess.run([sys.executable, "-c", script, *notebooks], capture_output=True, text=True, timeout=120)
    assert checked.returncode == 0 and checked.stdout.strip() == str(len(notebooks)), checked.stderr


def test_setup_byte_compiles_the_environment_once_where_python_caches_no_bytecode(tmp_path):
    """With PYTHONDONTWRITEBYTECODE=1 (many container and CI images) every process compiled torch again from source
    (``import torch``: 5.0 s of CPU instead of 2.6 s): set-up compiles the packages once, and not on the next run."""
    import importlib.util

    venv = make_venv(tmp_path)
    site = _site_packages(venv)
    done = course(venv, "setup", tmp_path=tmp_path, PYTHONDONTWRITEBYTECODE="1")
    assert done.returncode == 0, done.stderr
    assert "byte-compiling the packages" in done.stderr, done.stderr
    assert Path(importlib.util.cache_from_source(str(site / "torch" / "__init__.py"))).is_file()
    (site / "late").mkdir()
    (site / "late" / "__init__.py").write_text("")
    done = course(venv, "setup", tmp_path=tmp_path, PYTHONDONTWRITEBYTECODE="1")
    assert done.returncode == 0 and "byte-compiling" not in done.stderr, done.stderr
    assert not Path(importlib.util.cache_from_source(str(site / "late" / "__init__.py"))).exists()
