"""Tests for the lesson-01 widgets: the bit explorer's pure functions against ampcourse.floats, the widget
driven as the browser drives it, and the two static figures."""

import collections
import functools
import html
import math
import re

import pytest
import torch
from matplotlib.figure import Figure

from ampcourse.floats import FORMATS, format_info, from_bits, representable_values, round_to, to_bits, ulp
from ampcourse.widgets.base import LivePlot
from ampcourse.widgets.lesson01 import (
    BENCHMARK_MOVES,
    BitExplorer,
    bit_explorer,
    bit_layouts_png,
    draw_bit_layouts,
    draw_explorer,
    draw_ulp,
    explore,
    explorer_text,
    flip_bit,
    parse_value,
    ulp_curves,
    ulp_png,
    update_explorer,
)

VALUES = [0.1, 1 / 3, 65504.0, 65520.0, 1e-8, 2.0**-24, 448.0, 500.0, -0.0, math.inf, math.nan, -2.5, 1e-40]
SMALL_FORMATS = ["fp16", "bf16", "fp8_e4m3", "fp8_e5m2"]
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


@functools.cache
def grid(fmt: str) -> list[float]:
    """Every finite value of an 8- or 16-bit format, ascending (±0 once)."""
    return representable_values(fmt).tolist()


def same(a: float, b: float) -> bool:
    """Equal as floats, with NaN equal to NaN and -0.0 different from +0.0."""
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    return a == b and math.copysign(1.0, a) == math.copysign(1.0, b)


# --- explore ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("value", VALUES, ids=repr)
def test_explore_agrees_with_floats(value):
    data = explore(value, "fp16")
    assert same(data.value, value) and data.fmt == "fp16"
    assert [row.fmt for row in data.rows] == list(FORMATS)
    for row in data.rows:
        bits = to_bits(value, row.fmt)
        assert row.bits == bits
        assert (row.sign, row.biased_exponent, row.mantissa) == (int(bits.sign), int(bits.exponent, 2),
                                                                  int(bits.mantissa, 2))
        assert same(row.stored, from_bits(bits, row.fmt))
        if not math.isnan(value):  # NaN's sign is whatever the cast made; the tests of floats pin it down
            assert same(row.stored, round_to(value, row.fmt))
        expected_kind = ("nan" if bits.is_nan else "inf" if bits.is_inf else "zero" if bits.is_zero
                         else "subnormal" if bits.is_subnormal else "normal")
        assert row.kind == expected_kind
        if row.kind in ("inf", "nan"):
            assert row.significand is None and row.unbiased_exponent is None
        else:  # the decoding the table spells out gives back the stored value
            assert row.unbiased_exponent == bits.unbiased_exponent
            assert same(row.stored, (-1) ** row.sign * row.significand * 2.0**row.unbiased_exponent)
            assert (1 <= row.significand < 2) == (row.kind == "normal")
        if math.isfinite(value) and math.isfinite(row.stored):
            assert row.abs_error == abs(row.stored - value)
            if value != 0:
                assert row.rel_error == pytest.approx(row.abs_error / abs(value), rel=1e-15)
        if row.kind in ("normal", "subnormal", "zero") and math.isfinite(value):
            # round to nearest: the error is at most half the gap to a neighbour
            assert row.abs_error <= ulp(row.stored, row.fmt) / 2 or abs(value) > format_info(row.fmt).max


@pytest.mark.parametrize("fmt", SMALL_FORMATS)
@pytest.mark.parametrize("value", VALUES, ids=repr)
def test_explore_neighbours_are_the_adjacent_representable_values(value, fmt):
    row = explore(value, fmt).row()
    if not math.isfinite(row.stored):
        assert row.below is None and row.above is None
        return
    values = grid(fmt)
    where = values.index(row.stored)
    assert row.below == (values[where - 1] if where > 0 else None)
    assert row.above == (values[where + 1] if where + 1 < len(values) else None)


def test_explore_neighbours_in_fp32_match_nextafter():
    for value in (0.1, 1 / 3, 1e-40, -2.5, 0.0):
        row = explore(value, "fp32").row()
        stored = torch.tensor(row.stored, dtype=torch.float32)
        assert row.above == torch.nextafter(stored, torch.tensor(math.inf)).item()
        assert row.below == torch.nextafter(stored, torch.tensor(-math.inf)).item()


def test_explore_notes_name_what_happened():
    notes = {(value, fmt): explore(value, fmt).row().note
             for value, fmt in [(500.0, "fp8_e4m3"), (math.inf, "e4m3"), (65520.0, "fp16"), (1e-8, "fp16"),
                                (2.0**-24, "fp16"), (0.5, "bf16"), (math.nan, "fp32"), (-0.0, "fp16")]}
    assert "saturates to ±448" in notes[500.0, "fp8_e4m3"] and "no inf" in notes[math.inf, "e4m3"]
    assert notes[65520.0, "fp16"] == "overflow: past max 65504 → inf"
    assert notes[1e-8, "fp16"].startswith("underflow")
    assert notes[2.0**-24, "fp16"] == "subnormal: 1 significant bit of 11"
    assert notes[0.5, "bf16"] == notes[-0.0, "fp16"] == "exact"
    assert notes[math.nan, "fp32"] == "NaN in, NaN out"
    saturated = explore(math.inf, "fp8_e4m3").row()
    assert saturated.stored == 448.0 and saturated.abs_error == math.inf and math.isnan(saturated.rel_error)


def test_explore_errors_are_against_the_typed_value():
    data = explore(0.1)
    assert 0 < data.row("fp32").rel_error < 2.0**-24  # even FP32 cannot store 0.1
    assert data.row("fp16").rel_error == data.row("tf32").rel_error  # the same 10-bit mantissa
    assert data.row("fp8_e4m3").rel_error > data.row("bf16").rel_error > data.row("fp16").rel_error


@pytest.mark.parametrize(
    ("args", "error", "words"),
    [
        (("0.1", "fp16"), TypeError, "value must be a real number"),
        ((True, "fp16"), TypeError, "value must be a real number"),
        ((0.1, "fp12"), ValueError, "unknown format 'fp12'; valid formats: fp32, tf32, fp16"),
        ((0.1, 16), TypeError, "fmt must be"),
    ],
)
def test_explore_validates(args, error, words):
    with pytest.raises(error, match=words):
        explore(*args)


# --- flip_bit -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", list(FORMATS))
@pytest.mark.parametrize("value", [1.0, 0.1, -3.5, 0.0, math.inf, 1e-40])
def test_flipping_the_sign_bit_negates(value, fmt):
    stored = round_to(value, fmt)
    assert same(flip_bit(value, fmt, 0), -stored)


def test_flipping_exponent_bits_of_one_in_fp16():
    # 1.0 = 0 | 01111 | 0000000000: the top exponent bit makes 11111 (inf), the next one 00111 (2**-8).
    assert flip_bit(1.0, "fp16", 1) == math.inf
    assert flip_bit(1.0, "fp16", 2) == 2.0**-8
    assert flip_bit(1.0, "fp16", 5) == 0.5  # 01110
    assert flip_bit(1.0, "fp16", 6) == 1.0 + 2.0**-1  # top mantissa bit: adds 2**-1 to the significand
    assert flip_bit(1.0, "fp16", 15) == 1.0 + 2.0**-10
    assert flip_bit(1.0, "bf16", 1) == math.inf and flip_bit(1.0, "fp8_e4m3", 1) == 256.0


@pytest.mark.parametrize("fmt", SMALL_FORMATS)
def test_flipping_twice_is_identity(fmt, figures):
    nan_detours = 0
    values = grid(fmt)
    if len(values) > 1000:  # the 16-bit formats: a spread of values (every one would take minutes)
        values = values[::1103] + values[-5:] + values[:5]
    for value in values + [-0.0]:
        for index in range(format_info(fmt).bits):
            flipped = flip_bit(value, fmt, index)
            if math.isnan(flipped):  # a NaN keeps no payload: its way back is not the same bit
                nan_detours += 1
                continue
            assert same(flip_bit(flipped, fmt, index), value), (value, index, flipped)
    figures(f"flip_bit twice = identity for {len(values) + 1} {fmt} values x every bit "
            f"({nan_detours} flips give NaN, whose payload is not kept)")


def test_flipping_twice_is_identity_in_the_wide_formats():
    for fmt in ("fp32", "tf32"):
        for value in (0.1, 1 / 3, -65504.0, 1e-40, 3e38):
            stored = round_to(value, fmt)
            for index in range(format_info(fmt).bits):
                flipped = flip_bit(value, fmt, index)
                if not math.isnan(flipped):
                    assert same(flip_bit(flipped, fmt, index), stored)


@pytest.mark.parametrize(
    ("args", "error", "words"),
    [
        ((1.0, "fp16", 16), ValueError, "index must be a bit position from 0 .sign. to 15 for fp16, got 16"),
        ((1.0, "fp8_e4m3", -1), ValueError, "index must be a bit position from 0 .sign. to 7"),
        ((1.0, "fp16", 1.0), TypeError, "index must be an int"),
        ((1.0, "fp16", True), TypeError, "index must be an int"),
        (("1.0", "fp16", 0), TypeError, "value must be a real number"),
        ((1.0, "fp9", 0), ValueError, "valid formats"),
    ],
)
def test_flip_bit_validates(args, error, words):
    with pytest.raises(error, match=words):
        flip_bit(*args)


# --- parse_value --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "value"),
    [("0.1", 0.1), ("65504", 65504.0), ("1e-8", 1e-8), (" -2.5E3 ", -2500.0), (".5", 0.5), ("1_000", 1000.0),
     ("-inf", -math.inf), ("Infinity", math.inf), ("-0", -0.0), ("1/3", 1 / 3), ("1 / -4", -0.25),
     ("2**-24", 2.0**-24), ("-2**-24", -(2.0**-24)), ("2^10", 1024.0), ("2**2000", math.inf),
     ("0x1.8p-3", 0.1875), ("−0.5", -0.5), ("1e400", math.inf)],
)
def test_parse_value_reads_numbers(text, value):
    assert same(parse_value(text), value)


def test_parse_value_reads_nan():
    assert math.isnan(parse_value("nan")) and math.isnan(parse_value("-NaN"))


@pytest.mark.parametrize("text", ["abc", "", "1..2", "2**", "import os", "1/0", "0**-1", "0xzz", "(1)"])
def test_parse_value_rejects_other_text(text):
    with pytest.raises(ValueError, match=re.escape(f"could not read {text!r} as a number")):
        parse_value(text)


def test_parse_value_says_why_a_fraction_fails_and_needs_text():
    with pytest.raises(ValueError, match="division by zero"):
        parse_value("1/0")
    with pytest.raises(TypeError, match="text must be a string"):
        parse_value(0.1)


# --- the widget ---------------------------------------------------------------------------------------------


def readout_text(widget: BitExplorer) -> str:
    return html.unescape(widget.readout.value)


def test_typing_a_value_updates_the_readout_and_the_bits():
    widget = bit_explorer()
    before = widget.readout.value
    widget.controls["value"].value = "65504"  # as the browser does when the learner presses Enter
    assert widget.readout.value != before and "65504.0" in readout_text(widget)
    assert "".join(toggle.description for toggle in widget.toggles) == "0111101111111111"
    assert [toggle.value for toggle in widget.toggles] == [d == "1" for d in "0111101111111111"]


def test_clicking_a_bit_flips_it():
    widget = bit_explorer(1.0, "fp16")
    widget.toggles[0].value = True  # click the sign bit, as the browser would
    assert widget.data.value == -1.0 and widget.controls["value"].value == "-1.0"
    assert widget.toggles[0].value and widget.toggles[0].description == "1"
    assert "-1.0" in readout_text(widget)
    widget.toggles[6].value = True  # the top mantissa bit: significand 1.5
    assert widget.data.value == -1.5
    widget.toggles[1].value = True  # the top exponent bit: 11111 with a mantissa: NaN
    assert math.isnan(widget.data.value) and widget.data.row().kind == "nan"
    # Back: the NaN is shown as the canonical x 11111 1111111111 (no payload kept; its sign is whatever
    # torch's cast makes it), so clearing the top exponent bit gives x 01111 1111111111 = ±(2 - 2**-10).
    widget.toggles[1].value = False
    assert abs(widget.data.value) == 2 - 2.0**-10


def test_bad_text_shows_a_message_and_keeps_the_last_good_value():
    widget = bit_explorer(0.5)
    widget.controls["value"].value = "abc"  # must not raise
    assert "could not read 'abc' as a number" in readout_text(widget)
    assert "last good value, 0.5" in readout_text(widget)
    assert widget.data.value == 0.5
    widget.controls["fmt"].value = "bf16"  # the other controls still work meanwhile
    assert widget.data.row().fmt == "bf16" and len(widget.toggles) == 16
    widget.set(value="0.25")
    assert "could not read" not in readout_text(widget) and widget.data.value == 0.25
    with pytest.raises(ValueError, match="could not read 'abc'"):
        bit_explorer("abc")  # from code, a bad start value is a programming error


@pytest.mark.parametrize(("fmt", "widths"), [("fp32", (1, 8, 23)), ("tf32", (1, 8, 10)), ("fp16", (1, 5, 10)),
                                             ("bf16", (1, 8, 7)), ("fp8_e4m3", (1, 4, 3)),
                                             ("fp8_e5m2", (1, 5, 2))])
def test_changing_the_format_regroups_the_toggles(fmt, widths):
    widget = bit_explorer(-0.1, "fp16" if fmt != "fp16" else "fp32")
    widget.controls["fmt"].value = fmt
    assert len(widget.toggles) == sum(widths) == {"tf32": 19}.get(fmt, format_info(fmt).bits)
    assert tuple(len(group.children) for group in widget._groups.values()) == widths
    bits = to_bits(-0.1, fmt)
    assert "".join(toggle.description for toggle in widget.toggles) == bits.sign + bits.exponent + bits.mantissa
    assert "✎" in widget.readout.value


def test_set_takes_numbers_text_and_format_aliases():
    widget = bit_explorer()
    widget.set(value=2.0**-24, fmt="Half")
    assert widget.values() == {"value": repr(2.0**-24), "fmt": "fp16"} and widget.data.row().kind == "subnormal"
    widget.set(value="1/3", fmt=torch.bfloat16)
    assert widget.values() == {"value": "1/3", "fmt": "bf16"}
    with pytest.raises(ValueError, match="unknown control"):
        widget.set(nonsense=1)
    with pytest.raises(ValueError, match="valid formats"):
        widget.set(fmt="fp12")
    with pytest.raises(TypeError, match="value must be a real number"):
        widget.set(value=None)


def test_benchmark_moves_each_change_the_readout():
    widget = bit_explorer()
    assert isinstance(widget, LivePlot) and len(BENCHMARK_MOVES) >= 2
    seen = {(widget.image.value, widget.readout.value)}
    for move in BENCHMARK_MOVES:
        before = widget.readout.value
        widget.set(**move)
        assert widget.values() == {**widget.values(), **move}
        assert widget.readout.value != before, move
        seen.add((widget.image.value, widget.readout.value))
    assert len(seen) == len(BENCHMARK_MOVES) + 1


def test_saved_notebook_gets_the_table_as_text_and_the_figure():
    widget = bit_explorer(0.1, "fp16")
    bundle = widget._repr_mimebundle_()
    text = bundle["text/plain"]
    assert text == explorer_text(widget.data)
    assert "0 | 01011 | 1001100110" in text and "FP16 *" in text and "0.0999755859375" in text
    assert bundle["image/png"]


def test_explorer_figure_draws_every_kind_of_value():
    for value, fmt in [(0.1, "fp16"), (math.nan, "bf16"), (65520.0, "fp16"), (-math.inf, "fp8_e4m3"),
                       (1e10, "bf16"), (0.0, "fp8_e5m2"), (3e38, "fp32"), (-65504.0, "fp16")]:
        fig = Figure()
        readout = draw_explorer(fig, explore(value, fmt))
        assert "<table" in readout and fig.axes
    with pytest.raises(TypeError, match="data must be the ExplorerData"):
        draw_explorer(Figure(), 0.1)


def test_every_move_gives_the_figure_a_fresh_draw_gives():
    """The widget changes the artists draw_explorer made (hiding what a value does not use) instead of drawing
    anew: after any value, from any value before it, the figure is byte for byte the one a fresh draw makes, and
    the layered SVG it shows draws the same elements. The walk crosses every kind of figure: NaN (no number
    line) and back, far values (an arrow), overflow bands on either side, E4M3's saturation, zero."""
    from test_widgets_base import assert_references_resolve, drawn

    from ampcourse.widgets.base import BACKGROUNDS_KEPT, figure_svg

    widget = bit_explorer()
    walk = [{"value": "nan"}, {"value": "65520"}, {"fmt": "e4m3", "value": "500"}, {"value": "-inf"},
            {"value": "1e10"}, {"fmt": "bf16"}, {"value": "-3e38", "fmt": "fp32"}, {"value": "-0.0", "fmt": "fp16"},
            {"value": "2**-24"}, {"value": "-nan"}, {"value": "nan", "fmt": "e5m2"}, {"value": "57344"},
            {"value": "-65504", "fmt": "fp16"}, {"value": "1e-8"}, {"fmt": "tf32", "value": "1/3"}, {"value": "inf"}]
    kept, heads = 0, collections.defaultdict(set)
    for move in walk:
        background, legend = widget._background, widget.figure.live["legend_labels"]
        widget.set(**move)
        fresh = Figure(figsize=widget.figsize)
        assert draw_explorer(fresh, widget.data) == widget.readout.value
        assert figure_svg(widget.figure) == figure_svg(fresh), move
        assert drawn(bytes(widget.image.value)) == drawn(figure_svg(fresh)), move
        if not math.isnan(widget.data.value):  # (a NaN draws no marks: nothing refers to a definition)
            assert_references_resolve(bytes(widget.image.value))
        # The background (axes, legend) is rendered again only when the legend's entries change.
        same_legend = widget.figure.live["legend_labels"] == legend
        assert (widget._background is background) == same_legend, move
        kept += same_legend
        heads[widget.figure.live["legend_labels"]].add(id(widget._background[1]))
    assert widget.redraws == 1 and kept >= 5  # every move was an update; many kept the background
    # A legend shown before brings back the background drawn for it: one background per legend.
    assert all(len(ids) == 1 for ids in heads.values()) and 1 < len(heads) <= BACKGROUNDS_KEPT
    with pytest.raises(ValueError, match="fig must be a figure that draw_explorer drew"):
        update_explorer(Figure(), widget.data)
    with pytest.raises(TypeError, match="data must be the ExplorerData"):
        update_explorer(widget.figure, 0.1)


@pytest.mark.parametrize("fmt", SMALL_FORMATS)
def test_number_line_ticks_are_the_neighbouring_representable_values(fmt):
    """The ticks: the centre and two representable values on each side of it, fewer at the ends of the range."""
    from ampcourse.widgets.lesson01 import _ticks

    info, values = format_info(fmt), grid(fmt)
    for centre in (0.0, info.smallest_subnormal, -info.smallest_subnormal, 1.0, -info.max, info.max,
                   info.smallest_normal, values[-2], values[1]):
        where = values.index(centre)
        assert _ticks(centre, info) == values[max(where - 2, 0) : where + 3], centre
    # Towards zero from -the smallest subnormal comes -0.0 (its sign kept), then +the smallest subnormal.
    ticks = _ticks(-info.smallest_subnormal, info)
    assert math.copysign(1.0, ticks[3]) == -1.0 and ticks[3] == 0 and ticks[4] == info.smallest_subnormal


# --- the static figures -------------------------------------------------------------------------------------


def test_bit_layouts_figure():
    fig = Figure(figsize=(11, 4.2))
    draw_bit_layouts(fig)
    boxes = [patch for patch in fig.axes[0].patches]
    assert len(boxes) == sum(info.bits for info in FORMATS.values()) + 13  # + TF32's 13 ignored bits
    labels = {text.get_text() for text in fig.axes[0].texts}
    assert {"FP16", "1+5+10 = 16 bits", "TF32", "1+8+10 = 19 bits", "FP8 E4M3", "1+4+3 = 8 bits"} <= labels
    png = bit_layouts_png()
    assert png.startswith(PNG_SIGNATURE) and len(png) > 10_000
    with pytest.raises(TypeError, match="fig must be a matplotlib Figure"):
        draw_bit_layouts(None)


def test_ulp_curves_are_floats_ulp():
    curves = ulp_curves()
    assert list(curves) == list(FORMATS)
    for name, curve in curves.items():
        info = format_info(name)
        assert curve.magnitudes[0] == info.smallest_subnormal and curve.magnitudes[-1] == info.max
        assert curve.magnitudes[1] == info.smallest_normal
        assert list(curve.ulps) == [ulp(m, name) for m in curve.magnitudes]
        # a staircase: constant from one point to the next, doubling at each binade above the subnormals
        for low, high, gap in zip(curve.magnitudes[:-1], curve.magnitudes[1:], curve.ulps[:-1], strict=True):
            assert ulp((low + high) / 2, name) == gap
        assert curve.ulps[0] == curve.ulps[1] == info.smallest_subnormal
        assert all(b == 2 * a for a, b in zip(curve.ulps[1:-2], curve.ulps[2:-1], strict=True))
    assert ulp_curves("e4m3")["fp8_e4m3"].ulps[-1] == 32.0


def test_ulp_figure_plots_floats_ulp():
    fig = Figure(figsize=(11, 4.8))
    draw_ulp(fig, ["fp16", "fp8_e4m3"])
    for ax in fig.axes:
        lines = [line for line in ax.get_lines() if (line.get_gid() or "").startswith("ulp:")]
        assert {line.get_gid() for line in lines} == {"ulp:fp16", "ulp:fp8_e4m3"}
        for line in lines:
            fmt = line.get_gid().removeprefix("ulp:")
            for x, y in zip(line.get_xdata(), line.get_ydata(), strict=True):
                assert y == ulp(float(x), fmt)
    png = ulp_png()
    assert png.startswith(PNG_SIGNATURE) and len(png) > 10_000


@pytest.mark.parametrize(("fmts", "error", "words"), [([], ValueError, "at least one format"),
                                                      (["fp12"], ValueError, "valid formats"),
                                                      (3, TypeError, "fmts must be")])
def test_draw_ulp_validates(fmts, error, words):
    with pytest.raises(error, match=words):
        draw_ulp(Figure(), fmts)


def test_e4m3_note_follows_what_the_installed_torch_returns():
    """Older torch releases gave NaN for an out-of-range E4M3 cast: the note must not claim saturation then."""
    from ampcourse.floats import format_info
    from ampcourse.widgets.lesson01 import _note

    info = format_info("fp8_e4m3")
    assert _note(500.0, 448.0, "normal", info, 6).endswith("saturates to ±448")
    assert _note(500.0, math.nan, "nan", info, 0).endswith("this torch gives NaN")
