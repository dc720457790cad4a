"""The one widget pattern of the course: controls → ``compute`` → data → ``draw`` → figure.

The figure is a plain :class:`matplotlib.figure.Figure` — one per widget, kept for the widget's life —
rendered to **SVG** and shown in an ``ipywidgets.Image``: no pyplot state, no extra JupyterLab extension.
SVG because it is crisp at any displayed width and on HiDPI screens, and it is *cheaper* than the PNG
it replaced: matplotlib writes an SVG with text as ``<text>`` (``svg.fonttype = "none"``) in about half
the time it rasterises and compresses an 80-dpi PNG (``benchmarks/sliders.py`` prints both), where a PNG
sharp on a device-pixel-ratio-2 screen would cost ~1.5× more again.

A widget's ``draw(fig, data)`` builds its axes on the (cleared) figure. When it also gives an
``update(fig, data)``, every later move calls that instead: it changes the artists ``draw`` made
(``set_data``, ``set_text``, …, found in ``fig.live``, a dict ``draw`` fills) rather than building new
axes and ticks — the expensive part of a redraw. When ``draw`` also lists the artists a move changes in
``fig.live["dynamic"]``, the SVG is sent in two layers (:func:`layered_svg`): a background with everything
else, rendered again only when the axes or a static text change (limits, ticks, labels), and the dynamic
artists drawn over it — so a typical move costs a few ms of SVG instead of ~25 ms. Widgets keep their axes
steady to profit: y limits snap to round values (whole multiples, 1-2-5 steps), legends name series, not
values. Where an axis must follow the data (lesson 01's number line is centred on the value; lesson 06's
bars span decades), the widget lists the axis itself (``ax.xaxis``) as dynamic: it is drawn with the
dynamic layer, and its limits and ticks no longer decide the background; its drawing is kept by limits and
tick labels, for a move that comes back to them, and the last few backgrounds are kept by their key too.
A test renders every widget's moves both ways and requires the same drawing elements.

The saved notebook also carries a PNG (and a text line) beside the live widget, so the figure shows
where no kernel runs (GitHub, nbviewer, a notebook opened before running it).

In the browser, rapid moves coalesce on their own: while the kernel is busy with one move, ipywidgets
keeps only the newest value of a control and sends it when the kernel is idle again, so the last figure
always shows the last value (``benchmarks/browser_sliders.py`` checks this with bursts of key presses).
"""

from __future__ import annotations

import base64
import io
import numbers
from collections.abc import Callable
from typing import Any

import ipywidgets as widgets
import matplotlib
from matplotlib.axis import Axis
from matplotlib.figure import Figure
from matplotlib.text import Text
from traitlets import TraitError

# Okabe–Ito: a palette that stays distinguishable with the common colour-vision deficiencies.
COLORS = {
    "black": "#000000", "orange": "#E69F00", "sky": "#56B4E9", "green": "#009E73",
    "yellow": "#F0E442", "blue": "#0072B2", "vermillion": "#D55E00", "purple": "#CC79A7",
}

CSS_PX_PER_INCH = 96  # how browsers size an SVG whose width is given in points (72 per inch)
MAX_ZOOM = 1.35  # a live figure grows with the notebook up to this factor of its natural size

# Shown only while the widget's kernel connection is gone: ipywidgets gives every view of a model whose
# comm is closed (kernel restarted or shut down) the class ``jupyter-widgets-disconnected``.
DEAD_CSS = (
    ".ampcourse-dead-msg{display:none}"
    ".jupyter-widgets-disconnected .ampcourse-dead-msg{display:block;color:#fff;background:#D55E00;"
    "padding:6px 10px;margin:4px 0;border-radius:4px;font-weight:bold}"
    ".ampcourse-live.jupyter-widgets-disconnected img{opacity:0.35}"
    # ipywidgets gives HTML content the controls' line height (28 px): wrapped readout lines would sit far apart.
    ".ampcourse-live .widget-html-content{line-height:1.4;white-space:normal}"
)
DEAD_MESSAGE = (
    "This figure is no longer connected to Python (the kernel was restarted or shut down), so moving "
    "the controls changes nothing. Run this cell again (Shift+Enter) to bring it back."
)


STATIC_DPI = 2 * CSS_PX_PER_INCH  # static figures: two pixels per CSS pixel, sharp on a HiDPI screen too
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
MAX_CSS_WIDTH = 30 * CSS_PX_PER_INCH  # the widest figure LivePlot allows (30 inches)


class Png(bytes):
    """PNG bytes that show themselves in a notebook at :data:`CSS_PX_PER_INCH` CSS pixels per inch of the
    figure (JupyterLab shrinks a wider one to the notebook's width): rendered at :data:`STATIC_DPI`, that is
    two image pixels per CSS pixel, so the figure is crisp on a normal and on a HiDPI screen. Its ``repr``
    (the saved notebook's text version) names the size only: the same on every machine."""

    css_width: int

    def __new__(cls, data: bytes, css_width: int) -> Png:
        if not isinstance(data, (bytes, bytearray)) or not bytes(data[:8]) == PNG_SIGNATURE:
            got = bytes(data[:8]) if isinstance(data, (bytes, bytearray)) else type(data).__name__
            raise ValueError(f"data must be PNG bytes (starting with the PNG signature {PNG_SIGNATURE!r}; got {got!r})")
        if isinstance(css_width, bool) or not isinstance(css_width, int) or not 1 <= css_width <= MAX_CSS_WIDTH:
            raise ValueError(f"css_width must be an int from 1 to {MAX_CSS_WIDTH} (CSS pixels; got {css_width!r})")
        png = super().__new__(cls, data)
        png.css_width = css_width
        return png

    @property
    def pixel_size(self) -> tuple[int, int]:
        """(width, height) in image pixels, read from the PNG header."""
        return int.from_bytes(self[16:20], "big"), int.from_bytes(self[20:24], "big")

    def _repr_png_(self):
        return bytes(self), {"width": self.css_width}

    def __repr__(self) -> str:
        width, height = self.pixel_size
        return f"[figure: {width} × {height} px PNG, shown {self.css_width} px wide]"


def figure_png(fig: Figure, dpi: int = STATIC_DPI) -> Png:
    """The figure as PNG bytes (``dpi`` pixels per inch of ``fig``'s size), shown in a notebook at
    :data:`CSS_PX_PER_INCH` CSS pixels per inch (see :class:`Png`)."""
    if isinstance(dpi, bool) or not isinstance(dpi, int) or not 10 <= dpi <= 600:
        raise ValueError(f"dpi must be an int from 10 to 600 (got {dpi!r})")
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=dpi)
    return Png(buffer.getvalue(), css_width=round(fig.get_size_inches()[0] * CSS_PX_PER_INCH))


def figure_svg(fig: Figure) -> bytes:
    """The figure as SVG bytes: text as text (small, fast, crisp), no date, stable element ids."""
    buffer = io.BytesIO()
    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": "ampcourse"}):
        fig.savefig(buffer, format="svg", metadata={"Date": None})
    return buffer.getvalue()


def _svg_renderer(fig: Figure, buffer: io.StringIO):
    """An SVG renderer for ``fig`` at 72 dpi, exactly as ``savefig(format="svg")`` makes one."""
    from matplotlib.backends.backend_mixed import MixedModeRenderer
    from matplotlib.backends.backend_svg import RendererSVG

    width, height = fig.get_size_inches()
    return MixedModeRenderer(fig, width, height, fig.dpi,
                             RendererSVG(width * 72, height * 72, buffer, image_dpi=fig.dpi,
                                         metadata={"Date": None}))


def _background_key(fig: Figure, dynamic: list) -> tuple:
    """What the background of a figure depends on, beyond its static artists' data: axes positions, limits,
    scales and ticks, every text that is not dynamic, and which artists there are. When it is unchanged
    after an update, the background drawn last time still holds (the widget tests check that the layered
    SVG shows exactly what a full render shows, move after move)."""
    key: list = [tuple(fig.get_size_inches()), len(fig.texts), len(fig.axes)]
    dyn = {id(a) for a in dynamic}
    key += [t.get_text() for t in fig.texts if id(t) not in dyn]
    for ax in fig.axes:
        # An axis listed as dynamic (``ax.xaxis``, ``ax.yaxis``) is drawn in the dynamic layer, ticks, labels
        # and all, so its limits and ticks may change under an unchanged background: the widget that lists
        # it keeps nothing in the background whose drawing depends on them (no artist in data coordinates
        # along that axis; the spines span the axes whatever the limits).
        x_dynamic, y_dynamic = id(ax.xaxis) in dyn, id(ax.yaxis) in dyn
        key += [ax.get_position().bounds, None if x_dynamic else ax.get_xlim(),
                None if y_dynamic else ax.get_ylim(), ax.get_xscale(), ax.get_yscale(),
                None if x_dynamic else tuple(ax.get_xticks()), None if y_dynamic else tuple(ax.get_yticks()),
                ax.get_xlabel(), ax.get_ylabel(), len(ax.get_children())]
        texts = [*ax.texts, ax.title, ax._left_title, ax._right_title]
        legend = ax.get_legend()
        if legend is not None:
            texts += legend.get_texts()
        key += [t.get_text() for t in texts if id(t) not in dyn]
    return tuple(key)


BACKGROUNDS_KEPT = 8  # backgrounds layered_svg keeps per figure (SVG text, ~10-50 KB each)


def layered_svg(fig: Figure, dynamic: list, background: tuple | None) -> tuple[bytes, tuple]:
    """The figure as SVG drawn in two layers: a *background* (everything but the ``dynamic`` artists,
    rendered only when :func:`_background_key` changes) and the dynamic artists drawn on top of it.

    ``background`` is what the previous call returned (or None). Returns the SVG bytes and the background
    to pass next time. A move that changes only the dynamic artists costs their drawing alone — a few ms —
    instead of the whole figure's ticks and texts (~25 ms). The last :data:`BACKGROUNDS_KEPT` backgrounds are
    kept by their key: a move back to a background shown before (lesson 01's legend, which names only what
    is on show, takes a few forms) reuses it.
    """
    key = _background_key(fig, dynamic)
    kept = background[2] if background is not None else {}
    if (background is None or background[0] != key) and key in kept:
        background = (key, kept[key], kept)
    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": "ampcourse"}):
        if background is None or background[0] != key:
            # Hide the dynamic artists; a text by blanking it (a hidden axes title would be moved by the
            # axes' title placement, which skips invisible titles).
            saved = [(a.get_text() if isinstance(a, Text) else a.get_visible()) for a in dynamic]
            for a in dynamic:
                a.set_text("") if isinstance(a, Text) else a.set_visible(False)
            try:
                head = figure_svg(fig).decode("utf-8").rsplit("</svg>", 1)[0]
            finally:
                for a, value in zip(dynamic, saved, strict=True):
                    a.set_text(value) if isinstance(a, Text) else a.set_visible(value)
            kept.pop(key, None)
            if len(kept) >= BACKGROUNDS_KEPT:
                kept.pop(next(iter(kept)))  # the oldest
            kept[key] = head
            background = (key, head, kept)
        buffer = io.StringIO()
        dpi = fig.dpi
        fig.dpi = 72  # as savefig(format="svg") draws
        splices = []  # (place in the overlay, SVG of a dynamic axis): an axis is drawn on its own, or reused
        try:
            renderer = _svg_renderer(fig, buffer)
            start = buffer.tell()
            for artist in sorted(dynamic, key=lambda a: a.get_zorder()):
                if isinstance(artist, Axis):  # every element the renderer wrote so far is closed here
                    splices.append((buffer.tell() - start, _axis_svg(fig, artist)))
                else:
                    artist.draw(renderer)
            renderer.finalize()
        finally:
            fig.dpi = dpi
    overlay = buffer.getvalue()[start:].rsplit("</svg>", 1)[0]
    for place, svg in reversed(splices):
        overlay = overlay[:place] + svg + overlay[place:]
    return (background[1] + overlay + "</svg>\n").encode("utf-8"), background


AXIS_SVG_CACHE = 64  # SVG drawings of dynamic axes a figure keeps (a few KB each)


def _axis_svg(fig: Figure, axis: Axis) -> str:
    """The SVG of a dynamic ``axis`` (its ticks, tick labels and label), drawn on its own, in its own renderer
    (so that it carries the definitions it uses), at 72 dpi as :func:`layered_svg` draws.

    Kept in ``live(fig)`` by what its drawing depends on: the figure's size, the axes' position, the view
    limits, the tick positions and label texts (major and minor) and the axis label — an axis's styling (fonts,
    tick sizes) stays as its ``draw`` set it. A slider that comes back to limits it showed before (lesson 06's
    bar heights snap to a few round values) reuses the drawing: an axis costs ~5 ms to draw, most of a move.
    """
    labels = [(t.get_position(), t.get_text()) for t in (*axis.get_majorticklabels(), *axis.get_minorticklabels())]
    key = (id(axis), tuple(fig.get_size_inches()), axis.axes.get_position().bounds, tuple(axis.get_view_interval()),
           tuple(axis.get_majorticklocs()), tuple(axis.get_minorticklocs()), tuple(labels), axis.label.get_text(),
           axis.get_offset_text().get_text(), axis.get_visible())
    cache = live(fig).setdefault("axis_svg", {})
    if key not in cache or cache[key][0] is not axis:  # (an axis of a figure drawn anew may reuse an id)
        buffer = io.StringIO()
        renderer = _svg_renderer(fig, buffer)
        start = buffer.tell()
        axis.draw(renderer)
        renderer.finalize()
        cache.pop(key, None)
        if len(cache) >= AXIS_SVG_CACHE:
            cache.pop(next(iter(cache)))  # the oldest
        cache[key] = (axis, buffer.getvalue()[start:].rsplit("</svg>", 1)[0])
    return cache[key][1]


def live(fig: Figure) -> dict[str, Any]:
    """The dict where a ``draw`` function keeps the artists its ``update`` changes later (``fig.live``)."""
    return fig.__dict__.setdefault("live", {})


def _allowed(control: widgets.ValueWidget) -> str:
    """What ``control`` accepts, in words (for an error message)."""
    if isinstance(control, widgets.widget_selection._Selection):
        return f"one of {list(control._options_values)!r}"
    if isinstance(control, widgets.FloatLogSlider):
        return f"a number from {control.base ** control.min:g} to {control.base ** control.max:g}"
    if hasattr(control, "min") and hasattr(control, "max"):
        kind = "an int" if isinstance(control.value, int) else "a number"
        return f"{kind} from {control.min:g} to {control.max:g}"
    return f"a value of the kind {type(control.value).__name__}"


def _check_control_value(name: str, control: widgets.ValueWidget, value: Any) -> None:
    """Refuse a value ``control`` would not show as given: out of its range (ipywidgets clamps it to the nearest
    end without a word), not one of its options (traitlets' ``TraitError``), or of another kind."""
    bad = None
    if isinstance(control, widgets.widget_selection._Selection):
        bad = not any(value == option and type(value) is type(option) or value is option
                      for option in control._options_values)
    elif hasattr(control, "min") and hasattr(control, "max") and not isinstance(control.value, tuple):
        low, high = ((control.base ** control.min, control.base ** control.max)
                     if isinstance(control, widgets.FloatLogSlider) else (control.min, control.max))
        integral = isinstance(control.value, int)
        kind = (numbers.Integral if integral else numbers.Real)
        if isinstance(value, bool) or not isinstance(value, kind):
            raise TypeError(f"{name} must be {_allowed(control)} (got {value!r})")
        bad = not (low <= value <= high)
    if bad:
        raise ValueError(f"{name} must be {_allowed(control)} (got {value!r})")
    trait = control.traits()["value"]
    try:
        if hasattr(trait, "validate"):  # traitlets' own type check (``Any`` has none)
            trait.validate(control, value)
    except TraitError as err:
        raise TypeError(f"{name} must be {_allowed(control)} (got {value!r}: {err})") from None


def dead_notice() -> widgets.HTML:
    """A message that shows only when the widget has lost its kernel (see :data:`DEAD_CSS`)."""
    return widgets.HTML(f'<style>{DEAD_CSS}</style><div class="ampcourse-dead-msg">⚠ {DEAD_MESSAGE}</div>')


class LivePlot(widgets.VBox):
    """A figure and a text readout that follow their controls.

    ``compute(**values)`` gets the controls' current values and returns plain data;
    ``draw(fig, data)`` draws on the widget's (cleared) figure and may return a short text (HTML allowed)
    shown under it. ``update(fig, data)``, if given, is used for every later move instead: it changes the
    artists ``draw`` made and returns the text. ``set(name=value, ...)`` moves controls from code (tests,
    benchmarks).
    """

    def __init__(
        self,
        compute: Callable[..., Any],
        draw: Callable[[Figure, Any], str | None],
        controls: dict[str, widgets.ValueWidget],
        *,
        figsize: tuple[float, float] = (7.0, 3.0),
        title: str = "",
        update: Callable[[Figure, Any], str | None] | None = None,
    ) -> None:
        if not callable(compute) or not callable(draw):
            raise TypeError("compute and draw must be functions")
        if update is not None and not callable(update):
            raise TypeError("update must be a function or None")
        if not controls or not all(isinstance(c, widgets.ValueWidget) for c in controls.values()):
            raise TypeError("controls must be a non-empty dict of name -> ipywidgets value widget")
        if (not isinstance(figsize, tuple) or len(figsize) != 2
                or not all(isinstance(v, (int, float)) and 0 < v <= 30 for v in figsize)):
            raise ValueError(f"figsize must be (width, height) in inches, each in (0, 30] (got {figsize!r})")
        self.compute, self.draw, self.update, self.controls = compute, draw, update, controls
        self.figsize, self.title = figsize, title
        self.figure = Figure(figsize=figsize)  # no layout engine: it would cost ~25 ms a redraw
        self.redraws = 0  # full redraws (draw) so far; the rest were updates
        natural = round(figsize[0] * CSS_PX_PER_INCH)
        self.image = widgets.Image(format="svg+xml", layout=widgets.Layout(
            width="100%", max_width=f"{round(natural * MAX_ZOOM)}px", height="auto", margin="2px 0"))
        # A readout wider than the notebook scrolls sideways instead of being cut off.
        self.readout = widgets.HTML(layout=widgets.Layout(max_width="100%", overflow="auto"))
        self.notice = dead_notice()
        self.data: Any = None
        self._background: tuple | None = None  # (key, SVG text, kept ones) of the last background layer
        self.controls_box = widgets.HBox(list(controls.values()))
        super().__init__([self.notice, self.controls_box, self.image, self.readout])
        self.add_class("ampcourse-live")
        for control in controls.values():
            control.observe(self._on_change, names="value")
        self.refresh()

    def values(self) -> dict[str, Any]:
        return {name: control.value for name, control in self.controls.items()}

    def render(self, data: Any) -> str:
        """Draw ``data`` on the widget's figure (an update when possible) and show it; return the text."""
        fig = self.figure
        if self.update is not None and fig.axes:
            text = self.update(fig, data)
        else:
            fig.clear()
            live(fig).clear()
            self._background = None
            text = self.draw(fig, data)
            self.redraws += 1
        dynamic = live(fig).get("dynamic")
        if dynamic:
            self.image.value, self._background = layered_svg(fig, dynamic, self._background)
        else:
            self.image.value = figure_svg(fig)
        return text or ""

    def refresh(self) -> None:
        """Recompute and redraw from the controls' current values."""
        self.data = self.compute(**self.values())
        self.readout.value = self.render(self.data)

    def set(self, **values: Any) -> None:
        """Move controls from code; the figure follows, as it does for a slider drag."""
        unknown = set(values) - set(self.controls)
        if unknown:
            raise ValueError(f"unknown control(s) {sorted(unknown)}; this widget has {sorted(self.controls)}")
        for name, value in values.items():
            _check_control_value(name, self.controls[name], value)
        with self.hold_trait_notifications():
            for name, value in values.items():
                self.controls[name].unobserve(self._on_change, names="value")
                try:
                    self.controls[name].value = value
                finally:
                    self.controls[name].observe(self._on_change, names="value")
        self.refresh()

    def _on_change(self, change: dict) -> None:
        self.refresh()

    def png(self, dpi: int = 100) -> bytes:
        """The current figure as PNG (for the saved notebook and for files)."""
        return figure_png(self.figure, dpi=dpi)

    def _repr_mimebundle_(self, **kwargs):
        bundle = super()._repr_mimebundle_(**kwargs)
        bundle["image/png"] = base64.b64encode(self.png()).decode("ascii")
        bundle["text/plain"] = f"[interactive figure{': ' + self.title if self.title else ''}]"
        return bundle
