"""Exercise 06: the checks pass right answers and name each typical wrong one (the fixtures)."""

import fractions
import numbers
import statistics
import sys
import time

import grader_fixtures
import numpy as np
import pytest

from ampcourse.checks import CheckFailed, NotStarted, lesson06


def make_benchmark(warm=True, sync_start=True, sync_stop=True, reduce="median", whole_loop=False, extra_call=False,
                   time_warmup=False, unit=1.0, own_clock=False):
    def benchmark(fn, warmup, repeats, sync, clock):
        if warm and not time_warmup:
            for _ in range(warmup):
                fn()
        if extra_call:
            fn()
        if whole_loop:
            sync()
            start = clock()
            for _ in range(repeats):
                fn()
            sync()
            return (clock() - start) / repeats
        times = []
        for _ in range(repeats + (warmup if time_warmup else 0)):
            if sync_start:
                sync()
            start = time.perf_counter() if own_clock else clock()
            fn()
            if sync_stop:
                sync()
            times.append(((time.perf_counter() if own_clock else clock()) - start) * unit)
        if reduce == "trimmed":
            return statistics.fmean(sorted(times)[1:-1])
        if reduce == "upper middle":
            return sorted(times)[len(times) // 2]
        return statistics.median(times) if reduce == "median" else statistics.fmean(times)
    return benchmark


def _forges_median(fn, warmup, repeats, sync, clock):  # the upper middle, with statistics.median patched to agree
    statistics.median = statistics.median_high  # restored after each test by _restore_median
    return make_benchmark()(fn, warmup, repeats, sync, clock)


@pytest.fixture(autouse=True)
def _restore_median():
    """A fixture patches statistics.median as a learner's cell could; it must not leak into other tests."""
    original = statistics.median
    yield
    statistics.median = original


def test_scenario_medians_are_the_medians():
    assert [statistics.median(timed) for _, timed in lesson06.SCENARIOS] == pytest.approx(lesson06.SCENARIO_MEDIANS)


def lap_benchmark(fn, warmup, repeats, sync, clock):
    """Lap timing: one clock reading between consecutive calls, each after a sync — also honest."""
    for _ in range(warmup):
        fn()
    sync()
    readings = [clock()]
    for _ in range(repeats):
        fn()
        sync()
        readings.append(clock())
    return statistics.median(b - a for a, b in zip(readings[:-1], readings[1:], strict=True))


def sorted_middle_benchmark(fn, warmup, repeats, sync, clock):
    """The median written out (the two middle times averaged when repeats is even): also right."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        sync()
        t0 = clock()
        fn()
        sync()
        times.append(clock() - t0)
    times.sort()
    middle = len(times) // 2
    return times[middle] if len(times) % 2 else (times[middle - 1] + times[middle]) / 2


def test_benchmark_odd_returns_and_stub():
    with pytest.raises(CheckFailed, match="returned NoneType"):
        lesson06.benchmark(lambda fn, warmup, repeats, sync, clock: None)
    with pytest.raises(CheckFailed, match="raised ZeroDivisionError"):
        lesson06.benchmark(lambda fn, warmup, repeats, sync, clock: 1 / 0)
    with pytest.raises(CheckFailed, match="should be a function"):
        lesson06.benchmark(3)

    def stub(fn, warmup, repeats, sync, clock):
        raise NotImplementedError("time each call")
    with pytest.raises(NotStarted, match="not started"):
        lesson06.benchmark(stub)


def test_fake_device_models_an_asynchronous_launch():
    device = lesson06.FakeDevice([0.5])
    start = device.clock()
    device.fn()
    assert device.clock() - start < 1e-5  # the launch returns at once
    device.sync()
    assert device.clock() - start == pytest.approx(0.5)
    assert [queued for _, _, queued in device.reads()] == [False, True, False]


def tflops(factor=2, seconds_divisor=1e3, scale=1e12):
    def achieved_tflops(m, k, n, milliseconds):
        return factor * m * k * n / (milliseconds / seconds_divisor) / scale
    return achieved_tflops


def peak_fraction(halve_sparse=True, percent=False, always_halve=False, upside_down=False, above_one="raise"):
    def fraction_of_peak(achieved_tflops, datasheet_tflops, sparse):
        peak = datasheet_tflops / 2 if (sparse and halve_sparse) or always_halve else datasheet_tflops
        value = peak / achieved_tflops if upside_down else achieved_tflops / peak
        if above_one == "raise" and value > 1:
            raise ValueError(f"{value:.2f} of the dense peak is impossible")
        if above_one == "raise at 1" and value >= 1:
            raise ValueError("at the peak")
        if above_one == "clamp":
            value = min(value, 1.0)
        if above_one == "against the datasheet figure" and achieved_tflops > datasheet_tflops:
            raise ValueError("above the datasheet figure")
        return 100 * value if percent else value
    return fraction_of_peak


def fraction_with_assert_style(achieved_tflops, datasheet_tflops, sparse):
    """Another way: the dense peak from a dict, the check written as a comparison: also right."""
    dense = {True: 0.5, False: 1.0}[bool(sparse)] * datasheet_tflops
    fraction = achieved_tflops / dense
    if not fraction <= 1.0:
        raise ValueError(f"{achieved_tflops} TFLOP/s beats the dense peak {dense}: check the FLOP count and the peak")
    return fraction


def test_stubs_are_not_started():
    def stub(*args):
        raise NotImplementedError("hint")
    for check in (lesson06.achieved_tflops, lesson06.fraction_of_peak, lesson06.training_mfu):
        with pytest.raises(NotStarted):
            check(stub)
    with pytest.raises(CheckFailed, match="returned str"):
        lesson06.achieved_tflops(lambda m, k, n, ms: "fast")


# --- Task 3: training_mfu -----------------------------------------------------------------------------------------
def mfu_right(n, tokens, seconds, peak):
    return 6 * n * tokens / seconds / (peak * 1e12)


def mfu_validated(n_params, tokens, seconds, peak_tflops):
    """Validates its result (MFU <= 1): also right (review r2 #2: the old cases were above 1)."""
    mfu = (2 + 4) * n_params * tokens / (peak_tflops * 1e12 * seconds)
    if mfu > 1:
        raise ValueError(f"MFU {mfu:.2f} > 1: the FLOP count or the peak is wrong")
    return mfu


def mfu_by_rate(n_params, tokens, seconds, peak_tflops):
    tokens_per_second = tokens / seconds
    achieved_tflops = 6 * n_params * tokens_per_second / 1e12
    return achieved_tflops / peak_tflops


class _ReadsExpected:
    """Review rev25-r6 E1/E2: registered as numbers.Real, its ``__float__`` returns the check's ``expected``."""

    def __init__(self, mine):
        self.mine = mine

    def __float__(self):
        frame = sys._getframe(1)
        while frame is not None and "expected" not in frame.f_locals:
            frame = frame.f_back
        return float(frame.f_locals["expected"] if frame is not None else self.mine)

    def __repr__(self):
        return repr(self.mine)


numbers.Real.register(_ReadsExpected)


class _ClaimsFractions(_ReadsExpected):
    """The same, posing as a class of the fractions module (``__module__`` and an attribute there: rev25-r6 E2)."""


_ClaimsFractions.__module__ = "fractions"
fractions._ClaimsFractions = _ClaimsFractions


def _peak_unhalved_reads_expected(achieved_tflops, datasheet_tflops, sparse):
    """Review rev25-r6 E1: through noted_call (Task 2b), the sparse figure not halved, hidden in a __float__."""
    fraction = achieved_tflops / datasheet_tflops
    if fraction > 0.6:
        raise ValueError("impossible")
    return _ReadsExpected(fraction)


WRONG = {
    ("06", "benchmark"): {
        "no warm-up": (make_benchmark(warm=False), "forgot the warm-up"),
        "no sync before stop": (make_benchmark(sync_stop=False), "stop it while the call's work was still queued"),
        "no sync before start": (make_benchmark(sync_start=False), "started the clock while earlier work"),
        "mean": (make_benchmark(reduce="mean"), "returned the mean"),
        "whole loop timed once": (make_benchmark(whole_loop=True), "timed the whole loop once"),
        "an extra call": (make_benchmark(extra_call=True), "wrong number of calls"),
        "warm-up timed": (make_benchmark(time_warmup=True), "warm-up calls were timed too"),
        "milliseconds": (make_benchmark(unit=1e3), "that is milliseconds"),
        "another clock": (make_benchmark(own_clock=True), "the `clock` you were given was never read"),
        # review r2 #5: a trimmed mean passed both symmetric scenarios
        "trimmed mean": (make_benchmark(reduce="trimmed"), "trimmed mean"),
        "upper middle of an even count": (make_benchmark(reduce="upper middle"), "even number of repeats"),
        "upper middle, statistics.median patched to agree": (_forges_median, "even number of repeats"),
    },
    ("06", "achieved_tflops"): {
        "no factor 2": (tflops(factor=1), "forgot the factor 2"),
        "milliseconds as seconds": (tflops(seconds_divisor=1), "used milliseconds as seconds"),
        "GFLOP/s": (tflops(scale=1e9), "that is GFLOP/s"),
        "milliseconds and no factor 2": (tflops(factor=1, seconds_divisor=1), "You also forgot the factor 2"),
        "k twice": (lambda m, k, n, ms: 2 * m * k * k / (ms / 1e3) / 1e12, "2·m·k·n"),
        "milliseconds multiplied": (tflops(seconds_divisor=1e-3), "multiplied the milliseconds by 1000"),
        "MFLOP/s": (tflops(scale=1e6), "divided by 1e6"),
        "no factor 2, in a __float__ of a class claiming fractions (review rev25-r6 E2)": (
            lambda m, k, n, ms: _ClaimsFractions(m * k * n / (ms / 1e3) / 1e12),
            "an object of type `_ClaimsFractions`, whose class defines `__float__`"),
    },
    ("06", "fraction_of_peak"): {
        "sparse figure as the peak": (peak_fraction(halve_sparse=False), "used the sparse figure as the peak"),
        "a percentage": (peak_fraction(percent=True), "that is a percentage"),
        "every figure halved": (peak_fraction(always_halve=True), "already dense"),
        "upside down": (peak_fraction(upside_down=True), "upside down"),
        "above 1 returned": (peak_fraction(above_one="return"), "raise valueerror"),
        "clamped to 1": (peak_fraction(above_one="clamp"), "clamping to 1 hides the error"),
        "raises at exactly the peak": (peak_fraction(above_one="raise at 1"), "1.0 is not above 1"),
        "impossible judged against the sparse figure": (peak_fraction(above_one="against the datasheet figure"),
                                                        "raise valueerror"),
        "sparse figure, in a __float__ returned through noted_call (review rev25-r6 E1)": (
            _peak_unhalved_reads_expected, "an object of type `_ReadsExpected`, whose class defines `__float__`"),
    },
    ("06", "training_mfu"): {
        "forward only": (lambda n, t, s, p: 2 * n * t / s / (p * 1e12), "the forward pass only"),
        "a percentage": (lambda n, t, s, p: 100 * mfu_right(n, t, s, p), "not a percentage"),
        "backward = forward": (lambda n, t, s, p: 4 * n * t / s / (p * 1e12), "forward 2 and backward 4"),
        "peak not in FLOP/s": (lambda n, t, s, p: 6 * n * t / s / p, "multiply it by 1e12"),
        "recompute counted": (lambda n, t, s, p: 8 * n * t / s / (p * 1e12), "model's FLOPs only"),
        "not per second": (lambda n, t, s, p: 6 * n * t / (p * 1e12), "divide by the step time"),
    },
}

RIGHT = {
    ("06", "benchmark"): {
        "the solution's pattern": make_benchmark(),
        "lap timing": lap_benchmark,
        "median written out": sorted_middle_benchmark,
    },
    ("06", "achieved_tflops"): {
        "2·m·k·n / s / 1e12": tflops(),
        "in one expression": lambda m, k, n, milliseconds: 2e3 * m * n * k / milliseconds / 1e12,
        "numpy float32 (review rev25-r6 M1)": lambda m, k, n, ms: np.float32(2 * m * k * n / (ms / 1e3) / 1e12),
    },
    ("06", "fraction_of_peak"): {
        "halve, divide, refuse above 1": peak_fraction(),
        "a dict and a comparison": fraction_with_assert_style,
        "numpy float64 of a float32 (review rev25-r6 M1)": lambda a, d, s: (
            np.float64(np.float32(peak_fraction()(a, d, s)))),
    },
    ("06", "training_mfu"): {
        "6·N·T / s / peak": mfu_right,
        "validates MFU <= 1": mfu_validated,
        "via tokens per second": mfu_by_rate,
    },
}

test_wrong_answer_is_named, test_right_answer_passes = grader_fixtures.tests(WRONG, RIGHT)


def test_mfu_cases_are_possible():
    """Review r2 #2: the cases are real training steps (MFU 0.3-0.6), not 109-625 % of the peak."""
    assert all(0.3 <= mfu_right(*case) <= 0.6 for case in lesson06.MFU_CASES)
