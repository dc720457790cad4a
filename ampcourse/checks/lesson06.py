"""Checks for exercise 06 (speed and memory): an honest benchmark, achieved TFLOP/s and the fraction of peak.

Task 1 runs the learner's ``benchmark(fn, warmup, repeats, sync, clock)`` against a *fake* device: no
timing luck. The fake ``fn`` only queues its work (as a CUDA kernel launch does) and advances the fake
clock by a microsecond; ``sync`` waits until the queued work is done; ``clock`` returns the fake time and
writes down whether work was still queued when it was read. The first calls are slow (compilation,
warm-up) and the timed calls hold outliers (one, or two slow ones on the same side, with an even number of
repeats), so each mistake leaves its own trace: a wrong count of calls, a clock read while work was queued
(before a start or a stop), too few clock reads (the whole loop timed once), or a result that equals the mean,
a trimmed mean, one of the two middle times, the median including the warm-up, or milliseconds. The fake
clock does not start at 0.
"""

from __future__ import annotations

import math
import statistics

from . import CheckFailed, call, exact_number, fail, hints, noted_call, passed, require_callable

_LAUNCH = 1e-6  # what queueing one call costs on the fake clock
START = 1000.0  # the fake clock's reading before the first call (a clock's zero means nothing)


class FakeDevice:
    """A fake asynchronous device with a fake clock (see the module docstring)."""

    def __init__(self, works: list[float]) -> None:
        self.works = list(works)
        self.now = START
        self.busy_until = START
        self.calls = 0
        self.log: list[tuple[str, bool]] = []  # ("fn", False), ("sync", False), ("clock", work_was_queued)

    def fn(self) -> None:
        work = self.works[min(self.calls, len(self.works) - 1)]
        self.calls += 1
        self.busy_until = max(self.busy_until, self.now) + work
        self.now += _LAUNCH
        self.log.append(("fn", False))

    def sync(self) -> None:
        self.now = max(self.now, self.busy_until)
        self.log.append(("sync", False))

    def clock(self) -> float:
        self.log.append(("clock", self.busy_until > self.now + 1e-12))
        return self.now

    def reads(self) -> list[tuple[bool, bool, bool]]:
        """For each clock read: (is a start, is a stop, work was queued)."""
        out = []
        events = self.log
        seen_read = False
        fn_since_read = False
        for i, (kind, queued) in enumerate(events):
            if kind == "fn":
                fn_since_read = True
            elif kind == "clock":
                following = next((k for k, _ in events[i + 1:] if k != "sync"), None)
                out.append((following == "fn", seen_read and fn_since_read, queued))
                seen_read, fn_since_read = True, False
        return out


# (warm-up works, timed works): slow first calls; one outlier with an odd number of repeats (the median is one
# run), then two slow outliers on one side with an even number (a trimmed mean keeps one of them; the median is
# the mean of the two middle runs).
SCENARIOS = (
    ([0.5, 0.5, 0.5], [0.012, 0.010, 0.011, 0.200, 0.013, 0.009, 0.014]),
    ([0.8, 0.6], [0.0031, 0.0029, 0.0900, 0.0030, 0.0032]),
    ([0.4, 0.4], [0.020, 0.150, 0.021, 0.019, 0.180, 0.022]),
)

SCENARIO_MEDIANS = (0.012, 0.0031, 0.0215)
"""The median of each scenario's timed calls, written out: the check compares with these constants rather than
with ``statistics.median``, which an answer cell could patch (``statistics.median = statistics.median_high``)
to forge a pass; ``tests/test_checks_lesson06.py`` recomputes them."""


def _close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-9)


def _fmt(seconds: float) -> str:
    return f"{seconds * 1e3:.4g} ms"


def benchmark(fn) -> None:
    """Task 1: ``benchmark(fn, warmup, repeats, sync, clock)`` returns the median of synchronised timed runs."""
    task = "Task 1 (benchmark)"
    require_callable(task, fn, "benchmark")
    for (warm, timed), expected in zip(SCENARIOS, SCENARIO_MEDIANS, strict=True):
        warmup, repeats = len(warm), len(timed)
        device = FakeDevice(warm + timed)
        result = call(task, fn, "benchmark", device.fn, warmup=warmup, repeats=repeats, sync=device.sync,
                      clock=device.clock)
        number = exact_number(result)  # float's own conversion, never the answer's (review rev25-r6 E2)
        if number is None:
            raise fail(task, f"`benchmark` returned {type(result).__name__} {result!r}: return one number, the "
                             "median time of the timed calls in seconds.")
        result = float(number)
        reads = device.reads()
        if device.calls == repeats and warmup:
            raise fail(task, f"you forgot the warm-up: `fn` was called {device.calls} times, all timed, so the slow "
                             f"first calls (compilation, allocation: {_fmt(warm[0])} here) were measured. Call "
                             f"`fn()` {warmup} times (warmup) before timing anything.")
        if device.calls != warmup + repeats:
            raise fail(task, f"wrong number of calls: with warmup={warmup} and repeats={repeats}, `fn` must run "
                             f"warmup + repeats = {warmup + repeats} times; it ran {device.calls} times.")
        if not reads:
            raise fail(task, "the `clock` you were given was never read: you timed with another clock (e.g. "
                             "`time.perf_counter`). Use the `clock` argument — on a GPU it can be a CUDA-event "
                             "clock, and here it is the fake device's time.")
        if len(reads) <= 2:
            raise fail(task, f"you timed the whole loop once and divided by {repeats}: that is the mean, and one "
                             f"slow run (an outlier: {_fmt(max(timed))} here) drags it. Time each call on its own "
                             "and return the median.")
        if len(reads) < repeats + 1:
            raise fail(task, f"the clock was read {len(reads)} times for {repeats} timed calls: each timed call "
                             "needs a start and a stop reading.")
        if any(stop and queued for _, stop, queued in reads):
            raise fail(task, "you read the clock to stop it while the call's work was still queued: on a GPU "
                             "`fn()` returns as soon as its kernels are launched. Call `sync()` before *every* "
                             "clock reading that stops a measurement.")
        if any(start and not stop and queued for start, stop, queued in reads):
            raise fail(task, "you started the clock while earlier work (the warm-up) was still queued, so it was "
                             "billed to the first timed call. Call `sync()` before reading the clock to start, "
                             "too.")
        if _close(result, expected):
            continue
        if _close(result, expected * 1e3):
            raise fail(task, f"you returned {result:.4g}: that is milliseconds. Return seconds ({expected:.4g}).")
        if _close(result, statistics.fmean(timed)):
            raise fail(task, f"you returned the mean ({_fmt(result)}), which the outlier ({_fmt(max(timed))}) "
                             f"drags up; return the median ({_fmt(expected)}): `statistics.median(times)`.")
        if _close(result, statistics.fmean(sorted(timed)[1:-1])):
            raise fail(task, f"you dropped the fastest and the slowest run and averaged the rest (a trimmed mean, "
                             f"{_fmt(result)}): with two slow outliers on one side one of them stays in and drags "
                             f"the result. Return the median ({_fmt(expected)}): `statistics.median(times)`.")
        if len(timed) % 2 == 0 and (_close(result, statistics.median_high(timed))
                                    or _close(result, statistics.median_low(timed))):
            raise fail(task, f"with an even number of repeats ({repeats}) the median is the mean of the two middle "
                             f"times ({_fmt(expected)}); you returned one of them ({_fmt(result)}). Use "
                             "`statistics.median(times)`.")
        if _close(result, statistics.median(warm + timed)) or len(reads) >= 2 * (warmup + repeats):
            raise fail(task, "the warm-up calls were timed too (their times went into the result): time only the "
                             "`repeats` calls that follow the warm-up.")
        raise fail(task, f"you returned {_fmt(result)}; the median of the timed calls is {_fmt(expected)}. Time each "
                         "call as sync → start = clock() → fn() → sync → stop = clock(), and return the median "
                         "of the differences.")
    passed(task, "warm-up excluded, every start and stop reading synchronised, one measurement per call, the "
                 "median returned (outliers ignored, an even number of repeats averaged in the middle) — in "
                 f"{len(SCENARIOS)} runs on a fake device.")


# --- Task 2: achieved TFLOP/s and fraction of peak --------------------------------------------------------

_CASES = ((4096, 4096, 4096, 1.5), (8192, 1024, 3072, 0.75))


def _number(task: str, name: str, value) -> float:
    """``value`` as a float: an exact int/float or numpy scalar only (``exact_number``: float's own conversion, never
    the answer's ``__float__``; review rev25-r6 E1/E2)."""
    number = exact_number(value)
    if number is None or not math.isfinite(number):
        raise fail(task, f"`{name}` returned {type(value).__name__} {value!r}: return one finite number.")
    return float(number)


def achieved_tflops(fn) -> None:
    """Task 2a: ``achieved_tflops(m, k, n, milliseconds)`` = 2·m·k·n / seconds / 1e12."""
    task = "Task 2a (achieved_tflops)"
    require_callable(task, fn, "achieved_tflops")
    for m, k, n, ms in _CASES:
        expected = 2 * m * k * n / (ms / 1e3) / 1e12
        got = _number(task, "achieved_tflops", call(task, fn, "achieved_tflops", m, k, n, ms))
        ratio = got / expected
        shown = f"achieved_tflops({m}, {k}, {n}, {ms}) returned {got:.4g}, expected {expected:.4g}"
        if math.isclose(ratio, 1, rel_tol=1e-6):
            continue
        if math.isclose(ratio, 0.5, rel_tol=1e-6):
            raise fail(task, f"{shown}: you forgot the factor 2 — each of the m·k·n terms is a multiply *and* an "
                             "add, 2 FLOPs.")
        if math.isclose(ratio, 1e-3, rel_tol=1e-6) or math.isclose(ratio, 0.5e-3, rel_tol=1e-6):
            raise fail(task, f"{shown}: you used milliseconds as seconds (1000× too small). Divide by "
                             f"`milliseconds / 1000`.{' You also forgot the factor 2.' if ratio < 0.9e-3 else ''}")
        if math.isclose(ratio, 1e3, rel_tol=1e-6) or math.isclose(ratio, 0.5e3, rel_tol=1e-6):
            raise fail(task, f"{shown}: that is GFLOP/s, 1000× too many: one TFLOP/s is 1e12 FLOP/s, so divide by "
                             f"1e12.{' You also forgot the factor 2.' if ratio < 900 else ''}")
        if math.isclose(ratio, 1e-6, rel_tol=1e-6) or math.isclose(ratio, 0.5e-6, rel_tol=1e-6):
            raise fail(task, f"{shown}: you multiplied the milliseconds by 1000 instead of dividing (a million times "
                             "too small): seconds = milliseconds / 1000.")
        if math.isclose(ratio, 1e6, rel_tol=1e-6):
            raise fail(task, f"{shown}: you divided by 1e6 (MFLOP/s?) or forgot to convert: one TFLOP/s is 1e12 FLOP/s "
                             "and the time is in milliseconds.")
        raise fail(task, f"{shown}. The FLOPs of an (m×k) @ (k×n) product are 2·m·k·n; divide by the time in "
                         "seconds, then by 1e12.")
    passed(task, "2·m·k·n FLOPs, milliseconds converted to seconds, FLOP/s → TFLOP/s — on square and non-square "
                 "products.")


# (achieved, datasheet figure, sparse): fractions 0.40, 0.38, 0.80, exactly 1.0 (the boundary: allowed), and one
# above the dense peak (impossible: must raise) though below the sparse figure.
PEAK_CASES = ((400.0, 1979.0, True), (120.0, 312.0, False), (50.0, 125.0, True), (989.5, 1979.0, True),
              (1200.0, 1979.0, True), (400.0, 312.0, False))


def _impossible(task, fn, achieved, datasheet, sparse, fraction) -> None:
    """The answer must refuse a fraction above 1 with a ValueError."""
    args = f"fraction_of_peak({achieved}, {datasheet}, sparse={sparse})"
    try:
        got = noted_call(fn, achieved, datasheet, sparse, plain_as=(task, "fraction_of_peak"))
    except ValueError:
        return
    except CheckFailed:  # what it returned is not a plain value (checks.plain)
        raise
    except NotImplementedError:  # a stub: reported as not started
        call(task, fn, "fraction_of_peak", achieved, datasheet, sparse)
    except Exception as err:  # noqa: BLE001 - anything the learner's code raises is reported
        raise fail(task, f"{args} raised {type(err).__name__}; a fraction above 1 should raise ValueError (a "
                         "measurement cannot beat the dense peak).") from None
    number = exact_number(got)
    if sparse and number is not None and math.isclose(number, achieved / datasheet, rel_tol=1e-6):
        raise fail(task, f"{args} returned {number:.4g}: you used the sparse figure as the peak. A datasheet number "
                         "marked 'with sparsity' assumes 2:4 structured-sparse weights (half the multiplications "
                         "skipped) and is twice the dense peak a normal matmul can reach: halve it. Against the "
                         f"dense peak this run is {fraction:.2f}, which is impossible.")
    if number is not None and math.isclose(number, 1.0, rel_tol=1e-9):
        raise fail(task, f"{args} returned 1.0: clamping to 1 hides the error. {achieved} TFLOP/s is "
                         f"{fraction:.2f}× the dense peak, which no kernel reaches: the FLOP count, the time or the "
                         "peak is wrong. Raise ValueError saying so.")
    raise fail(task, f"{args} returned {got!r}, but {achieved} TFLOP/s is {fraction:.2f}× the dense peak: no kernel "
                     "beats it, so the FLOP count, the time or the peak must be wrong. Raise ValueError instead of "
                     "returning a fraction above 1.")


def fraction_of_peak(fn) -> None:
    """Task 2b: ``fraction_of_peak(achieved_tflops, datasheet_tflops, sparse)`` — a fraction of the dense peak, and a
    ValueError when it would be above 1."""
    task = "Task 2b (fraction_of_peak)"
    require_callable(task, fn, "fraction_of_peak")
    for achieved, datasheet, sparse in PEAK_CASES:
        peak = datasheet / 2 if sparse else datasheet
        expected = achieved / peak
        if expected > 1:
            _impossible(task, fn, achieved, datasheet, sparse, expected)
            continue
        try:
            value = noted_call(fn, achieved, datasheet, sparse, plain_as=(task, "fraction_of_peak"))
        except ValueError as err:
            raise fail(task, f"fraction_of_peak({achieved}, {datasheet}, sparse={sparse}) raised ValueError ({err}), "
                             f"but the run reached {expected:.4g} of the dense peak, which is possible"
                             f"{' (exactly the peak: 1.0 is not above 1)' if expected == 1 else ''}. Raise only "
                             "for achieved / dense peak above 1 (if yours came out above 1 here, is it upside down, "
                             "or a dense figure halved?).") from None
        except CheckFailed:  # what it returned is not a plain value (checks.plain)
            raise
        except Exception:  # noqa: BLE001 - call() reports it (a stub as not started)
            value = call(task, fn, "fraction_of_peak", achieved, datasheet, sparse)
        got = _number(task, "fraction_of_peak", value)
        shown = (f"fraction_of_peak({achieved}, {datasheet}, sparse={sparse}) returned {got:.4g}, "
                 f"expected {expected:.4g}")
        if math.isclose(got, expected, rel_tol=1e-6):
            continue
        if math.isclose(got, 100 * expected, rel_tol=1e-6):
            raise fail(task, f"{shown}: that is a percentage; return a fraction (0.42, not 42).")
        if sparse and math.isclose(got, achieved / datasheet, rel_tol=1e-6):
            raise fail(task, f"{shown}: you used the sparse figure as the peak. A datasheet number marked 'with "
                             "sparsity' assumes 2:4 structured-sparse weights and is twice the dense peak a normal "
                             "matmul can reach: halve it.")
        if not sparse and math.isclose(got, 2 * expected, rel_tol=1e-6):
            raise fail(task, f"{shown}: this datasheet figure is already dense; halve only the sparse ones.")
        if math.isclose(got, 1 / expected, rel_tol=1e-6):
            raise fail(task, f"{shown}: the fraction is upside down; it is achieved / peak (at most 1).")
        raise fail(task, f"{shown}. The fraction is achieved / dense peak, and the dense peak is half a sparse figure.")
    passed(task, "achieved / dense peak, with sparse datasheet figures halved, as a fraction; exactly the peak "
                 "returns 1.0 and a run above the dense peak raises ValueError.")

# --- Task 3: the MFU of a training step ------------------------------------------------------------------------------

MFU_CASES = [  # (parameters, tokens per step, step seconds, dense peak TFLOP/s): MFU 0.40, 0.44 and 0.56, as real
    (125e6, 0.5e6, 3.0, 312.0),  # training steps reach (roughly 0.3-0.6); above 1 is impossible
    (7e9, 0.5e6, 48.0, 989.0),
    (1.3e9, 1e6, 45.0, 312.0),
]


def training_mfu(fn) -> None:
    """Task 3: ``training_mfu(n_params, tokens, seconds, peak_tflops)``: model FLOPs utilisation of a step."""
    task = "Task 3 (training_mfu)"
    require_callable(task, fn, "training_mfu")
    for n, tokens, seconds, peak in MFU_CASES:
        want = 6 * n * tokens / seconds / (peak * 1e12)
        got = call(task, fn, "training_mfu", n, tokens, seconds, peak)
        if isinstance(got, bool) or not isinstance(got, (int, float)):
            raise fail(task, f"return a fraction (a float), not {type(got).__name__}.")
        if math.isclose(got, want, rel_tol=1e-6):
            continue
        context = f"for {n:.3g} parameters, {tokens:.3g} tokens in {seconds:g} s on a {peak:g} TFLOP/s GPU"
        if math.isclose(got, want / 3, rel_tol=1e-6):
            raise fail(task, f"{context} you counted 2 FLOPs per parameter and token, the forward pass only. A "
                             "training step also runs the backward pass, about twice the forward: 6 in all.")
        if math.isclose(got, want * 100, rel_tol=1e-6):
            raise fail(task, f"{context}: return a fraction (0.42), not a percentage.")
        if math.isclose(got, want * 2 / 3, rel_tol=1e-6) or math.isclose(got, want * 4 / 6 * 1.5, rel_tol=1e-6):
            raise fail(task, f"{context}: forward 2 and backward 4 FLOPs per parameter and token make 6.")
        if math.isclose(got, want * 8 / 6, rel_tol=1e-6):
            raise fail(task, f"{context}: 8 FLOPs per parameter and token counts a recomputed forward (activation "
                             "checkpointing). MFU counts the model's FLOPs only — 6 — whatever the step recomputes.")
        if math.isclose(got, want * 1e12, rel_tol=1e-6):
            raise fail(task, f"{context}: the peak is in TFLOP/s: multiply it by 1e12 before dividing FLOP/s by it.")
        if math.isclose(got, want * seconds, rel_tol=1e-6):
            raise fail(task, f"{context}: you did not divide by the step time: utilisation compares FLOPs *per "
                             "second* with the peak.")
        if got > 1:
            raise fail(task, f"{context} you returned {got:.4g}, more than the whole peak: that is impossible, so the "
                             f"FLOP count or the peak is wrong (expected {want:.4g}).")
        raise fail(task, f"{context} you returned {got:.4g}, expected {want:.4g}: the step's model FLOPs (per "
                         "parameter and token, forward and backward) per second, divided by the peak in FLOP/s.")
    passed(task, f"MFU right for {len(MFU_CASES)} training steps: 6 FLOPs per parameter and token (forward 2, "
                 "backward 4), per second, over the dense peak.")


# --- tiered hints: shown one tier per failed check, or on request with `check.hint(task)` ---

HINTS = {
    'benchmark': [
        ("A GPU runs asynchronously: when does `fn()` return, and when is its work done? Lesson 06's four "
         'timing rules.'),
        ('Warm up untimed; then for every timed call synchronise before reading the clock, both at the '
         'start and at the stop; summarise with the median.'),
        ('for _ in range(warmup): fn(); per repeat: sync(); start = clock(); fn(); sync(); '
         'times.append(clock() - start); return statistics.median(times).'),
    ],
    'achieved_tflops': [
        ('How many floating-point operations does an (m × k) @ (k × n) product do? Each output element is '
         'a dot product of length k.'),
        ('m·n outputs, each k multiplies and k adds: 2·m·k·n FLOPs. The time is in milliseconds; TFLOP/s '
         'is 1e12 FLOPs per second.'),
        'return 2 * m * k * n / (milliseconds / 1e3) / 1e12.',
    ],
    'fraction_of_peak': [
        ("What does the asterisk 'with sparsity' on a datasheet mean for an ordinary dense matmul? Lesson "
         '06 discusses it. And can a real run ever beat the peak?'),
        ('The sparse figure is twice the dense peak. The fraction is achieved over the dense peak, at most '
         '1; a larger one means a wrong measurement, so refuse it with an exception.'),
        ('peak = datasheet_tflops / 2 if sparse else datasheet_tflops; fraction = achieved_tflops / peak; '
         'if fraction > 1: raise ValueError(...); return fraction.'),
    ],
    'training_mfu': [
        ('How many FLOPs does one weight cost per token in the forward pass, and how many in the backward '
         'pass?'),
        ('Forward: one multiply-add = 2 FLOPs per parameter and token. Backward: two matrix products per '
         'forward one (input gradient and weight gradient), 4 FLOPs. The peak is in TFLOP/s: × 1e12.'),
        'return 6 * n_params * tokens / seconds / (peak_tflops * 1e12).',
    ],
}
hint = hints(__name__, HINTS)
