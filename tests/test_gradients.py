import doctest
import math
import time

import numpy as np
import pytest
import torch

import ampcourse.gradients as gradients
from ampcourse.gradients import (
    CATEGORIES,
    GradientSample,
    ScaleWindow,
    bf16_fate,
    cast_fate,
    collect_gradients,
    format_limits,
    fp16_fate,
    safe_scale_window,
)

DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}


@pytest.fixture(scope="module")
def sample() -> GradientSample:
    return collect_gradients(device="cpu")


def by_hand(values: torch.Tensor, scale: float, dtype: torch.dtype) -> dict[str, int]:
    """The five counts, straight from ``(values * scale).to(dtype)``."""
    cast = (values * scale).to(dtype)
    zero_before = values == 0
    finite = torch.isfinite(cast)
    below_normal = cast.abs() < torch.finfo(dtype).tiny
    return {
        "zero": int(zero_before.sum()),
        "flushed": int(((cast == 0) & ~zero_before).sum()),
        "subnormal": int((below_normal & (cast != 0)).sum()),
        "normal": int((~below_normal & finite).sum()),
        "overflow": int(torch.isinf(cast).sum()),
    }


def by_thresholds(values: torch.Tensor, scale: float, fmt: str) -> dict[str, int]:
    """The five counts from FormatLimits' rounding boundaries, without casting."""
    limits = format_limits(fmt)
    x = (values.float() * torch.tensor(scale, dtype=torch.float32)).abs()
    zero = values == 0
    flushed = ~zero & (x <= limits.flush_threshold)
    overflow = x >= limits.overflow_threshold
    normal = (x >= limits.normal_threshold) & ~overflow
    subnormal = ~zero & ~flushed & (x < limits.normal_threshold)
    return {"zero": int(zero.sum()), "flushed": int(flushed.sum()), "subnormal": int(subnormal.sum()),
            "normal": int(normal.sum()), "overflow": int(overflow.sum())}


def test_docstring_examples_hold():
    assert doctest.testmod(gradients, optionflags=doctest.ELLIPSIS).failed == 0


def test_format_limits():
    fp16, bf16 = format_limits("fp16"), format_limits(torch.bfloat16)
    assert (fp16.smallest_subnormal, fp16.smallest_normal, fp16.max) == (2.0**-24, 2.0**-14, 65504.0)
    assert (fp16.flush_threshold, fp16.normal_threshold, fp16.overflow_threshold) == (
        2.0**-25, 2.0**-14 - 2.0**-25, 65520.0)
    assert (bf16.smallest_subnormal, bf16.smallest_normal) == (2.0**-133, 2.0**-126)
    assert bf16.max == torch.finfo(torch.bfloat16).max and bf16.overflow_threshold == bf16.max + 2.0**119
    assert format_limits("Float16") == format_limits("half") == fp16


def _next_up(x: float) -> float:
    return torch.nextafter(torch.tensor(x), torch.tensor(math.inf)).item()


def _next_down(x: float) -> float:
    return torch.nextafter(torch.tensor(x), torch.tensor(0.0)).item()


FP16_BOUNDARIES = [
    (0.0, "zero"),
    (2.0**-26, "flushed"),
    (2.0**-25, "flushed"),  # exactly half the smallest subnormal: the tie goes to 0 (even)
    (_next_up(2.0**-25), "subnormal"),  # just above: rounds up to 2**-24
    (2.0**-24, "subnormal"),
    (1.5 * 2.0**-24, "subnormal"),
    (_next_down(2.0**-14 - 2.0**-25), "subnormal"),
    (2.0**-14 - 2.0**-25, "normal"),  # the tie between 1023 and 1024 x 2**-24 goes to 1024: 2**-14
    (_next_down(2.0**-14), "normal"),
    (2.0**-14, "normal"),
    (65504.0, "normal"),
    (65519.99, "normal"),  # float32(65519.99) = 65519.9921875 rounds down to 65504
    (_next_down(65520.0), "normal"),
    (65520.0, "overflow"),  # the tie between 65504 and 65536 goes to 65536: inf
    (1e6, "overflow"),
]

BF16_BOUNDARIES = [
    (2.0**-134, "flushed"),
    (_next_up(2.0**-134), "subnormal"),
    (2.0**-133, "subnormal"),
    (2.0**-126, "normal"),
    (2.0**-25, "normal"),
    (65520.0, "normal"),
    (torch.finfo(torch.bfloat16).max, "normal"),
    (torch.finfo(torch.bfloat16).max + 2.0**119, "overflow"),
    (torch.finfo(torch.float32).max, "overflow"),
]


@pytest.mark.parametrize(("fmt", "cases"), [("fp16", FP16_BOUNDARIES), ("bf16", BF16_BOUNDARIES)])
def test_crafted_boundaries(fmt, cases):
    for value, expected in cases:
        for signed in (value, -value):
            x = torch.tensor([signed], dtype=torch.float32)
            counts = cast_fate(x, fmt=fmt).counts
            assert counts == by_hand(x, 1.0, DTYPES[fmt]) == by_thresholds(x, 1.0, fmt), (fmt, signed)
            assert counts[expected] == 1, (fmt, signed, counts)
    values = torch.tensor([v for v, _ in cases], dtype=torch.float32)
    expected_counts = {name: sum(1 for _, e in cases if e == name) for name in CATEGORIES}
    assert cast_fate(values, fmt=fmt).counts == expected_counts


@pytest.mark.parametrize("fmt", ["fp16", "bf16"])
@pytest.mark.parametrize("scale", [1.0, 2.0**-6, 2.0**8, 2.0**19, 2.0**24, 0.1, 1000.1])
def test_fate_agrees_with_direct_casts_on_real_gradients(sample, fmt, scale):
    counts = cast_fate(sample.all, scale, fmt)
    assert counts.counts == by_hand(sample.all, scale, DTYPES[fmt]) == by_thresholds(sample.all, scale, fmt)
    assert counts.total == sample.n_values and counts.scale == float(np.float32(scale))
    assert math.isclose(sum(counts.fractions.values()), 1.0)


def test_fate_shortcuts_and_float64_inputs(sample):
    assert fp16_fate(sample.all, 256.0) == cast_fate(sample.all, 256.0, "float16")
    assert bf16_fate(sample.all) == cast_fate(sample.all, 1.0, torch.bfloat16)
    # float64 values are rounded to float32 first, as torch's own float64 -> float16 cast does
    doubles = sample.all.double() * (1 + 2.0**-40)
    assert fp16_fate(doubles).counts == by_hand(doubles, 1.0, torch.float16)


def test_real_gradients_underflow_and_scaling_rescues_them(sample, figures):
    at = {k: fp16_fate(sample.all, 2.0**k) for k in range(25)}
    flushed = {k: c.fractions["flushed"] for k, c in at.items()}
    first_overflow = min(k for k, c in at.items() if c.overflow)
    window = safe_scale_window(sample.all)
    # The lesson needs a visible part of the real gradients to vanish in FP16 at S = 1 ...
    assert flushed[0] > 0.05
    assert at[0].fractions["subnormal"] > 0.2
    assert bf16_fate(sample.all).flushed == 0  # ... and none in BF16, which has FP32's range
    # ... a loss scale to save them without overflow ...
    assert flushed[12] < flushed[0] / 100 and at[12].overflow == 0
    assert at[window.max_power].overflow == 0 and window.max_power + 1 == first_overflow
    assert all(flushed[k + 1] <= flushed[k] for k in range(24))
    # ... and a scale too far.
    assert first_overflow <= 24
    n, nonzero = sample.n_values, at[0].nonzero
    figures(
        f"lesson 02, real gradients ({n:,} values, {nonzero / n:.1%} nonzero): FP16 flushes "
        f"{flushed[0]:.1%} of all values to zero at S=1 ({at[0].flushed / nonzero:.1%} of the nonzero; "
        f"{at[0].fractions['subnormal']:.1%} subnormal), {flushed[4]:.2%} at S=2^4, {flushed[8]:.3%} at S=2^8, "
        f"{flushed[12]:.4%} at S=2^12; overflow from S=2^{first_overflow}; BF16 flushes none. "
        f"safe_scale_window (1% quantile): 2^{window.min_power}..2^{window.max_power}"
    )


def test_collect_gradients_is_real_and_deterministic(figures):
    start = time.perf_counter()
    first = collect_gradients(device="cpu")
    seconds = time.perf_counter() - start
    again = collect_gradients(device="cpu")
    other = collect_gradients(seed=1, device="cpu")
    for name in ("weight_grads", "activation_grads", "all"):
        assert torch.equal(getattr(first, name), getattr(again, name))
        assert getattr(first, name).dtype == torch.float32 and getattr(first, name).device.type == "cpu"
    assert first.losses == again.losses and first.losses != other.losses
    assert not torch.equal(first.all, other.all)
    assert torch.equal(first.all, torch.cat([first.weight_grads, first.activation_grads]))
    assert first.n_params == sum(p.numel() for p in gradients.default_model().parameters()) == 9210
    assert first.weight_grads.numel() == first.steps * first.n_params
    assert first.steps == 5 and first.device == "cpu" and first.seed == 0
    assert first.losses[-1] < first.losses[0] - 0.1  # it learns
    assert "weight_grads" not in repr(first) and "n_params=9210" in repr(first)
    figures(f"lesson 02, collect_gradients(): {seconds * 1000:.0f} ms for {first.steps} steps, "
            f"{first.n_values:,} gradient values, loss {first.losses[0]:.3f} -> {first.losses[-1]:.3f}")


def test_collect_gradients_leaves_callers_state_alone():
    model = torch.nn.Sequential(torch.nn.Linear(32, 10))
    state = torch.get_rng_state()
    before = [p.detach().clone() for p in model.parameters()]
    sample = collect_gradients(model, steps=2, device="cpu")
    assert torch.equal(torch.get_rng_state(), state)
    assert all(torch.equal(b, p) for b, p in zip(before, model.parameters(), strict=True))
    assert sample.n_params == 330 and sample.weight_grads.numel() == 660
    assert sample.activation_grads.numel() == 2 * 256 * 10  # the logits' gradients


@pytest.mark.parametrize(
    ("kwargs", "error", "words"),
    [
        ({"steps": 0}, ValueError, "steps must be from 1"),
        ({"steps": 1.5}, TypeError, "steps must be an int"),
        ({"steps": True}, TypeError, "steps must be an int"),
        ({"seed": -1}, ValueError, "seed must be >= 0"),
        ({"seed": "0"}, TypeError, "seed must be an int"),
        ({"model": "mlp"}, TypeError, "model must be a torch.nn.Module"),
        ({"model": torch.nn.Linear(32, 3)}, ValueError, r"model must map a \(256, 32\) input to \(256, 10\)"),
        ({"model": torch.nn.Identity()}, ValueError, "model has no trainable parameters"),
        ({"device": 3}, TypeError, "device must be None"),
        ({"device": "nonsense"}, ValueError, "device must name a device.*'nonsense'"),
    ],
)
def test_collect_gradients_validates(kwargs, error, words):
    with pytest.raises(error, match=words):
        collect_gradients(**({"device": "cpu"} | kwargs))


@pytest.mark.parametrize(
    ("args", "error", "words"),
    [
        (([1e-8, 1.0],), TypeError, "values must be a torch.Tensor"),
        ((torch.tensor([1, 2]),), TypeError, "floating-point"),
        ((torch.tensor([]),), ValueError, "values is empty"),
        ((torch.tensor([1.0, math.inf]),), ValueError, "values must be finite"),
        ((torch.tensor([1.0, math.nan]),), ValueError, "values must be finite"),
        ((torch.ones(3), 0.0), ValueError, "scale must be a positive finite number"),
        ((torch.ones(3), -8.0), ValueError, "scale must be a positive finite number"),
        ((torch.ones(3), math.inf), ValueError, "scale must be a positive finite number"),
        ((torch.ones(3), math.nan), ValueError, "scale must be a positive finite number"),
        ((torch.ones(3), 1e-50), ValueError, "representable in float32"),
        ((torch.ones(3), 1e39), ValueError, "representable in float32"),
        ((torch.ones(3), "8"), TypeError, "scale must be a number"),
        ((torch.ones(3), True), TypeError, "scale must be a number"),
        ((torch.ones(3), 1.0, "fp8"), ValueError, r"fmt must be one of \['bf16', 'fp16'\]"),
        ((torch.ones(3), 1.0, torch.float32), ValueError, "fmt must be one of"),
        ((torch.ones(3), 1.0, 16), TypeError, "fmt must be a str"),
    ],
)
def test_cast_fate_validates(args, error, words):
    with pytest.raises(error, match=words):
        cast_fate(*args)


def brute_force_window(values: torch.Tensor, fmt: str, quantile: float, powers: range) -> tuple[int | None, ...]:
    """The window by trying every power of two in ``powers`` (in float64, where these products are exact)."""
    limits = format_limits(fmt)
    magnitudes = np.abs(values.double().numpy())
    nonzero = magnitudes[magnitudes > 0]
    no_overflow = [k for k in powers if (magnitudes * 2.0**k <= limits.max).all()]
    enough_normal = [k for k in powers
                     if np.count_nonzero(nonzero * 2.0**k < limits.smallest_normal) <= quantile * nonzero.size]
    return (min(enough_normal) if enough_normal else None, max(no_overflow) if no_overflow else None)


@pytest.mark.parametrize("quantile", [0.0, 0.01, 0.5])
def test_safe_scale_window_matches_brute_force_on_real_gradients(sample, quantile):
    window = safe_scale_window(sample.all, quantile=quantile)
    assert isinstance(window, ScaleWindow) and 0 <= window.min_power <= 40 and 0 <= window.max_power <= 40
    assert (window.min_power, window.max_power) == brute_force_window(sample.all, "fp16", quantile, range(41))
    # What the guarantees promise, checked with the casts themselves:
    assert fp16_fate(sample.all, 2.0**window.max_power).overflow == 0
    low = fp16_fate(sample.all, 2.0**window.min_power)
    assert low.flushed + low.subnormal <= quantile * low.nonzero


def test_safe_scale_window_matches_brute_force_on_crafted_values():
    generator = torch.Generator().manual_seed(0)
    for trial in range(20):
        low, span = -60 + 2 * trial, 10 + trial
        exponents = torch.rand(1000, generator=generator, dtype=torch.float64) * span + low
        values = (2.0**exponents).float() * torch.sign(torch.randn(1000, generator=generator))
        for fmt, powers in (("fp16", range(-80, 81)), ("bf16", range(-300, 301))):
            window = safe_scale_window(values, fmt, quantile=0.05)
            assert (window.min_power, window.max_power) == brute_force_window(values, fmt, 0.05, powers)
    exact = torch.tensor([0.0, 2.0**-30, 1.0])  # zeros are ignored by the quantile
    assert safe_scale_window(exact, quantile=0.0) == ScaleWindow(16, 15)
    assert safe_scale_window(exact, quantile=0.0).empty
    assert safe_scale_window(torch.tensor([65504.0])) == ScaleWindow(-14 - 15, 0)
    assert safe_scale_window(torch.tensor([65504.5])).max_power == -1
    bf16 = safe_scale_window(torch.tensor([1e-10, 1.0]), "bf16")
    assert bf16.min_power < 0 < bf16.max_power  # BF16 needs no scaling at all


@pytest.mark.parametrize(
    ("args", "kwargs", "error", "words"),
    [
        ((torch.zeros(4),), {}, ValueError, "all zero"),
        ((torch.ones(4),), {"quantile": 1.0}, ValueError, r"quantile must be in \[0, 1\)"),
        ((torch.ones(4),), {"quantile": -0.1}, ValueError, "quantile must be in"),
        ((torch.ones(4),), {"quantile": "1%"}, TypeError, "quantile must be a number"),
        ((torch.ones(4), "e5m2"), {}, ValueError, "fmt must be one of"),
        (("1.0",), {}, TypeError, "values must be a torch.Tensor"),
    ],
)
def test_safe_scale_window_validates(args, kwargs, error, words):
    with pytest.raises(error, match=words):
        safe_scale_window(*args, **kwargs)


def test_default_model_branch_init_scales_only_the_branches_last_layer():
    torch.manual_seed(0)
    small = gradients.default_model()
    torch.manual_seed(0)
    plain = gradients.default_model(branch_init=1.0)
    for a, b in zip(small[1:5], plain[1:5], strict=True):
        assert torch.equal(a.up.weight, b.up.weight)
        assert torch.allclose(a.down.weight, b.down.weight * gradients.BRANCH_INIT)
    with pytest.raises(ValueError, match="branch_init must be finite and >= 0"):
        gradients.default_model(branch_init=-1.0)
    with pytest.raises(TypeError, match="branch_init must be a number"):
        gradients.default_model(branch_init="1e-4")


def test_default_init_flushes_far_less_than_the_small_branch_init():
    """Lesson 02's contrast: the same architecture with torch's default init barely underflows in FP16."""
    torch.manual_seed(0)
    plain = collect_gradients(gradients.default_model(branch_init=1.0), steps=2, device="cpu")
    small = collect_gradients(steps=2, device="cpu")
    plain_flushed = fp16_fate(plain.activation_grads).fractions["flushed"]
    assert plain_flushed < 0.01
    assert fp16_fate(small.activation_grads).fractions["flushed"] > 5 * plain_flushed


def test_safe_scale_window_can_count_only_flushed_values_as_lost():
    # 2**-30 * 2**6 = 2**-24, the smallest subnormal: kept (nonzero); 2**5 gives 2**-25, a tie that goes to 0
    values = torch.tensor([2.0**-30, 1.0])
    assert safe_scale_window(values, quantile=0.0, lost="flushed").min_power == 6
    assert safe_scale_window(values, quantile=0.0).min_power == 16  # below normal: up to 2**-14
    # just above the tie: 2**5 already rounds up to the smallest subnormal
    assert safe_scale_window(torch.tensor([2.0**-30 * 1.5, 1.0]), quantile=0.0, lost="flushed").min_power == 5
    scaled = fp16_fate(torch.tensor([2.0**-30 * 1.5]), 2.0**5).counts
    assert scaled["flushed"] == 0 and scaled["subnormal"] == 1
    with pytest.raises(ValueError, match="lost must be 'below_normal' or 'flushed'"):
        safe_scale_window(values, lost="zero")


def test_lesson04_ceiling_is_lesson02s_largest_safe_scale():
    """Lesson 04's simulated ceiling (a constant in its widget) must stay what lesson 02 computes."""
    from ampcourse.widgets.lesson04 import CEILING_LOG2

    assert CEILING_LOG2 == safe_scale_window(collect_gradients(device="cpu").all).max_power
