"""Tests for ampcourse.fp8: FP8 limits, per-tensor scaling, the saturating cast, _scaled_mm, the simulator, torchao."""

import doctest
import logging
import math
import subprocess
import sys

import numpy as np
import pytest
import torch
from torch import nn

from ampcourse import fp8
from ampcourse.fp8 import (
    E4M3,
    E5M2,
    amax,
    amax_sequence,
    fp8_dtype,
    fp8_fate,
    fp8_limits,
    scale_from_amax,
    scaled_mm,
    simulate_scaling,
    to_fp8,
)


def test_doctests():
    assert doctest.testmod(fp8).failed == 0


def test_limits_are_torch_finfo_and_the_paper():
    e4m3, e5m2 = fp8_limits("e4m3"), fp8_limits(torch.float8_e5m2)
    assert (e4m3.max, e5m2.max) == (448.0, 57344.0)  # Micikevicius et al. 2022
    assert (e4m3.exponent_bits, e4m3.mantissa_bits, e5m2.exponent_bits, e5m2.mantissa_bits) == (4, 3, 5, 2)
    assert e4m3.smallest_subnormal == 2.0**-9 and e5m2.smallest_subnormal == 2.0**-16
    assert e4m3.smallest_normal == 2.0**-6 and e5m2.smallest_normal == 2.0**-14
    assert torch.tensor(e4m3.smallest_subnormal).to(E4M3).float() == e4m3.smallest_subnormal
    assert torch.tensor(e4m3.flush_threshold).to(E4M3).float() == 0  # a tie rounds to even: 0
    assert "E4M3" in fp8.limits_table().text() and "57344" in fp8.limits_table().text()


def test_torch_casts_e4m3_saturate_and_e5m2_overflow_to_inf():
    """The torch facts the lesson states (torch >= 2.12); to_fp8 saturates both."""
    big = torch.tensor([1e5, math.inf])
    assert big.to(E4M3).float().tolist() == [448.0, 448.0]
    assert big.to(E5M2).float().isinf().all()
    assert to_fp8(big[:1], 1.0, "e5m2").float().item() == 57344.0


def test_scale_maps_amax_to_the_max():
    x = torch.tensor([0.5, -3.5, 1.0])
    assert amax(x).item() == 3.5
    s = scale_from_amax(amax(x), E4M3)
    assert to_fp8(x, s, E4M3).float().abs().max().item() == 448.0
    assert scale_from_amax(0.0, E4M3).isfinite()
    assert scale_from_amax(3.5, E4M3, margin=2).item() == pytest.approx(s.item() / 4)


def test_scaled_mm_matches_fp32_within_e4m3_rounding():
    g = torch.Generator().manual_seed(0)
    x, w = torch.randn(32, 64, generator=g), torch.randn(16, 64, generator=g) * 1e-3
    sx, sw = scale_from_amax(amax(x), E4M3), scale_from_amax(amax(w), E4M3)
    out = scaled_mm(to_fp8(x, sx, E4M3), sx, to_fp8(w, sw, E4M3).t(), sw)
    ref = x @ w.t()
    assert float((out - ref).norm() / ref.norm()) < 0.05
    assert out.dtype == torch.float32


def test_fate_sorts_every_value():
    f = fp8_fate(torch.tensor([0.0, 2.0**-11, 2.0**-8, 1.0, 1e3, -1e3]), 1.0, "e4m3")
    assert (f.zero, f.flushed, f.subnormal, f.normal, f.saturated) == (1, 1, 1, 1, 2)
    assert f.fraction("saturated") == pytest.approx(2 / 5)
    rounding = fp8_fate(torch.tensor([448.0, 463.9, 464.0]), 1.0, "e4m3")  # 463.9 rounds to 448: not saturated
    assert (rounding.normal, rounding.saturated) == (2, 1)
    assert fp8_fate(torch.tensor([61439.0, 61440.0]), 1.0, "e5m2").saturated == 1


def test_simulator_delayed_and_dynamic():
    log2 = amax_sequence(spike_bits=6)
    dynamic = simulate_scaling(log2, None)
    assert dynamic.saturated.max() == 0 and np.array_equal(dynamic.log2_scale_amax, log2)
    delayed = simulate_scaling(log2, 4)
    assert delayed.saturated[fp8.SPIKE_STEP] > 0  # the spike is not in the history yet: it clips
    assert (delayed.log2_scale_amax[fp8.SPIKE_STEP + 1:fp8.SPIKE_STEP + 5] == log2[fp8.SPIKE_STEP]).all()
    assert delayed.log2_scale_amax[fp8.SPIKE_STEP + 5] < log2[fp8.SPIKE_STEP]  # forgotten after 4 steps
    # the fractions are exact: counts are binomial coefficients over 2**24
    assert (delayed.flushed * 2**fp8.SPREAD == np.round(delayed.flushed * 2**fp8.SPREAD)).all()


@pytest.mark.parametrize(("call", "error"), [
    (lambda: fp8_dtype("fp8"), ValueError), (lambda: fp8_dtype(torch.float16), ValueError),
    (lambda: fp8_dtype(3), TypeError), (lambda: amax([1.0]), TypeError),
    (lambda: amax(torch.tensor([1, 2])), TypeError), (lambda: scale_from_amax(-1.0, "e4m3"), ValueError),
    (lambda: scale_from_amax(1.0, "e4m3", margin=-1), ValueError), (lambda: to_fp8(torch.ones(2), 0.0, "e4m3"),
                                                                    ValueError),
    (lambda: scaled_mm(torch.ones(2, 2), 1.0, torch.ones(2, 2), 1.0), TypeError),
    (lambda: simulate_scaling([0.5, 1.0], 2), ValueError), (lambda: simulate_scaling([0, 1], 0), ValueError),
    (lambda: simulate_scaling("01", 1), TypeError), (lambda: amax_sequence(0), ValueError),
    (lambda: fp8.compare_precisions([]), TypeError), (lambda: fp8.fp8_tensor_cores(0), TypeError),
])
def test_arguments_are_validated(call, error):
    with pytest.raises(error):
        call()


def test_torchao_import_prints_nothing():
    code = "from ampcourse.fp8 import import_torchao; f = import_torchao(); print('ok', f.__name__)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "ok torchao.float8\n"
    assert "Failed to load" not in done.stderr and done.stderr.strip() == "", done.stderr
    assert logging.getLogger("torchao").level == logging.NOTSET  # levels restored (in this process too)


def test_torchao_has_only_dynamic_scaling_and_converts_linears():
    float8 = fp8.import_torchao()
    assert [s.name for s in float8.config.ScalingType] == ["DYNAMIC", "DISABLED"]
    model = nn.Sequential(nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 10))
    fp8.to_float8(model, "cpu")
    assert type(model[0]).__name__ == "Float8Linear" and type(model[2]) is nn.Linear  # 10 outputs: kept
    assert model[0].config.emulate  # no FP8 Tensor Cores on the CPU
    loss = model(torch.randn(16, 64)).sum()
    loss.backward()
    assert model[0].weight.grad is not None


def test_compare_precisions_trains_all_three_from_the_same_seed():
    runs = fp8.compare_precisions(seeds=[0], epochs=1)
    assert set(runs) == {"fp32", "bf16", "fp8"}
    for items in runs.values():
        (run,) = items
        assert run.losses[-1] < run.losses[0] and 0.5 < run.accuracy <= 1
    assert "fp8" in fp8.accuracy_table(runs).text()


def test_emulated_scaled_mm_is_the_same_arithmetic():
    g = torch.Generator().manual_seed(1)
    a, b = torch.randn(16, 32, generator=g).to(E4M3), torch.randn(16, 32, generator=g).to(E4M3)
    sa, sb = torch.tensor(0.5), torch.tensor(0.25)
    emulated = fp8.emulated_scaled_mm(a, b.t(), scale_a=sa, scale_b=sb, out_dtype=torch.float32)
    assert torch.allclose(emulated, (a.float() * 0.5) @ (b.float() * 0.25).t())
    bias = torch.arange(16.0, dtype=torch.bfloat16)  # CUDA takes a bias only with a bf16/fp16 output, matching it
    with_bias = fp8.emulated_scaled_mm(a, b.t(), scale_a=sa, scale_b=sb, bias=bias, out_dtype=torch.bfloat16)
    assert with_bias.dtype == torch.bfloat16
    assert torch.equal(with_bias, (emulated + bias.float()).bfloat16())
    if fp8.fp8_matmul_available("cpu"):  # torch's own (oneDNN on AMX, its emulation elsewhere)
        real = torch._scaled_mm(a, b.t(), scale_a=sa, scale_b=sb, out_dtype=torch.float32)
        assert torch.allclose(real, emulated, rtol=1e-5, atol=1e-5)
        real_bias = torch._scaled_mm(a, b.t(), scale_a=sa, scale_b=sb, bias=bias, out_dtype=torch.bfloat16)
        assert torch.allclose(real_bias.float(), with_bias.float(), rtol=1e-2, atol=1e-2)


def test_emulated_scaled_mm_defaults_to_the_operand_dtype_as_scaled_mm_does():
    a = torch.randn(16, 16, generator=torch.Generator().manual_seed(2)).to(E4M3)
    one = torch.tensor(1.0)
    assert fp8.emulated_scaled_mm(a, a.t(), scale_a=one, scale_b=one).dtype == E4M3
    assert torch._scaled_mm(a, a.t(), scale_a=one, scale_b=one).dtype == E4M3  # torch's own default


@pytest.mark.parametrize(("change", "error", "words"), [
    ({"scale_a": torch.tensor(1.0, dtype=torch.float64)}, ValueError,
     r"scale_a must be a float32 tensor \(got torch.float64\): torch refuses other per-tensor scales"),
    ({"scale_b": torch.ones(2)}, ValueError, "scale_b must have one element, a per-tensor scale"),
    ({"scale_b": torch.ones(16, 1)}, ValueError, r"scale_b must have one element.*shape \(16, 1\)"),
    ({"a": torch.ones(16, 16)}, TypeError, "a must be a float8_e4m3fn or float8_e5m2 tensor"),
    ({"out_dtype": torch.int8}, ValueError, "out_dtype must be one of"),
    ({"out_dtype": torch.float64}, ValueError, "out_dtype must be one of"),
    ({"bias": torch.ones(3), "out_dtype": torch.bfloat16}, ValueError, "bias must be None or a tensor of 16"),
    ({"bias": torch.zeros(16), "out_dtype": torch.float32}, ValueError,
     "Bias is not supported when out_dtype is set to Float32"),
    ({"bias": torch.zeros(16, dtype=torch.bfloat16), "out_dtype": torch.float32}, ValueError,
     "a bias needs a bf16 or fp16 output"),
    ({"bias": torch.zeros(16), "out_dtype": torch.bfloat16}, ValueError, "bias must be a bfloat16 or float16"),
    ({"bias": torch.zeros(16, dtype=torch.float16), "out_dtype": torch.bfloat16}, ValueError,
     "with out_dtype=torch.bfloat16 the bias must be torch.bfloat16 too"),
    ({"bias": torch.zeros(16, dtype=torch.bfloat16), "out_dtype": torch.float16}, ValueError,
     "with out_dtype=torch.float16 the bias must be torch.float16 too"),
    ({"a": torch.ones(16, 16).to(E5M2), "b": torch.ones(16, 16).to(E5M2)}, ValueError,
     "Multiplication of two Float8_e5m2 matrices is not supported"),
    ({"use_fast_accum": 1}, TypeError, "use_fast_accum must be True or False"),
])
def test_emulated_scaled_mm_holds_answers_to_scaled_mm_contract(change, error, words):
    a = torch.randn(16, 16, generator=torch.Generator().manual_seed(3)).to(E4M3)
    args = {"a": a, "b": a.t(), "scale_a": torch.tensor(1.0), "scale_b": torch.tensor(1.0)} | change
    with pytest.raises(error, match=words):
        fp8.emulated_scaled_mm(**args)


@pytest.mark.parametrize(("bias_dtype", "out_dtype"), [
    (torch.bfloat16, torch.bfloat16), (torch.float16, torch.float16), (torch.bfloat16, E4M3),
    (torch.float16, E4M3), (torch.bfloat16, None)])
def test_emulated_scaled_mm_takes_the_biases_cuda_takes(bias_dtype, out_dtype):
    """CUDA's rules (Blas.cpp, _scaled_mm_out_cuda): a bf16/fp16 bias with a bf16/fp16/FP8 output, matching a
    bf16 or fp16 output; one E5M2 operand with one E4M3 is fine."""
    a = torch.randn(16, 16, generator=torch.Generator().manual_seed(4)).to(E4M3)
    one = torch.tensor(1.0)
    out = fp8.emulated_scaled_mm(a, a.t(), one, one, bias=torch.ones(16, dtype=bias_dtype), out_dtype=out_dtype)
    assert out.dtype == (out_dtype or E4M3)
    assert fp8.emulated_scaled_mm(a.to(E5M2), a.t(), one, one, out_dtype=torch.float32).dtype == torch.float32


def test_emulated_scaled_mm_refuses_unknown_keywords():
    a = torch.zeros(16, 16).to(E4M3)
    with pytest.raises(TypeError, match="unexpected keyword argument 'outdtype'"):
        fp8.emulated_scaled_mm(a, a.t(), scale_a=torch.tensor(1.0), scale_b=torch.tensor(1.0), outdtype=torch.float32)


def test_previous_max_is_the_sliding_maximum_of_the_previous_steps():
    rng = np.random.default_rng(0)
    for n in (1, 2, 3, 7, 50, 201):
        for h in (1, 2, 3, 16, 64, 1000):
            v = rng.integers(-20, 20, n)
            want = [int(v[0])] + [int(v[max(0, t - h):t].max()) for t in range(1, n)]
            assert fp8.simulate_scaling(v.tolist(), h).log2_scale_amax.tolist() == want, (n, h)


def test_scaled_mm_falls_back_where_the_cpu_has_no_fp8_matmul(monkeypatch):
    monkeypatch.setitem(fp8._FP8_MATMUL, "cpu", False)

    def refuse(*args, **kwargs):
        raise RuntimeError("could not create a primitive descriptor for the matmul primitive")
    monkeypatch.setattr(torch, "_scaled_mm", refuse)
    x = torch.randn(16, 32)
    s = scale_from_amax(amax(x), E4M3)
    out = scaled_mm(to_fp8(x, s, E4M3), s, to_fp8(x, s, E4M3).t(), s)
    assert float((out - x @ x.t()).norm() / (x @ x.t()).norm()) < 0.05


def test_fp8_matmul_probe_is_a_bool_and_cached():
    assert isinstance(fp8.fp8_matmul_available(), bool) and "cpu" in fp8._FP8_MATMUL


def _cuda_fp8():
    return torch.cuda.is_available() and fp8.fp8_tensor_cores("cuda")


@pytest.mark.gpu
@pytest.mark.skipif(not _cuda_fp8(), reason="needs a CUDA GPU with FP8 Tensor Cores")
def test_emulated_scaled_mm_matches_and_refuses_like_cuda_scaled_mm():
    """On FP8 Tensor Cores: the same result as torch._scaled_mm for a valid call (FP32 out, no fast accumulation),
    and each call CUDA refuses (row-major b, float64 scales, k not a multiple of 16, a bias with an FP32 output,
    a float32 bias, two E5M2 operands) is refused by the emulation."""
    g = torch.Generator().manual_seed(5)
    x = torch.randn(32, 64, generator=g).cuda()
    w = (torch.randn(48, 64, generator=g) * 1e-3).cuda()
    sx, sw = scale_from_amax(amax(x), E4M3).cuda(), scale_from_amax(amax(w), E4M3).cuda()
    x8, w8 = to_fp8(x, sx, E4M3), to_fp8(w, sw, E4M3)
    kwargs = {"scale_a": 1 / sx, "scale_b": 1 / sw, "out_dtype": torch.float32}
    real = torch._scaled_mm(x8, w8.t(), **kwargs)
    emulated = fp8.emulated_scaled_mm(x8, w8.t(), **kwargs)
    assert float((real - emulated).norm() / real.norm()) < 1e-3
    assert torch._scaled_mm(x8, w8.t(), scale_a=1 / sx, scale_b=1 / sw).dtype == E4M3  # out_dtype defaults to a's
    bad = {
        "row-major b": ((x8, w8.t().contiguous()), kwargs),
        "float64 scales": ((x8, w8.t()), kwargs | {"scale_a": (1 / sx).double(), "scale_b": (1 / sw).double()}),
        "k not a multiple of 16": ((x8[:, :40], w8[:, :40].t()), kwargs),
        "a bias with an FP32 output": ((x8, w8.t()), kwargs | {"bias": torch.zeros(48, device="cuda").bfloat16()}),
        "a float32 bias": ((x8, w8.t()), kwargs | {"bias": torch.zeros(48, device="cuda"),
                                                   "out_dtype": torch.bfloat16}),
        "two E5M2 operands": ((x8.float().to(E5M2), w8.float().to(E5M2).t()), kwargs),
    }
    for label, (args, kw) in bad.items():
        with pytest.raises((RuntimeError, ValueError)):
            torch._scaled_mm(*args, **kw)
        with pytest.raises(ValueError):
            fp8.emulated_scaled_mm(*args, **kw)
        print("both refuse:", label)
