"""Exercises 01–02: the checks pass right answers and name each typical wrong one (the fixtures)."""

import math

import pytest
import torch

from ampcourse.checks import CheckFailed, NotStarted, lesson01, lesson02


def _split(bits):
    b = bits.replace(" ", "")
    return int(b[0]), int(b[1:6], 2), int(b[6:], 2)


def decode_right(bits):
    sign, e, m = _split(bits)
    s = -1.0 if sign else 1.0
    if e == 31:
        return s * math.inf if m == 0 else math.nan
    if e == 0:
        return s * (m / 1024) * 2.0**-14
    return s * (1 + m / 1024) * 2.0 ** (e - 15)


def _decoder(bias=15, implicit=True, signed=True, denominator=1024, subnormals="right", specials=True):
    def decode(bits):
        sign, e, m = _split(bits)
        s = -1.0 if (sign and signed) else 1.0
        if e == 31 and specials:
            return s * math.inf if m == 0 else math.nan
        if e == 0 and subnormals == "right":
            return s * (m / 1024) * 2.0**-14
        if e == 0 and subnormals == "exponent -15":
            return s * (m / 1024) * 2.0**-15
        lead = 1 if implicit else 0
        return s * (lead + m / denominator) * 2.0 ** (e - bias)
    return decode


WRONG_DECODERS = {
    "bias 16": (_decoder(bias=16), "off-by-one bias: you used 16"),
    "bias 14": (_decoder(bias=14), "off-by-one bias: you used 14"),
    "no implicit 1": (_decoder(implicit=False), "forgot the implicit leading 1"),
    "sign ignored": (_decoder(signed=False), "ignored the sign bit"),
    "mantissa / 1000": (_decoder(denominator=1000), "divide it by 2\\*\\*10 = 1024"),
    "subnormals as normals": (_decoder(subnormals="as normals"), "treated a subnormal as a normal"),
    "subnormal exponent -15": (_decoder(subnormals="exponent -15"), "not 0 - 15"),
    "no inf/nan": (_decoder(specials=False), "11111 is special"),
    "returns a string": (lambda bits: str(decode_right(bits)), "return a Python float"),
    "crashes on spaces": (lambda bits: int(bits, 2), "raised ValueError"),
}


def limits_right(e, m):
    bias = 2 ** (e - 1) - 1
    return (2 - 2.0**-m) * 2.0 ** (2**e - 2 - bias), 2.0 ** (1 - bias), 2.0 ** (1 - bias - m)


WRONG_LIMITS = {
    "all-ones exponent used": (lambda e, m: ((2 - 2.0**-m) * 2.0 ** (2**e - 1 - (2 ** (e - 1) - 1)),)
                               + limits_right(e, m)[1:], "reserved for inf and NaN"),
    "mantissa forgotten": (lambda e, m: (2.0 ** (2**e - 2 - (2 ** (e - 1) - 1)),) + limits_right(e, m)[1:],
                           "every mantissa bit set"),
    "smallest normal at exponent 0": (lambda e, m: (limits_right(e, m)[0], 2.0 ** -(2 ** (e - 1) - 1),
                                                    limits_right(e, m)[2]), "biased exponent 1"),
    "no subnormals": (lambda e, m: limits_right(e, m)[:2] + (limits_right(e, m)[1],),
                      "subnormals go\\s+further down"),
    "subnormal exponent -bias": (lambda e, m: limits_right(e, m)[:2] + (2.0 ** (-(2 ** (e - 1) - 1) - m),),
                                 "1 - bias \\(not -bias\\)"),
    "a list of two": (lambda e, m: limits_right(e, m)[:2], "a tuple of three numbers"),
}


def predict_right(x):
    m = abs(x)
    if m <= 2.0**-25:
        return "zero"
    if m >= 65520:
        return "inf"
    return "subnormal" if m < 2.0**-14 - 2.0**-25 else "normal"


WRONG_PREDICTIONS = {
    "subnormals flushed": (lambda x: "zero" if abs(x) < 2.0**-14 else predict_right(x), "not flushed to zero"),
    "zero below 2**-24": (lambda x: "zero" if abs(x) < 2.0**-24 else predict_right(x),
                          "rounds up to 2\\*\\*-24"),
    "zero strictly below 2**-25": (lambda x: "subnormal" if abs(x) == 2.0**-25 else predict_right(x),
                                   "ties go to the even neighbour"),
    "inf above 65504": (lambda x: "inf" if abs(x) > 65504 else predict_right(x), "round \\*down\\* to 65504"),
    "no abs": (lambda x: predict_right(x) if x > 0 else "zero", "use the magnitude"),
    "smallest normal as subnormal": (lambda x: "subnormal" if abs(x) == 2.0**-14 else predict_right(x),
                                     "smallest \\*normal\\*"),
    "subnormal up to 2**-14 (the review's finding 31)": (
        lambda x: "subnormal" if 2.0**-25 < abs(x) < 2.0**-14 else predict_right(x), "rounds \\*up\\* to it"),
    "band boundary too low": (lambda x: "normal" if 6.0e-5 < abs(x) < 2.0**-14 else predict_right(x),
                              "rounds to a subnormal"),
    "bad label": (lambda x: "underflow" if abs(x) < 1e-7 else predict_right(x), "return one of"),
}


def scale_right(grads):
    return 2.0 ** math.floor(math.log2(65504 / grads.abs().max().item()))


WRONG_SCALES = {
    "one power too big": (lambda g: 2 * scale_right(g), "overflows"),
    "not a power of two": (lambda g: 65504 / g.abs().max().item(), "not a power of two"),
    "exponent returned": (lambda g: math.log2(scale_right(g)), "the exponent"),
    "max instead of abs max": (lambda g: 2.0 ** math.floor(math.log2(65504 / g.max().item())),
                               "largest gradient, not the largest magnitude"),
    "too timid": (lambda g: scale_right(g) / 4, "Do not give away range"),
    "zero": (lambda g: 0.0, "a positive number"),
}


def test_right_answers_pass(capsys):
    lesson01.decode_fp16(decode_right)
    lesson01.format_limits(limits_right)
    lesson02.predict_cast(predict_right)
    lesson02.largest_safe_scale(scale_right)
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 4 and all(line.startswith("✓ Task") for line in lines)


@pytest.mark.parametrize(
    ("check", "fn", "words"),
    [pytest.param(lesson01.decode_fp16, fn, words, id=f"decode_fp16: {name}")
     for name, (fn, words) in WRONG_DECODERS.items()]
    + [pytest.param(lesson01.format_limits, fn, words, id=f"format_limits: {name}")
       for name, (fn, words) in WRONG_LIMITS.items()]
    + [pytest.param(lesson02.predict_cast, fn, words, id=f"predict_cast: {name}")
       for name, (fn, words) in WRONG_PREDICTIONS.items()]
    + [pytest.param(lesson02.largest_safe_scale, fn, words, id=f"largest_safe_scale: {name}")
       for name, (fn, words) in WRONG_SCALES.items()],
)
def test_typical_mistakes_are_named(check, fn, words):
    with pytest.raises(CheckFailed, match=words):
        check(fn)


@pytest.mark.parametrize("check", [lesson01.decode_fp16, lesson01.format_limits, lesson02.predict_cast,
                                   lesson02.largest_safe_scale])
def test_stubs_are_not_started(check):
    def stub(*args):
        raise NotImplementedError("hint")

    with pytest.raises(NotStarted):
        check(stub)


def test_reference_category_agrees_with_torch_on_the_boundaries():
    for x, _ in lesson02.CAST_CASES:
        assert lesson02.fp16_category(x) == predict_right(x)
    g = torch.tensor([1.0, -3.0])
    assert lesson02.safe_scale(g) == 2.0**14  # 3 * 2**14 = 49152 <= 65504 < 3 * 2**15


# --- Task 3 of exercise 01: update_is_lost --------------------------------------------------------------------
def lost_right(w, u, dtype):
    m = 10 if dtype == torch.float16 else 7
    spacing = 2.0 ** (math.floor(math.log2(w)) - m)
    if u != spacing / 2:
        return u < spacing / 2
    return int(w / spacing) % 2 == 0


def lost_eps_rule(w, u, dtype):  # the spacing at 1.0 for every w
    return u < (2.0**-10 if dtype == torch.float16 else 2.0**-7) / 2


def lost_ties_always(w, u, dtype):
    m = 10 if dtype == torch.float16 else 7
    return u <= 2.0 ** (math.floor(math.log2(w)) - m) / 2


def lost_ties_never(w, u, dtype):
    m = 10 if dtype == torch.float16 else 7
    return u < 2.0 ** (math.floor(math.log2(w)) - m) / 2


LOST_MISTAKES = {
    "machine epsilon for every weight": (lost_eps_rule, "grows with w"),
    "a tie is always lost": (lost_ties_always, "a tie, and ties round to the\\s+neighbour whose last mantissa bit"),
    "a tie is never lost": (lost_ties_never, "a tie"),
    "returns a number": (lambda w, u, d: 0, "return True or False"),
}


# --- Task 3 of exercise 02: flushed_fraction ------------------------------------------------------------------
def flushed_right(grads, scale):
    nonzero = grads != 0
    return (nonzero & (grads.double().abs() * scale <= 2.0**-25)).sum().item() / nonzero.sum().item()


FLUSH_MISTAKES = {
    "ignores the scale": (lambda g, s: flushed_right(g, 1.0), "you ignored the scale"),
    "threshold 2**-24": (lambda g, s: ((g != 0) & (g.double().abs() * s < 2.0**-24)).sum().item()
                         / (g != 0).sum().item(), "round \\*up\\* to the smallest\\s+subnormal"),
    "counts the zeros": (lambda g, s: ((g.double() * s).to(torch.float16) == 0).float().mean().item(),
                         "count only the gradients that were not zero"),
    "a percentage": (lambda g, s: 100 * flushed_right(g, s), "not a percentage"),
}


def test_new_tasks_right_answers_pass(capsys):
    lesson01.update_is_lost(lost_right)
    lesson02.flushed_fraction(flushed_right)
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 2 and all(line.startswith("✓ Task 3") for line in lines)


@pytest.mark.parametrize(("fn", "words"), LOST_MISTAKES.values(), ids=LOST_MISTAKES)
def test_update_is_lost_mistakes_are_named(fn, words):
    with pytest.raises(CheckFailed, match=words):
        lesson01.update_is_lost(fn)


@pytest.mark.parametrize(("fn", "words"), FLUSH_MISTAKES.values(), ids=FLUSH_MISTAKES)
def test_flushed_fraction_mistakes_are_named(fn, words):
    with pytest.raises(CheckFailed, match=words):
        lesson02.flushed_fraction(fn)


# --- Task 4 of exercise 02: better_dtype ------------------------------------------------------------------------
def better_right(values):
    return torch.float16 if all(2.0**-14 <= abs(v) <= 65504 for v in values) else torch.bfloat16


BETTER_MISTAKES = {
    "always bfloat16 (range is all that matters)": (lambda v: torch.bfloat16, "8 times finer"),
    "always float16 (more mantissa bits)": (lambda v: torch.float16, "Outside float16's normal range"),
    "overflow only, subnormals forgotten": (lambda v: torch.float16 if all(abs(x) <= 65504 for x in v)
                                            else torch.bfloat16, "loses its precision in subnormals"),
    "a string": (lambda v: "float16", "return torch.float16 or torch.bfloat16"),
}


def test_better_dtype_right_answer_passes(capsys):
    lesson02.better_dtype(better_right)
    assert capsys.readouterr().out.startswith("✓ Task 4")


@pytest.mark.parametrize(("fn", "words"), BETTER_MISTAKES.values(), ids=BETTER_MISTAKES)
def test_better_dtype_mistakes_are_named(fn, words):
    with pytest.raises(CheckFailed, match=words):
        lesson02.better_dtype(fn)
