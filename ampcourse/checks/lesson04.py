"""Checks for exercise 04 (GradScaler): a complete AMP training step; a dynamic loss scaler by hand.

The AMP step is observed with spies: a ``GradScaler`` subclass and an optimizer wrapper record the
order of the calls and the size of the gradients at each point, a forward hook on the model's first
layer records whether autocast was on and in which dtype the layer computed, and the loss function
records whether autocast was on when it ran. Nothing reads the learner's source text.
"""

from __future__ import annotations

import copy
import math
import numbers
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F

from ..device import pick_device
from ..scaler_sim import simulate_grad_scaler
from . import (
    CheckFailed,
    answer_of,
    call,
    compare_now,
    exact_number,
    fail,
    hints,
    passed,
    real_number,
    require_callable,
)
from .spies import SpyOptimizer, SpyScaler

SCALE = 2.0**10  # the spy scaler's scale: no overflow in these steps, growth only after 1000


def _setup(device):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Tanh(), torch.nn.Linear(8, 3)).to(device)
    log: list[str] = []
    optimizer = SpyOptimizer(model.parameters(), log, lr=0.1)
    scaler = SpyScaler(log, device.type, init_scale=SCALE, growth_interval=1000)
    # A used scaler: 999 clean steps behind it, so this step's update() grows the scale (to 2 × SCALE).
    scaler.load_state_dict({"scale": SCALE, "growth_factor": 2.0, "backoff_factor": 0.5, "growth_interval": 1000,
                            "_growth_tracker": 999})
    autocast_seen: list[bool] = []
    backward_seen: list[bool] = []  # autocast on when backward reached the loss? (the caller's autocast state)

    def loss_fn(logits, target):
        autocast_seen.append(torch.is_autocast_enabled(device.type))
        loss = F.cross_entropy(logits, target)
        if loss.requires_grad:
            def seen(grad):
                backward_seen.append(torch.is_autocast_enabled(device.type))
                log.append("backward")  # where backward ran among the scaler and optimizer calls

            loss.register_hook(seen)
        return loss

    forward_seen: list[tuple[int, bool, torch.dtype]] = []  # (layer index, autocast on?, its output dtype)
    for index in (0, 2):  # every Linear: a forward that leaves any layer outside autocast is seen
        model[index].register_forward_hook(
            lambda module, inputs, output, index=index: forward_seen.append(
                (index, torch.is_autocast_enabled(device.type), output.dtype)))
    x = torch.randn(6, 8, device=device)
    y = torch.randint(0, 3, (6,), device=device)
    return model, optimizer, scaler, loss_fn, x, y, log, autocast_seen, forward_seen, backward_seen


def _true_grads(model, x, y):
    model.zero_grad(set_to_none=True)
    F.cross_entropy(model(x), y).backward()
    grads = [p.grad.detach().clone() for p in model.parameters()]
    model.zero_grad(set_to_none=True)
    return grads


@dataclass
class _Run:
    """One observed call of the learner's ``amp_step``: the spies of :func:`_setup` and what the call did."""

    model: torch.nn.Module
    optimizer: SpyOptimizer
    scaler: SpyScaler
    loss_fn: Any
    x: torch.Tensor
    y: torch.Tensor
    log: list[str]
    autocast_seen: list[bool]
    forward_seen: list[tuple[int, bool, torch.dtype]]
    backward_seen: list[bool]
    initial: torch.nn.Module | None = None  # the weights before the step (the FP32 reference starts there)
    returned: Any = None
    order: list[str] = field(default_factory=list)  # the scaler and optimizer calls, zero_grad and backward left out
    after_backward: dict[int, list[torch.Tensor]] = field(default_factory=dict)  # each parameter's .grad right after
    # each backward accumulated it (review rev25-r4 M1: clipping before unscale_ changes them before unscale_ sees)


def _calls(log: list[str]) -> list[str]:
    """The scaler and optimizer calls of a log, without zero_grad and backward."""
    return [e for e in log if e not in ("zero_grad", "backward")]


def _cleared_after_backward(log: list[str]) -> bool:
    """optimizer.zero_grad() ran after the (last) backward and before scaler.step (or with no step after it)."""
    if "backward" not in log:
        return False
    after = log[len(log) - 1 - log[::-1].index("backward"):]
    end = after.index("scaler.step") if "scaler.step" in after else len(after)
    return "zero_grad" in after[:end]


SHRUNK = ("the optimizer stepped with smaller gradients than backward produced (and not smaller by the scale): did "
          "you clip or rescale them? This task's step is scale(loss).backward() → scaler.step(optimizer), which "
          "unscales → scaler.update(), nothing else: clipping that changes the gradients is lesson 05's, "
          "leave it out here.")
CLIPPED_SCALED = ("you changed the gradients between backward and `scaler.step` while they were still multiplied by "
                  "the scale (clipping before `scaler.unscale_(optimizer)`?): a max_norm then cuts the scaled "
                  "gradients, and the step gets them far too small. Unscale first, then clip: "
                  "`scaler.unscale_(optimizer)` → `clip_grad_norm_` (lesson 05); this task's step does not clip.")
CLEARED = ("you called `optimizer.zero_grad()` between backward and `scaler.step(optimizer)`, so the gradients "
           "backward had just computed were cleared before the step could use them. Clear them at the *start* of "
           "the step, before the forward pass.")


def _first_call(task: str, fn, device: torch.device) -> tuple[_Run, float]:
    """Run the step once on fresh spies; a call torch refused is explained by the call order that caused it."""
    run = _Run(*_setup(device))
    run.initial = copy.deepcopy(run.model)
    for layer in run.initial:
        layer._forward_hooks.clear()
    for index, parameter in enumerate(run.model.parameters()):
        parameter.register_post_accumulate_grad_hook(
            lambda p, index=index: run.after_backward.setdefault(index, []).append(p.grad.detach().clone()))
    scale_at_call = run.scaler.get_scale()
    try:
        run.returned = call(task, fn, "amp_step", run.model, run.loss_fn, run.optimizer, run.scaler, run.x, run.y)
    except CheckFailed as err:
        calls = _calls(run.log)
        no_grads = "found no gradients to check" in str(err)  # torch's step(): no parameter had a .grad
        if no_grads and _cleared_after_backward(run.log):
            raise fail(task, CLEARED) from None
        if no_grads and run.backward_seen and not any(p.grad is not None for p in run.model.parameters()):
            raise fail(task, "backward ran, but when `scaler.step(optimizer)` ran no parameter of the model had a "
                             "gradient: the gradients were cleared (`model.zero_grad()`, or `.grad = None`) between "
                             "backward and step, or the loss came from another model. Clear them at the *start* of "
                             "the step, and compute the loss from `model(x)`.") from None
        if "optimizer.step (direct)" in calls:
            raise fail(task, "you called `optimizer.step()` yourself, so the scaler recorded no inf check and torch "
                             "refused the `scaler.update()` after it. Call `scaler.step(optimizer)`: it unscales the "
                             "gradients and skips the step when they contain inf/NaN.") from None
        if "scale" not in calls and "scaler.step" in calls:
            raise fail(task, "`scaler.scale(loss)` was never called, so torch's `scaler.step` refused to run: "
                             "backward must run on the scaled loss, `scaler.scale(loss).backward()`.") from None
        if "update" in calls and ("scaler.step" not in calls or calls.index("update") < calls.index("scaler.step")):
            raise fail(task, "`scaler.update()` ran before `scaler.step(optimizer)` (torch refuses: no inf "
                             "check recorded yet). The order is scale(loss).backward() → step(optimizer) → "
                             "update().") from None
        raise
    run.order = _calls(run.log)
    return run, scale_at_call


def _forward_under_autocast(task: str, run: _Run) -> None:
    """The forward pass and the loss ran, inside one float16 autocast region; backward ran outside it."""
    order, forward_seen = run.order, run.forward_seen
    if not forward_seen:
        raise fail(task, "the model's forward pass never ran: compute `loss = loss_fn(model(x), y)`.")
    if not run.autocast_seen:
        raise fail(task, "loss_fn was never called: compute `loss = loss_fn(model(x), y)`.")
    if "scale" not in order and "scaler.step" not in order and "update" not in order:
        raise fail(task, "the scaler you were given was never used (none of scale, step, update was called on it): "
                         "a GradScaler made inside the step starts from init_scale every time and never learns the "
                         "scale. Use the `scaler` argument.")
    outside = sorted({i for i, on, _ in forward_seen if not on})
    if outside == [0, 2]:
        raise fail(task, "the forward pass `model(x)` ran outside the autocast region, so it computed in float32. "
                         "Run the forward pass *and* the loss inside `with torch.autocast(...)`.")
    if outside:
        raise fail(task, f"layer model[{outside[0]}] ran outside the autocast region (the other Linear ran inside): "
                         "part of the forward pass computed in float32. Run the whole forward pass `model(x)` *and* "
                         "the loss inside one `with torch.autocast(...)`.")
    if (low := next((dt for _, _, dt in forward_seen if dt != torch.float16), None)) is not None:
        got = str(low).removeprefix("torch.")
        raise fail(task, f"autocast ran, but the Linear layers computed in {got}: the task asks for float16. Pass "
                         "`dtype=torch.float16` to torch.autocast (the CPU's default is bfloat16).")
    if not run.autocast_seen[0]:
        raise fail(task, "the loss was computed outside the autocast region. PyTorch's recipe puts the forward "
                         "pass *and* the loss inside `with torch.autocast(...)`, and only `backward()` outside.")
    if any(run.backward_seen):
        raise fail(task, "you called backward() inside the autocast region. The autograd engine runs the backward "
                         "ops under the autocast state of the caller, so backward ops on autocast's lists are "
                         "recast (lesson 03's linalg.inv example). Leave the `with` block first: "
                         "`scaler.scale(loss).backward()` goes after it.")


def _scaler_calls(task: str, run: _Run) -> None:
    """scaler.step (not optimizer.step) then scaler.update, once each, on the scaler given (its scale grew)."""
    order, scaler = run.order, run.scaler
    if "optimizer.step (direct)" in order:
        raise fail(task, "you called `optimizer.step()` yourself. Call `scaler.step(optimizer)`: it unscales the "
                         "gradients and skips the step when they contain inf/NaN.")
    if "scaler.step" not in order:
        raise fail(task, "`scaler.step(optimizer)` was never called, so the weights never change.")
    if "update" not in order:
        raise fail(task, "you called `scaler.step` without `scaler.update()`: the scale never adapts (and the "
                         "scaler's per-step state is not reset). Call `scaler.update()` after `scaler.step`.")
    if order.index("update") < order.index("scaler.step"):
        raise fail(task, "`scaler.update()` ran before `scaler.step(optimizer)`: update uses the inf check that "
                         "step records. The order is scale(loss).backward() → step(optimizer) → update().")
    if order.count("update") != 1 or order.count("scaler.step") != 1:
        raise fail(task, f"one step should call scaler.step and scaler.update once each; the calls were {order}.")
    if scaler.get_scale() != 2 * SCALE:
        raise fail(task, f"the scaler came with 999 clean steps behind it, so this step's update() should grow its "
                         f"scale to {2 * SCALE:g}; it is {scaler.get_scale():g}. Call `scaler.update()` with no "
                         "argument, and do not replace or reset the scaler you were given.")


def _unscaled_update(task: str, run: _Run) -> None:
    """The optimizer stepped with unscaled gradients, and the parameters moved."""
    true = _true_grads(run.initial, run.x, run.y)
    seen = run.optimizer.grads_at_step[0]
    ratio = max((g.abs().max() / t.abs().max()).item() for g, t in zip(seen, true, strict=True) if t.abs().max() > 0)
    if ratio > SCALE / 4:
        raise fail(task, "the optimizer stepped with gradients still multiplied by the scale. Let "
                         "`scaler.step(optimizer)` unscale them (do not call backward on a loss you scaled by hand).")
    found = run.scaler.grads_at_unscale[0] if getattr(run.scaler, "grads_at_unscale", None) else None
    # What unscale_ found: ×scale when backward ran on the scaled loss, ×1 when not (then step saw them / scale).
    at_unscale = max((g.abs().max() / t.abs().max()).item() for g, t in zip(found, true, strict=False)
                     if t.abs().max() > 0) if found and len(found) == len(true) else None
    unscaled = at_unscale < 4 if at_unscale is not None else 0.5 / SCALE < ratio < 2 / SCALE
    backward = [run.after_backward[i][0] for i in range(len(true)) if run.after_backward.get(i)]
    at_backward = max((g.abs().max() / t.abs().max()).item() for g, t in zip(backward, true, strict=True)
                      if t.abs().max() > 0) if len(backward) == len(true) else None
    if 0 < ratio < 0.9 and at_backward is not None and at_backward > SCALE / 4 and unscaled:
        raise fail(task, CLIPPED_SCALED)  # backward made ×scale gradients; something shrank them before unscale_
    if 0 < ratio < 0.9 and unscaled:  # seen = true / scale: unscale_ divided gradients never scaled
        raise fail(task, "the optimizer stepped with gradients too small by the scale (×1/scale): backward ran "
                         "on the unscaled loss (the result of `scaler.scale(loss)` was not used), and `scaler.step` "
                         "then divided them by the scale. Call `scaler.scale(loss).backward()`.")
    if _cleared_after_backward(run.log):
        raise fail(task, CLEARED)  # zero_grad(set_to_none=False): the step ran, on gradients of zero
    if 0 < ratio < 0.9:  # smaller than backward's, but not by the scale: clipped or rescaled (review rev25-r3 M1)
        raise fail(task, SHRUNK)
    if all(torch.equal(a, b.detach()) for a, b in zip(run.initial.parameters(), run.model.parameters(), strict=True)):
        raise fail(task, "the parameters did not change: make sure `scaler.step(optimizer)` runs after backward.")


def _fresh_gradients(task: str, fn, run: _Run) -> None:
    """A second step: the gradients must be fresh (zero_grad), not added to what .grad held before.

    Left-over gradients are divided by the scale at unscale_, which hides them; a large stale value does not hide.
    """
    model, scaler, optimizer = run.model, run.scaler, run.optimizer
    zeroed_at_end = run.log and run.log[-1] == "zero_grad"
    second = _true_grads(copy.deepcopy(model), run.x, run.y)
    for p in model.parameters():
        p.grad = torch.full_like(p, 100.0 * scaler.get_scale())
    call(task, fn, "amp_step", model, run.loss_fn, optimizer, scaler, run.x, run.y)
    seen = optimizer.grads_at_step[-1]
    if any((g - t).abs().max().item() > 0.05 * t.abs().max().item() + 1e-4
           for g, t in zip(seen, second, strict=True)):
        if zeroed_at_end:
            raise fail(task, "you clear the gradients at the *end* of the step, so gradients already in `.grad` when "
                             "the step starts (the check planted some) are added to this step's. The task clears "
                             "them first: move `optimizer.zero_grad()` to the start of the step.")
        planted = any(((g - t) - 100.0).abs().max().item() < 1.0 for g, t in zip(seen, second, strict=True))
        ratio = max((g.abs().max() / t.abs().max()).item() for g, t in zip(seen, second, strict=True)
                    if t.abs().max() > 0)
        if not planted and 0 < ratio < 0.9:
            raise fail(task, SHRUNK)
        if not planted:
            raise fail(task, "in the second call the optimizer stepped with gradients other than this step's "
                             "backward produced: the step is zero_grad → forward and loss under autocast → "
                             "scaler.scale(loss).backward() → scaler.step(optimizer) → scaler.update(), nothing else.")
        raise fail(task, "in the second call the gradients were the sum of two steps: you forgot "
                         "`optimizer.zero_grad()` (set_to_none=True is the default) at the start of the step.")


def _returned_loss(task: str, run: _Run, device: torch.device, scale_at_call: float) -> None:
    """The first call returned this step's unscaled loss as a Python float."""
    returned = run.returned
    with torch.no_grad(), torch.autocast(device_type=device.type, dtype=torch.float16):
        want_loss = F.cross_entropy(run.initial(run.x), run.y).item()
    if isinstance(returned, torch.Tensor):
        raise fail(task, "you returned a tensor; return the loss as a Python float, `loss.item()` (a tensor would "
                         "keep the whole autograd graph alive in a training loop).")
    if exact_number(returned) is None:
        raise fail(task, f"return the loss as a Python float (you returned {type(returned).__name__}).")
    returned = exact_number(returned)  # float's own arithmetic, never the answer's type's
    if abs(returned - want_loss * scale_at_call) < 1e-2 * want_loss * scale_at_call:
        raise fail(task, f"you returned the scaled loss ({returned:.4g} = loss × {scale_at_call:g}); return "
                         "the loss itself, before `scaler.scale`.")
    if abs(returned - want_loss) > 1e-2 * max(1.0, abs(want_loss)):
        raise fail(task, f"you returned {returned:.4g}, but the step's loss was {want_loss:.4g}: return the loss "
                         "of this step's forward pass.")


def amp_step(fn) -> None:
    """Task 1: ``amp_step(model, loss_fn, optimizer, scaler, x, y)`` does one full AMP training step."""
    task = "Task 1 (amp_step)"
    require_callable(task, fn, "amp_step")
    device = pick_device()
    run, scale_at_call = _first_call(task, fn, device)
    _forward_under_autocast(task, run)
    _scaler_calls(task, run)
    _unscaled_update(task, run)
    _fresh_gradients(task, fn, run)
    _returned_loss(task, run, device, scale_at_call)
    passed(task, "forward and loss under float16 autocast, scale → backward → scaler.step → update in that order, "
                 "gradients unscaled before the step and fresh on every call, the loss returned as a float.")


# --- Task 2: a dynamic loss scaler ----------------------------------------------------------------------

# (what, found_inf per step, growth_factor, backoff_factor, growth_interval, init_scale): tuples all through, so
# that nothing the check judges by can be changed in place while the answer runs (review rev25-r7 E1)
PATTERNS = tuple((what, tuple(found), *rest) for what, found, *rest in [
    ("no overflow for 10 steps", [False] * 10, 2.0, 0.5, 3, 1024.0),
    ("an overflow in the middle", [False, False, True, False, False, False, False], 2.0, 0.5, 3, 1024.0),
    ("overflow just before growth", [False, False, True, False, False, False, False, False], 2.0, 0.5, 3, 1024.0),
    ("two overflows in a row", [True, True, False, False, False, False], 4.0, 0.25, 2, 1024.0),
    ("growth every step", [False, False, True, False, False], 2.0, 0.5, 1, 1024.0),
    # float32 rounding: 3.0 × 1.1 is stored as the float32 nearest to 3.3 (a power-of-two factor hides it)
    ("a gentle growth factor 1.1 from scale 3", [False, False, False, True, False, False], 1.1, 0.5, 1, 3.0),
    # the inf guard: 2**127 × 2 is inf in float32 (a finite 3.4e38 as a Python float); GradScaler keeps 2**127
    ("a scale near float32's largest value", [False, False, True, False, False], 2.0, 0.5, 1, 2.0**126),
    # float32 rounding of a back-off: 3.0 × 0.3 is 0.8999999999999999 in float64, 0.8999999761581421 in float32
    ("a backoff factor 0.3 from scale 3", [True, False, False, True, True], 2.0, 0.3, 2, 3.0),
    # growth_interval 3 reached exactly at the last step, a factor that is no power of two both ways
    ("factors 1.25 and 0.75, growth at the last step", [False, True, False, False, False], 1.25, 0.75, 3, 1000.0),
])


def _float32(value: float) -> float:
    """``value`` rounded to float32 (inf beyond float32's range), as a Python float."""
    return torch.tensor(value, dtype=torch.float64).float().item()


def torch_updates(found_inf, growth_factor, backoff_factor, growth_interval, init_scale):
    """``(scale, tracker)`` after each ``update()`` of a real ``torch.amp.GradScaler`` (CPU), step i overflowing
    iff ``found_inf[i]``: a one-parameter model whose loss is multiplied by inf on an overflowing step."""
    param = torch.zeros(1, requires_grad=True)
    optimizer = torch.optim.SGD([param], lr=2.0**-10)
    scaler = torch.amp.GradScaler("cpu", init_scale=init_scale, growth_factor=growth_factor,
                                  backoff_factor=backoff_factor, growth_interval=growth_interval)
    out = []
    for overflow in found_inf:
        optimizer.zero_grad()
        scaler.scale(param.sum() * (math.inf if overflow else 1.0)).backward()
        scaler.step(optimizer)
        scaler.update()
        out.append((scaler.get_scale(), scaler.state_dict()["_growth_tracker"]))
    return out


# What a real torch.amp.GradScaler gives for each of PATTERNS, step by step, as literals: the check never runs torch
# code the answer could reach to get its reference (review rev25-r5 W1). tests/test_checks_lessons03_04.py
# recomputes them with torch_updates (a real GradScaler) and asserts they are equal.
TORCH_UPDATES = (
    ((1024.0, 1), (1024.0, 2), (2048.0, 0), (2048.0, 1), (2048.0, 2), (4096.0, 0), (4096.0, 1), (4096.0, 2),
     (8192.0, 0), (8192.0, 1)),
    ((1024.0, 1), (1024.0, 2), (512.0, 0), (512.0, 1), (512.0, 2), (1024.0, 0), (1024.0, 1)),
    ((1024.0, 1), (1024.0, 2), (512.0, 0), (512.0, 1), (512.0, 2), (1024.0, 0), (1024.0, 1), (1024.0, 2)),
    ((256.0, 0), (64.0, 0), (64.0, 1), (256.0, 0), (256.0, 1), (1024.0, 0)),
    ((2048.0, 0), (4096.0, 0), (2048.0, 0), (4096.0, 0), (8192.0, 0)),
    ((3.299999952316284, 0), (3.629999876022339, 0), (3.992999792098999, 0), (1.9964998960494995, 0),
     (2.1961498260498047, 0), (2.415764808654785, 0)),
    ((1.7014118346046923e+38, 0), (1.7014118346046923e+38, 0), (8.507059173023462e+37, 0),
     (1.7014118346046923e+38, 0), (1.7014118346046923e+38, 0)),
    ((0.8999999761581421, 0), (0.8999999761581421, 1), (1.7999999523162842, 0), (0.5399999618530273, 0),
     (0.16199998557567596, 0)),
    ((1000.0, 1), (750.0, 0), (750.0, 1), (750.0, 2), (937.5, 0)),
)


def _wrong_updates(scale, tracker, found_inf, g, b, n):
    """What typical wrong update rules give, with the message naming each (the first match is reported)."""
    out = []
    if not found_inf:
        grown64, grown32 = scale * g, _float32(scale * g)
        if tracker + 1 >= n:
            if math.isinf(grown32):
                out.append(((grown32, 0), f"{scale:g} × {g:g} is inf in float32, and GradScaler never grows its "
                                          "scale into inf: when the grown scale rounds to inf, it keeps the old "
                                          "scale (and the tracker still goes back to 0)."))
                out.append(((grown64, 0), f"you returned {grown64:g}, a finite Python float, but GradScaler's scale "
                                          "is a float32 tensor, where it is inf (float32 ends near 3.4e38). "
                                          "GradScaler never grows into inf: it keeps the old scale. Round the "
                                          "product to float32 and keep the old scale when that is inf."))
                out.append(((scale, tracker + 1), "when GradScaler refuses to grow (the grown scale would be inf), "
                                                  "the tracker still goes back to 0."))
            elif grown64 != grown32:
                out.append(((grown64, 0), f"GradScaler keeps its scale in a float32 tensor: {scale!r} × {g:g} is "
                                          f"stored as {grown32!r}, the nearest float32, not {grown64!r}. Round "
                                          "each new scale to float32 (the product itself is computed in float64)."))
                float32_maths = _float32(_float32(scale) * _float32(g))
                if float32_maths != grown32:
                    out.append(((float32_maths, 0), f"you multiplied in float32 (the factor {g:g} rounded to float32 "
                                                    f"first), giving {float32_maths!r}; GradScaler multiplies in "
                                                    f"float64 and rounds the product once: {grown32!r}."))
            out.append(((grown64, tracker + 1), "after growing, reset the growth tracker to 0."))
        out.append(((grown64, tracker + 1), "you grew the scale after every step. Grow only when the tracker "
                                            "of consecutive finite steps reaches growth_interval."))
        out.append(((scale, tracker), "on a finite step, add 1 to the growth tracker."))
    else:
        if scale * b != _float32(scale * b):
            out.append(((scale * b, 0), f"GradScaler keeps its scale in a float32 tensor: round the backed-off "
                                        f"scale to float32 ({_float32(scale * b)!r}, not {scale * b!r})."))
        if tracker != 0:
            for backed_off in (scale * b, _float32(scale * b)):
                out.append(((backed_off, tracker), "on an overflow, reset the growth tracker to 0 as well as "
                                                   "backing off."))
        out.append(((scale, 0), "on an overflow, multiply the scale by backoff_factor."))
        out.append(((scale * b, 1), "on an overflow the tracker goes back to 0, not 1."))
    return out


def _number(value):
    """``value`` as a Python number: an exact int/float or numpy scalar (``exact_number``), or a one-element plain
    ``torch.Tensor``'s item, read through the class (``torch.Tensor.item(t)``: an ``item`` set on the tensor itself
    never runs; ``checks.plain`` refuses such a tensor anyway, review rev25-r6 E3); None otherwise."""
    if type(value) is torch.Tensor and torch.Tensor.numel(value) == 1:
        return exact_number(torch.Tensor.item(value))
    return real_number(value)  # an honest Fraction or Decimal by its value (review rev25-r7 M1)


def _not_a_pair(got) -> str:
    """What is wrong with a returned value that is not a pair of numbers (review rev25-r7 M1: name the part)."""
    if type(got) is tuple and len(got) == 2:
        for part, value in zip(("scale", "tracker"), got, strict=True):
            if _number(value) is None:
                want = "float" if part == "scale" else "int"
                return (f"the new {part} you returned is {value!r}, a {type(value).__name__}: return it as a Python "
                        f"{want} (`{want}(...)`).")
    return f"return a tuple (new_scale, new_tracker) of two numbers; you returned {type(got).__name__} {got!r}."


def _read_pair(got):
    """``(pair, problem, shape problem)`` of what ``update_scale`` returned, read right after its call (the check's
    ``checks.answer_of`` keeps only these frozen numbers and words: review rev25-r7 E1)."""
    pair, problem = _as_pair(got)
    return pair, problem, (_not_a_pair(got) if pair is None and problem is None else None)


def _as_pair(got):
    """``((float(scale), int(tracker)), None)`` of a returned 2-tuple of plain numbers (``checks.plain`` has made a
    namedtuple a tuple), else ``(None, what is wrong)``: a tracker with a fraction is refused, never truncated
    (review rev25-r6 W1: ``int(1.5)`` is 1)."""
    if type(got) is not tuple or len(got) != 2:
        return None, None
    scale, tracker = _number(got[0]), _number(got[1])
    if scale is None or tracker is None:
        return None, None
    if type(tracker) is float and not tracker.is_integer():
        return None, (f"the growth tracker counts steps, a whole number: you returned {tracker!r}; return it as an "
                      "int.")
    try:
        return (float(scale), int(tracker)), None
    except (TypeError, ValueError, OverflowError):  # inf or NaN tracker
        return None, None


def update_scale(fn) -> None:
    """Task 2: ``update_scale(scale, tracker, found_inf, growth_factor, backoff_factor, growth_interval)``.

    Every pattern is compared, step by step, with a real ``torch.amp.GradScaler``: a growth factor of 1.1 shows
    the float32 rounding of the scale, a scale near float32's largest value shows that it never grows into inf.
    """
    task = "Task 2 (update_scale)"
    require_callable(task, fn, "update_scale")
    # Every step of every pattern is called first (each from the answer's own previous result) and judged afterwards
    # against torch (review rev25-r4 W1: no expected value exists while the answer runs, as in lesson 00). What each
    # call gave is kept frozen, in tuples built by rebinding, and read into numbers right after the call
    # (checks.answer_of, _as_pair): the answer's function can reach every list the check holds (review rev25-r7 E1).
    runs: tuple = ()
    for _, found, g, b, n, init in PATTERNS:
        scale, tracker, answers = init, 0, ()
        for inf in found:
            # plain numbers now, in the call pass (review rev25-r5 E1)
            read, error = answer_of(task, fn, "update_scale", (scale, tracker, inf, g, b, n), _read_pair)
            answers = (*answers, (scale, tracker, read, error))
            if error is not None:
                break
            pair = read[0]
            if pair is None:
                break
            scale, tracker = pair
        runs = (*runs, answers)
    compare_now()  # the call pass ends: a swap meant to undo itself while the check judges is seen now (rev25-r8 E1)
    steps = 0
    for (what, found, g, b, n, _init), answers, wants in zip(PATTERNS, runs, TORCH_UPDATES, strict=True):
        for i, (inf, want, (scale, tracker, answer, error)) in enumerate(
                zip(found, wants, answers, strict=False)):
            if error is not None:
                raise error
            pair, problem, shape = answer
            if problem is not None:
                raise fail(task, f"from scale {scale!r}, tracker {tracker}, found_inf={inf}: {problem}")
            if pair is None:
                raise fail(task, shape)
            if pair != want:
                context = (f"pattern '{what}' (growth_factor={g}, backoff_factor={b}, growth_interval={n}), step {i}: "
                           f"from scale {scale!r}, tracker {tracker}, found_inf={inf} you returned "
                           f"({pair[0]!r}, {pair[1]}), torch.amp.GradScaler gives {want}")
                for wrong, message in _wrong_updates(scale, tracker, inf, g, b, n):
                    if pair == wrong:
                        raise fail(task, f"{context}: {message}")
                raise fail(task, f"{context}. The rule: on inf, scale × backoff_factor and tracker 0; otherwise "
                                 "tracker + 1, and when it reaches growth_interval, scale × growth_factor and tracker "
                                 "0 — each new scale rounded to float32, and never grown into inf.")
            steps += 1
    passed(task, f"your scaler matches torch.amp.GradScaler on {steps} steps of {len(PATTERNS)} overflow patterns, "
                 "float32 rounding of a 1.1 growth factor and a 0.3 back-off, and the refusal to grow into inf "
                 "included.")

# --- Task 3: read a scale log ------------------------------------------------------------------------------------

def _scale_logs() -> list[tuple[str, float, list[float], list[int]]]:
    """(what, initial scale, scale after each update, the skipped steps), from torch-exact simulations."""
    logs = []
    for what, found, g, b, n, init in [
        ("a healthy run", [False] * 5 + [True] + [False] * 6 + [True, False], 2.0, 0.5, 3, 1024.0),
        ("an overflow right after a growth", [False, False, True, False, False, True, True, False], 2.0, 0.5, 2,
         1024.0),
        ("every step overflows", [True] * 8, 2.0, 0.5, 2000, 1024.0),
        ("growth every clean step", [False, True, False, False, True], 2.0, 0.5, 1, 1024.0),
        ("a gentle growth factor", [False, False, True, False, False, False], 1.5, 0.5, 1, 1024.0),
        # a back-off right after a growth returns to the scale of two steps before: compare with the step before
        ("growth 1.25 then a back-off 0.8 (back to the same scale)", [False, True, False, True, False], 1.25, 0.8, 1,
         1000.0),
        ("a scale that collapses below 1", [True] * 6, 2.0, 0.5, 2000, 4.0),
        ("a single step, skipped", [True], 2.0, 0.5, 2000, 65536.0),
    ]:
        trace = simulate_grad_scaler(found, init_scale=init, growth_factor=g, backoff_factor=b, growth_interval=n)
        after = [*trace.scales[1:], trace.final_scale]
        logs.append((what, init, after, [i for i, f in enumerate(found) if f]))
    return logs


def _skip_mistakes(initial: float, scales: list[float]) -> list[tuple[list[int], str]]:
    """What typical wrong readings of a scale log give, with the message naming each."""
    before = [initial, *scales[:-1]]
    return [
        ([i for i, (b, a) in enumerate(zip(before, scales, strict=True)) if a != b],
         "a *growth* also changes the scale. Only a decrease means a skipped step (update() backs off after an inf)."),
        ([i for i, (b, a) in enumerate(zip(before, scales, strict=True)) if a <= b],
         "an unchanged scale is a clean step (the growth tracker counted it): only a decrease means a skip."),
        ([i for i, a in enumerate(scales) if a < initial],
         "you compared each scale with initial_scale; compare scales[i] with the scale just before step i "
         "(scales[i - 1], or initial_scale for step 0)."),
        ([i - 1 for i in range(1, len(scales)) if scales[i] < scales[i - 1]],
         "off by one. scales[i] is the scale after step i's update; compare it with the scale before that step "
         "(initial_scale for step 0)."),
        ([i + 1 for i, (b, a) in enumerate(zip(before, scales, strict=True)) if a < b],
         "off by one. scales[i] is the scale after step i's update; compare it with the scale before that step "
         "(initial_scale for step 0)."),
        ([i for i in range(1, len(scales)) if scales[i] < scales[i - 1]],
         "step 0 can be skipped too: compare scales[0] with initial_scale."),
        ([i for i, (b, a) in enumerate(zip(before, scales, strict=True)) if a == b * 0.5],
         "you looked for the scale halving (backoff_factor 0.5, the default); a scaler may back off by any factor "
         "below 1 (one log here uses 0.8): any decrease of the scale means a skipped step."),
    ]


def skipped_steps(fn) -> None:
    """Task 3: ``skipped_steps(initial_scale, scales)``: which steps GradScaler skipped, read from the scale log."""
    task = "Task 3 (skipped_steps)"
    require_callable(task, fn, "skipped_steps")
    logs, answers = _scale_logs(), []
    for what, initial, scales, _ in logs:
        given = list(scales)
        got = call(task, fn, "skipped_steps", initial, given)
        if given != scales:
            raise fail(task, f"for {what} your function changed the list it was given ({given} after the call): "
                             "read the log, do not modify it.")
        if isinstance(got, int) and not isinstance(got, bool):
            raise fail(task, f"you returned a count ({got}); return the list of the skipped steps' indices.")
        if not isinstance(got, (list, tuple)) or not all(
                isinstance(i, numbers.Integral) and not isinstance(i, bool) for i in got):
            raise fail(task, f"return a list of step indices (ints); you returned {got!r}.")
        answers.append([int(i) for i in got])
    for (what, initial, scales, want), got in zip(logs, answers, strict=True):
        if got == want:
            continue
        context = f"for {what} (scales {[f'{s:g}' for s in scales]}) you said {got}, the skipped steps were {want}"
        # A mistake is named only when it explains the answers on *every* log: one log's coincidence (a
        # different rule that happens to give the same list there) must not blame a mistake the answer did not make.
        for k, (_, message) in enumerate(_skip_mistakes(initial, scales)):
            if all(a == _skip_mistakes(i, sc)[k][0] for (_, i, sc, _), a in zip(logs, answers, strict=True)):
                raise fail(task, f"{context}: {message}")
        raise fail(task, f"{context}. A step was skipped exactly when the scale went down at its update() (except "
                         "at a collapsed scale of 0, which a back-off leaves at 0).")
    passed(task, f"the skipped steps of {len(_scale_logs())} scale logs read right — including an overflow right "
                 "after a growth, a back-off to an earlier scale, a scale below 1 and a run where every step is "
                 "skipped (an inf or NaN that the scale did not cause).")

# --- Task 4: unscale_ and the inf check, by hand ------------------------------------------------------------------

def _torch_unscale(grads: list[torch.Tensor], scale: float) -> tuple[list[torch.Tensor], bool]:
    """What GradScaler.unscale_ leaves in the gradients, and whether it found an inf/NaN (a real scaler, real SGD)."""
    params = [torch.nn.Parameter(torch.zeros_like(g)) for g in grads]
    for p, g in zip(params, grads, strict=True):
        p.grad = g.clone()
    optimizer = torch.optim.SGD(params, lr=0.0)
    scaler = torch.amp.GradScaler("cpu", init_scale=scale)
    scaler.scale(torch.ones(()))  # creates the scale tensor (GradScaler makes it lazily)
    scaler.unscale_(optimizer)
    found = sum(v.item() for v in scaler._found_inf_per_device(optimizer).values()) > 0
    return [p.grad for p in params], found


def _unscale_cases() -> list[tuple[str, list[torch.Tensor], float]]:
    g = torch.Generator().manual_seed(3)
    clean = [torch.randn(5, 4, generator=g) * 3000, torch.randn(7, generator=g) * 40]

    def planted(index, where, value):
        grads = [clean[0].clone(), clean[1].clone()]
        grads[index][where] = value
        return grads

    # the non-finite cases in an order that tells the mistakes apart: +inf first, then NaN, -inf, the second tensor
    return [("clean gradients, scale 2**16", clean, 2.0**16),
            ("clean gradients, a scale that is not a power of two (3 × 2**10)", clean, 3.0 * 2**10),
            ("clean gradients, a scale below 1 (0.375, after many back-offs)", clean, 0.375),
            ("clean gradients, scale 1000 (1/1000 is no float32)", clean, 1000.0),
            ("an inf in the first gradient", planted(0, (1, 2), float("inf")), 2.0**16),
            ("a NaN in the first gradient", planted(0, (2, 1), float("nan")), 2.0**16),
            ("a -inf in the first gradient", planted(0, (0, 0), -float("inf")), 2.0**16),
            ("an inf in the second gradient only", planted(1, 3, float("inf")), 2.0**16),
            # GradScaler's kernel tests the *incoming* (scaled) values: an inf made by the unscaling is not found
            ("clean gradients holding 3e38, scale 0.5 (unscaled, 3e38 × 2 is inf in float32)",
             planted(0, (3, 3), 3e38), 0.5),
            ("clean gradients, scale 2**-130 (its float32 reciprocal is inf)", clean, 2.0**-130)]


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Bit-for-bit equal values, a NaN equal to a NaN (an inf reciprocal makes ``0 × inf``)."""
    return a.shape == b.shape and a.dtype == b.dtype and bool(((a == b) | (a.isnan() & b.isnan())).all())


def _describe(t: torch.Tensor) -> str:
    """A tensor in a few words: its dtype and shape."""
    return f"dtype {str(t.dtype).removeprefix('torch.')}, shape {tuple(t.shape)}"


def unscale_by_hand(fn) -> None:
    """Task 4: ``unscale_by_hand(grads, scale)`` returns ``(unscaled grads, found_inf)`` exactly as GradScaler."""
    task = "Task 4 (unscale_by_hand)"
    require_callable(task, fn, "unscale_by_hand")
    for what, grads, scale in _unscale_cases():
        want, want_inf = _torch_unscale(grads, scale)
        got = call(task, fn, "unscale_by_hand", [t.clone() for t in grads], scale)
        if not (isinstance(got, tuple) and len(got) == 2 and isinstance(got[0], (list, tuple))
                and len(got[0]) == len(grads) and all(isinstance(t, torch.Tensor) for t in got[0])):
            raise fail(task, "return a tuple (list of unscaled gradient tensors, found_inf as a bool).")
        got_grads, got_inf = got
        if isinstance(got_inf, torch.Tensor):  # the task asks for a bool: GradScaler's own flag is a float tensor
            reduce = "" if got_inf.numel() == 1 else "reduce it to one value (`.any()`), then "
            raise fail(task, f"found_inf must be a bool, and you returned a tensor ({_describe(got_inf)}): "
                             f"{reduce}make it a Python bool with `bool(...)` or `.item()`.")
        if not isinstance(got_inf, bool):
            kind = type(got_inf)
            kind = kind.__name__ if kind.__module__ == "builtins" else f"{kind.__module__}.{kind.__name__}"
            raise fail(task, f"found_inf must be a bool (you returned {kind}): return True or "
                             "False, e.g. `bool(...)` of what you computed.")
        if got_inf != want_inf:
            if not want_inf and not all(torch.isfinite(t).all() for t in want):
                raise fail(task, f"{what}: you said found_inf=True, but the gradients you were given are all "
                                 "finite. GradScaler tests the incoming (scaled) gradients, in the same pass that "
                                 "unscales them, not the unscaled results: found_inf says whether backward "
                                 "overflowed, so an inf made by the unscaling itself is not found.")
            if want_inf and "NaN" in what:
                raise fail(task, f"{what}: you missed it. A NaN is as fatal as an inf: test with "
                                 "`torch.isfinite`, which is False for both.")
            if want_inf and "-inf" in what:
                raise fail(task, f"{what}: you missed it. An overflow can be -inf as well as +inf: test with "
                                 "`torch.isfinite` (or `isinf`, which is True for both signs), not `== inf`.")
            if want_inf and "second" in what:
                raise fail(task, f"{what}: you missed it: every gradient of the list counts, not only the first.")
            raise fail(task, f"{what}: you said found_inf={got_inf}. found_inf is True exactly when some gradient "
                             "holds an inf or a NaN.")
        if want_inf:
            continue  # the step is skipped: GradScaler's unscaled values do not matter then
        if all(_same(a, b) for a, b in zip(got_grads, grads, strict=True)):
            raise fail(task, f"{what}: the gradients came back unchanged: unscale them (multiply by 1 / scale).")
        if all(_same(a, b * scale) for a, b in zip(got_grads, grads, strict=True)):
            raise fail(task, f"{what}: you multiplied the gradients by the scale; they already are scaled: "
                             "unscaling divides by it (multiplies by its reciprocal).")
        if any(not _same(a, b) for a, b in zip(got_grads, want, strict=True)):
            division = [t / scale for t in grads]
            if all(_same(a, b) for a, b in zip(got_grads, division, strict=True)):
                raise fail(task, f"{what}: your result equals the correctly rounded quotient g / scale (a "
                                 "division, or a product computed in float64 and rounded once); GradScaler "
                                 "multiplies in float32 by inv_scale = float32(1 / scale), the reciprocal rounded "
                                 "to float32 first, and that product can differ from the quotient in the last bit "
                                 "(for a scale that is not a power of two).")
            raise fail(task, f"{what}: the unscaled gradients differ from GradScaler's: multiply each by "
                             "inv_scale = float32(1 / scale).")
    passed(task, "unscaled gradients bit-identical to GradScaler's (float32 reciprocal of the scale), inf and NaN "
                 "both found in the incoming gradients, an inf made by the unscaling itself not.")


# --- tiered hints: shown one tier per failed check, or on request with `check.hint(task)` ---

HINTS = {
    'amp_step': [
        ("Lesson 04's recipe has five calls in a fixed order around one autocast region. Which parts go "
         'inside the region, and which outside?'),
        ('Clear the gradients first; run the forward pass and the loss under float16 autocast; backward on'
         ' the scaled loss; then two scaler calls.'),
        ('optimizer.zero_grad(); with torch.autocast(device_type=x.device.type, dtype=torch.float16): loss'
         ' = loss_fn(model(x), y); scaler.scale(loss).backward(); scaler.step(optimizer); scaler.update();'
         ' return loss.item().'),
    ],
    'update_scale': [
        ("There are two cases: the step found an inf, or it did not. Lesson 04's scale trajectory shows "
         'what happens in each. And in which dtype does GradScaler keep its scale? (Find where `_scale` is '
         'created in torch/amp/grad_scaler.py.)'),
        ('On inf: back off and start counting again. Otherwise: count one more clean step, and grow only '
         'when the count reaches growth_interval. Every new scale is rounded to float32, and a grown scale '
         'that is inf in float32 is not taken (the old one stays).'),
        ('if found_inf: return float32(scale × backoff_factor), 0; tracker + 1; if it equals '
         'growth_interval: grown = float32(scale × growth_factor), return (grown if finite else scale), 0; '
         'else return scale, tracker + 1 — with float32(v) = torch.tensor(v, dtype=torch.float32).item().'),
    ],
    'skipped_steps': [
        ('What does update() do to the scale after a skipped step, and what after a clean one? (Lesson '
         "04's scale trajectory.)"),
        ('A skipped step is the only thing that makes the scale go *down*; growth makes it go up. '
         'scales[i] is the scale after step i: compare it with the scale before step i.'),
        ('before = [initial_scale, *scales[:-1]]; return [i for i, (b, a) in enumerate(zip(before, '
         'scales)) if a < b].'),
    ],
    'unscale_by_hand': [
        ('Two results: the gradients with the scale taken out, and a flag. Which values should raise the flag,'
         ' and are they tested before or after unscaling? (Lesson 04: what makes scaler.step skip?)'),
        ('GradScaler does not divide: it multiplies by inv_scale = float32(1 / scale), the reciprocal rounded to '
         'float32 once. The flag is True when any incoming (still scaled) gradient holds an inf *or* a NaN, of '
         'either sign; an inf the unscaling makes is not counted.'),
        ('inv = torch.tensor(scale, dtype=torch.float64).reciprocal().float(); return [g * inv for g in '
         'grads], not all(torch.isfinite(g).all() for g in grads).'),
    ],
}
hint = hints(__name__, HINTS)
