"""Time one slider move (compute + figure redraw + PNG encode) for every registered widget.

    python benchmarks/sliders.py            # prints median / max per widget, in ms

Budget: median under 100 ms on a 2-core CPU. This is a measurement, not a test: numbers depend on
the machine, so no test asserts them; the closing notes quote them.
"""

from __future__ import annotations

import statistics
import time

from ampcourse.widgets import REGISTRY

REPEATS = 5


def main() -> None:
    print(f"{'widget':<32} {'moves':>5} {'median ms':>10} {'max ms':>8}")
    for name, (factory, moves) in sorted(REGISTRY.items()):
        widget = factory()
        widget.set(**moves[-1])  # warm-up: first draw pays for font caches and imports
        times = []
        for _ in range(REPEATS):
            for move in moves:
                start = time.perf_counter()
                widget.set(**move)
                times.append((time.perf_counter() - start) * 1000)
        verdict = "ok" if statistics.median(times) < 100 else "OVER BUDGET"
        print(f"{name:<32} {len(times):>5} {statistics.median(times):>10.1f} {max(times):>8.1f}  {verdict}")


if __name__ == "__main__":
    main()
