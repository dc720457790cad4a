"""Exercise 06: the checks pass right answers and name each typical wrong one (the fixtures)."""

import statistics

import pytest

from ampcourse.checks import CheckFailed, NotStarted, lesson06


def make_benchmark(warm=True, sync_start=True, sync_stop=True, reduce="median", whole_loop=False, extra_call=False,
                   time_warmup=False, unit=1.0):
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
            start = clock()
            fn()
            if sync_stop:
                sync()
            times.append((clock() - start) * unit)
        return statistics.median(times) if reduce == "median" else statistics.fmean(times)
    return benchmark


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


def test_right_benchmarks_pass(capsys):
    lesson06.benchmark(make_benchmark())
    lesson06.benchmark(lap_benchmark)
    assert capsys.readouterr().out.count("✓ Task 1") == 2


@pytest.mark.parametrize(("wrong", "words"), [
    (make_benchmark(warm=False), "forgot the warm-up"),
    (make_benchmark(sync_stop=False), "stop it while the call's work was still queued"),
    (make_benchmark(sync_start=False), "started the clock while earlier work (the warm-up) was still queued"),
    (make_benchmark(reduce="mean"), "returned the mean"),
    (make_benchmark(whole_loop=True), "timed the whole loop once"),
    (make_benchmark(extra_call=True), "wrong number of calls"),
    (make_benchmark(time_warmup=True), "warm-up calls were timed too"),
    (make_benchmark(unit=1e3), "that is milliseconds"),
])
def test_benchmark_mistakes_are_named(wrong, words):
    with pytest.raises(CheckFailed) as info:
        lesson06.benchmark(wrong)
    assert words in str(info.value)
    assert not isinstance(info.value, NotStarted)


def test_benchmark_with_another_clock_is_named():
    import statistics
    import time

    def benchmark(fn, warmup, repeats, sync, clock):
        for _ in range(warmup):
            fn()
        times = []
        for _ in range(repeats):
            sync()
            start = time.perf_counter()
            fn()
            sync()
            times.append(time.perf_counter() - start)
        return statistics.median(times)

    with pytest.raises(CheckFailed, match="the `clock` you were given was never read"):
        lesson06.benchmark(benchmark)


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


def test_right_tflops_pass(capsys):
    lesson06.achieved_tflops(tflops())
    assert "✓ Task 2a" in capsys.readouterr().out


@pytest.mark.parametrize(("wrong", "words"), [
    (tflops(factor=1), "forgot the factor 2"),
    (tflops(seconds_divisor=1), "used milliseconds as seconds"),
    (tflops(scale=1e9), "that is GFLOP/s"),
    (tflops(factor=1, seconds_divisor=1), "You also forgot the factor 2"),
    (lambda m, k, n, ms: 2 * m * k * k / (ms / 1e3) / 1e12, "2·m·k·n"),
])
def test_tflops_mistakes_are_named(wrong, words):
    with pytest.raises(CheckFailed) as info:
        lesson06.achieved_tflops(wrong)
    assert words in str(info.value)


def peak_fraction(halve_sparse=True, percent=False, always_halve=False, upside_down=False):
    def fraction_of_peak(achieved_tflops, datasheet_tflops, sparse):
        peak = datasheet_tflops / 2 if (sparse and halve_sparse) or always_halve else datasheet_tflops
        value = peak / achieved_tflops if upside_down else achieved_tflops / peak
        return 100 * value if percent else value
    return fraction_of_peak


def test_right_fraction_passes(capsys):
    lesson06.fraction_of_peak(peak_fraction())
    assert "✓ Task 2b" in capsys.readouterr().out


@pytest.mark.parametrize(("wrong", "words"), [
    (peak_fraction(halve_sparse=False), "used the sparse figure as the peak"),
    (peak_fraction(percent=True), "that is a percentage"),
    (peak_fraction(always_halve=True), "already dense"),
    (peak_fraction(upside_down=True), "upside down"),
])
def test_fraction_mistakes_are_named(wrong, words):
    with pytest.raises(CheckFailed) as info:
        lesson06.fraction_of_peak(wrong)
    assert words in str(info.value)


def test_stubs_are_not_started():
    def stub(*args):
        raise NotImplementedError("hint")
    for check in (lesson06.achieved_tflops, lesson06.fraction_of_peak):
        with pytest.raises(NotStarted):
            check(stub)
    with pytest.raises(CheckFailed, match="returned str"):
        lesson06.achieved_tflops(lambda m, k, n, ms: "fast")


# --- Task 3: training_mfu -----------------------------------------------------------------------------------------
def mfu_right(n, tokens, seconds, peak):
    return 6 * n * tokens / seconds / (peak * 1e12)


MFU_MISTAKES = {
    "forward only": (lambda n, t, s, p: 2 * n * t / s / (p * 1e12), "the forward pass only"),
    "a percentage": (lambda n, t, s, p: 100 * mfu_right(n, t, s, p), "not a percentage"),
    "backward = forward": (lambda n, t, s, p: 4 * n * t / s / (p * 1e12), "forward 2 and backward 4"),
    "peak not in FLOP/s": (lambda n, t, s, p: 6 * n * t / s / p, "divided by the peak in FLOP/s"),
}


def test_training_mfu_right_answer_passes(capsys):
    lesson06.training_mfu(mfu_right)
    assert capsys.readouterr().out.startswith("✓ Task 3")


@pytest.mark.parametrize(("fn", "words"), MFU_MISTAKES.values(), ids=MFU_MISTAKES)
def test_training_mfu_mistakes_are_named(fn, words):
    with pytest.raises(CheckFailed, match=words):
        lesson06.training_mfu(fn)
