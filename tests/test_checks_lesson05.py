"""Exercise 05: the checks pass right answers and name each typical wrong one (the fixtures)."""

import grader_fixtures
import pytest
import torch

from ampcourse.checks import NotStarted, lesson05


def _forward(model, loss_fn, x, y):
    with torch.autocast(device_type=x.device.type, dtype=torch.float16):
        return loss_fn(model(x), y)


def epoch(divide="own", update_inside=False, unscale_each=False, step_each=False, zero_grad=True,
          drop_remainder=False, zero_inside=False, dtype=torch.float16, summed=False, zero_at_end=False,
          clip_scaled=False, own_scaler=False):
    def train_epoch(model, loss_fn, optimizer, scaler, batches, accum_steps):
        if own_scaler:
            scaler = torch.amp.GradScaler(batches[0][0].device.type, init_scale=2.0**10)
        windows = [batches[i:i + accum_steps] for i in range(0, len(batches), accum_steps)]
        if drop_remainder:
            windows = [w for w in windows if len(w) == accum_steps]
        for window in windows:
            if zero_grad and not zero_at_end:
                optimizer.zero_grad(set_to_none=True)
            if summed:
                total = 0
                for x, y in window:
                    with torch.autocast(device_type=x.device.type, dtype=torch.float16):
                        total = total + loss_fn(model(x), y) / len(window)
                scaler.scale(total).backward()
                scaler.step(optimizer)
                scaler.update()
                continue
            for x, y in window:
                if zero_inside:
                    optimizer.zero_grad()
                if dtype is None:
                    loss = loss_fn(model(x), y)
                else:
                    with torch.amp.autocast(device_type=x.device.type, dtype=dtype):
                        loss = loss_fn(model(x), y)
                if divide == "own":
                    loss = loss / len(window)
                elif divide == "full":
                    loss = loss / accum_steps
                scaler.scale(loss).backward()
                if unscale_each:
                    scaler.unscale_(optimizer)
                if update_inside:
                    scaler.update()
                if step_each:
                    scaler.step(optimizer)
                    scaler.update()
            if clip_scaled:  # an extra clip, on gradients still multiplied by the scale
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            if not step_each:
                scaler.step(optimizer)
                scaler.update()
            if zero_at_end:
                optimizer.zero_grad(set_to_none=False)
    return train_epoch


def clipped(order="right", clip=True, how="norm", zero_grad=True, dtype=torch.float16, own_scaler=False,
            float_loss=False):
    def clipped_step(model, loss_fn, optimizer, scaler, x, y, max_norm):
        if own_scaler:  # review 0506 E4: a GradScaler of its own, the given one never used
            scaler = torch.amp.GradScaler(x.device.type)
        if zero_grad:
            optimizer.zero_grad(set_to_none=True)
        if dtype is None:
            loss = loss_fn(model(x), y)
        elif float_loss:  # autocast around the model only, the loss in float32: also right
            with torch.autocast(device_type=x.device.type, dtype=dtype):
                out = model(x)
            loss = loss_fn(out.float(), y)
        else:
            with torch.autocast(device_type=x.device.type, dtype=dtype):
                loss = loss_fn(model(x), y)
        scaler.scale(loss).backward()
        if order == "right":
            scaler.unscale_(optimizer)
        if clip and how == "norm" and order != "clip after step":
            torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
        elif clip and how == "foreach":
            torch.nn.utils.clip_grad_norm_(list(model.parameters()), max_norm, foreach=True)
        elif clip and how == "value":
            torch.nn.utils.clip_grad_value_(model.parameters(), max_norm)
        elif clip and how == "half":
            torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm / 2)
        elif clip and how == "normalise":  # rescales to max_norm even when the norm is below it
            norm = torch.sqrt(sum((p.grad ** 2).sum() for p in model.parameters()))
            for p in model.parameters():
                p.grad.mul_(max_norm / norm)
        elif clip and how == "split":  # the two-step API of torch 2.6+
            params = list(model.parameters())
            norm = torch.nn.utils.get_total_norm([p.grad for p in params])
            torch.nn.utils.clip_grads_with_norm_(params, max_norm, norm)
        elif clip and how == "manual":  # clip_grad_norm_ written out
            norm = torch.sqrt(sum((p.grad.double() ** 2).sum() for p in model.parameters()))
            coef = min(1.0, max_norm / (norm.item() + 1e-6))
            for p in model.parameters():
                p.grad.mul_(coef)
        elif clip and how == "per parameter":
            for p in model.parameters():
                torch.nn.utils.clip_grad_norm_([p], max_norm / 2)
        elif clip and how == "per parameter, max_norm":  # review 0506 M5: each parameter to max_norm itself
            for p in model.parameters():
                torch.nn.utils.clip_grad_norm_([p], max_norm)
        if order == "clip after step":  # unscale_, step, then clip: the step used the unclipped gradients
            scaler.unscale_(optimizer)
            scaler.step(optimizer)
            torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
            scaler.update()
            return
        if order == "clip then unscale":
            scaler.unscale_(optimizer)
        if order == "twice":
            scaler.unscale_(optimizer)
            scaler.unscale_(optimizer)
        scaler.step(optimizer)
        scaler.update()
    return clipped_step


def saver(with_scaler=True, with_optimizer=True, params_only=False, scale_only=False):
    def save_checkpoint(path, model, optimizer, scaler):
        state = {"model": dict(model.named_parameters()) if params_only else model.state_dict()}
        if scale_only:
            state["scale"] = scaler.get_scale()
        if with_optimizer:
            state["optimizer"] = optimizer.state_dict()
        if with_scaler:
            state["scaler"] = scaler.state_dict()
        torch.save(state, path)
    return save_checkpoint


def loader(strict=True, optimizer_too=True, scale_by="state_dict", scaler_too=True):
    def load_checkpoint(path, model, optimizer, scaler):
        state = torch.load(path)
        model.load_state_dict(state["model"], strict=strict)
        if "optimizer" in state and optimizer_too:
            optimizer.load_state_dict(state["optimizer"])
        if "scaler" in state and scaler_too:
            scaler.load_state_dict(state["scaler"])
        if "scale" in state and scale_by == "state_dict":  # the review's answer: the scale, tracker reset to 0
            scaler.load_state_dict({**scaler.state_dict(), "scale": state["scale"], "_growth_tracker": 0})
        if "scale" in state and scale_by == "update":  # the scale through update(new_scale): tracker left as is
            scaler.update(new_scale=state["scale"])
    return load_checkpoint


load_checkpoint = loader()


# review 0506 E3: the state is saved, but load_checkpoint only rebinds its local names
def save_objects(path, model, optimizer, scaler):
    torch.save({"model": model, "optimizer": optimizer, "scaler": scaler}, path)


def load_by_rebinding(path, model, optimizer, scaler):
    state = torch.load(path, weights_only=False)
    model, optimizer, scaler = state["model"], state["optimizer"], state["scaler"]  # noqa: F841


def load_into_new_scaler(path, model, optimizer, scaler):
    state = torch.load(path)
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    scaler = torch.amp.GradScaler(next(model.parameters()).device.type)
    scaler.load_state_dict(state["scaler"])


def load_into_rebuilt_optimizer(path, model, optimizer, scaler):
    state = torch.load(path)
    model.load_state_dict(state["model"])
    scaler.load_state_dict(state["scaler"])
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    optimizer.load_state_dict(state["optimizer"])


def load_objects_properly(path, model, optimizer, scaler):
    """Whole objects pickled, their state copied into the given ones: also right."""
    state = torch.load(path, weights_only=False)
    model.load_state_dict(state["model"].state_dict())
    optimizer.load_state_dict(state["optimizer"].state_dict())
    scaler.load_state_dict(state["scaler"].state_dict())


def save_other_keys(path, model, optimizer, scaler):
    """Other keys, copies, a tuple: also right."""
    torch.save((model.state_dict(), optimizer.state_dict(), dict(scaler.state_dict())), path)


def load_other_keys(path, model, optimizer, scaler):
    model_state, optimizer_state, scaler_state = torch.load(path, map_location="cpu", weights_only=True)
    model.load_state_dict(model_state)
    optimizer.load_state_dict(optimizer_state)
    scaler.load_state_dict(scaler_state)


def epoch_by_index(model, loss_fn, optimizer, scaler, batches, accum_steps):
    """One loop over the micro-batches, stepping at each window's end: also right."""
    optimizer.zero_grad(set_to_none=False)
    for i, (x, y) in enumerate(batches):
        start = i - i % accum_steps
        size = min(accum_steps, len(batches) - start)
        with torch.autocast(device_type=x.device.type, dtype=torch.float16):
            loss = loss_fn(model(x), y)
        scaler.scale(loss / size).backward()
        if i == start + size - 1:
            scaler.step(optimizer)
            scaler.update()
            optimizer.zero_grad(set_to_none=False)


# --- Task 4: diagnose_clipping ------------------------------------------------------------------------------------
def diagnose_right(true_norm, stepped, max_norm, scale):
    def close(a, b):
        return abs(a - b) <= 0.05 * b
    if close(stepped, min(true_norm, max_norm)):
        return "right"
    if close(stepped, max_norm / scale):
        return "clipped before unscale_"
    return "not clipped"


def diagnose_by_ratio(true_norm, stepped, max_norm, scale):
    """Ratios against what each verdict predicts, with math.isclose: also right."""
    import math
    if math.isclose(stepped, min(true_norm, max_norm), rel_tol=0.03):
        return "right"
    if math.isclose(stepped * scale, max_norm, rel_tol=0.03):
        return "clipped before unscale_"
    return "not clipped"


def absolute_tolerance(true_norm, stepped, max_norm, scale):
    if abs(stepped - min(true_norm, max_norm)) <= 0.05:
        return "right"
    if abs(stepped - max_norm / scale) <= 0.05:
        return "clipped before unscale_"
    return "not clipped"


DIAGNOSE_MISTAKES = {
    "exact comparison": (lambda t, s, m, sc: "right" if s == m or s == t < m else
                         ("clipped before unscale_" if s < m / 10 else "not clipped"), "never with =="),
    "small gradients called not clipped": (lambda t, s, m, sc: "right" if abs(s - m) < 0.05 * m else
                                           ("clipped before unscale_" if s < m / 10 else "not clipped"),
                                           "already below max_norm"),
    "before unscale_ taken for not clipped": (lambda t, s, m, sc: diagnose_right(t, s, m, sc).replace(
        "clipped before unscale_", "not clipped"), "max_norm / scale"),
    "bad label": (lambda t, s, m, sc: "ok", "return one of"),
    "absolute tolerance": (absolute_tolerance, "relative tolerance"),
    "stepped == true norm called right": (lambda t, s, m, sc: "right" if abs(s - t) <= 0.05 * t else
                                          diagnose_right(t, s, m, sc), "nothing clipped"),
    # review 0506 W2: another absolute tolerance; the message must not quote 0.05
    "absolute tolerance 1e-3": (lambda t, s, m, sc: "right" if abs(s - min(t, m)) < 1e-3 else
                                ("clipped before unscale_" if abs(s - m / sc) < 1e-3 else "not clipped"),
                                "an absolute tolerance (abs(a - b) < a fixed number)"),
}


WRONG = {
    ("05", "train_epoch"): {
        "loss not divided": (epoch(divide="none"), "did not divide each micro-batch loss"),
        "remainder divided by the full count": (epoch(divide="full"), "divided by 4, the full"),
        "update() inside the window": (epoch(update_inside=True), "ran inside the accumulation window"),
        "unscale_ in every micro-batch": (epoch(unscale_each=True), "unscale_` in every micro-batch"),
        "step every micro-batch": (epoch(step_each=True), "after every micro-batch"),
        "no zero_grad": (epoch(zero_grad=False), "call `optimizer.zero_grad()`"),
        "remainder dropped": (epoch(drop_remainder=True), "were dropped"),
        "zero_grad inside the micro-batch loop": (epoch(zero_inside=True), "ran between the micro-batches"),
        "no autocast": (epoch(dtype=None), "forward pass ran outside autocast"),
        "bfloat16 autocast": (epoch(dtype=torch.bfloat16), "not in float16"),
        "one backward of the summed window loss": (epoch(summed=True), "summed a window's losses"),
        # learner review: 04/1 refuses zero_grad at the end of the step; 05/1 now refuses it too
        "zero_grad only after each step": (epoch(zero_at_end=True), "only *after* each step"),
        # review r2 #23: an extra clip on the scaled gradients was blamed on the loss division
        "extra clip on the scaled gradients": (epoch(clip_scaled=True), "still multiplied by the scale"),
        "a GradScaler of its own": (epoch(own_scaler=True), "never scaled a loss"),
    },
    ("05", "clipped_step"): {
        "never unscale_": (clipped(order="clip first"), "you never called `scaler.unscale_"),
        "clip before unscale_": (clipped(order="clip then unscale"), "you clipped before `unscale_`"),
        "clip_grad_value_": (clipped(how="value"), "clip the *total* norm"),
        "half the threshold": (clipped(how="half"), "below max_norm"),
        "clipped per parameter": (clipped(how="per parameter"), "clipping each parameter"),
        "unscale_ twice": (clipped(order="twice"), "twice in one step"),
        "no clipping": (clipped(clip=False), "above max_norm"),
        "no zero_grad (stale gradients)": (clipped(zero_grad=False), "call `optimizer.zero_grad()` at the start"),
        "rescales small gradients up to max_norm": (clipped(how="normalise"), "instead of capping them"),
        # review 0506 E2, E4, M5
        "no autocast": (clipped(dtype=None), "forward pass ran outside autocast"),
        "bfloat16 autocast": (clipped(dtype=torch.bfloat16), "not in float16"),
        "a GradScaler of its own": (clipped(own_scaler=True), "never scaled a loss"),
        "each parameter clipped to max_norm": (clipped(how="per parameter, max_norm"), "clipped each parameter"),
        "clip after scaler.step (re-review)": (clipped(order="clip after step"), "clip before `scaler.step"),
    },
    ("05", "checkpoint"): {
        "model but not the scaler": ((saver(with_scaler=False), load_checkpoint), "you saved the model but not"),
        "no optimizer state": ((saver(with_optimizer=False), load_checkpoint), "optimizer's state"),
        "optimizer saved, never loaded": ((saver(), loader(optimizer_too=False)), "never got it"),
        # review r2 #4: the scale alone, growth tracker reset: bit-identical parameters, so it used to pass
        "scale only, growth tracker reset": ((saver(with_scaler=False, scale_only=True), load_checkpoint),
                                             "_growth_tracker"),
        "scale only, through update(new_scale)": ((saver(with_scaler=False, scale_only=True),
                                                   loader(scale_by="update")), "growth tracker"),
        "parameters only (buffers lost)": ((saver(params_only=True), loader(strict=False)), "buffers"),
        # review 0506 E3: saved, but the load only rebinds local names
        "whole objects saved, names rebound": ((save_objects, load_by_rebinding), "you pickled the whole scaler"),
        "scaler loaded into a new GradScaler": ((saver(), load_into_new_scaler), "only rebinds a local name"),
        "scaler saved, never loaded": ((saver(), loader(scaler_too=False)), "was never called on that object"),
        "optimizer rebuilt, then loaded": ((saver(), load_into_rebuilt_optimizer),
                                           "call `optimizer.load_state_dict(...)` on the optimizer you were given"),
    },
    ("05", "diagnose_clipping"): DIAGNOSE_MISTAKES,
}

RIGHT = {
    ("05", "train_epoch"): {
        "the solution's pattern": epoch(),
        "one loop, step at each window's end": epoch_by_index,
    },
    ("05", "clipped_step"): {
        "clip_grad_norm_": clipped(),
        "clip_grad_norm_ with foreach": clipped(how="foreach"),
        "get_total_norm + clip_grads_with_norm_": clipped(how="split"),
        "clipping written out": clipped(how="manual"),
        "autocast around the model, float32 loss": clipped(float_loss=True),
    },
    ("05", "checkpoint"): {
        "one dict of state_dicts": (saver(), load_checkpoint),
        "a tuple, weights_only load": (save_other_keys, load_other_keys),
        "whole objects, their state copied in": (save_objects, load_objects_properly),
    },
    ("05", "diagnose_clipping"): {
        "relative tolerance": diagnose_right,
        "math.isclose on ratios": diagnose_by_ratio,
    },
}

test_wrong_answer_is_named, test_right_answer_passes = grader_fixtures.tests(WRONG, RIGHT)


def test_stubs_are_not_started():
    def stub(*args):
        raise NotImplementedError("hint")

    for check in (lesson05.train_epoch, lesson05.clipped_step):
        with pytest.raises(NotStarted):
            check(stub)
    with pytest.raises(NotStarted):
        lesson05.checkpoint(stub, load_checkpoint)
