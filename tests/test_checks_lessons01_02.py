"""Exercises 01–02: the checks pass right answers and name each typical wrong one.

The fixtures are in the one shape of `tests/grader_fixtures.py`: `WRONG[(lesson, task)][label] = (answer,
words the message must say)`, `RIGHT[(lesson, task)][label] = answer`.
"""

import decimal
import fractions
import math
import struct
import sys

import grader_fixtures
import numpy as np
import pytest
import torch

from ampcourse.checks import NotStarted, lesson01, lesson02


# --- 01 Task 1: decode_fp16 ---------------------------------------------------------------------------------------
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


def decode_struct(bits):  # the bytes, read as IEEE half by the struct module
    return struct.unpack(">e", int(bits.replace(" ", ""), 2).to_bytes(2, "big"))[0]


def decode_ldexp(bits):  # math.ldexp and copysign, subnormals as the exponent of the smallest normal
    sign, e, m = _split(bits)
    if e == 31:
        return math.copysign(math.inf, -sign or 1) if m == 0 else math.nan
    value = math.ldexp((m if e == 0 else m + 1024), max(e, 1) - 15 - 10)
    return math.copysign(value, -1.0 if sign else 1.0)


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


# --- 01 Task 2: format_limits -------------------------------------------------------------------------------------
def limits_right(e, m):
    bias = 2 ** (e - 1) - 1
    return (2 - 2.0**-m) * 2.0 ** (2**e - 2 - bias), 2.0 ** (1 - bias), 2.0 ** (1 - bias - m)


def limits_ldexp(e, m):  # integer significands: (2**(m+1) - 1) × 2**(emax - m)
    emin = 2 - 2 ** (e - 1)
    emax = 2 ** (e - 1) - 1
    return (math.ldexp(2 ** (m + 1) - 1, emax - m), math.ldexp(1, emin), math.ldexp(1, emin - m))


def limits_exact_int_and_fractions(e, m):  # review: ints (the largest is a whole number) and exact Fractions
    from fractions import Fraction

    bias = 2 ** (e - 1) - 1
    emax = 2**e - 2 - bias
    return (2 ** (m + 1) - 1) * 2 ** (emax - m), Fraction(1, 2 ** (bias - 1)), Fraction(1, 2 ** (bias - 1 + m))


# --- 01 Task 3: update_is_lost ------------------------------------------------------------------------------------
def lost_right(w, u, dtype):
    m = 10 if dtype == torch.float16 else 7
    spacing = 2.0 ** (math.floor(math.log2(w)) - m)
    if u != spacing / 2:
        return u < spacing / 2
    return int(w / spacing) % 2 == 0


def lost_fractions(w, u, dtype):  # exact rational rounding, ties to even, with frexp for the binade
    m = 10 if dtype == torch.float16 else 7
    spacing = fractions.Fraction(2) ** (math.frexp(w)[1] - 1 - m)
    steps = (fractions.Fraction(w) + fractions.Fraction(u)) / spacing
    return round(steps) * spacing == w  # round() of a Fraction rounds half to even


def _lost(m_of, spacing_of, ties="even"):
    def lost(w, u, dtype):
        m = m_of(dtype)
        spacing = spacing_of(w, m)
        if u != spacing / 2:
            return u < spacing / 2
        return {"even": int(w / spacing) % 2 == 0, "always": True, "never": False}[ties]
    return lost


M = {torch.float16: 10, torch.bfloat16: 7}
binade = lambda w, m: 2.0 ** (math.floor(math.log2(w)) - m)  # noqa: E731


# --- 02 Task 1: predict_cast --------------------------------------------------------------------------------------
def predict_right(x):
    m = abs(x)
    if m <= 2.0**-25:
        return "zero"
    if m >= 65520:
        return "inf"
    return "subnormal" if m < 2.0**-14 - 2.0**-25 else "normal"


def predict_numpy(x):  # a real cast, judged on its result (the task asks for reasoning, the check cannot see it)
    with np.errstate(over="ignore"):
        stored = abs(float(np.float16(x)))
    if stored == 0:
        return "zero"
    return "inf" if math.isinf(stored) else "subnormal" if stored < 2.0**-14 else "normal"


# --- 02 Task 2: largest_safe_scale --------------------------------------------------------------------------------
def scale_right(grads):
    return 2.0 ** math.floor(math.log2(65504 / grads.abs().max().item()))


def scale_by_halving(grads):  # start high and halve until it fits: no logarithms at all
    peak = float(grads.abs().max())
    s = 2.0**40
    while peak * s > torch.finfo(torch.float16).max:
        s /= 2
    return s


def scale_frexp(grads):  # frexp gives the exponent exactly, without log2's rounding
    mantissa, exponent = math.frexp(65504 / grads.abs().max().item())
    return math.ldexp(1.0, exponent - 1)


# --- 02 Task 3: flushed_fraction ----------------------------------------------------------------------------------
def flushed_right(grads, scale):
    nonzero = grads != 0
    return (nonzero & (grads.double().abs() * scale <= 2.0**-25)).sum().item() / nonzero.sum().item()


def flushed_by_cast(grads, scale):  # a real cast (allowed by the task), in float64 before rounding to float16
    nonzero = grads != 0
    lost = (grads.double() * scale).half() == 0
    return (lost & nonzero).float().sum().item() / nonzero.float().sum().item()


def flushed_float32_mean(grads, scale):  # review 0002, fixture A: the mean over the nonzero entries, in float32
    nz = grads[grads != 0]
    return ((nz * scale).half() == 0).float().mean().item()


def flushed_float32_division(grads, scale):  # review 0002, fixture B: float32 sums of masks, divided in float32
    nz = grads != 0
    return (((grads * scale).half() == 0) & nz).sum().float().div(nz.sum().float()).item()


def flushed_in_place(grads, scale):  # review rev25-r8 E4: scales the tensor it was given, as the task text reads
    grads *= scale
    nonzero = grads != 0
    return ((grads.half() == 0) & nonzero).sum().item() / nonzero.sum().item()


def _cast_then_scale(grads, scale):  # review 0002: cast first, then multiply (float16 arithmetic)
    nz = grads[grads != 0]
    return ((nz.half() * scale) == 0).float().mean().item()


def _cast_then_scale_in_float32(grads, scale):  # cast first, then multiply in float32: the scale changes nothing
    nz = grads[grads != 0]
    return ((nz.half().float() * scale) == 0).float().mean().item()


def _share(mask, grads):
    return (mask & (grads != 0)).sum().item() / (grads != 0).sum().item()


# --- 02 Task 4: better_dtype --------------------------------------------------------------------------------------
def _stored(v, mantissa_bits, min_exponent, largest):
    m, e = math.frexp(abs(v))
    spacing = 2.0 ** (max(e - 1, min_exponent) - mantissa_bits)
    r = round(abs(v) / spacing) * spacing  # round() ties to even
    return math.inf if r > largest else r


def better_by_hand(values):  # the solution's way: each format's rounding error from its spacing
    def worst(bits, emin, largest):
        return max(abs(_stored(v, bits, emin, largest) - abs(v)) / abs(v) for v in values)
    fp16, bf16 = worst(10, -14, 65504.0), worst(7, -126, (2 - 2.0**-7) * 2.0**127)
    return torch.float16 if fp16 <= bf16 else torch.bfloat16


def better_by_cast(values):  # real casts, as the check does
    x = torch.tensor(values, dtype=torch.float64)
    err = {d: ((x.to(d).double() - x).abs() / x.abs()).max().item() for d in (torch.float16, torch.bfloat16)}
    return torch.float16 if err[torch.float16] <= err[torch.bfloat16] else torch.bfloat16


def _range_rule(low, high, high_inclusive=True):
    def better(values):
        inside = all(low <= abs(v) and (abs(v) <= high if high_inclusive else abs(v) < high) for v in values)
        return torch.float16 if inside else torch.bfloat16
    return better


def _better_by(error):
    def better(values):
        x = torch.tensor(values, dtype=torch.float64)
        err = {d: error(x, x.to(d).double()) for d in (torch.float16, torch.bfloat16)}
        return torch.float16 if err[torch.float16] <= err[torch.bfloat16] else torch.bfloat16
    return better


def _better_by_bound(values):  # review 0002: worst-case bounds, half a spacing over |v|, instead of actual errors
    def bound(v, dtype):
        a = abs(v)
        if dtype == torch.float16:
            if a >= 65520:
                return math.inf
            e, m = max(math.floor(math.log2(a)), -14), 10
        else:
            e, m = math.floor(math.log2(a)), 7
        return 2.0 ** (e - m) / 2 / a
    fp16 = max(bound(v, torch.float16) for v in values)
    bf16 = max(bound(v, torch.bfloat16) for v in values)
    return torch.float16 if fp16 <= bf16 else torch.bfloat16


def _better_ties_to_bf16(values):
    x = torch.tensor(values, dtype=torch.float64)
    err = {d: ((x.to(d).double() - x).abs() / x.abs()).max().item() for d in (torch.float16, torch.bfloat16)}
    return torch.float16 if err[torch.float16] < err[torch.bfloat16] else torch.bfloat16


class _ReadsW:
    """Review rev25-r7 E2: a Fraction's numerator that, converted by float(), reads the check's `w`."""

    def __init__(self, mine):
        self.mine = mine

    def __int__(self):
        w = sys._getframe(2).f_locals.get("w")
        return int(fractions.Fraction(w) * 2**1100) if isinstance(w, float) else int(self.mine * 2**1100)


def _fraction_holding(mine):
    f = fractions.Fraction.__new__(fractions.Fraction)  # an exact Fraction with the answer's object inside
    f._numerator, f._denominator = _ReadsW(mine), 2**1100
    return f


def _limits_in_fractions_holding(e, m):
    bias = 2 ** (e - 1) - 1
    return _fraction_holding(2.0**bias), _fraction_holding(2.0**-bias), _fraction_holding(2.0 ** (-bias - m))


def _limits_decimal(e, m):  # review rev25-r7 M1: a Decimal is a number, exact from the float
    return tuple(decimal.Decimal(v) for v in limits_right(e, m))


def _fill_the_checks_tensors(value):
    """Review rev25-r7 E1 in lesson 02: every tensor in the frames of the course's checks (the cases the check keeps,
    the ones it handed over) filled in place with ``value``."""
    f = sys._getframe(2)
    while f is not None:
        if str(f.f_globals.get("__name__", "")).startswith("ampcourse.checks"):
            for local in list(f.f_locals.values()):
                for item in (local if isinstance(local, (list, tuple)) else [local]):
                    for part in (item if isinstance(item, tuple) else (item,)):
                        if isinstance(part, torch.Tensor):
                            part.fill_(value)
        f = f.f_back


def _scale_for_peak_one(grads):
    _fill_the_checks_tensors(1.0)
    return scale_right(grads)  # 2**15 once every tensor is 1.0


def _no_flush_after_filling(grads, scale):
    _fill_the_checks_tensors(1.0)
    return flushed_right(grads, scale)  # 0.0 once every tensor is 1.0


WRONG = {
    ("01", "decode_fp16"): {
        "bias 16": (_decoder(bias=16), "off-by-one bias: you used 16"),
        "bias 14": (_decoder(bias=14), "off-by-one bias: you used 14"),
        "no implicit 1": (_decoder(implicit=False), "forgot the implicit leading 1"),
        "sign ignored": (_decoder(signed=False), "ignored the sign bit"),
        "mantissa / 1000": (_decoder(denominator=1000), "divide it by 2**10 = 1024"),
        "subnormals as normals": (_decoder(subnormals="as normals"), "treated a subnormal as a normal"),
        "subnormal exponent -15": (_decoder(subnormals="exponent -15"), "not 0 - 15"),
        "no inf/nan": (_decoder(specials=False), "11111 is special"),
        "returns a string": (lambda bits: str(decode_right(bits)), "return a Python float"),
        "crashes on spaces": (lambda bits: int(bits, 2), "raised ValueError"),
        "numpy float16 returned": (lambda bits: np.float16(decode_right(bits)), "return a Python float"),
    },
    ("01", "format_limits"): {
        "all-ones exponent used": (lambda e, m: ((2 - 2.0**-m) * 2.0 ** (2**e - 1 - (2 ** (e - 1) - 1)),)
                                   + limits_right(e, m)[1:], "reserved for inf and NaN"),
        "mantissa forgotten": (lambda e, m: (2.0 ** (2**e - 2 - (2 ** (e - 1) - 1)),) + limits_right(e, m)[1:],
                               "every mantissa bit set"),
        "smallest normal at exponent 0": (lambda e, m: (limits_right(e, m)[0], 2.0 ** -(2 ** (e - 1) - 1),
                                                        limits_right(e, m)[2]), "biased exponent 1"),
        "no subnormals": (lambda e, m: limits_right(e, m)[:2] + (limits_right(e, m)[1],), "subnormals go"),
        "subnormal exponent -bias": (lambda e, m: limits_right(e, m)[:2] + (2.0 ** (-(2 ** (e - 1) - 1) - m),),
                                     "1 - bias (not -bias)"),
        "a list of two": (lambda e, m: limits_right(e, m)[:2], "a tuple of three numbers"),
        "bias 2**(e-1)": (lambda e, m: ((2 - 2.0**-m) * 2.0 ** (2**e - 2 - 2 ** (e - 1)),) + limits_right(e, m)[1:],
                          "off-by-one bias"),
        "a string field": (lambda e, m: (str(limits_right(e, m)[0]),) + limits_right(e, m)[1:],
                           "should be a number"),
        "Fractions holding an object whose __int__ reads `w` (review rev25-r7 E2)": (
            _limits_in_fractions_holding, "a Fraction holding an object of type `_ReadsW` as its numerator"),
    },
    ("01", "update_is_lost"): {
        "machine epsilon for every weight": (_lost(M.get, lambda w, m: 2.0**-m), "grows with w"),
        "a tie is always lost": (_lost(M.get, binade, ties="always"), "ties round to the neighbour whose last"),
        "a tie is never lost": (_lost(M.get, binade, ties="never"), "a tie"),
        "returns a number": (lambda w, u, d: 0, "return True or False"),
        "spacing w × eps": (_lost(M.get, lambda w, m: w * 2.0**-m), "constant inside a binade"),
        "mantissa bits swapped": (_lost(lambda d: 17 - M[d], binade), "mantissa bits are swapped"),
        "implicit bit counted": (_lost(lambda d: M[d] + 1, binade), "implicit leading 1 is not a spacing bit"),
        "exponent rounded up": (_lost(M.get, lambda w, m: 2.0 ** (math.ceil(math.log2(w)) - m)),
                                "round the exponent *down*"),
        "spacing at 1.0 and ties never lost (review 0002)": (
            lambda w, u, dtype: u < 2.0 ** -(10 if dtype == torch.float16 else 7) / 2,
            "not the spacing at 1.0. Also, u = spacing / 2 is a tie"),
        "w × eps and ties never lost": (lambda w, u, dtype: u < w * 2.0 ** -(10 if dtype == torch.float16 else 7) / 2,
                                        "constant inside a binade: 2**(floor(log2 w) - 10) = 0.000976562 for every "
                                        "w in [1, 2). Also, u = spacing / 2 is a tie"),
    },
    ("02", "predict_cast"): {
        "subnormals flushed": (lambda x: "zero" if abs(x) < 2.0**-14 else predict_right(x), "not flushed to zero"),
        "zero below 2**-24": (lambda x: "zero" if abs(x) < 2.0**-24 else predict_right(x),
                              "rounds up to 2**-24"),
        "zero strictly below 2**-25": (lambda x: "subnormal" if abs(x) == 2.0**-25 else predict_right(x),
                                       "ties go to the even neighbour"),
        "inf above 65504": (lambda x: "inf" if abs(x) > 65504 else predict_right(x), "round *down* to 65504"),
        "no abs": (lambda x: predict_right(x) if x > 0 else "zero", "use the magnitude"),
        "smallest normal as subnormal": (lambda x: "subnormal" if abs(x) == 2.0**-14 else predict_right(x),
                                         "smallest *normal*"),
        "subnormal up to 2**-14 (the review's finding 31)": (
            lambda x: "subnormal" if 2.0**-25 < abs(x) < 2.0**-14 else predict_right(x), "rounds *up* to it"),
        "band boundary too low": (lambda x: "normal" if 6.0e-5 < abs(x) < 2.0**-14 else predict_right(x),
                                  "rounds to a subnormal"),
        "bad label": (lambda x: "underflow" if abs(x) < 1e-7 else predict_right(x), "return one of"),
        "inf strictly above 65520": (lambda x: "normal" if abs(x) == 65520 else predict_right(x),
                                     "from 65520 up the cast rounds to inf"),
    },
    ("02", "largest_safe_scale"): {
        "one power too big": (lambda g: 2 * scale_right(g), "overflows"),
        "not a power of two": (lambda g: 65504 / g.abs().max().item(), "not a power of two"),
        "exponent returned": (lambda g: math.log2(scale_right(g)), "the exponent"),
        "max instead of abs max": (lambda g: 2.0 ** math.floor(math.log2(65504 / g.max().item()))
                                   if g.max() > 0 else 1.0, "largest gradient, not the largest magnitude"),
        "too timid": (lambda g: scale_right(g) / 4, "Do not give away range"),
        "zero": (lambda g: 0.0, "a positive number"),
        "int() truncation (review B20)": (lambda g: 2.0 ** int(math.log2(65504 / g.abs().max().item())),
                                          "int() truncates toward zero"),
        "clamped at 1": (lambda g: max(1.0, scale_right(g)), "do not clamp it at 1"),
        "round() instead of floor": (lambda g: 2.0 ** round(math.log2(65504 / g.abs().max().item())),
                                     "round() rounds"),
        "65536 as the limit": (lambda g: 2.0 ** math.floor(math.log2(65536 / g.abs().max().item())),
                               "you used 65536"),
        "strict < 65504": (lambda g: 2.0 ** (math.ceil(math.log2(65504 / g.abs().max().item())) - 1),
                           "(≤, not <)"),
        "fills the check's tensors with 1.0 through its frames (review rev25-r7 E1)": (
            _scale_for_peak_one, "you returned 32768; the largest safe power of two is"),
    },
    ("02", "flushed_fraction"): {
        "ignores the scale": (lambda g, s: flushed_right(g, 1.0), "does not change with the scale: you ignored it"),
        "cast first, then scaled in float16 (review 0002)": (_cast_then_scale,
                                                             "you cast to float16 before multiplying by the scale"),
        "cast first, then scaled in float32": (_cast_then_scale_in_float32, "or applied it after the cast"),
        "threshold 2**-24": (lambda g, s: _share(g.double().abs() * s < 2.0**-24, g), "round *up* to the smallest"),
        "counts the zeros": (lambda g, s: ((g.double() * s).to(torch.float16) == 0).float().mean().item(),
                             "count only the gradients that were not zero"),
        "a percentage": (lambda g, s: 100 * flushed_right(g, s), "not a percentage"),
        "tie not flushed (< 2**-25)": (lambda g, s: _share(g.double().abs() * s < 2.0**-25, g), "Use <= 2**-25"),
        "subnormals counted as lost": (lambda g, s: _share(g.double().abs() * s < 2.0**-14, g),
                                       "counted the subnormals"),
        "signed comparison": (lambda g, s: _share(g.double() * s <= 2.0**-25, g), "compared the signed value"),
        "a count": (lambda g, s: float((g != 0).logical_and(g.double().abs() * s <= 2.0**-25).sum()),
                    "you returned a count"),
        "fills the check's tensors with 1.0 through its frames (review rev25-r7 E1)": (
            _no_flush_after_filling, "with no scaling you returned 0.0000"),
    },
    ("02", "better_dtype"): {
        "always bfloat16 (range is all that matters)": (lambda v: torch.bfloat16, "8 times finer"),
        "always float16 (more mantissa bits)": (lambda v: torch.float16, "float16 rounds to inf"),
        "overflow only, subnormals forgotten": (_range_rule(0.0, 65504.0), "coarser than bfloat16's"),
        "the old range rule [2**-14, 65504] (review B2)": (_range_rule(2.0**-14, 65504.0), "at 2**-17, not at 2**-14"),
        "range up to 65504, crossover at 2**-17": (_range_rule(2.0**-17, 65504.0), "only overflows from 65520"),
        "range rule [2**-17, 65520)": (_range_rule(2.0**-17, 65520.0, high_inclusive=False),
                                       "2**-20 is stored exactly in float16"),
        "worst-case bounds, half a spacing (review 0002)": (
            _better_by_bound, "you compared worst-case bounds (half a spacing) or float16's range — both say "
                              "bfloat16 here — but 2**-20 is stored exactly in float16"),
        "absolute error instead of relative": (_better_by(lambda x, s: (s - x).abs().max().item()),
                                               "compute each format's rounding error"),
        "mean error instead of the largest": (_better_by(lambda x, s: ((s - x).abs() / x.abs()).mean().item()),
                                              "not a mean"),
        "ties go to bfloat16": (_better_ties_to_bf16, "on a tie the task asks for float16"),
        "a string": (lambda v: "float16", "return torch.float16 or torch.bfloat16"),
    },
}

RIGHT = {
    ("01", "decode_fp16"): {"the formula": decode_right, "struct's half format": decode_struct,
                            "ldexp and copysign": decode_ldexp},
    ("01", "format_limits"): {"decimal.Decimal (review rev25-r7 M1)": _limits_decimal,
                              "the formulas": limits_right, "integer significands with ldexp": limits_ldexp,
                              "an exact int largest, Fractions (review)": limits_exact_int_and_fractions},
    ("01", "update_is_lost"): {"spacing and ties by hand": lost_right, "exact fractions": lost_fractions,
                               "a numpy bool (review rev25-r8 N3)": lambda w, u, d: np.bool_(lost_right(w, u, d))},
    ("02", "predict_cast"): {"the thresholds": predict_right, "numpy's float16 cast": predict_numpy},
    ("02", "largest_safe_scale"): {"floor of log2": scale_right, "halving from 2**40": scale_by_halving,
                                   "frexp": scale_frexp},
    ("02", "flushed_fraction"): {"the threshold 2**-25": flushed_right, "a float64 -> float16 cast": flushed_by_cast,
                                 "mean in float32 (review 0002, A)": flushed_float32_mean,
                                 "float32 division of mask sums (review 0002, B)": flushed_float32_division,
                                 "scaled in place, `grads *= scale` (review rev25-r8 E4)": flushed_in_place},
    ("02", "better_dtype"): {"rounding by hand from the spacing": better_by_hand, "real casts": better_by_cast},
}

test_wrong_answer_is_named, test_right_answer_passes = grader_fixtures.tests(WRONG, RIGHT)


@pytest.mark.parametrize("check", [lesson01.decode_fp16, lesson01.format_limits, lesson01.update_is_lost,
                                   lesson02.predict_cast, lesson02.largest_safe_scale, lesson02.flushed_fraction,
                                   lesson02.better_dtype])
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


def test_safe_scale_goes_below_one_and_keeps_the_exact_edge():
    assert lesson02.safe_scale(torch.tensor([1.0e5])) == 0.5
    assert lesson02.safe_scale(torch.tensor([65504.0])) == 1.0
    assert lesson02.safe_scale(torch.tensor([65504.0 / 1024])) == 1024.0


def test_better_dtype_cases_cover_both_edges_of_float16s_range():
    """Review B2: cases in [2**-17, 2**-14) and (65504, 65520) where float16 wins, and the old range rule
    fails on them."""
    mags = [abs(v) for values, _ in lesson02.DTYPE_CASES for v in values]
    assert any(2.0**-17 <= m < 2.0**-14 for m in mags) and any(65504 < m < 65520 for m in mags)
    for values, _ in lesson02.DTYPE_CASES:
        e = lesson02._error_pair(values)
        assert better_by_hand(values) == (torch.float16 if e[torch.float16] <= e[torch.bfloat16] else torch.bfloat16)


def test_better_dtype_hint_tier_3_describes_the_rounding_the_check_uses():
    tier3 = lesson02.HINTS["better_dtype"][2]
    assert "max(e - 1, -14) - 10" in tier3 and "<=" in tier3 and "2**-14, 65504" not in tier3


def _single_rounding(v, mantissa_bits, min_exponent, largest):
    """``v`` rounded once, exactly (Fractions, ties to even), to a format with that many mantissa bits."""
    exact = fractions.Fraction(v)
    spacing = fractions.Fraction(2) ** (max(math.frexp(abs(v))[1] - 1, min_exponent) - mantissa_bits)
    stored = round(exact / spacing) * spacing
    return math.copysign(math.inf, v) if abs(stored) > largest else float(stored)


def test_better_dtype_reference_casts_round_once_on_every_case():
    """Review 0002 #6: torch casts float64 to float16/bfloat16 through float32 (two roundings), which moves a value
    next to a midpoint; the check's cases stay away from them, so its casts agree with one exact rounding."""
    assert torch.tensor(1 + 2.0**-11 + 2.0**-40, dtype=torch.float64).half().item() == 1.0  # the double rounding
    assert _single_rounding(1 + 2.0**-11 + 2.0**-40, 10, -14, 65504) == 1 + 2.0**-10
    bf16_max = float(torch.finfo(torch.bfloat16).max)
    for values, _ in lesson02.DTYPE_CASES:
        x = torch.tensor(values, dtype=torch.float64)
        assert x.half().double().tolist() == [_single_rounding(v, 10, -14, 65504.0) for v in values]
        assert x.bfloat16().double().tolist() == [_single_rounding(v, 7, -126, bf16_max) for v in values]


def test_better_dtype_task_text_and_hint_ask_for_the_actual_error_not_a_bound():
    """Review 0002 #2: the task and tier 2 no longer invite the worst-case bound of half a spacing."""
    assert "at most half" not in lesson02.HINTS["better_dtype"][1]
    assert "0 for a value the format holds exactly" in lesson02.HINTS["better_dtype"][1]


def test_flushed_fraction_has_a_scaled_case_where_casting_first_differs():
    """Review 0002 #1: at scale 1 casting before scaling is right; the cases include scales above and below 1,
    where it is not, and the tolerance is far below one gradient's share."""
    cases = lesson02._flush_cases()
    assert {s for _, s, _ in cases} >= {1.0, 2.0**16, 2.0**-4}
    for grads, scale, _ in cases:
        one_gradient = 1 / (grads != 0).sum().item()
        assert 1e-6 < one_gradient / 100
        if scale != 1.0:
            assert lesson02._cast_then_scale(grads, scale) != lesson02.flushed(grads, scale)
    below_one = next((g, s) for g, s, _ in cases if s < 1)
    assert lesson02._cast_then_scale(*below_one) != lesson02.flushed(below_one[0], 1.0)  # not "ignored the scale"


def test_update_is_lost_constants_are_what_torch_does():
    """The check compares with written-out answers (an answer cell could patch Tensor.to); torch agrees."""
    assert len(lesson01.UPDATE_LOST) == len(lesson01.UPDATE_CASES)
    assert [lesson01._lost(w, u, d) for w, u, d, _ in lesson01.UPDATE_CASES] == list(lesson01.UPDATE_LOST)


def test_torch_rounds_a_double_to_16_bits_through_float32_which_no_update_case_meets():
    """Review rev25-r9 N2: ``_lost``'s docstring said "exact, then rounded"; torch takes a double to float16/bfloat16
    through float32 (two roundings: 1 + 2**-11 + 2**-40 is above float16's tie at 1, yet becomes 1.0), and every
    update case still gets what the exact sum rounded once gives."""
    import numpy as np

    above_tie = 1 + 2.0**-11 + 2.0**-40
    assert float(np.float16(above_tie)) == 1 + 2.0**-10  # numpy rounds once
    assert torch.tensor(above_tie, dtype=torch.float64).to(torch.float16).item() == 1.0
    assert torch.tensor(above_tie, dtype=torch.float16).item() == 1.0
    assert torch.tensor(1 + 2.0**-8 + 2.0**-40, dtype=torch.float64).to(torch.bfloat16).item() == 1.0
    assert [lost_fractions(w, u, d) for w, u, d, _ in lesson01.UPDATE_CASES] == list(lesson01.UPDATE_LOST)
    assert "through float32" in lesson01._lost.__doc__


def test_format_limits_int_largest_is_an_int_with_every_layout():
    """The int fixture really returns an int largest (so the check is shown to accept one)."""
    assert all(type(limits_exact_int_and_fractions(e, m)[0]) is int for e, m, _ in lesson01.LAYOUTS)


def test_predict_cast_constants_are_what_torch_does():
    assert [lesson02.fp16_category(x) for x, _ in lesson02.CAST_CASES] == list(lesson02.CAST_WANT)
