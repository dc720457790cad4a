"""Tests for ampcourse.floats: every bit pattern, every rounding and every limit must agree with torch."""

import doctest
import inspect
import math
from dataclasses import replace
from fractions import Fraction

import numpy as np
import pytest
import torch

from ampcourse import floats
from ampcourse.floats import (
    FORMATS,
    Bits,
    canonical_name,
    derive_format,
    format_info,
    format_table,
    from_bits,
    representable_values,
    round_to,
    to_bits,
    ulp,
)

TORCH_FORMATS = [name for name, info in FORMATS.items() if info.torch_dtype is not None]
SMALL_FORMATS = ["fp16", "bf16", "fp8_e4m3", "fp8_e5m2"]  # 8 and 16 bits: every pattern can be tried
SAMPLE_SIZE = 1_000_000


def differences(actual: torch.Tensor, expected: torch.Tensor) -> torch.Tensor:
    """Where two float tensors differ, counting any NaN equal to any NaN and -0.0 different from +0.0."""
    actual, expected = actual.double(), expected.double()
    both_nan = actual.isnan() & expected.isnan()
    same = (actual == expected) & (actual.signbit() == expected.signbit())
    return ~(same | both_nan)


def assert_same_values(actual: torch.Tensor, expected: torch.Tensor, inputs: torch.Tensor) -> None:
    differ = differences(actual, expected)
    assert not differ.any(), (
        f"{int(differ.sum())} of {differ.numel()} differ; first inputs {inputs[differ][:5].tolist()}: "
        f"got {actual[differ][:5].tolist()}, expected {expected[differ][:5].tolist()}"
    )


def random_int32(seed: int, size: int = SAMPLE_SIZE) -> torch.Tensor:
    """Random 32-bit patterns as int32; ``.view(torch.float32)`` makes them random float32 values of every
    kind (normal, subnormal, inf, NaN)."""
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(-(2**31), 2**31, (size,), dtype=torch.int32, generator=generator)


def as_int32(patterns: torch.Tensor) -> torch.Tensor:
    """32-bit patterns held as unsigned int64 values, as the int32 with the same bits (to ``.view()``)."""
    return torch.where(patterns >= 2**31, patterns - 2**32, patterns).to(torch.int32)


def all_patterns(fmt: str) -> tuple[torch.Tensor, torch.Tensor]:
    """Every bit pattern of an 8- or 16-bit format (as int64 from 0 to 2**bits - 1) and torch's own values
    for them (the raw integers reinterpreted with ``.view(dtype)``)."""
    info = format_info(fmt)
    if info.bits == 8:
        raw = torch.arange(2**8, dtype=torch.uint8)
    else:
        raw = torch.arange(-(2**15), 2**15, dtype=torch.int16)
    return raw.to(torch.int64) & (2**info.bits - 1), raw.view(info.torch_dtype).double()


# ---------------------------------------------------------------------------------------------------------
# The formats and their limits


def test_limits_come_from_torch_finfo():
    for name in TORCH_FORMATS:
        info, finfo = FORMATS[name], torch.finfo(FORMATS[name].torch_dtype)
        assert (info.max, info.smallest_normal, info.eps, info.bits) == (
            finfo.max,
            finfo.tiny,
            finfo.eps,
            finfo.bits,
        ), name
        # torch.finfo has no smallest_subnormal; numpy's finfo has one for fp32 and fp16.
        assert info.smallest_subnormal == info.smallest_normal * info.eps, name
    for name, dtype in [("fp32", np.float32), ("fp16", np.float16)]:
        assert FORMATS[name].smallest_subnormal == float(np.finfo(dtype).smallest_subnormal)


def test_derivation_from_the_layout_reproduces_torch_finfo_so_tf32_can_be_trusted(figures):
    for name in TORCH_FORMATS:
        info = FORMATS[name]
        derived = derive_format(name, info.exponent_bits, info.mantissa_bits, has_inf=info.has_inf)
        assert derived == replace(info, torch_dtype=None), name
    tf32, fp32, fp16 = FORMATS["tf32"], FORMATS["fp32"], FORMATS["fp16"]
    assert tf32 == derive_format("tf32", 8, 10)
    assert tf32.bits == 19
    assert (tf32.bias, tf32.smallest_normal) == (fp32.bias, fp32.smallest_normal)  # fp32's range
    assert tf32.eps == fp16.eps  # fp16's precision
    assert tf32.max == (2 - 2**-10) * 2.0**127 and tf32.max < fp32.max
    assert tf32.smallest_subnormal == 2.0**-136
    figures(f"formats: derivation from the bit layout reproduces torch.finfo for {len(TORCH_FORMATS)} dtypes")


def test_famous_facts():
    assert format_info("fp16").max == 65504
    assert format_info("bf16").max == pytest.approx(3.39e38, rel=1e-3)
    assert format_info("fp8_e4m3").max == 448
    assert format_info("fp8_e5m2").max == 57344
    assert format_info("fp16").smallest_subnormal == 2.0**-24
    assert format_info("fp8_e4m3").has_inf is False and format_info("fp8_e5m2").has_inf is True
    assert [info.bias for info in FORMATS.values()] == [127, 127, 15, 127, 7, 15]


def test_format_table_is_plain_data_in_order():
    rows = format_table()
    assert [row["name"] for row in rows] == ["fp32", "tf32", "fp16", "bf16", "fp8_e4m3", "fp8_e5m2"]
    for row, info in zip(rows, FORMATS.values(), strict=True):
        assert row["torch_dtype"] == (None if info.torch_dtype is None else str(info.torch_dtype))
        assert {key: value for key, value in row.items() if key != "torch_dtype"} == {
            key: value for key, value in vars(info).items() if key != "torch_dtype"
        }
        assert all(isinstance(value, (str, int, float, bool, type(None))) for value in row.values())


@pytest.mark.parametrize(
    ("spelling", "name"),
    [
        ("FP32", "fp32"),
        ("float32", "fp32"),
        (torch.float32, "fp32"),
        ("TF32", "tf32"),
        ("Float16", "fp16"),
        ("half", "fp16"),
        (torch.float16, "fp16"),
        ("bfloat16", "bf16"),
        (torch.bfloat16, "bf16"),
        ("e4m3", "fp8_e4m3"),
        (" E4M3FN ", "fp8_e4m3"),
        (torch.float8_e4m3fn, "fp8_e4m3"),
        ("e5m2", "fp8_e5m2"),
        (torch.float8_e5m2, "fp8_e5m2"),
    ],
)
def test_names_aliases_and_dtypes(spelling, name):
    assert canonical_name(spelling) == name
    assert format_info(spelling) is FORMATS[name]


# ---------------------------------------------------------------------------------------------------------
# Bits: every pattern of every small format


@pytest.mark.parametrize("fmt", SMALL_FORMATS)
def test_from_bits_agrees_with_torch_on_every_pattern_and_to_bits_round_trips(fmt, figures):
    patterns, torch_values = all_patterns(fmt)
    values = from_bits(patterns, fmt)
    assert values.dtype == torch.float64
    assert_same_values(values, torch_values, patterns)

    back = to_bits(values, fmt).pattern
    nan = values.isnan()
    assert torch.equal(back[~nan], patterns[~nan])  # including -0.0, the inf and the subnormals
    assert from_bits(back[nan], fmt).isnan().all()  # a NaN comes back as a NaN (not always the same one)
    info = format_info(fmt)
    subnormal = (values != 0) & (values.abs() < info.smallest_normal)
    figures(
        f"{fmt}: all {len(patterns):,} bit patterns decode as torch's .view() does and round-trip "
        f"({int(nan.sum())} NaN, {int(values.isinf().sum())} inf, {int(subnormal.sum())} subnormal)"
    )


@pytest.mark.parametrize("fmt", SMALL_FORMATS)
def test_bit_strings_and_bits_objects_round_trip(fmt, figures):
    """The Python-number path (strings and Bits): every pattern of the 8-bit formats, 1,000 of the others."""
    info = format_info(fmt)
    patterns, torch_values = all_patterns(fmt)
    if info.bits > 8:
        chosen = torch.randperm(len(patterns), generator=torch.Generator().manual_seed(1))[:1000]
        patterns, torch_values = patterns[chosen], torch_values[chosen]
    for pattern, expected in zip(patterns.tolist(), torch_values.tolist(), strict=True):
        text = format(pattern, f"0{info.bits}b")
        value = from_bits(text, fmt)
        assert value == expected or (math.isnan(value) and math.isnan(expected)), text
        assert math.copysign(1, value) == math.copysign(1, expected) or math.isnan(value), text
        bits = to_bits(value, fmt)
        assert bits.is_nan if math.isnan(value) else bits.pattern == pattern, text
    figures(f"{fmt}: {len(patterns):,} patterns round-trip through bit strings and Bits one by one")


def test_fp32_and_tf32_patterns(figures):
    # fp32: a random million of the 2**32 patterns.
    raw = random_int32(seed=2)
    patterns = raw.to(torch.int64) & 0xFFFFFFFF
    values = from_bits(patterns, "fp32")
    assert_same_values(values, raw.view(torch.float32), patterns)
    back = to_bits(values, "fp32").pattern
    nan = values.isnan()
    assert torch.equal(back[~nan], patterns[~nan]) and from_bits(back[nan], "fp32").isnan().all()
    # tf32: all 2**19 patterns are fp32 patterns with 13 zero bits appended.
    tf32_patterns = torch.arange(2**19)
    tf32_values = from_bits(tf32_patterns, "tf32")
    as_fp32 = as_int32(tf32_patterns << 13).view(torch.float32)
    assert_same_values(tf32_values, as_fp32, tf32_patterns)
    tf32_nan = tf32_values.isnan()
    assert torch.equal(to_bits(tf32_values, "tf32").pattern[~tf32_nan], tf32_patterns[~tf32_nan])
    figures(
        f"fp32: {SAMPLE_SIZE:,} random patterns decode as torch's .view() does; "
        f"tf32: all {2**19:,} patterns decode as fp32 with 13 zero bits appended, both round-trip"
    )


def test_bits_of_one_value():
    one = to_bits(1.0, "fp16")
    assert str(one) == "0 | 01111 | 0000000000"
    assert one == Bits("0", "01111", "0000000000", "float16")
    assert (one.pattern, one.biased_exponent, one.unbiased_exponent, one.value) == (0x3C00, 15, 0, 1.0)
    assert not (one.is_zero or one.is_subnormal or one.is_inf or one.is_nan)

    tiniest = to_bits(2.0**-24, "fp16")
    assert str(tiniest) == "0 | 00000 | 0000000001"
    assert tiniest.is_subnormal and tiniest.unbiased_exponent == -14 and tiniest.pattern == 1

    negative_zero = to_bits(-0.0, "bf16")
    assert str(negative_zero) == "1 | 00000000 | 0000000"
    assert negative_zero.is_zero and not negative_zero.is_subnormal
    assert math.copysign(1, negative_zero.value) == -1

    assert str(to_bits(1e6, "fp16")) == "0 | 11111 | 0000000000" and to_bits(1e6, "fp16").is_inf
    assert str(to_bits(1e6, "fp8_e4m3")) == "0 | 1111 | 110"  # saturated to 448
    assert str(to_bits(math.nan, "fp8_e4m3")) == "0 | 1111 | 111" and to_bits(math.nan, "fp8_e4m3").is_nan
    assert to_bits(math.nan, "fp8_e5m2").is_nan and not to_bits(-math.inf, "fp8_e5m2").is_nan
    assert str(to_bits(0.1, "fp32")) == "0 | 01111011 | 10011001100110011001101"
    assert str(to_bits(0.1, "tf32")) == "0 | 01111011 | 1001100110"

    # Every spelling of a bit string means the same.
    for text in ["0 01111 0000000000", "0|01111|0000000000", "0011110000000000", "0_01111_0000000000"]:
        assert from_bits(text, "fp16") == 1.0
    assert from_bits(one, "fp16") == from_bits(0x3C00, "fp16") == 1.0


def test_bits_of_a_tensor():
    fields = to_bits(torch.tensor([[1.0, -2.0], [0.0, 2.0**-24]]), "fp16")
    assert fields.fmt == "fp16"
    assert fields.sign.tolist() == [[0, 1], [0, 0]]
    assert fields.exponent.tolist() == [[15, 16], [0, 0]]
    assert fields.mantissa.tolist() == [[0, 0], [0, 1]]
    assert from_bits(fields, "fp16").tolist() == [[1.0, -2.0], [0.0, 2.0**-24]]


# ---------------------------------------------------------------------------------------------------------
# Rounding


def nearest_even(x: torch.Tensor, fmt: str) -> torch.Tensor:
    """Round float64 values to the format by searching its table of values: a reference that shares
    nothing with torch's casts. Ties go to the even pattern; beyond the largest value to inf for formats
    with an inf, else (E4M3FN) saturate to the largest value, as torch does."""
    info = format_info(fmt)
    patterns = torch.arange(2 ** (info.bits - 1))  # the non-negative half: values ascend with the pattern
    values = from_bits(patterns, fmt)
    finite = values.isfinite()
    patterns, values = patterns[finite], values[finite]
    magnitude = x.abs()
    above = torch.searchsorted(values, magnitude).clamp(max=len(values) - 1)
    below = (above - 1).clamp(min=0)
    gap_above, gap_below = values[above] - magnitude, magnitude - values[below]
    take_above = (gap_above < gap_below) | ((gap_above == gap_below) & (patterns[above] % 2 == 0))
    result = values[torch.where(take_above, above, below)]
    if info.has_inf:
        next_binade = 2.0 ** math.frexp(info.max)[1]  # where the value after max would be
        result = torch.where(magnitude >= (info.max + next_binade) / 2, math.inf, result)
    result = torch.where(x.signbit(), -result, result)
    return torch.where(x.isnan(), math.nan, result)


def exact_ties(fmt: str) -> torch.Tensor:
    """Every value exactly halfway between two neighbouring values of the format, both signs, including the
    one between the largest value and where the next would be. A tie has one bit more than the format, so
    it is exact in float32."""
    info = format_info(fmt)
    positive = representable_values(fmt)
    positive = positive[positive >= 0]
    next_binade = 2.0 ** math.frexp(info.max)[1]
    ties = torch.cat([(positive[1:] + positive[:-1]) / 2, torch.tensor([(info.max + next_binade) / 2])])
    return torch.cat([ties, -ties]).float()


def rounding_sample(fmt: str) -> tuple[torch.Tensor, dict[str, int]]:
    """SAMPLE_SIZE float32 values that probe rounding to the format, and how many of each kind: every exact
    tie, each tie one float32 ulp either side, the edges and specials, then log-uniform magnitudes across
    the whole range and random float32 bit patterns."""
    info = format_info(fmt)
    generator = torch.Generator().manual_seed(3)
    ties = exact_ties(fmt)
    next_binade = 2.0 ** math.frexp(info.max)[1]
    near_ties = torch.cat([torch.nextafter(ties, ties * 2), torch.nextafter(ties, ties / 2)])
    edges = [0.0, math.inf, math.nan, info.max, info.smallest_normal, info.smallest_subnormal, next_binade]
    specials = torch.tensor(edges + [-edge for edge in edges])
    count = (SAMPLE_SIZE - len(ties) - len(near_ties) - len(specials)) // 2
    low, high = math.log2(info.smallest_subnormal) - 4, math.log2(info.max) + 4
    log_uniform = torch.exp2(low + (high - low) * torch.rand(count, generator=generator, dtype=torch.float64))
    log_uniform = torch.where(torch.rand(count, generator=generator) < 0.5, -log_uniform, log_uniform)
    remaining = SAMPLE_SIZE - len(ties) - len(near_ties) - len(specials) - count
    random_bits = random_int32(seed=4, size=remaining).view(torch.float32)
    sample = torch.cat([ties, near_ties, specials, log_uniform.float(), random_bits])
    kinds = {"ties": len(ties), "near ties": len(near_ties), "edges": len(specials), "log-uniform": count}
    kinds["random bits"] = remaining
    return sample, kinds


@pytest.mark.parametrize("fmt", SMALL_FORMATS)
def test_round_to_agrees_with_torch_cast_and_nearest_even_reference(fmt, figures):
    info = format_info(fmt)
    x, kinds = rounding_sample(fmt)
    assert len(x) == SAMPLE_SIZE
    rounded = round_to(x, fmt)
    assert rounded.dtype == torch.float32 and rounded.shape == x.shape
    assert_same_values(rounded, x.to(info.torch_dtype).float(), x)  # torch's own cast
    assert_same_values(rounded, nearest_even(x.double(), fmt), x)  # and the independent reference

    overflow = (x.abs() > info.max) & ~x.isnan()
    subnormal = (rounded != 0) & (rounded.abs() < info.smallest_normal)
    figures(
        f"round_to {fmt}: {len(x):,} float32 values agree with torch's cast and a nearest-even table search "
        f"({', '.join(f'{n:,} {kind}' for kind, n in kinds.items())}; "
        f"{int(overflow.sum()):,} beyond max, {int(subnormal.sum()):,} rounded to subnormals)"
    )


def test_e4m3_saturates_where_the_others_overflow_to_inf():
    huge = torch.tensor([464.0, 480.0, 1e4, math.inf, -math.inf, math.nan])
    assert round_to(huge, "fp8_e4m3").tolist()[:5] == [448.0, 448.0, 448.0, 448.0, -448.0], (
        "torch's float8_e4m3fn cast no longer saturates as documented (older torch releases gave NaN)"
    )
    assert math.isnan(round_to(math.nan, "fp8_e4m3"))
    assert round_to(61440.0, "fp8_e5m2") == math.inf and round_to(61439.0, "fp8_e5m2") == 57344
    assert round_to(65520.0, "fp16") == math.inf and round_to(65519.0, "fp16") == 65504
    assert round_to(-1e39, "bf16") == -math.inf


def test_python_numbers_and_float64_inputs_are_rounded_to_float32_first_as_torch_does(figures):
    # 1 + 2**-11 is an exact fp16 tie; 2**-40 above it is lost in float32, so the tie then goes to even.
    x = 1 + 2**-11 + 2**-40
    assert round_to(x, "fp16") == 1.0
    assert torch.tensor([x], dtype=torch.float64).to(torch.float16).item() == 1.0  # torch double-rounds too
    assert nearest_even(torch.tensor([x], dtype=torch.float64), "fp16").item() == 1 + 2**-10  # one rounding
    assert round_to(1e300, "fp32") == math.inf and round_to(-1e-300, "fp16") == 0.0

    checked = double_rounded = 0
    for fmt in SMALL_FORMATS:
        ties = exact_ties(fmt).double()
        offsets = torch.ldexp(ties.abs(), torch.tensor(-40)) * torch.linspace(-2, 2, len(ties)).double()
        x64 = ties + offsets  # a little off the tie: float32 rounds it back onto the tie
        rounded = round_to(x64, fmt)
        assert_same_values(rounded, x64.to(FORMATS[fmt].torch_dtype).float(), x64)
        assert_same_values(rounded, round_to(x64.float(), fmt), x64)
        double_rounded += int(differences(rounded, nearest_even(x64, fmt)).sum())
        checked += len(x64)
    assert double_rounded > checked // 4
    figures(
        f"float64 inputs: {checked:,} values just off ties round as torch's float64 casts do, "
        f"{double_rounded:,} of them differently from a single rounding"
    )


def tf32_reference(x: float) -> float:
    """Round one float32 value (as a Python float) to TF32 with exact rational arithmetic."""
    if not math.isfinite(x) or x == 0:
        return x
    binade = max(math.frexp(abs(x))[1] - 1, -126)  # fp32 subnormals share the binade 2**-126
    quantum = Fraction(2) ** (binade - 10)
    rounded = round(Fraction(abs(x)) / quantum) * quantum  # round() on a Fraction breaks ties to even
    return math.copysign(math.inf if rounded >= 2**128 else float(rounded), x)


def test_tf32_rounding_against_exact_rational_arithmetic(figures):
    generator = torch.Generator().manual_seed(4)
    high = torch.randint(0, 2**19, (1000,), generator=generator) << 13  # sign, exponent, kept mantissa
    cases = {
        "random": torch.randint(0, 2**32, (1000,), generator=generator),
        "ties": high | 0x1000,
        "just below ties": high | 0x0FFF,
        "just above ties": high | 0x1001,
        "carries": (high | 0x007FE000) + torch.randint(0x1000, 0x2000, (1000,), generator=generator),
        "fp32 subnormals": torch.randint(0, 2**23, (1000,), generator=generator) | (high & 0x80000000),
        "edges": torch.tensor([0, 0x80000000, 0x7F7FFFFF, 0xFF7FEFFF, 0x7F7FF000, 0x7F800000, 0x7FC00000, 1]),
    }
    patterns = torch.cat(list(cases.values())) & 0xFFFFFFFF
    x = as_int32(patterns).view(torch.float32)
    expected = torch.tensor([tf32_reference(value) for value in x.tolist()], dtype=torch.float64)
    assert_same_values(round_to(x, "tf32"), expected, x)
    assert round_to(float.fromhex("0x1.ffffffp0"), "tf32") == 2.0  # carry into the exponent
    assert round_to(float.fromhex("0x1.ffffffp127"), "tf32") == math.inf  # fp32 max rounds up past TF32's
    assert math.isnan(round_to(math.nan, "tf32"))
    figures(f"round_to tf32: {len(x):,} values agree with exact rational rounding ({', '.join(cases)})")


def test_tf32_values_have_ten_mantissa_bits(figures):
    x = random_int32(seed=5).view(torch.float32)
    rounded = round_to(x, "tf32")
    assert not (rounded.view(torch.int32) & 0x1FFF).any()  # the 13 dropped mantissa bits are all zero
    assert_same_values(round_to(rounded, "tf32"), rounded, x)
    finite = rounded.isfinite()
    error = (rounded[finite].double() - x[finite].double()).abs()
    assert (error <= ulp(x[finite], "tf32").double() / 2).all()
    assert torch.equal(rounded.isnan(), x.isnan())
    figures(f"round_to tf32: {SAMPLE_SIZE:,} random float32 values round to 10-bit mantissas within half an ulp")


# ---------------------------------------------------------------------------------------------------------
# ulp and representable values


@pytest.mark.parametrize(
    ("fmt", "count"), [("fp16", 63487), ("bf16", 65279), ("fp8_e4m3", 253), ("fp8_e5m2", 247)]
)
def test_representable_values_and_ulp(fmt, count, figures):
    info = format_info(fmt)
    values = representable_values(fmt)
    assert len(values) == count and values.dtype == torch.float64
    assert (values[1:] > values[:-1]).all() and values.isfinite().all()
    assert values[-1] == info.max and values[0] == -info.max
    positive = values[values > 0]
    assert positive[0] == info.smallest_subnormal and info.smallest_normal in positive

    gaps = positive[1:] - positive[:-1]
    assert torch.equal(ulp(positive[:-1], fmt).double(), gaps)  # the next value above is one ulp away
    assert torch.equal(ulp(-(positive[:-1] + gaps / 2), fmt).double(), gaps)  # and in between, the same gap
    assert ulp(0.0, fmt) == info.smallest_subnormal and ulp(1.0, fmt) == info.eps
    figures(f"{fmt}: {count:,} representable values; ulp checked against all {len(gaps):,} gaps between them")


def test_ulp_of_fp32_matches_nextafter_and_edge_cases(figures):
    x = random_int32(seed=6).view(torch.float32)
    x = x[x.isfinite() & (x.abs() < FORMATS["fp32"].max)].abs()
    assert torch.equal(ulp(x, "fp32"), torch.nextafter(x, torch.tensor(math.inf)) - x)
    assert all(ulp(1.0, name) == info.eps for name, info in FORMATS.items())
    assert ulp(1e6, "fp16") == math.inf and ulp(500.0, "fp8_e4m3") == 32.0
    assert math.isnan(ulp(math.inf, "fp16")) and math.isnan(ulp(math.nan, "bf16"))
    figures(f"ulp fp32: {len(x):,} random finite float32 values agree with torch.nextafter")


# ---------------------------------------------------------------------------------------------------------
# Validation and documentation


def test_unknown_format_lists_the_valid_ones():
    for bad in ["fp12", "float64", torch.float64, torch.int32]:
        with pytest.raises(ValueError, match="unknown format") as error:
            round_to(1.0, bad)
        assert all(name in str(error.value) for name in FORMATS)
    with pytest.raises(TypeError, match="fmt must be a format name"):
        format_info(16)


@pytest.mark.parametrize("bad", ["1.0", None, 1 + 2j, True, torch.tensor([1, 2]), torch.tensor([1j])])
@pytest.mark.parametrize("function", [round_to, to_bits, ulp])
def test_non_float_values_are_a_type_error(function, bad):
    with pytest.raises(TypeError, match=r"x must be a real number or a floating-point torch\.Tensor"):
        function(bad, "fp16")


def test_bad_bits():
    for text in ["0101", "0 01111 00000000000", "0 01111 000000000x", "0,01111,0000000000"]:
        with pytest.raises(ValueError, match="fp16 bit strings have 16 characters 0 or 1"):
            from_bits(text, "fp16")
    with pytest.raises(ValueError, match="fp8_e4m3 bit strings have 8 characters"):
        from_bits("0 1111 1110", "fp8_e4m3")
    with pytest.raises(ValueError, match="5-character string of 0s and 1s as exponent"):
        Bits("0", "0111", "0000000000", "fp16")
    for pattern in [-1, 2**16, torch.tensor([0, 2**16])]:
        with pytest.raises(ValueError, match=r"fp16 bit patterns are integers from 0 to 2\*\*16 - 1 = 65535"):
            from_bits(pattern, "fp16")
    for bad in [1.5, None, True, torch.tensor([1.0])]:
        with pytest.raises(TypeError, match="bits must be a Bits"):
            from_bits(bad, "fp16")
    with pytest.raises(ValueError, match="bits holds fp16 bits, but fmt is bf16"):
        from_bits(to_bits(1.0, "fp16"), "bf16")
    with pytest.raises(ValueError, match="8- and 16-bit formats; tf32 has 19 bits"):
        representable_values("tf32")


def test_docstring_examples_run_and_every_public_function_has_one():
    assert doctest.testmod(floats).failed == 0
    for name in floats.__all__:
        obj = getattr(floats, name)
        if inspect.isfunction(obj) or inspect.isclass(obj):
            assert ">>>" in (obj.__doc__ or ""), name
