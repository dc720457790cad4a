"""Exercises 03–04: the checks pass right answers and name each typical wrong one (the fixtures)."""

import math

import numpy as np
import pytest
import torch

from ampcourse.checks import CheckFailed, NotStarted, lesson03, lesson04
from ampcourse.device import pick_device

BF16, FP32 = torch.bfloat16, torch.float32
RIGHT_DTYPES = {"hidden": BF16, "act": BF16, "logits": BF16, "loss": FP32, "weight": FP32, "weight.grad": FP32}


def _dtypes(**changes):
    return lambda: {**RIGHT_DTYPES, **changes}


WRONG_DTYPES = {
    "loss in bf16": (_dtypes(loss=BF16), "FP32 list"),
    "weights cast": (_dtypes(weight=BF16), "never changes parameters"),
    "grads in bf16": (_dtypes(**{"weight.grad": BF16}), "dtype of its leaf"),
    "relu in fp32": (_dtypes(act=FP32), "no autocast rule"),
    "linear in fp32": (_dtypes(hidden=FP32), "lower-precision list"),
    "strings": (_dtypes(loss="float32"), "give a torch dtype"),
    "missing key": (lambda: {"hidden": BF16}, "no entry for"),
}


def island_right(f, x):
    with torch.autocast(device_type=x.device.type, enabled=False):
        return f(x.float())


def island_no_disable(f, x):
    return f(x.float())


def island_no_cast(f, x):
    with torch.autocast(device_type=x.device.type, enabled=False):
        return f(x)


def island_deprecated_cuda_spelling(f, x):
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with torch.cuda.amp.autocast(enabled=False):  # deprecated, and only about CUDA: CPU autocast stays on
            return f(x.float())


def island_casts_back(f, x):
    with torch.autocast(device_type=x.device.type, enabled=False):
        return f(x.float()).to(x.dtype)


def island_turns_autocast_off(f, x):
    torch.set_autocast_enabled(x.device.type, False)
    return f(x.float())


WRONG_ISLANDS = {
    "autocast left on": (island_no_disable, "autocast was still on"),
    "input not cast": (island_no_cast, "Pass `x.float\\(\\)`"),
    "torch.cuda.amp spelling": (island_deprecated_cuda_spelling,
                                "autocast was still on" if pick_device().type != "cuda" else "never"),
    "result cast back": (island_casts_back, "do not cast\\s+the result back"),
    "autocast switched off for good": (island_turns_autocast_off, "switched off for the rest"),
    "never calls f": (lambda f, x: x.float(), "never called f"),
}
if pick_device().type == "cuda":  # there the deprecated CUDA spelling does disable autocast: not a mistake
    del WRONG_ISLANDS["torch.cuda.amp spelling"]


def _amp_dtype(x):
    return torch.float16


def step_right(model, loss_fn, optimizer, scaler, x, y):
    optimizer.zero_grad()
    with torch.autocast(device_type=x.device.type, dtype=_amp_dtype(x)):
        loss = loss_fn(model(x), y)
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    return loss.item()


def step_loss_outside(model, loss_fn, optimizer, scaler, x, y):
    optimizer.zero_grad()
    with torch.autocast(device_type=x.device.type, dtype=_amp_dtype(x)):
        logits = model(x)
    loss = loss_fn(logits, y)
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()


def step_no_update(model, loss_fn, optimizer, scaler, x, y):
    optimizer.zero_grad()
    with torch.autocast(device_type=x.device.type, dtype=_amp_dtype(x)):
        loss = loss_fn(model(x), y)
    scaler.scale(loss).backward()
    scaler.step(optimizer)


def step_update_first(model, loss_fn, optimizer, scaler, x, y):
    optimizer.zero_grad()
    with torch.autocast(device_type=x.device.type, dtype=_amp_dtype(x)):
        loss = loss_fn(model(x), y)
    scaler.scale(loss).backward()
    scaler.update()
    scaler.step(optimizer)


def step_direct(model, loss_fn, optimizer, scaler, x, y):
    optimizer.zero_grad()
    with torch.autocast(device_type=x.device.type, dtype=_amp_dtype(x)):
        loss = loss_fn(model(x), y)
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    optimizer.step()
    scaler.update()


def step_unscaled_backward(model, loss_fn, optimizer, scaler, x, y):
    optimizer.zero_grad()
    with torch.autocast(device_type=x.device.type, dtype=_amp_dtype(x)):
        loss = loss_fn(model(x), y)
    loss.backward()
    scaler.step(optimizer)
    scaler.update()


def step_no_zero_grad(model, loss_fn, optimizer, scaler, x, y):
    with torch.autocast(device_type=x.device.type, dtype=_amp_dtype(x)):
        loss = loss_fn(model(x), y)
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()


def step_forward_outside(model, loss_fn, optimizer, scaler, x, y):
    optimizer.zero_grad()
    logits = model(x)  # the review's finding 34: only the loss under autocast
    with torch.autocast(device_type=x.device.type, dtype=torch.float16):
        loss = loss_fn(logits, y)
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    return loss.item()


def step_bf16(model, loss_fn, optimizer, scaler, x, y):
    optimizer.zero_grad()
    with torch.autocast(device_type=x.device.type):  # the CPU default, bfloat16
        loss = loss_fn(model(x), y)
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    return loss.item()


def _step_returning(what):
    def step(model, loss_fn, optimizer, scaler, x, y):
        optimizer.zero_grad()
        with torch.autocast(device_type=x.device.type, dtype=torch.float16):
            loss = loss_fn(model(x), y)
        scaled = scaler.scale(loss)
        scaled.backward()
        scaler.step(optimizer)
        scaler.update()
        return {"tensor": loss, "scaled": scaled.item(), "none": None}[what]
    return step


def step_zero_at_end(model, loss_fn, optimizer, scaler, x, y):
    with torch.autocast(device_type=x.device.type, dtype=torch.float16):
        loss = loss_fn(model(x), y)
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad()
    return loss.item()


def step_alternative_style(model, loss_fn, optimizer, scaler, x, y):
    device = x.device
    optimizer.zero_grad(set_to_none=False)
    with torch.amp.autocast(device_type=device.type, dtype=torch.float16):
        logits = model(x)
        loss = loss_fn(logits, y)
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    return loss.item()


WRONG_STEPS = {
    "forward outside autocast": (step_forward_outside, "forward pass `model\\(x\\)` ran outside the autocast"),
    "bfloat16 instead of float16": (step_bf16, "computed in bfloat16: the task asks for float16"),
    "returns the loss tensor": (_step_returning("tensor"), "you returned a tensor"),
    "returns the scaled loss": (_step_returning("scaled"), "you returned the scaled loss"),
    "returns nothing": (_step_returning("none"), "return the loss as a Python float"),
    "zero_grad at the end": (step_zero_at_end, "clear the gradients at the \\*end\\* of the step"),
    "loss outside autocast": (step_loss_outside, "loss was computed outside the autocast region"),
    "step without update": (step_no_update, "without `scaler.update\\(\\)`"),
    "update before step": (step_update_first, "ran before `scaler.step"),
    "optimizer.step directly": (step_direct, "called `optimizer.step\\(\\)` yourself"),
    "backward on the unscaled loss": (step_unscaled_backward, "`scaler.scale\\(loss\\)` was never called"),
    "no zero_grad": (step_no_zero_grad, "forgot\\s+`optimizer.zero_grad\\(\\)`"),
}


def float32(value):
    return torch.tensor(value, dtype=torch.float32).item()


def update_right(scale, tracker, found_inf, growth_factor, backoff_factor, growth_interval):
    if found_inf:
        return float32(scale * backoff_factor), 0
    tracker += 1
    if tracker == growth_interval:
        grown = float32(scale * growth_factor)
        return (grown if math.isfinite(grown) else scale), 0
    return scale, tracker


def update_numpy_style(scale, tracker, found_inf, growth_factor, backoff_factor, growth_interval):
    """A correct alternative: numpy's float32 for the rounding, a comparison with float32's max for the guard."""
    top = float(np.finfo(np.float32).max)
    if found_inf:
        return float(np.float32(scale * backoff_factor)), 0
    if tracker + 1 < growth_interval:
        return scale, tracker + 1
    with np.errstate(over="ignore"):
        grown = float(np.float32(scale * growth_factor))
    return (scale if grown > top else grown), 0


def update_python_floats(scale, tracker, found_inf, g, b, n):
    """The rule right, but the scale kept as a Python float (float64): no float32 rounding, no inf guard needed."""
    if found_inf:
        return scale * b, 0
    tracker += 1
    return (scale * g, 0) if tracker == n else (scale, tracker)


def update_float32_maths(scale, tracker, found_inf, g, b, n):
    """Multiplies float32 by float32(factor): the factor is rounded before the product."""
    if found_inf:
        return float(np.float32(scale) * np.float32(b)), 0
    tracker += 1
    if tracker < n:
        return scale, tracker
    with np.errstate(over="ignore"):
        grown = float(np.float32(scale) * np.float32(g))
    return (grown if math.isfinite(grown) else scale), 0


def update_grows_into_inf(scale, tracker, found_inf, g, b, n):
    """Rounds to float32 but takes the grown scale even when it is inf."""
    if found_inf:
        return float32(scale * b), 0
    tracker += 1
    return (float32(scale * g), 0) if tracker == n else (scale, tracker)


def update_guard_keeps_tracker(scale, tracker, found_inf, g, b, n):
    """Refuses to grow into inf, but then forgets to reset the tracker."""
    if found_inf:
        return float32(scale * b), 0
    tracker += 1
    if tracker < n:
        return scale, tracker
    grown = float32(scale * g)
    return (grown, 0) if math.isfinite(grown) else (scale, tracker)


def update_every_step(scale, tracker, found_inf, g, b, n):
    return (scale * b, 0) if found_inf else (scale * g, tracker + 1)


def update_no_reset_after_growth(scale, tracker, found_inf, g, b, n):
    if found_inf:
        return scale * b, 0
    tracker += 1
    return (scale * g, tracker) if tracker == n else (scale, tracker)


def update_no_reset_on_inf(scale, tracker, found_inf, g, b, n):
    if found_inf:
        return scale * b, tracker
    return update_right(scale, tracker, found_inf, g, b, n)


def update_no_backoff(scale, tracker, found_inf, g, b, n):
    if found_inf:
        return scale, 0
    return update_right(scale, tracker, found_inf, g, b, n)


WRONG_UPDATES = {
    "grows every step": (update_every_step, "grew the scale after every step"),
    "tracker not reset after growth": (update_no_reset_after_growth, "after growing, reset"),
    "tracker not reset on inf": (update_no_reset_on_inf, "reset the growth tracker to 0 as well"),
    "no backoff": (update_no_backoff, "multiply the scale by backoff_factor"),
    "returns the scale only": (lambda s, t, f, g, b, n: s, "return a tuple"),
    "scale kept as a Python float (no float32 rounding)": (update_python_floats, "stored as 3.299999952316284"),
    "float32 arithmetic (factor rounded first)": (update_float32_maths, "you multiplied in float32"),
    "grows into inf": (update_grows_into_inf, "never grows its scale into inf"),
    "tracker kept when growth is refused": (update_guard_keeps_tracker, "the tracker still goes back to 0"),
}


def test_update_scale_cases_teach_what_the_task_says():
    # The task text: 3.0 × 1.1 becomes the float32 nearest to 3.3, not Python's 3.0 * 1.1; 2**127 never grows to inf.
    gentle = next(p for p in lesson04.PATTERNS if p[2] == 1.1)
    assert lesson04.torch_updates(*gentle[1:])[0] == (3.299999952316284, 0) != (3.0 * 1.1, 0)
    assert float32(3.0 * 1.1) == 3.299999952316284
    top = next(p for p in lesson04.PATTERNS if p[5] == 2.0**126)
    scales = [scale for scale, _ in lesson04.torch_updates(*top[1:])]
    assert scales[:2] == [2.0**127, 2.0**127] and all(math.isfinite(s) for s in scales)


def test_python_float_scaler_fails_only_where_float32_shows(capsys):
    # Without the two details a scaler passes the power-of-two patterns and fails first on the 1.1 one.
    with pytest.raises(CheckFailed, match="a gentle growth factor 1.1"):
        lesson04.update_scale(update_python_floats)


def test_right_answers_pass(capsys):
    lesson03.predict_dtypes(lambda: dict(RIGHT_DTYPES))
    lesson03.fp32_island(island_right)
    lesson04.amp_step(step_right)
    lesson04.update_scale(update_right)
    lesson04.amp_step(step_alternative_style)  # torch.amp.autocast, set_to_none=False, device.type, float(loss)
    lesson04.update_scale(update_numpy_style)  # numpy's float32 and a comparison with float32's max
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 6 and all(line.startswith("✓ Task") for line in lines)


CASES = (
    [pytest.param(lesson03.predict_dtypes, fn, w, id=f"predict_dtypes: {n}") for n, (fn, w) in WRONG_DTYPES.items()]
    + [pytest.param(lesson03.fp32_island, fn, w, id=f"fp32_island: {n}") for n, (fn, w) in WRONG_ISLANDS.items()]
    + [pytest.param(lesson04.amp_step, fn, w, id=f"amp_step: {n}") for n, (fn, w) in WRONG_STEPS.items()]
    + [pytest.param(lesson04.update_scale, fn, w, id=f"update_scale: {n}") for n, (fn, w) in WRONG_UPDATES.items()]
)


@pytest.mark.filterwarnings("ignore::FutureWarning")
@pytest.mark.parametrize(("check", "fn", "words"), CASES)
def test_typical_mistakes_are_named(check, fn, words):
    try:
        with pytest.raises(CheckFailed, match=words):
            check(fn)
    finally:
        torch.set_autocast_enabled("cpu", False)  # a fixture above switches it off for good; leave a clean state


@pytest.mark.parametrize("check", [lesson03.predict_dtypes, lesson03.fp32_island, lesson04.amp_step,
                                   lesson04.update_scale])
def test_stubs_are_not_started(check):
    def stub(*args):
        raise NotImplementedError("hint")

    with pytest.raises(NotStarted):
        check(stub)


def test_the_observed_dtypes_are_what_the_fixture_says():
    assert lesson03.observed_dtypes() == RIGHT_DTYPES


# --- Task 3 of exercise 03: predict_cuda_dtypes -------------------------------------------------------------------
CUDA_RIGHT = {"linear": torch.float16, "relu": torch.float16, "softmax": torch.float32, "layer_norm": torch.float32,
              "sum": torch.float32, "exp": torch.float32, "mse_loss": torch.float32}

CUDA_MISTAKES = {
    "the CPU's lists": ({**CUDA_RIGHT, "softmax": torch.float16, "sum": torch.float16, "exp": torch.float16},
                        "on CUDA's FP32 list \\(on the CPU it is not"),
    "everything float16": ({k: torch.float16 for k in CUDA_RIGHT}, "4 of 7 wrong|5 of 7 wrong"),
    "relu in float32": ({**CUDA_RIGHT, "relu": torch.float32}, "on no CUDA list, so it follows its float16 input"),
    "a missing key": ({k: v for k, v in CUDA_RIGHT.items() if k != "exp"}, "exactly the keys"),
}


# --- Task 3 of exercise 04: skipped_steps -------------------------------------------------------------------------
def skipped_right(initial, scales):
    before = [initial, *scales[:-1]]
    return [i for i, (b, a) in enumerate(zip(before, scales, strict=True)) if a < b]


SKIP_MISTAKES = {
    "any change is a skip": (lambda i, s: [k for k, (b, a) in enumerate(zip([i, *s[:-1]], s, strict=True)) if a != b],
                             "a \\*growth\\* also changes the scale"),
    "off by one": (lambda i, s: [k for k in range(1, len(s)) if s[k] < s[k - 1]] and
                   [k - 1 for k in range(1, len(s)) if s[k] < s[k - 1]], "off by one"),
    "step 0 never judged": (lambda i, s: [k for k in range(1, len(s)) if s[k] < s[k - 1]],
                            "step 0 can be skipped too|off by one"),
    "a count": (lambda i, s: len(skipped_right(i, s)), "you returned a count"),
}


def test_new_tasks_right_answers_pass(capsys):
    lesson03.predict_cuda_dtypes(lambda: dict(CUDA_RIGHT))
    lesson04.skipped_steps(skipped_right)
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 2 and all(line.startswith("✓ Task 3") for line in lines)


@pytest.mark.parametrize(("answer", "words"), CUDA_MISTAKES.values(), ids=CUDA_MISTAKES)
def test_predict_cuda_dtypes_mistakes_are_named(answer, words):
    with pytest.raises(CheckFailed, match=words):
        lesson03.predict_cuda_dtypes(lambda: dict(answer))


@pytest.mark.parametrize(("fn", "words"), SKIP_MISTAKES.values(), ids=SKIP_MISTAKES)
def test_skipped_steps_mistakes_are_named(fn, words):
    with pytest.raises(CheckFailed, match=words):
        lesson04.skipped_steps(fn)


# --- Task 4 of exercise 04: unscale_by_hand -------------------------------------------------------------------------
def unscale_right(grads, scale):
    inv = torch.tensor(scale, dtype=torch.float64).reciprocal().float()
    return [g * inv for g in grads], not all(torch.isfinite(g).all() for g in grads)


UNSCALE_MISTAKES = {
    "divides by the scale": (lambda g, s: ([t / s for t in g], not all(torch.isfinite(t).all() for t in g)),
                             "you divided by the scale"),
    "inf only, NaN missed": (lambda g, s: (unscale_right(g, s)[0], any(torch.isinf(t).any().item() for t in g)),
                             "A NaN is as fatal as an inf"),
    "not unscaled": (lambda g, s: (list(g), not all(torch.isfinite(t).all() for t in g)), "came back unchanged"),
    "found_inf as a tensor of several values": (lambda g, s: (unscale_right(g, s)[0], torch.zeros(2)),
                                                "found_inf must be a bool"),
    "only the gradients": (lambda g, s: unscale_right(g, s)[0], "return a tuple"),
}


def test_unscale_by_hand_right_answer_passes(capsys):
    lesson04.unscale_by_hand(unscale_right)
    assert capsys.readouterr().out.startswith("✓ Task 4")


@pytest.mark.parametrize(("fn", "words"), UNSCALE_MISTAKES.values(), ids=UNSCALE_MISTAKES)
def test_unscale_by_hand_mistakes_are_named(fn, words):
    with pytest.raises(CheckFailed, match=words):
        lesson04.unscale_by_hand(fn)
