"""``python -m ampcourse COMMAND``: the course's command line.

  grade [NOTEBOOK...]   grade your exercises (all of exercises/ by default) and print a table
  build [--check]       regenerate exercises/ and navigation, keeping your answers (a backup of every
                        exercise it rewrites goes to exercises/.backup/); --check lists stale files, exit 1
  execute NOTEBOOK...   run notebooks and store their outputs (authors: lessons and solutions)
  update [--restore]    bring in the newer course (git pull) and put your answers back (./course update);
                        --restore copies the newest backup in exercises/.backup/ back
  gpucheck [--cpu]      run every notebook, the GPU tests and the lesson-06 benchmark; write reports/
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def _fail(message: str) -> int:
    print(f"error: {message}", file=sys.stderr)
    return 2


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ampcourse", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    grade = sub.add_parser("grade", help="grade the exercises and print a progress table")
    grade.add_argument("notebooks", nargs="*")
    from .grading import DEFAULT_TIMEOUT

    grade.add_argument("--timeout", type=int, default=None,
                       help=f"seconds one cell may run (default: {DEFAULT_TIMEOUT})")
    build = sub.add_parser("build", help="regenerate exercises/ and navigation (keeps your answers)")
    build.add_argument("--check", action="store_true", help="only list stale files; exit 1 if any")
    execute = sub.add_parser("execute", help="run notebooks and store their outputs")
    execute.add_argument("notebooks", nargs="+")
    update = sub.add_parser("update", help="git pull the newer course and put your answers back")
    update.add_argument("--remote", default=None, help="git remote to pull from (default: the branch's upstream)")
    update.add_argument("--restore", action="store_true",
                        help="copy the newest backup (exercises/.backup/<time>/) back into exercises/ and notebooks/")
    sub.add_parser("gpucheck", help="the GPU check (see ampcourse/gpucheck.py); --cpu for a dry run",
                   add_help=False)
    if argv is None:
        argv = sys.argv[1:]
    if argv and argv[0] == "gpucheck":
        from .gpucheck import main as gpucheck

        return gpucheck(argv[1:])
    args = parser.parse_args(argv)

    if args.command == "grade":
        from .grading import grade as run_grade
        from .update import interrupted_warning

        warning = interrupted_warning()
        if warning:
            print(f"warning: {warning}", file=sys.stderr)

        try:
            table, code = run_grade(args.notebooks, timeout=args.timeout)
        except (ValueError, TypeError) as err:
            return _fail(str(err))
        print(table)
        return code
    if args.command == "update":
        from .update import update as run_update

        return run_update(remote=args.remote, restore_backup=args.restore)
    from . import authoring

    if args.command == "build":
        if args.check:
            stale = authoring.stale_files()
            for path in stale:
                print(f"stale: {path.relative_to(authoring.ROOT)}")
            if stale:
                print("run: python -m ampcourse build   (it keeps your answers, and backs up exercises/ first)")
            return 1 if stale else 0
        from .update import interrupted_warning

        warning = interrupted_warning(authoring.ROOT)
        if warning:  # a build now would merge against the wrong templates: the update finishes the job
            return _fail(f"{warning}; it puts them back and merges them (or `./course update --restore`)")
        try:
            lines = authoring.build().lines()
        except OSError as err:
            return _fail(f"could not write {err.filename or 'a file'}: {err.strerror or err} (is exercises/ "
                         "read-only?). Nothing was lost: every file is written whole or not at all")
        for line in lines:
            print(line)
        return 0
    paths = [Path(name).resolve() for name in args.notebooks]
    missing = [name for name, path in zip(args.notebooks, paths, strict=True)
               if path.suffix != ".ipynb" or not path.is_file()]
    if missing:
        return _fail(f"no such notebook: {', '.join(missing)} (give paths like notebooks/00_start_here.ipynb)")
    for name, path in zip(args.notebooks, paths, strict=True):
        print(f"executing {name}", flush=True)
        try:
            authoring.execute(path)
        except OSError as err:
            return _fail(f"{name}: could not write it ({err.strerror or err}); its cells ran, but the outputs were "
                         "not stored")
        except Exception as err:  # noqa: BLE001 - a failing cell: name it, keep the notebook as it was
            first = str(err).strip().splitlines()
            return _fail(f"{name}: a cell failed, so its outputs were not stored "
                         f"({type(err).__name__}: {first[-1] if first else ''})")
    # Executing rewrites a notebook: bring generated cells back in line (answers are kept).
    for line in authoring.build().lines():
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
