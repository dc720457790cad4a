"""Exercise 05: the checks pass right answers and name each typical wrong one (the fixtures)."""

import pytest
import torch

from ampcourse.checks import CheckFailed, NotStarted, lesson05


def _forward(model, loss_fn, x, y):
    with torch.autocast(device_type=x.device.type, dtype=torch.float16):
        return loss_fn(model(x), y)


def epoch(divide="own", update_inside=False, unscale_each=False, step_each=False, zero_grad=True,
          drop_remainder=False, zero_inside=False, dtype=torch.float16, summed=False, zero_at_end=False):
    def train_epoch(model, loss_fn, optimizer, scaler, batches, accum_steps):
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
            if not step_each:
                scaler.step(optimizer)
                scaler.update()
            if zero_at_end:
                optimizer.zero_grad(set_to_none=False)
    return train_epoch


def clipped(order="right", clip=True, how="norm"):
    def clipped_step(model, loss_fn, optimizer, scaler, x, y, max_norm):
        optimizer.zero_grad(set_to_none=True)
        scaler.scale(_forward(model, loss_fn, x, y)).backward()
        if order == "right":
            scaler.unscale_(optimizer)
        if clip and how == "norm":
            torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
        elif clip and how == "foreach":
            torch.nn.utils.clip_grad_norm_(list(model.parameters()), max_norm, foreach=True)
        elif clip and how == "value":
            torch.nn.utils.clip_grad_value_(model.parameters(), max_norm)
        elif clip and how == "half":
            torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm / 2)
        elif clip and how == "per parameter":
            for p in model.parameters():
                torch.nn.utils.clip_grad_norm_([p], max_norm / 2)
        if order == "clip then unscale":
            scaler.unscale_(optimizer)
        if order == "twice":
            scaler.unscale_(optimizer)
            scaler.unscale_(optimizer)
        scaler.step(optimizer)
        scaler.update()
    return clipped_step


def saver(with_scaler=True, with_optimizer=True):
    def save_checkpoint(path, model, optimizer, scaler):
        state = {"model": model.state_dict()}
        if with_optimizer:
            state["optimizer"] = optimizer.state_dict()
        if with_scaler:
            state["scaler"] = scaler.state_dict()
        torch.save(state, path)
    return save_checkpoint


def load_checkpoint(path, model, optimizer, scaler):
    state = torch.load(path)
    model.load_state_dict(state["model"])
    if "optimizer" in state:
        optimizer.load_state_dict(state["optimizer"])
    if "scaler" in state:
        scaler.load_state_dict(state["scaler"])


def test_right_answers_pass(capsys):
    lesson05.train_epoch(epoch())
    lesson05.clipped_step(clipped())
    lesson05.checkpoint(saver(), load_checkpoint)
    lesson05.train_epoch(epoch(zero_at_end=True))  # zeroing after each step (set_to_none=False): allowed here
    lesson05.clipped_step(clipped(how="foreach"))
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 5 and all(line.startswith("✓ Task") for line in lines)


EPOCH_MISTAKES = {
    "loss not divided": (epoch(divide="none"), "did not divide each micro-batch loss"),
    "remainder divided by the full count": (epoch(divide="full"), "divided by 4, the full\\s+count"),
    "update() inside the window": (epoch(update_inside=True), "ran inside the accumulation window"),
    "unscale_ in every micro-batch": (epoch(unscale_each=True), "unscale_` in every micro-batch"),
    "step every micro-batch": (epoch(step_each=True), "after every micro-batch"),
    "no zero_grad": (epoch(zero_grad=False), "call `optimizer.zero_grad\\(\\)`"),
    "remainder dropped": (epoch(drop_remainder=True), "were dropped"),
    "zero_grad inside the micro-batch loop": (epoch(zero_inside=True), "ran between the micro-batches of a window"),
    "no autocast": (epoch(dtype=None), "forward pass ran outside autocast"),
    "bfloat16 autocast": (epoch(dtype=torch.bfloat16), "not in float16"),
    "one backward of the summed window loss": (epoch(summed=True), "summed a window's losses"),
}
CLIP_MISTAKES = {
    "never unscale_": (clipped(order="clip first"), "you never called `scaler.unscale_"),
    "clip before unscale_": (clipped(order="clip then unscale"), "you clipped before `unscale_`"),
    "clip_grad_value_": (clipped(how="value"), "clip the \\*total\\* norm"),
    "half the threshold": (clipped(how="half"), "below max_norm"),
    "clipped per parameter": (clipped(how="per parameter"), "below max_norm|another direction"),
    "unscale_ twice": (clipped(order="twice"), "twice in one step"),
    "no clipping": (clipped(clip=False), "above max_norm"),
}
CHECKPOINT_MISTAKES = {
    "model but not the scaler": (saver(with_scaler=False), "you saved the model but not the scaler"),
    "no optimizer state": (saver(with_optimizer=False), "optimizer's state"),
}


@pytest.mark.parametrize(("fn", "words"), EPOCH_MISTAKES.values(), ids=EPOCH_MISTAKES)
def test_accumulation_mistakes_are_named(fn, words):
    with pytest.raises(CheckFailed, match=words):
        lesson05.train_epoch(fn)


@pytest.mark.parametrize(("fn", "words"), CLIP_MISTAKES.values(), ids=CLIP_MISTAKES)
def test_clipping_mistakes_are_named(fn, words):
    with pytest.raises(CheckFailed, match=words):
        lesson05.clipped_step(fn)


@pytest.mark.parametrize(("fn", "words"), CHECKPOINT_MISTAKES.values(), ids=CHECKPOINT_MISTAKES)
def test_checkpoint_mistakes_are_named(fn, words):
    with pytest.raises(CheckFailed, match=words):
        lesson05.checkpoint(fn, load_checkpoint)


def test_stubs_are_not_started():
    def stub(*args):
        raise NotImplementedError("hint")

    for check in (lesson05.train_epoch, lesson05.clipped_step):
        with pytest.raises(NotStarted):
            check(stub)
    with pytest.raises(NotStarted):
        lesson05.checkpoint(stub, load_checkpoint)


# --- Task 4: diagnose_clipping ------------------------------------------------------------------------------------
def diagnose_right(true_norm, stepped, max_norm, scale):
    def close(a, b):
        return abs(a - b) <= 0.05 * b
    if close(stepped, min(true_norm, max_norm)):
        return "right"
    if close(stepped, max_norm / scale):
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
}


def test_diagnose_clipping_right_answer_passes(capsys):
    lesson05.diagnose_clipping(diagnose_right)
    assert capsys.readouterr().out.startswith("✓ Task 4")


@pytest.mark.parametrize(("fn", "words"), DIAGNOSE_MISTAKES.values(), ids=DIAGNOSE_MISTAKES)
def test_diagnose_clipping_mistakes_are_named(fn, words):
    with pytest.raises(CheckFailed, match=words):
        lesson05.diagnose_clipping(fn)
