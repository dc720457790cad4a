"""Lesson 10 widget: dynamic vs delayed per-tensor FP8 scaling — history length, margin and a spike.

:func:`scaling_data` (pure, cached) runs :func:`ampcourse.fp8.simulate_scaling` on the amax sequence of
:func:`ampcourse.fp8.amax_sequence` twice — delayed scaling with the chosen history and margin, and dynamic
scaling, which has no margin (torchao's dynamic scaling uses none) — and :func:`draw_scaling` draws both: on
top, the tensor's amax and the amax each step's scale was built from (a step where the tensor's amax is above
it clips its largest values); below, the share of values flushed to zero each step. :func:`readout` says what
happened, computed from the traces.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import ipywidgets as widgets
import numpy as np
from matplotlib.figure import Figure

from ..fp8 import HISTORY_LENGTHS, N_STEPS, SPIKE_STEP, ScalingTrace, amax_sequence, simulate_scaling
from .base import COLORS, LivePlot, live

__all__ = ["BENCHMARK_MOVES", "MARGIN_RANGE", "SPIKE_RANGE", "ScalingData", "delayed_scaling", "draw_scaling",
           "readout", "scaling_data", "update_scaling"]

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
    """The lesson-10 widget: history length, margin (binades) and a spike at step 120 → E4M3 scaling over 200 steps."""
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
