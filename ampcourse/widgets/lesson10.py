"""Lesson 10 widgets: dynamic vs delayed per-tensor FP8 scaling — history length, margin and a spike — and
scaling granularity: one outlier in an activation under per-tensor, rowwise, blockwise and MX scales.

:func:`scaling_data` (pure, cached) runs :func:`ampcourse.fp8.simulate_scaling` on the amax sequence of
:func:`ampcourse.fp8.amax_sequence` twice — delayed scaling with the chosen history and margin, and dynamic
scaling, which has no margin (torchao's dynamic scaling uses none) — and :func:`draw_scaling` draws both: on
top, the tensor's amax and the amax each step's scale was built from (a step where the tensor's amax is above
it clips its largest values); below, the share of values flushed to zero each step. :func:`readout` says what
happened, computed from the traces.

:func:`granularity_data` (cached) takes :func:`ampcourse.fp8.granularity_errors` at the slider's outlier and at
every position of :data:`ampcourse.fp8.OUTLIER_LOG10` (the curves); :func:`draw_granularity` draws the curves once
and a marker at the slider; :func:`update_granularity` moves only the marker; :func:`granularity_readout` is the
table under it.

The lesson's static figures live here too: :func:`range_png` (its tensors against FP8's ranges) and
:func:`curves_png` (the training curves of the precision comparison); ``ampcourse.fp8`` re-exports both names.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import ipywidgets as widgets
import numpy as np
from matplotlib.figure import Figure

from ..fp8 import (
    E4M3,
    E5M2,
    GRANULARITIES,
    HISTORY_LENGTHS,
    N_STEPS,
    OUTLIER_LOG10,
    ROLES,
    SPIKE_STEP,
    GranularityResult,
    PrecisionRun,
    ScalingTrace,
    TensorSample,
    _check_runs,
    amax_sequence,
    fp8_limits,
    granularity_errors,
    simulate_scaling,
)
from .base import COLORS, LivePlot, Png, figure_png, live

__all__ = ["BENCHMARK_MOVES", "GRANULARITY_MOVES", "MARGIN_RANGE", "SPIKE_RANGE", "GranularityData", "ScalingData",
           "curves_png", "delayed_scaling", "draw_granularity", "draw_scaling", "granularity_data",
           "granularity_explorer", "granularity_readout", "range_png", "readout", "scaling_data",
           "update_granularity", "update_scaling"]

MARGIN_RANGE = (0, 4)
SPIKE_RANGE = (0, 8)


@dataclass(frozen=True, eq=False)
class ScalingData:
    """One widget position: the delayed and the dynamic trace of the same amax sequence."""

    history: int
    margin: int
    spike_bits: int
    delayed: ScalingTrace
    dynamic: ScalingTrace

    @property
    def steps_remembering_spike(self) -> int:
        """Steps after the spike whose delayed scale was still built from the spike's amax (0 without a spike)."""
        d = self.delayed
        if not self.spike_bits or SPIKE_STEP >= d.n_steps:
            return 0
        peak = d.log2_amax[SPIKE_STEP]
        if peak <= d.log2_amax[:SPIKE_STEP].max(initial=peak - 1):
            return 0  # the spike is no higher than an earlier step: nothing to remember
        return int((d.log2_scale_amax[SPIKE_STEP + 1:] == peak).sum())


def _check_int(name: str, value: object, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be an int (got {value!r})")
    if not low <= value <= high:
        raise ValueError(f"{name} must be from {low} to {high} (got {value!r})")
    return int(value)


def scaling_data(history: int = 16, margin: int = 0, spike_bits: int = 0) -> ScalingData:
    """Simulate :data:`~ampcourse.fp8.N_STEPS` steps of E4M3 scaling with the widget's settings (pure; cached)."""
    if isinstance(history, bool) or history not in HISTORY_LENGTHS:
        raise ValueError(f"history must be one of {list(HISTORY_LENGTHS)} (got {history!r})")
    margin = _check_int("margin", margin, *MARGIN_RANGE)
    spike_bits = _check_int("spike_bits", spike_bits, *SPIKE_RANGE)
    return _scaling_data(int(history), margin, spike_bits)  # validated first: the cache takes True for 1


@functools.lru_cache(maxsize=64)
def _scaling_data(history: int, margin: int, spike_bits: int) -> ScalingData:
    log2_amax = amax_sequence(N_STEPS, spike_bits=spike_bits)
    return ScalingData(history, margin, spike_bits, simulate_scaling(log2_amax, history, margin, "e4m3"),
                       simulate_scaling(log2_amax, None, 0, "e4m3"))  # dynamic scaling has no margin


def _pct(x: float) -> str:
    return f"{100 * x:.2f}%" if x == 0 or x >= 1e-4 else f"{100 * x:.1g}%"


def _check_data(data: object) -> ScalingData:
    if not isinstance(data, ScalingData):
        raise TypeError(f"data must be a ScalingData from scaling_data() (got {type(data).__name__})")
    return data


def _check_figure(fig: object) -> Figure:
    if not isinstance(fig, Figure):
        raise TypeError(f"fig must be a matplotlib Figure (got {type(fig).__name__})")
    return fig


def readout(data: ScalingData) -> str:
    """The HTML under the figure: clipped steps, the worst clip, flushed values, delayed vs dynamic."""
    _check_data(data)
    d, dyn = data.delayed, data.dynamic
    worst = int(d.worst_clip_bits.max())
    clipped = (f"<b>{d.saturated_steps} of {d.n_steps} steps clip</b> their largest values to 448 "
               f"(worst: values up to 2^{worst} = {2**worst}× too large, "
               f"{_pct(float(d.saturated.max()))} of that step's values)"
               if d.saturated_steps else "<b>no step clips</b>: every amax stayed under the scale's amax")
    flushed = (f"flushed to 0: {_pct(float(d.flushed.mean()))} of values on average (dynamic scaling: "
               f"{_pct(float(dyn.flushed.mean()))}; dynamic never clips)")
    remember = data.steps_remembering_spike
    if remember:
        spike = (f" After the spike, the scale is built from the spike's amax for {remember} more "
                 f"step{'s' if remember != 1 else ''} (the history's length): too small, so up to "
                 f"{_pct(float(d.flushed[SPIKE_STEP + 1:].max()))} of a step's values flush to 0.")
    else:
        spike = ""
    steps = f"{data.history}-step amax history" if data.history > 1 else "amax of the previous step only"
    return f"Delayed scaling from the {steps}, margin {data.margin}: {clipped}; {flushed}.{spike}"


def _flushed_ylim(data: ScalingData) -> tuple[float, list[int]]:
    """The bottom panel's top (%) and ticks: a few fixed heights, so that most moves keep the axes."""
    peak = 110 * float(max(data.delayed.flushed.max(), data.dynamic.flushed.max()))
    top_pct = next(v for v in (5.0, 10.0, 20.0, 30.0, 50.0, 75.0, 110.0) if peak <= v)
    step = next(v for v in (2, 5, 10, 20, 25, 50) if top_pct / v <= 3)
    return top_pct, list(range(0, int(top_pct), step))


def draw_scaling(fig: Figure, data: ScalingData) -> str:
    """Top: amax vs the scale's amax (+ margin) per step, clipped steps marked. Bottom: flushed share per step."""
    _check_figure(fig)
    _check_data(data)
    d, dyn = data.delayed, data.dynamic
    steps = np.arange(d.n_steps)
    fig.subplots_adjust(left=0.1, right=0.98, bottom=0.13, top=0.9, hspace=0.12)
    top, bottom = fig.subplots(2, 1, sharex=True, height_ratios=(3, 2))
    (amax,) = top.step(steps, d.log2_amax, where="post", color=COLORS["black"], linewidth=1.2,
                       label="amax of the tensor")
    (allowed,) = top.step(steps, d.log2_scale_amax + d.margin, where="post", color=COLORS["blue"], linewidth=1.6,
                          label="what the scale allows (+ margin)")
    clipped = np.flatnonzero(d.saturated > 0)
    (marks,) = top.plot(clipped, d.log2_amax[clipped], linestyle="none", marker="v", color=COLORS["vermillion"],
                        markersize=5, label="clipped step")
    top.set_ylabel("log2(amax)")
    top.set_ylim(-1, 14)
    top.set_yticks([0, 4, 8, 12])  # ticks set by hand: fewer ticks, a faster redraw
    top.legend(loc="upper left", fontsize=7.5, frameon=False, ncol=3)
    top.tick_params(axis="x", bottom=False)  # the shared x axis is drawn once, below
    top.grid(axis="y", color="0.9")
    (delayed,) = bottom.step(steps, 100 * d.flushed, where="post", color=COLORS["blue"], linewidth=1.4)
    (dynamic,) = bottom.step(steps, 100 * dyn.flushed, where="post", color=COLORS["green"], linestyle="--",
                             linewidth=1.2)
    bottom.set_ylabel("flushed to 0 (%)")
    top_pct, ticks = _flushed_ylim(data)
    bottom.set_ylim(0, top_pct)
    bottom.set_yticks(ticks)
    bottom.set_xlabel("training step")
    bottom.set_xlim(0, d.n_steps)
    bottom.set_xticks(range(0, d.n_steps + 1, 50))
    bottom.text(0.01, 0.93, "dashed: dynamic scaling;  solid: delayed", transform=bottom.transAxes, fontsize=7.5,
                va="top")
    bottom.grid(axis="y", color="0.9")
    # What a move changes: the four curves and the clip marks (the rest is a background drawn once).
    live(fig).update(bottom=bottom, amax=amax, allowed=allowed, marks=marks, delayed=delayed, dynamic_line=dynamic,
                     dynamic=[amax, allowed, marks, delayed, dynamic])
    return readout(data)


def update_scaling(fig: Figure, data: ScalingData) -> str:
    """Move the curves and marks of a figure :func:`draw_scaling` made to ``data``."""
    _check_figure(fig)
    _check_data(data)
    d, dyn, artists = data.delayed, data.dynamic, live(fig)
    if not all(key in artists for key in ("amax", "allowed", "marks", "delayed", "dynamic_line", "bottom")):
        raise ValueError("fig must be a figure that draw_scaling drew (its curves are what update_scaling moves)")
    steps = np.arange(d.n_steps)
    artists["amax"].set_data(steps, d.log2_amax)
    artists["allowed"].set_data(steps, d.log2_scale_amax + d.margin)
    clipped = np.flatnonzero(d.saturated > 0)
    artists["marks"].set_data(clipped, d.log2_amax[clipped])
    artists["delayed"].set_data(steps, 100 * d.flushed)
    artists["dynamic_line"].set_data(steps, 100 * dyn.flushed)
    top_pct, ticks = _flushed_ylim(data)
    if artists["bottom"].get_ylim() != (0, top_pct):
        artists["bottom"].set_ylim(0, top_pct)
        artists["bottom"].set_yticks(ticks)
    return readout(data)


def delayed_scaling(history: int = 16, margin: int = 0, spike_bits: int = 0) -> LivePlot:
    """The lesson-10 widget: history length, margin (binades) and a spike at step 120 → E4M3 scaling, 200 steps."""
    scaling_data(history, margin, spike_bits)  # validates the starting values
    style = {"description_width": "initial"}
    layout = widgets.Layout(width="300px")
    controls = {
        "history": widgets.SelectionSlider(options=list(HISTORY_LENGTHS), value=history, description="amax history",
                                           continuous_update=False, style=style, layout=layout),
        "margin": widgets.IntSlider(value=margin, min=MARGIN_RANGE[0], max=MARGIN_RANGE[1], description="margin (bits)",
                                    continuous_update=False, style=style, layout=layout),
        "spike_bits": widgets.IntSlider(value=spike_bits, min=SPIKE_RANGE[0], max=SPIKE_RANGE[1],
                                        description=f"spike at step {SPIKE_STEP} (bits)", continuous_update=False,
                                        style=style, layout=layout),
    }
    plot = LivePlot(scaling_data, draw_scaling, controls, figsize=(7.5, 4.2), update=update_scaling,
                    title="delayed vs dynamic FP8 scaling")
    plot.children[0].layout.flex_flow = "row wrap"
    return plot


BENCHMARK_MOVES = [
    {"spike_bits": 6},
    {"history": 64},
    {"history": 1},
    {"margin": 2},
    {"margin": 0, "spike_bits": 0, "history": 16},  # back to the defaults
]


# -------------------------------------------------------------------------------------- scaling granularity
SCHEME_STYLE = {"per-tensor": (COLORS["vermillion"], "-", "o"), "rowwise": (COLORS["blue"], "--", "s"),
                "1x128 / 128x128": (COLORS["green"], "-.", "^"), "MX: 1x32, E8M0": (COLORS["purple"], ":", "D")}


@dataclass(frozen=True, eq=False)
class GranularityData:
    """The slider's position: the results there, and every scheme's two error curves over the slider's range."""

    log10_outlier: float
    results: tuple[GranularityResult, ...]
    curves: dict[str, tuple[np.ndarray, np.ndarray]]  # scheme -> (other tokens, outlier's token), in %


@functools.lru_cache(maxsize=1)
def _curves() -> dict[str, tuple[np.ndarray, np.ndarray]]:
    table = [granularity_errors(p) for p in OUTLIER_LOG10]
    return {g.name: (np.array([100 * row[i].other_rows_error for row in table]),
                     np.array([100 * row[i].neighbours_error for row in table]))
            for i, g in enumerate(GRANULARITIES)}


def granularity_data(log10_outlier: float = 5.0) -> GranularityData:
    """The four schemes at an outlier of ``10**log10_outlier`` (one of :data:`~ampcourse.fp8.OUTLIER_LOG10`)."""
    if isinstance(log10_outlier, bool) or not isinstance(log10_outlier, (int, float)) \
            or float(log10_outlier) not in OUTLIER_LOG10:
        raise ValueError(f"log10_outlier must be one of {list(OUTLIER_LOG10)}, the slider's positions "
                         f"(got {log10_outlier!r})")
    return GranularityData(float(log10_outlier), tuple(granularity_errors(float(log10_outlier))), _curves())


def _check_granularity(data: object) -> GranularityData:
    if not isinstance(data, GranularityData):
        raise TypeError(f"data must be a GranularityData from granularity_data() (got {type(data).__name__})")
    return data


def granularity_readout(data: GranularityData) -> str:
    """The HTML table under the figure: each scheme's errors and flushed values at the slider's outlier."""
    _check_granularity(data)
    td = '<td style="padding: 0 12px 0 0">'
    rows = "".join(
        f"<tr>{td}{r.name}</td>{td}{r.other_rows_error:.1%}</td>{td}{r.flushed_other_rows:,} of "
        f"{r.n_other_rows:,}</td>{td}{r.neighbours_error:.1%}</td>{td}{r.flushed_neighbours} of "
        f"{r.n_neighbours}</td></tr>" for r in data.results)
    th = '<th style="padding: 0 12px 0 0; text-align: left">'
    return (f"<b>one outlier of 10^{data.log10_outlier:g} in token 0</b> (E4M3, float64 emulation)"
            f"<table><tr>{th}scaling</th>{th}error, other tokens</th>{th}flushed, other tokens</th>"
            f"{th}error, token 0's other values</th>{th}flushed, token 0</th></tr>{rows}</table>")


def draw_granularity(fig: Figure, data: GranularityData) -> str:
    """Two panels over the outlier's size: the product error on the other tokens, and on the outlier's own token
    (its other values); one curve per scheme, drawn once, and markers at the slider."""
    _check_figure(fig)
    _check_granularity(data)
    fig.subplots_adjust(left=0.11, right=0.97, bottom=0.14, top=0.84, wspace=0.12)
    axes = fig.subplots(1, 2, sharey=True)
    xs = np.array(OUTLIER_LOG10)
    index = OUTLIER_LOG10.index(data.log10_outlier)
    markers, cursors = [], []
    for panel, (ax, title) in enumerate(zip(axes, ("other tokens", "the outlier's token, its other values"),
                                            strict=True)):
        for name, curves in data.curves.items():
            color, style, marker = SCHEME_STYLE[name]
            ax.plot(xs, curves[panel], color=color, linestyle=style, linewidth=1.5,
                    label=name if panel == 0 else None)
            (dot,) = ax.plot([xs[index]], [curves[panel][index]], linestyle="none", marker=marker, color=color,
                             markersize=6)
            markers.append(dot)
        cursors.append(ax.axvline(data.log10_outlier, color=COLORS["black"], linewidth=1, alpha=0.6))
        ax.set_yscale("log")
        ax.set_ylim(2, 150)
        ax.set_yticks([3, 10, 30, 100], ["3%", "10%", "30%", "100%"])
        ax.minorticks_off()
        ax.set_xlim(0, 7)
        ax.set_xticks(range(8))
        ax.set_xlabel("log10 (outlier)")
        ax.set_title(title, fontsize=9)
        ax.grid(color="0.9")
    axes[0].set_ylabel("relative error of x @ w.T")
    fig.legend(loc="upper center", ncol=4, fontsize=8, frameon=False)
    live(fig).update(granularity_markers=markers, granularity_cursors=cursors, dynamic=markers + cursors)
    return granularity_readout(data)


def update_granularity(fig: Figure, data: GranularityData) -> str:
    """Move the markers and cursors of a figure :func:`draw_granularity` made; the curves never change."""
    _check_figure(fig)
    _check_granularity(data)
    artists = live(fig)
    if "granularity_markers" not in artists:
        raise ValueError("fig must be a figure that draw_granularity drew (its markers are what this moves)")
    index = OUTLIER_LOG10.index(data.log10_outlier)
    dots = iter(artists["granularity_markers"])
    for panel in range(2):
        for curves in data.curves.values():
            next(dots).set_data([data.log10_outlier], [curves[panel][index]])
    for cursor in artists["granularity_cursors"]:
        cursor.set_xdata([data.log10_outlier] * 2)
    return granularity_readout(data)


def granularity_explorer(log10_outlier: float = 5.0) -> LivePlot:
    """The lesson-10 granularity slider: the size of one outlier in token 0 → the product error of each scheme."""
    granularity_data(log10_outlier)  # validates the starting value
    slider = widgets.SelectionSlider(options=[(f"10^{p:g}", p) for p in OUTLIER_LOG10], value=float(log10_outlier),
                                     description="outlier in x", continuous_update=False,
                                     style={"description_width": "initial"}, layout=widgets.Layout(width="420px"))
    return LivePlot(granularity_data, draw_granularity, {"log10_outlier": slider}, figsize=(7.5, 3.6),
                    update=update_granularity, title="one outlier, four ways to share scales")


GRANULARITY_MOVES = [{"log10_outlier": p} for p in (6.0, 4.0, 0.0, 7.0, 5.5, 5.0)]


# --- static figures of the lesson -----------------------------------------------------------------------
def range_png(sample: TensorSample) -> Png:
    """Histograms of log2|value| per role, with E4M3's and E5M2's ranges (smallest subnormal to max) shaded."""
    if not isinstance(sample, TensorSample):
        raise TypeError(f"sample must be a TensorSample from collect_tensors() (got {type(sample).__name__})")
    fig = Figure(figsize=(7.5, 4.6))
    axes = fig.subplots(len(ROLES), 1, sharex=True)
    bins = np.arange(-40, 12, 0.5)
    for ax, role, color in zip(axes, ROLES, (COLORS["blue"], COLORS["green"], COLORS["vermillion"]), strict=True):
        values = sample.flat(role).abs()
        values = values[values > 0]
        ax.hist(np.log2(values.numpy()), bins=bins, color=color, alpha=0.85)
        for dtype, shade, y in ((E4M3, COLORS["orange"], 0.85), (E5M2, COLORS["purple"], 0.65)):
            lim = fp8_limits(dtype)
            ax.axvspan(math.log2(lim.smallest_subnormal), math.log2(lim.max), ymin=y - 0.1, ymax=y, color=shade,
                       alpha=0.35, label=f"{lim.name} range (unscaled)" if role == ROLES[0] else None)
        ax.set_ylabel(role, fontsize=9)
        ax.set_yticks([])
    axes[0].legend(loc="upper left", fontsize=8, frameon=False)
    axes[-1].set_xlabel("log2 |value|")
    fig.suptitle("The digits MLP's tensors against FP8's ranges (before any scaling)", fontsize=10)
    fig.tight_layout()
    return figure_png(fig)


def curves_png(runs: dict[str, list[PrecisionRun]]) -> Png:
    """Training loss per step (moving average over 8 steps): each seed thin, the mean thick, per precision."""
    _check_runs(runs)
    fig = Figure(figsize=(7.5, 3.4))
    ax = fig.add_subplot()
    styles = {"fp32": (COLORS["blue"], "-"), "bf16": (COLORS["green"], "--"), "fp8": (COLORS["vermillion"], ":")}
    kernel = np.ones(8) / 8
    for precision, items in runs.items():
        color, style = styles.get(precision, (COLORS["black"], "-"))
        curves = np.array([np.convolve(r.losses, kernel, mode="valid") for r in items])
        for curve in curves:
            ax.plot(curve, color=color, alpha=0.25, linewidth=1, linestyle=style)
        ax.plot(curves.mean(axis=0), color=color, linewidth=2.2, linestyle=style,
                label=f"{precision} (mean of {len(items)} seeds)")
    ax.set_yscale("log")
    ax.set_xlabel("optimizer step")
    ax.set_ylabel("training loss (8-step average)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return figure_png(fig)
