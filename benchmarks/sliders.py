"""Time one slider move (compute + figure redraw + PNG encode) for every registered widget.

    python benchmarks/sliders.py            # prints, per widget, the first pass and the repeats, in ms

Budget: median under 100 ms on a 2-core CPU. The *first pass* visits every move once on a fresh
widget (nothing cached yet: what a learner's first drag costs); the *repeats* go over the moves again
(widgets may cache per-position results). This is a measurement, not a test: numbers depend on the
machine, so no test asserts them; the closing notes quote them.
"""

from __future__ import annotations

import statistics
import time

from ampcourse.widgets import REGISTRY

REPEATS = 5


def _time_moves(widget, moves) -> list[float]:
    times = []
    for move in moves:
        start = time.perf_counter()
        widget.set(**move)
        times.append((time.perf_counter() - start) * 1000)
    return times


def main() -> None:
    print(f"{'widget':<34} {'first pass: median  max':>24} {'repeats: median  max':>22}")
    for name, (factory, moves) in sorted(REGISTRY.items()):
        widget = factory()  # builds and draws once (data collection, font caches)
        first = _time_moves(widget, moves)
        repeats = [t for _ in range(REPEATS) for t in _time_moves(widget, moves)]
        worst = max(statistics.median(first), statistics.median(repeats))
        verdict = "ok" if worst < 100 else "OVER BUDGET"
        print(f"{name:<34} {statistics.median(first):>17.1f} {max(first):>6.1f} "
              f"{statistics.median(repeats):>15.1f} {max(repeats):>6.1f}  {verdict}")


if __name__ == "__main__":
    main()
