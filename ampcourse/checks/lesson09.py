"""Checks for exercise 09 (capstone): the whole AMP training step, assembled from the earlier lessons.

``train_window(model, optimizer, scaler, scheduler, micro_batches, max_norm, dtype)`` is run on a tiny
model with spies (:mod:`ampcourse.checks.spies`, plus a spy scheduler here) that record the order of the
calls and the gradients the optimizer really steps with; then with a loss scale so large that float16
overflows (the step must be skipped, and the scheduler must not advance); then on an empty window (it
must raise ``ValueError``); then it trains the digits model of lesson 09 for a short run. On every window
the record it returns (``stepped``, ``grad_norm``, ``loss``) is compared with what really happened — which
``ampcourse.capstone.train_window``, the version lesson 09 prints, does not report.
"""

from __future__ import annotations

import collections
import inspect
import math
import statistics
import warnings
from collections.abc import Callable

import torch
import torch.nn.functional as F

from ..capstone import VERDICT_RULE
from ..device import pick_device
from . import CheckFailed, call, exact_bool, fail, hints, noted_call, passed, require_callable
from .spies import SpyOptimizer, SpyScaler
from .tiny import grad_norm, micro_batches, require_clipped, tiny_model, window_mean_grads

TASK = "Task 1 (train_window)"
SCALE = 2.0**10
ACCURACY = 0.9


class SpyScheduler(torch.optim.lr_scheduler.LambdaLR):
    """A real ``LambdaLR`` (lr × 1 / (1 + steps)) that writes ``scheduler.step`` in the log when stepped."""

    def __init__(self, optimizer, log):
        self.log = None  # LambdaLR steps once while it is built: that one is not the learner's
        super().__init__(optimizer, lambda step: 1.0 / (1 + step))
        self.log = log

    def step(self, *args, **kwargs):
        if self.log is not None:
            self.log.append("scheduler.step")
        return super().step(*args, **kwargs)


class _Optimizer(SpyOptimizer):
    """:class:`SpyOptimizer` that also copes with a gradient set to ``None`` (it records zeros for it)."""

    def step(self, closure=None):
        self.log.append("optimizer.step" if self.inside_scaler else "optimizer.step (direct)")
        params = self.param_groups[0]["params"]
        self.grads_at_step.append([torch.zeros_like(p) if p.grad is None else p.grad.detach().clone()
                                   for p in params])
        result = torch.optim.SGD.step(self, closure)
        if self.stale_grad is not None:
            for p in params:
                p.grad = torch.full_like(p, self.stale_grad)
        return result





def _objects(device, log, init_scale=SCALE, growth_interval=10_000):
    model = tiny_model(device)
    optimizer = _Optimizer(model.parameters(), log, lr=0.05)
    scaler = SpyScaler(log, device.type, init_scale=init_scale, growth_interval=growth_interval)
    scheduler = SpyScheduler(optimizer, log)
    return model, optimizer, scaler, scheduler


def _run(fn, device, log, objects, window, max_norm, results=None, dtype=torch.float16):
    """Call the learner's function on one window; name what the log shows if it raised.

    Returns the window's part of the log; what the function returned is appended to ``results``.
    """
    start = len(log)
    model, optimizer, scaler, scheduler = objects
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # e.g. torch's "lr_scheduler.step() before optimizer.step()"
            result = call(TASK, fn, "train_window", model, optimizer, scaler, scheduler, window, max_norm, dtype)
    except CheckFailed:
        _zero_grad_mistakes(log[start:])
        calls = log[start:]
        if calls.count("unscale_") >= 2:
            raise fail(TASK, "you called `scaler.unscale_(optimizer)` more than once in one step (torch refuses): "
                             "unscale once per window, after the last backward, just before clipping.") from None
        raise
    if results is not None:
        results.append(result)
    return log[start:]


# --- the record train_window returns: {"stepped": bool, "grad_norm": float, "loss": float} ---------------------

KEYS = ("stepped", "grad_norm", "loss")


def _record(result) -> dict:
    """The learner's record, or a failure naming what is missing. ``result`` came through ``checks.call``, which
    turns a dict subclass or a Mapping of the answer's own into a plain dict of plain values in the call pass: only
    an exact dict is read here, so no ``__getitem__`` of the answer's runs while the check judges, with the reference
    values in its frame (review rev25-r7 E4)."""
    if result is None:
        raise fail(TASK, "your train_window returned None: return a dict {'stepped': ..., 'grad_norm': ..., "
                         "'loss': ...} saying what the step did (the version lesson 09 prints returns nothing; "
                         "this task asks for more).")
    if type(result) not in (dict, collections.OrderedDict):
        raise fail(TASK, f"return a dict with the keys 'stepped', 'grad_norm' and 'loss' (you returned a "
                         f"{type(result).__name__}).")
    missing = [k for k in KEYS if k not in result]
    if missing:
        raise fail(TASK, f"the dict you returned has no {', '.join(repr(k) for k in missing)}: return "
                         "{'stepped': ..., 'grad_norm': ..., 'loss': ...}.")
    for key, kind in (("grad_norm", "float"), ("loss", "float")):
        value = result[key]
        if isinstance(value, torch.Tensor):
            raise fail(TASK, f"'{key}' is a tensor: return it as a Python {kind} (`.item()`), so the record does "
                             "not keep tensors (and, for the loss, its autograd graph) alive.")
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise fail(TASK, f"'{key}' should be a Python float (you gave a {type(value).__name__}).")
    stepped = exact_bool(result["stepped"])  # a numpy bool is one, by its value (review rev25-r9 N1, rev25-r8 N3)
    if stepped is None:
        raise fail(TASK, f"'stepped' should be True or False, a Python bool (you gave a "
                         f"{type(result['stepped']).__name__}: compare two `scaler.get_scale()` floats).")
    return {**result, "stepped": stepped}  # a new dict: the answer's own is left as it was


def _close(a: float, b: float, rel: float) -> bool:
    return math.isfinite(a) and abs(a - b) <= rel * abs(b)


def _check_stepped(record, applied: bool, why: str) -> None:
    if record["stepped"] != applied:
        if applied:
            raise fail(TASK, f"'stepped' is False, but the optimizer step was applied ({why}). A step is skipped "
                             "only when `scaler.update()` lowers the scale.")
        raise fail(TASK, f"'stepped' is True, but GradScaler skipped this step ({why}): report False when "
                         "`scaler.get_scale()` went down at `update()`.")


def _check_grad_norm(record, true_norm: float, scale: float, max_norm: float | None = None) -> None:
    """``grad_norm``: the total norm of the unscaled gradients before clipping (clip_grad_norm_'s return value)."""
    got = float(record["grad_norm"])
    if _close(got, true_norm, 0.02):
        return
    if _close(got, true_norm * scale, 0.02):
        raise fail(TASK, f"'grad_norm' is {got:.4g}, the true norm × the scale {scale:g}: you measured the "
                         "gradients before `scaler.unscale_`. Report the norm of the unscaled gradients — the value "
                         "`clip_grad_norm_` returns after `unscale_`.")
    if max_norm is not None and _close(got, max_norm, 0.02):
        raise fail(TASK, f"'grad_norm' is {got:.4g} = max_norm: you measured the norm *after* clipping. Report the "
                         "norm before clipping — `clip_grad_norm_` returns it: keep its return value.")
    raise fail(TASK, f"'grad_norm' is {got:.4g}, but the total norm of the unscaled gradients before clipping was "
                     f"{true_norm:.4g}. Keep what `clip_grad_norm_` returns (after `unscale_`).")


def _reference_losses(model, window) -> list[float]:
    """Each micro-batch's float16-autocast loss with the model as it is now (before the learner's step)."""
    device_type = window[0][0].device.type
    with torch.no_grad(), torch.autocast(device_type=device_type, dtype=torch.float16):
        return [F.cross_entropy(model(x), y).item() for x, y in window]


def _check_loss(record, losses: list[float], scale: float) -> None:
    """``loss``: the window's unscaled loss, the mean of its micro-batch losses."""
    got, n = float(record["loss"]), len(losses)
    want = sum(losses) / n
    if _close(got, want, 1e-3):
        return
    context = f"'loss' is {got:.5g}, the window's loss (the mean of its {n} micro-batch losses) was {want:.5g}"
    if _close(got, want * scale, 1e-3):
        raise fail(TASK, f"{context}: you reported the scaled loss (× {scale:g}). Report the loss before "
                         "`scaler.scale`.")
    if _close(got, sum(losses), 1e-3):
        raise fail(TASK, f"{context}: you added up the micro-batch losses without dividing each by the window's "
                         "length. Report the sum of the divided losses (loss / len(micro_batches)).")
    if _close(got, losses[-1] / n, 1e-3) or _close(got, losses[-1], 1e-3):
        raise fail(TASK, f"{context}: you reported only the last micro-batch's loss. Add up every micro-batch's "
                         "part (`loss.item()` of loss / len(micro_batches)) over the window.")
    raise fail(TASK, f"{context}. Add up `loss.item()` of each micro-batch's loss / len(micro_batches).")


def _course_function(fn) -> bool:
    from .. import capstone

    return fn is capstone.train_window or getattr(fn, "__wrapped__", None) is capstone.train_window


def _zero_grad_mistakes(calls) -> None:
    """zero_grad between the backward passes of one window, or between the last backward and the step."""
    scales = [i for i, c in enumerate(calls) if c == "scale"]
    zeros = [i for i, c in enumerate(calls) if c == "zero_grad"]
    steps = [i for i, c in enumerate(calls) if c == "scaler.step"]
    if not scales:
        return
    if any(scales[0] < z < scales[-1] for z in zeros):
        raise fail(TASK, "`optimizer.zero_grad()` ran between the micro-batches of one window: it wipes the "
                         "gradients accumulated so far, so the step sees only the last micro-batch. Zero the "
                         "gradients once per window, before the first backward (or after the step).")
    end = steps[0] if steps else len(calls)
    if any(scales[-1] < z < end for z in zeros):
        raise fail(TASK, "`optimizer.zero_grad()` ran after the backward passes and before `scaler.step`: the "
                         "step got no gradients. Zero the gradients at the start of the window (or after the "
                         "step), never between backward and step.")


def _accumulation(fn, device, pending) -> None:
    """A window of 3 micro-batches, then a short last one of 1, no clipping (max_norm huge): order, mean gradient,
    zero_grad (a large stale gradient is planted after each step), scheduler, and the loss's dtype."""
    log: list[str] = []
    objects = _objects(device, log)
    model, optimizer, _, _ = objects
    optimizer.stale_grad = 100.0 * SCALE  # a large stale gradient: visible unless zero_grad runs per window
    windows = [micro_batches(device, 3, seed=1), micro_batches(device, 1, seed=2)]  # a short last window
    references, per_window, results, losses = [], [], [], []
    autocast_on: list[bool] = []  # per forward of the answer: was autocast on for the device the input is on?
    answering = [False]  # the reference passes run without autocast: they are not the answer's

    def hook(module, inputs, out):
        if answering[0]:
            autocast_on.append(torch.is_autocast_enabled(inputs[0].device.type))

    handle = model[0].register_forward_hook(hook)
    try:
        for window in windows:
            references.append(window_mean_grads(model, window))
            losses.append(_reference_losses(model, window))
            answering[0] = True
            per_window.append(_run(fn, device, log, objects, window, 1e9, results))
            answering[0] = False
    finally:
        handle.remove()
    for calls in per_window:
        _zero_grad_mistakes(calls)
    if autocast_on and not all(autocast_on):
        raise fail(TASK, f"autocast was off during the forward pass (the inputs are on {device.type!r}): run each "
                         "micro-batch's forward and loss under `torch.autocast(device_type=x.device.type, "
                         "dtype=dtype)` — autocast for another device type (e.g. 'cuda' on CPU tensors) does "
                         "nothing here but warn.")
    if "optimizer.step (direct)" in log:
        raise fail(TASK, "you called `optimizer.step()` yourself: step through `scaler.step(optimizer)`, which "
                         "skips the step when the gradients hold inf/NaN (and unscales them if you did not).")
    n_steps = log.count("scaler.step")
    if n_steps == 0:
        raise fail(TASK, "the optimizer never stepped: call `scaler.step(optimizer)` once, after clipping.")
    n_micro = sum(len(w) for w in windows)
    if n_steps == n_micro:
        raise fail(TASK, "you stepped after every micro-batch: accumulate the window's gradients and call "
                         "`scaler.step(optimizer)` once, after the last backward.")
    if n_steps != 2:
        raise fail(TASK, f"expected one `scaler.step(optimizer)` per window (2 for 2 windows), saw {n_steps}.")
    if log.count("scale") != n_micro:
        raise fail(TASK, f"expected one `scaler.scale(loss).backward()` per micro-batch ({n_micro} for windows of "
                         f"3 and 1), saw {log.count('scale')} calls to `scaler.scale`.")
    if any(d != torch.float32 for d in objects[2].scaled_dtypes):
        raise fail(TASK, "the loss you scaled is float16: you computed the cross-entropy outside autocast, on "
                         "float16 logits, so the loss itself ran in float16. Compute it inside the autocast region "
                         "(autocast runs the loss in float32), or on `model(x).float()`.")
    if any("unscale_" not in calls[:calls.index("scaler.step")] for calls in per_window):
        raise fail(TASK, "you never called `scaler.unscale_(optimizer)`: clip_grad_norm_ then compares max_norm "
                         "with gradients × the scale. Unscale after the last backward, then clip.")
    for number, (seen, true) in enumerate(zip(optimizer.grads_at_step, references, strict=True), start=1):
        ratio = grad_norm(seen) / grad_norm(true)
        if ratio > 50:
            raise fail(TASK, "the step held gradients from before this window: call `optimizer.zero_grad()` once "
                             "per window (at its start, or after the step).")
        if ratio < 0.01:
            raise fail(TASK, "the optimizer stepped with zero gradients: `zero_grad` ran between the backward "
                             "passes and the step. Zero them at the start of the window instead.")
        n = len(windows[number - 1])
        if n > 1 and abs(ratio - n) < 0.05 * n:
            raise fail(TASK, f"the step gradient is {ratio:.2f}× too large: you forgot to divide each micro-batch "
                             "loss by the window's length (`loss / len(micro_batches)`), so the gradients of the "
                             f"{n} micro-batches were summed, not averaged.")
        if n == 1 and abs(ratio - 1) > 0.05:
            raise fail(TASK, f"window {number}, a short last window of 1 micro-batch: the step gradient is "
                             f"{ratio:.3g}× its gradient. Divide by the length of *this* window, "
                             "`len(micro_batches)`, not by a fixed number of micro-batches.")
        if abs(ratio - 1) > 0.05:
            raise fail(TASK, f"window {number}: the step gradient is {ratio:.3g}× the mean gradient of the window; "
                             "divide each micro-batch loss by `len(micro_batches)`, once.")
    for calls in per_window:
        if calls.count("update") != 1:
            raise fail(TASK, f"`scaler.update()` should run once per window, after `scaler.step`; it ran "
                             f"{calls.count('update')} times in one window.")
        if calls.index("update") < calls.index("scaler.step"):
            raise fail(TASK, "`scaler.update()` ran before `scaler.step(optimizer)`: step first, then update.")
        if calls.count("scheduler.step") == 0:
            raise fail(TASK, "the learning-rate scheduler was not stepped after a clean (not skipped) step: call "
                             "`scheduler.step()` after `scaler.update()` when the step was applied.")
        if calls.count("scheduler.step") > 1:
            raise fail(TASK, "`scheduler.step()` ran more than once in one window: once per optimizer step.")
        if calls.index("scheduler.step") < calls.index("scaler.step"):
            raise fail(TASK, "you stepped the scheduler before the optimizer: call `scheduler.step()` after "
                             "`scaler.step(optimizer)` and `scaler.update()` (torch warns about this order, and "
                             "you cannot yet know whether the step will be skipped).")
    norms = [grad_norm(seen) for seen in optimizer.grads_at_step]  # max_norm is huge here: nothing was clipped

    def records():
        for result, norm, window_losses in zip(results, norms, losses, strict=True):
            record = _record(result)
            _check_stepped(record, True, "a clean float16 step")
            _check_loss(record, window_losses, SCALE)
            _check_grad_norm(record, norm, SCALE)
    pending.append(records)


def _clipping(fn, device, pending) -> None:
    log: list[str] = []
    objects = _objects(device, log)
    model, optimizer, _, _ = objects
    window = micro_batches(device, 2, seed=3)
    true_norm = grad_norm(window_mean_grads(model, window))
    max_norm = true_norm / 4  # clipping must fire
    results: list = []
    _run(fn, device, log, objects, window, max_norm, results)
    require_clipped(TASK, optimizer.grads_at_step[0], max_norm, SCALE, log)
    pending.append(lambda: _check_grad_norm(_record(results[0]), true_norm, SCALE, max_norm))


def _growth(fn, device, pending) -> None:
    """growth_interval=1: every clean step doubles the scale. The step was applied, so the schedule must move."""
    log: list[str] = []
    objects = _objects(device, log, growth_interval=1)
    scaler, scheduler = objects[2], objects[3]
    results: list = []
    calls = _run(fn, device, log, objects, micro_batches(device, 2, seed=6), 1e9, results)
    if scaler.get_scale() <= SCALE:
        raise fail(TASK, "after a clean step with growth_interval=1 the scale did not grow: call `scaler.update()` "
                         "once per window, after `scaler.step(optimizer)`.")
    if "scheduler.step" not in calls or scheduler.last_epoch != 1:
        raise fail(TASK, "the scale *grew* at this update (growth_interval=1) and your loop did not step the "
                         "scheduler, although the optimizer step was applied: a skip makes the scale go *down*. "
                         "Step the scheduler unless `scaler.get_scale()` after update() is smaller than before.")
    pending.append(lambda: _check_stepped(_record(results[0]), True,
                                          "the scale *grew* at this update, growth_interval=1"))


def _skip(fn, device, pending) -> None:
    """A loss scale of 2**40 overflows float16 in the backward pass: the step is skipped, the schedule waits."""
    log: list[str] = []
    objects = _objects(device, log, init_scale=2.0**40)
    model, optimizer, scaler, scheduler = objects
    before = [p.detach().clone() for p in model.parameters()]
    lr = optimizer.param_groups[0]["lr"]
    results: list = []
    calls = _run(fn, device, log, objects, micro_batches(device, 2, seed=4), 1.0, results)
    if scaler.get_scale() >= 2.0**40:
        raise fail(TASK, "after a float16 overflow the scale did not back off: call `scaler.update()` after "
                         "`scaler.step(optimizer)` in every window, skipped or not.")
    if not all(torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True)):
        raise fail(TASK, "the gradients overflowed (inf) but the parameters changed: let `scaler.step(optimizer)` "
                         "decide — it skips the step when it finds inf/NaN.")
    if "scheduler.step" in calls or scheduler.last_epoch != 0 or optimizer.param_groups[0]["lr"] != lr:
        raise fail(TASK, "you stepped the scheduler on a skipped step: the float16 gradients overflowed, "
                         "`scaler.step` skipped the optimizer step, yet the learning-rate schedule moved on. Read "
                         "`scaler.get_scale()` before and after `scaler.update()`; step the scheduler only if the "
                         "scale did not go down.")

    def record_of_a_skip():
        record = _record(results[0])
        _check_stepped(record, False, "a loss scale of 2**40 overflowed float16 in the backward pass")
        if math.isfinite(float(record["grad_norm"])):
            raise fail(TASK, f"the gradients overflowed (inf), yet 'grad_norm' is {float(record['grad_norm']):.4g}: "
                             "report the norm `clip_grad_norm_` measured after `unscale_` (inf or nan on a skipped "
                             "step).")
    pending.append(record_of_a_skip)


def _disabled_overflow(fn, device, pending) -> None:
    """A disabled scaler (``enabled=False``) and inf/NaN gradients (the inputs × 1e6 overflow float16, as in lesson
    11): a disabled scaler checks nothing and skips nothing, so the step is applied and the schedule moves on; a
    ``stepped`` read from a finite gradient norm says otherwise (review rev25-r8 W1)."""
    log: list[str] = []
    model, optimizer, _, _ = _objects(device, log)
    scaler = SpyScaler(log, device.type, enabled=False)
    scheduler = SpyScheduler(optimizer, log)
    window = [(x * 1e6, y) for x, y in micro_batches(device, 2, seed=9)]
    results: list = []
    calls = _run(fn, device, log, (model, optimizer, scaler, scheduler), window, 1.0, results)
    if "scheduler.step" not in calls or scheduler.last_epoch != 1:
        raise fail(TASK, "with a disabled scaler (`GradScaler(enabled=False)`) and inf gradients (the inputs × 1e6 "
                         "overflow float16) your loop did not step the scheduler, although the optimizer step was "
                         "applied: a disabled scaler checks nothing and skips nothing. Decide from the scale "
                         "(`scaler.get_scale()` before and after `update()`), not from the gradients.")
    pending.append(lambda: _check_stepped(_record(results[0]), True, "a disabled scaler skips nothing, even with "
                                          "inf gradients (the inputs × 1e6 overflow float16): decide from the scale, "
                                          "not from the gradient norm"))


def _dtype_followed(fn, device) -> None:
    """One window with ``dtype=torch.bfloat16`` and a disabled scaler (bfloat16 needs none): the first layer's
    forward must run under autocast in bfloat16 — not in a dtype the function chose itself."""
    log: list[str] = []
    model, optimizer, _, _ = _objects(device, log)
    scaler = SpyScaler(log, device.type, enabled=False)
    scheduler = SpyScheduler(optimizer, log)
    seen: list[torch.dtype] = []
    handle = model[0].register_forward_hook(lambda m, i, out: seen.append(out.dtype))
    try:
        _run(fn, device, log, (model, optimizer, scaler, scheduler), micro_batches(device, 2, seed=8), 1e9,
             dtype=torch.bfloat16)
    finally:
        handle.remove()
    if not seen:
        raise fail(TASK, "with dtype=torch.bfloat16 the model's forward pass never ran: compute each micro-batch's "
                         "loss from `model(x)`.")
    wrong = sorted({str(d).removeprefix("torch.") for d in seen if d != torch.bfloat16})
    if wrong:
        raise fail(TASK, f"called with dtype=torch.bfloat16, the first layer ran in {', '.join(wrong)}: your "
                         "function ignores its `dtype` argument. Pass it to autocast: "
                         "`torch.autocast(device_type=x.device.type, dtype=dtype)` (with a hard-coded float16 "
                         "and this disabled scaler, a bfloat16 run would train float16 without loss scaling).")


def _empty_window(fn, device) -> None:
    """An empty window is a caller's mistake: a ValueError naming micro_batches, before anything is touched."""
    log: list[str] = []
    model, optimizer, scaler, scheduler = _objects(device, log)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            noted_call(fn, model, optimizer, scaler, scheduler, [], 1.0, torch.float16)
    except ValueError as err:
        if "micro_batches" not in str(err):
            raise fail(TASK, f"an empty window raised ValueError({str(err)!r}): good, but name the argument — "
                             "say what `micro_batches` must be (at least one (x, y) pair).") from None
        touched = [c for c in ("zero_grad", "scaler.step", "optimizer.step (direct)", "scheduler.step", "update")
                   if c in log]
        if touched:
            raise fail(TASK, f"an empty window ran {', '.join(f'`{c}`' for c in touched)} before raising: check "
                             "`micro_batches` first, before touching the optimizer, the scaler or the "
                             "scheduler.") from None
        return
    except Exception as err:  # noqa: BLE001 - what the learner's code raised on an empty window is reported
        raise fail(TASK, f"an empty window (micro_batches == []) raised {type(err).__name__}"
                         f"{': ' + str(err).splitlines()[0][:120] if str(err).strip() else ''}. Check it first "
                         "and raise a ValueError that names `micro_batches` — the version lesson 09 prints "
                         "does not.") from None
    raise fail(TASK, "an empty window (micro_batches == []) returned normally: there is nothing to step on. Raise "
                     "a ValueError that names `micro_batches` before touching the optimizer.")


def _accuracy(fn, device) -> float:
    from ..capstone import TrainConfig, recommended_dtype, train

    # 90 steps of 2 micro-batches of 16 in the device's AMP dtype; evaluated at the start and the end only.
    config = TrainConfig(epochs=2, micro_batch=16, warmup_steps=3, eval_every=1000, dtype=recommended_dtype(device))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        result = call(TASK, train, "train_window", config, device=device, progress=None, window_fn=fn)
    accuracy = result.final_accuracy
    if not accuracy >= ACCURACY:
        raise fail(TASK, f"trained with your train_window for {result.steps} steps, the digits model reached only "
                         f"{accuracy:.1%} validation accuracy (the recipe reaches more than {ACCURACY:.0%}). Check "
                         "each part of the step against lessons 03–05.")
    return accuracy


def train_window(fn) -> None:
    """Task 1: ``train_window(model, optimizer, scaler, scheduler, micro_batches, max_norm, dtype)``."""
    require_callable(TASK, fn, "train_window")
    if _course_function(fn):
        raise fail(TASK, "this is ampcourse.capstone.train_window imported from the course; write your own. (The "
                         "course's version, which lesson 09 prints, returns nothing and fails on an empty window: "
                         "this task asks for both.)")
    device = pick_device()
    pending: list = []  # the records are judged once the steps themselves are right: those messages come first
    _accumulation(fn, device, pending)
    _clipping(fn, device, pending)
    _growth(fn, device, pending)
    _skip(fn, device, pending)
    _disabled_overflow(fn, device, pending)
    _dtype_followed(fn, device)
    for judge in pending:
        judge()
    _empty_window(fn, device)
    _accuracy(fn, device)  # the accuracy itself varies by machine: only the verdict is printed
    passed(TASK, "zero_grad → scaled backward of loss / window length per micro-batch → unscale_ → clip → "
                 "scaler.step → update → scheduler.step only when the step was applied (a float16 overflow was "
                 "skipped and the schedule waited; on a growing scale it moved); autocast ran in the `dtype` given "
                 "(bfloat16 in one window); the record said whether it stepped, the pre-clip norm of the unscaled "
                 "gradients and the window's unscaled loss; an empty "
                 f"window raised ValueError; your step trained the digits model past {ACCURACY:.0%} validation "
                 "accuracy.")

# --- Task 2: every sample weighs the same (unequal micro-batches) --------------------------------------------------

ROWS = (2, 7, 3)  # the micro-batch sizes of the window: unequal, as the last batch of an epoch or packed sequences


def _unequal_window(device) -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(11)
    return [(torch.randn(n, 6, generator=g).to(device), torch.randint(0, 3, (n,), generator=g).to(device))
            for n in ROWS]


def _grads_of(model, loss) -> list[torch.Tensor]:
    model.zero_grad(set_to_none=True)
    loss.backward()
    grads = [p.grad.detach().clone() for p in model.parameters()]
    model.zero_grad(set_to_none=True)
    return grads


def sample_weighted_window(fn) -> None:
    """Task 2: ``sample_weighted_window(model, optimizer, scaler, micro_batches)``: every row weighs the same."""
    import copy

    from .tiny import cosine

    task = "Task 2 (sample_weighted_window)"
    require_callable(task, fn, "sample_weighted_window")
    device = pick_device()
    model = tiny_model(device, seed=4)
    log: list[str] = []
    optimizer = SpyOptimizer(model.parameters(), log, lr=0.05)
    scaler = SpyScaler(log, device.type, init_scale=SCALE, growth_interval=10_000)
    window = _unequal_window(device)
    reference = copy.deepcopy(model)
    x_all = torch.cat([x for x, _ in window])
    y_all = torch.cat([y for _, y in window])
    want = _grads_of(reference, F.cross_entropy(reference(x_all), y_all))
    mean_of_means = _grads_of(reference, sum(F.cross_entropy(reference(x), y) for x, y in window) / len(window))
    autocast_seen: list[torch.dtype | None] = []
    model[0].register_forward_hook(lambda m, i, out: autocast_seen.append(
        out.dtype if torch.is_autocast_enabled(device.type) else None))
    stale = 100.0 * SCALE  # a large stale gradient from an earlier step: visible unless the answer zeroes .grad
    for p in model.parameters():
        p.grad = torch.full_like(p, stale)
    call(task, fn, "sample_weighted_window", model, optimizer, scaler, window)
    if "optimizer.step (direct)" in log:
        raise fail(task, "you called `optimizer.step()` yourself: step through `scaler.step(optimizer)`.")
    if log.count("scaler.step") != 1 or log.count("update") != 1:
        raise fail(task, f"one window is one step: call `scaler.step(optimizer)` and `scaler.update()` once each "
                         f"(saw {log.count('scaler.step')} and {log.count('update')}).")
    if log.count("scale") != len(ROWS):
        raise fail(task, f"run one scaled backward per micro-batch ({len(ROWS)}), not one for the whole window "
                         f"(saw {log.count('scale')}).")
    if any(d != torch.float16 for d in autocast_seen):
        raise fail(task, "run each forward pass under float16 autocast "
                         "(`torch.autocast(device_type=x.device.type, dtype=torch.float16)`).")
    seen = optimizer.grads_at_step[0]
    ratio = grad_norm(seen) / grad_norm(want)
    if ratio > 50:
        raise fail(task, "the step held gradients from before this call (.grad already held an earlier step's "
                         "gradient): zero the gradients at the start, `optimizer.zero_grad(set_to_none=True)`, "
                         "before the first backward.")
    if abs(ratio - 1) < 0.03 and cosine(seen, want) > 0.999:
        passed(task, f"micro-batches of {', '.join(map(str, ROWS))} rows: the step used the mean gradient over all "
                     f"{sum(ROWS)} rows, each row weighing the same — not the mean of the micro-batch means.")
        return
    if abs(grad_norm(seen) / grad_norm(mean_of_means) - 1) < 0.03 and cosine(seen, mean_of_means) > 0.999:
        raise fail(task, f"you averaged the micro-batch means (each loss / {len(ROWS)}): a row of the 2-row "
                         f"micro-batch then weighs 7/2 times a row of the 7-row one. Weight each micro-batch by "
                         "its number of rows: its summed loss divided by the window's total rows.")
    if abs(ratio - sum(ROWS)) < 0.05 * sum(ROWS):
        raise fail(task, f"the step gradient is {ratio:.1f}× the mean: you summed the per-row losses but did not "
                         f"divide by the window's total number of rows ({sum(ROWS)}).")
    raise fail(task, f"the step gradient is {ratio:.3g}× the mean gradient over all rows (cosine "
                     f"{cosine(seen, want):.4f}): each row must weigh 1 / (total rows in the window).")


# --- Task 3: is the difference real? -------------------------------------------------------------------------------

VERDICT_CASES = [  # (fp32 accuracies per seed, amp accuracies per seed, what the case is about)
    ([0.962, 0.955, 0.970, 0.948, 0.966], [0.961, 0.957, 0.968, 0.949, 0.965], "a tiny, noisy difference"),
    ([0.962, 0.955, 0.970, 0.948, 0.966], [0.952, 0.946, 0.959, 0.939, 0.957], "AMP about 1 point lower on every seed"),
    ([0.90, 0.97, 0.91, 0.96, 0.93], [0.905, 0.975, 0.915, 0.965, 0.935],
     "AMP 0.5 points higher on every seed, though the seeds differ by 7 points"),
    ([0.95, 0.95, 0.95, 0.95], [0.96, 0.94, 0.97, 0.93], "a zero mean difference with large paired noise"),
    ([0.95, 0.94, 0.96], [0.9505, 0.9505, 0.9805], "a borderline gain on three seeds"),
    ([0.9721, 0.9805, 0.9777, 0.9777, 0.9749], [0.9721, 0.9805, 0.9777, 0.9777, 0.9749],
     "identical accuracies on every seed (every difference 0, standard error 0)"),
    ([0.90, 0.92, 0.94, 0.96], [0.93, 0.95, 0.97, 0.999], "AMP 3 to 4 points higher on every seed"),
    # d = 0.35, 0.1, 0.2 points: t = mean / SE ≈ 2.98, between 2 and a t-test's 4.30 (df 2); and |mean| is clear of
    # 2 standard deviations (0.217 vs 0.252 points), so the "2 std" rule is not decided by float rounding here
    ([0.95, 0.95, 0.95], [0.9535, 0.951, 0.952], "AMP 0.1 to 0.35 points higher on every seed"),
    ([0.95, 0.96, 0.94], [0.951, 0.961, 0.97], "AMP higher on every seed, by 0.1, 0.1 and 3 points"),
    ([0.95, 0.96, 0.94], [0.96, 0.972, 0.939], "AMP 1 point higher on two seeds, 0.1 lower on the third"),
    # 5 seeds, t ≈ 3.28: above a t-test's 2.78 (df 4), below 2·√5 ≈ 4.47 (where "2 standard deviations" starts)
    ([0.962, 0.955, 0.970, 0.948, 0.966], [0.965, 0.956, 0.972, 0.952, 0.9665],
     "AMP 0.05 to 0.4 points higher on five seeds, unevenly"),
    # Cases near 2 standard errors, so that another multiplier of the standard error does not pass (re-review):
    # t ≈ 2.22: above 2 and 1.96, below a one-sided t-test's 2.92 (df 2) and 2·√(3/2) ≈ 2.45 (SE = std / √(n − 1))
    ([0.95, 0.95, 0.95], [0.951, 0.952, 0.955], "AMP 0.1, 0.2 and 0.5 points higher on three seeds"),
    # t ≈ 1.997: just inside 2 standard errors, outside 1.96
    ([0.95, 0.95, 0.95], [0.951, 0.951, 0.95401], "AMP 0.1, 0.1 and 0.4 points higher on three seeds"),
    # 5 seeds, t ≈ 2.06: above 2, below a one-sided t-test's 2.13 (df 4) and 2·√(5/4) ≈ 2.24
    ([0.962, 0.955, 0.970, 0.948, 0.966], [0.968, 0.953, 0.977, 0.949, 0.972],
     "AMP 0.2 lower to 0.7 points higher on five seeds"),
    # t ≈ 2.69: above 2·√(3/2) ≈ 2.45, below a one-sided t-test's 2.92 (df 2)
    ([0.95, 0.96, 0.94], [0.959, 0.962, 0.951], "AMP 0.2 to 1.1 points higher on three seeds"),
    # 5 seeds, t ≈ 2.37: above 2·√(5/4) ≈ 2.24, below 2.5 standard errors
    ([0.962, 0.955, 0.970, 0.948, 0.966], [0.967, 0.953, 0.976, 0.951, 0.971],
     "AMP 0.2 lower to 0.6 points higher on five seeds"),
]
# Two-sided 95 % critical values of Student's t, df = 1..9 (a t-test a learner may write instead of the rule).
T_CRITICAL_95 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262}
# One-sided 95 % critical values of Student's t, df = 1..9 (a one-sided test a learner may write instead).
T_ONE_SIDED_95 = {1: 6.314, 2: 2.920, 3: 2.353, 4: 2.132, 5: 2.015, 6: 1.943, 7: 1.895, 8: 1.860, 9: 1.833}
ANSWERS = ("within noise", "amp better", "amp worse")


def _differences(fp32, amp) -> tuple[float, float, float, int]:
    """(mean, sample std, population std, n) of the per-seed differences amp − fp32."""
    d = [a - f for f, a in zip(fp32, amp, strict=True)]
    return statistics.fmean(d), statistics.stdev(d), statistics.pstdev(d), len(d)


def _sign(mean: float) -> str:
    return "amp better" if mean > 0 else "amp worse"


def _noise_rule(noise) -> Callable:
    def rule(fp32, amp) -> str:
        mean, std, pstd, n = _differences(fp32, amp)
        return "within noise" if abs(mean) <= noise(fp32, amp, mean, std, pstd, n) else _sign(mean)
    return rule


def _unpaired(fp32, amp) -> str:
    mean = statistics.fmean(amp) - statistics.fmean(fp32)
    error = math.sqrt((statistics.variance(amp) + statistics.variance(fp32)) / len(amp))
    return "within noise" if abs(mean) <= 2 * error else _sign(mean)


def _same_sign(fp32, amp) -> str:
    d = [a - f for f, a in zip(fp32, amp, strict=True)]
    return "amp better" if all(x > 0 for x in d) else "amp worse" if all(x < 0 for x in d) else "within noise"


def _strict(fp32, amp) -> str:
    mean, std, _, n = _differences(fp32, amp)
    return "within noise" if abs(mean) < 2 * std / math.sqrt(n) else _sign(mean)


def _reversed(fp32, amp) -> str:
    from ..capstone import paired_verdict

    return {"amp better": "amp worse", "amp worse": "amp better"}.get(v := paired_verdict(fp32, amp), v)


# Wrong rules a learner writes, each with the sentence that names it. An answer is blamed for one only when it
# agrees with that rule on *every* case (the cases are chosen so that no two of these rules agree on all of them).
WRONG_RULES: dict[str, tuple[Callable, str]] = {
    "FP32's spread as noise": (
        _noise_rule(lambda f, a, mean, std, pstd, n: max(2 * std / math.sqrt(n), statistics.stdev(f))),
        "your answer takes FP32's own seed-to-seed spread as the noise (noise = max(2·SE, stdev(fp32))). Paired by "
        "seed, each seed's luck cancels in its difference, so the noise of the mean difference is its standard "
        "error alone: drop the FP32-spread term"),
    "unpaired means": (
        _unpaired,
        "you compared the two means as if the runs were independent, so the seed-to-seed spread drowned the "
        "difference. The runs are paired by seed: take the per-seed differences amp − fp32 and judge their mean "
        "against its standard error"),
    "population std": (
        _noise_rule(lambda f, a, mean, std, pstd, n: 2 * pstd / math.sqrt(n)),
        "you used the population standard deviation (n in the denominator): with 3–5 seeds use the sample one "
        "(n − 1, `statistics.stdev`, torch's default `std()`)"),
    "same sign on every seed": (
        _same_sign,
        "you judged by whether every seed's difference has the same sign: on 3 seeds a pure-noise difference "
        "shares its sign by chance 1 time in 4, and a real one can flip on one seed. Judge the mean difference "
        "against 2 standard errors"),
    "strict inequality": (
        _strict,
        "identical runs (every difference 0, so the standard error is 0 too) must be 'within noise': compare "
        "with `≤`, not `<`, and do not divide by the standard error (0 / 0 is nan, and every comparison with nan "
        "is False)"),
    "one standard error": (
        _noise_rule(lambda f, a, mean, std, pstd, n: std / math.sqrt(n)),
        "you allowed 1 standard error; the rule allows 2 (pure noise lands more than 1 standard error from 0 "
        "about a third of the time)"),
    "standard deviation, not error": (
        _noise_rule(lambda f, a, mean, std, pstd, n: 2 * std),
        "you compared the mean difference with 2 standard deviations of the differences: the noise of a *mean* "
        "of n differences is its standard error, std / √n"),
    "fixed threshold": (
        _noise_rule(lambda f, a, mean, std, pstd, n: 0.01),
        "you used a fixed threshold (1 point): whether a difference is noise depends on how much the per-seed "
        "differences vary, so measure that — the standard error of their mean"),
    "t critical value": (
        _noise_rule(lambda f, a, mean, std, pstd, n: T_CRITICAL_95.get(n - 1, 2.0) * std / math.sqrt(n)),
        "you used a t-test's critical value (4.30 for 3 seeds, 2.78 for 5) instead of 2. The course fixes the "
        "rule at 2 standard errors — a t-test is a sound rule too, but not this task's: at 3–5 seeds 2 standard "
        "errors are about an 82–88 % interval (`capstone.noise_interval_coverage`), a deliberate, lighter bar"),
    "1.96 standard errors": (
        _noise_rule(lambda f, a, mean, std, pstd, n: 1.96 * std / math.sqrt(n)),
        "you allowed fewer than 2 standard errors (1.96, the normal distribution's 95 % value, say); the "
        "course's rule allows exactly 2"),
    "one-sided t critical value": (
        _noise_rule(lambda f, a, mean, std, pstd, n: T_ONE_SIDED_95.get(n - 1, 2.0) * std / math.sqrt(n)),
        "you used a one-sided t-test's critical value (2.92 for 3 seeds, 2.13 for 5) instead of 2. The question "
        "is two-sided (better *or* worse), and the course fixes the rule at 2 standard errors"),
    "standard error with n - 1": (
        _noise_rule(lambda f, a, mean, std, pstd, n: 2 * std / math.sqrt(n - 1)),
        "you divided the standard deviation by √(n − 1): the sample std already has n − 1 inside it; the "
        "standard error of the mean is `statistics.stdev(d) / math.sqrt(len(d))`, √n"),
    "sign reversed": (
        _reversed,
        "the sign is reversed — a positive mean of amp − fp32 means AMP is better"),
}


def amp_verdict(fn) -> None:
    """Task 3: ``amp_verdict(fp32, amp)`` says whether AMP's accuracy differs from FP32's beyond the seed noise.

    The rule is :func:`ampcourse.capstone.paired_verdict` (the one lesson 09 prints; its words are
    ``capstone.VERDICT_RULE``). The answer is run on every case first; a wrong answer is blamed for a named
    mistake only when it agrees with that mistaken rule on every case, otherwise the message names the case and
    the rule.
    """
    from .. import capstone
    from ..capstone import paired_verdict

    task = "Task 3 (amp_verdict)"
    require_callable(task, fn, "amp_verdict")
    course = "this is ampcourse.capstone.paired_verdict, the course's rule; write your own (the task is the rule)."
    unwrapped = getattr(fn, "__wrapped__", fn)
    referenced = inspect.getclosurevars(unwrapped).globals.values() if inspect.isfunction(unwrapped) else ()
    if fn is paired_verdict or unwrapped is paired_verdict or any(v is paired_verdict for v in referenced):
        raise fail(task, course)
    used: list[int] = []

    def spy(*args, **kwargs):
        used.append(1)
        return paired_verdict(*args, **kwargs)

    answers = []
    for fp32, amp, what in VERDICT_CASES:
        capstone.paired_verdict = spy  # an import inside the answer's body picks this up
        try:
            got = call(task, fn, "amp_verdict", list(fp32), list(amp))
        finally:
            capstone.paired_verdict = paired_verdict
        if used:
            raise fail(task, course)
        if not isinstance(got, str) or got not in ANSWERS:
            raise fail(task, f"return 'within noise', 'amp better' or 'amp worse' (for {what} you returned "
                             f"{got!r}).")
        answers.append(got)
    wants = [paired_verdict(fp32, amp) for fp32, amp, _ in VERDICT_CASES]
    if answers == wants:
        passed(task, f"{len(VERDICT_CASES)} comparisons judged right: paired by seed, mean difference against 2 "
                     "standard errors — a consistent 0.5-point gain is real even when seeds differ by 7 points, "
                     "and identical runs are noise.")
        return
    k = next(i for i, (got, want) in enumerate(zip(answers, wants, strict=True)) if got != want)
    context = f"for {VERDICT_CASES[k][2]} you said {answers[k]!r}, the course's rule says {wants[k]!r}"
    for rule, why in WRONG_RULES.values():
        if all(rule(fp32, amp) == got for (fp32, amp, _), got in zip(VERDICT_CASES, answers, strict=True)):
            raise fail(task, f"{context}: {why}.")
    raise fail(task, f"{context}. Pair the runs by seed and judge the mean difference against its standard error "
                     "(the hint below; its last tier states the rule).")


# --- tiered hints: shown one tier per failed check, or on request with `check.hint(task)` ---

HINTS = {
    'train_window': [
        ('This is lessons 04 and 05 put together, plus one new rule from lesson 09: when may the scheduler'
         ' step? For the record: what does `clip_grad_norm_` return, and what does an empty list of '
         'micro-batches leave your loop to do?'),
        ('Check micro_batches first (ValueError). Accumulate the window (loss / len(micro_batches) each, '
         'adding up loss.item()), unscale_ then clip — clip_grad_norm_ returns the norm before clipping — '
         'step and update through the scaler; a skipped step is one where the scale went down at update().'),
        ('if not micro_batches: raise ValueError(...micro_batches...); zero_grad; per micro-batch: '
         'autocast(dtype), loss = cross_entropy / len, scaler.scale(loss).backward(), total += loss.item(); '
         'unscale_; norm = clip_grad_norm_(...); before = scaler.get_scale(); scaler.step; scaler.update(); '
         'stepped = scaler.get_scale() >= before; if stepped: scheduler.step(); return {"stepped": stepped, '
         '"grad_norm": norm.item(), "loss": total}.'),
    ],
    'sample_weighted_window': [
        ("With micro-batches of 2, 7 and 3 rows, what weight does one row get if each micro-batch's mean "
         'loss is divided by 3?'),
        ('Weigh each micro-batch by its number of rows: take the *sum* of its per-row losses and divide by'
         ' the total number of rows in the window.'),
        ('rows = sum(len(y) for _, y in micro_batches); per micro-batch: autocast float16, '
         "F.cross_entropy(model(x), y, reduction='sum') / rows, scaler.scale(loss).backward(); then "
         'scaler.step, scaler.update.'),
    ],
    'amp_verdict': [
        ('The seeds differ by more than AMP and FP32 do. What do the two runs of one seed share, and how '
         'can you use that?'),
        ("Pair the runs by seed: the differences amp − fp32 cancel the seed's luck. Judge their mean "
         'against its standard error (the sample std / sqrt(n)), not against the spread of FP32 alone.'),
        (f"The course's rule (ampcourse.capstone.VERDICT_RULE): {VERDICT_RULE}. In code: d = [a - f for a, f in "
         "zip(amp, fp32)]; se = statistics.stdev(d) / sqrt(len(d)); 'within noise' if abs(mean(d)) <= 2 * se, "
         "else 'amp better' if mean(d) > 0 else 'amp worse'."),
    ],
}
hint = hints(__name__, HINTS)
