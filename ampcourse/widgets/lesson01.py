"""Lesson 01 widgets: the six float formats of mixed-precision training, bit by bit.

Two static figures and one interactive widget, all built on :mod:`ampcourse.floats` (no float maths here):

* :func:`draw_bit_layouts` — every format's sign | exponent | mantissa fields, aligned at the sign bit, so
  BF16 shows up as FP32 with a short mantissa and TF32 as FP32's exponent with FP16's mantissa.
* :func:`draw_ulp` — the gap between neighbouring values (the ULP) against magnitude, for each format.
* :func:`bit_explorer` — a Float Toy for all six formats at once: type a value, or click its bits.

The explorer follows the house pattern: the pure functions :func:`parse_value`, :func:`explore` and
:func:`flip_bit` hold the logic (unit-tested), :func:`draw_explorer` draws the figure and writes the readout,
:func:`update_explorer` moves it to a new value (every later move: no new axes), and :class:`BitExplorer`
(a :class:`~ampcourse.widgets.base.LivePlot`) wires them to the controls.

**Bit numbering.** Bits are counted from the left as they are printed: index 0 is the sign bit, then the
exponent bits (most significant first), then the mantissa bits. **TF32** is shown with its 19 meaningful bits
(1 + 8 + 10); in memory a TF32 value is an FP32 word whose low 13 mantissa bits the Tensor Cores do not use.
Whether cuBLAS rounds or truncates those bits is not documented; the course rounds to nearest, ties to even
(:func:`ampcourse.floats.round_to`), as for the other formats.
"""

from __future__ import annotations

import html
import itertools
import math
import numbers
import re
from collections.abc import Iterable
from dataclasses import dataclass
from functools import partial
from typing import Any

import ipywidgets as widgets
import torch
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch, Rectangle

from ..floats import FORMATS, Bits, FloatFormat, canonical_name, format_info, from_bits, to_bits, ulp
from .base import COLORS, STATIC_DPI, LivePlot, figure_png, live

__all__ = [
    "BENCHMARK_MOVES",
    "FIELD_COLORS",
    "FORMAT_COLORS",
    "LABELS",
    "BitExplorer",
    "ExplorerData",
    "FormatRow",
    "UlpCurve",
    "bit_explorer",
    "bit_layouts_png",
    "draw_bit_layouts",
    "draw_explorer",
    "draw_ulp",
    "explore",
    "explorer_html",
    "explorer_text",
    "flip_bit",
    "parse_value",
    "ulp_curves",
    "ulp_png",
    "update_explorer",
]

LABELS = {
    "fp32": "FP32", "tf32": "TF32", "fp16": "FP16", "bf16": "BF16", "fp8_e4m3": "FP8 E4M3", "fp8_e5m2": "FP8 E5M2",
}
"""Display names, by canonical format name."""

FIELD_COLORS = {"sign": COLORS["vermillion"], "exponent": COLORS["blue"], "mantissa": COLORS["orange"]}
"""One colour per bit field (Okabe–Ito), shared by the figures, the readout and the bit toggles."""

FORMAT_COLORS = {
    "fp32": COLORS["black"], "tf32": COLORS["sky"], "fp16": COLORS["blue"],
    "bf16": COLORS["vermillion"], "fp8_e4m3": COLORS["green"], "fp8_e5m2": COLORS["purple"],
}
"""One colour per format (Okabe–Ito), for the ULP figure."""

_FIELDS = ("sign", "exponent", "mantissa")


def _fields(info: FloatFormat) -> list[tuple[str, int]]:
    """The (field, width) pairs of a format, left to right."""
    return [("sign", info.sign_bits), ("exponent", info.exponent_bits), ("mantissa", info.mantissa_bits)]


def _field_of_bit(info: FloatFormat, index: int) -> str:
    """The field that holds bit ``index`` (counted from the left, sign = 0)."""
    if index < info.sign_bits:
        return "sign"
    return "exponent" if index < info.sign_bits + info.exponent_bits else "mantissa"


def _format_max(value: float) -> str:
    """A format's largest value, short: ``65504`` or ``3.4e+38``."""
    return f"{value:.0f}" if value < 1e6 else f"{value:.2g}"


# --------------------------------------------------------------------------------------------------
# Static figure 1: the bit layouts
# --------------------------------------------------------------------------------------------------


def draw_bit_layouts(fig: Figure) -> None:
    """Draw the bit layout of every format: one row per format, one box per bit, coloured by field.

    Rows start at the sign bit, so equal exponent widths line up: BF16 and TF32 share FP32's 8 exponent bits
    (its range) and keep fewer mantissa bits (less precision). TF32's 13 ignored bits are drawn as dashed
    outlines: it is stored as an FP32 word. Each row ends with the format's largest value and its ``eps``.
    """
    if not isinstance(fig, Figure):
        raise TypeError(f"fig must be a matplotlib Figure, not {type(fig).__name__}")
    fig.subplots_adjust(left=0.02, right=0.99, bottom=0.02, top=0.82)
    ax = fig.subplots()
    widest = max(info.bits for info in FORMATS.values())
    for row, info in enumerate(FORMATS.values()):
        y = -row
        x = 0
        for field, width in _fields(info):
            for _ in range(width):
                ax.add_patch(Rectangle((x + 0.06, y - 0.36), 0.88, 0.72, facecolor=FIELD_COLORS[field],
                                       edgecolor="white", linewidth=0.5))
                x += 1
        if info.name == "tf32":  # the bits of the FP32 word that TF32 math ignores
            ignored = FORMATS["fp32"].bits - info.bits
            for i in range(ignored):
                ax.add_patch(Rectangle((x + i + 0.06, y - 0.36), 0.88, 0.72, facecolor="none",
                                       edgecolor="0.6", linestyle=(0, (2, 2)), linewidth=0.8))
            ax.text(x + ignored / 2, y, f"{ignored} bits ignored (stored as FP32)", ha="center", va="center",
                    fontsize=9, color="0.25", bbox={"facecolor": "white", "edgecolor": "none", "pad": 1})
        ax.text(-14.0, y, LABELS[info.name], ha="left", va="center", fontsize=12, fontweight="bold")
        ax.text(-0.4, y, f"1+{info.exponent_bits}+{info.mantissa_bits} = {info.bits} bits", ha="right",
                va="center", fontsize=11)
        ax.text(widest + 0.8, y, _format_max(info.max), ha="left", va="center", fontsize=11)
        ax.text(widest + 6.0, y, rf"$\epsilon = 2^{{-{info.mantissa_bits}}}$", ha="left", va="center",
                fontsize=11)
    # A guide at the end of the 8-bit exponent: FP32, TF32 and BF16 share it, hence the same range.
    ax.plot([9, 9], [0.55, -len(FORMATS) + 0.45], color="0.3", linestyle=":", linewidth=1.2)
    ax.text(9, 0.6, "8-bit exponent ends here", ha="center", va="bottom", fontsize=9, color="0.3")
    ax.text(widest + 0.8, 0.6, "largest value", ha="left", va="bottom", fontsize=9, color="0.3")
    ax.text(widest + 6.0, 0.6, "ε: gap above 1", ha="left", va="bottom", fontsize=9, color="0.3")
    ax.set_xlim(-14.2, widest + 11.5)
    ax.set_ylim(-len(FORMATS) + 0.4, 1.0)
    ax.axis("off")
    fig.suptitle("Bit layouts: sign | exponent | mantissa, aligned at the sign bit", fontsize=14, y=0.985)
    handles = [Patch(facecolor=FIELD_COLORS[field], label=label) for field, label in
               zip(_FIELDS, ("sign (1 bit)", "exponent: the range", "mantissa: the precision"), strict=True)]
    fig.legend(handles=handles, loc="upper center", ncol=3, fontsize=11, frameon=False,
               bbox_to_anchor=(0.5, 0.925))


def bit_layouts_png(dpi: int = STATIC_DPI) -> bytes:
    """The bit-layout figure (:func:`draw_bit_layouts`) as PNG bytes, to save or embed."""
    fig = Figure(figsize=(11.0, 4.2))
    draw_bit_layouts(fig)
    return figure_png(fig, dpi=dpi)


# --------------------------------------------------------------------------------------------------
# Static figure 2: the ULP across magnitudes
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class UlpCurve:
    """One format's ULP staircase: ``ulps[i] = floats.ulp(magnitudes[i], fmt)``.

    ``magnitudes`` are the smallest subnormal, then every power of two from the smallest normal up to the
    top binade, then the largest value: the ULP is constant from one point to the next (a step plot).
    """

    fmt: str
    magnitudes: tuple[float, ...]
    ulps: tuple[float, ...]
    smallest_normal: float
    max: float


def _format_names(fmts: Iterable[str | torch.dtype], arg: str = "fmts") -> tuple[str, ...]:
    """Canonical names of a non-empty collection of formats, duplicates dropped, order kept."""
    if isinstance(fmts, (str, torch.dtype)):
        fmts = (fmts,)
    if not isinstance(fmts, Iterable):
        raise TypeError(f"{arg} must be a format name or a collection of them, not {type(fmts).__name__}")
    names = tuple(dict.fromkeys(canonical_name(fmt) for fmt in fmts))
    if not names:
        raise ValueError(f"{arg} must name at least one format; valid formats: {', '.join(FORMATS)}")
    return names


def ulp_curves(fmts: Iterable[str | torch.dtype] = tuple(FORMATS)) -> dict[str, UlpCurve]:
    """The ULP staircase of each format, computed with :func:`ampcourse.floats.ulp`.

    Example:
        >>> curve = ulp_curves(["fp8_e4m3"])["fp8_e4m3"]
        >>> curve.magnitudes[:3], curve.ulps[:3], curve.magnitudes[-1], curve.ulps[-1]
        ((0.001953125, 0.015625, 0.03125), (0.001953125, 0.001953125, 0.00390625), 448.0, 32.0)
    """
    curves = {}
    for name in _format_names(fmts):
        info = format_info(name)
        top_binade = math.frexp(info.max)[1] - 1
        powers = [math.ldexp(1.0, exponent) for exponent in range(1 - info.bias, top_binade + 1)]
        magnitudes = (info.smallest_subnormal, *powers, info.max)
        ulps = ulp(torch.tensor(magnitudes, dtype=torch.float64), name).tolist()
        curves[name] = UlpCurve(name, magnitudes, tuple(ulps), info.smallest_normal, info.max)
    return curves


def draw_ulp(fig: Figure, fmts: Iterable[str | torch.dtype] = tuple(FORMATS)) -> None:
    """Draw the ULP (the gap to the next value) against ``|x|`` for each format, on log-log axes.

    Left: the whole range of every format. Right: a zoom on the 16- and 8-bit formats. Each staircase is
    dashed over the subnormals (constant gap, ``smallest_subnormal``), solid over the normals (the gap
    doubles every binade: ``ulp ≈ |x| · eps``); a dot marks the smallest normal, a bar the largest value.
    FP16 and TF32 have the same 10-bit mantissa, so their normal staircases coincide where both exist.
    The lines carry ``gid="ulp:<fmt>"``; every plotted point is ``(m, floats.ulp(m, fmt))``.
    """
    if not isinstance(fig, Figure):
        raise TypeError(f"fig must be a matplotlib Figure, not {type(fig).__name__}")
    curves = ulp_curves(fmts)
    fig.subplots_adjust(left=0.08, right=0.99, bottom=0.13, top=0.80, wspace=0.22)
    full, zoom = fig.subplots(1, 2, gridspec_kw={"width_ratios": [1.35, 1]})
    for ax in (full, zoom):
        for name, curve in curves.items():
            # Wider lines underneath: TF32 (drawn first) stays visible beneath FP16 where they coincide.
            width = 4.5 if name == "tf32" else 2.0
            color, gid = FORMAT_COLORS[name], f"ulp:{name}"
            ax.plot(curve.magnitudes[:2], curve.ulps[:2], drawstyle="steps-post", color=color, linewidth=width,
                    linestyle=(0, (2, 1.5)), gid=gid)
            ax.plot(curve.magnitudes[1:], curve.ulps[1:], drawstyle="steps-post", color=color, linewidth=width,
                    gid=gid, label=LABELS[name])
            ax.plot([curve.smallest_normal], [curve.ulps[1]], "o", color=color, markersize=6, gid=gid)
            ax.plot([curve.max], [curve.ulps[-1]], "|", color=color, markersize=14, markeredgewidth=2.5, gid=gid)
        ax.set_xscale("log", base=10)
        ax.set_yscale("log", base=10)
        ax.grid(True, which="major", color="0.88", linewidth=0.6)
        ax.set_xlabel("|x|  (magnitude)", fontsize=11)
        ax.tick_params(labelsize=9)
    full.set_ylabel("ULP at |x|: gap to the next value", fontsize=11)
    full.set_title("the whole range of each format", fontsize=11)
    zoom.set_title("zoom: the 16- and 8-bit formats", fontsize=11)
    zoom.set_xlim(2.0**-27, 2.0**18)
    zoom.set_ylim(2.0**-27, 2.0**15)
    decades = [10.0**k for k in range(-40, 41, 10)]
    full.set_xticks(decades)
    full.set_yticks(decades)
    full.set_xlim(2.0**-155, 2.0**134)
    full.set_ylim(2.0**-155, 2.0**110)
    for ax in (full, zoom):
        ax.minorticks_off()
    if {"fp16", "tf32"} <= set(curves):
        zoom.text(0.03, 0.96, "FP16's curve lies on TF32's:\nthe same 10-bit mantissa", transform=zoom.transAxes,
                  ha="left", va="top", fontsize=9, color="0.25")
    markers = [
        Line2D([], [], color="0.3", linestyle=(0, (2, 1.5)), label="subnormals"),
        Line2D([], [], color="0.3", marker="o", linestyle="none", label="smallest normal"),
        Line2D([], [], color="0.3", marker="|", markersize=12, markeredgewidth=2.5, linestyle="none",
               label="largest value"),
    ]
    handles = full.get_legend_handles_labels()[0] + markers
    fig.legend(handles=handles, loc="upper center", ncol=len(handles), fontsize=10, frameon=False,
               bbox_to_anchor=(0.5, 0.93), handlelength=1.8, columnspacing=1.2)
    fig.suptitle("Spacing between neighbouring values (ULP) across magnitudes", fontsize=14, y=0.99)


def ulp_png(fmts: Iterable[str | torch.dtype] = tuple(FORMATS), dpi: int = STATIC_DPI) -> bytes:
    """The ULP figure (:func:`draw_ulp`) as PNG bytes, to save or embed."""
    fig = Figure(figsize=(11.0, 4.8))
    draw_ulp(fig, fmts)
    return figure_png(fig, dpi=dpi)


# --------------------------------------------------------------------------------------------------
# The bit explorer: pure functions
# --------------------------------------------------------------------------------------------------

# Unambiguous (digits, then optionally a point and more digits): a long paste is matched in linear time.
_UNSIGNED = r"(?:(?:\d[\d_]*(?:\.[\d_]*)?|\.\d[\d_]*)(?:e[+-]?\d+)?|inf(?:inity)?|nan)"
MAX_TEXT = 1000  # characters parse_value reads (a float64 has 17 significant digits)
_LITERAL = rf"[+-]?{_UNSIGNED}"
_FRACTION = re.compile(rf"({_LITERAL})/({_LITERAL})", re.IGNORECASE)
_POWER = re.compile(rf"([+-]?)({_UNSIGNED})(?:\*\*|\^)({_LITERAL})", re.IGNORECASE)
_HINT = "try 0.1, -2.5e-3, 1/3, 2**-24, 0x1.8p-3, inf or nan"


class _Unreadable(ValueError):
    """Text that has the shape of a number but no value (``1/0``): the reason goes in the message."""


def _read_number(text: str) -> float:
    """The value of ``text`` (spaces removed); ``ValueError`` if it is none of :func:`parse_value`'s forms."""
    if re.fullmatch(_LITERAL, text, re.IGNORECASE):
        return float(text)
    if text.lower().lstrip("+-").startswith("0x"):
        return float.fromhex(text)
    if match := _FRACTION.fullmatch(text):
        numerator, denominator = float(match[1]), float(match[2])
        if denominator == 0:
            raise _Unreadable("division by zero")
        return numerator / denominator
    if match := _POWER.fullmatch(text):
        sign = -1.0 if match[1] == "-" else 1.0
        base, exponent = float(match[2]), float(match[3])
        try:
            power = base**exponent
        except OverflowError:  # too large for a float64, like float("1e400")
            power = math.inf
        except ZeroDivisionError:
            raise _Unreadable("0 to a negative power") from None
        return sign * power
    raise ValueError(text)


def parse_value(text: str) -> float:
    """The number the learner typed, as a Python float (a float64). No ``eval``: only these forms are read:

    a float literal (``0.1``, ``-2.5e-3``, ``1_000``, ``inf``, ``-nan``), a hex float (``0x1.8p-3``), a
    fraction ``a/b`` and a power ``a**b`` or ``a^b`` of a non-negative base (``-2**-24`` is ``-(2**-24)``,
    as in Python). Spaces are ignored. A power too large for a float64 gives ``±inf``, as ``1e400`` does.
    Raises ``ValueError`` ("could not read ... as a number") for anything else, ``TypeError`` for a
    non-string.

    Example:
        >>> parse_value("0.1"), parse_value("1/4"), parse_value("-2**-3"), parse_value(" -inf ")
        (0.1, 0.25, -0.125, -inf)
    """
    if not isinstance(text, str):
        raise TypeError(f"text must be a string, not {type(text).__name__}")
    if len(text) > MAX_TEXT:
        raise ValueError(f"could not read a text of {len(text)} characters as a number: at most {MAX_TEXT} "
                         f"are read (a float64 keeps about 17 significant digits); {_HINT}")
    shown = text if len(text) <= 60 else text[:50] + "…"
    try:
        return _read_number(text.replace("−", "-").replace(" ", ""))
    except _Unreadable as reason:
        raise ValueError(f"could not read {shown!r} as a number ({reason}); {_HINT}") from None
    except ValueError:
        raise ValueError(f"could not read {shown!r} as a number; {_HINT}") from None


def _check_value(value: object, arg: str = "value") -> float:
    """``value`` as a Python float; ``TypeError`` unless it is a real number (bool excluded)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{arg} must be a real number (a float or int), not {type(value).__name__}")
    return float(value)


@dataclass(frozen=True)
class FormatRow:
    """What one format makes of the typed value: its bits, their meaning and the rounding error.

    ``stored`` is the value the bits encode (the typed value rounded to the format), equal to
    ``(-1)**sign * significand * 2**unbiased_exponent`` for finite values. ``significand`` is
    ``1 + mantissa / 2**mantissa_bits`` for normal numbers, ``mantissa / 2**mantissa_bits`` for subnormals
    and zero; it and ``unbiased_exponent`` are ``None`` for inf and NaN. ``kind`` is one of ``"normal"``,
    ``"subnormal"``, ``"zero"``, ``"inf"``, ``"nan"``. ``below`` and ``above`` are the representable values
    just below and above ``stored`` (``None`` past the finite range, or for inf and NaN). ``note`` says what
    happened on the way in (overflow, saturation, underflow, fewer significant bits, exact).
    """

    fmt: str
    bits: Bits
    sign: int
    biased_exponent: int
    unbiased_exponent: int | None
    mantissa: int
    significand: float | None
    stored: float
    abs_error: float
    rel_error: float
    kind: str
    note: str
    below: float | None
    above: float | None

    @property
    def label(self) -> str:
        """The display name, e.g. ``"FP8 E4M3"``."""
        return LABELS[self.fmt]


@dataclass(frozen=True)
class ExplorerData:
    """The typed ``value`` (a float64), the format whose bits are editable, and one row per format."""

    value: float
    fmt: str
    rows: tuple[FormatRow, ...]

    def row(self, fmt: str | None = None) -> FormatRow:
        """The row of a format (any accepted spelling); by default the editable one."""
        name = self.fmt if fmt is None else canonical_name(fmt)
        return next(row for row in self.rows if row.fmt == name)


def _neighbours(bits: Bits, info: FloatFormat, per_side: int) -> tuple[list[float], list[float]]:
    """The representable values next to the finite value ``bits`` encode: up to ``per_side`` of them below it
    (nearest first) and above it, fewer where the finite range ends. From ±0 the next values either way are
    ±the smallest subnormal, and a step towards zero from ±the smallest subnormal gives ±0 (its sign kept).

    Consecutive magnitude patterns are consecutive magnitudes, so the walk steps the magnitude pattern away
    from or towards zero; :func:`ampcourse.floats.from_bits` decodes every pattern of the walk in one call.
    """
    magnitude_bits = info.bits - 1
    top = (1 << magnitude_bits) - 1  # the largest magnitude pattern (inf or NaN: the walk stops before it)
    walks = []
    for direction in (-1, +1):
        sign, magnitude, walk = int(bits.sign), bits.pattern & top, []
        for _ in range(per_side):
            if magnitude == 0:
                sign, magnitude = int(direction < 0), 1
            else:
                magnitude += 1 if (sign == 0) == (direction > 0) else -1  # away from zero, or towards it
            if magnitude > top:
                break
            walk.append(sign << magnitude_bits | magnitude)
        walks.append(walk)
    decoded = from_bits(torch.tensor(walks[0] + walks[1], dtype=torch.int64), info.name).tolist()
    below, above = decoded[: len(walks[0])], decoded[len(walks[0]) :]
    # Past the largest finite value: the walk ends there (inf in IEEE formats, NaN in E4M3).
    return ([v for v in itertools.takewhile(math.isfinite, below)],
            [v for v in itertools.takewhile(math.isfinite, above)])


def _classify(bits: Bits, stored: float) -> str:
    if math.isnan(stored):
        return "nan"
    if math.isinf(stored):
        return "inf"
    if stored == 0:
        return "zero"
    return "subnormal" if bits.biased_exponent == 0 else "normal"


def _errors(value: float, stored: float) -> tuple[float, float]:
    """Absolute and relative error of ``stored`` against ``value``: 0 when equal (inf included), NaN when
    either is NaN or when the relative error is undefined (``value`` infinite, ``stored`` finite)."""
    if math.isnan(value) or math.isnan(stored):
        return math.nan, math.nan
    if stored == value:
        return 0.0, 0.0
    absolute = abs(stored - value)
    return absolute, absolute / abs(value)  # inf / inf is nan; value is never 0 here (0 rounds to 0)


def _note(value: float, stored: float, kind: str, info: FloatFormat, mantissa: int) -> str:
    if math.isnan(value):
        return "NaN in, NaN out"
    if not info.has_inf and abs(value) > info.max:
        if math.isnan(stored):  # older torch releases: an out-of-range E4M3 cast gives NaN
            return f"past max: {LABELS[info.name]} has no inf, this torch gives NaN"
        return f"past max: {LABELS[info.name]} has no inf, this torch saturates to ±{_format_max(info.max)}"
    if kind == "inf" and math.isfinite(value):
        return f"overflow: past max {_format_max(info.max)} → inf"
    if kind == "zero" and value != 0:
        return "underflow: too small, rounded to 0"
    if kind == "subnormal":
        significant = mantissa.bit_length()
        return f"subnormal: {significant} significant bit{'s' if significant > 1 else ''} of {info.mantissa_bits + 1}"
    return "exact" if stored == value else ""


def _row(value: float, info: FloatFormat) -> FormatRow:
    bits = to_bits(value, info.name)
    stored = from_bits(bits, info.name)
    kind = _classify(bits, stored)
    mantissa = int(bits.mantissa, 2)
    finite = kind not in ("inf", "nan")
    implicit = 1 if kind == "normal" else 0
    significand = math.ldexp(implicit * 2**info.mantissa_bits + mantissa, -info.mantissa_bits) if finite else None
    abs_error, rel_error = _errors(value, stored)
    below, above = _neighbours(bits, info, per_side=1) if finite else ([], [])
    return FormatRow(
        fmt=info.name,
        bits=bits,
        sign=int(bits.sign),
        biased_exponent=bits.biased_exponent,
        unbiased_exponent=bits.unbiased_exponent if finite else None,
        mantissa=mantissa,
        significand=significand,
        stored=stored,
        abs_error=abs_error,
        rel_error=rel_error,
        kind=kind,
        note=_note(value, stored, kind, info, mantissa),
        below=below[0] if below else None,
        above=above[0] if above else None,
    )


def explore(value: float, fmt: str = "fp16") -> ExplorerData:
    """What each of the six formats makes of ``value``: one :class:`FormatRow` per format, in
    :data:`~ampcourse.floats.FORMATS` order. ``fmt`` names the format whose bits the widget lets you edit.

    Rounding is :func:`ampcourse.floats.round_to`'s (float32 first, then nearest-even); the errors are
    measured against ``value`` itself, so even the FP32 row shows the error of storing ``0.1``.

    Example:
        >>> row = explore(0.1, "fp16").row()  # the editable format's row
        >>> print(row.bits)
        0 | 01011 | 1001100110
        >>> row.stored, row.unbiased_exponent, row.significand, row.kind
        (0.0999755859375, -4, 1.599609375, 'normal')
        >>> explore(500.0).row("e4m3").note
        'past max: FP8 E4M3 has no inf, this torch saturates to ±448'
    """
    value = _check_value(value)
    name = canonical_name(fmt)
    return ExplorerData(value, name, tuple(_row(value, info) for info in FORMATS.values()))


def flip_bit(value: float, fmt: str, index: int) -> float:
    """The value whose bits in ``fmt`` are those of ``value`` (rounded to ``fmt`` first) with bit ``index``
    flipped. Bits count from the left: 0 is the sign bit, then the exponent, then the mantissa bits.

    A NaN's bits are its canonical pattern (exponent and mantissa all ones), and a NaN made by a flip is
    returned as ``nan`` (with its sign bit): its payload is not kept, and its sign only as far as torch's
    casts keep it (they may not: ``to_bits(float("-nan"), "fp16")`` shows sign 0 in torch 2.13).

    Example:
        >>> flip_bit(1.0, "fp16", 0), flip_bit(1.0, "fp16", 1), flip_bit(1.0, "fp16", 15)
        (-1.0, inf, 1.0009765625)
    """
    value = _check_value(value)
    info = format_info(fmt)
    if isinstance(index, bool) or not isinstance(index, numbers.Integral):
        raise TypeError(f"index must be an int bit position, not {type(index).__name__}")
    if not 0 <= index < info.bits:
        raise ValueError(f"index must be a bit position from 0 (sign) to {info.bits - 1} for {info.name}, "
                         f"got {index}")
    pattern = to_bits(value, info.name).pattern ^ (1 << (info.bits - 1 - int(index)))
    return from_bits(pattern, info.name)


# --------------------------------------------------------------------------------------------------
# The bit explorer: readout (HTML and plain text) and figure
# --------------------------------------------------------------------------------------------------


def _tint(color: str) -> str:
    """A light background version of a field colour (hex with alpha), black text stays readable on it."""
    return color + "40"


def _number(x: float | None) -> str:
    """A value with every digit it needs (``repr``), or a dash for none."""
    return "—" if x is None else repr(x)


def _error(x: float) -> str:
    if math.isnan(x):
        return "—"
    return "0" if x == 0 else f"{x:.3g}"


def _exponent_text(row: FormatRow, info: FloatFormat) -> str:
    if row.kind in ("inf", "nan"):
        return f"{row.biased_exponent} (all ones)"
    if row.biased_exponent == 0:
        return f"0 → 1 − {info.bias} = {row.unbiased_exponent}"
    return f"{row.biased_exponent} − {info.bias} = {row.unbiased_exponent}"


def _mantissa_text(row: FormatRow) -> str:
    if row.significand is None:
        return f"{row.mantissa} ({'inf' if row.kind == 'inf' else 'NaN'})"
    return f"{row.mantissa} → {row.significand!r}"


def _columns(data: ExplorerData) -> list[tuple[FormatRow, list[str]]]:
    """The cells of each row (shared by the HTML and the plain-text tables)."""
    table = []
    for row in data.rows:
        info = format_info(row.fmt)
        table.append((row, [
            row.label, str(row.bits), row.kind, "−" if row.sign else "+", _exponent_text(row, info),
            _mantissa_text(row), _number(row.stored), _error(row.abs_error), _error(row.rel_error), row.note,
        ]))
    return table


_HEADERS = ["format", "bits: s | exponent | mantissa", "class", "sign", "exponent: biased − bias",
            "mantissa → significand", "stored value", "abs error", "rel error", "note"]


def _bits_html(bits: Bits) -> str:
    parts = (f'<span class="bits" style="background:{_tint(FIELD_COLORS[field])}">{getattr(bits, field)}</span>'
             for field in _FIELDS)
    return " | ".join(parts)


# Cells wrap (a field of bits stays whole; a long stored value may break between digits), so the table
# fits a 1280-px window with JupyterLab's file browser open (it was 1266 px wide and lost its last columns).
_TABLE_CSS = (".ampcourse-l01 th, .ampcourse-l01 td {padding:1px 5px; text-align:left; white-space:normal;"
              " vertical-align:top; line-height:1.3}"
              " .ampcourse-l01 td:nth-child(7) {word-break:break-all; min-width:6em}"
              " .ampcourse-l01 .bits {white-space:nowrap}"
              " .ampcourse-l01 td:last-child {min-width:7em}"
" .ampcourse-l01 tr.editable {background:#f0f0f0}")


def explorer_html(data: ExplorerData) -> str:
    """The readout: one table row per format, the editable format's row highlighted."""
    header = "".join(f"<th>{html.escape(name)}</th>" for name in _HEADERS)
    body = []
    for row, cells in _columns(data):
        texts = [html.escape(text) for text in cells]
        texts[0] = f"<b>{texts[0]}</b>" + (" ✎" if row.fmt == data.fmt else "")
        texts[1] = f'<span style="font-family:monospace">{_bits_html(row.bits)}</span>'
        editable = ' class="editable"' if row.fmt == data.fmt else ""
        body.append(f"<tr{editable}>" + "".join(f"<td>{text}</td>" for text in texts) + "</tr>")
    return (f"<style>{_TABLE_CSS}</style>"
            f"<div><b>your value: {html.escape(repr(data.value))}</b> — as each format stores it "
            f"(round to nearest, ties to even; value = (−1)<sup>sign</sup> × significand × "
            f"2<sup>exponent</sup>). ✎ marks the format whose bits you can click.</div>"
            f'<div style="overflow-x:auto"><table class="ampcourse-l01" style="border-collapse:collapse;'
            f'font-size:85%"><tr>{header}</tr>{"".join(body)}</table></div>')


def explorer_text(data: ExplorerData) -> str:
    """The readout as plain text (for saved notebooks where no kernel runs)."""
    table = [_HEADERS] + [[f"{cells[0]}{' *' if row.fmt == data.fmt else ''}", *cells[1:]]
                          for row, cells in _columns(data)]
    widths = [max(len(line[i]) for line in table) for i in range(len(_HEADERS))]
    lines = ["  ".join(text.ljust(width) for text, width in zip(line, widths, strict=True)).rstrip()
             for line in table]
    return "\n".join([f"your value: {data.value!r}  (* = the format whose bits are editable)", *lines])


def _labels(values: list[float]) -> list[str]:
    """Tick labels for neighbouring values: exact when that is short (``0.078125``, ``448.0``), else two
    significant digits more than it takes to tell them apart, so that no label reads like a rounder number
    than it is (``0.100037``, not ``0.1``)."""
    exact = [repr(v) for v in values]
    if max(len(text) for text in exact) <= 9:
        return exact
    for digits in range(1, 16):
        if len({f"{v:.{digits}g}" for v in values}) == len(set(values)):
            return [f"{v:.{digits + 2}g}" for v in values]
    return [repr(v) for v in values]


def _ticks(centre: float, info: FloatFormat, per_side: int = 2) -> list[float]:
    """``centre`` (a finite representable value) and up to ``per_side`` representable values on each side of
    it, ascending."""
    below, above = _neighbours(to_bits(centre, info.name), info, per_side)
    return [*reversed(below), centre, *above]


_BAND = {"ymin": 0.1, "ymax": 0.75, "alpha": 0.25, "linewidth": 0}
"""How the bands stand on the number line: from 10 % to 75 % of the axes' height, light, without an edge."""


def draw_explorer(fig: Figure, data: ExplorerData) -> str:
    """Draw where the typed value lands among its representable neighbours in the editable format, and
    return the readout table (HTML).

    Ticks mark the representable values around the stored one (around ±max when the value overflowed to
    ±inf). The blue band is the stretch of the line that rounds to the stored value; a vermillion band, the
    stretch that overflows to ±inf. The triangle is the typed value, or an arrow at the edge when it lies
    far off (as ``1e10`` or ``-inf`` do).

    Every artist any value needs is made here once, and :func:`update_explorer` sets them to ``data`` (as it
    does at every later move), hiding those this value does not use: a move changes artists instead of making
    axes, ticks and a legend anew. ``live(fig)["dynamic"]`` lists what a move changes, the x axis among them
    (the line is centred on the value), so the widget's SVG redraws only those over a cached background.
    """
    if not isinstance(data, ExplorerData):
        raise TypeError(f"data must be the ExplorerData that explore() returns, not {type(data).__name__}")
    fig.subplots_adjust(left=0.03, right=0.97, bottom=0.19, top=0.62)
    ax = fig.subplots()
    ax.set_yticks([])
    for side in ("left", "right", "top"):
        ax.spines[side].set_visible(False)
    ax.set_ylim(-1, 1.3)
    # Made in the order that decides the drawing order among artists of one zorder: bands, line, marks, texts.
    parts = {
        "stored_band": ax.axvspan(0, 1, color=COLORS["sky"], label="rounds to the stored value", **_BAND),
        "inf_right": ax.axvspan(0, 1, color=COLORS["vermillion"], label="rounds to ±inf", **_BAND),
        "inf_left": ax.axvspan(0, 1, color=COLORS["vermillion"], label="rounds to ±inf", **_BAND),
        "line": ax.axhline(0, color="0.5", linewidth=0.8, zorder=0),
        "ticks": ax.plot([], [], "|", color=COLORS["blue"], markersize=22, markeredgewidth=2)[0],
        "stored": ax.plot([], [], "|", color=COLORS["blue"], markersize=34, markeredgewidth=4)[0],
        "typed_line": ax.plot([], [], ":", color=COLORS["vermillion"], linewidth=1.5)[0],
        "typed": ax.plot([], [], "v", color=COLORS["vermillion"], markersize=11, label="your value")[0],
        "off_right": ax.annotate("", xy=(0.995, 1.05), xycoords=("axes fraction", "data"), ha="right",
                                 va="center", color=COLORS["vermillion"], fontsize=10),
        "off_left": ax.annotate("", xy=(0.005, 1.05), xycoords=("axes fraction", "data"), ha="left",
                                va="center", color=COLORS["vermillion"], fontsize=10),
        "nan_text": ax.text(0.5, 0.3, "", transform=ax.transAxes, ha="center", va="center", fontsize=11),
        "bottom": ax.spines["bottom"],
    }
    title = fig.suptitle("", fontsize=12, y=0.98)
    detail = fig.text(0.5, 0.835, "", ha="center", va="center", fontsize=10, color="0.25")
    live(fig).update(ax=ax, parts=parts, detail=detail, title=title, legend_labels=None,
                     dynamic=[*parts.values(), ax.xaxis, title, detail])
    return update_explorer(fig, data)


def _is_nan(data: ExplorerData) -> bool:
    return data.row().kind == "nan" or math.isnan(data.value)


def _show_span(band: Rectangle, low: float, high: float) -> None:
    """Show ``band`` (made by ``axvspan``) from ``low`` to ``high`` on the x axis, as ``axvspan`` would."""
    band.set_x(low)
    band.set_width(high - low)
    band.set_visible(True)


def _set_legend(ax, handles: list, artists: dict) -> None:
    """Give ``ax`` a legend of ``handles`` (none for an empty list), made anew only when its entries change."""
    labels = tuple(handle.get_label() for handle in handles)
    if artists["legend_labels"] == labels:
        return
    if ax.get_legend() is not None:
        ax.get_legend().remove()
    if handles:
        ax.legend(handles=handles, loc="lower left", bbox_to_anchor=(0.0, 0.98), ncol=3, fontsize=10,
                  frameon=False)
    artists["legend_labels"] = labels


def update_explorer(fig: Figure, data: ExplorerData) -> str:
    """Set the number line of a figure :func:`draw_explorer` made to ``data``, and return the readout table.

    Every move sets every part (what this value does not show is hidden), so the figure is the one a fresh
    :func:`draw_explorer` of ``data`` makes, whatever values came before (the widget tests check this).
    """
    if not isinstance(data, ExplorerData):
        raise TypeError(f"data must be the ExplorerData that explore() returns, not {type(data).__name__}")
    artists = live(fig)
    if "parts" not in artists:
        raise ValueError("fig must be a figure that draw_explorer drew (its artists are what update_explorer sets)")
    ax, parts = artists["ax"], artists["parts"]
    row, info = data.row(), format_info(data.fmt)
    name, typed = LABELS[data.fmt], data.value
    for part in parts.values():
        part.set_visible(False)
    if _is_nan(data):
        ax.set_xlim(0, 1)
        ax.set_xticks([])
        nan_bits = "exponent and mantissa all ones" if not info.has_inf else "exponent all ones, mantissa not 0"
        parts["nan_text"].set_text(f"NaN is not on the number line.\n{name} NaNs: {nan_bits}.")
        parts["nan_text"].set_visible(True)
        _set_legend(ax, [], artists)
        fig.suptitle(f"{name}: {typed!r} → nan", fontsize=12, y=0.97)
        artists["detail"].set_text("")
        return explorer_html(data)

    parts["bottom"].set_visible(True)
    centre = row.stored if math.isfinite(row.stored) else math.copysign(info.max, row.stored)
    ticks = _ticks(centre, info)
    span = ticks[-1] - ticks[0]
    left, right = ticks[0] - 0.12 * span, ticks[-1] + 0.12 * span
    # IEEE formats: from max + ulp/2 on, values overflow to inf. Show that edge when ±max is in view.
    overflow = info.max + ulp(info.max, data.fmt) / 2 if info.has_inf else None
    if overflow is not None:
        if info.max in ticks:
            right = max(right, overflow + 0.6 * (overflow - info.max))
        if -info.max in ticks:
            left = min(left, -overflow - 0.6 * (overflow - info.max))
    near = math.isfinite(typed) and left - span < typed < right + span
    if near:  # widen the view to show the typed value
        left, right = min(left, typed - 0.08 * span), max(right, typed + 0.08 * span)
    ax.set_xlim(left, right)

    if math.isfinite(row.stored):  # halfway to each neighbour; E4M3 saturates: no outer end at ±max
        half_gap = ulp(row.stored, data.fmt) / 2
        low = (row.stored + row.below) / 2 if row.below is not None else left if not info.has_inf else None
        high = (row.stored + row.above) / 2 if row.above is not None else right if not info.has_inf else None
        _show_span(parts["stored_band"], row.stored - half_gap if low is None else low,
                   row.stored + half_gap if high is None else high)
    if overflow is not None:
        if overflow < right:
            _show_span(parts["inf_right"], overflow, right)
        if -overflow > left:
            _show_span(parts["inf_left"], left, -overflow)
    parts["line"].set_visible(True)
    parts["ticks"].set_data(ticks, [0] * len(ticks))
    parts["ticks"].set_visible(True)
    if math.isfinite(row.stored):
        parts["stored"].set_data([row.stored], [0])
        parts["stored"].set_visible(True)
    ax.set_xticks(ticks, _labels(ticks), fontsize=10)

    if near:
        parts["typed_line"].set_data([typed, typed], [0, 0.5])
        parts["typed"].set_data([typed], [0.6])
        parts["typed_line"].set_visible(True)
        parts["typed"].set_visible(True)
    else:
        at_right = typed > right
        off = parts["off_right" if at_right else "off_left"]
        off.set_text(f"your value, {typed:.6g}, is off this way {'→' if at_right else '←'}")
        off.set_visible(True)
    overflow_band = next((parts[side] for side in ("inf_right", "inf_left") if parts[side].get_visible()), None)
    _set_legend(ax, [handle for handle in (parts["stored_band"], overflow_band, parts["typed"])
                     if handle is not None and handle.get_visible()], artists)

    if math.isinf(row.stored) or row.note.startswith("past max"):
        detail = row.note
    elif row.stored == typed:
        detail = "exact"
    else:
        detail = f"error {_error(row.abs_error)};  neighbours here {ulp(row.stored, data.fmt):.3g} apart"
    fig.suptitle(f"{name}: {typed!r} → {row.stored!r}", fontsize=12, y=0.98)
    artists["detail"].set_text(detail)
    return explorer_html(data)


# --------------------------------------------------------------------------------------------------
# The bit explorer: the widget
# --------------------------------------------------------------------------------------------------

# A pressed toggle (a 1 bit) gets its field's colour. ToggleButton has no colour setting of its own, so this is
# page CSS (in an HTML widget), more specific than ipywidgets' own ``.jupyter-button.mod-active``; where it does
# not apply, the coloured borders and the 0/1 labels still tell the fields and the bits apart.
_TOGGLE_CSS = "".join(
    f".jupyter-button.ampcourse-bit-{field}.mod-active {{background-color:{color}; color:{text}}}"
    for (field, color), text in zip(FIELD_COLORS.items(), ("white", "white", "black"), strict=True)
)


def _value_text(value: object) -> str:
    """What the value box shows for ``value``: a string as typed, a number as its ``repr`` (``-nan`` for a
    NaN with the sign bit set, which ``repr`` would drop)."""
    if isinstance(value, str):
        return value
    number = _check_value(value)
    return "-nan" if math.isnan(number) and math.copysign(1.0, number) < 0 else repr(number)


class BitExplorer(LivePlot):
    """Float Toy for six formats: type a value or click its bits, see every format's bits and errors.

    Controls: ``value`` (a Text box; read with :func:`parse_value` when you press Enter or leave it) and
    ``fmt`` (a Dropdown: whose bits the toggles show). ``toggles`` are the bit buttons of that format, left to
    right (sign first); setting one's ``.value`` — a click — flips that bit with :func:`flip_bit`. Unreadable
    text shows a message in the readout and keeps the last good value.

    ``set(value=..., fmt=...)`` moves the controls from code: ``value`` may be a number or text,
    ``fmt`` any accepted format spelling.
    """

    def __init__(self, value: float | str = 0.1, fmt: str = "fp16") -> None:
        text = _value_text(value)
        self._value = parse_value(text)  # raises ValueError for unreadable text: a programming error here
        value_box = widgets.Text(value=text, description="value", continuous_update=False,
                                 placeholder="0.1, 65504, 1e-8, 1/3, 2**-24, -inf, nan",
                                 layout=widgets.Layout(width="320px"))
        fmt_menu = widgets.Dropdown(options=[(LABELS[name], name) for name in FORMATS], value=canonical_name(fmt),
                                    description="click bits of", style={"description_width": "initial"})
        # One pool of toggle buttons, enough for the widest format, regrouped when the format changes:
        # cheaper than making new widgets, and their callbacks stay bound to their positions.
        widest = max(info.bits for info in FORMATS.values())
        self._pool = [widgets.ToggleButton(layout=widgets.Layout(width="26px", padding="0", margin="1px"))
                      for _ in range(widest)]
        for index, toggle in enumerate(self._pool):
            toggle.observe(partial(self._on_toggle, index), names="value")
        self._groups = {field: widgets.HBox() for field in _FIELDS}
        self._group_labels = {field: widgets.HTML() for field in _FIELDS}
        self._layout_fmt: str | None = None
        self._syncing = False
        bit_row = widgets.HBox([widgets.VBox([self._group_labels[field], self._groups[field]])
                                for field in _FIELDS], layout=widgets.Layout(flex_flow="row wrap"))
        self.bit_row = widgets.VBox([widgets.HTML(f"<style>{_TOGGLE_CSS}</style>"), bit_row])
        super().__init__(explore, draw_explorer, {"value": value_box, "fmt": fmt_menu},
                         figsize=(8.0, 2.5), title="bit explorer", update=update_explorer)
        notice, controls, *rest = self.children
        self.children = (notice, controls, self.bit_row, *rest)

    @property
    def toggles(self) -> list[widgets.ToggleButton]:
        """The bit buttons of the editable format, left to right (sign bit first)."""
        return self._pool[: format_info(self.controls["fmt"].value).bits]

    def refresh(self) -> None:
        """Read the value box (keeping the last good value if it is unreadable), recompute, redraw, and set
        the bit buttons to the new bits."""
        problem = ""
        try:
            self._value = parse_value(self.controls["value"].value)
        except ValueError as error:
            problem = (f'<div style="color:{COLORS["vermillion"]};font-weight:bold">⚠ {html.escape(str(error))}. '
                       f"Still showing the last good value, {html.escape(repr(self._value))}.</div>")
        self.data = self.compute(value=self._value, fmt=self.controls["fmt"].value)
        self.readout.value = problem + self.render(self.data)
        self._sync_toggles()

    def set(self, **values: Any) -> None:
        """Move controls from code: ``value`` (a number or text, as if typed) and/or ``fmt`` (any spelling)."""
        if "value" in values:
            values["value"] = _value_text(values["value"])
        if "fmt" in values:
            values["fmt"] = canonical_name(values["fmt"])
        super().set(**values)

    def _sync_toggles(self) -> None:
        """Show the editable format's bits on the toggles, regrouping them first if the format changed."""
        info = format_info(self.data.fmt)
        self._syncing = True
        try:
            if self._layout_fmt != info.name:
                self._regroup(info)
            digits = "".join(getattr(self.data.row().bits, field) for field in _FIELDS)
            for toggle, digit in zip(self._pool, digits, strict=False):
                toggle.value = digit == "1"
                toggle.description = digit
                toggle.style.font_weight = "bold" if digit == "1" else "normal"
        finally:
            self._syncing = False

    def _regroup(self, info: FloatFormat) -> None:
        start = 0
        for field, width in _fields(info):
            group = self._pool[start : start + width]
            for offset, toggle in enumerate(group):
                index = start + offset
                for old in _FIELDS:
                    toggle.remove_class(f"ampcourse-bit-{old}")
                toggle.add_class(f"ampcourse-bit-{field}")
                toggle.layout.border = f"2px solid {FIELD_COLORS[field]}"
                toggle.tooltip = _bit_tooltip(info, index)
            self._groups[field].children = group
            name = field if field == "sign" else f"{field} ({width} bits)"
            self._group_labels[field].value = (f'<span style="background:{_tint(FIELD_COLORS[field])};'
                                               f'padding:0 4px;font-weight:bold">{name}</span>')
            start += width
        self._layout_fmt = info.name

    def _on_toggle(self, index: int, change: dict) -> None:
        """A click on bit ``index``: flip it and show the new value (its repr goes in the value box)."""
        if self._syncing or index >= format_info(self.data.fmt).bits:  # a pooled toggle not on show
            return
        self.set(value=flip_bit(self._value, self.data.fmt, index))

    def _repr_mimebundle_(self, **kwargs):
        bundle = super()._repr_mimebundle_(**kwargs)
        bundle["text/plain"] = explorer_text(self.data)
        return bundle


def _bit_tooltip(info: FloatFormat, index: int) -> str:
    """What bit ``index`` (from the left) is worth, for the toggle's tooltip."""
    field = _field_of_bit(info, index)
    if field == "sign":
        return "sign bit: 0 = +, 1 = −"
    if field == "exponent":
        power = info.sign_bits + info.exponent_bits - 1 - index
        return f"exponent bit: adds 2^{power} = {2**power} to the biased exponent (bias {info.bias})"
    position = index - info.sign_bits - info.exponent_bits + 1
    return f"mantissa bit: adds 2^-{position} = {math.ldexp(1.0, -position)!r} to the significand"


def bit_explorer(value: float | str = 0.1, fmt: str = "fp16") -> BitExplorer:
    """The lesson-01 bit explorer: type a value (or click bits of ``fmt``), see it in all six formats."""
    return BitExplorer(value, fmt)


BENCHMARK_MOVES = [
    {"value": "65504"},
    {"value": "65520"},
    {"fmt": "bf16"},
    {"value": "1e-8"},
    {"fmt": "fp8_e4m3", "value": "500"},
    {"fmt": "fp8_e5m2"},
    {"value": "-inf"},
    {"value": "nan"},
    {"fmt": "tf32", "value": "1/3"},
    {"fmt": "fp32", "value": "0.1"},
]
"""Control moves for benchmarks/sliders.py and the registry test: each one changes the readout."""
