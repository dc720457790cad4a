"""Tests for the lesson-10 widget: delayed vs dynamic FP8 scaling (history length, margin, spike)."""

import ipywidgets as widgets
import numpy as np
import pytest
from matplotlib.figure import Figure

from ampcourse.fp8 import HISTORY_LENGTHS, N_STEPS, SPIKE_STEP, amax_sequence, simulate_scaling
from ampcourse.widgets import REGISTRY
from ampcourse.widgets.base import LivePlot
from ampcourse.widgets.lesson10 import BENCHMARK_MOVES, delayed_scaling, draw_scaling, readout, scaling_data


def test_widget_has_three_controls_and_follows_them():
    plot = delayed_scaling()
    assert isinstance(plot, LivePlot)
    assert plot.values() == {"history": 16, "margin": 0, "spike_bits": 0}
    assert isinstance(plot.controls["history"], widgets.SelectionSlider)
    assert list(plot.controls["history"].options) == list(HISTORY_LENGTHS)
    before = (plot.image.value, plot.readout.value)
    plot.set(spike_bits=6)
    assert plot.data.spike_bits == 6 and (plot.image.value, plot.readout.value) != before


def test_every_benchmark_move_changes_the_figure_or_the_readout():
    plot = delayed_scaling()
    assert REGISTRY["lesson10.delayed_scaling"] == (delayed_scaling, BENCHMARK_MOVES)
    for move in BENCHMARK_MOVES:
        before = (plot.image.value, plot.readout.value)
        plot.set(**move)
        assert (plot.image.value, plot.readout.value) != before, move


def test_data_is_the_simulator_on_the_amax_sequence():
    data = scaling_data(8, 1, 4)
    log2_amax = amax_sequence(N_STEPS, spike_bits=4)
    expected = simulate_scaling(log2_amax, 8, 1, "e4m3")
    assert np.array_equal(data.delayed.log2_scale_amax, expected.log2_scale_amax)
    assert np.array_equal(data.delayed.flushed, expected.flushed)
    assert np.array_equal(data.dynamic.log2_scale_amax, log2_amax)  # dynamic: the current amax


@pytest.mark.parametrize("history", HISTORY_LENGTHS)
def test_a_spike_is_remembered_for_exactly_the_history_length(history):
    data = scaling_data(history, 0, 6)
    assert data.steps_remembering_spike == history
    assert data.delayed.saturated[SPIKE_STEP] > 0  # delayed scaling cannot see the spike coming: it clips
    assert data.dynamic.saturated.max() == 0  # dynamic scaling never clips (margin >= 0)
    assert f"for {history} more step" in readout(data)


def test_margin_trades_clipping_for_underflow():
    no_margin, margin = scaling_data(1, 0, 0), scaling_data(1, 1, 0)
    assert no_margin.delayed.saturated_steps > 0 and margin.delayed.saturated_steps == 0  # the wobble is 1 binade
    assert margin.delayed.flushed.mean() > no_margin.delayed.flushed.mean()
    assert "no step clips" in readout(margin)


def test_longer_history_clips_less_without_a_spike():
    clips = [scaling_data(h, 0, 0).delayed.saturated_steps for h in HISTORY_LENGTHS]
    assert clips == sorted(clips, reverse=True) and clips[0] > clips[-1]


def test_draw_returns_the_readout_and_draws_two_axes():
    data = scaling_data(16, 0, 6)
    fig = Figure()
    assert draw_scaling(fig, data) == readout(data)
    assert len(fig.axes) == 2


@pytest.mark.parametrize(("kwargs", "error"), [
    ({"history": 3}, ValueError), ({"history": True}, ValueError), ({"margin": -1}, ValueError),
    ({"margin": 1.5}, TypeError), ({"spike_bits": 9}, ValueError), ({"spike_bits": "2"}, TypeError),
])
def test_arguments_are_validated(kwargs, error):
    with pytest.raises(error):
        scaling_data(**kwargs)
    with pytest.raises(error):
        delayed_scaling(**kwargs)


# --- the granularity widget ---------------------------------------------------------------------------------
from ampcourse.fp8 import OUTLIER_LOG10, granularity_errors  # noqa: E402
from ampcourse.widgets.lesson10 import (  # noqa: E402
    GRANULARITY_MOVES,
    draw_granularity,
    granularity_data,
    granularity_explorer,
    granularity_readout,
    update_granularity,
)


def test_granularity_widget_is_registered_and_every_move_changes_it():
    plot = granularity_explorer()
    assert REGISTRY["lesson10.granularity_explorer"] == (granularity_explorer, GRANULARITY_MOVES)
    assert list(plot.controls["log10_outlier"].options) == [(f"10^{p:g}", p) for p in OUTLIER_LOG10]
    for move in GRANULARITY_MOVES:
        before = (plot.image.value, plot.readout.value)
        plot.set(**move)
        assert (plot.image.value, plot.readout.value) != before, move


def test_granularity_data_is_the_emulation_at_the_slider():
    data = granularity_data(6.0)
    assert list(data.results) == granularity_errors(6.0)
    index = OUTLIER_LOG10.index(6.0)
    assert data.curves["per-tensor"][0][index] == pytest.approx(100 * data.results[0].other_rows_error)


def test_granularity_update_shows_what_a_full_draw_shows():
    fig, fresh = Figure(), Figure()
    draw_granularity(fig, granularity_data(0.0))
    data = granularity_data(6.5)
    assert update_granularity(fig, data) == draw_granularity(fresh, data) == granularity_readout(data)
    moved = [line.get_xydata().tolist() for ax in fig.axes for line in ax.lines]
    drawn = [line.get_xydata().tolist() for ax in fresh.axes for line in ax.lines]
    assert moved == drawn


@pytest.mark.parametrize("value", [0.25, 8.0, -0.5, "5", True])
def test_granularity_positions_are_validated(value):
    with pytest.raises(ValueError):
        granularity_data(value)
    with pytest.raises(ValueError):
        granularity_explorer(value)
