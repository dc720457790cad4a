"""The one widget pattern of the course: controls → ``compute`` → data → ``draw`` → figure.

The figure is a plain :class:`matplotlib.figure.Figure` rendered to PNG and shown in an
``ipywidgets.Image``: no pyplot state, no extra JupyterLab extension, and the same bytes can be
saved as a file. The saved notebook also carries that PNG (and a text line) beside the live widget,
so the figure shows where no kernel runs (GitHub, nbviewer).
"""

from __future__ import annotations

import base64
import io
from collections.abc import Callable
from typing import Any

import ipywidgets as widgets
from matplotlib.figure import Figure

# Okabe–Ito: a palette that stays distinguishable with the common colour-vision deficiencies.
COLORS = {
    "black": "#000000", "orange": "#E69F00", "sky": "#56B4E9", "green": "#009E73",
    "yellow": "#F0E442", "blue": "#0072B2", "vermillion": "#D55E00", "purple": "#CC79A7",
}


def figure_png(fig: Figure, dpi: int = 80) -> bytes:
    """The figure as PNG bytes."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=dpi)
    return buffer.getvalue()


class LivePlot(widgets.VBox):
    """A figure and a text readout that follow their controls.

    ``compute(**values)`` gets the controls' current values and returns plain data;
    ``draw(fig, data)`` draws on a fresh figure and may return a short text (HTML allowed) shown
    under it. ``set(name=value, ...)`` moves controls from code (tests, benchmarks).
    """

    def __init__(
        self,
        compute: Callable[..., Any],
        draw: Callable[[Figure, Any], str | None],
        controls: dict[str, widgets.ValueWidget],
        *,
        figsize: tuple[float, float] = (7.0, 3.0),
        title: str = "",
    ) -> None:
        if not callable(compute) or not callable(draw):
            raise TypeError("compute and draw must be functions")
        if not controls or not all(isinstance(c, widgets.ValueWidget) for c in controls.values()):
            raise TypeError("controls must be a non-empty dict of name -> ipywidgets value widget")
        self.compute, self.draw, self.controls = compute, draw, controls
        self.figsize, self.title = figsize, title
        self.image = widgets.Image(format="png", layout=widgets.Layout(max_width="100%"))
        self.readout = widgets.HTML()
        self.data: Any = None
        super().__init__([widgets.HBox(list(controls.values())), self.image, self.readout])
        for control in controls.values():
            control.observe(self._on_change, names="value")
        self.refresh()

    def values(self) -> dict[str, Any]:
        return {name: control.value for name, control in self.controls.items()}

    def refresh(self) -> None:
        """Recompute and redraw from the controls' current values."""
        self.data = self.compute(**self.values())
        fig = Figure(figsize=self.figsize)  # no layout engine: it would cost ~25 ms a redraw
        text = self.draw(fig, self.data)
        self.image.value = figure_png(fig)
        self.readout.value = text or ""

    def set(self, **values: Any) -> None:
        """Move controls from code; the figure follows, as it does for a slider drag."""
        unknown = set(values) - set(self.controls)
        if unknown:
            raise ValueError(f"unknown control(s) {sorted(unknown)}; this widget has {sorted(self.controls)}")
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

    def _repr_mimebundle_(self, **kwargs):
        bundle = super()._repr_mimebundle_(**kwargs)
        bundle["image/png"] = base64.b64encode(self.image.value).decode("ascii")
        bundle["text/plain"] = f"[interactive figure{': ' + self.title if self.title else ''}]"
        return bundle
