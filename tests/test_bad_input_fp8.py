"""Bad input to lesson 10's helpers (ampcourse.fp8, the lesson-10 widget): a clear ValueError/TypeError that names
the argument — never a silent wrong number, never a hang (reliability audit round 3, findings 26-28)."""

import pytest
import torch
from matplotlib.figure import Figure

from ampcourse import fp8
from ampcourse.widgets import lesson10

E4M3 = torch.float8_e4m3fn
HAS_CUDA = torch.cuda.is_available()


def _operands():
    a = torch.randn(16, 16, generator=torch.Generator().manual_seed(0)).to(E4M3)
    return a, a.t(), torch.tensor(1.0), torch.tensor(1.0)


# --- finding 26: silently wrong numbers
def test_emulated_scaled_mm_refuses_a_keyword_scaled_mm_does_not_take():
    a, b, sa, sb = _operands()
    with pytest.raises(TypeError, match="unexpected keyword argument 'biass'"):
        fp8.emulated_scaled_mm(a, b, scale_a=sa, scale_b=sb, biass=torch.ones(16))


def test_emulated_scaled_mm_applies_bias_and_refuses_int8_output():
    a, b, sa, sb = _operands()
    plain = fp8.emulated_scaled_mm(a, b, sa, sb, out_dtype=torch.float32)
    one = torch.ones(16, dtype=torch.bfloat16)
    with_bias = fp8.emulated_scaled_mm(a, b, sa, sb, bias=one, out_dtype=torch.bfloat16)
    assert torch.equal(with_bias, (plain + 1).bfloat16())
    with pytest.raises(ValueError, match="Bias is not supported when out_dtype is set to Float32"):
        fp8.emulated_scaled_mm(a, b, sa, sb, bias=one.float(), out_dtype=torch.float32)
    with pytest.raises(ValueError, match="out_dtype must be one of"):
        fp8.emulated_scaled_mm(a, b, sa, sb, out_dtype=torch.int8)


def test_emulated_scaled_mm_omitted_out_dtype_gives_fp8_like_scaled_mm():
    a, b, sa, sb = _operands()
    assert fp8.emulated_scaled_mm(a, b, sa, sb).dtype == E4M3


@pytest.mark.parametrize("scale", [1e-45, 1e-39])
def test_scaled_mm_refuses_a_scale_whose_reciprocal_overflows(scale):
    a, b, _, _ = _operands()
    with pytest.raises(ValueError, match="a_scale is too small"):
        fp8.scaled_mm(a, scale, b, 1.0)


def test_scale_from_amax_refuses_a_margin_that_zeroes_the_scale():
    with pytest.raises(ValueError, match="margin=200 with amax_value=7 gives a scale of 0"):
        fp8.scale_from_amax(7.0, "e4m3", margin=200)
    assert float(fp8.scale_from_amax(7.0, "e4m3", margin=4)) == 4.0


@pytest.mark.skipif(HAS_CUDA, reason="checks the refusal on a machine without CUDA")
def test_to_float8_on_missing_cuda_is_a_clear_error():
    with pytest.raises(ValueError, match="CUDA was requested"):
        fp8.to_float8(torch.nn.Linear(16, 16), "cuda")


@pytest.mark.parametrize("runs", [{}, {"fp64": []}])
def test_empty_runs_are_refused_by_the_table_and_the_figure(runs):
    for helper in (fp8.accuracy_table, fp8.curves_png):
        with pytest.raises(TypeError, match="runs must be what compare_precisions returns"):
            helper(runs)


# --- finding 27: the two hangs
def test_simulate_scaling_has_a_step_limit():
    with pytest.raises(ValueError, match=f"log2_amax must have at most {fp8.MAX_AMAX_STEPS:,} steps"):
        fp8.simulate_scaling(torch.zeros(fp8.MAX_AMAX_STEPS + 1, dtype=torch.int64).numpy(), history=4)


def test_simulate_scaling_with_a_long_history_is_linear_time():
    """The audit's hang: 10^6 steps with a 10^6-step history (an O(steps × history) loop before)."""
    trace = fp8.simulate_scaling(list(range(10**6)), history=10**6)
    assert trace.log2_scale_amax[-1] == 10**6 - 2 and trace.saturated_steps == 10**6 - 1


def test_compare_precisions_caps_its_seeds():
    with pytest.raises(ValueError, match=f"seeds must hold at most {fp8.MAX_SEEDS} seeds"):
        fp8.compare_precisions(seeds=range(10**5))


# --- finding 28: the lesson-10 widget's functions
def test_widget_functions_name_a_wrong_figure_or_data():
    data = lesson10.scaling_data()
    with pytest.raises(TypeError, match="data must be a ScalingData"):
        lesson10.readout({"delayed": None})
    with pytest.raises(TypeError, match="fig must be a matplotlib Figure"):
        lesson10.draw_scaling(None, data)
    with pytest.raises(TypeError, match="data must be a ScalingData"):
        lesson10.draw_scaling(Figure(), "data")
    with pytest.raises(ValueError, match="fig must be a figure that draw_scaling drew"):
        lesson10.update_scaling(Figure(), data)
    fig = Figure()
    lesson10.draw_scaling(fig, data)
    assert lesson10.update_scaling(fig, lesson10.scaling_data(4, 1, 6)) == lesson10.readout(
        lesson10.scaling_data(4, 1, 6))


@pytest.mark.parametrize(("kwargs", "error", "words"), [
    ({"history": 3}, ValueError, "history must be one of"),
    ({"margin": 99}, ValueError, "margin must be from 0 to 4"),
    ({"spike_bits": "6"}, TypeError, "spike_bits must be an int"),
])
def test_widget_settings_are_checked(kwargs, error, words):
    with pytest.raises(error, match=words):
        lesson10.scaling_data(**kwargs)
    with pytest.raises(error, match=words):
        lesson10.delayed_scaling(**kwargs)
