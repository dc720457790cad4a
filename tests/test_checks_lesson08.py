"""Exercise 08: the check passes the right answer and names each typical wrong one.

A check call launches two processes under torchrun (several seconds each on a small CPU), so only the most
important cases are launched: the right answer, a forgotten ``no_sync`` (counted by the DDP comm hook), a rank
that raises, and a rank that hangs. The other mistakes are judged by the same analysis (:func:`lesson08.analyse`)
on the records of an in-process run (:func:`lesson08.simulate`, DDP replaced by a stand-in that counts the
backward passes outside ``no_sync``).
"""

import contextlib

import pytest
import torch

from ampcourse.checks import CheckFailed, NotStarted, lesson08


def make_train(no_sync="right", order="right", divide=True, step_each=False, clip=True):
    """A training function with one mistake (a closure: judged in-process, see the analysis tests)."""

    def train(model, loss_fn, optimizer, scaler, batches, accum_steps, max_norm):
        for start in range(0, len(batches), accum_steps):
            window = batches[start:start + accum_steps]
            optimizer.zero_grad(set_to_none=True)
            for i, (x, y) in enumerate(window):
                last = i == len(window) - 1
                skip_sync = no_sync == "always" or (no_sync == "right" and not last)
                with model.no_sync() if skip_sync else contextlib.nullcontext():
                    with torch.autocast(device_type=x.device.type, dtype=torch.float16):
                        loss = loss_fn(model(x), y)
                    if divide:
                        loss = loss / len(window)
                    scaler.scale(loss).backward()
                if step_each:
                    scaler.step(optimizer)
                    scaler.update()
            if step_each:
                continue
            if order == "right":
                scaler.unscale_(optimizer)
            if clip:
                torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
            scaler.step(optimizer)
            scaler.update()
    return train


def train(model, loss_fn, optimizer, scaler, batches, accum_steps, max_norm):
    """The right answer, self-contained (the check ships its source to the ranks)."""
    for start in range(0, len(batches), accum_steps):
        window = batches[start:start + accum_steps]
        optimizer.zero_grad(set_to_none=True)
        for i, (x, y) in enumerate(window):
            with contextlib.nullcontext() if i == len(window) - 1 else model.no_sync():
                with torch.autocast(device_type=x.device.type, dtype=torch.float16):
                    loss = loss_fn(model(x), y) / len(window)
                scaler.scale(loss).backward()
        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
        scaler.step(optimizer)
        scaler.update()


def train_without_no_sync(model, loss_fn, optimizer, scaler, batches, accum_steps, max_norm):
    for start in range(0, len(batches), accum_steps):
        window = batches[start:start + accum_steps]
        optimizer.zero_grad(set_to_none=True)
        for x, y in window:
            with torch.autocast(device_type=x.device.type, dtype=torch.float16):
                loss = loss_fn(model(x), y) / len(window)
            scaler.scale(loss).backward()
        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
        scaler.step(optimizer)
        scaler.update()


def train_raising_on_rank_1(model, loss_fn, optimizer, scaler, batches, accum_steps, max_norm):
    import os

    if os.environ.get("RANK") == "1":
        raise ValueError("batch sizes differ on this rank")


def train_hanging_on_rank_1(model, loss_fn, optimizer, scaler, batches, accum_steps, max_norm):
    import os
    import time

    while os.environ.get("RANK") == "1":
        time.sleep(0.05)


def stub(model, loss_fn, optimizer, scaler, batches, accum_steps, max_norm):
    raise NotImplementedError("use model.no_sync() for all but the last micro-batch of a window")


# --- launched (the real check) ---------------------------------------------------------------------------------
def test_right_answer_passes_under_torchrun(capsys, figures):
    lesson08.ddp_train(train)
    out = capsys.readouterr().out
    assert out.startswith("✓ Task 1") and "3 gradient all-reduces" in out and "max |diff|" in out
    figures("lesson 08 check: " + out.strip().split(": ", 1)[1])


LAUNCHED = {
    "forgets no_sync": (train_without_no_sync, r"9 times for 3 windows: you forgot `no_sync\(\)`"),
    "raises on rank 1": (train_raising_on_rank_1, r"raised ValueError on rank 1: batch sizes differ"),
}


@pytest.mark.parametrize(("fn", "words"), LAUNCHED.values(), ids=LAUNCHED)
def test_launched_mistakes_are_named(fn, words):
    with pytest.raises(CheckFailed, match=words):
        lesson08.ddp_train(fn)


def test_a_hanging_rank_is_killed_and_named(monkeypatch):
    monkeypatch.setattr(lesson08, "TIMEOUT", 4.0)
    with pytest.raises(CheckFailed, match=r"did not finish within 4 s and were killed: a rank is stuck"):
        lesson08.ddp_train(train_hanging_on_rank_1)


# --- no launch needed ---------------------------------------------------------------------------------------------
def test_untouched_stub_is_not_started():
    with pytest.raises(NotStarted, match="not started"):
        lesson08.ddp_train(stub)


def test_source_not_available_is_named():
    namespace = {}
    exec(lesson08_source := "def train(*args):\n    return None\n", namespace)  # noqa: S102
    assert lesson08_source
    with pytest.raises(CheckFailed, match="could not read the source"):
        lesson08.ddp_train(namespace["train"])


def test_a_function_using_outside_names_is_refused():
    helper = make_train()

    def train(model, loss_fn, optimizer, scaler, batches, accum_steps, max_norm):
        return helper(model, loss_fn, optimizer, scaler, batches, accum_steps, max_norm)

    with pytest.raises(CheckFailed, match="uses .*defined outside it"):
        lesson08.ddp_train(train)


def test_not_a_function_is_refused():
    with pytest.raises(CheckFailed, match="should be a function"):
        lesson08.ddp_train(42)


ANALYSED = {
    "forgets no_sync": (make_train(no_sync="never"), r"you forgot `no_sync\(\)`"),
    "no_sync on every micro-batch": (make_train(no_sync="always"), r"only 0 gradient all-reduces"),
    "clips before unscale_": (make_train(order="clip first"), r"you clipped before `unscale_`"),
    "forgets to divide by the window length": (make_train(divide=False), r"did not divide each micro-batch loss"),
    "steps every micro-batch": (make_train(step_each=True), r"stepped after every micro-batch"),
    "no clipping": (make_train(clip=False), r"above max_norm"),
}


@pytest.mark.parametrize(("fn", "words"), ANALYSED.values(), ids=ANALYSED)
def test_analysis_names_each_mistake(fn, words):
    records = lesson08.simulate(fn)
    with pytest.raises(CheckFailed, match=words):
        lesson08.analyse(lesson08.TASK, lesson08.CONFIG, {0: records, 1: records})


def test_analysis_passes_the_right_answer_and_catches_diverged_ranks():
    records = lesson08.simulate(make_train())
    assert "3 gradient all-reduces" in lesson08.analyse(lesson08.TASK, lesson08.CONFIG, {0: records, 1: records})
    other = {**records, "hash": "different"}
    with pytest.raises(CheckFailed, match="different parameters"):
        lesson08.analyse(lesson08.TASK, lesson08.CONFIG, {0: records, 1: other})


# --- the AMP pre-check (in-process, an inf injected into window 2) ----------------------------------------------
def amp_train(autocast="float16", scale=True, stepper="scaler", update=True):
    """A right DDP loop except for one AMP mistake."""

    def train(model, loss_fn, optimizer, scaler, batches, accum_steps, max_norm):
        for start in range(0, len(batches), accum_steps):
            window = batches[start:start + accum_steps]
            optimizer.zero_grad(set_to_none=True)
            for i, (x, y) in enumerate(window):
                with contextlib.nullcontext() if i == len(window) - 1 else model.no_sync():
                    if autocast is None:
                        loss = loss_fn(model(x), y) / len(window)
                    else:
                        with torch.autocast(device_type=x.device.type, dtype=getattr(torch, autocast)):
                            loss = loss_fn(model(x), y) / len(window)
                    (scaler.scale(loss) if scale else loss).backward()
            if stepper == "scaler":
                scaler.unscale_(optimizer)
                torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
                scaler.step(optimizer)
            elif stepper == "unscale then optimizer":
                scaler.unscale_(optimizer)
                torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
                optimizer.step()
            if update:
                scaler.update()
    return train


AMP_MISTAKES = {
    "no autocast, no scaler (plain DDP)": (amp_train(autocast=None, scale=False, stepper="unscale then optimizer"),
                                           r"forward pass ran outside autocast"),
    "bfloat16 autocast": (amp_train(autocast="bfloat16"), r"not in float16"),
    "backward on the unscaled loss": (amp_train(scale=False), r"`scaler.scale\(loss\)` was never called"),
    "unscale_, clip, optimizer.step()": (amp_train(stepper="unscale then optimizer"),
                                         r"you called `optimizer.step\(\)` yourself, so window 2"),
    "no scaler.update()": (amp_train(update=False), r"`scaler.update\(\)` ran 0 times"),
}


@pytest.mark.parametrize(("fn", "words"), AMP_MISTAKES.values(), ids=AMP_MISTAKES)
def test_amp_mistakes_are_named_before_any_launch(fn, words):
    with lesson08.one_process_group(), pytest.raises(CheckFailed, match=words):
        lesson08.amp_precheck(lesson08.TASK, fn)


def test_amp_precheck_passes_the_right_answer():
    with lesson08.one_process_group():
        lesson08.amp_precheck(lesson08.TASK, train)
        lesson08.amp_precheck(lesson08.TASK, amp_train())


def train_with_rank0_logging(model, loss_fn, optimizer, scaler, batches, accum_steps, max_norm):
    """Right, written with `math`, `nn` and `F` unimported (the task provides them) and rank-0 logging."""
    rank = torch.distributed.get_rank()
    for w in range(math.ceil(len(batches) / accum_steps)):  # noqa: F821 - provided by the check
        window = batches[w * accum_steps:(w + 1) * accum_steps]
        model.zero_grad(set_to_none=False)
        for i, (x, y) in enumerate(window):
            with contextlib.nullcontext() if i == len(window) - 1 else model.no_sync():
                with torch.amp.autocast(device_type=x.device.type, dtype=torch.float16):
                    loss = loss_fn(model(x), y) / len(window)
                scaler.scale(loss).backward()
        scaler.unscale_(optimizer)
        nn.utils.clip_grad_norm_(model.parameters(), max_norm, foreach=True)  # noqa: F821 - provided
        scaler.step(optimizer)
        scaler.update()
        if rank == 0:
            print(f"window {w}: scale {scaler.get_scale():g}", F.relu)  # noqa: F821 - provided


class Launched(Exception):
    pass


def test_the_pre_run_provides_what_the_ranks_provide(monkeypatch, capsys):
    """math/nn/F without imports and torch.distributed.get_rank() work in the pre-run, as on a rank."""
    def launch(*args, **kwargs):
        raise Launched

    monkeypatch.setattr(lesson08, "launch", launch)
    with pytest.raises(Launched):
        lesson08.ddp_train(train_with_rank0_logging)


def test_a_manual_all_reduce_on_top_of_ddp_is_named():
    records = lesson08.simulate(make_train())
    doubled = {**records, "steps": [{**s, "grads": [2 * g for g in s["grads"]]} for s in records["steps"]]}
    with pytest.raises(CheckFailed, match="all-reduced \\(summed\\) the gradients yourself"):
        lesson08.analyse(lesson08.TASK, lesson08.CONFIG, {0: doubled, 1: doubled})


# --- Task 2: allreduce_bytes -----------------------------------------------------------------------------------
def bytes_right(n, accum, no_sync, compress):
    return n * (2 if compress else 4) * (1 if no_sync else accum)


BYTES_MISTAKES = {
    "AMP halves the traffic": (lambda n, a, s, c: n * 2 * (1 if s else a), "AMP does not halve the gradient traffic"),
    "one all-reduce even without no_sync": (lambda n, a, s, c: n * (2 if c else 4),
                                            "every backward of the window all-reduces"),
    "one all-reduce per micro-batch with no_sync": (lambda n, a, s, c: n * (2 if c else 4) * a,
                                                    "only the last micro-batch's backward all-reduces"),
    "bits": (lambda n, a, s, c: 8 * bytes_right(n, a, s, c), "that is bits"),
}


def test_allreduce_bytes_right_answer_passes(capsys):
    lesson08.allreduce_bytes(bytes_right)
    assert capsys.readouterr().out.startswith("✓ Task 2")


@pytest.mark.parametrize(("fn", "words"), BYTES_MISTAKES.values(), ids=BYTES_MISTAKES)
def test_allreduce_bytes_mistakes_are_named(fn, words):
    with pytest.raises(CheckFailed, match=words):
        lesson08.allreduce_bytes(fn)


# --- Task 3: bf16_hook ------------------------------------------------------------------------------------------
def hook(dtype=torch.bfloat16, divide=True, copy_back=True, returns="future"):
    import torch.distributed as dist

    def bf16_hook(process_group, bucket):
        buffer = bucket.buffer()
        compressed = buffer.to(dtype)
        if divide:
            compressed.div_(process_group.size())
        work = dist.all_reduce(compressed, group=process_group, async_op=True)
        if returns == "nothing":
            return None

        def back(future):
            if copy_back:
                buffer.copy_(future.value()[0])
                return buffer
            return buffer  # the all-reduced values are thrown away

        return work.get_future().then(back)
    return bf16_hook


def bf16_hook_with_world_size(process_group, bucket):
    """Right, written with dist.get_world_size and a wait() instead of then()."""
    import torch.distributed as dist

    buffer = bucket.buffer()
    compressed = buffer.to(torch.bfloat16)
    dist.all_reduce(compressed, group=process_group, async_op=True).wait()
    buffer.copy_(compressed / dist.get_world_size(process_group))
    future = torch.futures.Future()
    future.set_result(buffer)
    return future


HOOK_MISTAKES = {
    "no compression": (hook(dtype=torch.float32), "sent float32: nothing was compressed"),
    "float16 instead of bfloat16": (hook(dtype=torch.float16), "sent float16"),
    "no division by the world size": (hook(divide=False), "twice too large"),
    "result not copied back": (hook(copy_back=False), "twice too large|did not go through"),
    "returns nothing": (hook(returns="nothing"), "returned NoneType, not a `torch.futures.Future`"),
}


def test_bf16_hook_right_answers_pass(capsys):
    lesson08.bf16_hook(hook())
    lesson08.bf16_hook(bf16_hook_with_world_size)
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 2 and all(line.startswith("✓ Task 3") for line in lines)


@pytest.mark.parametrize(("fn", "words"), HOOK_MISTAKES.values(), ids=HOOK_MISTAKES)
def test_bf16_hook_mistakes_are_named(fn, words):
    with pytest.raises(CheckFailed, match=words):
        lesson08.bf16_hook(fn)
