"""Interactive widgets: one module per lesson (``ampcourse.widgets.lessonNN``).

Every widget is a thin wrapper over pure functions — ``compute(**slider_values) -> data`` and
``draw(figure, data) -> readout`` — built with :class:`ampcourse.widgets.base.LivePlot`, so the
maths is unit-tested without a browser and one slider move is timed by ``benchmarks/sliders.py``.

:data:`REGISTRY` lists each widget with the slider moves the benchmark (and the browser tests)
make: ``name -> (factory, [dict of control values, ...])``.
"""

from __future__ import annotations

from collections.abc import Callable

from . import lesson00, lesson01, lesson02, lesson04, lesson05, lesson06, lesson10

REGISTRY: dict[str, tuple[Callable, list[dict]]] = {
    "lesson00.cast_survival": (lesson00.cast_survival, lesson00.BENCHMARK_MOVES),
    "lesson01.bit_explorer": (lesson01.bit_explorer, lesson01.BENCHMARK_MOVES),
    "lesson02.loss_scale_histogram": (lesson02.loss_scale_histogram, lesson02.BENCHMARK_MOVES),
    "lesson04.scale_dynamics": (lesson04.scale_dynamics, lesson04.BENCHMARK_MOVES),
    "lesson05.clipping_explorer": (lesson05.clipping_explorer, lesson05.BENCHMARK_MOVES),
    "lesson06.speed_memory_explorer": (lesson06.speed_memory_explorer, lesson06.BENCHMARK_MOVES),
    "lesson10.delayed_scaling": (lesson10.delayed_scaling, lesson10.BENCHMARK_MOVES),
    "lesson10.granularity_explorer": (lesson10.granularity_explorer, lesson10.GRANULARITY_MOVES),
}
