"""Tests for the lesson-06 widget: FP32 vs AMP speed (measured) and bytes saved for backward (exact)."""

import doctest

import pytest
import torch
from matplotlib.figure import Figure

from ampcourse.widgets import REGISTRY, lesson06
from ampcourse.widgets.base import LivePlot
from ampcourse.widgets.lesson06 import BATCHES, BENCHMARK_MOVES, measure, speed_memory_explorer

CPU = torch.device("cpu")


def test_saved_bytes_are_exact_and_amp_halves_the_activations():
    data = measure(64, 16, CPU, repeats=1)
    assert data.amp == "bf16" and set(data.seconds) == {"fp32", "bf16"}
    # input, ReLU 1 output (= layer 2 input), ReLU 2 output: 3 tensors of 16 × 64
    assert data.saved["fp32"].by_dtype == {torch.float32: 3 * 16 * 64 * 4}
    assert data.saved["bf16"].by_dtype == {torch.bfloat16: 3 * 16 * 64 * 2}
    assert data.activation_ratio == 0.5
    # autocast saves a bf16 copy of the second weight (the first layer's input needs no gradient)
    assert data.saved["bf16"].parameter_copies == {torch.bfloat16: 64 * 64 * 2}
    assert data.saved["fp32"].copies_total == 0
    assert data.flops == 2 * 16 * 64 * 64
    assert data.achieved("fp32") == pytest.approx(data.flops / data.seconds["fp32"])
    assert data.speedup == pytest.approx(data.seconds["fp32"] / data.seconds["bf16"])


def test_readout_and_draw():
    data = measure(32, 8, CPU, repeats=1)
    fig = Figure()
    text = lesson06.draw_speed_memory(fig, data)
    assert text == lesson06.readout(data)
    assert "fp32 3 KiB, bf16 1.5 KiB of activations (× 0.50)" in text and "2 KiB of bf16 weight copies" in text
    assert len(fig.axes) == 2 and fig.axes[0].get_ylabel() == "achieved GFLOP/s"


def test_widget_follows_controls_and_moves_change_the_output():
    w = speed_memory_explorer()
    assert isinstance(w, LivePlot) and w.values() == {"width": 128, "batch": 32}
    assert list(w.controls["batch"].options) == list(BATCHES)
    for move in BENCHMARK_MOVES:
        before = (w.image.value, w.readout.value)
        w.set(**move)
        assert w.data.width == w.values()["width"] and w.data.batch == w.values()["batch"]
        assert w.readout.value != before[1], move
    assert REGISTRY["lesson06.speed_memory_explorer"] == (speed_memory_explorer, BENCHMARK_MOVES)


def test_moves_keep_the_background_and_time_on_one_cpu_thread():
    """The y axes are drawn with the bars: moves that change the ranges keep the figure's background. On a CPU the
    products are timed on one thread, and the thread count is restored."""
    w = speed_memory_explorer()
    background, ranges = w._background, set()
    threads = torch.get_num_threads()
    for move in BENCHMARK_MOVES:
        w.set(**move)
        ranges.add(tuple(ax.get_ylim() for ax in w.figure.axes))
        assert w._background is background, f"{move} rendered a new background"
        assert torch.get_num_threads() == threads
    assert len(ranges) > 1  # the moves did change the y ranges
    assert "measured just now on one CPU thread" in w.readout.value


def test_validation_and_device_widths():
    with pytest.raises(ValueError, match="width must be one of"):
        measure(100, 8, CPU)
    with pytest.raises(ValueError, match="batch must be one of"):
        measure(64, 7, CPU)
    assert max(lesson06.widths_for(CPU)) == 256 and max(lesson06.widths_for(torch.device("cuda"))) == 4096
    assert lesson06.amp_dtype(CPU) == torch.bfloat16


def test_docstring_examples():
    assert doctest.testmod(lesson06).failed == 0


def test_throughput_png():
    from ampcourse.bench import matmul_throughput

    sweep = {"fp32": [matmul_throughput(n, n, n, device="cpu", warmup=0, repeats=1) for n in (8, 16)]}
    png = lesson06.throughput_png(sweep, "cpu")
    assert png.startswith(b"\x89PNG")
    with pytest.raises(TypeError, match="sweep"):
        lesson06.throughput_png({}, "cpu")
