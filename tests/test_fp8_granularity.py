"""Scaling granularity (lesson 10): block casts, power-of-two scales, and the outlier experiment."""

import pytest
import torch

from ampcourse import fp8
from ampcourse.fp8 import (
    GRANULARITIES,
    OUTLIER_AT,
    OUTLIER_LOG10,
    PAIR_SHAPE,
    block_cast,
    block_dequantize,
    granularity_errors,
    granularity_table,
    outlier_pair,
    round_scale_to_power_of_2,
)


def torchao_float8():
    return fp8.import_torchao()


def test_power_of_two_rounding_matches_torchao_away_from_powers_of_two():
    from torchao.float8.float8_utils import _round_scale_down_to_power_of_2

    torchao_float8()
    scales = torch.rand(10_000, generator=torch.Generator().manual_seed(0)) * 1000 + 1e-3
    assert torch.equal(round_scale_to_power_of_2(scales), _round_scale_down_to_power_of_2(scales))


def test_power_of_two_rounding_is_down_even_just_below_a_power_of_two():
    just_below = torch.nextafter(torch.exp2(torch.arange(-20.0, 20.0)), torch.tensor(0.0))
    rounded = round_scale_to_power_of_2(just_below)
    assert bool((rounded <= just_below).all())
    assert torch.equal(rounded, torch.exp2(torch.arange(-21.0, 19.0)))


def test_exact_powers_of_two_are_kept():
    powers = torch.exp2(torch.arange(-30.0, 30.0))
    assert torch.equal(round_scale_to_power_of_2(powers), powers)


def test_torchao_recipes_round_scales_as_the_table_says():
    float8 = torchao_float8()
    by_name = {g.name: g for g in GRANULARITIES}
    assert float8.Float8LinearConfig.from_recipe_name("tensorwise").round_scales_to_power_of_2 is False
    assert by_name["per-tensor"].power_of_two is False
    for recipe in ("rowwise", "rowwise_with_gw_hp"):
        assert float8.Float8LinearConfig.from_recipe_name(recipe).round_scales_to_power_of_2 is True
    assert by_name["rowwise"].power_of_two is True


def test_per_tensor_block_cast_is_the_per_tensor_cast():
    x = torch.randn(8, 16, generator=torch.Generator().manual_seed(1))
    x8, scales = block_cast(x, (None, None))
    assert scales.shape == (1, 1)
    assert torch.equal(x8.float(), fp8.to_fp8(x, fp8.scale_from_amax(fp8.amax(x), "e4m3"), "e4m3").float())


def test_each_block_gets_its_own_amax():
    x = torch.ones(2, 64)
    x[0, 40] = 100.0
    _, scales = block_cast(x, (1, 32))
    assert scales.tolist() == [[448.0, pytest.approx(4.48)], [448.0, 448.0]]
    _, pow2 = block_cast(x, (1, 32), power_of_two=True)
    assert pow2.tolist() == [[256.0, 4.0], [256.0, 256.0]]


def test_dequantize_undoes_a_power_of_two_scale_exactly():
    x = torch.tensor([[1.0, 1.125, 3.0, 0.015625]])
    x8, scales = block_cast(x, (1, None), power_of_two=True)
    assert torch.equal(block_dequantize(x8, scales), x.double())  # every value is an E4M3 number times 2^k


def test_the_pair_is_the_same_numpy_draw_with_the_outlier_in_place():
    x, w = outlier_pair(3.0)
    assert (x.shape, w.shape) == ((PAIR_SHAPE[0], PAIR_SHAPE[1]), (PAIR_SHAPE[2], PAIR_SHAPE[1]))
    assert float(x[OUTLIER_AT]) == 1000.0
    x0, w0 = outlier_pair(0.0)
    assert torch.equal(w, w0) and int((x != x0).sum()) == 1


def test_per_tensor_error_grows_with_the_outlier_while_finer_scales_hold_the_other_tokens():
    small, large = granularity_errors(0.0), granularity_errors(6.0)
    assert small[0].other_rows_error < 0.05 < 0.9 < large[0].other_rows_error
    for finer in large[1:]:
        assert finer.other_rows_error < 0.05 and finer.flushed_other_rows == 0


def test_the_outliers_neighbours_lose_one_block_at_most():
    flushed = {r.name: r.flushed_neighbours for r in granularity_errors(7.0)}
    assert flushed == {"per-tensor": 511, "rowwise": 511, "1x128 / 128x128": 127, "MX: 1x32, E8M0": 31}


def test_every_slider_position_is_computable_and_the_table_has_a_row_per_scheme():
    assert len(OUTLIER_LOG10) == 15 and OUTLIER_LOG10[0] == 0 and OUTLIER_LOG10[-1] == 7
    table = granularity_table((0.0, 5.0))
    assert len(table.rows) == 2 * len(GRANULARITIES)


@pytest.mark.parametrize(("call", "error"), [
    (lambda: granularity_errors(8), ValueError),
    (lambda: granularity_errors(-1), ValueError),
    (lambda: granularity_errors("5"), TypeError),
    (lambda: granularity_errors(True), TypeError),
    (lambda: outlier_pair(2.0, seed=-1), ValueError),
    (lambda: block_cast(torch.ones(4, 6), (1, 4)), ValueError),
    (lambda: block_cast(torch.ones(4, 8), (1,)), TypeError),
    (lambda: block_cast(torch.ones(4, 8), (0, 4)), ValueError),
    (lambda: block_cast(torch.ones(8), (1, 4)), ValueError),
    (lambda: block_cast(torch.ones(4, 8), (1, 4), power_of_two=1), TypeError),
    (lambda: block_cast(torch.ones(4, 8), (1, 4), fmt="e3m4"), ValueError),
    (lambda: block_dequantize(torch.ones(4, 8), torch.ones(4, 2)), TypeError),
    (lambda: block_dequantize(torch.ones(4, 8).to(fp8.E4M3), torch.ones(3, 2)), ValueError),
    (lambda: round_scale_to_power_of_2(torch.tensor([1.0, 0.0])), ValueError),
    (lambda: round_scale_to_power_of_2(torch.tensor([1.0], dtype=torch.float64)), TypeError),
    (lambda: granularity_table([]), TypeError),
])
def test_bad_input_is_refused(call, error):
    with pytest.raises(error):
        call()
