"""Lesson 05 widget: gradient clipping under a loss scale — unscale first, or clip the wrong thing.

:func:`clipping_explorer` trains a tiny model (8 → 16 → 1 tanh MLP, the data of
:func:`ampcourse.accumulation.make_problem`) for :data:`N_STEPS` SGD steps, accumulating each step's gradient
over ``micro_batches`` micro-batches of :data:`MICRO_BATCH_SIZE` rows (loss / micro_batches each), and
clipping the total gradient norm to ``max_norm`` in the **right order** (on the unscaled gradient, i.e.
after ``scaler.unscale_``). Each step also records what the **wrong order** (``clip_grad_norm_`` before
``unscale_``) would have done: it compares S × ‖g‖ with ``max_norm`` and, after ``scaler.step`` divides by
S, leaves a gradient of norm ``min(‖g‖, max_norm / S)``.

For speed (one redraw < 100 ms), the training runs in float64 numpy with a hand-written backward pass, and
the scaled gradient is *simulated* as S × the FP32 gradient: what a real ``scaler.scale(loss).backward()``
gives up to FP16 rounding (lesson 05's :func:`~ampcourse.accumulation.clip_demo` runs the real thing). The
wrong order is a counterfactual on the right-order trajectory: the same gradients, clipped the wrong way.
The training is cached per (micro_batches, max_norm); the loss scale only enters the wrong-order columns.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import ipywidgets as widgets
import numpy as np
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from ..accumulation import make_problem
from .base import COLORS, LivePlot, live

__all__ = ["BENCHMARK_MOVES", "MAX_NORMS", "N_STEPS", "ClipData", "clipping_explorer", "clipping_run",
           "draw_clipping", "readout", "train_clipped", "update_clipping"]

N_STEPS = 20
MICRO_BATCH_SIZE = 4
MICRO_BATCH_RANGE = (1, 8)
LOG2_SCALE_RANGE = (0, 24)
MAX_NORMS = (0.1, 0.2, 0.3, 0.5, 1.0, 2.0, 3.0, 5.0, 10.0)
LR = 0.2
SEED = 0


@dataclass(frozen=True, eq=False)
class ClipData:
    """One widget position. Per-step arrays (length :data:`N_STEPS`):

    Attributes:
        norm: ‖g‖, the true (unscaled) accumulated gradient norm before clipping.
        right_norm: the norm after clipping in the right order: ``min(‖g‖, max_norm)``.
        wrong_seen: what ``clip_grad_norm_`` sees in the wrong order: S × ‖g‖.
        wrong_norm: the gradient norm the wrong order leaves after ``scaler.step`` unscales it:
            ``min(S‖g‖, max_norm) / S``.
        right_fired, wrong_fired: whether clipping fired in each order.
        losses: the mean training loss of each step's micro-batches.
    """

    micro_batches: int
    max_norm: float
    log2_scale: int
    norm: np.ndarray
    right_norm: np.ndarray
    wrong_seen: np.ndarray
    wrong_norm: np.ndarray
    right_fired: np.ndarray
    wrong_fired: np.ndarray
    losses: np.ndarray

    @property
    def scale(self) -> float:
        return 2.0**self.log2_scale

    @property
    def n_right_fired(self) -> int:
        return int(self.right_fired.sum())

    @property
    def n_wrong_fired(self) -> int:
        return int(self.wrong_fired.sum())

    @property
    def update_ratio(self) -> float:
        """Mean over steps of ‖wrong-order update‖ / ‖right-order update‖ (SGD: the update is lr × gradient)."""
        return float(np.mean(self.wrong_norm / self.right_norm))


@functools.cache
def _problem_arrays(micro_batches_max: int = MICRO_BATCH_RANGE[1]):
    problem = make_problem(N_STEPS * micro_batches_max * MICRO_BATCH_SIZE, SEED)
    model = problem.new_model()
    params = [p.detach().double().numpy().copy() for p in model.parameters()]
    return problem.inputs.double().numpy(), problem.targets.double().numpy(), params


def _grad(params, x, y):
    """Mean-squared-error loss and its gradient for the tanh MLP, by hand (float64)."""
    w1, b1, w2, b2 = params
    h = np.tanh(x @ w1.T + b1)
    out = h @ w2.T + b2
    d_out = 2.0 * (out - y) / len(x)
    d_h = (d_out @ w2) * (1.0 - h * h)
    return float(np.mean((out - y) ** 2)), [d_h.T @ x, d_h.sum(0), d_out.T @ h, d_out.sum(0)]


@functools.lru_cache(maxsize=128)
def train_clipped(micro_batches: int, max_norm: float) -> tuple[np.ndarray, np.ndarray]:
    """Train :data:`N_STEPS` steps with accumulation and right-order clipping; ``(grad norms, losses)``.

    Step ``t`` uses micro-batches ``t·m … t·m + m − 1`` of :data:`MICRO_BATCH_SIZE` rows each (``m`` =
    ``micro_batches``), each loss divided by ``m``; the summed gradient is clipped to ``max_norm`` and
    applied by SGD (lr :data:`LR`). Cached.
    """
    x, y, params = _problem_arrays()
    params = [p.copy() for p in params]
    norms, losses = np.empty(N_STEPS), np.empty(N_STEPS)
    for step in range(N_STEPS):
        total = [np.zeros_like(p) for p in params]
        loss_sum = 0.0
        for i in range(step * micro_batches, (step + 1) * micro_batches):
            rows = slice(i * MICRO_BATCH_SIZE, (i + 1) * MICRO_BATCH_SIZE)
            loss, grads = _grad(params, x[rows], y[rows])
            loss_sum += loss / micro_batches
            for t, g in zip(total, grads, strict=True):
                t += g / micro_batches
        norm = math.sqrt(sum(float((g * g).sum()) for g in total))
        coef = min(1.0, max_norm / (norm + 1e-6))  # clip_grad_norm_'s rule
        for p, g in zip(params, total, strict=True):
            p -= LR * coef * g
        norms[step], losses[step] = norm, loss_sum
    norms.flags.writeable = losses.flags.writeable = False
    return norms, losses


def clipping_run(micro_batches: int = 4, max_norm: float = 1.0, log2_scale: int = 16) -> ClipData:
    """The widget's compute: the cached training plus both clipping orders at scale S = 2**log2_scale."""
    micro_batches, max_norm, log2_scale = _check(micro_batches, max_norm, log2_scale)
    norm, losses = train_clipped(micro_batches, max_norm)
    scale = 2.0**log2_scale
    right_norm = np.minimum(norm, max_norm)
    wrong_seen = scale * norm
    wrong_norm = np.minimum(wrong_seen, max_norm) / scale
    return ClipData(micro_batches, max_norm, log2_scale, norm, right_norm, wrong_seen, wrong_norm,
                    norm > max_norm, wrong_seen > max_norm, losses)


def readout(data: ClipData) -> str:
    """Clipping counts in each order and the mean update-size ratio wrong/right."""
    n = len(data.norm)
    ratio = data.update_ratio
    verdict = ("the wrong order shrinks every update to about max_norm / S: with SGD (as here) training barely moves"
               if ratio < 0.1 else "at this small S the wrong order is close to the right one"
               if ratio > 0.9 else "the wrong order shrinks the updates")
    return (f"<b>clipping fired: right order {data.n_right_fired} of {n} steps, wrong order "
            f"{data.n_wrong_fired} of {n}</b> (it compares S × ‖g‖ = up to {data.wrong_seen.max():.3g} with "
            f"max_norm = {data.max_norm:g}).<br>"
            f"mean ‖update‖ wrong / right = {ratio:.3g} — {verdict}. "
            f"Effective batch {data.micro_batches} × {MICRO_BATCH_SIZE} = {data.micro_batches * MICRO_BATCH_SIZE} "
            f"rows; loss {data.losses[0]:.3f} → {data.losses[-1]:.3f} (right order).")


def draw_clipping(fig: Figure, data: ClipData) -> str:
    """Per-step gradient norms (log10 axis): before clipping, after (right order), wrong order, threshold."""
    fig.subplots_adjust(left=0.1, right=0.97, bottom=0.15, top=0.74)
    ax = fig.subplots()
    steps = np.arange(len(data.norm))
    # log10 on a linear axis with hand-set ticks: matplotlib's log scale costs ~100 ms a redraw
    series = _series(data)
    lines = [
        Line2D(steps, series[0], color=COLORS["blue"], marker="o", markersize=4, label="‖g‖ before clipping"),
        Line2D(steps, series[1], color=COLORS["green"], linewidth=2.2, label="after clip (right order)"),
        Line2D(steps, series[2], color=COLORS["vermillion"], linestyle="--",
               label="S·‖g‖ seen by clip (wrong order)"),
        Line2D(steps, series[3], color=COLORS["orange"], marker="x", markersize=5,
               label="after clip + unscale (wrong order)"),
    ]
    for line in lines:
        ax.add_line(line)
    lines.append(ax.axhline(math.log10(data.max_norm), color=COLORS["black"], linestyle=":", linewidth=1.2,
                            label="max_norm (the slider)"))
    _set_y_range(ax, series, data.max_norm)
    ax.set_xlim(-0.5, len(steps) - 0.5)
    ax.set_xticks(np.arange(0, len(steps), 5))
    ax.set_xlabel("training step")
    ax.set_ylabel("gradient norm")
    # Two columns above the axes: the widest row still fits inside the figure.
    ax.legend(handles=lines, loc="lower left", bbox_to_anchor=(0.0, 1.0), ncol=2, fontsize=8.5,
                       frameon=False, borderaxespad=0.2, handlelength=2.5)
    # A move changes only the lines (and, when they cross a decade, the y range): the rest is a background.
    live(fig).update(ax=ax, lines=lines, dynamic=list(lines))
    return readout(data)


def update_clipping(fig: Figure, data: ClipData) -> str:
    """Move the lines of a figure :func:`draw_clipping` made to ``data`` (same steps, new norms)."""
    artists = live(fig)
    series = _series(data)
    for line, values in zip(artists["lines"], series, strict=False):
        line.set_ydata(values)
    threshold = artists["lines"][-1]
    threshold.set_ydata([math.log10(data.max_norm)] * 2)
    _set_y_range(artists["ax"], series, data.max_norm)
    return readout(data)


def _series(data: ClipData) -> list[np.ndarray]:
    return [np.log10(v) for v in (data.norm, data.right_norm, data.wrong_seen, data.wrong_norm)]


def _set_y_range(ax, series: list[np.ndarray], max_norm: float) -> None:
    """Whole decades around every series and the threshold, at most ~6 labelled ticks."""
    values = np.concatenate([*series, [math.log10(max_norm)]])
    lo, hi = math.floor(values.min()), math.ceil(values.max())
    if hi - lo < 2:
        lo, hi = lo - 1, hi + 1
    step = max(1, math.ceil((hi - lo) / 6))
    ticks = np.arange(lo, hi + 1, step)
    if ax.get_ylim() != (lo - 0.3, hi + 0.3):
        ax.set_ylim(lo - 0.3, hi + 0.3)
        ax.set_yticks(ticks, [f"1e{t:d}" for t in ticks])


def _check(micro_batches, max_norm, log2_scale) -> tuple[int, float, int]:
    if isinstance(micro_batches, bool) or not isinstance(micro_batches, int):
        raise TypeError(f"micro_batches must be an int (got {micro_batches!r})")
    if not MICRO_BATCH_RANGE[0] <= micro_batches <= MICRO_BATCH_RANGE[1]:
        raise ValueError(f"micro_batches must be from {MICRO_BATCH_RANGE[0]} to {MICRO_BATCH_RANGE[1]} "
                         f"(got {micro_batches})")
    if isinstance(max_norm, bool) or not isinstance(max_norm, (int, float)):
        raise TypeError(f"max_norm must be a number (got {max_norm!r})")
    if not 0 < max_norm < math.inf:
        raise ValueError(f"max_norm must be > 0 and finite (got {max_norm!r})")
    if isinstance(log2_scale, bool) or not isinstance(log2_scale, int):
        raise TypeError(f"log2_scale must be an int (got {log2_scale!r})")
    if not LOG2_SCALE_RANGE[0] <= log2_scale <= LOG2_SCALE_RANGE[1]:
        raise ValueError(f"log2_scale must be from {LOG2_SCALE_RANGE[0]} to {LOG2_SCALE_RANGE[1]} "
                         f"(got {log2_scale})")
    return micro_batches, float(max_norm), log2_scale


def clipping_explorer(micro_batches: int = 4, max_norm: float = 1.0, log2_scale: int = 16) -> LivePlot:
    """The lesson-05 widget: micro-batches, clip threshold and loss scale → gradient norms, both clipping orders.

    Example:
        >>> w = clipping_explorer()
        >>> w.data.n_wrong_fired == 20
        True
    """
    _check(micro_batches, max_norm, log2_scale)
    if max_norm not in MAX_NORMS:
        raise ValueError(f"max_norm must be one of {list(MAX_NORMS)} (got {max_norm!r})")
    style = {"description_width": "initial"}
    layout = widgets.Layout(width="280px")
    controls = {
        "micro_batches": widgets.IntSlider(
            value=micro_batches, min=MICRO_BATCH_RANGE[0], max=MICRO_BATCH_RANGE[1], step=1,
            description="micro-batches", continuous_update=False, style=style, layout=layout),
        "max_norm": widgets.SelectionSlider(
            options=[(f"{v:g}", v) for v in MAX_NORMS], value=max_norm, description="max_norm",
            continuous_update=False, style=style, layout=layout),
        "log2_scale": widgets.IntSlider(
            value=log2_scale, min=LOG2_SCALE_RANGE[0], max=LOG2_SCALE_RANGE[1], step=1,
            description="log2(loss scale S)", continuous_update=False, style=style, layout=layout),
    }
    plot = LivePlot(clipping_run, draw_clipping, controls, figsize=(7.5, 3.6),
                    title="clip after unscale_, not before", update=update_clipping)
    plot.controls_box.layout.flex_flow = "row wrap"
    return plot


BENCHMARK_MOVES = [
    {"micro_batches": 1},
    {"max_norm": 0.1},
    {"log2_scale": 0},
    {"micro_batches": 8, "max_norm": 10.0},
    {"log2_scale": 24},
    {"micro_batches": 4, "max_norm": 1.0, "log2_scale": 16},  # back to the defaults
]
