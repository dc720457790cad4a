"""``python -m ampcourse COMMAND``: the course's command line.

  grade [NOTEBOOK...]   grade your exercises (all of exercises/ by default) and print a table
  build [--check]       regenerate exercises/ and navigation; --check lists stale files, exit 1
  execute NOTEBOOK...   run notebooks and store their outputs (authors: lessons and solutions)
  gpucheck [--cpu]      run every notebook, the GPU tests and the lesson-06 benchmark; write reports/
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ampcourse", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    grade = sub.add_parser("grade", help="grade the exercises and print a progress table")
    grade.add_argument("notebooks", nargs="*")
    build = sub.add_parser("build", help="regenerate exercises/ and navigation")
    build.add_argument("--check", action="store_true", help="only list stale files; exit 1 if any")
    execute = sub.add_parser("execute", help="run notebooks and store their outputs")
    execute.add_argument("notebooks", nargs="+")
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

        table, code = run_grade(args.notebooks)
        print(table)
        return code
    from . import authoring

    if args.command == "build":
        if args.check:
            stale = authoring.stale_files()
            for path in stale:
                print(f"stale: {path.relative_to(authoring.ROOT)}")
            if stale:
                print("run: python -m ampcourse build")
            return 1 if stale else 0
        for path in authoring.build():
            print(f"wrote {path.relative_to(authoring.ROOT)}")
        return 0
    for name in args.notebooks:
        print(f"executing {name}", flush=True)
        authoring.execute(Path(name).resolve())
    authoring.build()  # executing rewrites a notebook: bring generated cells back in line
    return 0


if __name__ == "__main__":
    sys.exit(main())
