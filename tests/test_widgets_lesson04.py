"""Tests for the lesson-04 widget: GradScaler's scale over 10,000 simulated steps."""

import doctest
import math

import ipywidgets as widgets
import numpy as np
import pytest
import torch
import traitlets
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from ampcourse.scaler_run import real_scaler_run
from ampcourse.scaler_sim import overflow_pattern, simulate_grad_scaler
from ampcourse.widgets import lesson04
from ampcourse.widgets.base import LivePlot
from ampcourse.widgets.lesson04 import (
    BENCHMARK_MOVES,
    BURST_EVERY,
    BURST_LEN,
    GROWTH_INTERVALS,
    N_STEPS,
    OVERFLOW_RATES,
    draw_dynamics,
    draw_trajectory,
    dynamics,
    interpret,
    scale_dynamics,
    trajectory_png,
)

DEFAULTS = {"log2_init_scale": 16, "growth_factor": 2.0, "backoff_factor": 0.5, "growth_interval": 2000,
            "overflow_rate": 1e-4, "pattern": "ceiling"}


@pytest.fixture(scope="module")
def widget():
    return scale_dynamics()


def reference(log2_init_scale, growth_factor, backoff_factor, growth_interval, overflow_rate, pattern):
    """The simulation the widget should show, built independently of lesson04."""
    burst = {"burst_every": BURST_EVERY, "burst_len": BURST_LEN} if pattern == "bursts" else {}
    found_inf = overflow_pattern(N_STEPS, rate=overflow_rate, seed=0, **burst)
    return simulate_grad_scaler(found_inf, init_scale=2.0**log2_init_scale, growth_factor=growth_factor,
                                backoff_factor=backoff_factor, growth_interval=growth_interval,
                                overflow_above=2.0**18 if pattern == "ceiling" else None)


def test_controls_offer_only_valid_settings(widget):
    c = widget.controls
    assert isinstance(widget, LivePlot) and widget.values() == DEFAULTS
    assert isinstance(c["log2_init_scale"], widgets.IntSlider)
    assert (c["log2_init_scale"].min, c["log2_init_scale"].max) == (0, 24)  # 1 .. 2**24: finite, > 0
    assert isinstance(c["growth_factor"], widgets.FloatSlider) and c["growth_factor"].min > 1
    assert isinstance(c["backoff_factor"], widgets.FloatSlider)
    assert 0 < c["backoff_factor"].min and c["backoff_factor"].max < 1
    assert isinstance(c["growth_interval"], widgets.SelectionSlider)
    intervals = [value for _, value in c["growth_interval"].options]
    assert intervals == list(GROWTH_INTERVALS) and all(isinstance(v, int) and v >= 1 for v in intervals)
    rates = [value for _, value in c["overflow_rate"].options]
    assert rates == list(OVERFLOW_RATES) and all(0 <= r <= 1 for r in rates) and rates[0] == 0
    assert [value for _, value in c["pattern"].options] == ["ceiling", "random", "bursts"]
    # Every slider extreme is a valid simulator setting.
    for growth in (c["growth_factor"].min, c["growth_factor"].max):
        for backoff in (c["backoff_factor"].min, c["backoff_factor"].max):
            for k in (c["log2_init_scale"].min, c["log2_init_scale"].max):
                simulate_grad_scaler([True, False], init_scale=2.0**k, growth_factor=growth,
                                     backoff_factor=backoff, growth_interval=intervals[0])


def test_invalid_values_cannot_reach_the_simulator():
    widget = scale_dynamics()
    widget.controls["growth_factor"].value = 1.0  # a FloatSlider clamps to its range
    widget.controls["backoff_factor"].value = 1.0
    widget.controls["log2_init_scale"].value = 200
    assert widget.data.trace.growth_factor == widget.controls["growth_factor"].min > 1
    assert widget.data.trace.backoff_factor == widget.controls["backoff_factor"].max < 1
    assert widget.data.trace.init_scale == 2.0**24
    for name, bad in (("growth_interval", 0), ("overflow_rate", 2.0), ("pattern", "sawtooth")):
        with pytest.raises(traitlets.TraitError):
            widget.controls[name].value = bad


def test_factory_and_compute_validate_their_arguments():
    with pytest.raises(ValueError, match="growth_factor must be from 1.1"):
        scale_dynamics(growth_factor=1.0)
    with pytest.raises(ValueError, match="backoff_factor must be from 0.05"):
        scale_dynamics(backoff_factor=1.0)
    with pytest.raises(ValueError, match="growth_interval must be one of"):
        scale_dynamics(growth_interval=3)
    with pytest.raises(ValueError, match="overflow_rate must be one of"):
        scale_dynamics(overflow_rate=0.5)
    with pytest.raises(ValueError, match="pattern must be one of"):
        scale_dynamics(pattern="spikes")
    with pytest.raises(ValueError, match="log2_init_scale must be from 0 to 24"):
        scale_dynamics(log2_init_scale=25)
    with pytest.raises(TypeError, match="log2_init_scale must be an int"):
        dynamics(16.0)
    with pytest.raises(ValueError, match="growth_factor must be > 1"):
        dynamics(16, 1.0)
    with pytest.raises(ValueError, match="pattern must be one of"):
        dynamics(16, pattern="spikes")
    with pytest.raises(TypeError, match="overflow_rate must be a number"):
        dynamics(16, overflow_rate="0.1")


@pytest.mark.parametrize("name, value", [
    ("log2_init_scale", 8), ("growth_factor", 3.0), ("backoff_factor", 0.25), ("growth_interval", 50),
    ("overflow_rate", 0.01), ("pattern", "bursts"),
])
def test_widget_follows_every_control(name, value):
    widget = scale_dynamics()
    before = (widget.image.value, widget.readout.value)
    widget.controls[name].value = value  # as the browser does
    expected = {**DEFAULTS, name: value}
    assert widget.values() == expected
    assert widget.data.trace == reference(**expected)
    assert (widget.image.value, widget.readout.value) != before and widget.image.value != before[0]


@pytest.mark.parametrize("settings", [
    DEFAULTS,
    {**DEFAULTS, "overflow_rate": 0.01, "growth_interval": 100, "growth_factor": 4.0, "pattern": "bursts"},
    {**DEFAULTS, "overflow_rate": 0.0, "pattern": "bursts", "growth_interval": 200},
    {**DEFAULTS, "overflow_rate": 0.03, "backoff_factor": 0.25},
    {**DEFAULTS, "overflow_rate": 0.1, "growth_interval": 1, "growth_factor": 1.1, "backoff_factor": 0.95,
     "log2_init_scale": 0},
])
def test_readout_counts_equal_the_simulators(widget, settings, figures):
    widget.set(**settings)
    trace = reference(**settings)
    scales = np.array((*trace.scales, trace.final_scale))
    growths = int((scales[1:] > scales[:-1]).sum())
    backoffs = int((scales[1:] < scales[:-1]).sum())
    data = widget.data
    assert data.trace == trace
    assert (data.n_skipped, data.growths, data.backoffs) == (trace.n_skipped, growths, backoffs)
    assert data.min_scale == scales.min() and data.max_scale == scales.max()
    text = widget.readout.value
    assert f"{trace.n_skipped:,} of {N_STEPS:,} steps skipped ({trace.n_skipped / N_STEPS:.2%} wasted)" in text
    assert f"{growths:,} growth{'s' * (growths != 1)}, {backoffs:,} backoff{'s' * (backoffs != 1)}" in text
    assert f"final scale {lesson04._fmt_scale(trace.final_scale)};" in text
    assert f"min {lesson04._fmt_scale(scales.min())}, max {lesson04._fmt_scale(scales.max())}" in text
    assert interpret(data) in text
    figures(f"lesson04 widget {settings['overflow_rate']:g}/{settings['pattern']}/interval "
            f"{settings['growth_interval']}: {trace.n_skipped} skipped, {growths} growths, "
            f"final {lesson04._fmt_scale(trace.final_scale)} = simulate_grad_scaler")


def test_interpretations_name_what_happened():
    random = {**DEFAULTS, "pattern": "random", "overflow_rate": 3e-4}  # verdicts of the scale-independent model
    cases = {
        "Saw-tooth": DEFAULTS,
        "Balanced": random,
        "Never grows": {**random, "overflow_rate": 3e-3},
        "No overflow": {**random, "overflow_rate": 0.0},
        "Too aggressive": {**random, "overflow_rate": 0.01, "growth_interval": 100, "growth_factor": 4.0},
        "Backoff wins": {**random, "overflow_rate": 0.01, "growth_interval": 200},
        "Collapsed": {**random, "overflow_rate": 0.03, "backoff_factor": 0.25},
        "Runaway": {**random, "overflow_rate": 0.0, "growth_interval": 10, "growth_factor": 8.0},
    }
    for verdict, settings in cases.items():
        line = interpret(dynamics(**settings))
        assert line.startswith(verdict), (verdict, line)
    collapsed = dynamics(**cases["Collapsed"])
    assert collapsed.trace.final_scale == 0 and collapsed.log2_scales[-1] == -math.inf
    runaway = dynamics(**cases["Runaway"])
    assert runaway.blocked_growths > 0 and runaway.max_scale * 8.0 > float(np.finfo(np.float32).max)
    # 10,000 steps always hold a growth interval, so "nothing to adapt" needs a shorter trace.
    short = simulate_grad_scaler([False] * 50, growth_interval=2000)
    data = lesson04.DynamicsData({}, 0.0, "random", short, *lesson04.trace_stats(short))
    assert interpret(data).startswith("Nothing to adapt")


def test_trajectory_is_drawn_exactly_with_every_skipped_step_marked():
    data = dynamics(**{**DEFAULTS, "overflow_rate": 0.01, "growth_interval": 50, "pattern": "bursts"})
    fig = Figure()
    ax = draw_trajectory(fig, data.trace)
    curve, marks = ax.get_lines()[:2]
    xs, ys = np.asarray(curve.get_xdata()), np.asarray(curve.get_ydata())
    assert curve.get_drawstyle() == "steps-post" and len(xs) < N_STEPS  # change points only
    # The step line's value at every step is that step's log2 scale, and it ends at the final scale.
    at_step = ys[np.searchsorted(xs, np.arange(N_STEPS + 1), side="right") - 1]
    assert np.array_equal(at_step, data.log2_scales)
    assert list(marks.get_xdata()) == [i for i, s in enumerate(data.trace.skipped) if s]
    assert ax.get_xlabel() == "training step" and "log2" in ax.get_ylabel()
    assert [t.get_text() for t in ax.get_legend().get_texts()][:2] == [
        "loss scale S", f"skipped step ({data.n_skipped:,})"]


def test_static_figure_of_a_real_run():
    run = real_scaler_run(60)
    png = trajectory_png(run.simulated(), title="real FP16 run")
    assert png.startswith(b"\x89PNG") and len(png) > 5000
    fig = Figure()
    ax = draw_trajectory(fig, run.simulated(), label="real GradScaler")
    assert list(ax.get_lines()[1].get_xdata()) == run.skipped_steps


def test_every_benchmark_move_changes_figure_and_numbers():
    widget = scale_dynamics()
    assert len(BENCHMARK_MOVES) >= 2
    previous = (widget.image.value, widget.readout.value)
    seen = set()
    for move in BENCHMARK_MOVES:
        widget.set(**move)
        assert widget.values() == {**widget.values(), **move}
        now = (widget.image.value, widget.readout.value)
        assert now[0] != previous[0] and now[1] != previous[1], move
        seen.add(now)
        previous = now
    assert len(seen) == len(BENCHMARK_MOVES)
    assert widget.values() == DEFAULTS  # the last move goes back to the start
    with pytest.raises(ValueError, match="unknown control"):
        widget.set(nonsense=1)


def test_title_fits_the_figure_at_its_longest():
    data = dynamics(24, 7.9, 0.95, 2000, 3e-4, "bursts")
    fig = Figure(figsize=(7.5, 3.2))
    draw_dynamics(fig, data)
    renderer = FigureCanvasAgg(fig).get_renderer()
    assert all(text.get_window_extent(renderer).x1 <= fig.bbox.width for text in fig.texts)


def test_docstring_examples():
    assert doctest.testmod(lesson04).failed == 0


def test_ceiling_pattern_gives_a_saw_tooth_and_counts_its_cost():
    gentle = lesson04.dynamics(growth_interval=2000, overflow_rate=0.0, pattern="ceiling")
    eager = lesson04.dynamics(growth_interval=100, overflow_rate=0.0, pattern="ceiling")
    for data in (gentle, eager):
        assert max(data.trace.scales) <= 2 * lesson04.CEILING  # pushed back every time it passes the ceiling
        assert data.ceiling_hits == data.n_skipped > 0  # no random overflows: every skip is a ceiling hit
    assert eager.ceiling_hits > 10 * gentle.ceiling_hits  # growing more often wastes more steps
    assert "Saw-tooth" in lesson04.interpret(eager) and "from growing past the ceiling" in lesson04.readout(eager)


def test_overflow_above_matches_a_step_by_step_feedback_loop():
    from ampcourse.scaler_sim import simulate_grad_scaler

    found = [False] * 300
    trace = simulate_grad_scaler(found, init_scale=2.0**16, growth_interval=10, overflow_above=2.0**18)
    scale, tracker = 2.0**16, 0
    for i in range(300):
        assert trace.scales[i] == scale
        if scale > 2.0**18:
            scale, tracker = scale * 0.5, 0
        else:
            tracker += 1
            if tracker == 10:
                scale, tracker = scale * 2, 0
    assert trace.final_scale == scale
    with pytest.raises(ValueError, match="overflow_above must be a positive finite number"):
        simulate_grad_scaler(found, overflow_above=0.0)


def test_a_collapsed_scale_writes_inf_or_nan_into_the_weights():
    # B10: the widget's "Collapsed" line says the first clean step at such a scale destroys the weights; a real
    # GradScaler does exactly that (0 × inf = NaN at scale 0; -inf below 2^-128), and the criterion is the one
    # the widget uses.
    for init_scale in (0.0, 1e-40, 2.0**-129):
        assert lesson04.reciprocal_overflows(init_scale)
        param = torch.nn.Parameter(torch.ones(3))
        optimizer = torch.optim.SGD([param], lr=0.1)
        scaler = torch.amp.GradScaler("cpu", init_scale=init_scale)
        scaler.scale(param.sum()).backward()
        scaler.step(optimizer)  # a clean step: the scaled gradient (0 or tiny) is finite, so it is not skipped
        assert not torch.isfinite(param).any(), init_scale
    assert not lesson04.reciprocal_overflows(2.0**-126)
    line = interpret(dynamics(**{**DEFAULTS, "pattern": "random", "overflow_rate": 0.03, "backoff_factor": 0.25}))
    assert "writes it into every weight" in line and "silently" not in line
