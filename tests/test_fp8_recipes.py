"""Recipes, layer choice and the own-model check of lesson 10 (fp8.recipe_table ... fp8.profile_fp8)."""

import pytest
import torch
from torch import nn

from ampcourse import fp8
from ampcourse.capstone import make_model
from ampcourse.fp8 import PrecisionRun


def test_recipe_table_reads_torchaos_formats():
    rows = {r["recipe"]: r for r in fp8.recipe_table().rows}
    assert rows["torchao tensorwise"]["x / w / grad"] == "E4M3 / E4M3 / E5M2"
    assert rows["torchao rowwise"]["x / w / grad"] == "E4M3 / E4M3 / E4M3"
    assert rows["torchao rowwise"]["one scale per"] == "row; 2^k"
    assert "grad_w in bf16" in rows["torchao rowwise_with_gw_hp"]["one scale per"]
    assert {"TE DelayedScaling", "TE Float8CurrentScaling", "TE Float8BlockScaling",
            "TE MXFP8BlockScaling"} <= set(rows)
    assert all(r["source"].startswith("https://github.com/NVIDIA/TransformerEngine/") for r in fp8.TE_RECIPES)


def test_gemm_table_shows_grad_weight_in_high_precision_and_fast_accumulation():
    rows = {r["recipe"]: r for r in fp8.gemm_table().rows}
    assert rows["rowwise_with_gw_hp"]["grad_weight"] == "bf16 x bf16"
    assert rows["tensorwise"]["grad_input"] == "E5M2 tensorwise x E4M3 tensorwise"
    assert all(r["fast accum. (output)"] == "True" for r in rows.values())


def test_filter_is_torchaos_and_skips_the_course_mlp():
    plan = fp8.conversion_plan(make_model("small", seed=0, dropout=0.0))
    assert [r["tensorwise converts"] for r in plan.rows] == ["no", "no", "no"]
    big = nn.Linear(8192, 8192, device="meta")
    assert fp8.torchao_filter("tensorwise")(big, "x") and fp8.torchao_filter("rowwise")(big, "x")
    assert not fp8.torchao_filter("tensorwise")(nn.Linear(4096, 1024, device="meta"), "x")  # K <= 4096, N <= 1024
    assert fp8.torchao_filter("tensorwise")(nn.Linear(4096, 1040, device="meta"), "x")


def test_filter_grid_marks_what_the_filter_converts():
    grid = {r["K (in) \\ N (out)"]: r for r in fp8.filter_grid("rowwise", (1024, 4096)).rows}
    assert grid["1024"]["4096"] == "." and grid["4096"]["4096"] == "yes"


def test_check_fp8_compares_every_converted_layer_and_leaves_the_model_alone():
    model = make_model("small", seed=0, dropout=0.0)
    before = [p.clone() for p in model.parameters()]
    result = fp8.check_fp8(model, torch.randn(64, 64, generator=torch.Generator().manual_seed(0)))
    assert result.converted == ("0", "3") and result.skipped == ("6",)
    assert all(type(m) is nn.Linear for m in model.modules() if isinstance(m, nn.Linear))
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))
    for layer in result.layers:
        assert layer.sqnr_db > fp8.SQNR_FLOOR_DB and not layer.suspect
        assert layer.input_scales[0] == layer.input_scales[1] == pytest.approx(448 / layer.input_amax, rel=1e-6)
    assert len(result.table().rows) == 2


def test_check_fp8_rowwise_reports_a_range_of_power_of_two_scales():
    result = fp8.check_fp8(make_model("small", seed=0, dropout=0.0), torch.randn(64, 64), recipe="rowwise")
    low, high = result.layers[0].input_scales
    assert low < high and all(float(torch.tensor(s).log2()).is_integer() for s in (low, high))


def test_a_layer_below_the_floor_is_flagged():
    layer = fp8.LayerCheck("0", fp8.SQNR_FLOOR_DB - 0.1, 1.0, 1.0, (448.0, 448.0), (448.0, 448.0))
    assert layer.suspect and not fp8.LayerCheck("0", fp8.SQNR_FLOOR_DB, 1.0, 1.0, (1.0, 1.0), (1.0, 1.0)).suspect


def test_one_outlier_shows_in_the_amax_and_scale_not_in_the_sqnr():
    model = make_model("small", seed=0, dropout=0.0)
    batch = torch.randn(64, 64, generator=torch.Generator().manual_seed(0))
    batch[0, 0] = 1e6  # its row's output dominates the norm, which SQNR compares: read amax and scale too
    layer = fp8.check_fp8(model, batch).layers[0]
    assert layer.sqnr_db > fp8.SQNR_FLOOR_DB
    assert layer.input_amax == 1e6 and layer.input_scales[0] == pytest.approx(448e-6)


def _runs(losses):
    return {k: [PrecisionRun(k, s, tuple(v), 0.9) for s, v in enumerate(seeds)] for k, seeds in losses.items()}


def test_loss_gap_uses_lesson_09s_rule_lower_loss_better():
    runs = _runs({"bf16": [[1.0] * 20, [2.0] * 20, [3.0] * 20], "fp8": [[1.1] * 20, [2.2] * 20, [3.3] * 20]})
    gaps, verdict = fp8.loss_gap(runs, window=8)
    assert gaps == pytest.approx([0.1, 0.1, 0.1]) and verdict == "fp8 worse"
    same = _runs({"bf16": [[1.0] * 20] * 3, "fp8": [[1.0] * 20] * 3})
    assert fp8.loss_gap(same)[1] == "within noise"


def test_profile_fp8_says_what_it_would_do_without_fp8_tensor_cores():
    text = fp8.profile_fp8(make_model("small", seed=0, dropout=0.0), torch.randn(64, 64))
    assert text.startswith("cpu: no FP8 Tensor Cores") and "aten::_scaled_mm" in text


@pytest.mark.parametrize(("call", "error"), [
    (lambda: fp8.torchao_filter("rowwise_with_gw_hp"), ValueError),
    (lambda: fp8.conversion_plan("model"), TypeError),
    (lambda: fp8.conversion_plan(nn.ReLU()), ValueError),
    (lambda: fp8.conversion_plan(nn.Linear(16, 16), "tensorwise"), TypeError),
    (lambda: fp8.filter_grid("tensorwise", (8,)), ValueError),
    (lambda: fp8.check_fp8(nn.Linear(16, 16), torch.randn(4, 16), recipe="delayed"), ValueError),
    (lambda: fp8.check_fp8(nn.Linear(10, 10), torch.randn(4, 10)), ValueError),
    (lambda: fp8.check_fp8("model", torch.randn(4, 16)), TypeError),
    (lambda: fp8.check_fp8(nn.Linear(16, 16), [1.0]), TypeError),
    (lambda: fp8.check_fp8(nn.Linear(16, 16), torch.randn(4, 16), module_filter_fn=3), TypeError),
    (lambda: fp8.loss_gap(_runs({"bf16": [[1.0] * 4]}), candidate="fp8"), ValueError),
    (lambda: fp8.loss_gap(_runs({"bf16": [[1.0] * 4], "fp8": [[1.0] * 4]}), window=5), ValueError),
    (lambda: fp8.loss_gap({}), TypeError),
    (lambda: fp8.profile_fp8(nn.Linear(16, 16), torch.randn(4, 16), steps=0), ValueError),
])
def test_bad_input_is_refused(call, error):
    with pytest.raises(error):
        call()


@pytest.mark.gpu
@pytest.mark.skipif(not fp8.fp8_tensor_cores("cuda"), reason="needs a GPU with FP8 Tensor Cores")
def test_profile_fp8_finds_three_scaled_mm_per_linear_on_the_gpu():
    model = nn.Sequential(nn.Linear(256, 256), nn.GELU(), nn.Linear(256, 256)).cuda()
    text = fp8.profile_fp8(model, torch.randn(64, 256, device="cuda"), steps=3)
    assert " 6 aten::_scaled_mm calls in one step for 2 converted linears" in text


def test_check_fp8_sqnr_is_per_layer_and_the_end_to_end_one_is_reported_beside_it():
    """Review of lesson 10, finding 4: layer 2 gets the bf16 model's input, so layer 0's FP8 error stays out of its
    SQNR and shows only in the end-to-end column."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 64))
    with torch.no_grad():
        model[0].weight[0, 0] = 1e6  # one outlier: per-tensor scaling flushes the rest of layer 0's weight
    batch = torch.randn(64, 64, generator=torch.Generator().manual_seed(0))
    batch[:, 0] = 0.0  # the input the outlier multiplies: the outlier's own product is 0, not dominant
    layers = fp8.check_fp8(model, batch).layers
    first, second = layers
    assert first.sqnr_db == first.cumulative_db  # the same input in both models
    assert first.sqnr_db < fp8.SQNR_FLOOR_DB and first.suspect
    assert second.sqnr_db > fp8.SQNR_FLOOR_DB and not second.suspect
    assert second.cumulative_db < fp8.SQNR_FLOOR_DB
