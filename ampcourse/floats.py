"""The floating-point formats of mixed-precision training, bit for bit.

Six formats, by these names: ``"fp32"``, ``"tf32"``, ``"fp16"``, ``"bf16"``, ``"fp8_e4m3"``
(``torch.float8_e4m3fn``) and ``"fp8_e5m2"`` (``torch.float8_e5m2``). Every ``fmt`` argument also accepts an
alias in any case (``"float16"``, ``"half"``, ``"BFloat16"``, ``"e4m3"``, ``"e5m2"``, ...) or the torch dtype.

Conventions:

* **A value is first a float32 value.** A Python float (a float64) or a float64 tensor is rounded to float32
  before it is rounded to the format. Torch's own casts do the same (``float64 -> float16`` goes through
  float32), so results match torch; but rounding twice can differ from rounding the float64 once:
  ``round_to(1 + 2**-11 + 2**-40, "fp16")`` is ``1.0``, where a single rounding would give ``1 + 2**-10``.
* **Numbers in, numbers out; tensors in, tensors out.** Every function is vectorised over tensors.
  ``round_to`` and ``ulp`` return float32 tensors; ``from_bits`` and ``representable_values`` return float64
  tensors. Inputs are detached: nothing here is differentiable.
* **Rounding is round-to-nearest, ties-to-even,** done by torch's own cast for the formats torch has, and by
  integer arithmetic on the float32 bit pattern for TF32 (which has no torch dtype). FP16, BF16 and FP8 E5M2
  overflow to ±inf. FP8 E4M3FN has no inf: torch's cast (as of torch 2.13) *saturates*, so every finite
  value beyond the largest and even ±inf becomes ±448; only NaN becomes NaN.

Example:
    >>> print(to_bits(1.0, "fp16"))
    0 | 01111 | 0000000000
    >>> from_bits("0 11110 1111111111", "fp16")
    65504.0
    >>> round_to(500.0, "fp8_e4m3")
    448.0
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass, fields, replace
from types import MappingProxyType

import torch

__all__ = [
    "FORMATS",
    "BitFields",
    "Bits",
    "FloatFormat",
    "canonical_name",
    "derive_format",
    "format_info",
    "format_table",
    "from_bits",
    "representable_values",
    "round_to",
    "to_bits",
    "ulp",
]


@dataclass(frozen=True)
class FloatFormat:
    """One floating-point format: its bit layout and the limits that follow from it.

    ``max`` is the largest finite value, ``smallest_normal`` and ``smallest_subnormal`` the smallest positive
    normal and subnormal values, ``eps`` the gap between 1 and the next value (``2**-mantissa_bits``).

    Example:
        >>> info = format_info("fp16")
        >>> info.exponent_bits, info.mantissa_bits, info.bias, info.max
        (5, 10, 15, 65504.0)
    """

    name: str
    torch_dtype: torch.dtype | None
    sign_bits: int
    exponent_bits: int
    mantissa_bits: int
    bias: int
    max: float
    smallest_normal: float
    smallest_subnormal: float
    eps: float
    has_inf: bool
    has_nan: bool

    @property
    def bits(self) -> int:
        """The total width: sign + exponent + mantissa bits."""
        return self.sign_bits + self.exponent_bits + self.mantissa_bits


def derive_format(name: str, exponent_bits: int, mantissa_bits: int, *, has_inf: bool = True) -> FloatFormat:
    """Work out a format's bias and limits from its bit layout alone (one sign bit assumed).

    With ``has_inf=True`` (IEEE style) the all-ones exponent is reserved for ±inf (mantissa 0) and NaN.
    With ``has_inf=False`` ("FN" style, like E4M3FN) that exponent holds finite numbers too, and only the
    all-ones exponent *and* mantissa pattern is NaN: one more binade, minus its top value.

    This is how the TF32 entry of :data:`FORMATS` is made; for the formats torch has, the tests check that
    it reproduces ``torch.finfo``.

    Example:
        >>> tf32 = derive_format("tf32", exponent_bits=8, mantissa_bits=10)
        >>> tf32.bias, tf32.eps, tf32.smallest_normal == 2.0**-126
        (127, 0.0009765625, True)
        >>> derive_format("e4m3", 4, 3, has_inf=False).max
        448.0

    ``exponent_bits`` must be 2..11 and ``mantissa_bits`` 0..52 (float64's layout is the widest a Python
    float can hold), or 1.. with ``has_inf=False``-style formats needing room for finite values.
    """
    if not isinstance(name, str) or not name:
        raise TypeError(f"name must be a non-empty str such as 'tf32' (got {name!r})")
    for arg, value, low, high in (("exponent_bits", exponent_bits, 2, 11), ("mantissa_bits", mantissa_bits, 0, 52)):
        if isinstance(value, bool) or not isinstance(value, numbers.Integral):
            raise TypeError(f"{arg} must be an int from {low} to {high} (got {value!r})")
        if not low <= value <= high:
            raise ValueError(f"{arg} must be from {low} to {high} (float64's {high} bits are the widest a Python "
                             f"float holds; got {value!r})")
    if not isinstance(has_inf, bool):
        raise TypeError(f"has_inf must be True or False (got {has_inf!r})")
    if not has_inf and mantissa_bits == 0 and exponent_bits < 2:
        raise ValueError("a format without inf needs at least one finite value in its top binade")
    bias = 2 ** (exponent_bits - 1) - 1
    min_exponent = 1 - bias
    if has_inf:
        max_exponent = 2**exponent_bits - 2 - bias
        top_mantissa = 2**mantissa_bits - 1
    else:
        max_exponent = 2**exponent_bits - 1 - bias
        top_mantissa = 2**mantissa_bits - 2
    return FloatFormat(
        name=name,
        torch_dtype=None,
        sign_bits=1,
        exponent_bits=exponent_bits,
        mantissa_bits=mantissa_bits,
        bias=bias,
        max=math.ldexp(2**mantissa_bits + top_mantissa, max_exponent - mantissa_bits),
        smallest_normal=math.ldexp(1.0, min_exponent),
        smallest_subnormal=math.ldexp(1.0, min_exponent - mantissa_bits),
        eps=math.ldexp(1.0, -mantissa_bits),
        has_inf=has_inf,
        has_nan=True,
    )


# Integer dtypes of each width, to reinterpret a float's bits.
_INT_OF_WIDTH = {8: torch.uint8, 16: torch.int16, 32: torch.int32}


def _torch_format(
    name: str, dtype: torch.dtype, exponent_bits: int, mantissa_bits: int, *, has_inf: bool
) -> FloatFormat:
    """The layout's format, with the limits as torch itself reports them."""
    finfo = torch.finfo(dtype)
    # torch.finfo has no smallest_subnormal: read it from torch as the value of bit pattern 0...01.
    lowest_pattern = torch.tensor(1, dtype=_INT_OF_WIDTH[finfo.bits]).view(dtype)
    return replace(
        derive_format(name, exponent_bits, mantissa_bits, has_inf=has_inf),
        torch_dtype=dtype,
        max=finfo.max,
        smallest_normal=finfo.smallest_normal,
        smallest_subnormal=lowest_pattern.item(),
        eps=finfo.eps,
    )


FORMATS: MappingProxyType[str, FloatFormat] = MappingProxyType(
    {
        "fp32": _torch_format("fp32", torch.float32, 8, 23, has_inf=True),
        "tf32": derive_format("tf32", 8, 10, has_inf=True),  # fp32's range, fp16's precision
        "fp16": _torch_format("fp16", torch.float16, 5, 10, has_inf=True),
        "bf16": _torch_format("bf16", torch.bfloat16, 8, 7, has_inf=True),
        "fp8_e4m3": _torch_format("fp8_e4m3", torch.float8_e4m3fn, 4, 3, has_inf=False),
        "fp8_e5m2": _torch_format("fp8_e5m2", torch.float8_e5m2, 5, 2, has_inf=True),
    }
)
"""The six formats by canonical name, in the order fp32, tf32, fp16, bf16, fp8_e4m3, fp8_e5m2."""

_ALIASES = {
    "float32": "fp32",
    "tensorfloat32": "tf32",
    "float16": "fp16",
    "half": "fp16",
    "bfloat16": "bf16",
    "e4m3": "fp8_e4m3",
    "e4m3fn": "fp8_e4m3",
    "fp8_e4m3fn": "fp8_e4m3",
    "float8_e4m3fn": "fp8_e4m3",
    "e5m2": "fp8_e5m2",
    "float8_e5m2": "fp8_e5m2",
}


def canonical_name(fmt: str | torch.dtype) -> str:
    """The canonical name of a format given by name or alias (any case) or by torch dtype.

    Raises ``ValueError`` (listing the valid names) for an unknown format, ``TypeError`` for anything that
    is neither a string nor a torch dtype.

    Example:
        >>> canonical_name("BFloat16"), canonical_name(torch.float8_e4m3fn)
        ('bf16', 'fp8_e4m3')
    """
    if isinstance(fmt, torch.dtype):
        key = str(fmt).removeprefix("torch.")
    elif isinstance(fmt, str):
        key = fmt.strip().lower()
    else:
        raise TypeError(f"fmt must be a format name (str) or a torch.dtype, not {type(fmt).__name__}")
    name = _ALIASES.get(key, key)
    if name not in FORMATS:
        raise ValueError(
            f"unknown format {fmt!r}; valid formats: {', '.join(FORMATS)} (aliases: {', '.join(_ALIASES)})"
        )
    return name


def format_info(fmt: str | torch.dtype) -> FloatFormat:
    """The :class:`FloatFormat` of a format given by name, alias or torch dtype.

    Example:
        >>> format_info("e5m2").max
        57344.0
    """
    return FORMATS[canonical_name(fmt)]


def format_table() -> list[dict]:
    """One plain dict per format (the :class:`FloatFormat` fields), in :data:`FORMATS` order, for display.

    ``torch_dtype`` is given as a string (``"torch.float16"``), or ``None`` for TF32.

    Example:
        >>> [(row["name"], row["max"]) for row in format_table()][2:4]
        [('fp16', 65504.0), ('bf16', 3.3895313892515355e+38)]
    """
    rows = []
    for info in FORMATS.values():
        row = {field.name: getattr(info, field.name) for field in fields(FloatFormat)}
        row["torch_dtype"] = None if info.torch_dtype is None else str(info.torch_dtype)
        rows.append(row)
    return rows


@dataclass(frozen=True)
class Bits:
    """The bits of one value, as strings of 0s and 1s, split into sign | exponent | mantissa.

    ``fmt`` may be any accepted format spelling; it is stored as the canonical name.

    Example:
        >>> bits = to_bits(-0.1, "bf16")
        >>> print(bits)
        1 | 01111011 | 1001101
        >>> bits.biased_exponent, bits.unbiased_exponent, bits.value
        (123, -4, -0.10009765625)
    """

    sign: str
    exponent: str
    mantissa: str
    fmt: str

    def __post_init__(self) -> None:
        info = format_info(self.fmt)
        object.__setattr__(self, "fmt", info.name)
        widths = {"sign": 1, "exponent": info.exponent_bits, "mantissa": info.mantissa_bits}
        for field_name, width in widths.items():
            text = getattr(self, field_name)
            if not isinstance(text, str) or len(text) != width or set(text) - {"0", "1"}:
                raise ValueError(
                    f"{info.name} bits need a {width}-character string of 0s and 1s as {field_name} "
                    f"(1 sign, {info.exponent_bits} exponent, {info.mantissa_bits} mantissa bits), "
                    f"got {text!r}"
                )

    def __str__(self) -> str:
        return f"{self.sign} | {self.exponent} | {self.mantissa}"

    @property
    def pattern(self) -> int:
        """The whole bit pattern as an unsigned integer."""
        return int(self.sign + self.exponent + self.mantissa, 2)

    @property
    def biased_exponent(self) -> int:
        """The exponent field read as an unsigned integer."""
        return int(self.exponent, 2)

    @property
    def unbiased_exponent(self) -> int:
        """The power of two that scales the significand: ``biased - bias``, or ``1 - bias`` for the
        subnormals and zero (exponent field 0). Not meaningful for inf and NaN."""
        return max(self.biased_exponent, 1) - format_info(self.fmt).bias

    @property
    def value(self) -> float:
        """The value these bits encode."""
        return from_bits(self, self.fmt)

    @property
    def is_zero(self) -> bool:
        """Whether this is +0 or -0."""
        return self.value == 0

    @property
    def is_subnormal(self) -> bool:
        """Whether this is a subnormal: exponent field 0, mantissa not 0."""
        return self.biased_exponent == 0 and not self.is_zero

    @property
    def is_inf(self) -> bool:
        """Whether this is +inf or -inf."""
        return math.isinf(self.value)

    @property
    def is_nan(self) -> bool:
        """Whether this is a NaN."""
        return math.isnan(self.value)


@dataclass(frozen=True, eq=False)
class BitFields:
    """The bit fields of a tensor of values: int64 tensors ``sign``, ``exponent``, ``mantissa`` (each field
    read as an unsigned integer) shaped like the values. :func:`to_bits` returns one for a tensor.

    Example:
        >>> fields = to_bits(torch.tensor([1.0, -2.0, 0.5]), "fp16")
        >>> fields.sign.tolist(), fields.exponent.tolist(), fields.mantissa.tolist()
        ([0, 1, 0], [15, 16, 14], [0, 0, 0])
        >>> [hex(p) for p in fields.pattern.tolist()]
        ['0x3c00', '0xc000', '0x3800']
    """

    sign: torch.Tensor
    exponent: torch.Tensor
    mantissa: torch.Tensor
    fmt: str

    def __post_init__(self) -> None:
        object.__setattr__(self, "fmt", canonical_name(self.fmt))

    @property
    def pattern(self) -> torch.Tensor:
        """The whole bit patterns as an int64 tensor of unsigned integers."""
        info = format_info(self.fmt)
        return (
            self.sign << (info.exponent_bits + info.mantissa_bits)
            | self.exponent << info.mantissa_bits
            | self.mantissa
        )


_FLOAT_ALLOWED = "a real number or a floating-point torch.Tensor"


def _as_float32(x: object, arg: str) -> tuple[torch.Tensor, bool]:
    """``x`` as a (detached) float32 tensor, and whether it came in as a Python number."""
    if isinstance(x, torch.Tensor):
        if not x.is_floating_point():
            raise TypeError(f"{arg} must be {_FLOAT_ALLOWED}, not a {x.dtype} tensor")
        return x.detach().to(torch.float32), False
    if isinstance(x, numbers.Real) and not isinstance(x, bool):
        try:
            value = float(x)
        except OverflowError:  # an int beyond float64: float32 rounds it to inf anyway
            value = math.inf if x > 0 else -math.inf
        # Via float64: a number beyond float32's range becomes ±inf, as a float32 cast does.
        return torch.tensor(value, dtype=torch.float64).to(torch.float32), True
    raise TypeError(f"{arg} must be {_FLOAT_ALLOWED}, not {type(x).__name__}")


def _binade(magnitude: torch.Tensor, info: FloatFormat) -> torch.Tensor:
    """``floor(log2(magnitude))`` for float64 magnitudes, raised to the format's lowest normal exponent:
    zero and the subnormals share the binade of the smallest normal."""
    min_exponent = 1 - info.bias
    exponent = torch.frexp(magnitude).exponent.to(torch.int64)  # magnitude = f * 2**exponent, 0.5 <= f < 1
    return torch.where(magnitude > 0, torch.clamp(exponent - 1, min=min_exponent), min_exponent)


def _round_tf32(values: torch.Tensor) -> torch.Tensor:
    """Round float32 values to TF32: round-to-nearest-even on the float32 bit pattern, dropping 13 of its 23
    mantissa bits. A carry out of the mantissa moves into the exponent, and past the largest value to inf."""
    dropped = FORMATS["fp32"].mantissa_bits - FORMATS["tf32"].mantissa_bits
    values = torch.where(values.isnan(), torch.nan, values)  # the quiet NaN: no payload in the dropped bits
    bits = values.abs().view(torch.int32)  # sign bit cleared, so the int32 is the magnitude's pattern, >= 0
    lowest_kept_bit = (bits >> dropped) & 1
    # Adding just under half a TF32 ulp rounds up exactly when the dropped bits are above half; adding the
    # lowest kept bit as well makes an exact half round up only from an odd mantissa: ties go to even.
    bits = (bits + (1 << (dropped - 1)) - 1 + lowest_kept_bit) >> dropped << dropped
    return bits.view(torch.float32).copysign(values)


def round_to(x: float | torch.Tensor, fmt: str | torch.dtype) -> float | torch.Tensor:
    """``x`` rounded to the format: the nearest representable value, ties to the even mantissa.

    ``x`` is first a float32 value (see the module docstring). For the formats torch has this is exactly
    ``x.to(torch.float32).to(dtype)``, read back as float32, so subnormals and overflow behave as in torch:

    * FP16, BF16, FP8 E5M2: beyond the largest value (from halfway to the next binade) → ±inf.
    * FP8 E4M3FN has no inf, and torch's cast saturates: any larger finite value, and ±inf itself, → ±448.
      Only NaN → NaN. That is torch 2.13.0's cast, pinned down by the tests; older torch releases turned
      everything from 480 up, inf included, into NaN instead.
    * TF32 has no torch dtype; it is rounded to nearest-even by integer arithmetic on the float32 bit
      pattern (the low 13 mantissa bits are dropped), overflowing to ±inf; NaN stays NaN. NVIDIA GPUs may
      differ in the last bit on exact ties: their conversion instruction (PTX ``cvt.rna.tf32.f32``) breaks
      ties away from zero.

    Returns a float for a Python number, else a float32 tensor of the rounded values.

    Example:
        >>> round_to(0.1, "fp16"), round_to(0.1, "bf16"), round_to(0.1, "tf32")
        (0.0999755859375, 0.10009765625, 0.0999755859375)
        >>> round_to(torch.tensor([70000.0, 1e9, -float("inf")]), "fp8_e4m3")
        tensor([ 448.,  448., -448.])
    """
    info = format_info(fmt)
    values, is_number = _as_float32(x, "x")
    if info.torch_dtype is None:  # only TF32 lacks a torch dtype
        rounded = _round_tf32(values)
    else:
        rounded = values.to(info.torch_dtype).to(torch.float32)
    return rounded.item() if is_number else rounded


def _encode(values: torch.Tensor, info: FloatFormat) -> BitFields:
    """The bit fields of float32 values that are exactly representable in the format."""
    top_exponent = 2**info.exponent_bits - 1
    implicit_one = 2**info.mantissa_bits
    magnitude = torch.where(values.isfinite(), values.abs(), 0).double()
    binade = _binade(magnitude, info)
    # The significand 1.m (normal) or 0.m (subnormal), scaled by 2**mantissa_bits to an exact integer.
    significand = torch.ldexp(magnitude, info.mantissa_bits - binade).to(torch.int64)
    is_normal = significand >= implicit_one
    exponent = torch.where(is_normal, binade + info.bias, 0)
    mantissa = torch.where(is_normal, significand - implicit_one, significand)
    # inf: all-ones exponent, mantissa 0. NaN: all-ones exponent and mantissa (a NaN in every format).
    exponent = torch.where(values.isfinite(), exponent, top_exponent)
    mantissa = torch.where(values.isinf(), 0, mantissa)
    mantissa = torch.where(values.isnan(), implicit_one - 1, mantissa)
    return BitFields(torch.signbit(values).to(torch.int64), exponent, mantissa, info.name)


def to_bits(x: float | torch.Tensor, fmt: str | torch.dtype) -> Bits | BitFields:
    """The bits of ``x`` in the format, after rounding it there with :func:`round_to`.

    For a Python number, a :class:`Bits` (strings, printed as ``sign | exponent | mantissa``); for a tensor,
    a :class:`BitFields` of int64 tensors shaped like ``x``. A NaN is shown with the exponent and mantissa
    all ones (a NaN in every format); its sign bit is whatever the cast produced.

    Example:
        >>> print(to_bits(1.0, "fp16"))
        0 | 01111 | 0000000000
        >>> print(to_bits(-0.0, "fp8_e4m3"))
        1 | 0000 | 000
        >>> to_bits(2.0**-9, "fp8_e4m3").is_subnormal
        True
        >>> to_bits(torch.tensor([1.0, 3.0]), "bf16").mantissa
        tensor([ 0, 64])
    """
    info = format_info(fmt)
    values, is_number = _as_float32(x, "x")
    bit_fields = _encode(round_to(values, info.name), info)
    if not is_number:
        return bit_fields
    text = format(bit_fields.pattern.item(), f"0{info.bits}b")
    return Bits(text[:1], text[1 : 1 + info.exponent_bits], text[1 + info.exponent_bits :], info.name)


def _decode(patterns: torch.Tensor, info: FloatFormat) -> torch.Tensor:
    """The float64 values of int64 bit patterns."""
    sign = patterns >> (info.exponent_bits + info.mantissa_bits)
    exponent = (patterns >> info.mantissa_bits) & (2**info.exponent_bits - 1)
    mantissa = patterns & (2**info.mantissa_bits - 1)
    is_normal = exponent > 0
    # The significand 1.m (normal) or 0.m (subnormal), scaled by 2**mantissa_bits to an integer.
    significand = torch.where(is_normal, mantissa + 2**info.mantissa_bits, mantissa)
    binade = torch.clamp(exponent, min=1) - info.bias  # subnormals share the binade of the smallest normal
    magnitude = torch.ldexp(significand.double(), binade - info.mantissa_bits)
    top_exponent = exponent == 2**info.exponent_bits - 1
    if info.has_inf:  # IEEE style: the top exponent means inf (mantissa 0) or NaN
        magnitude = torch.where(top_exponent, torch.where(mantissa == 0, torch.inf, torch.nan), magnitude)
    else:  # FN style: only the all-ones pattern is NaN
        magnitude = torch.where(top_exponent & (mantissa == 2**info.mantissa_bits - 1), torch.nan, magnitude)
    return torch.where(sign == 1, -magnitude, magnitude)


def _is_integer_dtype(dtype: torch.dtype) -> bool:
    """Whether a tensor of this dtype holds integers (bool does not count)."""
    return not (dtype.is_floating_point or dtype.is_complex or dtype == torch.bool)


_SEPARATORS = " |_"


def _parse_bit_string(text: str, info: FloatFormat) -> Bits:
    """A :class:`Bits` from a string of 0s and 1s, with optional separators."""
    digits = "".join(char for char in text if char not in _SEPARATORS)
    if len(digits) != info.bits or set(digits) - {"0", "1"}:
        raise ValueError(
            f"{info.name} bit strings have {info.bits} characters 0 or 1 (1 sign, {info.exponent_bits} "
            f"exponent, {info.mantissa_bits} mantissa bits; separators {_SEPARATORS!r} allowed), "
            f"got {text!r} ({len(digits)} characters without separators)"
        )
    return Bits(digits[:1], digits[1 : 1 + info.exponent_bits], digits[1 + info.exponent_bits :], info.name)


def from_bits(
    bits: Bits | BitFields | str | int | torch.Tensor, fmt: str | torch.dtype
) -> float | torch.Tensor:
    """The value a bit pattern encodes in the format.

    ``bits`` may be a :class:`Bits`, a string of 0s and 1s (separators ``" "``, ``"|"``, ``"_"`` allowed),
    or an int pattern from 0 to ``2**bits - 1``: these give a float. A :class:`BitFields` or an integer
    tensor of patterns gives a float64 tensor (exact for every format).

    Example:
        >>> from_bits("0 01111 0000000000", "fp16"), from_bits("0|01111|0000000000", "fp16")
        (1.0, 1.0)
        >>> from_bits(0x3C00, "fp16"), from_bits(0b0_1111_110, "fp8_e4m3"), from_bits(1, "fp16") == 2.0**-24
        (1.0, 448.0, True)
        >>> from_bits(torch.tensor([0x7F, 0xFF, 0x7E]), "fp8_e4m3")
        tensor([ nan,  nan, 448.], dtype=torch.float64)
    """
    info = format_info(fmt)
    if isinstance(bits, (Bits, BitFields)):
        if bits.fmt != info.name:
            raise ValueError(f"bits holds {bits.fmt} bits, but fmt is {info.name}")
        patterns = bits.pattern
    elif isinstance(bits, str):
        patterns = _parse_bit_string(bits, info).pattern
    elif isinstance(bits, int) and not isinstance(bits, bool):
        patterns = bits
    elif isinstance(bits, torch.Tensor) and _is_integer_dtype(bits.dtype):
        patterns = bits.to(torch.int64)
    else:
        raise TypeError(
            "bits must be a Bits, a BitFields, a string of 0s and 1s, an int bit pattern or an integer "
            f"torch.Tensor of bit patterns, not {type(bits).__name__}"
            + (f" ({bits.dtype})" if isinstance(bits, torch.Tensor) else "")
        )
    is_number = isinstance(patterns, int)
    limit = 2**info.bits
    in_range = 0 <= patterns < limit if is_number else bool(((patterns >= 0) & (patterns < limit)).all())
    if not in_range:
        raise ValueError(f"{info.name} bit patterns are integers from 0 to 2**{info.bits} - 1 = {limit - 1}")
    values = _decode(torch.as_tensor(patterns, dtype=torch.int64), info)
    return values.item() if is_number else values


def ulp(x: float | torch.Tensor, fmt: str | torch.dtype) -> float | torch.Tensor:
    """The unit in the last place at ``x``: the gap between the representable values around ``|x|``.

    For a representable ``x`` that is the distance to the next representable value above ``|x|``; in
    general it is the spacing of the binade that holds ``|x|`` (``x`` is not rounded first). Zero and the
    subnormals share the spacing ``smallest_subnormal``. ``inf`` beyond the format's largest binade; NaN for
    inf and NaN. Returns a float for a Python number, else a float32 tensor.

    Example:
        >>> ulp(1.0, "fp16"), ulp(1000.0, "fp16"), ulp(0.0, "fp16") == 2.0**-24, ulp(1e6, "fp16")
        (0.0009765625, 0.5, True, inf)
        >>> ulp(torch.tensor([1.0, 300.0]), "fp8_e4m3")
        tensor([ 0.1250, 32.0000])
    """
    info = format_info(fmt)
    values, is_number = _as_float32(x, "x")
    binade = _binade(values.double().abs(), info)
    spacing = torch.ldexp(torch.ones_like(binade, dtype=torch.float64), binade - info.mantissa_bits)
    top_binade = math.frexp(info.max)[1] - 1
    spacing = torch.where(binade > top_binade, torch.inf, spacing)
    spacing = torch.where(values.isfinite(), spacing, torch.nan).to(torch.float32)
    return spacing.item() if is_number else spacing


def representable_values(fmt: str | torch.dtype) -> torch.Tensor:
    """Every finite value of an 8- or 16-bit format, sorted ascending, as a float64 tensor.

    +0 and -0 count once. Raises ``ValueError`` for the wider formats (fp32, tf32).

    Example:
        >>> values = representable_values("fp8_e4m3")
        >>> len(values), values[-3:].tolist()
        (253, [384.0, 416.0, 448.0])
    """
    info = format_info(fmt)
    if info.bits > 16:
        raise ValueError(
            f"representable_values covers the 8- and 16-bit formats; {info.name} has {info.bits} bits "
            f"({2**info.bits:,} patterns)"
        )
    values = from_bits(torch.arange(2**info.bits), info.name)
    return torch.unique(values[values.isfinite()])
