"""Tests for ampcourse.troubleshoot: first non-finite module, detect_anomaly, gradient stats, FP32 islands,
the loss wrapper, loss-scale diagnosis, and the lesson's demo numbers."""

from __future__ import annotations

import copy
import doctest
import math

import pytest
import torch
from torch import nn

from ampcourse import troubleshoot
from ampcourse.troubleshoot import (
    SYMPTOMS,
    FP32Island,
    SeedFP32Loss,
    WhereSqrt,
    anomaly_message,
    diagnose_scale,
    find_nonfinite,
    fp32_loss,
    grad_stats,
    large_activation_stats,
    overflow_model,
    scaled_training_run,
    symptom_table,
    train_in_bf16,
    underflow_comparison,
)

FP16_MAX = torch.finfo(torch.float16).max


def _hook_count(model: nn.Module) -> int:
    return sum(len(m._forward_hooks) for m in model.modules())


def test_doctests():
    assert doctest.testmod(troubleshoot).failed == 0


def test_overflow_model_is_finite_in_fp32_and_bf16_and_overflows_in_fp16():
    model, x, y = overflow_model()
    assert y.dtype == torch.int64
    peak = find_nonfinite(model, x).records[1]
    assert peak.name == "block.up" and FP16_MAX < peak.max_abs < 1e6 and peak.finite
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert find_nonfinite(model, x).first is None
    rows = troubleshoot.activation_peaks(model, x)
    assert rows[1]["module"] == "block.up" and rows[1]["fp16 autocast"] == "inf (float16)"
    assert rows[4]["fp16 autocast"] == "NaN" and "bfloat16" in rows[4]["bf16 autocast"]


def test_find_nonfinite_names_the_first_module_in_execution_order_and_removes_its_hooks():
    model, x, _ = overflow_model()
    with torch.autocast("cpu", dtype=torch.float16):
        report = find_nonfinite(model, x)
    first = report.first
    assert first.name == "block.up" and first.kind == "Linear" and first.output_dtype == torch.float16
    assert first.max_abs == math.inf and first.n_inf > 0 and first.n_nan == 0
    assert first.input_finite and 0 < first.max_finite_input < 10
    # later modules inherit it; norm turns inf into NaN (inf - inf); the root comes last
    assert [r.label for r in report.bad] == ["block.up", "block.act", "block", "norm", "head", "(model)"]
    norm = report.bad[3]
    assert norm.n_nan > 0 and norm.n_inf == 0 and not norm.input_finite
    assert "first non-finite output: block.up (Linear)" in report.summary()
    assert "block.up" in report.table().text() and report.table(only_bad=True).rows[0]["module"] == "block.up"
    assert _hook_count(model) == 0


def test_find_nonfinite_reports_nan_and_all_finite_and_removes_hooks_when_forward_raises():
    model = nn.Sequential(nn.Linear(2, 2), WhereSqrt(), nn.Identity())
    x = torch.tensor([[1.0, -1.0]])
    with torch.no_grad():  # fixed weights: the Linear's outputs are -2, whatever the random state
        model[0].weight.fill_(1.0)
        model[0].bias.zero_()
        model[1].forward = lambda t: t.sqrt()  # sqrt of a negative: NaN, no inf
    report = find_nonfinite(model, x * 0 - 1)
    assert report.first is not None and report.first.n_nan > 0 and report.first.name == "1"
    fine = nn.Sequential(nn.Linear(2, 2), nn.ReLU())
    assert find_nonfinite(fine, x).first is None and "all 3 module outputs are finite" in str(find_nonfinite(fine, x))

    class Boom(nn.Module):
        def forward(self, t):
            raise RuntimeError("boom")

    broken = nn.Sequential(nn.Linear(2, 2), Boom())
    with pytest.raises(RuntimeError, match="boom"):
        find_nonfinite(broken, x)
    assert _hook_count(broken) == 0
    with pytest.raises(TypeError, match="model must be a torch.nn.Module"):
        find_nonfinite(lambda t: t, x)


def test_anomaly_message_names_the_backward_node_and_the_forward_line():
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(3, 4), WhereSqrt(), nn.Linear(4, 2))
    x = torch.randn(5, 3)

    def step():
        net.zero_grad()
        net(x).sum().backward()

    report = anomaly_message(step)
    assert report.raised and report.node == "SqrtBackward0"
    assert report.error.startswith("Function 'SqrtBackward0' returned nan values")
    assert "sqrt()" in report.forward_line and report.forward_function == "forward"
    assert any("Anomaly Detection has been enabled" in w for w in report.warnings)
    assert "/" not in report.summary().replace("0/", "")  # no file paths
    net[1] = WhereSqrt(safe=True)
    clean = anomaly_message(step)
    assert not clean.raised and clean.node is None and "without an anomaly" in clean.summary()
    # without anomaly mode the NaN reaches the gradients silently
    net[1] = WhereSqrt()
    step()
    assert grad_stats(net).n_nonfinite > 0
    plain, slow = troubleshoot.anomaly_overhead(lambda: None, repeats=1)
    assert plain >= 0 and slow >= 0


def test_anomaly_message_lets_other_errors_through_and_validates():
    def broken():
        raise RuntimeError("shapes do not match")

    with pytest.raises(RuntimeError, match="shapes do not match"):
        anomaly_message(broken)
    with pytest.raises(TypeError, match="fn must be a callable"):
        anomaly_message(3)
    with pytest.raises(TypeError, match="check_nan"):
        anomaly_message(lambda: None, check_nan=1)
    with pytest.raises(TypeError, match="safe must be a bool"):
        WhereSqrt(safe=1)


def test_grad_stats_counts_zero_underflow_and_nonfinite_exactly():
    layer = nn.Linear(4, 1)
    layer.weight.grad = torch.tensor([[0.0, 1e-9, math.inf, -2.0]])
    layer.bias.grad = torch.tensor([math.nan])
    stats = grad_stats(layer)
    weight, bias = stats.rows
    assert weight["zero"] == 0.25 and weight["fp16 underflow"] == 0.25 and weight["non-finite"] == 1
    assert weight["max |g|"] == 2.0 and weight["norm"] == pytest.approx(2.0)
    assert bias["non-finite"] == 1 and math.isnan(bias["norm"]) and stats.n_nonfinite == 2
    assert stats.total(layer)["zero"] == pytest.approx(0.2) and "weight" in str(stats)
    no_grad = nn.Linear(2, 2)
    assert grad_stats(no_grad).without_grad == ("weight", "bias")
    with pytest.raises(TypeError, match="model must be"):
        grad_stats("model")


def test_underflow_comparison_fp16_loses_small_gradients_and_the_scaler_keeps_them():
    rows = {row["run"]: row for row in underflow_comparison().rows}
    fp32, fp16, scaled = rows.values()
    assert fp16["zero"] == 1.0 and fp32["zero"] == 0.0 and scaled["zero"] == 0.0
    assert 0.3 < fp32["fp16 underflow"] < 0.7
    with pytest.raises(ValueError, match="factor"):
        underflow_comparison(factor=0)


def test_fp32_island_needs_both_autocast_off_and_float_inputs():
    model, x, _ = overflow_model()
    x16 = x.half()
    with torch.autocast("cpu", dtype=torch.float16):
        out = FP32Island(model.block)(model.embed(x))
        assert out.dtype == torch.float32 and torch.isfinite(out).all()
        assert torch.isinf(model.block(model.embed(x))).any()  # without the island
        assert model.block(model.embed(x).float()).dtype == torch.float16  # .float() alone: autocast re-casts
        with torch.autocast("cpu", enabled=False), pytest.raises(RuntimeError, match="same dtype"):
            model.block(x16 @ torch.eye(8, 16, dtype=torch.float16))  # autocast off alone: fp16 meets fp32
    reference = model.block(model.embed(x))
    assert ((out - reference).abs().max() / reference.abs().max()) < 1e-3  # fp16 rounding of the block's input
    fixed = copy.deepcopy(model)
    fixed.block = FP32Island(fixed.block)
    with torch.autocast("cpu", dtype=torch.float16):
        assert find_nonfinite(fixed, x).first is None
    with pytest.raises(TypeError, match="module must be"):
        FP32Island(lambda t: t)


def test_fp32_island_keeps_integer_inputs():
    seen = {}

    class Probe(nn.Module):
        def forward(self, values, index, extra=None):
            seen.update(values=values.dtype, index=index.dtype, extra=extra.dtype,
                        autocast=torch.is_autocast_enabled("cpu"))
            return values

    with torch.autocast("cpu", dtype=torch.float16):
        FP32Island(Probe())(torch.ones(2, dtype=torch.float16), torch.tensor([1, 0]),
                            extra=torch.ones(1, dtype=torch.bfloat16))
    assert seen == {"values": torch.float32, "index": torch.int64, "extra": torch.float32, "autocast": False}


def test_fp32_loss_keeps_class_indices_int64_and_the_seed_wrapper_breaks_them():
    logits = (torch.randn(6, 4) * 3).half()
    targets = torch.tensor([0, 3, 1, 2, 2, 1])
    seen = {}

    def spy(inp, target):
        seen.update(inp=inp.dtype, target=target.dtype, autocast=torch.is_autocast_enabled("cpu"))
        return nn.functional.cross_entropy(inp, target)

    with torch.autocast("cpu", dtype=torch.float16):
        loss = fp32_loss(spy)(logits, targets)
        with pytest.raises(RuntimeError, match="expected target dtype to be Long"):
            SeedFP32Loss(nn.CrossEntropyLoss())(logits, targets)
        soft = fp32_loss(nn.CrossEntropyLoss())(logits, torch.softmax(logits.float(), 1).half())
    assert seen == {"inp": torch.float32, "target": torch.int64, "autocast": False}
    assert loss.dtype == torch.float32 and torch.equal(loss, nn.functional.cross_entropy(logits.float(), targets))
    assert soft.dtype == torch.float32 and torch.isfinite(soft)
    assert "cross_entropy" not in fp32_loss(nn.CrossEntropyLoss()).__name__
    with pytest.raises(TypeError, match="loss_fn must be callable"):
        fp32_loss("cross_entropy")
    with pytest.raises(TypeError, match="base_criterion"):
        SeedFP32Loss(3)


def test_diagnose_scale_rules():
    collapse = diagnose_scale([2.0**16 / 2**k for k in range(12)])
    assert collapse.status == "collapsing" and collapse.n_skipped == 11 and collapse.trailing_skips == 11
    assert "frozen" in collapse.reason and str(collapse).startswith("collapsing")
    warmup = diagnose_scale([2.0**24 / 2**k for k in range(5)] + [2.0**20] * 30 + [2.0**21] * 10)
    assert warmup.status == "healthy" and warmup.warmup_skips == 4 and "backed off" in warmup.reason
    bumpy = diagnose_scale([1024.0, 2048.0, 1024.0, 2048.0, 1024.0, 1024.0, 2048.0, 1024.0, 1024.0])
    assert bumpy.status == "unstable" and bumpy.n_skipped == 3
    assert diagnose_scale([4.0, 2.0, 0.0]).status == "collapsing"
    assert diagnose_scale([1.0, 1.0]).status == "healthy"
    assert diagnose_scale([2.0**16 / 2**k for k in range(4)], window=3).status == "collapsing"


@pytest.mark.parametrize(("args", "kwargs", "error", "words"), [
    ((5.0,), {}, TypeError, "scales must be a sequence"),
    (("12",), {}, TypeError, "scales must be a sequence"),
    (([1.0],), {}, ValueError, "at least 2"),
    (([1.0, math.nan],), {}, ValueError, "finite and >= 0"),
    (([1.0, "a"],), {}, TypeError, r"scales\[1\]"),
    (([1.0, 1.0],), {"window": 0}, ValueError, "window"),
    (([1.0, 1.0],), {"max_skip_fraction": 1.0}, ValueError, "max_skip_fraction"),
])
def test_diagnose_scale_validates(args, kwargs, error, words):
    with pytest.raises(error, match=words):
        diagnose_scale(*args, **kwargs)


def test_real_fp16_run_collapses_and_the_fp32_island_or_bf16_fixes_it():
    model, x, y = overflow_model()
    collapsed = scaled_training_run(model, x, y, steps=12)
    assert all(math.isnan(loss) for loss in collapsed.losses)
    assert collapsed.n_stepped == 0 and not collapsed.params_changed
    assert collapsed.scales == tuple(2.0**16 / 2**k for k in range(13))
    assert diagnose_scale(collapsed.scales).status == "collapsing"
    lower = scaled_training_run(model, x, y, steps=10, init_scale=1.0)
    assert lower.n_stepped == 0, "a smaller init_scale does not help: the inf is in the forward pass"
    fixed = copy.deepcopy(model)
    fixed.block = FP32Island(fixed.block)
    healthy = scaled_training_run(fixed, x, y, steps=12)
    assert healthy.n_stepped == 12 and healthy.params_changed and healthy.losses[-1] < healthy.losses[0]
    assert diagnose_scale(healthy.scales).status == "healthy" and healthy.scales[-1] == 2.0**17
    bf16 = scaled_training_run(model, x, y, steps=5, dtype=torch.bfloat16)
    assert bf16.n_stepped == 5 and set(bf16.scales) == {1.0} and math.isfinite(bf16.losses[-1])
    with pytest.raises(ValueError, match="dtype"):
        scaled_training_run(model, x, y, dtype=torch.float32)
    with pytest.raises(TypeError, match="model"):
        scaled_training_run("model", x, y)


@pytest.fixture(scope="module")
def bf16_run():
    return train_in_bf16()


def test_train_in_bf16_learns_the_unnormalised_targets(bf16_run):
    run = bf16_run
    assert len(run.losses) == 300 and all(math.isfinite(loss) for loss in run.losses)
    assert run.targets.min() > 3e4 and run.targets.max() > FP16_MAX, "the targets are rents in cents: ~1e5"
    mean = float(run.targets.mean())
    assert math.sqrt(run.losses[0]) > 0.9 * mean, "untrained, the model predicts about 0"
    assert math.sqrt(run.losses[-1]) < 0.01 * mean, "trained: RMSE below 1% of the mean rent"
    assert run.rmse(run.predict(torch.bfloat16)) < 0.01 * mean and run.rmse(run.predict()) < 0.01 * mean


def test_bf16_trained_model_is_finite_in_bf16_and_fp32_and_passes_65504(bf16_run):
    run = bf16_run
    bf16, fp32 = run.predict(torch.bfloat16), run.predict()
    assert bf16.dtype == fp32.dtype == torch.float32 and bool(torch.isfinite(bf16).all())
    assert float(bf16.abs().max()) > FP16_MAX and float(fp32.abs().max()) > FP16_MAX
    assert float(((bf16 - fp32) / fp32).abs().max()) < 0.01
    assert list(run.peaks) == ["hidden", "act", "out", "(model)"]
    assert run.peaks["hidden"] < FP16_MAX < run.peaks["out"], "only the output layer passes 65504"
    with torch.no_grad():
        assert find_nonfinite(run.model, run.inputs).first is None


def test_bf16_trained_model_overflows_in_fp16_at_the_output_layer_and_an_fp32_island_fixes_it(bf16_run):
    run = bf16_run
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.float16):
        report = find_nonfinite(run.model, run.inputs)
    assert report.first.name == "out" and report.first.n_inf > 0 and report.first.input_finite
    assert report.records[0].name == "hidden" and report.records[0].finite
    assert math.isinf(run.rmse(run.predict(torch.float16)))
    served = copy.deepcopy(run.model)
    served.out = FP32Island(served.out)
    fixed = run.predict(torch.float16, served)
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.float16):
        assert find_nonfinite(served, run.inputs).first is None
    fp32, bf16 = run.predict(), run.predict(torch.bfloat16)
    assert float(((fixed - fp32) / fp32).abs().max()) < 0.005
    assert float(((fixed - bf16) / fp32).abs().max()) < 0.01
    assert abs(run.rmse(fixed) - run.rmse(fp32)) < 0.05 * run.rmse(fp32)


def test_train_in_bf16_is_deterministic_and_leaves_global_state_alone():
    threads = torch.get_num_threads()
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    first = train_in_bf16(steps=5, seed=1)
    assert torch.equal(torch.rand(3), expected), "the global RNG must be left as it was"
    assert torch.get_num_threads() == threads
    second = train_in_bf16(steps=5, seed=1)
    assert first.losses == second.losses and torch.equal(first.targets, second.targets)
    assert train_in_bf16(steps=5, seed=2).losses != first.losses
    small = train_in_bf16(steps=2, n=8, hidden=3)
    assert small.inputs.shape == (8, 4) and small.model.out.in_features == 3


@pytest.mark.parametrize(("kwargs", "error", "words"), [
    ({"steps": 0}, ValueError, "steps"), ({"steps": 2.5}, TypeError, "steps"), ({"seed": -1}, ValueError, "seed"),
    ({"lr": 0}, ValueError, "lr"), ({"lr": "big"}, TypeError, "lr"), ({"n": 1}, ValueError, "n must"),
    ({"hidden": True}, TypeError, "hidden"),
])
def test_train_in_bf16_validates(kwargs, error, words):
    with pytest.raises(error, match=words):
        train_in_bf16(**kwargs)


def test_bf16_training_predict_and_rmse_validate(bf16_run):
    with pytest.raises(ValueError, match="dtype"):
        bf16_run.predict(torch.float32)
    with pytest.raises(TypeError, match="model"):
        bf16_run.predict(torch.bfloat16, model="net")
    with pytest.raises(TypeError, match="predictions"):
        bf16_run.rmse(torch.zeros(3))


def test_large_activation_stats_match_what_the_lesson_says():
    stats = large_activation_stats()
    values = {row["computation"]: row for row in stats.rows}
    assert values["x.abs().sum(0)"]["value"] == math.inf
    assert values["x.abs().mean(0)"]["value"] < FP16_MAX
    assert values["((x - x.mean(0))**2).mean(0)"]["value"] == math.inf
    assert values["x.var(0)"]["value"] == math.inf and values["x.float().var(0)"]["value"] > FP16_MAX
    assert values["… its running_var"]["dtype"] == "float32" and math.isfinite(values["… its running_var"]["value"])
    half = values["BatchNorm1d after .half(): running_var"]
    assert half["dtype"] == "float16" and half["value"] == math.inf
    assert "float16 activations" in stats.table().text()
    with pytest.raises(ValueError, match="std"):
        large_activation_stats(std=-1.0)


def test_symptom_table_has_a_demo_for_every_row():
    table = symptom_table()
    assert table.columns == ["symptom", "cause", "fix", "shown in"]
    assert len(table.rows) == len(SYMPTOMS) >= 6 and all(row["shown in"].startswith("§") for row in SYMPTOMS)


def test_scale_history_png_draws_and_validates():
    from ampcourse.widgets.base import Png

    png = troubleshoot.scale_history_png({"collapse": [2.0**16, 2.0**15], "fixed": [2.0**16, 2.0**16]})
    assert isinstance(png, Png)  # the figure rule: a static figure is a *_png returning widgets.base.Png
    assert png.startswith(b"\x89PNG")
    with pytest.raises(TypeError, match="histories"):
        troubleshoot.scale_history_png({})
    with pytest.raises(ValueError, match="histories"):
        troubleshoot.scale_history_png({"zero": [1.0, 0.0]})


def test_anomaly_overhead_times_on_one_thread_and_restores_the_count():
    threads = torch.get_num_threads()
    seen = []
    troubleshoot.anomaly_overhead(lambda: seen.append(torch.get_num_threads()), repeats=1)
    assert set(seen) == {1}
    assert torch.get_num_threads() == threads
