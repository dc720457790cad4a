"""Tests for the lesson-05 widget: clipping before or after unscale_."""

import doctest

import numpy as np
import pytest
import torch

from ampcourse.accumulation import make_problem
from ampcourse.widgets import lesson05
from ampcourse.widgets.base import LivePlot
from ampcourse.widgets.lesson05 import BENCHMARK_MOVES, MAX_NORMS, N_STEPS, clipping_explorer, clipping_run

DEFAULTS = {"micro_batches": 4, "max_norm": 1.0, "log2_scale": 16}


def test_defaults_and_controls():
    w = clipping_explorer()
    assert isinstance(w, LivePlot) and w.values() == DEFAULTS
    c = w.controls
    assert (c["micro_batches"].min, c["micro_batches"].max) == (1, 8)
    assert (c["log2_scale"].min, c["log2_scale"].max) == (0, 24)
    assert [v for _, v in c["max_norm"].options] == list(MAX_NORMS)


def test_hand_written_backward_matches_autograd():
    problem = make_problem(8)
    model = problem.new_model()
    loss = torch.nn.functional.mse_loss(model(problem.inputs), problem.targets)
    loss.backward()
    params = [p.detach().double().numpy() for p in model.parameters()]
    value, grads = lesson05._grad(params, problem.inputs.double().numpy(), problem.targets.double().numpy())
    assert value == pytest.approx(loss.item(), rel=1e-6)
    for g, p in zip(grads, model.parameters(), strict=True):
        np.testing.assert_allclose(g, p.grad.double().numpy(), atol=1e-6)


@pytest.mark.parametrize("name, value", [("micro_batches", 1), ("max_norm", 0.1), ("log2_scale", 0)])
def test_widget_follows_each_control(name, value):
    w = clipping_explorer()
    before = (w.image.value, w.readout.value)
    w.controls[name].value = value
    expected = {**DEFAULTS, name: value}
    assert w.values() == expected
    ref = clipping_run(**expected)
    np.testing.assert_array_equal(w.data.norm, ref.norm)
    np.testing.assert_array_equal(w.data.wrong_norm, ref.wrong_norm)
    assert w.image.value != before[0] and w.readout.value != before[1]


def test_wrong_order_is_scaled_and_counts_match_readout():
    data = clipping_run(4, 1.0, 16)
    assert len(data.norm) == N_STEPS
    np.testing.assert_allclose(data.wrong_seen, 2.0**16 * data.norm)
    np.testing.assert_allclose(data.right_norm, np.minimum(data.norm, 1.0))
    np.testing.assert_allclose(data.wrong_norm, np.minimum(2.0**16 * data.norm, 1.0) / 2.0**16)
    w = clipping_explorer()
    text = lesson05.readout(w.data)
    assert f"right order {int((w.data.norm > 1.0).sum())} of {N_STEPS}" in text
    assert f"wrong order {int((w.data.wrong_seen > 1.0).sum())} of {N_STEPS}" in text
    assert w.readout.value == text
    assert w.data.n_wrong_fired == N_STEPS and 0 < w.data.n_right_fired < N_STEPS
    assert w.data.update_ratio < 1e-3
    # S = 1: both orders are the same
    same = clipping_run(4, 1.0, 0)
    assert same.n_right_fired == same.n_wrong_fired and same.update_ratio == pytest.approx(1.0)


def test_more_micro_batches_lower_the_gradient_noise():
    # a bigger effective batch: the step-to-step spread of the gradient norm shrinks
    assert clipping_run(8, 10.0, 0).norm.std() < clipping_run(1, 10.0, 0).norm.std()


def test_benchmark_moves_change_the_output():
    w = clipping_explorer()
    for move in BENCHMARK_MOVES:
        before = (w.image.value, w.readout.value)
        w.set(**move)
        assert w.values() == {**w.values(), **move}
        assert w.image.value != before[0], move


def test_validation():
    with pytest.raises(ValueError, match="micro_batches"):
        clipping_explorer(micro_batches=9)
    with pytest.raises(ValueError, match="max_norm must be one of"):
        clipping_explorer(max_norm=0.7)
    with pytest.raises(TypeError, match="log2_scale"):
        clipping_run(4, 1.0, 16.0)
    with pytest.raises(ValueError, match="max_norm"):
        clipping_run(4, -1.0, 16)


def test_docstring_examples():
    assert doctest.testmod(lesson05).failed == 0
