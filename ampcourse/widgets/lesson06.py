"""Lesson 06 widget: pick a layer width and a batch size, measure FP32 against the AMP dtype right now.

:func:`speed_memory_explorer` times one ``(batch × width) @ (width × width)`` matrix product (the
forward matmul of a ``Linear(width, width)``) in FP32 and in the device's AMP dtype (bfloat16 where
supported, else float16), and counts what a two-layer ``Linear + ReLU`` stack saves for backward in
each (with :func:`ampcourse.bench.saved_activation_bytes`). The timing is short — a few calls, so it is
noisy — and is re-measured on every move; the byte counts are exact and cached.

On a CPU the widths stop at 256: without AVX512-BF16/AMX a bfloat16 product runs on a slow path (tens
of times slower than FP32 on the course's test machine), and a move must stay under 100 ms. There the
products are timed on one thread: sub-millisecond products on two threads of a busy machine time the
scheduler, not the dtype. The figure keeps its background: the y axes are drawn with the bars.
"""

from __future__ import annotations

import contextlib
import functools
import math
from dataclasses import dataclass

import ipywidgets as widgets
import numpy as np
import torch
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from ..bench import ActivationReport, format_bytes, format_flops, matmul_flops, saved_activation_bytes, time_fn
from ..device import pick_device
from .base import COLORS, LivePlot, figure_png, live

__all__ = ["BATCHES", "BENCHMARK_MOVES", "SpeedMemoryData", "amp_dtype", "draw_speed_memory", "measure",
           "readout", "speed_memory_explorer", "throughput_png", "update_speed_memory", "widths_for"]

CPU_WIDTHS = (32, 64, 128, 256)
CUDA_WIDTHS = (32, 64, 128, 256, 512, 1024, 2048, 4096)
BATCHES = (8, 16, 32, 64)
DEPTH = 2  # layers in the stack whose saved activations are counted
SEED = 0
BUDGET_S = 0.01  # seconds of timed calls per mode and move


def widths_for(device: torch.device) -> tuple[int, ...]:
    """The widths the slider offers on this device (the CPU's stop where bf16 gets too slow for a move)."""
    return CUDA_WIDTHS if device.type == "cuda" else CPU_WIDTHS


def amp_dtype(device: torch.device) -> torch.dtype:
    """bfloat16 where the device supports it, else float16."""
    if device.type == "cuda" and not torch.cuda.is_bf16_supported(including_emulation=False):
        return torch.float16
    return torch.bfloat16


@dataclass(frozen=True)
class SpeedMemoryData:
    """One widget position: per mode (``"fp32"`` and the AMP dtype's name) a median time and saved bytes."""

    width: int
    batch: int
    device: str
    amp: str
    seconds: dict[str, float]
    saved: dict[str, ActivationReport]

    @property
    def flops(self) -> int:
        return matmul_flops(self.batch, self.width, self.width)

    def achieved(self, mode: str) -> float:
        return self.flops / self.seconds[mode]

    @property
    def speedup(self) -> float:
        """FP32 time / AMP time (> 1: AMP is faster here)."""
        return self.seconds["fp32"] / self.seconds[self.amp]

    @property
    def activation_ratio(self) -> float:
        return self.saved[self.amp].total / self.saved["fp32"].total


@functools.lru_cache(maxsize=16)
def _stack(width: int, device_type: str) -> torch.nn.Sequential:
    torch.manual_seed(SEED)
    layers: list[torch.nn.Module] = []
    for _ in range(DEPTH):
        layers += [torch.nn.Linear(width, width), torch.nn.ReLU()]
    return torch.nn.Sequential(*layers).to(device_type)


@functools.lru_cache(maxsize=64)
def _saved(width: int, batch: int, device_type: str, dtype: torch.dtype | None) -> ActivationReport:
    model = _stack(width, device_type)
    x = torch.randn(batch, width, generator=torch.Generator().manual_seed(SEED)).to(device_type)

    def forward():
        with torch.autocast(device_type=device_type, dtype=dtype or torch.bfloat16, enabled=dtype is not None):
            return model(x)
    return saved_activation_bytes(forward, model)


def measure(width: int, batch: int, device: torch.device | None = None, repeats: int = 5) -> SpeedMemoryData:
    """Time the product in FP32 and the AMP dtype and count the saved bytes.

    Per mode: one untimed warm-up call, then the median of up to ``repeats`` timed calls — fewer when one
    call is slow, so that a move stays fast (:data:`BUDGET_S` of timed calls per mode). On a CPU the products
    run on one thread (see :func:`_one_cpu_thread`): both modes alike, so their ratio is a fair comparison.
    """
    from ..validate import as_device

    device = pick_device() if device is None else as_device("device", device)
    if isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 1:
        raise ValueError(f"repeats must be an int >= 1 (got {repeats!r})")
    allowed = widths_for(device)
    if isinstance(width, bool) or not isinstance(width, int) or width not in allowed:
        raise ValueError(f"width must be one of {list(allowed)} on {device.type} (got {width!r})")
    if isinstance(batch, bool) or not isinstance(batch, int) or batch not in BATCHES:
        raise ValueError(f"batch must be one of {list(BATCHES)} (got {batch!r})")
    low = amp_dtype(device)
    amp = {torch.bfloat16: "bf16", torch.float16: "fp16"}[low]
    g = torch.Generator().manual_seed(SEED)
    x = torch.randn(batch, width, generator=g).to(device)
    weight = _stack(width, device.type)[0].weight.detach()
    seconds, saved = {}, {}
    with _one_cpu_thread(device):
        for mode, dtype in (("fp32", None), (amp, low)):
            a, w = (x, weight) if dtype is None else (x.to(dtype), weight.to(dtype))
            def product(a=a, w=w):
                return torch.nn.functional.linear(a, w)
            first = time_fn(product, warmup=0, repeats=1, device=device).median  # doubles as the warm-up call
            runs = max(1, min(repeats, int(BUDGET_S / max(first, 1e-9))))  # slow products: fewer runs
            seconds[mode] = time_fn(product, warmup=0, repeats=runs, device=device).median
            saved[mode] = _saved(width, batch, device.type, dtype)
    return SpeedMemoryData(width, batch, str(device), amp, seconds, saved)


@contextlib.contextmanager
def _one_cpu_thread(device: torch.device):
    """On a CPU, run the timed products on one thread (restored afterwards). These products take well under a
    millisecond; on two threads of a loaded machine each one waits for a descheduled thread instead (a 0.1 ms
    product measured 20-50 ms on the course's 2-core test machine under load), which times the scheduler,
    not the dtype, and made a move cost over 100 ms. On a GPU, nothing changes."""
    if device.type != "cpu":
        yield
        return
    from ..device import one_thread

    with one_thread():
        yield


def readout(data: SpeedMemoryData) -> str:
    """One line on speed (measured now) and one on memory (exact)."""
    amp = data.amp
    faster = "faster" if data.speedup > 1 else "slower"
    on = " on one CPU thread" if data.device == "cpu" else ""
    return (f"<b>{data.batch} × {data.width} @ {data.width} × {data.width} on {data.device}</b>: fp32 "
            f"{format_flops(data.achieved('fp32'))}, {amp} {format_flops(data.achieved(amp))} — {amp} is "
            f"{data.speedup:.2f}× the fp32 speed ({faster}, measured just now{on}: a few runs, noisy).<br>"
            f"Saved for backward by {DEPTH} × (Linear + ReLU): fp32 {format_bytes(data.saved['fp32'].total)}, "
            f"{amp} {format_bytes(data.saved[amp].total)} of activations (× {data.activation_ratio:.2f}) + "
            f"{format_bytes(data.saved[amp].copies_total)} of {amp} weight copies.")


def _nice_top(value: float) -> float:
    """The smallest 1, 2 or 5 × 10^k at or above ``value``: the y range stays put while a bar moves inside it."""
    if not value > 0 or not math.isfinite(value):
        return 1.0
    decade = 10.0 ** math.floor(math.log10(value))
    return next(m * decade for m in (1, 2, 5, 10) if m * decade >= value * (1 - 1e-12))


def draw_speed_memory(fig: Figure, data: SpeedMemoryData) -> str:
    """Left: achieved GFLOP/s per mode. Right: KiB saved for backward (activations; weight copies on top, light)."""
    fig.subplots_adjust(left=0.1, right=0.98, bottom=0.12, top=0.9, wspace=0.35)
    left, right = fig.subplots(1, 2)
    x = np.arange(2)
    modes = ["fp32", data.amp]
    colors = [COLORS["blue"], COLORS["orange"]]
    speed = left.bar(x, np.zeros(2), color=colors)
    left.set_ylabel("achieved GFLOP/s")
    activations = right.bar(x, np.zeros(2), color=colors)
    copies = right.bar(x, np.zeros(2), color=COLORS["sky"])
    right.set_ylabel("KiB saved for backward")
    titles = []
    for ax in (left, right):
        ax.set_xticks(x, modes)
        ax.yaxis.set_major_locator(MaxNLocator(4))
        titles.append(ax.set_title("", fontsize=9))
    # A move changes the bars, the titles and, when a bar outgrows its axes or shrinks far below their top (see
    # _nice_top), the y axes: the y axes are drawn with the bars (so a new range costs their ticks alone, not
    # a new background), and so are the spines, which lie over the bars' bottom edges in a full render.
    spines = [spine for ax in (left, right) for spine in ax.spines.values()]
    live(fig).update(axes=(left, right), speed=speed, activations=activations, copies=copies, titles=titles,
                     dynamic=[*speed, *activations, *copies, left.yaxis, right.yaxis, *spines, *titles])
    return update_speed_memory(fig, data)


def update_speed_memory(fig: Figure, data: SpeedMemoryData) -> str:
    """Set the bars, y-ranges and titles of a figure :func:`draw_speed_memory` made to ``data``."""
    artists = live(fig)
    left, right = artists["axes"]
    modes = ["fp32", data.amp]
    gflops = np.array([data.achieved(m) / 1e9 for m in modes])
    kib = np.array([data.saved[m].total for m in modes]) / 1024
    copies = np.array([data.saved[m].copies_total for m in modes]) / 1024
    for bar, height in zip(artists["speed"], gflops, strict=True):
        bar.set_height(height)
    for bar, bar_copies, height, extra in zip(artists["activations"], artists["copies"], kib, copies, strict=True):
        bar.set_height(height)
        bar_copies.set_y(height)
        bar_copies.set_height(extra)
    for ax, top in ((left, _nice_top(gflops.max() * 1.15)), (right, _nice_top((kib + copies).max() * 1.15))):
        if ax.get_ylim() != (0, top):
            ax.set_ylim(0, top)
    artists["titles"][0].set_text(f"one matmul {data.batch}×{data.width} @ {data.width}×{data.width}")
    artists["titles"][1].set_text(f"{DEPTH} × (Linear + ReLU); light: weight copies")
    return readout(data)


def speed_memory_explorer(width: int = 128, batch: int = 32) -> LivePlot:
    """The lesson-06 widget: width and batch sliders → FP32 vs AMP speed (measured) and saved bytes (exact).

    Example:
        >>> w = speed_memory_explorer()
        >>> w.data.saved["fp32"].total == 3 * 32 * 128 * 4   # input + two ReLU outputs, 4 bytes each
        True
    """
    device = pick_device()
    measure(width, batch, device, repeats=1)  # validates the arguments
    style = {"description_width": "initial"}
    layout = widgets.Layout(width="300px")
    controls = {
        "width": widgets.SelectionSlider(options=list(widths_for(device)), value=width, description="width",
                                         continuous_update=False, style=style, layout=layout),
        "batch": widgets.SelectionSlider(options=list(BATCHES), value=batch, description="batch",
                                         continuous_update=False, style=style, layout=layout),
    }
    return LivePlot(lambda width, batch: measure(width, batch, device), draw_speed_memory, controls,
                    figsize=(7.5, 3.0), title="FP32 vs AMP: speed (measured now) and saved bytes",
                    update=update_speed_memory)


BENCHMARK_MOVES = [
    {"width": 256},
    {"batch": 64},
    {"width": 32},
    {"batch": 8},
    {"width": 64, "batch": 16},
    {"width": 128, "batch": 32},  # back to the defaults
]


def throughput_png(sweep: dict, device_type: str) -> bytes:
    """PNG of achieved GFLOP/s against matrix size, one line per mode (``{mode: [MatmulResult, ...]}``)."""
    if not isinstance(sweep, dict) or not sweep:
        raise TypeError("sweep must be a non-empty dict of mode -> list of MatmulResult")
    fig = Figure(figsize=(6.5, 3.2))
    fig.subplots_adjust(left=0.13, right=0.97, bottom=0.17, top=0.88)
    ax = fig.subplots()
    palette = (COLORS["blue"], COLORS["orange"], COLORS["green"], COLORS["vermillion"])
    for (mode, results), color in zip(sweep.items(), palette, strict=False):
        ax.plot([r.n for r in results], [r.achieved / 1e9 for r in results], marker="o", color=color, label=mode)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("matrix size n (n × n @ n × n)")
    ax.set_ylabel("achieved GFLOP/s")
    ax.set_title(f"achieved throughput on {device_type} (measured)", fontsize=10)
    ax.legend(frameon=False)
    return figure_png(fig)
