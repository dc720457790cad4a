"""Lesson 00 widget: one value, cast to FP32, BF16 and FP16 — where does it survive?"""

from __future__ import annotations

import math
from dataclasses import dataclass

import ipywidgets as widgets
import torch
from matplotlib.figure import Figure

from .base import COLORS, LivePlot, live

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
LOG10_RANGE = (-9.0, 6.0)


@dataclass(frozen=True)
class CastResult:
    dtype: str
    stored: float  # the value after the cast
    relative_error: float  # |stored - value| / value (1.0 when the value became 0)
    status: str  # "normal", "subnormal", "underflow to 0" or "overflow to inf"
    smallest_subnormal: float  # smallest_normal * eps (torch.finfo has no field for it)
    smallest_normal: float
    largest: float


def _check_log10(log10_value: object) -> None:
    """``log10_value`` is a number within the slider's range (the slider would clamp anything else silently)."""
    if isinstance(log10_value, bool) or not isinstance(log10_value, (int, float)):
        raise TypeError(f"log10_value must be a number from {LOG10_RANGE[0]:g} to {LOG10_RANGE[1]:g} "
                        f"(got {log10_value!r})")
    if not LOG10_RANGE[0] <= log10_value <= LOG10_RANGE[1]:
        raise ValueError(f"log10_value must be in {list(LOG10_RANGE)}, the slider's range: values from "
                         f"1e{LOG10_RANGE[0]:g} to 1e{LOG10_RANGE[1]:g} (got {log10_value})")


def cast_value(log10_value: float) -> tuple[float, list[CastResult]]:
    """Cast ``10**log10_value`` (a float32 value) to each of FP32, BF16, FP16.

    >>> value, rows = cast_value(-8.0)
    >>> [(r.dtype, r.status) for r in rows]
    [('float32', 'normal'), ('bfloat16', 'normal'), ('float16', 'underflow to 0')]
    """
    _check_log10(log10_value)
    value = torch.tensor(10.0 ** log10_value, dtype=torch.float32)
    rows = []
    for name, dtype in DTYPES.items():
        info = torch.finfo(dtype)
        stored = value.to(dtype).float().item()
        if stored == 0.0:
            status = "underflow to 0"
        elif math.isinf(stored):
            status = "overflow to inf"
        elif stored < info.tiny:
            status = "subnormal"
        else:
            status = "normal"
        error = 1.0 if stored == 0.0 else abs(stored - value.item()) / value.item()
        rows.append(CastResult(name, stored, error, status,
                               info.tiny * info.eps, info.tiny, info.max))
    return value.item(), rows


def draw_cast(fig: Figure, data: tuple[float, list[CastResult]]) -> str:
    """Each format's range on a log10 axis (subnormals lighter), the value as a vertical line."""
    value, rows = data
    fig.subplots_adjust(left=0.11, right=0.98, bottom=0.17, top=0.96)
    ax = fig.subplots()
    for y, row in enumerate(reversed(rows)):
        lo, mid, hi = (math.log10(row.smallest_subnormal), math.log10(row.smallest_normal),
                       math.log10(row.largest))
        ax.barh(y, mid - lo, left=lo, color=COLORS["sky"], height=0.5,
                label="subnormal range" if y == 0 else None)
        ax.barh(y, hi - mid, left=mid, color=COLORS["blue"], height=0.5,
                label="normal range" if y == 0 else None)
    live(fig)["value_line"] = ax.axvline(math.log10(value), color=COLORS["vermillion"], linewidth=2.5,
                                         label="your value")
    ax.set_yticks(range(len(rows)), [row.dtype for row in reversed(rows)])
    ax.set_xlim(-50, 40)
    ax.set_xlabel("log10 |value|  (bars: the magnitudes each format can store)")
    legend = ax.legend(loc="lower right", fontsize="small")
    # Only the line moves: the rest is a background drawn once (the legend is drawn again, over the line).
    live(fig)["dynamic"] = [live(fig)["value_line"], legend]
    return cast_readout(data)


def update_cast(fig: Figure, data: tuple[float, list[CastResult]]) -> str:
    """Move the value line of a figure :func:`draw_cast` made; the bars never change."""
    value, _ = data
    live(fig)["value_line"].set_xdata([math.log10(value)] * 2)
    return cast_readout(data)


def _relative_error_text(row: CastResult) -> str:
    """``12.34%``; for an overflow, no percentage (the error is unbounded: the value became inf)."""
    return "unbounded (inf)" if math.isinf(row.stored) else f"{row.relative_error:.2%}"


def cast_readout(data: tuple[float, list[CastResult]]) -> str:
    """The HTML table under the figure: what each format stores, its relative error and status."""
    value, rows = data
    cells = "".join(
        f"<tr><td>{row.dtype}</td><td>{row.stored:.6g}</td><td>{_relative_error_text(row)}</td>"
        f"<td>{row.status}</td></tr>" for row in rows)
    return (f"<b>value = {value:.6g}</b><table><tr><th>dtype</th><th>stored</th>"
            f"<th>relative error</th><th>status</th></tr>{cells}</table>")


def cast_survival(log10_value: float = -8.0) -> LivePlot:
    """The lesson-00 slider: pick a magnitude, see what FP32, BF16 and FP16 store.

    ``log10_value`` is where the slider starts, from -9 to 6 (:data:`LOG10_RANGE`); anything else is refused
    rather than clamped to the slider's end.
    """
    _check_log10(log10_value)
    slider = widgets.FloatSlider(value=log10_value, min=LOG10_RANGE[0], max=LOG10_RANGE[1], step=0.25,
                                 description="log10(value)", continuous_update=False,
                                 style={"description_width": "initial"})
    return LivePlot(cast_value, draw_cast, {"log10_value": slider}, title="one value in three formats",
                    update=update_cast)


BENCHMARK_MOVES = [{"log10_value": v} for v in (-9.0, -7.5, -4.0, 0.0, 4.5, 6.0)]
