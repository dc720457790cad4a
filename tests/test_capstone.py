"""Lesson 09 (capstone): bundled data, the full training recipe, skipped steps, bit-identical resume."""

from __future__ import annotations

import copy
import math

import numpy as np
import pytest
import torch

from ampcourse import capstone
from ampcourse.capstone import (
    TrainConfig,
    compare,
    evaluate,
    load_digits,
    make_model,
    split,
    train,
    train_window,
)

TINY = {"epochs": 1}  # 11 optimizer steps of the small model


# ------------------------------------------------------------------------------------------------ data
def test_digits_are_the_uci_test_set():
    digits = load_digits()
    assert digits.images.shape == (1797, 8, 8) and digits.images.dtype == np.uint8
    assert digits.labels.shape == (1797,)
    assert digits.images.min() == 0 and digits.images.max() == 16
    counts = np.bincount(digits.labels, minlength=10)
    assert counts.tolist() == [178, 182, 177, 183, 181, 182, 181, 179, 174, 180]  # UCI's optdigits.tes counts
    assert digits.labels[:10].tolist() == list(range(10))


def test_loading_is_deterministic_and_tensors_are_scaled():
    a, b = load_digits(), load_digits()
    assert np.array_equal(a.images, b.images) and np.array_equal(a.labels, b.labels)
    x, y = a.tensors(np.array([0, 5]))
    assert x.shape == (2, 64) and x.dtype == torch.float32 and 0 <= x.min() and x.max() <= 1
    assert y.tolist() == [0, 5] and y.dtype == torch.int64


def test_split_is_deterministic_disjoint_and_complete():
    train_a, val_a = split(1797, 0.2, seed=0)
    train_b, val_b = split(1797, 0.2, seed=0)
    assert np.array_equal(train_a, train_b) and np.array_equal(val_a, val_b)
    assert len(val_a) == 359 and len(train_a) == 1438
    assert not set(train_a) & set(val_a) and set(train_a) | set(val_a) == set(range(1797))
    assert not np.array_equal(val_a, split(1797, 0.2, seed=1)[1])


@pytest.mark.parametrize(("kwargs", "error", "words"), [
    ({"n": 1}, ValueError, "n must be an int >= 2"),
    ({"n": 10.0}, TypeError, "n must be an int"),
    ({"n": 10, "val_fraction": 1.0}, ValueError, "val_fraction"),
    ({"n": 10, "val_fraction": 0}, ValueError, "val_fraction"),
    ({"n": 10, "seed": -1}, ValueError, "seed"),
])
def test_split_rejects_bad_arguments(kwargs, error, words):
    with pytest.raises(error, match=words):
        split(**kwargs)


# ----------------------------------------------------------------------------------------------- model
def test_model_is_seeded_and_leaves_the_global_rng_alone():
    state = torch.get_rng_state()
    a, b, c = make_model("small", 0), make_model("small", 0), make_model("small", 1)
    assert torch.equal(torch.get_rng_state(), state)
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters(), strict=True))
    assert not torch.equal(next(a.parameters()), next(c.parameters()))
    assert a(torch.zeros(3, 64)).shape == (3, 10)


@pytest.mark.parametrize(("kwargs", "error", "words"), [
    ({"size": "huge"}, ValueError, "size must be one of"),
    ({"size": 3}, TypeError, "size must be a str"),
    ({"dropout": 1.0}, ValueError, "dropout"),
])
def test_make_model_rejects_bad_arguments(kwargs, error, words):
    with pytest.raises(error, match=words):
        make_model(**kwargs)


@pytest.mark.parametrize(("kwargs", "error", "words"), [
    ({"size": "medium"}, ValueError, "size must be one of"),
    ({"dtype": torch.float64}, ValueError, "dtype must be one of"),
    ({"dtype": "bfloat16"}, ValueError, "dtype must be one of"),
    ({"accum_steps": 0}, ValueError, "accum_steps"),
    ({"epochs": 1.5}, TypeError, "epochs"),
    ({"lr": -1.0}, ValueError, "lr must be > 0"),
    ({"max_norm": 0}, ValueError, "max_norm"),
    ({"warmup_steps": -1}, ValueError, "warmup_steps"),
    ({"weight_decay": -0.1}, ValueError, "weight_decay"),
    ({"val_fraction": 1}, ValueError, "val_fraction"),
])
def test_config_rejects_bad_arguments(kwargs, error, words):
    with pytest.raises(error, match=words):
        TrainConfig(**kwargs)


def test_train_and_compare_reject_bad_arguments(tmp_path):
    with pytest.raises(TypeError, match="config must be a TrainConfig"):
        train({"size": "small"})
    with pytest.raises(ValueError, match="resume=True needs checkpoint_path"):
        train(TrainConfig(), resume=True)
    with pytest.raises(ValueError, match="stop_after"):
        train(TrainConfig(), stop_after=0)
    with pytest.raises(TypeError, match="progress must be a function"):
        train(TrainConfig(), progress="loud")
    with pytest.raises(FileNotFoundError, match="no checkpoint"):
        train(TrainConfig(), checkpoint_path=tmp_path / "missing.pt", resume=True)
    with pytest.raises(ValueError, match="seeds must be distinct"):
        compare(TrainConfig(), seeds=(1, 1))
    with pytest.raises(TypeError, match="seeds must be a non-empty list"):
        compare(TrainConfig(), seeds=())
    with pytest.raises(ValueError, match="amp_dtype"):
        compare(TrainConfig(), seeds=(0,), amp_dtype=torch.float32)
    with pytest.raises(ValueError, match="same, non-zero number of rows"):
        evaluate(make_model(), torch.zeros(2, 64), torch.zeros(3, dtype=torch.long))


# ---------------------------------------------------------------------------------------------- a step
def _tiny_problem(seed=0):
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanh(), torch.nn.Linear(8, 3))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0 / (1 + step))
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**10)
    g = torch.Generator().manual_seed(seed)
    window = [(torch.randn(4, 6, generator=g), torch.randint(0, 3, (4,), generator=g)) for _ in range(2)]
    return model, optimizer, scaler, scheduler, window


def test_scheduler_does_not_advance_on_a_skipped_step():
    model, optimizer, scaler, scheduler, window = _tiny_problem()
    poisoned = [(window[0][0].clone(), window[0][1]), window[1]]
    poisoned[0][0][0, 0] = math.inf  # an inf input: the gradients hold NaN, so scaler.step skips the step
    before = [p.detach().clone() for p in model.parameters()]
    train_window(model, optimizer, scaler, scheduler, poisoned, 1.0, torch.float16)
    assert scaler.get_scale() == 2.0**9  # backed off: the step was skipped
    assert scheduler.last_epoch == 0 and optimizer.param_groups[0]["lr"] == 0.1
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))
    train_window(model, optimizer, scaler, scheduler, window, 1.0, torch.float16)  # a clean step advances it
    assert scheduler.last_epoch == 1 and optimizer.param_groups[0]["lr"] == 0.05
    assert not all(torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))


def test_train_window_steps_with_the_clipped_mean_gradient():
    model, optimizer, scaler, scheduler, window = _tiny_problem()
    reference = copy.deepcopy(model)
    loss = sum(torch.nn.functional.cross_entropy(reference(x), y) for x, y in window) / len(window)
    loss.backward()
    true = torch.cat([p.grad.reshape(-1) for p in reference.parameters()])
    seen = []
    optimizer.register_step_pre_hook(lambda opt, args, kwargs: seen.append(
        torch.cat([p.grad.reshape(-1).clone() for p in model.parameters()])))
    train_window(model, optimizer, scaler, scheduler, window, 1e9, torch.float32)
    assert torch.allclose(seen[0], true, rtol=1e-5, atol=1e-7)  # FP32: the window's mean gradient
    model, optimizer, scaler, scheduler, window = _tiny_problem()
    seen.clear()
    optimizer.register_step_pre_hook(lambda opt, args, kwargs: seen.append(
        torch.cat([p.grad.reshape(-1).clone() for p in model.parameters()])))
    max_norm = true.norm().item() / 4
    train_window(model, optimizer, scaler, scheduler, window, max_norm, torch.float16)
    assert seen[0].norm().item() == pytest.approx(max_norm, rel=1e-3)  # clipped after unscale_


# ----------------------------------------------------------------------------------------------- train
def test_a_short_fp32_run_learns_and_logs(capsys):
    result = train(TrainConfig(epochs=3), progress=print)
    assert result.steps == 33 and result.skipped_steps == () and result.final_scale == 1.0
    assert result.history[0][0] == 0 and result.history[-1][0] == 33
    assert result.history[0][1] < 0.3 < 0.9 < result.final_accuracy  # chance is 10%
    out = capsys.readouterr().out.splitlines()
    assert out[-1] == f"FP32: done — 33 steps, final validation accuracy {result.final_accuracy:.1%}"
    assert any(line.startswith("FP32: step   20/33") for line in out)


def test_same_seed_same_run_and_bf16_is_close():
    a = train(TrainConfig(**TINY), progress=None)
    b = train(TrainConfig(**TINY), progress=None)
    assert a.history == b.history
    assert all(torch.equal(p, q) for p, q in zip(a.model.parameters(), b.model.parameters(), strict=True))
    bf16 = train(TrainConfig(dtype=torch.bfloat16, **TINY), progress=None)
    assert bf16.config.label == "AMP bfloat16" and bf16.final_scale == 1.0  # no scaler for bfloat16
    assert abs(bf16.final_accuracy - a.final_accuracy) < 0.05
    assert 0 < bf16.activation_bytes < a.activation_bytes  # bf16 saves half-size copies for backward
    assert a.weight_copy_bytes == 0 < bf16.weight_copy_bytes  # autocast's bf16 weights, reported apart


def test_saved_bytes_counts_each_storage_once_and_skips_parameters():
    model = torch.nn.Sequential(torch.nn.Linear(64, 10))
    x, y = torch.ones(5, 64), torch.zeros(5, dtype=torch.long)
    # linear saves x (its weight is a parameter: not counted); cross_entropy's log_softmax saves its output,
    # nll_loss the int64 targets and a float32 total weight.
    NLL = 5 * 8 + 4  # noqa: N806
    fp32 = capstone._saved_bytes(model, x, y, torch.float32)
    assert fp32.total == 5 * 64 * 4 + 5 * 10 * 4 + NLL and fp32.copies_total == 0
    # autocast saves the bfloat16 copy of x (not of the weight: x needs no gradient, so the weight is not
    # needed in backward); log_softmax runs in FP32.
    bf16 = capstone._saved_bytes(model, x, y, torch.bfloat16)
    assert bf16.total == 5 * 64 * 2 + 5 * 10 * 4 + NLL and bf16.copies_total == 0
    deeper = torch.nn.Sequential(torch.nn.Linear(64, 10), torch.nn.Linear(10, 10))
    # the second layer's input needs a gradient, so its bfloat16 weight copy is saved too (a new storage),
    # reported apart from the activations
    report = capstone._saved_bytes(deeper, x, y, torch.bfloat16)
    assert report.total == 2 * (5 * 64 + 5 * 10) + 5 * 10 * 4 + NLL and report.copies_total == 2 * 10 * 10


def test_saved_bytes_of_a_slice_counts_the_micro_batch_not_the_whole_set():
    # a slice of the training set is a view: saved as is, it would keep (and count) the whole storage
    model = torch.nn.Sequential(torch.nn.Linear(64, 10))
    data, labels = torch.ones(100, 64), torch.zeros(100, dtype=torch.long)
    small = capstone._saved_bytes(model, data[:5], labels[:5], torch.float32)
    assert small == capstone._saved_bytes(model, data[:5].clone(), labels[:5].clone(), torch.float32)
    assert small.total == 5 * 64 * 4 + 5 * 10 * 4 + 5 * 8 + 4


def test_fp16_run_skips_while_the_scale_is_too_large_and_the_schedule_waits():
    config = TrainConfig(dtype=torch.float16, init_scale=2.0**40, micro_batch=256, epochs=4, warmup_steps=2)
    result = train(config, progress=None)
    assert len(result.skipped_steps) >= 3 and result.skipped_steps[:3] == (0, 1, 2)
    assert result.final_scale < 2.0**40
    real_steps = result.steps - len(result.skipped_steps)
    total = result.steps
    expected = config.peak_lr * capstone.cosine_schedule(config.warmup_steps, total)(real_steps)
    assert result.final_lr == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("stop_after", [7, 11, 15])  # mid-epoch, at an epoch boundary, in the next epoch
def test_resume_is_bit_identical(tmp_path, stop_after):
    config = TrainConfig(epochs=2)
    straight = train(config, progress=None)
    path = tmp_path / "run.pt"
    first = train(config, checkpoint_path=path, stop_after=stop_after, progress=None)
    assert first.steps == stop_after
    resumed = train(config, checkpoint_path=path, resume=True, progress=None)
    assert resumed.steps == straight.steps and resumed.history == straight.history
    assert all(torch.equal(p, q) for p, q in zip(straight.model.state_dict().values(),
                                                  resumed.model.state_dict().values(), strict=True))


def test_resume_with_a_scaler_is_bit_identical_and_refuses_another_config(tmp_path):
    config = TrainConfig(dtype=torch.float16, init_scale=2.0**40, micro_batch=256, epochs=2)
    straight = train(config, progress=None)
    path = tmp_path / "fp16.pt"
    train(config, checkpoint_path=path, stop_after=4, progress=None)  # mid-epoch 2, after the skipped steps
    resumed = train(config, checkpoint_path=path, resume=True, progress=None)
    assert resumed.skipped_steps == straight.skipped_steps and resumed.final_scale == straight.final_scale
    assert resumed.final_lr == straight.final_lr
    assert all(torch.equal(p, q) for p, q in zip(straight.model.parameters(), resumed.model.parameters(),
                                                  strict=True))
    with pytest.raises(ValueError, match="written by another config"):
        train(TrainConfig(dtype=torch.float16, init_scale=2.0**40, micro_batch=256, epochs=2, seed=1),
              checkpoint_path=path, resume=True, progress=None)


def test_compare_reports_both_runs_and_a_computed_verdict():
    comparison = compare(TrainConfig(micro_batch=256, epochs=1), seeds=(0, 1))
    assert [r.config.seed for r in comparison.fp32] == [0, 1] == [r.config.seed for r in comparison.amp]
    assert all(r.config.dtype == torch.bfloat16 for r in comparison.amp)  # the CPU's recommended dtype
    text = comparison.table().text()
    assert "FP32" in text and "AMP bfloat16" in text and "±" in text
    verdict = comparison.verdict()
    assert verdict.startswith("AMP within 1 percentage point of FP32 on each of the 2 seeds: ")
    assert "paired by seed, within 1 percentage point even at 2 standard errors" in verdict
    assert "AMP − FP32" in comparison.summary()
    diffs = comparison.differences
    assert diffs == [a.final_accuracy - f.final_accuracy for a, f in zip(comparison.amp, comparison.fp32,
                                                                          strict=True)]


def test_verdict_says_when_a_difference_is_not_noise():
    def fake(accuracy):
        return type("R", (), {"final_accuracy": accuracy})()
    comparison = capstone.Comparison(seeds=(0, 1, 2), fp32=tuple(fake(a) for a in (0.90, 0.91, 0.92)),
                                     amp=tuple(fake(a) for a in (0.80, 0.82, 0.81)), device="cpu")
    assert comparison.verdict() == (
        "AMP within 1 percentage point of FP32 on each of the 3 seeds: False\n"
        "mean AMP − FP32 difference, paired by seed, within 1 percentage point even at 2 standard errors: False")
    same = capstone.Comparison(seeds=(0, 1), fp32=(fake(0.9), fake(0.8)), amp=(fake(0.9), fake(0.8)), device="cpu")
    assert "identical final accuracy on all 2 seeds" in same.summary()
    assert same.verdict().count("True") == 2


def test_verdict_wording_does_not_depend_on_which_way_the_noise_falls():
    """The issue-12 rule: a verdict printed in a compared cell reads the same on every machine."""
    def fake(accuracy):
        return type("R", (), {"final_accuracy": accuracy})()
    fp32 = (0.9721, 0.9805, 0.9777, 0.9777, 0.9749)
    image = 1 / 359
    variants = [fp32,                                                   # identical (one CPU)
                (fp32[0] - image, *fp32[1:]),                           # one image worse on one seed (another)
                tuple(a + image for a in fp32),                         # one image better on every seed
                (fp32[0] - 2 * image, fp32[1] + image, *fp32[2:])]      # mixed
    verdicts = {capstone.Comparison(seeds=tuple(range(5)), fp32=tuple(map(fake, fp32)),
                                    amp=tuple(map(fake, amp)), device="cpu").verdict() for amp in variants}
    assert len(verdicts) == 1, verdicts
    assert verdicts.pop().count("True") == 2


def test_paired_verdict_is_the_one_rule():
    """Exercise 09 Task 3's check and Comparison read this function; the reviews' cases."""
    fp32 = [0.90, 0.97, 0.93]
    assert capstone.paired_verdict(fp32, [a + 0.005 for a in fp32]) == "amp better"  # consistent gain: real
    assert capstone.paired_verdict(fp32, [a - 0.005 for a in fp32]) == "amp worse"
    assert capstone.paired_verdict(fp32, list(fp32)) == "within noise"                # identical: noise
    assert capstone.paired_verdict([0.95] * 4, [0.96, 0.94, 0.97, 0.93]) == "within noise"
    mean, error = capstone.paired_difference([0.9, 0.8], [0.92, 0.8])
    assert mean == pytest.approx(0.01) and error == pytest.approx(0.01)
    with pytest.raises(ValueError, match="at least 2 seeds"):
        capstone.paired_verdict([0.9], [0.9])
    with pytest.raises(ValueError, match="as many in both"):
        capstone.paired_verdict([0.9, 0.8], [0.9])
    with pytest.raises(TypeError, match="fp32 must be a list"):
        capstone.paired_verdict("0.9", [0.9])
    with pytest.raises(ValueError, match="amp must hold finite numbers"):
        capstone.paired_verdict([0.9, 0.8], [0.9, math.nan])


def test_noise_interval_coverage_is_students_t():
    """2 standard errors: P(|T| <= 2), closed forms for 1, 2 and 4 degrees of freedom (exercise 09's '82–88 %')."""
    assert capstone.noise_interval_coverage(2) == pytest.approx(2 * math.atan(2) / math.pi, abs=1e-6)
    assert capstone.noise_interval_coverage(3) == pytest.approx(2 / math.sqrt(6), abs=1e-6)
    t = 2.0
    df4 = 2 * 0.375 * (t / math.sqrt(1 + t * t / 4)) * (1 - t * t / (12 * (1 + t * t / 4)))
    assert capstone.noise_interval_coverage(5) == pytest.approx(df4, abs=1e-6)
    assert round(capstone.noise_interval_coverage(3), 2) == 0.82
    assert round(capstone.noise_interval_coverage(5), 2) == 0.88
    with pytest.raises(ValueError, match="n_seeds must be at least 2"):
        capstone.noise_interval_coverage(1)
    with pytest.raises(TypeError, match="n_seeds must be an int"):
        capstone.noise_interval_coverage(3.0)


def test_verdict_validates_its_tolerance():
    def fake(accuracy):
        return type("R", (), {"final_accuracy": accuracy})()
    comparison = capstone.Comparison(seeds=(0,), fp32=(fake(0.9),), amp=(fake(0.9),), device="cpu")
    with pytest.raises(ValueError, match="tolerance"):
        comparison.verdict(tolerance=-1)
    assert "cannot tell from one seed" in comparison.verdict()


def test_compare_reuses_a_finished_run_with_the_same_config():
    config = TrainConfig(micro_batch=256, epochs=1)
    seed0 = train(config, progress=None)
    lines = []
    comparison = compare(config, seeds=(0,), reuse=[seed0], progress=lines.append)
    assert comparison.fp32[0] is seed0 and comparison.amp[0] is not seed0
    assert lines[0].endswith("(the run above)")
    stopped = train(config, stop_after=2, progress=None)  # not finished: trained again, not reused
    assert stopped.total_steps == 3 and compare(config, seeds=(0,), reuse=[stopped]).fp32[0] is not stopped
    with pytest.raises(TypeError, match="reuse must be a list of TrainResult"):
        compare(config, seeds=(0,), reuse=[1])


def test_paired_verdict_calls_an_exact_tie_within_noise():
    # counts of 360 images, differences 1, 1, 0: |mean| is exactly 2 standard errors; in floats the square root
    # lands one ulp low and the rule said "amp better" (review of lesson 10, finding 8)
    fp32 = [0 / 360, 33 / 360, 1 / 360]
    amp = [1 / 360, 34 / 360, 1 / 360]
    assert capstone.paired_verdict(fp32, amp) == "within noise"


def test_paired_verdict_lesson10_tie_stays_within_noise():
    fp32 = [c / 359 for c in (341, 348, 336)]
    amp = [c / 359 for c in (342, 349, 336)]
    assert capstone.paired_verdict(fp32, amp) == "within noise"


def test_paired_verdict_just_past_a_tie_is_real():
    fp32 = [c / 359 for c in (341, 348, 336)]
    amp = [c / 359 for c in (342, 349, 337)]  # differences 1, 1, 1: standard error 0
    assert capstone.paired_verdict(fp32, amp) == "amp better"
