"""Tests for ampcourse.scaler_run: a real FP16 GradScaler run, its replay by the simulator, one step's anatomy."""

import doctest
import math

import numpy as np
import pytest
import torch

from ampcourse import scaler_run
from ampcourse.scaler_run import (
    ANATOMY_COLUMNS,
    real_scaler_run,
    step_anatomy,
    step_was_skipped,
    tiny_model,
)
from ampcourse.scaler_sim import overflow_pattern, simulate_grad_scaler


@pytest.fixture(scope="module")
def run():
    return real_scaler_run()


def test_real_run_skips_steps_and_the_simulator_replays_it_exactly(run, figures):
    assert run.steps == len(run.scales) == len(run.found_inf) == len(run.losses) == 200
    assert run.n_params == sum(p.numel() for p in tiny_model()[0].parameters()) < 5000
    # 2**24 overflows FP16 in the backward pass: the first steps are skipped while the scale halves...
    assert run.found_inf[0] and run.scales[0] == 2.0**24 and run.scales[1] == 2.0**23
    # ...and later growths (every 20 clean steps) overflow again.
    assert run.n_skipped > 0 and any(step > 20 for step in run.skipped_steps)
    assert all(math.isfinite(loss) for loss in run.losses), "the loss is finite even on skipped steps"
    assert run.losses[-1] < run.losses[0]
    trace = run.simulated()
    assert trace.scales == run.scales  # exact: floats compared with ==
    assert trace.final_scale == run.final_scale and trace.skipped == run.found_inf
    assert run.matches_simulator()
    assert "simulator identical" in run.summary()
    figures(f"real fp16 run: {run.steps} steps, {run.n_skipped} skipped {run.skipped_steps}, scale "
            f"2^{math.log2(run.scales[0]):g} -> 2^{math.log2(run.final_scale):g}, "
            f"loss {run.losses[0]:.3f} -> {run.losses[-1]:.3f}, simulator identical")


def test_skip_rule_agrees_with_the_parameters_the_hook_and_the_gradients(run):
    """The scale shrank ⇔ optimizer.step() did not run ⇔ no parameter changed ⇔ a gradient was inf/NaN."""
    assert run.found_inf == tuple(not changed for changed in run.params_changed)
    assert run.found_inf == tuple(not stepped for stepped in run.optimizer_stepped)
    assert run.found_inf == run.nonfinite_grads
    assert sum(run.params_changed) == run.steps - run.n_skipped > 0


def test_other_settings_and_a_scale_float32_cannot_hold_also_replay_exactly(figures):
    # init 0.1 is not a float32: the scale GradScaler uses is float32(0.1), and so is the simulator's.
    run = real_scaler_run(150, seed=3, init_scale=0.1, growth_factor=1.7, backoff_factor=0.3, growth_interval=3)
    assert run.scales[0] == float(torch.tensor(0.1, dtype=torch.float32)) != 0.1
    assert run.n_skipped > 0 and run.matches_simulator()
    assert run.found_inf == tuple(not changed for changed in run.params_changed) == run.nonfinite_grads
    figures(f"real fp16 run (init 0.1, growth 1.7, backoff 0.3, interval 3): {run.n_skipped} of {run.steps} "
            "skipped, simulator identical")


def test_runs_are_deterministic_and_leave_the_global_rng_alone(run):
    state = torch.random.get_rng_state()
    again = real_scaler_run()
    assert torch.equal(state, torch.random.get_rng_state())
    assert again == run
    other = real_scaler_run(seed=1)
    assert other.losses != run.losses and other.matches_simulator()


def test_real_run_validates_its_arguments():
    with pytest.raises(ValueError, match="steps must be an int >= 1"):
        real_scaler_run(0)
    with pytest.raises(TypeError, match="steps must be an int"):
        real_scaler_run(10.0)
    with pytest.raises(ValueError, match="seed must be an int >= 0"):
        real_scaler_run(10, seed=-1)
    with pytest.raises(ValueError, match="growth_factor must be > 1"):
        real_scaler_run(10, growth_factor=1.0)
    with pytest.raises(ValueError, match=r"backoff_factor must be in \(0, 1\)"):
        real_scaler_run(10, backoff_factor=1.0)
    with pytest.raises(ValueError, match="growth_interval must be an int >= 1"):
        real_scaler_run(10, growth_interval=0)
    with pytest.raises(ValueError, match="init_scale must be > 0"):
        real_scaler_run(10, init_scale=1e39)
    with pytest.raises(ValueError, match="lr must be > 0"):
        real_scaler_run(10, lr=0.0)
    with pytest.raises(TypeError, match="lr must be a real number"):
        real_scaler_run(10, lr="0.1")
    with pytest.raises(TypeError, match="seed must be an int"):
        tiny_model(True)


def test_step_was_skipped_examples_and_errors():
    assert step_was_skipped(65536.0, 32768.0) is True
    assert step_was_skipped(65536.0, 65536.0) is False
    assert step_was_skipped(65536.0, 131072.0) is False
    assert step_was_skipped(1, 0) is True  # backed off into 0: still seen
    with pytest.raises(ValueError, match="scale_before is 0"):
        step_was_skipped(0.0, 0.0)
    with pytest.raises(ValueError, match="scale_after must be >= 0"):
        step_was_skipped(1.0, math.nan)
    with pytest.raises(ValueError, match="scale_before must be >= 0"):
        step_was_skipped(-1.0, 1.0)
    with pytest.raises(TypeError, match="scale_before must be a real number"):
        step_was_skipped(torch.tensor(1.0), 1.0)
    with pytest.raises(TypeError, match="scale_after must be a real number"):
        step_was_skipped(1.0, True)


@pytest.mark.parametrize("growth_factor, backoff_factor, interval, init", [
    (2.0, 0.5, 1, 2.0**16), (1.7, 0.3, 3, 0.1), (1.1, 0.95, 2, 3.0e38), (8.0, 0.05, 1, 1.0), (1.5, 0.9, 5, 1e-30),
])
def test_step_was_skipped_matches_every_simulated_update(growth_factor, backoff_factor, interval, init):
    """Over whole simulated runs (growth to float32's top included), the rule finds exactly the skips.

    Checked while the scale is a normal float32 (>= 2**-126); below, see the caveats test.
    """
    found_inf = overflow_pattern(3000, rate=0.3, seed=7)
    trace = simulate_grad_scaler(found_inf, init_scale=init, growth_factor=growth_factor,
                                 backoff_factor=backoff_factor, growth_interval=interval)
    after = (*trace.scales[1:], trace.final_scale)
    checked = [(step_was_skipped(b, a), skipped)
               for b, a, skipped in zip(trace.scales, after, trace.skipped, strict=True) if b >= 2.0**-126]
    assert all(rule == truth for rule, truth in checked)
    assert sum(truth for _, truth in checked) > 50 and sum(not truth for _, truth in checked) > 50


def test_step_was_skipped_caveats_are_real():
    """The documented blind spots: a backoff within float32 rounding of 1, and a scale of 0."""
    trace = simulate_grad_scaler([True], init_scale=1.0, backoff_factor=1 - 1e-9)
    assert trace.skipped == (True,) and trace.final_scale == trace.scales[0] == 1.0
    assert not step_was_skipped(trace.scales[0], trace.final_scale)  # skipped, yet unseen
    tiny = 2.0**-149  # float32's smallest subnormal: × 0.9 rounds back to itself
    trace = simulate_grad_scaler([True], init_scale=tiny, backoff_factor=0.9)
    assert trace.final_scale == tiny and not step_was_skipped(tiny, trace.final_scale)


def test_step_anatomy_scaled_and_unscaled_gradients(figures):
    anatomy = step_anatomy()
    assert anatomy.scale_before == 2.0**16 == anatomy.scale_after
    assert anatomy.scaled_ratio == pytest.approx(2.0**16, rel=1e-2)  # FP16 rounding: not exactly S
    assert anatomy.unscaled_ratio == pytest.approx(1.0, rel=1e-2)
    assert anatomy.scaled_ratio / anatomy.unscaled_ratio == pytest.approx(2.0**16, rel=1e-6)
    assert not anatomy.found_inf and anatomy.optimizer_stepped and anatomy.params_changed
    stages = [row["stage"] for row in anatomy.rows]
    assert stages == ["1. FP32 reference", "2. scaled backward", "3. unscale", "4. inf check", "5. step",
                      "6. update"]
    assert all(tuple(row) == ANATOMY_COLUMNS for row in anatomy.rows)
    rows = {row["stage"]: row for row in anatomy.rows}
    reference_max = rows["1. FP32 reference"]["max |grad|"]
    assert rows["2. scaled backward"]["max |grad|"] == pytest.approx(2.0**16 * reference_max, rel=1e-2)
    assert rows["3. unscale"]["max |grad|"] == pytest.approx(reference_max, rel=1e-2)
    assert rows["2. scaled backward"]["inf/NaN values"] == "0 of 2,177"
    text = anatomy.table().text()
    assert "one AMP step at S = 65,536" in text and "optimizer.step() ran" in text
    figures(f"step anatomy at S = 2^16: scaled grads / fp32 grads = {anatomy.scaled_ratio:.1f}, "
            f"after unscale_ = {anatomy.unscaled_ratio:.5f}")


def test_step_anatomy_with_an_injected_inf_skips_and_halves_the_scale(figures):
    anatomy = step_anatomy(inject_inf=True)
    assert anatomy.found_inf and not anatomy.optimizer_stepped and not anatomy.params_changed
    assert anatomy.scale_after == anatomy.scale_before / 2 == 2.0**15
    rows = {row["stage"]: row for row in anatomy.rows}
    assert rows["2b. inject inf"]["inf/NaN values"] == "1 of 2,177"
    assert rows["3. unscale"]["max |grad|"] == math.inf  # unscaling leaves an inf an inf
    assert rows["3. unscale"][scaler_run.RATIO_COLUMN] == pytest.approx(1.0, rel=1e-2)  # the finite ones
    assert rows["6. update"]["scale"] == 2.0**15
    assert "was SKIPPED" in anatomy.table().text()
    quarter = step_anatomy(2.0**10, inject_inf=True, backoff_factor=0.25)
    assert quarter.scale_after == 2.0**8
    figures(f"step anatomy, inf injected: step skipped, scale {anatomy.scale_before:g} -> {anatomy.scale_after:g}")


def test_step_anatomy_real_overflow_at_two_to_the_24():
    anatomy = step_anatomy(2.0**24)
    assert anatomy.found_inf and not anatomy.optimizer_stepped and not anatomy.params_changed
    assert anatomy.scale_after == 2.0**23 and anatomy.scaled_ratio is None  # no finite gradient left
    assert "overflowed" in anatomy.rows[1]["what happened"]


def test_step_anatomy_validates_its_arguments():
    with pytest.raises(TypeError, match="inject_inf must be a bool"):
        step_anatomy(inject_inf=1)
    with pytest.raises(ValueError, match="init_scale must be > 0"):
        step_anatomy(0.0)
    with pytest.raises(ValueError, match=r"backoff_factor must be in \(0, 1\)"):
        step_anatomy(backoff_factor=0.0)
    with pytest.raises(ValueError, match="seed must be an int >= 0"):
        step_anatomy(seed=-2)


def test_tiny_model_is_seeded():
    (m1, x1, y1), (m2, x2, y2) = tiny_model(5), tiny_model(5)
    assert torch.equal(x1, x2) and torch.equal(y1, y2)
    assert all(torch.equal(p, q) for p, q in zip(m1.parameters(), m2.parameters(), strict=True))
    assert not torch.equal(tiny_model(6)[1], x1)
    assert np.isfinite(y1.numpy()).all()


def test_docstring_examples():
    assert doctest.testmod(scaler_run).failed == 0


def test_scale_read_before_the_first_scale_call_is_not_yet_float32():
    """Why step_was_skipped's docstring reads the scale after scaler.scale(loss)."""
    scaler = torch.amp.GradScaler("cpu", init_scale=0.7)
    before_scale = scaler.get_scale()
    scaler.scale(torch.tensor(1.0))
    after_scale = scaler.get_scale()
    assert before_scale == 0.7 and after_scale == torch.tensor(0.7).item()
    assert step_was_skipped(before_scale, after_scale)  # the false alarm a too-early read gives
    assert not step_was_skipped(after_scale, after_scale)


def test_nan_origin_the_weight_gradients_add_plus_and_minus_inf():
    # B7: at S = 2^24 the float16 activation gradients are +inf and -inf (no NaN); the NaNs appear in the weight
    # and bias gradients, which sum the examples' +inf and -inf over the batch.
    rows = {r["gradient"].split()[0]: r for r in scaler_run.nan_origin(2.0**24).rows}
    out = rows["∂loss/∂output"]
    assert out["+inf"] > 0 and out["-inf"] > 0 and out["NaN"] == 0 and out["dtype"] == "float16"
    into_tanh = rows["∂loss/∂(x·W0ᵀ"]
    assert into_tanh["+inf"] + into_tanh["-inf"] == into_tanh["values"] and into_tanh["NaN"] == 0
    for name in ("0.weight.grad", "0.bias.grad", "2.weight.grad", "2.bias.grad"):
        assert rows[name]["NaN"] == rows[name]["values"], name
    assert all(r["+inf"] == r["-inf"] == r["NaN"] == 0 for r in scaler_run.nan_origin(2.0**16).rows)
    with pytest.raises(ValueError, match="scale"):
        scaler_run.nan_origin(0.0)
