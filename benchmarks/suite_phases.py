"""Time each phase of CI's ``bash .ci/run`` (``./course test``) on a fresh clone: set-up, pass 1, pass 2.

    python benchmarks/suite_phases.py                     # a fresh clone of HEAD in a scratch folder, all of it
    python benchmarks/suite_phases.py --workers 1         # the same without parallel workers (the old way)
    python benchmarks/suite_phases.py --rev main --keep ../suite-run  # another commit; keep the clone and its log

The clone is made with ``git clone`` (committed work only: commit first) and the command runs in it as CI runs
it: its own ``.venv`` made from nothing by ``./course`` (torch and the other packages from the registries), and
Debian's Chromium installed by ``.ci/run`` when ``/usr/bin/chromium`` is missing. The phases are read from the
lines the scripts print: set-up ends at ``[course] first pass``, pass 1 at ``[course] second pass``, pass 2 when
the command exits. Prints a table (wall time and pytest's summary line per phase) with the load average before
and after — on a shared machine the load changes the numbers a lot, so quote it with them. A measurement, not a
test: run it on a quiet machine of CI's kind (2 cores) for the before/after figure of issue 26.

To try the script itself without building a ``.venv`` (minutes, and a download):

    python benchmarks/suite_phases.py --reuse-packages .venv --only tests/test_floats.py \\
        notebooks/00_start_here.ipynb solutions/00_start_here.ipynb

``--reuse-packages VENV`` gives the clone a ``.venv`` that imports VENV's installed packages (a ``.pth`` file)
and the clone's own ``ampcourse`` (``PYTHONPATH``), so set-up only checks it (not for the browser tests: JupyterLab
finds the widget extension under the real ``.venv``); ``--only PATH...`` deletes every other ``tests/test_*.py``
file and lesson / solution notebook from the clone, so both passes run just those. Neither measures CI: the table
says when they were used.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
STAMP_NAME = ".ampcourse-installed"  # course: STAMP_NAME, the checksum of the pyproject.toml it was installed for
#: (phase that starts at a line beginning with this, its name), in the order the lines come.
MARKERS = [("[course] first pass", "pass 1"), ("[course] second pass", "pass 2")]
SUMMARY = re.compile(r"^=+ (.*\b(passed|failed|error|errors|skipped|deselected)\b.*) =+$")


def fresh_clone(rev: str, dest: Path) -> str:
    """``git clone`` this repository into ``dest`` and check out ``rev``; its full commit id."""
    commit = subprocess.run(["git", "rev-parse", "--verify", f"{rev}^{{commit}}"], cwd=ROOT, check=True,
                            capture_output=True, text=True).stdout.strip()
    subprocess.run(["git", "clone", "--quiet", "--no-checkout", str(ROOT), str(dest)], check=True)
    subprocess.run(["git", "checkout", "--quiet", "--detach", commit], cwd=dest, check=True)
    return commit


def keep_only(clone: Path, paths: list[str]) -> list[str]:
    """Delete every ``tests/test_*.py`` (also under tests/browser/) and lesson / solution notebook of ``clone``
    that ``paths`` does not name; the names kept."""
    wanted = {Path(p).as_posix() for p in paths}
    missing = [p for p in wanted if not (clone / p).is_file()]
    if missing:
        raise SystemExit(f"--only: not in the clone: {', '.join(sorted(missing))}")
    candidates = [*clone.glob("tests/**/test_*.py"), *clone.glob("notebooks/*.ipynb"), *clone.glob("solutions/*.ipynb")]
    for path in candidates:
        if path.relative_to(clone).as_posix() not in wanted:
            path.unlink()
    return sorted(wanted)


def reuse_packages(clone: Path, venv: Path) -> dict[str, str]:
    """Give ``clone`` a ``.venv`` whose Python imports ``venv``'s installed packages and the clone's own
    ``ampcourse``, stamped as installed for the clone's pyproject.toml (so ``./course`` installs nothing); the
    environment variables the run needs for it."""
    python = venv / "bin" / "python"
    if not python.exists():
        raise SystemExit(f"--reuse-packages: no {python}")
    purelib = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             check=True, capture_output=True, text=True).stdout.strip()
    scratch = clone / ".venv"
    subprocess.run([str(python), "-m", "venv", "--without-pip", str(scratch)], check=True)
    own = subprocess.run([str(scratch / "bin" / "python"), "-c",
                          "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                         check=True, capture_output=True, text=True).stdout.strip()
    # A plain path line: the .pth files in there (the editable install of another checkout's ampcourse) stay off.
    (Path(own) / "reused_packages.pth").write_text(purelib + "\n", encoding="utf-8")
    checksum = subprocess.run(["cksum"], stdin=open(clone / "pyproject.toml", "rb"), check=True,
                              capture_output=True, text=True).stdout
    (scratch / STAMP_NAME).write_text(checksum, encoding="utf-8")
    return {"PYTHONPATH": str(clone)}


def run_phases(command: list[str], cwd: Path, env: dict[str, str], log: Path) -> tuple[int, list[dict]]:
    """Run ``command``, its output (stdout and stderr together) to ``log`` and, line by line, split into phases;
    (exit status, [{"name", "seconds", "summary"}])."""
    phases = [{"name": "set-up", "start": time.monotonic(), "summary": ""}]
    with open(log, "w", encoding="utf-8") as out:
        process = subprocess.Popen(command, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                   stdin=subprocess.DEVNULL, text=True, bufsize=1)
        for line in process.stdout:
            out.write(line)
            out.flush()
            text = line.rstrip("\n")
            for marker, name in MARKERS:
                if text.startswith(marker):
                    phases.append({"name": name, "start": time.monotonic(), "summary": ""})
                    print(f"  {time.strftime('%H:%M:%S')} {text}", flush=True)
            found = SUMMARY.match(text.strip())
            if found:
                phases[-1]["summary"] = found.group(1)
        status = process.wait()
    end = time.monotonic()
    for phase, after in zip(phases, [*phases[1:], {"start": end}], strict=True):
        phase["seconds"] = after["start"] - phase.pop("start")
    return status, phases


def minutes(seconds: float) -> str:
    return f"{int(seconds // 60)} min {seconds % 60:4.1f} s"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rev", default="HEAD", help="the commit to clone (default: HEAD of this checkout)")
    parser.add_argument("--keep", type=Path, metavar="DEST", help="clone into DEST (a new folder) and keep it")
    parser.add_argument("--workers", help="AMPCOURSE_TEST_WORKERS for the run (default: ./course's, one per CPU)")
    parser.add_argument("--command", choices=["ci", "course"], default="ci",
                        help="ci: bash .ci/run, as CI (default); course: ./course test (no Chromium install)")
    parser.add_argument("--reuse-packages", type=Path, metavar="VENV",
                        help="for trying this script: the clone's .venv imports VENV's packages (installs nothing)")
    parser.add_argument("--only", nargs="+", metavar="PATH",
                        help="for trying this script: keep only these test files and notebooks in the clone")
    parser.add_argument("--log", type=Path, help="the run's whole output (default: a new file in the temp folder)")
    args = parser.parse_args(argv)

    scratch = None
    if args.keep:
        if args.keep.exists():
            raise SystemExit(f"--keep: {args.keep} exists; name a new folder")
        clone = args.keep.resolve()
    else:
        scratch = tempfile.mkdtemp(prefix="suite-phases-")
        clone = Path(scratch) / "ampcourse"
    try:
        commit = fresh_clone(args.rev, clone)
        env = {k: v for k, v in os.environ.items() if not k.startswith(("AMPCOURSE_", "PYTEST_"))}
        env.pop("PYTHONPATH", None)
        env["CI"] = "true"  # as CI runs it: a missing browser fails the browser tests instead of skipping them
        notes = []
        if args.only:
            notes.append(f"only {len(keep_only(clone, args.only))} files: {' '.join(args.only)}")
        if args.reuse_packages:
            env.update(reuse_packages(clone, args.reuse_packages.resolve()))
            notes.append(f"set-up reused the packages of {args.reuse_packages} (nothing installed)")
        if args.workers:
            env["AMPCOURSE_TEST_WORKERS"] = args.workers
        command = ["bash", ".ci/run"] if args.command == "ci" else ["./course", "test"]
        # Outside the clone: an untracked file in it would be part of the course for tests/test_working_copy.py.
        log = args.log or Path(tempfile.mkstemp(prefix="suite-phases-", suffix=".log")[1])
        load_before = os.getloadavg()
        print(f"{' '.join(command)} in {clone} (commit {commit[:12]}), log: {log}", flush=True)
        status, phases = run_phases(command, clone, env, log)
        load_after = os.getloadavg()
    finally:
        if scratch:
            shutil.rmtree(scratch, ignore_errors=True)

    print()
    print(f"{'phase':<8} {'wall':>14}  pytest's summary")
    for phase in phases:
        print(f"{phase['name']:<8} {minutes(phase['seconds']):>14}  {phase['summary']}")
    print(f"{'total':<8} {minutes(sum(p['seconds'] for p in phases)):>14}  exit status {status}")
    print(f"commit {commit[:12]}; {os.cpu_count()} CPUs ({_cpu_name()}); workers "
          f"{args.workers or 'one per CPU'}; load average before {load_before[0]:.2f} / after {load_after[0]:.2f} "
          f"(1 min); Python {sysconfig.get_python_version()}")
    for note in notes:
        print(f"NOT CI's run: {note}")
    return status


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown CPU"


if __name__ == "__main__":
    sys.exit(main())
