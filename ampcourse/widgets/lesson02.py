"""Lesson 02 widget: slide the loss scale S and watch real gradients cross FP16's limits.

The gradients come from :func:`ampcourse.gradients.collect_gradients` — collected once and cached, never
retrained on a slider move. A move costs one count (:func:`~ampcourse.gradients.fp16_fate` and
:func:`~ampcourse.gradients.bf16_fate` on the stored gradients, remembered per slider position) and one
redraw. The histogram itself is
never recomputed: its bins are a quarter of an octave wide and start on whole octaves, and multiplying by
``S = 2**k`` adds exactly ``k`` to every ``log2|g|``, so the scaled histogram is the same bar heights on
bin edges moved ``k`` to the right.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import ipywidgets as widgets
import numpy as np
import torch
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle, StepPatch

from ..device import pick_device
from ..gradients import FateCounts, GradientSample, bf16_fate, collect_gradients, format_limits, fp16_fate
from .base import COLORS, LivePlot, live

LOG2_SCALE_RANGE = (0, 24)
BINS_PER_OCTAVE = 4
FP16 = format_limits("fp16")
BF16 = format_limits("bf16")
# Where a cast's result changes kind, on the log2 axis: the bands of the figure.
FLUSH_EDGE = math.log2(FP16.flush_threshold)  # -25: at or below, a value becomes 0
NORMAL_EDGE = math.log2(FP16.normal_threshold)  # -14.00009: from here on, a value rounds to a normal
OVERFLOW_EDGE = math.log2(FP16.overflow_threshold)  # 15.99965 (65520): from here on, inf


@dataclass(frozen=True, eq=False)
class Histogram:
    """Bar heights of ``log2|g|`` for a sample's nonzero gradients, in percent of all its values.

    ``edges`` are the unscaled bin edges (``BINS_PER_OCTAVE`` bins per octave, starting on a whole octave);
    ``weights`` and ``activations`` the heights for the two kinds of gradient; ``xlim`` a fixed x-range
    that shows the whole histogram at every slider position; ``ymax`` the tallest stacked bar (shifting
    never changes it, so the y-range stays fixed too).
    """

    edges: np.ndarray
    weights: np.ndarray
    activations: np.ndarray
    xlim: tuple[float, float]
    ymax: float


@dataclass(frozen=True, eq=False)
class ScaleView:
    """What one slider position shows: the scale, what FP16 and BF16 do, and the histogram to shift."""

    log2_scale: int
    fp16: FateCounts
    bf16: FateCounts
    histogram: Histogram
    sample: GradientSample

    @property
    def scale(self) -> float:
        return 2.0**self.log2_scale


def gradient_histogram(sample: GradientSample) -> Histogram:
    """The histogram of ``log2|g|`` for ``sample`` (computed once per widget)."""
    total = sample.n_values
    logs = {}
    for name, grads in (("weights", sample.weight_grads), ("activations", sample.activation_grads)):
        magnitudes = grads[grads != 0].abs()
        logs[name] = torch.log2(magnitudes).double().numpy()
    every = np.concatenate(list(logs.values()))
    low = math.floor(every.min()) if every.size else -30
    high = math.ceil(every.max()) + 1 if every.size else 0
    edges = np.arange(low, high + 1e-9, 1 / BINS_PER_OCTAVE)
    heights = {name: np.histogram(values, bins=edges)[0] * (100.0 / total) for name, values in logs.items()}
    # The x-range: from the 0.1% quantile (or further left, so the flush band always shows) to the top
    # of the histogram at the largest scale (or further right, so 65504 always shows).
    left = math.floor(np.quantile(every, 0.001)) - 1 if every.size else -30
    xlim = (float(min(left, FLUSH_EDGE - 3)), float(max(high + LOG2_SCALE_RANGE[1] + 1, OVERFLOW_EDGE + 3)))
    stacked = heights["weights"] + heights["activations"]
    ymax = float(stacked.max()) if stacked.size and stacked.max() > 0 else 1.0
    return Histogram(edges, heights["weights"], heights["activations"], xlim, ymax)


class ScaleCounter:
    """:func:`~ampcourse.gradients.cast_fate` at power-of-two scales, by binary search in sorted ``|g|``.

    Multiplying a float32 by ``S = 2**k`` is exact (within float32's range), so ``|g|·S`` crosses a
    format's rounding boundary ``t`` exactly when ``|g|`` crosses ``t / S``. Sorting ``|g|`` once makes each
    slider position a few ``searchsorted`` calls — microseconds, and no torch threads competing for the
    cores — with the same counts as casting (a test compares every slider position).
    """

    def __init__(self, values: torch.Tensor) -> None:
        self.sorted = np.sort(values.detach().abs().double().cpu().numpy().ravel())
        self.zero = int(np.searchsorted(self.sorted, 0.0, side="right"))

    def fate(self, log2_scale: int, fmt: str) -> FateCounts:
        limits = format_limits(fmt)
        scale = 2.0**log2_scale
        n = self.sorted.size
        at_most_flush = int(np.searchsorted(self.sorted, limits.flush_threshold / scale, side="right"))
        below_normal = int(np.searchsorted(self.sorted, limits.normal_threshold / scale, side="left"))
        overflow = n - int(np.searchsorted(self.sorted, limits.overflow_threshold / scale, side="left"))
        return FateCounts(fmt=limits.fmt, scale=scale, zero=self.zero, flushed=at_most_flush - self.zero,
                          subnormal=below_normal - at_most_flush, normal=n - below_normal - overflow,
                          overflow=overflow)


def scale_view(sample: GradientSample, histogram: Histogram, log2_scale: int,
               counter: ScaleCounter | None = None) -> ScaleView:
    """Count the fates of ``sample.all * 2**log2_scale`` in FP16 and in BF16 (by casting, or with ``counter``)."""
    _check_log2_scale(log2_scale)
    if counter is not None:
        return ScaleView(log2_scale, counter.fate(log2_scale, "fp16"), counter.fate(log2_scale, "bf16"),
                         histogram, sample)
    scale = 2.0**log2_scale
    return ScaleView(log2_scale, fp16_fate(sample.all, scale), bf16_fate(sample.all, scale), histogram, sample)


def draw_scale_view(fig: Figure, view: ScaleView) -> str:
    """The shifted histogram on FP16's bands; the readout table of FP16 and BF16 counts."""
    hist, k = view.histogram, view.log2_scale
    fig.subplots_adjust(left=0.075, right=0.985, bottom=0.16, top=0.84)
    ax = fig.subplots()
    lo, hi = hist.xlim
    top = hist.ymax * 1.45
    bands = [
        (lo, FLUSH_EDGE, COLORS["vermillion"], "flush\nto 0"),
        (FLUSH_EDGE, NORMAL_EDGE, COLORS["orange"], "sub-\nnormal"),
        (NORMAL_EDGE, OVERFLOW_EDGE, COLORS["green"], "normal"),
        (OVERFLOW_EDGE, hi, COLORS["purple"], "inf"),
    ]
    # Patches go in with add_artist, not axvspan/stairs: those also recompute the data limits, path
    # segment by path segment (~25 ms a redraw), and the limits are fixed here anyway.
    for left, right, color, label in bands:
        ax.add_artist(Rectangle((left, 0), right - left, 1, transform=ax.get_xaxis_transform(),
                                color=color, alpha=0.13, linewidth=0))
        ax.text((left + right) / 2, top * 0.97, label, ha="center", va="top", fontsize=8, color=color,
                fontweight="bold")
    edges = hist.edges + k  # the whole point: scaling by 2**k shifts log2|g| by exactly k
    bars = [
        StepPatch(hist.activations, edges, fill=True, color=COLORS["sky"], label="activation gradients"),
        StepPatch(hist.activations + hist.weights, edges, baseline=hist.activations, fill=True,
                  color=COLORS["blue"], label="weight gradients"),
    ]
    for patch in bars:
        ax.add_artist(patch)
    edges_lines = [
        ax.axvline(math.log2(FP16.smallest_subnormal), color=COLORS["black"], linestyle=":", linewidth=1),
        ax.axvline(math.log2(FP16.smallest_normal), color=COLORS["black"], linestyle="--", linewidth=1),
        ax.axvline(math.log2(FP16.max), color=COLORS["black"], linestyle="--", linewidth=1),
    ]
    ax.text(lo + 0.5, top * 0.8, "← BF16: normal\n   down to 2⁻¹²⁶", fontsize=8, va="top")
    ax.set_xlim(lo, hi)
    ax.set_ylim(0, top)
    ax.set_xticks(np.arange(math.ceil(lo / 8) * 8, hi, 8))
    ax.set_xlabel("log2 |gradient × S|")
    ax.set_ylabel("% of values")
    # Title on the left and legend on the right, both above the axes: nothing covers the bars.
    title = ax.set_title(_title(view), fontsize=10, loc="left")
    ax.legend(handles=bars, loc="lower right", bbox_to_anchor=(1.0, 1.0), ncol=2, fontsize=8, frameon=False,
              borderaxespad=0.1)
    # Only the bars and the title move with the slider: the rest is a background drawn once. FP16's edge
    # lines are drawn again over the bars, as a full render draws them.
    live(fig).update(bars=bars, title=title, dynamic=[*bars, *edges_lines, title])
    return readout(view)


def update_scale_view(fig: Figure, view: ScaleView) -> str:
    """Shift the bars of a figure :func:`draw_scale_view` made to ``view``'s scale and retitle it."""
    hist, artists = view.histogram, live(fig)
    edges = hist.edges + view.log2_scale
    activations, weights = artists["bars"]
    activations.set_data(hist.activations, edges)
    weights.set_data(hist.activations + hist.weights, edges, baseline=hist.activations)
    artists["title"].set_text(_title(view))
    return readout(view)


def _title(view: ScaleView) -> str:
    return f"loss scale S = 2^{view.log2_scale} = {view.scale:,.0f}"


def readout(view: ScaleView) -> str:
    """The HTML table under the figure: per category, the count and percent in FP16 and in BF16."""
    labels = {"flushed": "flushed to 0", "subnormal": "subnormal", "normal": "normal",
              "overflow": "overflow to inf", "zero": "exactly 0 already"}
    rows = "".join(
        f"<tr><td>{label}</td><td>{view.fp16.counts[name]:,}</td><td>{_percent(view.fp16.fractions[name])}</td>"
        f"<td>{view.bf16.counts[name]:,}</td><td>{_percent(view.bf16.fractions[name])}</td></tr>"
        for name, label in labels.items())
    if view.fp16.overflow:
        verdict = "FP16 overflows: GradScaler would skip this step and halve S."
    elif view.fp16.flushed:
        verdict = "No overflow, but some gradients are lost to zero: a larger S would save them."
    else:
        verdict = "No overflow and nothing flushed to zero."
    sample = view.sample
    return (f"<b>S = 2^{view.log2_scale} = {view.scale:,.0f}</b>: {sample.n_values:,} gradient values "
            f"({sample.weight_grads.numel():,} weight, {sample.activation_grads.numel():,} activation) "
            f"from {sample.steps} training steps, × S, cast to FP16 and to BF16."
            "<table><tr><th></th><th>FP16</th><th>%</th><th>BF16</th><th>%</th></tr>"
            f"{rows}</table>{verdict}<br><small>Bands: what the cast does (a value flushes at or below "
            "2⁻²⁵, half the smallest subnormal). Lines: FP16's smallest subnormal 2⁻²⁴ (dotted), smallest normal "
            "2⁻¹⁴ and largest value 65504 (dashed).</small>")


def _percent(fraction: float) -> str:
    """``12.34%``; ``<0.01%`` rather than a misleading ``0.00%`` for a few values out of many."""
    return "<0.01%" if 0 < fraction < 0.0001 else f"{fraction:.2%}"


def _check_log2_scale(log2_scale: object) -> int:
    if isinstance(log2_scale, bool) or not isinstance(log2_scale, int):
        raise TypeError(f"log2_scale must be an int (got {log2_scale!r})")
    if not LOG2_SCALE_RANGE[0] <= log2_scale <= LOG2_SCALE_RANGE[1]:
        raise ValueError(f"log2_scale must be from {LOG2_SCALE_RANGE[0]} to {LOG2_SCALE_RANGE[1]} (got {log2_scale})")
    return log2_scale


@functools.lru_cache(maxsize=4)
def _cached_sample(device: str) -> GradientSample:
    return collect_gradients(device=device)


def default_sample(device: str | torch.device | None = None) -> GradientSample:
    """The lesson's gradients (``collect_gradients(device=device)``, by default on the course device),
    collected once per session and device."""
    return _cached_sample(str(pick_device() if device is None else torch.device(device)))


def loss_scale_histogram(log2_scale: int = 0, *, sample: GradientSample | None = None,
                         device: str | torch.device | None = None) -> LivePlot:
    """The lesson-02 slider: pick ``S = 2**log2_scale`` and see which gradients FP16 keeps.

    ``sample`` defaults to :func:`default_sample` on ``device`` (``collect_gradients(device=device)``: the
    lesson's gradients, so the widget cell runs on its own, in any order); pass your own
    ``collect_gradients(...)`` to look at another model's gradients.
    """
    _check_log2_scale(log2_scale)
    if sample is not None and device is not None:
        raise ValueError("give sample or device, not both (the sample was collected on its own device)")
    if sample is None:
        sample = default_sample(device)
    elif not isinstance(sample, GradientSample):
        raise TypeError(f"sample must be a GradientSample from collect_gradients (got {type(sample).__name__})")
    histogram = gradient_histogram(sample)
    slider = widgets.IntSlider(value=log2_scale, min=LOG2_SCALE_RANGE[0], max=LOG2_SCALE_RANGE[1], step=1,
                               description="log2(S)", continuous_update=False)
    compute = functools.partial(scale_view, sample, histogram, counter=ScaleCounter(sample.all))
    return LivePlot(compute, draw_scale_view, {"log2_scale": slider}, figsize=(7.0, 3.2),
                    title="gradients × S in FP16", update=update_scale_view)


BENCHMARK_MOVES = [{"log2_scale": k} for k in (0, 4, 8, 12, 16, 20, 24)]
