"""Checks for exercise 01 (float formats): decode bits by hand; derive a format's limits.

Each check runs the learner's function on cases chosen so that every typical mistake produces a
recognisable wrong value; the wrong value is matched against the mistake's own formula, and the
failure message names that mistake.
"""

from __future__ import annotations

import math

import torch

from ..floats import derive_format, from_bits
from . import call, exact_bool, fail, hints, passed, real_number, require_callable

# (bits, what the case is) — normals first: they show bias and implicit-1 mistakes most plainly.
FP16_CASES = [
    ("0 01111 0000000000", "1.0"),
    ("0 10000 1000000000", "3.0"),
    ("1 10001 0100000000", "-5.0"),
    ("0 01011 1001100110", "0.1 rounded to fp16"),
    ("0 11110 1111111111", "the largest fp16 value"),
    ("0 00001 0000000000", "the smallest normal"),
    ("0 00000 1000000000", "a subnormal"),
    ("0 00000 1111111111", "the largest subnormal"),
    ("1 00000 0000000101", "a negative subnormal"),
    ("0 00000 0000000001", "the smallest subnormal"),
    ("0 00000 0000000000", "zero"),
    ("1 00000 0000000000", "negative zero"),
    ("0 11111 0000000000", "+inf"),
    ("1 11111 0000000000", "-inf"),
    ("0 11111 1000000000", "a NaN"),
]


def _fields(bits: str) -> tuple[int, int, int]:
    compact = bits.replace(" ", "")
    return int(compact[0]), int(compact[1:6], 2), int(compact[6:], 2)


def _same(a: float, b: float) -> bool:
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    return a == b and math.copysign(1, a) == math.copysign(1, b)


def _fp16_mistakes(bits: str) -> list[tuple[float, str]]:
    """What each typical wrong decoding gives for ``bits``, with the message naming it."""
    sign, exponent, mantissa = _fields(bits)
    s = -1.0 if sign else 1.0
    fraction = mantissa / 1024
    out = []
    if 0 < exponent < 31:
        for bias in (14, 16):
            out.append((s * (1 + fraction) * 2.0 ** (exponent - bias),
                        f"off-by-one bias: you used {bias}. FP16's bias is 15 = 2**(5-1) - 1, "
                        "so the value is (1 + mantissa/1024) × 2**(exponent - 15)."))
        out.append((s * fraction * 2.0 ** (exponent - 15),
                    "you forgot the implicit leading 1: a normal number is (1 + mantissa/1024) × "
                    "2**(exponent - 15), not (mantissa/1024) × 2**(exponent - 15)."))
        out.append(((1 + fraction) * 2.0 ** (exponent - 15),
                    "you ignored the sign bit: a leading 1 makes the value negative."))
        out.append((s * (1 + mantissa / 1000) * 2.0 ** (exponent - 15),
                    "the mantissa is a binary fraction: divide it by 2**10 = 1024, not by 1000."))
    if exponent == 0:
        out.append((s * (1 + fraction) * 2.0 ** -15,
                    "you treated a subnormal as a normal number: exponent 00000 means no implicit 1, "
                    "so the value is (mantissa/1024) × 2**-14."))
        out.append((s * (1 + fraction) * 2.0 ** -14,
                    "you treated a subnormal as a normal number: exponent 00000 means no implicit 1, "
                    "so the value is (mantissa/1024) × 2**-14."))
        out.append((s * fraction * 2.0 ** -15,
                    "subnormals use the exponent of the smallest normal, 1 - 15 = -14, not 0 - 15: "
                    "the value is (mantissa/1024) × 2**-14."))
    if exponent == 31:
        out.append((s * (1 + fraction) * 2.0 ** 16,
                    "the all-ones exponent 11111 is special: it means inf when the mantissa is 0, "
                    "NaN otherwise (return float('inf') or float('nan'))."))
    return out


def decode_fp16(fn) -> None:
    """Task 1: ``decode_fp16(bits)`` turns a 16-bit string like '0 01111 0000000000' into its value."""
    task = "Task 1 (decode_fp16)"
    require_callable(task, fn, "decode_fp16")
    for bits, what in FP16_CASES:
        want = from_bits(bits, "fp16")
        got = call(task, fn, "decode_fp16", bits)
        if isinstance(got, bool) or not isinstance(got, (int, float)):
            raise fail(task, f"for {bits!r} ({what}) you returned {got!r}; return a Python float.")
        got = float(got)
        if _same(got, want):
            continue
        for wrong, message in _fp16_mistakes(bits):
            if _same(got, wrong):
                raise fail(task, f"for {bits!r} ({what}) you returned {got!r}, expected {want!r}: {message}")
        if want == 0 and got == 0:
            raise fail(task, f"for {bits!r} ({what}) you returned {got!r}, expected {want!r}: the sign bit "
                             "applies to zero too (use math.copysign or -0.0).")
        raise fail(task, f"for {bits!r} ({what}) you returned {got!r}, expected {want!r}. Split the string "
                         "into 1 sign, 5 exponent and 10 mantissa bits and apply the rule for normals, "
                         "subnormals (exponent 00000) and specials (11111).")
    passed(task, f"{len(FP16_CASES)} bit patterns decoded exactly: normals, subnormals, ±0, ±inf and NaN.")


# (exponent bits, mantissa bits, name)
LAYOUTS = [(5, 10, "FP16"), (8, 7, "BF16"), (5, 2, "FP8 E5M2"), (8, 23, "FP32"), (4, 3, "an IEEE-style 4+3 format")]


def _limit_mistakes(e: int, m: int) -> dict[str, list[tuple[float, str]]]:
    bias = 2 ** (e - 1) - 1
    emax = 2**e - 2 - bias
    return {
        "largest": [
            ((2 - 2.0**-m) * 2.0 ** (emax + 1),
             "the all-ones exponent is reserved for inf and NaN, so the largest exponent is 2**e - 2 - bias."),
            (2.0**emax, "the largest value has every mantissa bit set: (2 - 2**-m) × 2**emax, not 2**emax."),
            ((2 - 2.0**-m) * 2.0 ** (emax - 1),
             "off-by-one bias: the bias is 2**(e-1) - 1, so emax = (2**e - 2) - bias."),
        ],
        "smallest_normal": [
            (2.0**-bias, "the smallest normal has biased exponent 1 (0 is for subnormals): 2**(1 - bias)."),
            (2.0 ** (2 - bias), "off-by-one bias: the bias is 2**(e-1) - 1, and the smallest normal is "
                                "2**(1 - bias)."),
        ],
        "smallest_subnormal": [
            (2.0 ** (1 - bias), "you treated the smallest normal as the smallest value: subnormals go "
                                "further down, to 2**(1 - bias) × 2**-m."),
            (2.0 ** (-bias - m), "subnormals use the exponent of the smallest normal, 1 - bias (not -bias): "
                                 "the smallest is 2**(1 - bias - m)."),
            (2.0 ** (1 - bias - m - 1), "the smallest subnormal has mantissa 0…01, worth 2**-m of "
                                        "2**(1 - bias): 2**(1 - bias - m)."),
        ],
    }


def format_limits(fn) -> None:
    """Task 2: ``format_limits(e, m)`` -> (largest, smallest_normal, smallest_subnormal) of an IEEE-style format."""
    task = "Task 2 (format_limits)"
    require_callable(task, fn, "format_limits")
    fields = ("largest", "smallest_normal", "smallest_subnormal")
    for e, m, name in LAYOUTS:
        truth = derive_format(name, e, m)
        want = (truth.max, truth.smallest_normal, truth.smallest_subnormal)
        got = call(task, fn, "format_limits", e, m)
        if not isinstance(got, (tuple, list)) or len(got) != 3:
            raise fail(task, f"for {name} (e={e}, m={m}) return a tuple of three numbers (largest, "
                             f"smallest_normal, smallest_subnormal); you returned {got!r}.")
        for field, given, w in zip(fields, got, want, strict=True):
            # its value by int's/float's own code (checks.real_number): a Fraction only with two exact ints inside,
            # never a float() through the answer's object (review rev25-r7 E2)
            g = real_number(given)
            if g is None:
                raise fail(task, f"for {name}, {field} should be a number: a float (or an int or a Fraction equal to "
                                 f"the limit); you returned {given!r}, a {type(given).__name__}.")
            try:
                g = float(g)
            except OverflowError:  # an int beyond float's range
                g = math.copysign(math.inf, g)
            if g == w:
                continue
            for wrong, message in _limit_mistakes(e, m)[field]:
                if math.isclose(g, wrong, rel_tol=1e-12):
                    raise fail(task, f"for {name} (e={e}, m={m}) your {field} is {given!r}, expected {w!r}: "
                                     f"{message}")
            raise fail(task, f"for {name} (e={e}, m={m}) your {field} is {given!r}, expected {w!r}. "
                             "bias = 2**(e-1) - 1; largest = (2 - 2**-m) × 2**(2**e - 2 - bias); "
                             "smallest normal = 2**(1 - bias); smallest subnormal = 2**(1 - bias - m).")
    passed(task, f"limits right for {', '.join(n for _, _, n in LAYOUTS)} — e.g. FP16 "
                 f"{derive_format('fp16', 5, 10).max:g}, BF16 {derive_format('bf16', 8, 7).max:.4g}.")

# --- Task 3: is the update lost? --------------------------------------------------------------------------------

def _lost(w: float, u: float, dtype: torch.dtype) -> bool:
    """torch's answer: does ``w + u`` round back to ``w`` in ``dtype``? The sum is a Python float (rounded to a
    double), and torch takes a double to float16/bfloat16 through float32 (c10's ``Half`` and ``BFloat16`` are built
    from a float), so it is rounded twice more; for :data:`UPDATE_CASES` that equals the exact sum rounded once."""
    return torch.tensor(w + u, dtype=torch.float64).to(dtype).item() == w


UPDATE_CASES = [  # (w, u, dtype, what the case is about)
    (1.0, 1e-3, torch.bfloat16, "a typical small update on a weight near 1 in bfloat16"),
    (1.0, 1e-3, torch.float16, "the same update in float16"),
    (1024.0, 0.25, torch.float16, "a weight of 1024 in float16, where values are 1 apart"),
    (1024.0, 0.6, torch.float16, "just over half the spacing at 1024"),
    (1.0, 2.0**-11, torch.float16, "exactly half the spacing at 1.0 (a tie; 1.0 is the even neighbour)"),
    (1.0 + 2.0**-10, 2.0**-11, torch.float16, "a tie from a value whose last mantissa bit is odd"),
    (0.01171875, 2.0**-16, torch.bfloat16, "a small weight in bfloat16, where the spacing is small too"),
    (256.0, 1.0, torch.bfloat16, "a tie in bfloat16 at 256, where values are 2 apart"),
    (3.0, 0.005, torch.float16, "a weight of 3 in float16"),
    (1.875, 0.0007, torch.float16, "a weight between two powers of two: the spacing is that of its binade"),
    (1.875, 0.005, torch.bfloat16, "the same weight in bfloat16"),
    (1.875, 0.00095, torch.float16, "just under the spacing of the next binade"),
    (1024.0, 0.3, torch.float16, "under half the spacing at 1024, over a quarter of it"),
    (2.0 - 2.0**-10, 2.0**-11, torch.float16, "a tie just below 2: the even neighbour is 2.0"),
]

UPDATE_LOST = (True, False, True, False, True, False, True, True, False, False, False, False, True, False)
"""What torch does with each of :data:`UPDATE_CASES` (``_lost``), written out: the check compares answers with
these constants, not with a cast it makes after the answer ran (an answer cell could patch ``Tensor.to``);
``tests/test_checks_lessons01_02.py`` recomputes them with torch."""


def _predict_lost(w: float, u: float, m: int, spacing: float, ties: str = "even") -> bool:
    """A prediction "lost below half the spacing", with a rule for the tie."""
    if u != spacing / 2:
        return u < spacing / 2
    return {"even": int(w / spacing) % 2 == 0, "always": True, "never": False}[ties]


def _binade(w: float, m: int) -> float:
    return 2.0 ** (math.floor(math.log2(w)) - m)


def _mantissa(dtype: torch.dtype) -> int:
    return 10 if dtype == torch.float16 else 7


_TIE_MISTAKES = {  # the rule for u == spacing / 2 -> what it gets wrong ("even" is right)
    "always": "a sum exactly halfway (u = spacing / 2) is a tie, and ties round to the neighbour whose last "
              "mantissa bit is even: that is w only when w's last bit is even, else the next value (kept).",
    "never": "u = spacing / 2 is a tie, and a tie rounds to the neighbour whose last mantissa bit is even: "
             "when that is w itself, the update is lost.",
}

_SPACING_MISTAKES = [  # (the wrong spacing around w for m mantissa bits, what it did wrong)
    (lambda w, m: 2.0**-m,
     lambda w, m: f"the spacing between values grows with w: near {w!r} it is 2**(floor(log2 w) - {m}) = "
                  f"{_binade(w, m):g}, not the spacing at 1.0."),
    (lambda w, m: w * 2.0**-m,
     lambda w, m: f"you scaled the spacing by w itself (w × 2**-{m}); it is constant inside a binade: "
                  f"2**(floor(log2 w) - {m}) = {_binade(w, m):g} for every w in [{2.0 ** math.floor(math.log2(w)):g}, "
                  f"{2.0 ** (math.floor(math.log2(w)) + 1):g})."),
    (lambda w, m: _binade(w, 17 - m),
     lambda w, m: "the mantissa bits are swapped: float16 has 10 mantissa bits, bfloat16 7."),
    (lambda w, m: _binade(w, m + 1),
     lambda w, m: f"the implicit leading 1 is not a spacing bit: the format stores {m} mantissa bits, so the "
                  f"spacing is 2**(floor(log2 w) - {m}) = {_binade(w, m):g}."),
    (lambda w, m: 2.0 ** (math.ceil(math.log2(w)) - m),
     lambda w, m: f"round the exponent *down*: w lies in the binade starting at 2**floor(log2 w) = "
                  f"{2.0 ** math.floor(math.log2(w)):g}, where the spacing is {_binade(w, m):g}."),
]


def _lost_mistakes():
    """Every known wrong rule as (rule(w, u, m), explain(w, m)): one mistake first (a tie rule with the right
    spacing, a wrong spacing with the right tie rule), then each wrong spacing with each wrong tie rule, whose
    message names both mistakes."""
    def rule(spacing, ties):
        return lambda w, u, m: _predict_lost(w, u, m, spacing(w, m), ties)

    def both(spacing_explain, tie_explain):
        return lambda w, m: f"{spacing_explain(w, m)} Also, {tie_explain}"

    rules = [(rule(_binade, ties), lambda w, m, why=why: why) for ties, why in _TIE_MISTAKES.items()]
    rules += [(rule(spacing, "even"), explain) for spacing, explain in _SPACING_MISTAKES]
    rules += [(rule(spacing, ties), both(explain, why)) for spacing, explain in _SPACING_MISTAKES
              for ties, why in _TIE_MISTAKES.items()]
    return rules


_LOST_MISTAKES = _lost_mistakes()  # matched against every answer at once


def update_is_lost(fn) -> None:
    """Task 3: ``update_is_lost(w, u, dtype)`` predicts whether ``w + u`` rounds back to ``w``.

    All cases are asked first; when the answers are exactly those of a known wrong rule (a tie rule, the
    spacing at 1.0, ``w × eps``, swapped or miscounted mantissa bits, a rounded-up exponent, or one of those
    spacings together with a wrong tie rule), the message names that rule at the first case it gets wrong.
    """
    task = "Task 3 (update_is_lost)"
    require_callable(task, fn, "update_is_lost")
    answers = []
    for w, u, dtype, _what in UPDATE_CASES:
        got = call(task, fn, "update_is_lost", w, u, dtype)
        if exact_bool(got) is None:  # a numpy bool is one, by its value (review rev25-r8 N3)
            raise fail(task, f"for w={w!r}, u={u!r} you returned {got!r}; return True or False.")
        answers.append(exact_bool(got))
    wrong = [(case, got) for case, got, lost in zip(UPDATE_CASES, answers, UPDATE_LOST, strict=True) if got != lost]
    if not wrong:
        passed(task, f"{len(UPDATE_CASES)} updates predicted right in float16 and bfloat16, ties included: an "
                     "update below half the spacing around the weight is lost.")
        return
    (w, u, dtype, what), got = wrong[0]
    want = not got
    name = str(dtype).removeprefix("torch.")
    m = _mantissa(dtype)
    spacing = _binade(w, m)
    context = f"w={w!r}, u={u!r} in {name} ({what}): you said {'lost' if got else 'kept'}, torch says " + (
        "lost" if want else "kept")
    for rule, explain in _LOST_MISTAKES:
        if all(rule(cw, cu, _mantissa(cd)) == a for (cw, cu, cd, _), a in zip(UPDATE_CASES, answers, strict=True)):
            raise fail(task, f"{context}: {explain(w, m)}")
    if u == spacing / 2:
        raise fail(task, f"{context}. u is exactly half the spacing {spacing:g}: a tie, and ties round to the "
                         "neighbour whose last mantissa bit is even — that may be w (lost) or the next value "
                         "(kept).")
    raise fail(task, f"{context}. Compare u with half the spacing of {name} values around w, "
                     f"2**(floor(log2 w) - {m}) = {spacing:g}.")


# --- tiered hints: shown one tier per failed check, or on request with `check.hint(task)` ---

HINTS = {
    'decode_fp16': [
        ('Split the string into its three fields first. Which exponent values are special in FP16 (lesson '
         '01, the bit-toggle widget)?'),
        ('`int(field, 2)` turns a field into a number. Exponent 0 means subnormal (no implicit 1, exponent'
         ' 1 - 15); exponent 31 means inf (mantissa 0) or NaN.'),
        ('normal: (-1)**s × (1 + mantissa/1024) × 2**(exponent - 15); subnormal: (-1)**s × (mantissa/1024)'
         ' × 2**-14. Multiply by -1.0 (not subtract) so -0.0 keeps its sign.'),
    ],
    'format_limits': [
        ('Start from FP16 (e=5, m=10), whose limits lesson 01 prints: 65504, 2**-14, 2**-24. Which formula'
         ' gives each from 5 and 10?'),
        ('The bias is 2**(e-1) - 1. The all-ones exponent is reserved, so the largest usable biased '
         'exponent is 2**e - 2; the smallest normal uses biased exponent 1.'),
        ('largest = (2 - 2**-m) × 2**(2**e - 2 - bias); smallest normal = 2**(1 - bias); the smallest '
         "subnormal is the smallest normal's exponent with only the last mantissa bit set: 2**(1 - bias - "
         'm).'),
    ],
    'update_is_lost': [
        ('How far apart are the representable values around w? (Lesson 01: in FP16 between 2048 and 4096 '
         'they are 2 apart.)'),
        ('The spacing around w is 2**(floor(log2 w) - m), with m = 10 mantissa bits for float16 and 7 for '
         'bfloat16. The update survives only if it moves w at least halfway to its neighbour.'),
        ('lost when u < spacing / 2; when u == spacing / 2 (a tie) the sum rounds to the neighbour with an'
         ' even last mantissa bit: lost exactly when int(w / spacing) is even.'),
    ],
}
hint = hints(__name__, HINTS)
