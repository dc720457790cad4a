"""Tests for lesson 05's AMP recipes: accumulation, clipping, several models, gradient penalty, checkpoints."""

import doctest
import math

import pytest
import torch

from ampcourse import accumulation as acc


@pytest.fixture(scope="module")
def clip():
    return acc.clip_demo()


def test_make_problem_is_deterministic_and_validates():
    a, b = acc.make_problem(16), acc.make_problem(16)
    assert torch.equal(a.inputs, b.inputs) and torch.equal(a.targets, b.targets)
    for p, q in zip(a.new_model().parameters(), b.new_model().parameters(), strict=True):
        assert torch.equal(p, q)
    with pytest.raises(TypeError, match="n_samples"):
        acc.make_problem(16.0)
    with pytest.raises(ValueError, match="seed"):
        acc.make_problem(16, seed=-1)


def test_accumulated_grads_validates_arguments():
    problem = acc.make_problem(16)
    model = problem.new_model()
    with pytest.raises(TypeError, match="model"):
        acc.accumulated_grads("model", problem.data, 4)
    with pytest.raises(TypeError, match="data"):
        acc.accumulated_grads(model, problem.inputs, 4)
    with pytest.raises(ValueError, match="micro_batches"):
        acc.accumulated_grads(model, problem.data, 0)
    with pytest.raises(ValueError, match="micro_batches = 3 does not divide"):
        acc.accumulated_grads(model, problem.data, 3)
    with pytest.raises(ValueError, match="remainder"):
        acc.accumulated_grads(model, problem.data, 4, remainder="left")
    with pytest.raises(TypeError, match="amp"):
        acc.accumulated_grads(model, problem.data, 4, amp=1)


def test_fp32_accumulation_equals_full_batch_to_rounding(figures):
    report = acc.equivalence_report(4)
    figures(f"lesson05 FP32 accumulation (4 micro-batches) vs full batch: max |diff| = {report.fp32_max_diff:.3g} "
            f"(max |grad| {report.max_abs_grad:.3g}, bit-identical: {report.fp32_equal_bits})")
    assert report.fp32_max_diff <= 1e-6 * max(1.0, report.max_abs_grad)
    # AMP: close, not equal (FP16 rounding of activations and gradients)
    figures(f"lesson05 AMP accumulation vs FP32 full batch: max |diff| = {report.amp_max_diff:.3g}, "
            f"relative {report.amp_rel_diff:.3g}; AMP accumulated vs AMP full: {report.amp_vs_amp_max_diff:.3g}")
    assert not report.amp_equal_bits and report.amp_max_diff > 10 * report.fp32_max_diff
    assert report.amp_rel_diff < 1e-2
    assert "FP32 accumulated" in report.table().text()


@pytest.mark.parametrize("micro_batches", [1, 2, 8])
def test_accumulation_matches_full_batch_for_any_split(micro_batches):
    problem = acc.make_problem(16)
    full = acc.full_batch_grads(problem.new_model(), problem.data)
    got = acc.accumulated_grads(problem.new_model(), problem.data, micro_batches)
    assert got.window_sizes == (micro_batches,) and got.divisors == (micro_batches,)
    assert torch.allclose(got.grad, full, atol=1e-6, rtol=0)


def test_naive_remainder_makes_the_short_window_too_small(figures):
    report = acc.remainder_report(4, n_micro=10, micro_batch_size=2)
    figures(f"lesson05 remainder: windows {report.window_sizes}; last-window ‖grad‖ / ‖mean-loss grad of that "
            f"window‖: right {report.right_ratio:.7f}, naive {report.naive_ratio:.7f} (expected "
            f"{report.expected_naive_ratio})")
    assert report.window_sizes == (4, 4, 2)
    assert report.right_ratio == pytest.approx(1.0, abs=1e-6) and report.right_max_diff < 1e-6
    assert report.naive_ratio == pytest.approx(0.5, abs=1e-6)
    report3 = acc.remainder_report(4, n_micro=7)
    assert report3.window_sizes == (4, 3) and report3.naive_ratio == pytest.approx(0.75, abs=1e-6)
    with pytest.raises(ValueError, match="no short window"):
        acc.remainder_report(4, n_micro=8)


def test_clip_wrong_order_sees_the_scaled_norm(clip, figures):
    figures(f"lesson05 clip @ S=2^16, max_norm=1: right order sees {clip.right_norm:.6g}, wrong order "
            f"{clip.wrong_norm:.6g} (ratio {clip.wrong_norm / clip.right_norm:.6g}); ‖update‖ right "
            f"{clip.right_update:.3g}, wrong {clip.wrong_update:.3g} (ratio {clip.update_ratio:.3g}); "
            f"clip_grad_value_(0.01) update right {clip.value_clip_update:.3g}, wrong "
            f"{clip.wrong_value_clip_update:.3g}")
    assert clip.wrong_norm / clip.right_norm == pytest.approx(clip.scale, rel=1e-3)
    assert clip.right_norm == pytest.approx(clip.true_norm, rel=1e-6)
    assert clip.wrong_fired
    # The wrong order leaves a gradient of norm max_norm / S: the update is lr * max_norm / S.
    assert clip.wrong_update == pytest.approx(clip.lr * clip.max_norm / clip.scale, rel=1e-2)
    assert clip.update_ratio < 1e-3
    assert clip.wrong_value_clip_update < 1e-3 * clip.value_clip_update
    assert "wrong" in clip.table().text()


def test_right_order_does_not_clip_small_gradients():
    demo = acc.clip_demo(max_norm=10.0)
    assert not demo.right_fired and demo.wrong_fired
    assert demo.right_update == pytest.approx(demo.lr * demo.true_norm, rel=1e-3)


def test_unscale_twice_raises(clip, figures):
    figures(f"lesson05 unscale_ twice: RuntimeError {clip.unscale_twice_error!r}")
    assert "unscale_() has already been called on this optimizer" in clip.unscale_twice_error


def test_clip_grad_norm_with_inf_returns_nonfinite_and_step_skips(clip):
    assert math.isinf(clip.inf_norm)
    assert clip.inf_step_skipped and clip.inf_scale_after == clip.scale / 2
    assert clip.inf_nonfinite_after_clip >= 1  # inf * (max_norm / inf) = inf * 0 = NaN


def test_clip_demo_validates():
    with pytest.raises(ValueError, match="max_norm"):
        acc.clip_demo(max_norm=0)
    with pytest.raises(TypeError, match="scale"):
        acc.clip_demo(scale="big")


def test_multi_model_pattern_steps_both_and_updates_once(figures):
    step = acc.multi_model_step()
    assert step.stepped == (True, True) and step.params_changed == (True, True)
    assert (step.scale_calls, step.step_calls, step.update_calls) == (2, 2, 1)
    assert step.scale_after == step.scale_before  # one clean update: no growth before growth_interval
    inf = acc.multi_model_step(inject_inf=True)
    figures(f"lesson05 multi-model: clean stepped {step.stepped}, scale {step.scale_before:g} → "
            f"{step.scale_after:g}; inf in model1: stepped {inf.stepped}, scale → {inf.scale_after:g}")
    assert inf.stepped == (True, False) and inf.params_changed == (True, False)
    assert inf.scale_after == inf.scale_before / 2


def test_gradient_penalty_close_to_fp32(figures):
    g = acc.gradient_penalty_step()
    figures(f"lesson05 gradient penalty @ S={g.scale:g}: AMP {g.penalty:.7g} vs FP32 {g.fp32_penalty:.7g} "
            f"(rel {g.penalty_rel_diff:.3g}); update rel diff {g.update_rel_diff:.3g}; stepped {g.stepped}")
    assert g.stepped
    assert g.penalty_rel_diff < 1e-2 and g.penalty != g.fp32_penalty
    assert g.update_rel_diff < 1e-2


def test_resume_with_scaler_is_bit_identical_and_without_differs(tmp_path, figures):
    r = acc.resume_matches(tmp_path / "ckpt.pt", k=20)
    figures(f"lesson05 resume 20+20 vs 40: scale straight {r.straight_scale:g}, resumed {r.resumed_scale:g}, "
            f"max |param diff| {r.resumed_max_param_diff:g}; without scaler state: scale {r.no_scaler_scale:g}, "
            f"max |param diff| {r.no_scaler_max_param_diff:.3g}, skipped {r.no_scaler_skipped} vs "
            f"{r.straight_skipped}")
    assert r.resumed_identical and r.resumed_max_param_diff == 0.0
    assert r.resumed_scale == r.straight_scale and r.resumed_skipped == r.straight_skipped
    assert not r.no_scaler_identical and r.no_scaler_max_param_diff > 1e-3
    assert r.no_scaler_skipped != r.straight_skipped


def test_fp32_checkpoint_resumes_under_amp(tmp_path, figures):
    r = acc.resume_from_fp32(tmp_path / "fp32.pt", k=20)
    figures(f"lesson05 FP32 → AMP resume: skipped {r.skipped}, final scale {r.final_scale:g}, loss "
            f"{r.loss_at_checkpoint:.4f} → {r.final_loss:.4f}")
    assert r.all_finite and r.skipped and r.skipped[0] == 20  # the fresh scaler starts at init_scale = 2**24
    assert len(r.skipped) < r.k and r.final_scale < r.init_scale
    assert r.final_loss < r.loss_at_checkpoint


def test_checkpoint_functions_validate(tmp_path):
    state = acc.make_state()
    with pytest.raises(TypeError, match="path"):
        acc.save_checkpoint(3, state.model, state.optimizer, state.scaler, 0)
    with pytest.raises(TypeError, match="optimizer"):
        acc.save_checkpoint(tmp_path / "x.pt", state.model, None, state.scaler, 0)
    with pytest.raises(TypeError, match="state"):
        acc.train_steps(state.model, 1)
    with pytest.raises(ValueError, match="n must be"):
        acc.train_steps(state, -1)


def test_docstring_examples():
    assert doctest.testmod(acc).failed == 0


def test_clip_before_unscale_depends_on_the_optimizer_but_the_symptom_does_not():
    """Review r2 #6: clipping before unscale_ shrinks SGD's update by ~S, not AdamW's (its normalisation cancels
    the shrink); for both, the returned norm is S × the true norm and the clip fires on every step."""
    from ampcourse.accumulation import clip_by_optimizer

    r = clip_by_optimizer(scale=2.0**16, max_norm=1.0, steps=10)
    assert r.update_ratio["SGD"] < 1e-3
    assert 0.5 < r.update_ratio["AdamW"] < 2
    for name in ("SGD", "AdamW"):
        assert r.fired[name][1] == 1.0
        assert abs(r.norm_ratio[name] / r.scale - 1) < 0.01  # against an FP32 reference gradient
    assert "AdamW" in str(r.table())


def test_clip_by_optimizer_reports_the_intended_update_and_the_eps_condition():
    """Review 0506 M2: the FP32 parameter difference of a 1.5e-7 update is rounding noise (it exceeded the bound
    lr × max_norm / S); the first update is replayed in float64 and stays within it, most weights do not move.
    M1: AdamW cancels the shrink only while the gradients per element (max_norm / (S √N)) stay above eps."""
    import math

    from ampcourse.accumulation import clip_by_optimizer

    r = clip_by_optimizer(scale=2.0**16, max_norm=1.0, steps=2)
    assert r.first_update["SGD"][1] <= r.lr * r.max_norm / r.scale * (1 + 1e-6)
    assert r.first_update["SGD"][1] > 0.9 * r.lr * r.max_norm / r.scale  # the clip fired: norm max_norm / S
    assert r.moved["SGD"][1] < 0.5 and r.moved["SGD"][0] == 1.0
    per_element = r.max_norm / (r.scale * math.sqrt(r.n_params))
    assert r.n_params == 161
    assert r.grad_rms["AdamW"][1] == pytest.approx(per_element, rel=0.01)
    # a scale so large that the shrunk gradients sit below eps: AdamW's update shrinks too
    tiny = clip_by_optimizer(scale=2.0**16, max_norm=1e-3, steps=1)
    assert tiny.grad_rms["AdamW"][1] < 1e-8
    assert tiny.update_ratio["AdamW"] < 0.5
    with pytest.raises(ValueError, match="steps"):
        clip_by_optimizer(steps=0)
