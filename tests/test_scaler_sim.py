"""Tests for ampcourse.scaler_sim: the simulator must do exactly what torch.amp.GradScaler does."""

import math

import numpy as np
import pytest
import torch

from ampcourse.scaler_sim import overflow_pattern, simulate_grad_scaler


def run_real_grad_scaler(found_inf, device="cpu", **settings):
    """Train a one-parameter model under a real CPU ``GradScaler``; step i overflows iff found_inf[i].

    Returns, per step, the scale the loss was multiplied by, whether the parameter was left
    unchanged (the optimizer step was skipped) and the growth tracker after ``update()``, plus the
    final ``state_dict()``.  The loss is linear in the parameter, so on a clean step the unscaled
    gradient is about 1 and plain SGD always moves the parameter, as long as the scale stays in
    float32's normal range on clean steps (below it, unscaling makes the gradient inf or NaN and
    the model then overflows for real, whatever found_inf says).
    """
    param = torch.zeros(1, requires_grad=True, device=device)
    optimizer = torch.optim.SGD([param], lr=2.0**-10)
    scaler = torch.amp.GradScaler(device, enabled=True, **settings)
    scales, skipped, trackers = [], [], []
    for overflow in found_inf:
        optimizer.zero_grad()
        loss = param.sum() * (math.inf if overflow else 1.0)  # an overflowing forward pass
        scaler.scale(loss).backward()
        scales.append(scaler.get_scale())
        before = param.detach().clone()
        scaler.step(optimizer)
        scaler.update()
        skipped.append(torch.equal(param.detach(), before))
        trackers.append(scaler.state_dict()["_growth_tracker"])
    return tuple(scales), tuple(skipped), tuple(trackers), scaler.state_dict()


def first_difference(simulated, real):
    """A description of the first step where two per-step sequences differ, or None."""
    for step, (sim, ref) in enumerate(zip(simulated, real, strict=True)):
        if sim != ref:
            return f"step {step}: simulated {sim!r}, torch {ref!r}"
    return None


GROWTH_1_7 = {"growth_factor": 1.7, "backoff_factor": 0.3}
# (overflow pattern, GradScaler settings): a mix of rates and bursts, growth factors that are and
# are not powers of two, init_scale values float32 does and does not represent, and scales that
# reach float32's top (no growth to inf) and bottom (backed off to exactly 0).
CASES = {
    "defaults, no overflow": (overflow_pattern(4500), {}),
    "defaults, every step overflows": (overflow_pattern(400, rate=1.0), {}),
    "defaults, bursts": (overflow_pattern(5000, burst_every=2400, burst_len=3), {}),
    "defaults, rate 0.01": (overflow_pattern(1500, rate=0.01, seed=1), {}),
    "growth 1.7, backoff 0.3, interval 3, rate 0.1": (
        overflow_pattern(2000, rate=0.1, seed=2),
        {**GROWTH_1_7, "growth_interval": 3},
    ),
    "init 0.1, growth 1.7, backoff 0.3, interval 100, rate 0.01": (
        overflow_pattern(3000, rate=0.01, seed=3),
        {**GROWTH_1_7, "init_scale": 0.1, "growth_interval": 100},
    ),
    "init 3, interval 1, rate 0.5": (
        overflow_pattern(2000, rate=0.5, seed=4),
        {"init_scale": 3.0, "growth_interval": 1},
    ),
    "init 3, growth 1.7, backoff 0.3, interval 3, rate 0.1 + bursts": (
        overflow_pattern(1500, rate=0.1, burst_every=50, burst_len=2, seed=5),
        {**GROWTH_1_7, "init_scale": 3.0, "growth_interval": 3},
    ),
    "init 2**120, growth 16, interval 1, bursts (float32 top)": (
        overflow_pattern(300, burst_every=20),
        {"init_scale": 2.0**120, "growth_factor": 16.0, "growth_interval": 1},
    ),
    "init 2**120, growth 1.7, backoff 0.3, interval 1, bursts (float32 top)": (
        overflow_pattern(300, burst_every=40, burst_len=2),
        {**GROWTH_1_7, "init_scale": 2.0**120, "growth_interval": 1},
    ),
}


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_simulator_matches_torch_step_for_step(device, figures):
    mismatches = []
    for name, (found_inf, settings) in CASES.items():
        trace = simulate_grad_scaler(found_inf, **settings)
        scales, skipped, trackers, state = run_real_grad_scaler(found_inf, device, **settings)
        for what, simulated, real in [
            ("scale", trace.scales, scales),
            ("skipped", trace.skipped, skipped),
            ("growth tracker", trace.growth_tracker, trackers),
        ]:
            if difference := first_difference(simulated, real):
                mismatches.append(f"{name}: {what} differs at {difference}")
        if trace.state_dict() != state:
            mismatches.append(f"{name}: final state_dict {trace.state_dict()} != torch's {state}")
    assert not mismatches, "\n".join(mismatches)

    n_steps = sum(len(found_inf) for found_inf, _ in CASES.values())
    n_skipped = sum(sum(found_inf) for found_inf, _ in CASES.values())
    figures(
        f"GradScaler simulator vs torch.amp.GradScaler({device!r}): {len(CASES)} runs, {n_steps} steps "
        f"({n_skipped} skipped), scale, skip and growth tracker identical at every step"
    )


def naive_float64_scales(
    found_inf, *, init_scale=2.0**16, growth_factor=2.0, backoff_factor=0.5, growth_interval=2000
):
    """The update rule done in Python floats, without the kernel's rounding to float32."""
    scale, tracker, scales = init_scale, 0, []
    for overflow in found_inf:
        scales.append(scale)
        if overflow:
            scale, tracker = scale * backoff_factor, 0
        else:
            tracker += 1
            if tracker == growth_interval:
                if math.isfinite(scale * growth_factor):
                    scale *= growth_factor
                tracker = 0
    return tuple(scales)


@pytest.mark.parametrize(
    "case",
    [
        "growth 1.7, backoff 0.3, interval 3, rate 0.1",
        "init 0.1, growth 1.7, backoff 0.3, interval 100, rate 0.01",
        "init 2**120, growth 16, interval 1, bursts (float32 top)",
        "defaults, every step overflows",
    ],
)
def test_float64_arithmetic_would_not_match_torch(case):
    # Float64 does match for the power-of-two settings of the other cases while the scale stays
    # inside float32's range; these cases leave it, or use factors float32 rounds.
    found_inf, settings = CASES[case]
    trace = simulate_grad_scaler(found_inf, **settings)
    assert first_difference(trace.scales, naive_float64_scales(found_inf, **settings)) is not None


def test_kernel_multiplies_in_float64_then_rounds_to_float32():
    scaler = torch.amp.GradScaler("cpu", init_scale=3.0, backoff_factor=0.3)
    param = torch.zeros(1, requires_grad=True)
    optimizer = torch.optim.SGD([param], lr=1.0)
    scaler.scale(param.sum() * math.inf).backward()
    scaler.step(optimizer)
    scaler.update()

    in_float32 = float(np.float32(3.0) * np.float32(0.3))
    in_float64 = 3.0 * 0.3
    assert scaler.get_scale() == float(np.float32(in_float64)) == 0.8999999761581421
    assert in_float32 == 0.9000000357627869 != scaler.get_scale()
    assert simulate_grad_scaler([True], init_scale=3.0, backoff_factor=0.3).final_scale == 0.8999999761581421


def test_scale_saturates_at_float32_top_and_reaches_zero_at_bottom():
    grown = simulate_grad_scaler([False] * 4, init_scale=2.0**120, growth_factor=16.0, growth_interval=1)
    assert grown.scales == (2.0**120, 2.0**124, 2.0**124, 2.0**124)
    assert grown.growth_tracker == (0, 0, 0, 0)

    backed_off = simulate_grad_scaler([True] * 200, init_scale=1.0)
    assert backed_off.scales[149] == 2.0**-149  # float32's smallest subnormal
    assert backed_off.final_scale == 0.0
    assert backed_off.n_skipped == 200


def test_state_dict_before_any_step_reports_init_scale_unrounded():
    # Like torch: before the first scale() the scaler holds init_scale as given, not in float32.
    assert (
        simulate_grad_scaler([], init_scale=0.1).state_dict()
        == torch.amp.GradScaler("cpu", init_scale=0.1).state_dict()
    )
    trace = simulate_grad_scaler([], init_scale=0.1)
    assert trace.final_scale == float(np.float32(0.1)) != 0.1
    assert trace.scales == trace.skipped == trace.growth_tracker == ()
    assert trace.final_growth_tracker == trace.n_skipped == 0


def test_trace_fields_on_a_short_run():
    trace = simulate_grad_scaler([0, 0, 1, 0, 0, 0], init_scale=4.0, growth_interval=2)
    assert trace.scales == (4.0, 4.0, 8.0, 4.0, 4.0, 8.0)
    assert trace.skipped == (False, False, True, False, False, False)
    assert trace.growth_tracker == (1, 0, 0, 1, 0, 1)
    assert (trace.final_scale, trace.final_growth_tracker, trace.n_skipped) == (8.0, 1, 1)
    assert trace.state_dict() == {
        "scale": 8.0,
        "growth_factor": 2.0,
        "backoff_factor": 0.5,
        "growth_interval": 2,
        "_growth_tracker": 1,
    }


@pytest.mark.parametrize(
    "found_inf",
    [
        [False, True, True, False],
        (0, 1, 1, 0),
        np.array([False, True, True, False]),
        np.array([0, 1, 1, 0], dtype=np.uint8),
        torch.tensor([False, True, True, False]),
    ],
    ids=["list of bools", "tuple of ints", "numpy bools", "numpy uint8", "torch bools"],
)
def test_found_inf_accepts_bool_like_sequences(found_inf):
    assert simulate_grad_scaler(found_inf) == simulate_grad_scaler([False, True, True, False])


def test_overflow_pattern_random_rate():
    pattern = overflow_pattern(10_000, rate=0.1, seed=7)
    assert pattern == overflow_pattern(10_000, rate=0.1, seed=7)
    assert pattern != overflow_pattern(10_000, rate=0.1, seed=8)
    assert 900 < sum(pattern) < 1100
    assert not any(overflow_pattern(100))
    assert all(overflow_pattern(100, rate=1.0))
    assert overflow_pattern(0, rate=0.5) == ()


def test_overflow_pattern_bursts():
    pattern = overflow_pattern(12, burst_every=5, burst_len=2)
    assert [step for step, overflow in enumerate(pattern) if overflow] == [3, 4, 8, 9]
    assert all(overflow_pattern(6, burst_every=3, burst_len=3))
    with_random = overflow_pattern(1000, rate=0.2, burst_every=100, burst_len=5)
    random_only = overflow_pattern(1000, rate=0.2)
    assert with_random == tuple(r or step % 100 >= 95 for step, r in enumerate(random_only))


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"init_scale": 0.0}, ValueError, r"init_scale must be > 0 .*\(got 0.0\)"),
        ({"init_scale": -1.0}, ValueError, "init_scale must be > 0"),
        ({"init_scale": math.inf}, ValueError, "init_scale must be > 0 and finite"),
        ({"init_scale": math.nan}, ValueError, "init_scale must be > 0"),
        ({"init_scale": 1e39}, ValueError, "init_scale must be > 0 and finite in float32"),
        ({"init_scale": 1e-50}, ValueError, "init_scale must be > 0 and finite in float32"),
        ({"init_scale": "65536"}, TypeError, "init_scale must be a real number"),
        ({"growth_factor": 1.0}, ValueError, r"growth_factor must be > 1 and finite \(got 1.0\)"),
        ({"growth_factor": 0.5}, ValueError, "growth_factor must be > 1"),
        ({"growth_factor": math.inf}, ValueError, "growth_factor must be > 1 and finite"),
        ({"growth_factor": math.nan}, ValueError, "growth_factor must be > 1"),
        ({"growth_factor": None}, TypeError, "growth_factor must be a real number"),
        ({"backoff_factor": 1.0}, ValueError, r"backoff_factor must be in \(0, 1\) \(got 1.0\)"),
        ({"backoff_factor": 0.0}, ValueError, r"backoff_factor must be in \(0, 1\)"),
        ({"backoff_factor": -0.5}, ValueError, r"backoff_factor must be in \(0, 1\)"),
        ({"backoff_factor": True}, TypeError, "backoff_factor must be a real number"),
        ({"growth_interval": 0}, ValueError, r"growth_interval must be an int >= 1 \(got 0\)"),
        ({"growth_interval": 2.0}, TypeError, "growth_interval must be an int >= 1"),
        ({"found_inf": [[True, False]]}, ValueError, "found_inf must be 1-D"),
        ({"found_inf": True}, ValueError, "found_inf must be 1-D"),
        ({"found_inf": [0.0, 1.0]}, TypeError, "found_inf must hold bools"),
        ({"found_inf": ["yes"]}, TypeError, "found_inf must hold bools"),
        ({"found_inf": [0, 2]}, ValueError, "found_inf must hold bools or the ints 0 and 1"),
    ],
)
def test_simulate_grad_scaler_rejects_bad_arguments(kwargs, error, message):
    kwargs = {"found_inf": [False, True]} | kwargs
    with pytest.raises(error, match=message):
        simulate_grad_scaler(kwargs.pop("found_inf"), **kwargs)


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"n_steps": -1}, ValueError, r"n_steps must be an int >= 0 \(got -1\)"),
        ({"n_steps": 10.0}, TypeError, "n_steps must be an int"),
        ({"rate": 1.5}, ValueError, r"rate must be in \[0, 1\] \(got 1.5\)"),
        ({"rate": -0.1}, ValueError, r"rate must be in \[0, 1\]"),
        ({"rate": math.nan}, ValueError, r"rate must be in \[0, 1\]"),
        ({"rate": "0.1"}, TypeError, "rate must be a real number"),
        ({"burst_every": 0}, ValueError, "burst_every must be an int >= 1"),
        ({"burst_every": 2.5}, TypeError, "burst_every must be an int"),
        ({"burst_len": 0}, ValueError, "burst_len must be an int >= 1"),
        ({"burst_every": 3, "burst_len": 4}, ValueError, "burst_len must be <= burst_every"),
        ({"seed": -1}, ValueError, "seed must be an int >= 0"),
        ({"seed": None}, TypeError, "seed must be an int"),
    ],
)
def test_overflow_pattern_rejects_bad_arguments(kwargs, error, message):
    kwargs = {"n_steps": 10} | kwargs
    with pytest.raises(error, match=message):
        overflow_pattern(kwargs.pop("n_steps"), **kwargs)
