"""Time the execution of every lesson and solution notebook (budget: each under 60 s on a 2-core CPU).

    python benchmarks/notebooks.py                 # all of notebooks/ and solutions/
    python benchmarks/notebooks.py notebooks/02_underflow_overflow.ipynb

Runs each notebook top to bottom in a fresh kernel (as nbval does) without writing it back.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parent.parent


def run(path: Path) -> float:
    nb = nbformat.read(path, as_version=4)
    start = time.perf_counter()
    NotebookClient(nb, timeout=600, kernel_name="python3",
                   resources={"metadata": {"path": str(path.parent)}}).execute()
    return time.perf_counter() - start


def main(argv: list[str]) -> None:
    paths = [Path(a) for a in argv] or sorted((ROOT / "notebooks").glob("*.ipynb")) + sorted(
        (ROOT / "solutions").glob("*.ipynb"))
    for path in paths:
        seconds = run(path)
        verdict = "ok" if seconds < 60 else "OVER BUDGET"
        print(f"{path.relative_to(ROOT) if path.is_absolute() else path}: {seconds:6.1f} s  {verdict}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
