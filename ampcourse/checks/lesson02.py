"""Checks for exercise 02 (underflow and overflow): predict a cast; choose a safe loss scale; count the flushed
gradients; pick the 16-bit dtype with the smaller largest relative error."""

from __future__ import annotations

import math

import torch

from . import Returned, call, collect, fail, hints, passed, real_number, require_callable

FP16_MAX = torch.finfo(torch.float16).max  # 65504
FP16_TINY = torch.finfo(torch.float16).tiny  # 2**-14, smallest normal
FP16_SUB = FP16_TINY * torch.finfo(torch.float16).eps  # 2**-24, smallest subnormal
CATEGORIES = ("zero", "subnormal", "normal", "inf")


def fp16_category(x: float) -> str:
    """What torch's cast to float16 does to ``x``: 'zero', 'subnormal', 'normal' or 'inf' (by magnitude)."""
    stored = abs(torch.tensor(x, dtype=torch.float32).to(torch.float16).item())
    if stored == 0:
        return "zero"
    if math.isinf(stored):
        return "inf"
    return "subnormal" if stored < FP16_TINY else "normal"


# (value, why it is in the list) — chosen so that each threshold mistake shows on some value.
CAST_CASES = [
    (1.0, "an ordinary value"),
    (1e-5, "between the smallest subnormal and the smallest normal"),
    (2.0**-14, "exactly the smallest normal"),
    (6.103e-05, "just below 2**-14, in the band that rounds up to it"),
    (2.0**-14 - 2.0**-26, "inside the band [2**-14 - 2**-25, 2**-14) that rounds up to the smallest normal"),
    (6.1e-05, "just below that band: it stays the largest subnormal"),
    (1e-9, "far below the smallest subnormal"),
    (3.0e-8, "just above half the smallest subnormal (2**-25 ≈ 2.98e-8)"),
    (2.0**-25, "exactly half the smallest subnormal"),
    (2.9e-8, "just below half the smallest subnormal"),
    (65504.0, "the largest fp16 value"),
    (65519.0, "above 65504 but below the rounding boundary 65520"),
    (65520.0, "the rounding boundary"),
    (1e5, "far above the range"),
    (-1.0, "a negative value"),
    (-1e-5, "a negative subnormal"),
    (-1e6, "a large negative value"),
    (-65520.0, "the negative rounding boundary"),
    (-(2.0**-25), "minus half the smallest subnormal"),
]
CAST_WANT = ("normal", "subnormal", "normal", "normal", "normal", "subnormal", "zero", "subnormal", "zero", "zero",
             "normal", "normal", "inf", "inf", "normal", "subnormal", "inf", "inf", "zero")
"""What torch's cast does to each of :data:`CAST_CASES` (:func:`fp16_category`), written out: the check compares
with these constants, not with a cast made after the answer ran (an answer cell could patch ``Tensor.to``);
``tests/test_checks_lessons01_02.py`` recomputes them."""


def _cast_mistake(x: float, got: str, want: str) -> str:
    m = abs(x)
    if x < 0 and got != want:
        return "use the magnitude |x|: negative numbers have the same range as positive ones."
    if want == "subnormal" and got == "zero" and m >= 2.0**-24:
        return ("values between the smallest subnormal 2**-24 ≈ 6.0e-8 and the smallest normal 2**-14 ≈ "
                "6.1e-5 are stored as subnormals (fewer significant bits), not flushed to zero.")
    if want == "subnormal" and got == "zero":
        return ("casts round to nearest: a value above half the smallest subnormal (2**-25 ≈ 2.98e-8) "
                "rounds up to 2**-24, a subnormal.")
    if want == "zero" and got == "subnormal":
        return ("a value at or below half the smallest subnormal (2**-25) rounds to 0 (exactly 2**-25 is "
                "a tie, and ties go to the even neighbour, 0).")
    if want == "normal" and got == "subnormal" and m < FP16_TINY:
        return ("this value is below 2**-14 but rounds *up* to it: the largest subnormal is 2**-14 - 2**-24, and "
                "values above the halfway point between them, 2**-14 - 2**-25, round to the normal 2**-14.")
    if want == "subnormal" and got == "normal":
        return ("this value is below the halfway point 2**-14 - 2**-25 between the largest subnormal and 2**-14, "
                "so it rounds to a subnormal.")
    if want == "normal" and got == "subnormal":
        return "2**-14 ≈ 6.1e-5 is the smallest *normal* fp16 value: values from there up are normal."
    if want == "normal" and got == "inf":
        return ("values above 65504 but below 65520 round *down* to 65504, the largest finite fp16 value; "
                "only from 65520 (halfway to the next binade step, 65536) does the cast give inf.")
    if want == "inf" and got == "normal":
        return "from 65520 up the cast rounds to inf: 65504 is the largest finite fp16 value."
    return "work out where each category starts: every boundary is a halfway point between two fp16 values."


def predict_cast(fn) -> None:
    """Task 1: ``predict_cast(x)`` says what a cast to float16 does to x, without running it."""
    task = "Task 1 (predict_cast)"
    require_callable(task, fn, "predict_cast")
    for (x, what), want in zip(CAST_CASES, CAST_WANT, strict=True):
        got = call(task, fn, "predict_cast", x)
        if got not in CATEGORIES:
            raise fail(task, f"for {x!r} you returned {got!r}; return one of {', '.join(map(repr, CATEGORIES))}.")
        if got != want:
            raise fail(task, f"for x = {x!r} ({what}) you said {got!r}, but the cast gives {want!r}: "
                             + _cast_mistake(x, got, want))
    passed(task, f"{len(CAST_CASES)} values predicted right, including the rounding boundaries 2**-25, "
                 "2**-14 - 2**-25 and 65520.")


def safe_scale(grads: torch.Tensor) -> float:
    """The largest power of two S with max|g|·S <= 65504 (the scaled gradients stay finite in fp16)."""
    peak = grads.abs().max().item()
    k = math.floor(math.log2(FP16_MAX / peak))
    while peak * 2.0 ** (k + 1) <= FP16_MAX:
        k += 1
    while peak * 2.0**k > FP16_MAX:
        k -= 1
    return 2.0**k


def _scale_cases() -> list[tuple[torch.Tensor, str]]:
    g = torch.Generator().manual_seed(0)
    cases = []
    for peak, what in ((1e-3, "small gradients"), (1.0, "gradients up to 1"), (2.0**-4, "peak exactly 2**-4"),
                       (300.0, "large gradients"), (65504.0 / 2**10, "max|g| · 2**10 exactly 65504"),
                       (65504.0, "a peak of exactly 65504"), (3.0e5, "a peak far above 65504 (the scale is < 1)"),
                       (1.0e5, "a peak above 65504 (the scale must be < 1)")):
        t = torch.randn(1000, generator=g)
        t = t / t.abs().max() * peak
        cases.append((t, what))
    t = torch.randn(1000, generator=g) * 1e-4
    t[17] = -0.5  # the largest magnitude is negative
    cases.append((t, "gradients whose largest magnitude is negative"))
    return cases


def largest_safe_scale(fn) -> None:
    """Task 2: ``largest_safe_scale(grads)``: the largest power-of-two loss scale that cannot overflow fp16.

    The cases include a product landing exactly on 65504 (``≤``, not ``<``) and peaks of 65504 and above
    (scales 1 and 0.5), where ``int()`` truncation, ``round()`` and a scale floor of 1 go wrong.
    """
    task = "Task 2 (largest_safe_scale)"
    require_callable(task, fn, "largest_safe_scale")
    # Called on every case first, the answers kept frozen (checks.collect), then judged against cases made again from
    # the seeds, never the tensors the answer's function could reach while it ran (review rev25-r7 E1).
    got_all = collect(task, fn, "largest_safe_scale", [(grads,) for grads, _ in _scale_cases()], _item)
    cases = _scale_cases()
    answers: tuple = ()
    for (grads, what), (got, error) in zip(cases, got_all, strict=False):
        if error is not None:
            raise error
        if type(got) in (int, float) and got <= 0 and got == math.log2(safe_scale(grads)):
            raise fail(task, f"for {what} you returned {got:g}, the exponent: return the scale itself, "
                             f"2**{got:g} = {safe_scale(grads):g}.")
        if type(got) not in (int, float) or not math.isfinite(got) or got <= 0:
            raise fail(task, f"for {what} you returned {got!r}; return a positive number, the scale S.")
        answers = (*answers, float(got))
    wrong = [(g, w, a) for (g, w), a in zip(cases, answers, strict=True) if a != safe_scale(g)]
    if not wrong:
        passed(task, f"largest safe power-of-two scale right for {len(cases)} gradient sets (max|g|·S ≤ 65504 "
                     "exactly at the edge, S×2 would overflow; scales below 1 for peaks above 65504).")
        return
    for formula, explain in _SCALE_MISTAKES:  # a known wrong formula that gives every answer: name it
        if all(formula(g) == a for (g, _), a in zip(cases, answers, strict=True)):
            grads, what, got = wrong[0]
            peak = grads.abs().max().item()
            raise fail(task, f"for {what} (max|g| = {peak:g}) you returned {got:g}, expected {safe_scale(grads):g}: "
                             + explain(grads))
    for grads, what, got in wrong[:1]:
        want = safe_scale(grads)
        peak = grads.abs().max().item()
        exact = math.log2(FP16_MAX / peak)
        context = f"for {what} (max|g| = {peak:g}) you returned {got:g}, expected {want:g}"
        if got == math.log2(want):
            raise fail(task, f"for {what} you returned {got:g}, the exponent: return the scale itself, "
                             f"2**{got:g} = {want:g}.")
        if math.isclose(got, FP16_MAX / peak, rel_tol=1e-6):
            raise fail(task, f"for {what} you returned {got:g} = 65504 / max|g|, not a power of two. Round "
                             f"down to a power of two (multiplying by a power of two is exact): {want:g}.")
        if grads.max().item() < peak and math.isclose(got, safe_scale(grads.clamp(min=0)), rel_tol=0):
            raise fail(task, f"for {what} you used the largest gradient, not the largest magnitude: "
                             f"max|g| = {peak:g} comes from a negative value. Use grads.abs().max().")
        if exact < 0 and got == 2.0 ** int(exact):
            raise fail(task, f"{context}: log2(65504 / max|g|) = {exact:.3f} is negative here, and int() truncates "
                             "toward zero (to 0, so S = 1, which overflows). Round down with math.floor.")
        if exact < 0 and got == 1.0:
            raise fail(task, f"{context}: with max|g| above 65504 even S = 1 overflows; a scale below 1 is allowed "
                             "(and needed) — do not clamp it at 1.")
        if peak * got * 2 == FP16_MAX or (exact == math.floor(exact) and got == want / 2):
            raise fail(task, f"{context}: here max|g| × {want:g} is exactly 65504, which is finite in float16. "
                             "The condition is max|g|·S ≤ 65504 (≤, not <).")
        if peak * got > FP16_MAX:
            raise fail(task, f"for {what} your scale {got:g} overflows: max|g|·S = {peak * got:g} > 65504, "
                             f"so the largest gradient becomes inf in fp16. The answer is {want:g}.")
        raise fail(task, f"for {what} you returned {got:g}; the largest safe power of two is {want:g} "
                         f"(max|g| = {peak:g}, and {peak:g} × {2 * want:g} > 65504). Do not give away range.")


def _item(got):
    """A number the answer returned, read right after its call: an int/float (or numpy scalar, a Fraction, a C
    Decimal: ``checks.real_number``), or a one-element plain tensor's item (through the class); anything else as it
    is (``checks.frozen`` describes it)."""
    if type(got) in (torch.Tensor, torch.nn.Parameter) and torch.Tensor.numel(got) == 1:
        got = torch.Tensor.item(got)
    number = real_number(got)
    return got if number is None or type(got) is bool else number


def _log2_limit(grads: torch.Tensor, limit: float = FP16_MAX) -> float:
    return math.log2(limit / grads.abs().max().item())


_SCALE_MISTAKES = [  # (the wrong formula, what it did wrong): matched against every answer at once
    (lambda g: 2.0 ** int(_log2_limit(g)),
     lambda g: "log2(65504 / max|g|) is negative when max|g| > 65504, and int() truncates toward zero (to 0 here, "
               "so S = 1, which overflows). Round down with math.floor."),
    (lambda g: max(1.0, safe_scale(g)),
     lambda g: "with max|g| above 65504 even S = 1 overflows; a scale below 1 is allowed (and needed) — do not "
               "clamp it at 1."),
    (lambda g: 2.0 ** round(_log2_limit(g)),
     lambda g: f"round() rounds log2(65504 / max|g|) = {_log2_limit(g):.4f} *up* here, and that scale overflows. "
               "Round down with math.floor."),
    (lambda g: 2.0 ** math.floor(_log2_limit(g, 65536.0)),
     lambda g: "you used 65536 (2**16) as the limit, but float16's largest finite value is 65504 "
               "(torch.finfo(torch.float16).max)."),
    (lambda g: 2.0 ** (math.ceil(_log2_limit(g)) - 1),
     lambda g: "here max|g| × S is exactly 65504 for the right S, which is finite in float16. The condition is "
               "max|g|·S ≤ 65504 (≤, not <)."),
    (lambda g: safe_scale(g.clamp(min=0)) if g.max() > 0 else math.nan,
     lambda g: f"you used the largest gradient, not the largest magnitude: max|g| = {g.abs().max().item():g} comes "
               "from a negative value. Use grads.abs().max()."),
]

# --- Task 3: how much underflows? ------------------------------------------------------------------------------

def flushed(grads: torch.Tensor, scale: float) -> float:
    """torch's answer: the fraction of the nonzero entries of ``grads`` that are 0 after ``(grads * scale).half()``.

    The check's scales are powers of two, so the float64 product of a float32 gradient is a float32 value and
    the float64 -> float16 cast (which goes through float32) rounds once."""
    nonzero = grads != 0
    cast = (grads.double() * scale).to(torch.float16)
    return ((cast == 0) & nonzero).sum().item() / max(1, nonzero.sum().item())


def _cast_then_scale(grads: torch.Tensor, scale: float) -> float:
    """A typical mistake: cast to float16 first, then multiply by the scale in float16 (the product is rounded to
    float16 again). The same as the right answer at scale 1; for scales above 1 it keeps the cast's zeros, for a
    scale below 1 it flushes more than the right answer, by the second rounding."""
    nonzero = grads != 0
    cast = grads.to(torch.float16) * scale
    return ((cast == 0) & nonzero).sum().item() / max(1, nonzero.sum().item())


def _flush_cases() -> list[tuple[torch.Tensor, float, str]]:
    g = torch.Generator().manual_seed(2)
    magnitudes = 10.0 ** (torch.rand(4000, generator=g, dtype=torch.float64) * 10 - 12)  # 1e-12 .. 1e-2
    signs = torch.where(torch.rand(4000, generator=g) < 0.5, -1.0, 1.0).double()
    grads = (magnitudes * signs).float()
    grads[::10] = 0.0  # a tenth are exactly zero (e.g. dead ReLU units): they were never "flushed"
    grads[1] = 2.0**-25  # exactly half the smallest subnormal: a tie, rounds to 0
    grads[2] = 2.0**-25 * 1.0001  # just above it: rounds up to 2**-24
    grads[3] = -0.0  # a negative zero is a zero too
    grads[4] = -(2.0**-25)  # the tie, negative
    grads[5] = 8.25 * 2.0**-24  # × 2**-4 it rounds up to 2**-24; cast first (to 8 × 2**-24), then scaled, it is 0
    return [(grads, 1.0, "no scaling"), (grads, 2.0**16, "GradScaler's default scale 2**16"),
            (grads, 2.0**8, "a scale of 2**8"), (grads, 2.0**-4, "a scale of 2**-4 (below 1, as in Task 2)")]


def _close(got: float, want: float) -> bool:
    """Equal up to float32 arithmetic (a mean taken in float32 is off by ~1e-7), far below one gradient's share."""
    return abs(got - want) <= 1e-6 * max(1.0, abs(want))


def _share(grads: torch.Tensor, mask: torch.Tensor) -> float:
    nonzero = grads != 0
    return (mask & nonzero).sum().item() / max(1, nonzero.sum().item())


_ZERO_MISTAKE = ("count only the gradients that were not zero to begin with, and divide by their number; a zero "
                 "gradient is not lost to underflow.")
_FLUSH_MISTAKES = [  # (the wrong answer for (grads, scale), what it did wrong): matched against every answer
    (lambda g, s: 100 * flushed(g, s), "return a fraction (0.25), not a percentage (25)."),
    (lambda g, s: flushed(g, 1.0),
     "your answer does not change with the scale: you ignored it, or applied it after the cast to float16 (the "
     "cast has flushed the small gradients by then). The loss scale multiplies every gradient *before* the cast: "
     "judge |g × scale|, e.g. (grads * scale).half()."),
    (_cast_then_scale,
     "you cast to float16 before multiplying by the scale: the cast flushes the small gradients before the scale "
     "can lift them (and with a scale below 1 the float16 product rounds a second time). Scale first, then cast: "
     "(grads * scale).half()."),
    (lambda g, s: (flushed(g, s) * (g != 0).sum().item() + (g == 0).sum().item()) / g.numel(), _ZERO_MISTAKE),
    (lambda g, s: flushed(g, s) * (g != 0).sum().item() / g.numel(), _ZERO_MISTAKE),
    (lambda g, s: _share(g, g.double().abs() * s < 2.0**-24),
     "values from just above 2**-25 up to 2**-24 round *up* to the smallest subnormal, they are not flushed. The "
     "cast gives 0 only at or below 2**-25."),
    (lambda g, s: _share(g, g.double().abs() * s < 2.0**-25),
     "a scaled gradient of exactly 2**-25 is a tie between 0 and 2**-24, and ties round to the even neighbour, 0: "
     "it is flushed. Use <= 2**-25, not <."),
    (lambda g, s: _share(g, g.double().abs() * s < FP16_TINY),
     "you counted the subnormals (below 2**-14) as lost, but a subnormal is still a nonzero value. Only "
     "magnitudes at or below 2**-25 become 0."),
    (lambda g, s: _share(g, g.double() * s <= 2.0**-25),
     "you compared the signed value, so every negative gradient counted as flushed. Judge the magnitude "
     "|g × scale|."),
    (lambda g, s: flushed(g, s) * (g != 0).sum().item(),
     "you returned a count; return the fraction, divided by the number of nonzero gradients."),
]


def flushed_fraction(fn) -> None:
    """Task 3: ``flushed_fraction(grads, scale)``: the share of nonzero gradients that a scaled fp16 cast flushes.

    All cases are asked first (no scale, 2**16, 2**8, a scale below 1); when the answers are exactly those of a
    known wrong rule (a percentage, the scale ignored, cast before scaling, zeros counted, a wrong threshold, a
    signed comparison, a count), the message names it at the first case it gets wrong. Answers are compared up
    to float32 arithmetic (a mean taken in float32 is right).
    """
    task = "Task 3 (flushed_fraction)"
    require_callable(task, fn, "flushed_fraction")
    # a copy of the gradients for each call: an answer that scales them in place (`grads *= scale`) is right on each
    # call, and must not see the tensor an earlier call scaled (review rev25-r8 E4)
    got_all = collect(task, fn, "flushed_fraction", [(grads.clone(), scale) for grads, scale, _ in _flush_cases()],
                      _item)
    cases = _flush_cases()  # made after the calls, as in Task 2 (review rev25-r7 E1)
    answers: tuple = ()
    for _case, (got, error) in zip(cases, got_all, strict=False):
        if error is not None:
            raise error
        if type(got) not in (int, float):
            kind = got.kind if isinstance(got, Returned) else type(got).__name__
            raise fail(task, f"return a number between 0 and 1 (you returned {kind}).")
        answers = (*answers, float(got))
    wrong = [(c, a) for c, a in zip(cases, answers, strict=True) if not _close(a, flushed(c[0], c[1]))]
    if not wrong:
        passed(task, "flushed fractions right with and without a loss scale (zeros excluded, the 2**-25 tie "
                     "included, a scale below 1 too): the scale moves the gradients out of the flush zone.")
        return
    (grads, scale, what), got = wrong[0]
    want = flushed(grads, scale)
    context = f"with {what} you returned {got:.4f}, the cast flushes {want:.4f} of the nonzero gradients"
    for rule, explain in _FLUSH_MISTAKES:
        if all(_close(a, rule(g, s)) for (g, s, _), a in zip(cases, answers, strict=True)):
            raise fail(task, f"{context}: {explain}")
    for rule, explain in _FLUSH_MISTAKES:  # not every answer fits one rule: name the rule this one fits
        if _close(got, rule(grads, scale)):
            raise fail(task, f"{context}: {explain}")
    raise fail(task, f"{context}. A gradient is flushed when its scaled magnitude |g × scale| is at most half the "
                     "smallest subnormal (2**-25): count those among the nonzero gradients, and divide by their "
                     "number.")

# --- Task 4: which 16-bit dtype stores these values better? -----------------------------------------------------

def _max_rel_error(values: list[float], dtype: torch.dtype) -> float:
    # torch casts float64 to float16 and bfloat16 through float32, so it rounds twice: a value within float32's
    # rounding of a midpoint can land on the wrong side (torch.tensor(1 + 2**-11 + 2**-40, dtype=torch.float64)
    # .half() is 1.0, a single rounding gives 1 + 2**-10). DTYPE_CASES keep away from the midpoints:
    # tests/test_checks_lessons01_02.py compares these casts with an exact single rounding for every value.
    x = torch.tensor(values, dtype=torch.float64)
    stored = x.to(dtype).double()
    return ((stored - x).abs() / x.abs()).max().item()


DTYPE_CASES = [  # (values, what they are) — every value nonzero
    ([0.1, 1.5, 300.0, -2.75], "activations of ordinary size"),
    ([1.0e5, 3.0, 0.5], "a value above float16's largest"),
    ([1.0e-6, 1.0e-7, 3.0e-7], "tiny gradients, deep in float16's subnormals"),
    ([1.0e-3, 0.5, -60.0], "values inside float16's normal range"),
    ([7.0e4, 1.0e-9], "both ends out of float16's range"),
    ([5.0e-5, 1.0], "a float16 subnormal just below 2**-14"),
    ([3.0e-5, 0.5], "a float16 subnormal in [2**-16, 2**-15)"),
    ([65510.0, 1.0], "a value between 65504 and 65520, which float16 rounds down to 65504"),
    ([-65519.0, 0.25], "just below the overflow boundary 65520, negative"),
    ([65520.0, 1.0], "exactly 65520, where float16 rounds to inf"),
    ([65504.0, 2.0**-14], "float16's largest value and its smallest normal"),
    ([1.0e-5, 2.0e-5], "values in [2**-17, 2**-15) where both formats have the same largest error"),
    ([2.0**-20, 0.3], "a value below 2**-17 that float16 stores exactly (a multiple of 2**-24)"),
    ([1.1e-6, 0.3], "a value below 2**-17 that float16's subnormal spacing 2**-24 rounds badly"),
    ([1.0, 2.0, 0.5], "values both formats store exactly: a tie"),
    ([2.0e-6, 0.1, 0.3, 0.7, 1.1, 2.2, 3.3, 4.4, 5.5, 6.6, 7.7, 9.9],
     "one value deep in float16's subnormals among ordinary ones: judge the largest error, not the mean"),
]


def _show(v: float) -> str:
    """``2**-20`` for a power of two, else the repr."""
    mantissa, exponent = math.frexp(abs(v))
    return f"{'-' if v < 0 else ''}2**{exponent - 1}" if mantissa == 0.5 else repr(v)


def _error_pair(values: list[float]) -> dict[torch.dtype, float]:
    return {d: _max_rel_error(values, d) for d in (torch.float16, torch.bfloat16)}


def better_dtype(fn) -> None:
    """Task 4: ``better_dtype(values)`` picks float16 or bfloat16, whichever stores the values with the smaller
    largest relative error (float16 on a tie).

    The reference is the task's own definition, computed with real casts for each case: no range rule. The
    cases cover both edges of float16's range, where a range rule goes wrong: subnormals from 2**-17 up keep
    at least bfloat16's 8 significant bits, and 65504 < |v| < 65520 rounds down to 65504. Below 2**-17 a value
    float16 stores exactly catches worst-case bounds (half a spacing), which choose as the range [2**-17, 65520)
    does.
    """
    task = "Task 4 (better_dtype)"
    require_callable(task, fn, "better_dtype")
    for values, what in DTYPE_CASES:
        errors = _error_pair(values)
        want = torch.float16 if errors[torch.float16] <= errors[torch.bfloat16] else torch.bfloat16
        got = call(task, fn, "better_dtype", list(values))
        if got not in (torch.float16, torch.bfloat16):
            raise fail(task, f"return torch.float16 or torch.bfloat16 (you returned {got!r}).")
        if got == want:
            continue
        context = (f"for {values} ({what}) you chose {str(got).removeprefix('torch.')}; the largest relative error "
                   f"is {errors[torch.float16]:.2g} in float16 and {errors[torch.bfloat16]:.2g} in bfloat16")
        mags = [abs(v) for v in values]
        if errors[torch.float16] == errors[torch.bfloat16]:
            raise fail(task, f"{context}: equal, a tie, and on a tie the task asks for float16.")
        if want == torch.float16:
            if any(FP16_MAX < m < 65520 for m in mags):
                raise fail(task, f"{context}. Above 65504 but below 65520 float16 rounds down to 65504 (an error "
                                 "under 16/65504 ≈ 2.4e-4), closer than bfloat16's neighbours 65280 and 65536: "
                                 "float16 only overflows from 65520 on.")
            if any(2.0**-17 <= m < FP16_TINY for m in mags):
                raise fail(task, f"{context}. Below 2**-14 float16 is subnormal, but its spacing stays 2**-24, so "
                                 "from 2**-17 up it keeps at least 8 significant bits, as many as bfloat16: the "
                                 "crossover lies inside the subnormals, at 2**-17, not at 2**-14.")
            small = [v for v in values if abs(v) < 2.0**-17]
            if small:
                exact = [v for v in small if _max_rel_error([v], torch.float16) == 0]
                held = (f"{_show(exact[0])} is stored exactly in float16 (a multiple of its subnormal spacing "
                        "2**-24: error 0)") if exact else (
                        f"{_show(small[0])} lies close to a multiple of float16's subnormal spacing 2**-24 (its "
                        f"error is {_max_rel_error(small[:1], torch.float16):.2g})")
                raise fail(task, f"{context}: you compared worst-case bounds (half a spacing) or float16's range — "
                                 f"both say bfloat16 here — but {held}. Use the error each value actually has "
                                 "once stored.")
            raise fail(task, f"{context}. Inside float16's normal range float16 wins: 10 mantissa bits against "
                             "bfloat16's 7, so 8 times finer.")
        if any(m >= 65520 for m in mags):
            raise fail(task, f"{context}. From 65520 up float16 rounds to inf (an infinite error), while bfloat16 "
                             "keeps the value to 8 significant bits.")
        raise fail(task, f"{context}. Below 2**-17 float16's subnormal spacing 2**-24 is coarser than bfloat16's, "
                         "so a value there can lose most of its bits: compute each format's rounding error, and "
                         "compare the largest one of each (not a mean, not an absolute error).")
    passed(task, f"{len(DTYPE_CASES)} value sets judged by their largest relative error: float16 is at least as "
                 "precise from 2**-17 (inside its subnormals) up to just below 65520; from 65520 it overflows, and "
                 "below 2**-17 its subnormal spacing 2**-24 is coarser than bfloat16's unless a value falls on it.")


# --- tiered hints: shown one tier per failed check, or on request with `check.hint(task)` ---

HINTS = {
    'predict_cast': [
        ('Casts round to nearest. Where does a value stop rounding to 0, to the largest subnormal, and to '
         "65504? Lesson 02's slider shows the four regions."),
        ('The boundaries are halfway points: half of the smallest subnormal 2**-24; halfway between the '
         'largest subnormal (2**-14 - 2**-24) and 2**-14; halfway between 65504 and the next step 65536.'),
        ('zero when |x| <= 2**-25 (a tie goes to the even neighbour, 0); inf when |x| >= 65520; normal '
         'when |x| >= 2**-14 - 2**-25 (that band rounds up to 2**-14); subnormal in between.'),
    ],
    'largest_safe_scale': [
        'Only the largest gradient can overflow. What is the biggest S that keeps it at most 65504?',
        ('The exact bound is 65504 / max|g|; you want the largest power of two not above it (think log2, '
         'rounded down).'),
        ('peak = grads.abs().max().item(); return 2.0 ** math.floor(math.log2(65504 / peak)) — math.floor, '
         'not int(): for a peak above 65504 the exponent is negative and the scale below 1. A peak of 1.0 '
         'gives 2**15, since 2**16 > 65504; a product of exactly 65504 is still finite.'),
    ],
    'flushed_fraction': [
        ("Which gradients does a float16 cast turn into 0? Task 1's thresholds tell you; the scale "
         'multiplies every gradient first.'),
        ('A value is flushed when |g × scale| is at most half the smallest subnormal (2**-25). Count only '
         'gradients that were nonzero before the cast, and divide by their number.'),
        ('scaled = grads.double().abs() * scale; nonzero = grads != 0; return (nonzero & (scaled <= '
         '2**-25)).sum().item() / nonzero.sum().item().'),
    ],
    'better_dtype': [
        ('The answer is defined by the rounding errors, so compute them: for each value, how far apart are '
         "the representable neighbours of that value in each format (lesson 01's spacing)?"),
        ('Near |v| the spacing is 2**(e - m) with e = floor(log2 |v|) and m = 10 (float16) or 7 (bfloat16); '
         "below float16's smallest normal e stays -14 (subnormals), and a float16 result above 65504 is inf. "
         'The stored value is the nearest multiple of that spacing; its error is the distance to it (0 for a '
         'value the format holds exactly).'),
        ('m, e = math.frexp(abs(v)); spacing = 2.0 ** (max(e - 1, -14) - 10); stored = round(abs(v) / spacing) '
         '* spacing (inf if > 65504); error = abs(stored - abs(v)) / abs(v); the same for bfloat16 with -126, 7; '
         'return torch.float16 if max(float16 errors) <= max(bfloat16 errors) else torch.bfloat16.'),
    ],
}
hint = hints(__name__, HINTS)
