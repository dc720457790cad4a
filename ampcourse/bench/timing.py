"""Lesson 06, timing rules 1–4: warm-up untimed, a device synchronisation around every timed call, CUDA
events on CUDA, many repeats summarised by the median and the inter-quartile range (:func:`time_fn`).
Exercise 06 `benchmark` rebuilds :func:`time_fn`."""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from ..validate import as_int
from .units import BenchmarkError, _as_device, format_time

# --- timing ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Timing:
    """Timed runs in seconds (warm-up runs excluded; ``warmup`` says how many were run first)."""

    times: tuple[float, ...]
    warmup: int

    def __post_init__(self) -> None:
        if not self.times:
            raise ValueError("times must hold at least one timed run")

    def _quartiles(self) -> tuple[float, float]:
        if len(self.times) == 1:
            return self.times[0], self.times[0]
        q1, _, q3 = statistics.quantiles(self.times, n=4, method="inclusive")
        return q1, q3

    @property
    def median(self) -> float:
        return statistics.median(self.times)

    @property
    def p25(self) -> float:
        return self._quartiles()[0]

    @property
    def p75(self) -> float:
        return self._quartiles()[1]

    @property
    def iqr(self) -> float:
        """Inter-quartile range p75 − p25: the spread of the middle half of the runs."""
        q1, q3 = self._quartiles()
        return q3 - q1

    @property
    def mean(self) -> float:
        return statistics.fmean(self.times)

    @property
    def runs(self) -> int:
        return len(self.times)

    def __str__(self) -> str:
        # every number carries its unit, so the notebooks' timing sanitizer catches each of them
        return f"{format_time(self.median)} (IQR {format_time(self.p25)} – {format_time(self.p75)}, {self.runs} runs)"


def synchronize(device: torch.device | str | None) -> None:
    """Wait until the device has finished all queued work (CUDA, MPS); nothing to wait for on the CPU."""
    device = torch.device("cpu") if device is None else _as_device(device)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device.type == "mps":
        torch.mps.synchronize()


def _run(fn: Callable[[], Any], what: str) -> Any:
    try:
        return fn()
    except Exception as err:
        raise BenchmarkError(f"the benchmarked function raised {type(err).__name__} during {what}: {err}") from err


def time_fn(fn: Callable[[], Any], *, warmup: int = 3, repeats: int = 20, device: torch.device | str | None = None,
            clock: Callable[[], float] | None = None, sync: Callable[[], None] | None = None) -> Timing:
    """Time ``fn()``: ``warmup`` untimed calls, then ``repeats`` timed calls, each synchronised.

    Args:
        fn: a function of no arguments (wrap yours: ``lambda: step(model, x)``).
        warmup: untimed calls first (>= 0).
        repeats: timed calls (>= 1).
        device: where ``fn`` runs (default CPU): decides how to synchronise and, on CUDA, the use of
            CUDA events.
        clock: a function returning seconds (default ``time.perf_counter``; on CUDA, events are used
            unless a clock is given). Inject a fake clock to test.
        sync: waits for the device (default :func:`synchronize` on ``device``). Inject a fake to test.

    Each timed call is ``sync(); start = clock(); fn(); sync(); stop = clock()``.

    Raises:
        TypeError/ValueError: bad arguments. BenchmarkError: ``fn`` raised (the message says which call).

    >>> ticks = iter(range(100))
    >>> timing = time_fn(lambda: None, warmup=2, repeats=3, clock=lambda: next(ticks))
    >>> timing.times, timing.warmup
    ((1.0, 1.0, 1.0), 2)
    """
    if not callable(fn):
        raise TypeError(f"fn must be a function of no arguments (got {type(fn).__name__} {fn!r})")
    warmup = as_int("warmup", warmup, minimum=0)
    repeats = as_int("repeats", repeats, minimum=1)
    device = torch.device("cpu") if device is None else _as_device(device)
    if clock is not None and not callable(clock):
        raise TypeError(f"clock must be a function returning seconds (got {clock!r})")
    if sync is not None and not callable(sync):
        raise TypeError(f"sync must be a function of no arguments (got {sync!r})")
    wait = sync if sync is not None else (lambda: synchronize(device))
    for i in range(warmup):
        _run(fn, f"warm-up call {i + 1} of {warmup}")
    use_events = clock is None and device.type == "cuda"
    times = []
    if use_events:
        wait()
        pairs = []
        for i in range(repeats):
            start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            wait()
            start.record()
            _run(fn, f"timed call {i + 1} of {repeats}")
            stop.record()
            pairs.append((start, stop))
        wait()
        times = [start.elapsed_time(stop) / 1e3 for start, stop in pairs]  # elapsed_time is in ms
    else:
        now = clock if clock is not None else time.perf_counter
        for i in range(repeats):
            wait()
            start = now()
            _run(fn, f"timed call {i + 1} of {repeats}")
            wait()
            times.append(now() - start)
    bad = [t for t in times if not 0 <= float(t) < math.inf]
    if bad:
        raise ValueError(f"clock gave a duration of {bad[0]!r} s: it must be a clock that never goes back and "
                         "returns finite seconds, like time.perf_counter")
    return Timing(tuple(float(t) for t in times), warmup)
