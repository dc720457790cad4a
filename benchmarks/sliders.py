"""Time one slider move in the kernel for every registered widget, stage by stage.

    python benchmarks/sliders.py            # per widget: the move, then compute / draw / encode, in ms

A move is ``compute`` (the widget's numbers) + ``draw`` or ``update`` (matplotlib artists) + ``encode``
(the SVG the browser shows). The *first pass* visits every move once on a fresh widget (nothing cached
yet: what a learner's first drag costs); the *repeats* go over the moves again (widgets may cache
per-position results). Each time is given twice: wall clock and this process's CPU time — on a shared,
loaded machine the wall clock mostly measures the other processes; the CPU time is what the move costs.
The last columns compare encoders on the widget's current figure: the SVG used now against the 80-dpi
PNG used before and a PNG sharp at device-pixel-ratio 2 (192 dpi).

What the learner feels also includes the browser round trip: ``benchmarks/browser_sliders.py`` measures
that. Budget: median under 100 ms on a 2-core CPU. This is a measurement, not a test: numbers depend on
the machine, so no test asserts them; the closing notes quote them.
"""

from __future__ import annotations

import os
import statistics
import time

from ampcourse.widgets import REGISTRY
from ampcourse.widgets.base import figure_png, figure_svg

REPEATS = 5


class Clock:
    """Wall and CPU milliseconds of a block."""

    def __enter__(self):
        self.wall, self.cpu = time.perf_counter(), time.process_time()
        return self

    def __exit__(self, *exc):
        self.wall = (time.perf_counter() - self.wall) * 1000
        self.cpu = (time.process_time() - self.cpu) * 1000


def _time_moves(widget, moves) -> list[tuple[float, float]]:
    times = []
    for move in moves:
        with Clock() as clock:
            widget.set(**move)
        times.append((clock.wall, clock.cpu))
    return times


def _stages(widget, moves) -> dict[str, float]:
    """Median CPU ms of compute, draw/update and SVG encoding over the moves (a second visit)."""
    stages: dict[str, list[float]] = {"compute": [], "draw": [], "svg": [], "png80": [], "png192": []}
    for move in moves:
        widget.set(**move)
        values = widget.values()
        if hasattr(widget, "_value"):  # the bit explorer computes from the parsed value, not the text
            values = {"value": widget._value, "fmt": values["fmt"]}
        with Clock() as clock:
            data = widget.compute(**values)
        stages["compute"].append(clock.cpu)
        with Clock() as clock:
            if widget.update is not None and widget.figure.axes:
                widget.update(widget.figure, data)
            else:
                widget.figure.clear()
                widget.figure.live = {}
                widget.draw(widget.figure, data)
        stages["draw"].append(clock.cpu)
        for name, encode in (("svg", figure_svg), ("png80", lambda f: figure_png(f, dpi=80)),
                             ("png192", lambda f: figure_png(f, dpi=192))):
            with Clock() as clock:
                encode(widget.figure)
            stages[name].append(clock.cpu)
    return {name: statistics.median(v) for name, v in stages.items()}


def main() -> None:
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"load average (1 min) {load:.2f} on {os.cpu_count()} cores; ms, wall / cpu")
    print(f"{'widget':<32} {'first pass median max':>26} {'repeats median max':>26}   "
          f"{'compute draw  svg | png80 png192 (cpu)':>40}")
    for name, (factory, moves) in sorted(REGISTRY.items()):
        widget = factory()  # builds and draws once (data collection, font caches)
        first = _time_moves(widget, moves)
        repeats = [t for _ in range(REPEATS) for t in _time_moves(widget, moves)]
        stages = _stages(widget, moves)

        def fmt(times):
            wall, cpu = [t[0] for t in times], [t[1] for t in times]
            return f"{statistics.median(wall):5.0f}/{statistics.median(cpu):3.0f} {max(wall):5.0f}/{max(cpu):3.0f}"
        verdict = "ok" if statistics.median(t[1] for t in repeats) < 100 else "OVER BUDGET (cpu)"
        print(f"{name:<32} {fmt(first):>26} {fmt(repeats):>26}   {stages['compute']:7.1f} {stages['draw']:5.1f} "
              f"{stages['svg']:4.1f} | {stages['png80']:5.1f} {stages['png192']:6.1f}  {verdict}")


if __name__ == "__main__":
    main()
