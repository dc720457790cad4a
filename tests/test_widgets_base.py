"""LivePlot, the widget pattern every lesson uses: one figure, SVG, artist updates, the dead-kernel notice."""

import re
from collections import Counter
from xml.etree import ElementTree

import ipywidgets as widgets
import pytest
from matplotlib.figure import Figure

from ampcourse.widgets import REGISTRY
from ampcourse.widgets.base import (
    CSS_PX_PER_INCH,
    DEAD_MESSAGE,
    STATIC_DPI,
    LivePlot,
    Png,
    figure_png,
    figure_svg,
    layered_svg,
    live,
)


def _draw(fig, k):
    fig.subplots().plot([0, 1], [k, k])
    return f"k = {k}"


def _plot(**kwargs):
    return LivePlot(lambda k: k, _draw, {"k": widgets.IntSlider(value=0, min=0, max=5)}, **kwargs)


def test_one_figure_per_widget_shown_as_svg():
    plot = _plot()
    figure = plot.figure
    plot.set(k=3)
    plot.controls["k"].value = 4  # as the browser does
    assert plot.figure is figure and plot.image.format == "svg+xml"
    svg = bytes(plot.image.value)
    assert svg.lstrip().startswith(b"<?xml") and b"<svg" in svg
    assert plot.readout.value == "k = 4" and plot.redraws == 3  # no update function: a full redraw each move


def test_svg_has_text_as_text_and_no_date():
    fig = Figure(figsize=(2, 1))
    fig.text(0.1, 0.5, "2⁻¹²⁶")
    svg = figure_svg(fig).decode()
    assert "2⁻¹²⁶" in svg and "<dc:date>" not in svg
    assert figure_svg(fig) == svg.encode()  # deterministic: the same figure gives the same bytes


def test_update_is_used_after_the_first_draw():
    calls = []

    def update(fig, k):
        calls.append(k)
        live(fig)["line"].set_ydata([k, k])
        return f"k = {k} (updated)"

    def draw(fig, k):
        (live(fig)["line"],) = fig.subplots().plot([0, 1], [k, k])
        return f"k = {k}"

    plot = LivePlot(lambda k: k, draw, {"k": widgets.IntSlider(value=0, min=0, max=5)}, update=update)
    plot.set(k=2)
    assert calls == [2] and plot.redraws == 1 and plot.readout.value == "k = 2 (updated)"


@pytest.mark.parametrize("name", [n for n, (factory, _) in sorted(REGISTRY.items())
                                  if factory().update is not None])
def test_updated_figure_is_the_figure_a_full_draw_gives(name):
    """After any sequence of moves, the artist updates show exactly what drawing the same data from scratch
    shows (byte for byte: same SVG)."""
    factory, moves = REGISTRY[name]
    widget = factory()
    for move in moves:
        widget.set(**move)
        fresh = Figure(figsize=widget.figsize)
        text = widget.draw(fresh, widget.data)
        assert widget.redraws == 1, "a move redrew the whole figure instead of updating it"
        assert figure_svg(widget.figure) == figure_svg(fresh), f"{name}: update and draw differ after {move}"
        assert drawn(bytes(widget.image.value)) == drawn(figure_svg(fresh)), (
            f"{name}: the SVG shown (background + dynamic layer) differs from a full render after {move}")
        if b"href=" in bytes(widget.image.value) or b"url(#" in bytes(widget.image.value):
            assert_references_resolve(bytes(widget.image.value))
        assert widget.readout.value == text


def drawn(svg: bytes) -> Counter:
    """What an SVG draws, as a multiset of its drawing elements (tag, attributes, text), ignoring element
    ids and definitions — and the order, which is all a layered SVG may change."""
    root = ElementTree.fromstring(svg)
    for defs in root.iter("{http://www.w3.org/2000/svg}defs"):
        defs.clear()
    leaves = Counter()
    for element in root.iter():
        if element.tag.rsplit("}", 1)[-1] in ("path", "use", "text", "rect", "image", "tspan"):
            attributes = tuple(sorted((k, v) for k, v in element.attrib.items() if k != "id"))
            leaves[(element.tag, attributes, (element.text or "").strip())] += 1
    return leaves


def assert_references_resolve(svg: bytes) -> None:
    """Every ``href="#id"`` / ``url(#id)`` in the SVG names an element the SVG defines."""
    text = svg.decode()
    ids = set(re.findall(r' id="([^"]+)"', text))
    refs = set(re.findall(r'href="#([^"]+)"', text)) | set(re.findall(r"url\(#([^)]+)\)", text))
    assert refs and refs <= ids, f"undefined: {sorted(refs - ids)}"


def test_layered_svg_draws_what_a_full_render_draws():
    """The check behind the widgets' fast path, on a figure whose background changes between moves."""
    fig = Figure(figsize=(4, 2))
    ax = fig.subplots()
    (line,) = ax.plot([0, 1], [0, 1])
    title = ax.set_title("k = 0")
    background = None
    for k, ylim in ((1, (0, 2)), (2, (0, 2)), (3, (0, 5))):
        line.set_ydata([0, k])
        title.set_text(f"k = {k}")
        ax.set_ylim(*ylim)
        before = background
        svg, background = layered_svg(fig, [line, title], background)
        assert drawn(svg) == drawn(figure_svg(fig))
        if k == 2:
            assert background is before  # only the dynamic artists changed: the background was reused
        if k == 3:
            assert background is not before  # the y limits changed: a new background
    # Back to the first limits: the background drawn for them is kept, and used again.
    first_head = before[1]
    ax.set_ylim(0, 2)
    svg, background = layered_svg(fig, [line, title], background)
    assert background[1] is first_head and drawn(svg) == drawn(figure_svg(fig))


def test_an_axis_in_the_dynamic_layer_keeps_the_background_while_its_limits_change():
    """Lessons 01 and 06 list an axis (``ax.yaxis``) as dynamic: it is drawn with the dynamic layer, so new limits
    and ticks reuse the background, and the SVG still draws what a full render draws."""
    fig = Figure(figsize=(4, 2))
    ax = fig.subplots()
    (line,) = ax.plot([0, 1], [0, 1])
    ax.set_title("static")
    ax.set_ylabel("y")
    background, ticks = None, set()
    for k, ylim in ((1, (0, 2)), (2, (0, 5)), (3, (-1, 50)), (4, (0, 0.002))):
        line.set_ydata([0, k])
        ax.set_ylim(*ylim)
        ticks.add(tuple(ax.get_yticks()))
        before = background
        svg, background = layered_svg(fig, [line, ax.yaxis], background)
        assert drawn(svg) == drawn(figure_svg(fig)), ylim
        if before is not None:
            assert background is before, f"new y limits {ylim} rendered a new background"
    assert len(ticks) == 4  # the ticks did change, and were drawn right each time
    # Back to limits shown before: the axis's drawing is reused, and still draws what a full render draws,
    # with every definition it refers to (the tick marks are <use> elements of a <defs> path).
    cached = dict(fig.live["axis_svg"])
    ax.set_ylim(0, 5)
    svg, _ = layered_svg(fig, [line, ax.yaxis], background)
    assert fig.live["axis_svg"] == cached and drawn(svg) == drawn(figure_svg(fig))
    assert_references_resolve(svg)
    # Not listed, the same axis decides the background: new limits, new background.
    _, first = layered_svg(fig, [line], None)
    ax.set_ylim(0, 7)
    svg, second = layered_svg(fig, [line], first)
    assert second is not first and drawn(svg) == drawn(figure_svg(fig))


def test_dead_kernel_notice_is_in_the_widget_and_hidden_by_css():
    plot = _plot()
    assert plot.children[0] is plot.notice and DEAD_MESSAGE in plot.notice.value
    assert ".jupyter-widgets-disconnected .ampcourse-dead-msg{display:block" in plot.notice.value
    assert ".ampcourse-dead-msg{display:none}" in plot.notice.value
    assert "ampcourse-live" in plot._dom_classes


def test_saved_notebook_gets_a_png_and_a_text_line():
    bundle = _plot(title="demo")._repr_mimebundle_()
    assert bundle["text/plain"] == "[interactive figure: demo]" and bundle["image/png"]


def test_arguments_are_checked():
    with pytest.raises(TypeError, match="update must be a function"):
        _plot(update=3)
    with pytest.raises(ValueError, match="figsize must be"):
        _plot(figsize=(0, 3))
    with pytest.raises(ValueError, match="dpi must be"):
        figure_png(Figure(), dpi=0)


def test_static_figures_are_sharp_on_hidpi_and_show_at_their_css_size():
    """A static figure is rendered at two pixels per CSS pixel and tells the notebook its CSS width; its text
    version (compared by nbval) names only the size, the same on every machine."""
    fig = Figure(figsize=(7.5, 3.2))
    fig.subplots().plot([0, 1], [0, 1])
    png = figure_png(fig)
    assert isinstance(png, Png) and png.startswith(b"\x89PNG")
    assert png.pixel_size == (round(7.5 * STATIC_DPI), round(3.2 * STATIC_DPI))
    data, metadata = png._repr_png_()
    assert data == bytes(png) and metadata == {"width": round(7.5 * CSS_PX_PER_INCH)}
    assert png.pixel_size[0] == 2 * metadata["width"]
    assert repr(png) == "[figure: 1440 × 614 px PNG, shown 720 px wide]"


def test_set_refuses_a_value_its_control_would_change_or_reject():
    """Audit r3, finding 28: lesson 10's widget raised traitlets' TraitError for ``set(history=3)`` and clamped
    ``set(margin=99)`` to 4 without a word. Now each is a ValueError/TypeError naming the control and what it
    allows, and nothing moved."""
    from ampcourse.widgets.lesson10 import delayed_scaling

    plot = delayed_scaling()
    before = plot.values()
    with pytest.raises(ValueError, match=r"history must be one of \[.*16.*\] \(got 3\)"):
        plot.set(history=3)
    with pytest.raises(ValueError, match=r"margin must be an int from 0 to 4 \(got 99\)"):
        plot.set(margin=99)
    with pytest.raises(TypeError, match=r"margin must be an int from 0 to 4 \(got 1.5\)"):
        plot.set(margin=1.5)
    with pytest.raises(TypeError, match=r"margin must be an int .*\(got True\)"):
        plot.set(margin=True)
    with pytest.raises(ValueError, match="margin"):  # a bad value among good ones: none of them is applied
        plot.set(history=before["history"], margin=-1)
    assert plot.values() == before
    plot.set(margin=4)  # the ends of the range are allowed
    assert plot.values()["margin"] == 4
    check = LivePlot(lambda on: on, lambda fig, on: None, {"on": widgets.Checkbox()})
    with pytest.raises(TypeError, match="on must be .*bool.*'x'"):
        check.set(on="x")


def test_png_refuses_bytes_that_are_not_png_and_a_width_out_of_range():
    """Audit r3, finding 28: ``Png(b'x', -1)`` was accepted (its repr then read a header that is not there)."""
    good = figure_png(Figure(figsize=(1, 1)), dpi=20)
    with pytest.raises(ValueError, match="data must be PNG bytes"):
        Png(b"x", 96)
    with pytest.raises(ValueError, match="data must be PNG bytes"):
        Png("not bytes", 96)
    for width in (-1, 0, True, 1.5, 10**6):
        with pytest.raises(ValueError, match=rf"css_width must be an int from 1 to \d+ .*got {width!r}"):
            Png(bytes(good), width)
    assert Png(bytes(good), 96).css_width == 96
