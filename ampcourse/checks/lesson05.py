"""Checks for exercise 05 (accumulation and clipping): accumulation with a remainder, clipping, resume.

Everything is observed through spies (:mod:`ampcourse.checks.spies`): the order of the scaler's calls,
the gradients the optimizer really steps with (compared with FP32 references), and the parameters and
scale after a resume.
"""

from __future__ import annotations

import copy
import math
import tempfile
from pathlib import Path

import torch
import torch.nn.functional as F

from ..device import pick_device
from . import CheckFailed, call, fail, hints, passed, require_callable
from .spies import SpyOptimizer, SpyScaler
from .tiny import cosine, grad_norm, micro_batches, require_clipped, tiny_model, window_mean_grads

SCALE = 2.0**10


def _ratio(seen, true):
    """How many times larger the learner's step gradient is than the reference (by norm)."""
    return grad_norm(seen) / grad_norm(true)


def _record_forward_dtypes(model: torch.nn.Module, device) -> tuple[list, list]:
    """Hook every Linear: the dtype each forward really produced (None: autocast was off). Returns (dtypes,
    hook handles)."""
    dtypes: list[torch.dtype | None] = []

    def hook(module, inputs, output):
        dtypes.append(output.dtype if torch.is_autocast_enabled(device.type) else None)

    handles = [m.register_forward_hook(hook) for m in model.modules() if isinstance(m, torch.nn.Linear)]
    return dtypes, handles


def _require_float16_autocast(task: str, forward_dtypes: list) -> None:
    if forward_dtypes and any(d is None for d in forward_dtypes):
        raise fail(task, "a forward pass ran outside autocast: run each micro-batch's forward pass and loss inside "
                         "`with torch.autocast(device_type=x.device.type, dtype=torch.float16)`.")
    if forward_dtypes and any(d != torch.float16 for d in forward_dtypes):
        raise fail(task, "autocast ran, but not in float16 (the CPU's default is bfloat16): pass "
                         "`dtype=torch.float16`, as the exercise asks.")


def _require_given_scaler(task: str, calls: list[str]) -> None:
    if "scale" not in calls:
        raise fail(task, "the `scaler` you were given never scaled a loss: use it (`scaler.scale(loss).backward()`, "
                         "`scaler.step(optimizer)`, `scaler.update()`) rather than a GradScaler of your own — the "
                         "caller's scaler carries the scale from one step to the next.")


# --- Task 1: accumulation with a remainder ----------------------------------------------------------------

def _run_epoch(fn, task, device, n_micro, accum):
    model = tiny_model(device)
    log: list[str] = []
    optimizer = SpyOptimizer(model.parameters(), log, lr=0.05)
    optimizer.stale_grad = 100.0 * SCALE
    # Dirty state: gradients already in .grad when train_epoch starts (a previous epoch's, an evaluation
    # pass's). A right answer zeroes them before the first window's backward; one that zeroes only after
    # each step carries them into its first step.
    for p in model.parameters():
        p.grad = torch.full_like(p, 100.0 * SCALE)
    scaler = SpyScaler(log, device.type, init_scale=SCALE, growth_interval=10_000)
    batches = micro_batches(device, n_micro)
    params_before_each_step = []
    forward_dtypes, _ = _record_forward_dtypes(model, device)

    original_step = optimizer.step

    def recording_step(closure=None):
        params_before_each_step.append(copy.deepcopy(model))
        return original_step(closure)

    optimizer.step = recording_step
    try:
        call(task, fn, "train_epoch", model, F.cross_entropy, optimizer, scaler, batches, accum)
    except CheckFailed:
        calls = [e for e in log if e != "zero_grad"]
        if "update" in calls and ("scaler.step" not in calls or calls.index("update") < calls.index("scaler.step")):
            raise fail(task, "`scaler.update()` ran inside the accumulation window (torch refuses an update before "
                             "any step): the scale must not change between the micro-batches of one window. Call "
                             "it once, after `scaler.step(optimizer)`.") from None
        if calls.count("unscale_") > calls.count("scaler.step") + 1:
            raise fail(task, "you called `scaler.unscale_` in every micro-batch: torch refuses a second "
                             "unscale_ before update(). Unscale once per window, just before the optimizer "
                             "step.") from None
        raise
    for m in params_before_each_step:  # the copies carry the hooks: drop them before the references run
        for module in m.modules():
            module._forward_hooks.clear()
    return log, optimizer, batches, params_before_each_step, forward_dtypes


def _zero_grad_inside(log: list[str]) -> bool:
    """zero_grad between two backward passes (``scale`` calls) with no optimizer step between them."""
    calls = [e for e in log if e in ("scale", "zero_grad", "scaler.step", "optimizer.step (direct)")]
    return any(c == "zero_grad" and calls[i - 1] == "scale" and calls[i + 1] == "scale"
               for i, c in enumerate(calls[1:-1], 1))


# (micro-batches, accum_steps): windows 4, 4, 2 and windows 3, 3, 1 (a window that is not a power of two, a
# last window of one micro-batch)
EPOCHS = ((10, 4), (7, 3))


def _windows_text(n_micro: int, accum: int) -> str:
    return ", ".join(str(min(accum, n_micro - i)) for i in range(0, n_micro, accum))


def _check_epoch(fn, task, device, n_micro, accum) -> None:
    log, optimizer, batches, models, forward_dtypes = _run_epoch(fn, task, device, n_micro, accum)
    windows = [batches[i:i + accum] for i in range(0, n_micro, accum)]
    steps = optimizer.grads_at_step
    calls = [e for e in log if e != "zero_grad"]
    _require_float16_autocast(task, forward_dtypes)
    _require_given_scaler(task, calls)
    if 0 < calls.count("scale") == len(steps) < n_micro:
        raise fail(task, f"{calls.count('scale')} backward passes for {n_micro} micro-batches: you summed a window's "
                         "losses and ran one backward. Accumulation exists so that only one micro-batch's activations "
                         "are alive at a time: run `scaler.scale(loss).backward()` once per micro-batch.")
    if _zero_grad_inside(log):
        raise fail(task, "`optimizer.zero_grad()` ran between the micro-batches of a window: it wipes the gradients "
                         "accumulated so far, so each step sees only the last micro-batch. Zero once per window, "
                         "before its first backward.")
    if "optimizer.step (direct)" in calls:
        raise fail(task, "you called `optimizer.step()` yourself: step through `scaler.step(optimizer)`.")
    if len(steps) == n_micro:
        raise fail(task, f"the optimizer stepped after every micro-batch ({n_micro} steps): step once per window "
                         f"of {accum} micro-batches, after accumulating their gradients.")
    if len(steps) == n_micro // accum:
        raise fail(task, f"the last {n_micro % accum} micro-batches were dropped: {n_micro} micro-batches in "
                         f"windows of {accum} make {math.ceil(n_micro / accum)} steps — the remainder is a short "
                         "last window.")
    if len(steps) != len(windows):
        raise fail(task, f"expected {len(windows)} optimizer steps for {n_micro} micro-batches in windows of {accum}, "
                         f"saw {len(steps)}.")
    for number, (window, seen, model) in enumerate(zip(windows, steps, models, strict=True)):
        want = window_mean_grads(model, window)
        ratio = _ratio(seen, want)
        if ratio > 50:
            if number == 0 and "zero_grad" in log:
                raise fail(task, "the first step also carried gradients that were in `.grad` before `train_epoch` "
                                 "started (the check planted some): you zero the gradients only *after* each step. "
                                 "Zero them at the start of each window, before its first backward — lesson 04's "
                                 "Task 1 asks the same.")
            raise fail(task, "gradients from before this window were still there: call `optimizer.zero_grad()` "
                             "at the start of each window, before its first backward.")
        last = number == len(windows) - 1
        aligned = cosine(seen, want) > 0.99
        if abs(ratio - 1) < 0.05 and aligned:
            continue
        if abs(ratio - 1) < 0.05:
            raise fail(task, f"window {number + 1}: the step gradient has the right size but points elsewhere "
                             "(cosine < 0.99): it is not the mean gradient of the window's micro-batches. Run one "
                             "backward per micro-batch of the window, on that micro-batch's loss.")
        if len(window) > 1 and abs(ratio - len(window)) < 0.05 * len(window):
            raise fail(task, f"the step gradient is {ratio:.2f}× too large: you did not divide each micro-batch "
                             "loss by the number of micro-batches in the window.")
        if last and len(window) < accum and abs(ratio - len(window) / accum) < 0.05:
            raise fail(task, f"the last, short window ({len(window)} micro-batches) was divided by {accum}, the "
                             f"full count, so its gradient came out {ratio:.2f}× too small: divide it by its own "
                             "size.")
        if ratio < 0.1 and aligned:
            raise fail(task, f"window {number + 1}: the step gradient is {ratio:.2g}× the window's mean gradient, "
                             "though it points the right way: something shrank all the gradients by one factor. A "
                             "`clip_grad_norm_` on gradients still multiplied by the scale does that (its threshold "
                             "meets S × the norm). This task does not clip; wherever you clip, call "
                             "`scaler.unscale_(optimizer)` first.")
        raise fail(task, f"window {number + 1}: the step gradient is {ratio:.3g}× the right one; each micro-batch "
                         "loss should be divided by the number of micro-batches in its window.")
    if calls.count("update") != len(windows):
        raise fail(task, f"`scaler.update()` should run once per optimizer step ({len(windows)} times); it ran "
                         f"{calls.count('update')} times.")


def train_epoch(fn) -> None:
    """Task 1: ``train_epoch(model, loss_fn, optimizer, scaler, batches, accum_steps)`` accumulates with AMP."""
    task = "Task 1 (train_epoch)"
    require_callable(task, fn, "train_epoch")
    device = pick_device()
    for n_micro, accum in EPOCHS:
        _check_epoch(fn, task, device, n_micro, accum)
    shown = " and ".join(f"{n} micro-batches in windows of {a} (windows {_windows_text(n, a)})" for n, a in EPOCHS)
    passed(task, f"{shown}: one step per window with the window's mean gradient, gradients left in .grad before "
                 "the epoch cleared first, one scaler.update() per step.")


# --- Task 2: clipping -------------------------------------------------------------------------------------

def _clip_case(fn, task, device, divisor):
    """One clipped_step call with stale gradients planted; returns (log, stepped grads, true grads, max_norm)."""
    model = tiny_model(device)
    log: list[str] = []
    optimizer = SpyOptimizer(model.parameters(), log, lr=0.05)
    scaler = SpyScaler(log, device.type, init_scale=SCALE, growth_interval=10_000)
    (x, y), = micro_batches(device, 1, size=8)
    true = window_mean_grads(model, [(x, y)])
    max_norm = grad_norm(true) / divisor
    for p in model.parameters():  # dirty state: last step's gradients, still in .grad
        p.grad = torch.full_like(p, 100.0 * SCALE)
    forward_dtypes, handles = _record_forward_dtypes(model, device)
    try:
        call(task, fn, "clipped_step", model, F.cross_entropy, optimizer, scaler, x, y, max_norm)
    except CheckFailed:
        if log.count("unscale_") >= 2:
            raise fail(task, "you called `scaler.unscale_(optimizer)` twice in one step: torch refuses. Unscale once, "
                             "then clip; `scaler.step` knows the gradients are already unscaled.") from None
        raise
    finally:
        for handle in handles:
            handle.remove()
    _require_float16_autocast(task, forward_dtypes)
    _require_given_scaler(task, log)
    if "optimizer.step (direct)" in log:
        raise fail(task, "you called `optimizer.step()` yourself: step through `scaler.step(optimizer)`, which "
                         "skips the step if the gradients hold inf/NaN.")
    if not optimizer.grads_at_step:
        raise fail(task, "the optimizer never stepped: call `scaler.step(optimizer)` after clipping.")
    if "update" not in log:
        raise fail(task, "you forgot `scaler.update()` after `scaler.step(optimizer)`.")
    seen = optimizer.grads_at_step[0]
    after = [p.grad for p in model.parameters()]
    if (all(g is not None for g in after) and grad_norm(seen) > 1.05 * max_norm
            and grad_norm(after) <= 1.01 * max_norm and cosine(after, seen) > 0.99):
        raise fail(task, f"the optimizer stepped with gradients of norm {grad_norm(seen):.3g}, above max_norm = "
                         f"{max_norm:.3g}; they were clipped only afterwards, when the step was already taken. Clip "
                         "before `scaler.step(optimizer)`: `unscale_`, then `clip_grad_norm_`, then the step.")
    stale = [t + 100.0 for t in true]
    if cosine(seen, true) < 0.99 and cosine(seen, stale) > 0.99:
        raise fail(task, "the step used gradients left in `.grad` by an earlier step (the check planted some) plus "
                         "this step's: call `optimizer.zero_grad()` at the start of the step.")
    return log, seen, true, max_norm


def clipped_step(fn) -> None:
    """Task 2: ``clipped_step(model, loss_fn, optimizer, scaler, x, y, max_norm)`` clips the true gradients."""
    task = "Task 2 (clipped_step)"
    require_callable(task, fn, "clipped_step")
    device = pick_device()
    log, seen, true, max_norm = _clip_case(fn, task, device, divisor=4)  # the clip must fire
    total = grad_norm(seen)
    if total > 1.05 * max_norm:
        per_parameter = [grad_norm([g]) for g in seen]
        if max(per_parameter) <= 1.01 * max_norm and any(n >= 0.99 * max_norm for n in per_parameter):
            raise fail(task, f"each parameter's gradient has norm at most max_norm = {max_norm:.3g}, but together "
                             f"they have norm {total:.3g}: you clipped each parameter separately (`clip_grad_norm_` "
                             "called once per parameter). Clip them all at once, "
                             "`clip_grad_norm_(model.parameters(), max_norm)`: one factor for the total norm.")
        largest = max(g.abs().max().item() for g in seen)
        if abs(largest - max_norm) <= 0.01 * max_norm:
            raise fail(task, f"no gradient value exceeds max_norm = {max_norm:.3g}, but the total norm is {total:.3g}: "
                             "`clip_grad_value_` caps single values, not the norm: clip the *total* norm with "
                             "`clip_grad_norm_(model.parameters(), max_norm)`.")
    require_clipped(task, seen, max_norm, SCALE, log)
    if cosine(seen, true) < 0.99:
        raise fail(task, "the clipped gradients point in another direction than the true ones: "
                         "`clip_grad_norm_` scales all of them by one factor; clipping each parameter (or each "
                         "value) separately changes the direction.")
    log, seen, true, max_norm = _clip_case(fn, task, device, divisor=0.25)  # true norm 4× below max_norm
    ratio = grad_norm(seen) / grad_norm(true)
    if abs(ratio - 1) > 0.05 or cosine(seen, true) < 0.99:
        if abs(grad_norm(seen) - max_norm) < 0.05 * max_norm:
            raise fail(task, f"the true norm ({grad_norm(true):.3g}) was already below max_norm ({max_norm:.3g}), "
                             "yet the optimizer stepped with norm max_norm: you rescaled the gradients to max_norm "
                             "instead of capping them. Clipping only shrinks: `clip_grad_norm_` leaves gradients "
                             "below the threshold alone.")
        raise fail(task, f"the true norm ({grad_norm(true):.3g}) was already below max_norm ({max_norm:.3g}), so "
                         f"the step should use the true gradients; it used {ratio:.3g}× them. Unscale, then "
                         "`clip_grad_norm_(model.parameters(), max_norm)`, which leaves small gradients alone.")
    passed(task, "the true (unscaled) gradients were clipped to max_norm — after unscale_, before the step; gradients "
                 "already below max_norm were left alone; gradients left from an earlier step were cleared; the "
                 "step and the scale update followed.")


# --- Task 3: checkpoint and resume ------------------------------------------------------------------------

def _objects(device):
    """Model (with buffers: a BatchNorm's running statistics), SGD with momentum, a scaler that moves."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(3)
        model = torch.nn.Sequential(torch.nn.BatchNorm1d(6), torch.nn.Linear(6, 8), torch.nn.Tanh(),
                                    torch.nn.Linear(8, 3)).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    scaler = torch.amp.GradScaler(device.type, init_scale=2.0**14, growth_interval=3)
    return model, optimizer, scaler


def _train(model, optimizer, scaler, batches, device):
    for x, y in batches:
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast(device_type=device.type, dtype=torch.float16):
            loss = F.cross_entropy(model(x), y)
        # × 50: some steps overflow in fp16 and are skipped, so the scale moves both ways (tests check it does).
        scaler.scale(loss * 50).backward()
        scaler.step(optimizer)
        scaler.update()


def _differs(a: dict, b: dict) -> list[str]:
    return [name for name in a if not torch.equal(a[name], b[name])]


def _walk(obj, depth=0):
    """Everything in a loaded checkpoint: the object, and (a few levels down) what its dicts, lists hold."""
    yield obj
    if depth < 4 and isinstance(obj, dict):
        for value in obj.values():
            yield from _walk(value, depth + 1)
    elif depth < 4 and isinstance(obj, (list, tuple)):
        for value in obj:
            yield from _walk(value, depth + 1)


def _same_tensors(state, want: dict) -> bool:
    return (isinstance(state, dict) and set(want) <= set(state)
            and all(isinstance(state[k], torch.Tensor) and torch.equal(state[k].cpu(), v.cpu())
                    for k, v in want.items()))


def _what_file_holds(path, saved_model: dict, saved_scaler: dict) -> dict[str, str | None]:
    """What the learner's checkpoint file holds, by kind: None (not there), "state" (a state_dict) or "object" (the
    whole model / optimizer / scaler pickled). Tells "not saved" from "saved, but not loaded into this object"."""
    found: dict[str, str | None] = {"model": None, "optimizer": None, "scaler": None}
    try:
        content = torch.load(path, map_location="cpu", weights_only=False)
    except Exception:  # noqa: BLE001 - unreadable: say nothing about what it holds
        return found
    for item in _walk(content):
        if isinstance(item, torch.nn.Module) and _same_tensors(item.state_dict(), saved_model):
            found["model"] = "object"
        elif isinstance(item, torch.optim.Optimizer):
            found["optimizer"] = "object"
        elif isinstance(item, torch.amp.GradScaler) and item.state_dict() == saved_scaler:
            found["scaler"] = "object"
        elif isinstance(item, dict):
            if found["model"] is None and _same_tensors(item, saved_model):
                found["model"] = "state"
            if found["optimizer"] is None and {"state", "param_groups"} <= set(item):
                found["optimizer"] = "state"
            if found["scaler"] is None and saved_scaler and all(
                    not isinstance(item.get(k), torch.Tensor) and item.get(k) == v for k, v in saved_scaler.items()):
                found["scaler"] = "state"
    return found


def _not_loaded(task: str, kind: str, how: str, method: str):
    """The state is in the file, but the object passed to load_checkpoint did not receive it."""
    whole = (f" You pickled the whole {kind}; loading it makes a *new* object — copy its state over with "
             f"`{kind}.{method}(saved.state_dict())`, or better save `{kind}.state_dict()`." if how == "object" else "")
    return fail(task, f"your checkpoint holds the {kind}'s state, but the `{kind}` passed to load_checkpoint did not "
                      f"get it: `{kind}.{method}(...)` was never called on that object — perhaps on another one: "
                      f"assigning to the name inside the function (`{kind} = ...`, a new object or the loaded one) "
                      f"only rebinds a local name, the caller's object is unchanged. Call `{kind}.{method}(...)` on "
                      f"the object you were given.{whole}")


def checkpoint(save_fn, load_fn) -> None:
    """Task 3: ``save_checkpoint(path, model, optimizer, scaler)`` / ``load_checkpoint(path, ...)`` resume exactly."""
    task = "Task 3 (checkpoint)"
    require_callable(task, save_fn, "save_checkpoint")
    require_callable(task, load_fn, "load_checkpoint")
    device = pick_device()
    batches = micro_batches(device, 12, size=8, seed=5)
    straight = _objects(device)
    _train(*straight, batches, device)

    first = _objects(device)
    _train(*first, batches[:6], device)
    saved_scaler = first[2].state_dict()
    saved_model = {k: v.clone() for k, v in first[0].state_dict().items()}
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "checkpoint.pt"
        call(task, save_fn, "save_checkpoint", path, *first)
        if not path.exists():
            raise fail(task, f"save_checkpoint wrote nothing at the path it was given ({path.name}).")
        # Dirty state: the objects loaded into have trained already (another run's weights, momentum, scale and
        # growth tracker), so whatever load_checkpoint does not restore shows.
        resumed = _objects(device)
        _train(*resumed, micro_batches(device, 2, size=8, seed=9), device)  # scale 4096, tracker 0
        call(task, load_fn, "load_checkpoint", path, *resumed)
        holds = _what_file_holds(path, saved_model, saved_scaler)
    loaded = resumed[2].state_dict()
    if loaded != saved_scaler and holds["scaler"]:
        raise _not_loaded(task, "scaler", holds["scaler"], "load_state_dict")
    if loaded.get("scale") != saved_scaler["scale"]:
        raise fail(task, f"after loading, the scaler's scale is {resumed[2].get_scale():g}, but it was "
                         f"{saved_scaler['scale']:g} when you saved: you saved the model but not the scaler. Put "
                         "`scaler.state_dict()` in the checkpoint and `scaler.load_state_dict(...)` it back.")
    if loaded != saved_scaler:
        lost = [k for k in saved_scaler if loaded.get(k) != saved_scaler[k]]
        got = ", ".join(f"{k} = {loaded.get(k)}" for k in lost)
        want = ", ".join(f"{saved_scaler[k]}" for k in lost)
        raise fail(task, f"after loading, the scaler's scale is right but {got}, not {want} "
                         "as when you saved: the growth tracker counts the clean steps since the last change, so "
                         "the resumed run would grow the scale at another step. Save and load the whole "
                         "`scaler.state_dict()`, not only the scale.")
    now = resumed[0].state_dict()
    params = {name for name, _ in first[0].named_parameters()}
    wrong = _differs(saved_model, now)
    if wrong and holds["model"]:
        raise _not_loaded(task, "model", holds["model"], "load_state_dict")
    if any(name not in params for name in wrong) and not any(name in params for name in wrong):
        raise fail(task, f"after loading, the parameters match but the model's buffers ({', '.join(wrong)}: the "
                         "BatchNorm running statistics) do not: you saved only the parameters. Save "
                         "`model.state_dict()`, which holds parameters *and* buffers, and load it with "
                         "`model.load_state_dict(...)` (strict, the default).")
    if wrong:
        raise fail(task, "after loading, the model's parameters differ from the saved ones: save "
                         "`model.state_dict()` and restore it with `model.load_state_dict(...)`.")
    _train(*resumed, batches[6:], device)
    same_params = all(torch.equal(a, b) for a, b in zip(straight[0].state_dict().values(),
                                                        resumed[0].state_dict().values(), strict=True))
    if not same_params and holds["optimizer"]:
        raise fail(task, "the resumed run drifted from the uninterrupted one although model and scaler match, and "
                         "your checkpoint holds an optimizer state: the optimizer passed to load_checkpoint never got "
                         "it (SGD momentum lost) — it was not loaded, or loaded into another object (assigning a new "
                         "or loaded optimizer to the name inside the function only rebinds a local name). Call "
                         "`optimizer.load_state_dict(...)` on the optimizer you were given.")
    if not same_params:
        raise fail(task, "the resumed run drifted from the uninterrupted one although model and scaler match: the "
                         "optimizer's state (SGD momentum) was not restored. Save `optimizer.state_dict()` too, and "
                         "load it back.")
    if resumed[2].state_dict() != straight[2].state_dict():
        raise fail(task, "the resumed run's scaler state differs from the uninterrupted run's: restore the whole "
                         "`scaler.state_dict()` (it includes the growth tracker).")
    passed(task, "6 steps + save + load into objects that had trained elsewhere + 6 steps gave the same parameters, "
                 "buffers and scaler state (scale and growth tracker), bit for bit, as 12 steps without stopping.")


# --- Task 4: diagnose clipping from the norms ----------------------------------------------------------------------

# (variant, true norm / max_norm, loss factor, scale): the right step and the two classic wrong ones; a step whose
# gradients needed no clipping; norms far from 1 both ways (loss × 1000, loss × 1e-3), a scale below 1 and 2**16.
CLIP_EVIDENCE = (
    ("right", 4, 1.0, SCALE), ("not clipped", 4, 1.0, SCALE), ("clipped before unscale_", 4, 1.0, SCALE),
    ("right", 0.5, 1.0, SCALE),
    ("clipped before unscale_", 4, 30.0, SCALE), ("right", 4, 1e3, 2.0**-2), ("not clipped", 4, 1e-3, SCALE),
    ("right", 0.5, 1e-3, 2.0**16),
)


def _clipping_evidence(device) -> list[tuple[float, float, float, float, str]]:
    """(true norm, stepped norm, max_norm, scale, verdict) measured by running the right step and the two classic
    wrong ones on the tiny model."""
    cases = []
    for variant, divisor, factor, scale in CLIP_EVIDENCE:
        model = tiny_model(device, seed=7)
        log: list[str] = []
        optimizer = SpyOptimizer(model.parameters(), log, lr=0.05)
        scaler = SpyScaler(log, device.type, init_scale=scale, growth_interval=10_000)
        (x, y), = micro_batches(device, 1, size=8, seed=8)
        true_norm = factor * grad_norm(window_mean_grads(model, [(x, y)]))
        max_norm = true_norm / divisor
        optimizer.zero_grad()
        with torch.autocast(device_type=device.type, dtype=torch.float16):
            loss = F.cross_entropy(model(x), y) * factor
        scaler.scale(loss).backward()
        if variant == "right":
            scaler.unscale_(optimizer)
        if variant != "not clipped":
            torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
        scaler.step(optimizer)
        scaler.update()
        cases.append((true_norm, grad_norm(optimizer.grads_at_step[0]), max_norm, scale, variant))
    return cases


def diagnose_clipping(fn) -> None:
    """Task 4: ``diagnose_clipping(true_norm, stepped_norm, max_norm, scale)`` names what a clipped step did."""
    task = "Task 4 (diagnose_clipping)"
    require_callable(task, fn, "diagnose_clipping")
    labels = ("right", "not clipped", "clipped before unscale_")
    for true_norm, stepped, max_norm, scale, want in _clipping_evidence(pick_device()):
        got = call(task, fn, "diagnose_clipping", true_norm, stepped, max_norm, scale)
        if got not in labels:
            raise fail(task, f"return one of {', '.join(map(repr, labels))} (you returned {got!r}).")
        if got == want:
            continue
        context = (f"true norm {true_norm:.4g}, the optimizer stepped with {stepped:.4g}, max_norm {max_norm:.4g}, "
                   f"scale {scale:g}: you said {got!r}, the run was {want!r}")
        far = not 0.01 < max_norm < 100
        near = abs(stepped - min(true_norm, max_norm)) <= 0.05  # what a fixed tolerance would say
        if far and ((got == "right" and near) or (want == "right" and not near)):
            raise fail(task, f"{context}. These norms are far from 1, so an absolute tolerance (abs(a - b) < a fixed "
                             "number) says 'close' to everything small and 'different' to everything large: compare "
                             "with a relative tolerance, abs(a - b) <= 0.05 * b.")
        if want == "right" and true_norm < max_norm:
            raise fail(task, f"{context}. When the true norm is already below max_norm, clipping leaves the gradients "
                             "alone: stepping with the true norm is right.")
        if want == "right":
            raise fail(task, f"{context}. The stepped norm equals max_norm up to rounding: compare with a tolerance "
                             "(a few %), never with ==.")
        if want == "clipped before unscale_":
            raise fail(task, f"{context}. The stepped norm is max_norm / scale: the threshold was applied to "
                             "gradients still multiplied by the scale.")
        raise fail(task, f"{context}. The stepped norm equals the true norm, above max_norm: nothing clipped.")
    passed(task, f"{len(CLIP_EVIDENCE)} measured steps diagnosed right from their norms: clipped right, not clipped, "
                 "clipped before unscale_ (norm max_norm / scale), steps that needed no clipping, norms far from 1 "
                 "both ways, a scale below 1.")


# --- tiered hints: shown one tier per failed check, or on request with `check.hint(task)` ---

HINTS = {
    'train_epoch': [
        ('How many micro-batches does the last window hold when len(batches) is not a multiple of '
         "accum_steps? Lesson 05's remainder report measures the error of getting it wrong."),
        ("Zero the gradients at the start of each window (not per micro-batch, not only after the step); "
         "divide each micro-batch's loss by the length of its own window; step and update once per window."),
        ('for start in range(0, len(batches), accum_steps): window = batches[start:start + accum_steps]; '
         'zero_grad; per (x, y): autocast float16, loss / len(window), scaler.scale(loss).backward(); then'
         ' scaler.step, scaler.update.'),
    ],
    'clipped_step': [
        ('After backward the gradients are multiplied by the scale. What must happen before a threshold '
         'about the true gradients makes sense? (lesson 05, clipping)'),
        ('The scaler has a method that divides the gradients by the scale in place before the step, and '
         'tells `scaler.step` not to do it again.'),
        ('scale(loss).backward(); scaler.unscale_(optimizer); '
         'torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm); scaler.step(optimizer); '
         'scaler.update().'),
    ],
    'checkpoint': [
        ("Three objects carry state that changes during training. Which three? (Lesson 05's resume "
         'section.)'),
        ('Each of model, optimizer (momentum buffers) and scaler (scale, growth tracker) has '
         '`state_dict()` and `load_state_dict()`.'),
        ("save: torch.save({'model': model.state_dict(), 'optimizer': optimizer.state_dict(), 'scaler': "
         'scaler.state_dict()}, path); load: torch.load(path), then load_state_dict on each.'),
    ],
    'diagnose_clipping': [
        ('For each verdict, what stepped norm would you expect? Express it with true_norm, max_norm and '
         'scale.'),
        ('Right: min(true_norm, max_norm). Clipped before unscale_: the threshold met gradients × scale, '
         'so the step ends at max_norm / scale. Not clipped: true_norm although it is above max_norm. '
         'Compare with a relative tolerance.'),
        ("close(a, b) = abs(a - b) <= 0.05 * b; 'right' if close(stepped, min(true, max_norm)); 'clipped "
         "before unscale_' if close(stepped, max_norm / scale); else 'not clipped'."),
    ],
}
hint = hints(__name__, HINTS)
