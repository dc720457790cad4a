
import ipywidgets as widgets
import numpy as np
import pytest

from ampcourse.gradients import bf16_fate, collect_gradients, fp16_fate
from ampcourse.widgets.base import LivePlot
from ampcourse.widgets.lesson02 import (
    BENCHMARK_MOVES,
    FLUSH_EDGE,
    LOG2_SCALE_RANGE,
    OVERFLOW_EDGE,
    default_sample,
    gradient_histogram,
    loss_scale_histogram,
    scale_view,
)


@pytest.fixture(scope="module")
def sample():
    return collect_gradients(device="cpu")


@pytest.fixture(scope="module")
def widget(sample):
    return loss_scale_histogram(sample=sample)


def test_slider_covers_two_to_the_0_to_24(widget):
    slider = widget.controls["log2_scale"]
    assert isinstance(widget, LivePlot) and isinstance(slider, widgets.IntSlider)
    assert (slider.min, slider.max, slider.step) == (0, 24, 1) == (*LOG2_SCALE_RANGE, 1)
    assert widget.values() == {"log2_scale": 0}


def test_dragging_the_slider_redraws(widget):
    widget.set(log2_scale=0)
    before = (widget.image.value, widget.readout.value)
    widget.controls["log2_scale"].value = 10  # as the browser does
    assert widget.data.log2_scale == 10
    assert widget.image.value != before[0] and widget.readout.value != before[1]
    assert "S = 2^10 = 1,024" in widget.readout.value


@pytest.mark.parametrize("log2_scale", [0, 4, 12, 19, 24])
def test_readout_counts_are_fp16_fates(widget, sample, log2_scale):
    widget.set(log2_scale=log2_scale)
    fp16, bf16 = fp16_fate(sample.all, 2.0**log2_scale), bf16_fate(sample.all, 2.0**log2_scale)
    assert widget.data.fp16 == fp16 and widget.data.bf16 == bf16
    labels = {"flushed": "flushed to 0", "subnormal": "subnormal", "normal": "normal",
              "overflow": "overflow to inf", "zero": "exactly 0 already"}
    for name, label in labels.items():
        assert f"<tr><td>{label}</td><td>{fp16.counts[name]:,}</td>" in widget.readout.value
        assert f"<td>{bf16.counts[name]:,}</td>" in widget.readout.value
    assert ("GradScaler would skip this step" in widget.readout.value) == (fp16.overflow > 0)


def test_every_benchmark_move_changes_figure_and_numbers(sample):
    widget = loss_scale_histogram(sample=sample)
    assert len(BENCHMARK_MOVES) >= 2
    seen = set()
    for move in BENCHMARK_MOVES:
        assert LOG2_SCALE_RANGE[0] <= move["log2_scale"] <= LOG2_SCALE_RANGE[1]
        widget.set(**move)
        seen.add((widget.image.value, widget.readout.value))
    assert len(seen) == len(BENCHMARK_MOVES)
    with pytest.raises(ValueError, match="unknown control"):
        widget.set(nonsense=1)


def test_histogram_shows_what_the_readout_counts(sample):
    histogram = gradient_histogram(sample)
    heights = histogram.weights + histogram.activations
    fp16 = fp16_fate(sample.all)
    assert np.isclose(heights.sum(), 100 * fp16.nonzero / fp16.total)
    assert np.allclose(np.diff(histogram.edges), 0.25) and histogram.edges[0] == int(histogram.edges[0])
    # The bin edges fall on the flush boundary 2**-25, so the bars left of it are the flushed values
    # (up to values within float32 rounding of log2 = -25 exactly).
    for k in (0, 4, 8):
        left = (histogram.edges[:-1] + k) < FLUSH_EDGE
        assert np.isclose(heights[left].sum(), 100 * fp16_fate(sample.all, 2.0**k).fractions["flushed"],
                          atol=0.01)
    # The x-range keeps every band and the whole histogram in view at every slider position.
    lo, hi = histogram.xlim
    assert lo < FLUSH_EDGE and hi > OVERFLOW_EDGE and hi >= histogram.edges[-1] + LOG2_SCALE_RANGE[1]


def test_default_widget_uses_the_cached_sample(monkeypatch):
    monkeypatch.setenv("AMPCOURSE_DEVICE", "cpu")
    assert default_sample() is default_sample()  # collected once, not once per widget or per move
    widget = loss_scale_histogram(3)
    assert widget.values() == {"log2_scale": 3} and widget.data.fp16 == fp16_fate(default_sample().all, 8.0)
    assert "image/png" in widget._repr_mimebundle_()


@pytest.mark.parametrize(
    ("args", "kwargs", "error", "words"),
    [
        ((25,), {}, ValueError, "log2_scale must be from 0 to 24"),
        ((-1,), {}, ValueError, "log2_scale must be from 0 to 24"),
        ((1.5,), {}, TypeError, "log2_scale must be an int"),
        ((True,), {}, TypeError, "log2_scale must be an int"),
        ((0,), {"sample": [1e-8]}, TypeError, "sample must be a GradientSample"),
    ],
)
def test_widget_validates(args, kwargs, error, words):
    with pytest.raises(error, match=words):
        loss_scale_histogram(*args, **kwargs)


def test_scale_view_validates(sample):
    histogram = gradient_histogram(sample)
    with pytest.raises(ValueError, match="log2_scale must be from 0 to 24"):
        scale_view(sample, histogram, 30)


def test_scale_counter_equals_casting_at_every_slider_position():
    import torch

    from ampcourse.gradients import bf16_fate, collect_gradients, fp16_fate
    from ampcourse.widgets.lesson02 import LOG2_SCALE_RANGE, ScaleCounter

    sample = collect_gradients(steps=2)
    crafted = torch.tensor([0.0, 2.0**-25, 2.0**-25 * 1.0001, 2.0**-14 - 2.0**-25, 2.0**-14 - 2.0**-24,
                            65504.0, 65519.99, 65520.0, -1e-9, 3e-41])
    for values in (sample.all, crafted):
        counter = ScaleCounter(values)
        for k in range(LOG2_SCALE_RANGE[0], LOG2_SCALE_RANGE[1] + 1):
            assert counter.fate(k, "fp16") == fp16_fate(values, 2.0**k), k
            assert counter.fate(k, "bf16") == bf16_fate(values, 2.0**k), k
