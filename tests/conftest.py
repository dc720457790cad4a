"""Shared fixtures for the unit tests.

``figures`` lets a test report a measured figure (a count, a ratio); they are all printed in the
terminal summary at the end of the run, so the numbers a test checked are visible in CI's log (also when the run
is split among pytest-xdist workers: each hands its figures to the controller).
"""

import os
import shutil

import kernel_zygote
import pytest
import torch

from ampcourse.course import ROOT

_FIGURES: list[str] = []


def _threads_per_worker() -> int | None:
    """In a pytest-xdist run of several workers (``./course test`` runs one per CPU), each worker's share of the
    CPUs (CPUs / workers, at least one); ``None`` in a serial run or where ``OMP_NUM_THREADS`` is set already."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1") or 1)
    if workers <= 1 or "OMP_NUM_THREADS" in os.environ:
        return None
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return max(1, cpus // workers)


def pytest_configure(config):
    """A worker's torch gets its share of the CPUs instead of all of them: intra-op threads of every worker
    spinning on every core beside the others' cost time (oversubscription). The run's kernels are forked from
    templates that have imported torch (``tests/kernel_zygote.py``)."""
    threads = _threads_per_worker()
    if threads is not None:
        torch.set_num_threads(threads)
    if not hasattr(config, "workerinput"):
        _kernels_from_templates(config)


def _kernels_from_templates(config) -> None:
    """Every kernel this run starts (its workers', and those of the processes they start) runs
    ``tests/kernel_zygote.py``'s client, through a ``python3`` kernelspec first on ``JUPYTER_PATH``. Not where
    ``AMPCOURSE_KERNEL_ZYGOTE`` is set already (an outer run's, or ``off``: ordinary kernels)."""
    if kernel_zygote.DIR_VARIABLE in os.environ:
        return
    import json
    import tempfile

    from jupyter_client.kernelspec import KernelSpecManager

    folder = tempfile.mkdtemp(prefix="ampcourse-kernels-")
    spec = KernelSpecManager().get_kernel_spec("python3").to_dict()
    spec["argv"] = ["python", kernel_zygote.__file__, *spec["argv"][spec["argv"].index("-f"):]]
    with open(os.path.join(folder, "owner"), "w") as f:
        f.write(str(os.getpid()))
    os.makedirs(os.path.join(folder, "kernels", "python3"))
    with open(os.path.join(folder, "kernels", "python3", "kernel.json"), "w") as f:
        json.dump(spec, f)
    os.environ[kernel_zygote.DIR_VARIABLE] = folder
    os.environ["JUPYTER_PATH"] = os.pathsep.join(p for p in (folder, os.environ.get("JUPYTER_PATH")) if p)
    config.add_cleanup(lambda: shutil.rmtree(folder, ignore_errors=True))  # its templates exit within a second


@pytest.fixture(autouse=True)
def _share_of_the_cpus_for_started_processes(monkeypatch):
    """The processes a test under tests/ starts (kernels of the graders, ``pytest``, ``python -m ampcourse``) get
    the worker's share of the CPUs too. Not the lessons' and solutions' own nbval runs (no fixture of this conftest
    applies to them): those keep the learner's default threads, and the second pass runs them on one."""
    threads = _threads_per_worker()
    if threads is not None:
        monkeypatch.setenv("OMP_NUM_THREADS", str(threads))


@pytest.fixture
def figures():
    """Call ``figures("text")`` to add a line to the end-of-run figure summary."""
    return _FIGURES.append


@pytest.fixture
def course_sources():
    """``copy(dest)`` puts the course's notebooks at ``dest``: notebooks/ and solutions/ of this checkout, and
    exercises/ as ``python -m ampcourse build`` generates them (blank), with exercises/conftest.py.

    Not a copy of exercises/: in a learner's working copy it holds their answers, and a test that answers the
    exercises itself must start from the blank ones (tests/test_working_copy.py runs the suite on such a copy).
    """
    from ampcourse import authoring

    def copy(dest):
        for folder in ("notebooks", "solutions"):
            shutil.copytree(ROOT / folder, dest / folder)
        (dest / "exercises").mkdir()
        shutil.copy2(ROOT / "exercises" / "conftest.py", dest / "exercises" / "conftest.py")
        for path, text in authoring.generated_files(ROOT).items():
            if path.parent == ROOT / "exercises":
                (dest / "exercises" / path.name).write_text(text, encoding="utf-8")
        return dest
    return copy


#: Sections of other conftests' summaries that pytest-xdist workers handed over: title -> lines.
_SECTIONS: dict[str, list[str]] = {}


def pytest_sessionfinish(session):
    """In a pytest-xdist worker (``./course test`` runs several): hand this worker's figures to the controller,
    which prints the summary (a worker's own terminal summary is never shown). Other conftests add
    ``(title, line)`` pairs to ``workeroutput["ampcourse_sections"]`` for sections of their own."""
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:
        workeroutput["ampcourse_figures"] = list(_FIGURES)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):
    """pytest-xdist's controller, when a worker ends: keep its figures and sections for the summary."""
    output = getattr(node, "workeroutput", {})
    _FIGURES.extend(output.get("ampcourse_figures", []))
    for title, line in output.get("ampcourse_sections", []):
        _SECTIONS.setdefault(title, []).append(line)


def pytest_terminal_summary(terminalreporter):
    if _FIGURES:
        terminalreporter.section("figures checked by the tests")
        for line in _FIGURES:
            terminalreporter.write_line(line)
    for title, lines in _SECTIONS.items():
        terminalreporter.section(title)
        for line in lines:
            terminalreporter.write_line(line)
    log = os.path.join(os.environ.get(kernel_zygote.DIR_VARIABLE, ""), "templates.log")
    if not hasattr(terminalreporter.config, "workerinput") and os.path.isfile(log) and os.path.getsize(log):
        with open(log, errors="replace") as f:  # a template that failed: its kernels were ordinary (slower)
            lines = f.read().splitlines()
        terminalreporter.section("kernel templates (tests/kernel_zygote.py) wrote")
        for line in lines[-20:]:
            terminalreporter.write_line(line)


# Unit-test files of minutes (each starts many kernels and pytest runs): handed out with the notebooks, not last
# (one of them alone at the end kept one worker busy for 10 minutes while the other idled).
_LONG_TEST_FILES = ("test_pytest_plugin.py", "test_grading_integrity.py", "test_grading_robust.py", "test_grading.py",
                    "test_working_copy.py")


def _long_files_first(item) -> int:
    """The browser tests (the longest file: a JupyterLab, every lesson with a widget run in it), then the notebooks
    (nbval: 10-60 s each) and the unit-test files of minutes, then the other unit-test files (most a few seconds)."""
    if item.path.suffix == ".ipynb" or item.path.name in _LONG_TEST_FILES:
        return 1
    return 0 if ROOT / "tests" / "browser" in item.path.parents else 2


def pytest_collection_modifyitems(config, items):
    """In pytest-xdist workers, long files first (``./course test`` hands files out in collection order, whole:
    the long ones started first, the short ones fill in at the end and the workers finish together; the order in
    each file is kept). Tests marked ``gpu`` need CUDA: without it they skip (``python -m ampcourse gpucheck``
    runs them)."""
    if hasattr(config, "workerinput"):
        items.sort(key=_long_files_first)  # stable: each file's tests stay in order
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU (run: python -m ampcourse gpucheck on a GPU machine)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
