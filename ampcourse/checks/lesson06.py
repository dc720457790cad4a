"""Checks for exercise 06 (speed and memory): an honest benchmark, achieved TFLOP/s and the fraction of peak.

Task 1 runs the learner's ``benchmark(fn, warmup, repeats, sync, clock)`` against a *fake* device: no
timing luck. The fake ``fn`` only queues its work (as a CUDA kernel launch does) and advances the fake
clock by a microsecond; ``sync`` waits until the queued work is done; ``clock`` returns the fake time and
writes down whether work was still queued when it was read. The first calls are slow (compilation,
warm-up) and one timed call is an outlier, so each mistake leaves its own trace: a wrong count of calls,
a clock read while work was queued (before a start or a stop), too few clock reads (the whole loop timed
once), or a result that equals the mean, the median including the warm-up, or milliseconds.
"""

from __future__ import annotations

import math
import numbers
import statistics

from . import call, fail, hints, passed, require_callable

_LAUNCH = 1e-6  # what queueing one call costs on the fake clock


class FakeDevice:
    """A fake asynchronous device with a fake clock (see the module docstring)."""

    def __init__(self, works: list[float]) -> None:
        self.works = list(works)
        self.now = 0.0
        self.busy_until = 0.0
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


# (warm-up works, timed works): slow first calls, one outlier; odd repeats so the median is one run
SCENARIOS = (
    ([0.5, 0.5, 0.5], [0.012, 0.010, 0.011, 0.200, 0.013, 0.009, 0.014]),
    ([0.8, 0.6], [0.0031, 0.0029, 0.0900, 0.0030, 0.0032]),
)


def _close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-9)


def _fmt(seconds: float) -> str:
    return f"{seconds * 1e3:.4g} ms"


def benchmark(fn) -> None:
    """Task 1: ``benchmark(fn, warmup, repeats, sync, clock)`` returns the median of synchronised timed runs."""
    task = "Task 1 (benchmark)"
    require_callable(task, fn, "benchmark")
    for warm, timed in SCENARIOS:
        warmup, repeats = len(warm), len(timed)
        device = FakeDevice(warm + timed)
        result = call(task, fn, "benchmark", device.fn, warmup=warmup, repeats=repeats, sync=device.sync,
                      clock=device.clock)
        if isinstance(result, bool) or not isinstance(result, numbers.Real):
            raise fail(task, f"`benchmark` returned {type(result).__name__} {result!r}: return one number, the "
                             "median time of the timed calls in seconds.")
        result = float(result)
        expected = statistics.median(timed)
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
        if _close(result, statistics.median(warm + timed)) or len(reads) >= 2 * (warmup + repeats):
            raise fail(task, "the warm-up calls were timed too (their times went into the result): time only the "
                             "`repeats` calls that follow the warm-up.")
        raise fail(task, f"you returned {_fmt(result)}; the median of the timed calls is {_fmt(expected)}. Time each "
                         "call as sync → start = clock() → fn() → sync → stop = clock(), and return the median "
                         "of the differences.")
    passed(task, "warm-up excluded, every start and stop reading synchronised, one measurement per call, the "
                 "median returned (the outlier ignored) — in two runs on a fake device.")


# --- Task 2: achieved TFLOP/s and fraction of peak --------------------------------------------------------

_CASES = ((4096, 4096, 4096, 1.5), (8192, 1024, 3072, 0.75))


def _number(task: str, name: str, value) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(float(value)):
        raise fail(task, f"`{name}` returned {type(value).__name__} {value!r}: return one finite number.")
    return float(value)


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
        if math.isclose(ratio, 1e6, rel_tol=1e-6):
            raise fail(task, f"{shown}: you divided by 1e6 (MFLOP/s?) or forgot to convert: one TFLOP/s is 1e12 FLOP/s "
                             "and the time is in milliseconds.")
        raise fail(task, f"{shown}. The FLOPs of an (m×k) @ (k×n) product are 2·m·k·n; divide by the time in "
                         "seconds, then by 1e12.")
    passed(task, "2·m·k·n FLOPs, milliseconds converted to seconds, FLOP/s → TFLOP/s — on square and non-square "
                 "products.")


def fraction_of_peak(fn) -> None:
    """Task 2b: ``fraction_of_peak(achieved_tflops, datasheet_tflops, sparse)`` — a fraction of the dense peak."""
    task = "Task 2b (fraction_of_peak)"
    require_callable(task, fn, "fraction_of_peak")
    for achieved, datasheet, sparse in ((400.0, 1979.0, True), (120.0, 312.0, False), (50.0, 125.0, True)):
        peak = datasheet / 2 if sparse else datasheet
        expected = achieved / peak
        got = _number(task, "fraction_of_peak", call(task, fn, "fraction_of_peak", achieved, datasheet, sparse))
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
    passed(task, "achieved / dense peak, with sparse datasheet figures halved, as a fraction.")

# --- Task 3: the MFU of a training step ------------------------------------------------------------------------------

MFU_CASES = [  # (parameters, tokens per step, step seconds, dense peak TFLOP/s)
    (125e6, 0.5e6, 1.1, 312.0),
    (7e9, 4e6, 95.0, 989.0),
    (1.3e9, 1e6, 4.0, 312.0),
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
         '06 discusses it.'),
        ('The sparse figure is twice the dense peak. The fraction is achieved over the dense peak, as a '
         'number between 0 and 1.'),
        'peak = datasheet_tflops / 2 if sparse else datasheet_tflops; return achieved_tflops / peak.',
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
