"""Lesson 04 widget: GradScaler's dynamics over 10,000 steps — where does the loss scale go?

:func:`scale_dynamics` sets GradScaler's four knobs (initial scale, growth factor, backoff factor, growth
interval) and an overflow pattern, and draws the scale step by step: the exact replay of
``torch.amp.GradScaler.update()`` by :func:`ampcourse.scaler_sim.simulate_grad_scaler`.

The models behind it (``pattern``):

* ``"ceiling"`` (the default): as in real training, a scale that grows too far overflows. Every step whose
  scale is above :data:`CEILING` (2^18, where lesson 02's real gradients start to overflow FP16) overflows,
  plus random overflows at ``overflow_rate`` (a rare loss spike). This gives the saw-tooth of a real run.
* ``"random"``: only the random overflows, which do not depend on the scale — the widget then shows what the
  *scaler* does with a given pattern, the number of skipped steps is set by the pattern alone, and the
  settings decide where the scale drifts.
* ``"bursts"``: random, plus :data:`BURST_LEN` overflowing steps in a row every :data:`BURST_EVERY` steps.

:func:`draw_trajectory` draws any :class:`~ampcourse.scaler_sim.ScalerTrace` (the widget's, or
``real_scaler_run(...).simulated()``) as a static figure; :func:`trajectory_png` saves one.

Drawing stays fast for 10,000 steps without losing a skipped step: the scale is piecewise constant, so the
curve is drawn from its change points only (exact, and at most one point per step), and the skipped steps
are one marker each, in a single artist.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import ipywidgets as widgets
import numpy as np
import torch
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from ..scaler_sim import ScalerTrace, overflow_pattern, simulate_grad_scaler
from .base import COLORS, STATIC_DPI, LivePlot, figure_png, live

__all__ = [
    "BENCHMARK_MOVES",
    "BURST_EVERY",
    "BURST_LEN",
    "GROWTH_INTERVALS",
    "N_STEPS",
    "OVERFLOW_RATES",
    "PATTERNS",
    "DynamicsData",
    "dynamics",
    "draw_dynamics",
    "draw_trajectory",
    "update_dynamics",
    "interpret",
    "readout",
    "scale_dynamics",
    "trace_stats",
    "trajectory_png",
]

N_STEPS = 10_000
SEED = 0
BURST_EVERY, BURST_LEN = 3000, 5
LOG2_INIT_RANGE = (0, 24)
GROWTH_RANGE = (1.1, 8.0, 0.1)  # min, max, step: the minimum keeps growth_factor > 1
BACKOFF_RANGE = (0.05, 0.95, 0.05)  # keeps backoff_factor inside (0, 1)
GROWTH_INTERVALS = (1, 10, 50, 100, 200, 500, 1000, 2000, 5000)
OVERFLOW_RATES = (0.0, 1e-4, 3e-4, 1e-3, 3e-3, 0.01, 0.03, 0.1)
CEILING_LOG2 = 18
CEILING = 2.0**CEILING_LOG2  # lesson 02's real gradients overflow FP16 for S above 2**18
PATTERNS = {"ceiling": "ceiling at 2^18 + random", "random": "random overflows only",
            "bursts": f"random + bursts of {BURST_LEN}"}
DRIFT_BITS = 4  # a net change of the scale beyond 2**4 either way reads as a drift, not a balance
ZERO_LOG2 = -150.0  # where a scale of exactly 0 is drawn: below float32's smallest subnormal, 2**-149


@dataclass(frozen=True, eq=False)
class DynamicsData:
    """One widget position: the settings, the simulated trace, and what the figure and readout need.

    ``log2_scales`` has ``n + 1`` entries: the scale at each step, then the final one (0 is
    ``-inf``). ``growths`` and ``backoffs`` count the updates that raised and lowered the scale;
    ``blocked_growths`` the growths float32 refused (they would have reached inf).
    """

    settings: dict
    overflow_rate: float
    pattern: str
    trace: ScalerTrace
    log2_scales: np.ndarray
    growths: int
    backoffs: int
    blocked_growths: int

    @property
    def n_steps(self) -> int:
        return len(self.trace.scales)

    @property
    def n_skipped(self) -> int:
        return self.trace.n_skipped

    @property
    def ceiling_hits(self) -> int:
        """Skipped steps whose scale was above :data:`CEILING` (with ``pattern="ceiling"``, they overflowed)."""
        if self.pattern != "ceiling":
            return 0
        return sum(1 for scale, skipped in zip(self.trace.scales, self.trace.skipped, strict=True)
                   if skipped and scale > CEILING)

    @property
    def min_scale(self) -> float:
        return min(min(self.trace.scales), self.trace.final_scale)

    @property
    def max_scale(self) -> float:
        return max(max(self.trace.scales), self.trace.final_scale)


def _log2(values) -> np.ndarray:
    values = np.asarray(values, dtype=np.float64)
    with np.errstate(divide="ignore"):
        return np.log2(values)


def trace_stats(trace: ScalerTrace) -> tuple[np.ndarray, int, int, int]:
    """``(log2_scales, growths, backoffs, blocked_growths)`` of a trace (see :class:`DynamicsData`)."""
    scales = np.array((*trace.scales, trace.final_scale), dtype=np.float64)
    before, after = scales[:-1], scales[1:]
    skipped = np.array(trace.skipped, dtype=bool)
    grew = after > before
    tracker = np.array(trace.growth_tracker, dtype=np.int64)
    # A growth was due (clean step, tracker reset to 0) but the scale did not grow: float32 refused inf.
    blocked = (~skipped) & (tracker == 0) & ~grew & (before > 0)
    return _log2(scales), int(grew.sum()), int((after < before).sum()), int(blocked.sum())


@functools.lru_cache(maxsize=16)  # about 1 MB an entry
def dynamics(log2_init_scale: int = 16, growth_factor: float = 2.0, backoff_factor: float = 0.5,
             growth_interval: int = 2000, overflow_rate: float = 1e-4, pattern: str = "ceiling") -> DynamicsData:
    """Simulate GradScaler for :data:`N_STEPS` steps with the widget's settings (pure; cached per position).

    The overflows: :func:`~ampcourse.scaler_sim.overflow_pattern` with ``rate=overflow_rate`` and seed 0;
    ``pattern="bursts"`` adds :data:`BURST_LEN` overflowing steps in a row every :data:`BURST_EVERY` steps;
    ``pattern="ceiling"`` makes every step with a scale above :data:`CEILING` overflow too.
    Arguments are checked like the sliders do (see :func:`scale_dynamics`); any value the simulator takes
    is accepted here, the sliders just offer a sensible subset.
    """
    log2_init_scale = _check_log2_init(log2_init_scale)
    if not isinstance(pattern, str) or pattern not in PATTERNS:
        raise ValueError(f"pattern must be one of {sorted(PATTERNS)} (got {pattern!r})")
    if isinstance(overflow_rate, bool) or not isinstance(overflow_rate, (int, float)):
        raise TypeError(f"overflow_rate must be a number in [0, 1] (got {overflow_rate!r})")
    burst = {"burst_every": BURST_EVERY, "burst_len": BURST_LEN} if pattern == "bursts" else {}
    found_inf = overflow_pattern(N_STEPS, rate=overflow_rate, seed=SEED, **burst)
    trace = simulate_grad_scaler(found_inf, init_scale=2.0**log2_init_scale, growth_factor=growth_factor,
                                 backoff_factor=backoff_factor, growth_interval=growth_interval,
                                 overflow_above=CEILING if pattern == "ceiling" else None)
    log2_scales, growths, backoffs, blocked = trace_stats(trace)
    settings = {"log2_init_scale": log2_init_scale, "growth_factor": trace.growth_factor,
                "backoff_factor": trace.backoff_factor, "growth_interval": trace.growth_interval}
    return DynamicsData(settings, float(overflow_rate), pattern, trace, log2_scales, growths, backoffs, blocked)


def draw_trajectory(fig: Figure, trace: ScalerTrace, *, title: str | None = None,
                    label: str = "loss scale S", skipped_label: str = "skipped step ({n:,})") -> Axes:
    """Draw a trace's scale on a log2 axis over the steps, every skipped step marked; returns the Axes.

    The curve is a step line through the points where the scale changes (exactly the trajectory, with as
    few points as it has changes); each skipped step is a tick along the bottom. A scale of exactly 0 is
    drawn at ``log2 = -150``, below float32's smallest subnormal. The legend sits above the axes, under
    the title, so it never hides the curve; ``skipped_label`` names the skip ticks (``{n}``: their count).
    The y limits are whole multiples of 4 (log2 units), so small changes of the trajectory keep them.
    Calls ``fig.subplots_adjust`` (no layout engine: it would cost more than the whole drawing).
    """
    log2_scales = trace_stats(trace)[0]
    n = len(trace.scales)
    lines = title.count("\n") + 1 if title else 0
    fig.subplots_adjust(left=0.1, right=0.965, bottom=0.15, top=0.88 - 0.08 * lines)
    ax = fig.subplots()
    ys, points = _curve(log2_scales)
    handles = []
    if n:
        curve = Line2D(points, ys[points], drawstyle="steps-post", color=COLORS["blue"], linewidth=1.6,
                       label=label)
        ax.add_line(curve)
        handles.append(curve)
        if ys[n] == ZERO_LOG2:
            ax.text(n, ZERO_LOG2, "S = 0 (drawn at 2^-150) ", ha="right", va="bottom", fontsize=8,
                    color=COLORS["blue"])
    lo, ylim = _ylim(ys, n)
    skipped = np.flatnonzero(np.array(trace.skipped, dtype=bool))
    if skipped.size:
        marks = Line2D(skipped, np.full(skipped.size, 0.05), transform=ax.get_xaxis_transform(),
                       linestyle="none", marker="|", markersize=10, markeredgewidth=1.3,
                       color=COLORS["vermillion"], label=skipped_label.format(n=skipped.size))
        ax.add_line(marks)
        handles.append(marks)
    if lo <= 2 and ylim[0] < 0 < ylim[1]:  # the scale comes near 1: below it, scaling shrinks gradients
        handles.append(ax.axhline(0, color=COLORS["black"], linestyle=":", linewidth=1,
                                  label="S = 1 (below: gradients shrink)"))
    ax.set_xlim(0, max(n, 1))
    ax.set_ylim(*ylim)
    ax.set_yticks(_ticks(*ylim))
    if n >= 10:
        ax.set_xticks(_ticks(0, n))
    ax.set_xlabel("training step")
    ax.set_ylabel("log2(loss scale S)")
    ax.grid(axis="y", color="0.88", linewidth=0.8)
    ax.set_axisbelow(True)
    ax.legend(handles=handles, loc="lower left", bbox_to_anchor=(0.0, 1.0), ncol=3, fontsize=8.5,
              frameon=False, borderaxespad=0.2, handlelength=1.8, columnspacing=1.5)
    title_text = fig.text(0.1, 0.975, title, fontsize=9, va="top", ha="left", linespacing=1.3) if title else None
    live(fig).update(ax=ax, curve=handles[0] if n else None, marks=marks if skipped.size else None,
                     title=title_text, structure=_structure(trace, ys, title))
    return ax


def _curve(log2_scales: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The y values (a scale of 0 at :data:`ZERO_LOG2`) and the steps where the curve is drawn: ys[i] is in
    effect from step i to i + 1 (ys[n], the final scale, from n on), so a step line through the points where it
    changes, plus the end point, draws the whole trajectory exactly."""
    ys = np.where(np.isneginf(log2_scales), ZERO_LOG2, log2_scales)
    n = len(ys) - 1
    return ys, np.concatenate(([0], np.flatnonzero(ys[1:] != ys[:-1]) + 1, [n]))


def _ylim(ys: np.ndarray, n: int) -> tuple[float, tuple[int, int]]:
    """The lowest log2 scale, and the y limits: room at the bottom for the skip ticks; multiples of 4, so
    that most slider moves keep the axes (the widget then redraws only the curve: see update_dynamics)."""
    lo, hi = (float(ys.min()), float(ys.max())) if n else (0.0, 1.0)
    pad = max(1.0, 0.06 * (hi - lo))
    return lo, (4 * math.floor((lo - 2.5 * pad) / 4), 4 * math.ceil((hi + pad) / 4))


def _structure(trace: ScalerTrace, ys: np.ndarray, title: str | None) -> tuple:
    """What decides which artists :func:`draw_trajectory` makes (not their data): when a move keeps it,
    :func:`update_dynamics` can move the artists instead of drawing anew."""
    n = len(trace.scales)
    lo, ylim = _ylim(ys, n)
    return (n > 0, n >= 10, any(trace.skipped), bool(n) and ys[n] == ZERO_LOG2,
            lo <= 2 and ylim[0] < 0 < ylim[1], title.count("\n") if title else None)


def _ticks(low: float, high: float, most: int = 6) -> np.ndarray:
    """Round tick positions in [low, high], at most ``most`` of them (set by hand: fewer ticks, faster)."""
    span = max(high - low, 1e-9)
    for step in (1, 2, 5, 10, 20, 25, 50, 100, 200, 250, 500, 1000, 2000, 2500, 5000, 10_000, 20_000, 50_000):
        if span / step <= most - 1 or step == 50_000:
            break
    return np.arange(math.ceil(low / step) * step, high + 1e-9, step)


def trajectory_png(trace: ScalerTrace, *, title: str | None = None, figsize: tuple[float, float] = (7.5, 3.2),
                   dpi: int = STATIC_DPI) -> bytes:
    """:func:`draw_trajectory` on a fresh figure, as PNG bytes (to save or embed in a lesson)."""
    fig = Figure(figsize=figsize)
    draw_trajectory(fig, trace, title=title)
    return figure_png(fig, dpi=dpi)


def _fmt_scale(scale: float) -> str:
    """``2^16 = 65,536``, ``2^-3.32 ≈ 0.1``, ``0``."""
    if scale == 0:
        return "0"
    k = math.log2(scale)
    if k.is_integer():
        return f"2^{k:.0f} = {scale:,.0f}" if 0 <= k <= 40 else f"2^{k:.0f}"
    return f"2^{k:.2f} ≈ {scale:.3g}"


def _bits(x: float) -> str:
    return f"{x:.3g} bit{'' if x == 1 else 's'}"


def _count(n: int, word: str) -> str:
    """``1 growth``, ``3 growths``."""
    return f"{n:,} {word}{'' if n == 1 else 's'}"


def reciprocal_overflows(scale: float) -> bool:
    """Whether GradScaler's ``inv_scale`` for this scale is inf: ``1 / scale`` computed in float64 and rounded
    to float32 (``torch/amp/grad_scaler.py``, ``unscale_``), inf for a scale of 0 or at or below about 2^-128
    (``reciprocal_overflows(2**-128)`` is True: 2^128 is past float32's largest value)."""
    return math.isinf(torch.tensor(scale, dtype=torch.float64).reciprocal().float().item())


def interpret(data: DynamicsData) -> str:
    """One line: what the scale did, and why (used in the readout)."""
    trace = data.trace
    g, b, interval = trace.growth_factor, trace.backoff_factor, trace.growth_interval
    up, down = data.growths * math.log2(g), data.backoffs * math.log2(1 / b)
    start, final = trace.scales[0], trace.final_scale
    if reciprocal_overflows(data.min_scale):
        where = "to exactly 0" if data.min_scale == 0 else "to 2^-128 or below"
        return (f"Collapsed: the scale fell {where}, where GradScaler's float32 1/scale is inf — the first clean "
                "step there unscales every gradient to inf or NaN (0 × inf) and writes it into every weight: "
                "training is destroyed, not paused.")
    if data.blocked_growths:
        refused = f"{_count(data.blocked_growths, 'growth')} {'was' if data.blocked_growths == 1 else 'were'}"
        return (f"Runaway: the scale climbed to float32's ceiling (about 2^128) and {refused} refused there "
                "(they would reach inf). With real gradients it would overflow FP16 long before.")
    if data.backoffs == 0 and data.growths == 0:
        return (f"Nothing to adapt: no overflow, and no run of growth_interval = {interval:,} clean steps "
                f"that could grow the scale.")
    if data.backoffs == 0:
        return (f"No overflow: the scale grows {_count(data.growths, 'time')} (+{_bits(up)}) to "
                f"{_fmt_scale(final)}; in a real run it would keep growing until a step overflows.")
    if data.growths == 0:
        every = (f"about every {1 / data.overflow_rate:,.0f} steps" if data.overflow_rate
                 else f"in bursts every {BURST_EVERY:,} steps")
        return (f"Never grows: overflows come {every}, before growth_interval = {interval:,} clean steps "
                f"pass, so the scale only backs off ({_count(data.backoffs, 'time')}, −{_bits(down)}) "
                f"to {_fmt_scale(final)}.")
    if data.ceiling_hits:
        return (f"Saw-tooth: the scale grows into the ceiling and is pushed back {_count(data.ceiling_hits, 'time')} "
                f"— every growth_interval = {interval:,} clean steps it tries again and wastes a step. A longer "
                "interval wastes fewer steps; a shorter one recovers faster after a loss spike.")
    net = math.log2(final) - math.log2(start)
    balance = (f"{_count(data.growths, 'growth')} × {g:g} (+{_bits(up)}) against "
               f"{_count(data.backoffs, 'backoff')} × {b:g} (−{_bits(down)}), net {net:+.3g} bits, "
               f"to {_fmt_scale(final)}")
    if net > DRIFT_BITS:
        return (f"Too aggressive: growth outpaces backoff — {balance}. Real FP16 gradients would overflow long "
                f"before: the simulator's overflows do not depend on the scale, a real run's do.")
    if net < -DRIFT_BITS:
        return (f"Backoff wins: the scale sinks — {balance}. Fewer overflows, a larger growth_factor or a "
                "shorter growth_interval would hold it up.")
    return f"Balanced: {balance}."


def readout(data: DynamicsData) -> str:
    """The HTML under the figure: skipped steps, final/min/max scale, growths, backoffs, and a verdict."""
    n, skipped = data.n_steps, data.n_skipped
    line = interpret(data)
    low = "" if data.min_scale >= 1 or data.min_scale == 0 else (
        " <i>The scale went below 1: there it shrinks the gradients, and small ones flush to 0 in FP16.</i>")
    if data.pattern == "ceiling":
        others = skipped - data.ceiling_hits
        cause = (f"{data.ceiling_hits:,} from growing past the ceiling 2^{CEILING_LOG2} (each growth above it "
                 f"costs a step), {others:,} from random overflows")
    else:
        cause = "set by the overflow pattern; the settings decide where the scale goes"
    return (f"<b>{skipped:,} of {n:,} steps skipped ({skipped / n:.2%} wasted)</b> — {cause}.<br>"
            f"final scale {_fmt_scale(data.trace.final_scale)}; min {_fmt_scale(data.min_scale)}, "
            f"max {_fmt_scale(data.max_scale)}; {_count(data.growths, 'growth')}, "
            f"{_count(data.backoffs, 'backoff')}.<br>"
            f"{line}{low}")


def _title(data: DynamicsData) -> str:
    s = data.settings
    rate = f"{data.overflow_rate:.2%}".replace(".00%", "%")
    extra = {"bursts": f" + {BURST_LEN} in a row every {BURST_EVERY:,}",
             "ceiling": f" at random + every step above S = 2^{CEILING_LOG2}"}
    bursts = extra.get(data.pattern, " of steps, at random")
    # Two lines: one line ran off the figure's right edge at the default settings.
    return (f"init 2^{s['log2_init_scale']}, ×{s['growth_factor']:g} per {s['growth_interval']:,} clean steps, "
            f"×{s['backoff_factor']:g} per overflow\noverflows: {rate}{bursts}")


SKIPPED_LABEL = "skipped step (one tick each)"  # the widget's legend: the count is in the readout


def draw_dynamics(fig: Figure, data: DynamicsData) -> str:
    """The widget's figure (:func:`draw_trajectory`) and readout (:func:`readout`)."""
    draw_trajectory(fig, data.trace, title=_title(data), skipped_label=SKIPPED_LABEL)
    artists = live(fig)
    artists["dynamic"] = [a for a in (artists["curve"], artists["marks"], artists["title"]) if a is not None]
    return readout(data)


def update_dynamics(fig: Figure, data: DynamicsData) -> str:
    """Move the curve, the skip ticks, the limits and the title of a figure :func:`draw_dynamics` made;
    a move that changes which artists there are (e.g. the first skipped step) draws the figure anew."""
    trace, artists = data.trace, live(fig)
    ys, points = _curve(data.log2_scales)
    if _structure(trace, ys, _title(data)) != artists["structure"]:
        fig.clear()
        artists.clear()
        return draw_dynamics(fig, data)
    n, ax = len(trace.scales), artists["ax"]
    artists["curve"].set_data(points, ys[points])
    skipped = np.flatnonzero(np.array(trace.skipped, dtype=bool))
    if artists["marks"] is not None:
        artists["marks"].set_data(skipped, np.full(skipped.size, 0.05))
    ylim = _ylim(ys, n)[1]
    if ax.get_ylim() != ylim:
        ax.set_ylim(*ylim)
        ax.set_yticks(_ticks(*ylim))
    artists["title"].set_text(_title(data))
    return readout(data)


def _fmt_rate(rate: float) -> str:
    return "0" if rate == 0 else f"{rate:g}"


def _check_log2_init(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"log2_init_scale must be an int (got {value!r})")
    if not LOG2_INIT_RANGE[0] <= value <= LOG2_INIT_RANGE[1]:
        raise ValueError(f"log2_init_scale must be from {LOG2_INIT_RANGE[0]} to {LOG2_INIT_RANGE[1]} (got {value})")
    return value


def _check_choice(name: str, value: object, choices) -> None:
    if isinstance(value, bool) or value not in choices:
        raise ValueError(f"{name} must be one of {list(choices)} (got {value!r})")


def _check_range(name: str, value: object, low: float, high: float) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a number (got {value!r})")
    if not low <= value <= high:
        raise ValueError(f"{name} must be from {low} to {high} (got {value!r})")


def scale_dynamics(log2_init_scale: int = 16, growth_factor: float = 2.0, backoff_factor: float = 0.5,
                   growth_interval: int = 2000, overflow_rate: float = 1e-4, pattern: str = "ceiling") -> LivePlot:
    """The lesson-04 widget: GradScaler's settings and an overflow pattern → the scale over 10,000 steps.

    The defaults are torch's (``init_scale=2**16``, growth ×2 every 2000 clean steps, backoff ×0.5), with the
    ceiling of lesson 02's gradients (2^18) and a rare random overflow (1e-4). Each control offers only valid
    settings: ``growth_factor`` from 1.1
    (it must be > 1), ``backoff_factor`` from 0.05 to 0.95 (inside (0, 1)), ``growth_interval`` and
    ``overflow_rate`` from fixed lists; the starting values must be positions the controls offer.
    """
    _check_log2_init(log2_init_scale)
    _check_range("growth_factor", growth_factor, *GROWTH_RANGE[:2])
    _check_range("backoff_factor", backoff_factor, *BACKOFF_RANGE[:2])
    _check_choice("growth_interval", growth_interval, GROWTH_INTERVALS)
    _check_choice("overflow_rate", overflow_rate, OVERFLOW_RATES)
    _check_choice("pattern", pattern, PATTERNS)
    style = {"description_width": "initial"}
    layout = widgets.Layout(width="300px")
    controls = {
        "log2_init_scale": widgets.IntSlider(
            value=log2_init_scale, min=LOG2_INIT_RANGE[0], max=LOG2_INIT_RANGE[1], step=1,
            description="log2(init_scale)", continuous_update=False, style=style, layout=layout),
        "growth_factor": widgets.FloatSlider(
            value=growth_factor, min=GROWTH_RANGE[0], max=GROWTH_RANGE[1], step=GROWTH_RANGE[2],
            description="growth_factor", readout_format=".1f", continuous_update=False, style=style,
            layout=layout),
        "backoff_factor": widgets.FloatSlider(
            value=backoff_factor, min=BACKOFF_RANGE[0], max=BACKOFF_RANGE[1], step=BACKOFF_RANGE[2],
            description="backoff_factor", readout_format=".2f", continuous_update=False, style=style,
            layout=layout),
        "growth_interval": widgets.SelectionSlider(
            options=[(f"{v:,}", v) for v in GROWTH_INTERVALS], value=growth_interval,
            description="growth_interval", continuous_update=False, style=style, layout=layout),
        "overflow_rate": widgets.SelectionSlider(
            options=[(_fmt_rate(v), v) for v in OVERFLOW_RATES], value=overflow_rate,
            description="overflow rate", continuous_update=False, style=style, layout=layout),
        "pattern": widgets.Dropdown(
            options=[(label, key) for key, label in PATTERNS.items()], value=pattern, description="pattern",
            style=style, layout=layout),
    }
    plot = LivePlot(dynamics, draw_dynamics, controls, figsize=(7.5, 3.2), update=update_dynamics,
                    title="GradScaler's scale over 10,000 steps")
    plot.controls_box.layout.flex_flow = "row wrap"  # six controls: let them wrap onto a second row
    return plot


BENCHMARK_MOVES = [
    {"overflow_rate": 1e-3},
    {"growth_interval": 100},
    {"growth_factor": 4.0},
    {"backoff_factor": 0.25},
    {"pattern": "bursts"},
    {"log2_init_scale": 24},
    {"overflow_rate": 0.1, "growth_interval": 1},  # the worst case to draw: a change nearly every step
    {"overflow_rate": 1e-4, "growth_interval": 2000, "growth_factor": 2.0, "backoff_factor": 0.5,
     "pattern": "ceiling", "log2_init_scale": 16},  # back to the defaults
]
