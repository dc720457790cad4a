"""Exercise 08: the check passes the right answer and names each typical wrong one.

A check call launches two processes under torchrun (several seconds each on a small CPU), but only an answer
that passes the in-process pre-run does: there the check runs the shipped function on a stand-in for DDP
(:func:`lesson08.simulate`, then :func:`lesson08.analyse` on its record) and with spies and an injected inf
(:func:`lesson08.amp_precheck`). So every WRONG fixture of Task 1 is judged without a launch; the launches are
the two RIGHT fixtures, the right answer's summary, a rank that raises and a rank that hangs (4 s). On the
loaded 2-core machine this file takes about a minute.
"""

import contextlib
import math

import grader_fixtures
import pytest
import torch
from torch import nn
from torch.nn import functional as F

from ampcourse.checks import CheckFailed, NotStarted, lesson08


def make_train(no_sync="right", order="right", divide=True, step_each=False, clip=True):
    """A training function with one mistake (a closure: judged in-process, see the analysis tests)."""

    def train(model, loss_fn, optimizer, scaler, batches, accum_steps, max_norm):
        for start in range(0, len(batches), accum_steps):
            window = batches[start:start + accum_steps]
            optimizer.zero_grad(set_to_none=True)
            for i, (x, y) in enumerate(window):
                last = i == len(window) - 1
                skip_sync = no_sync == "always" or (no_sync == "right" and not last) or (no_sync == "last" and last)
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
    "no_sync on the last micro-batch only (review rev25-r3 M2)": (make_train(no_sync="last"),
                                                                  r"the last one ran inside `no_sync\(\)`"),
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


def colleague_train(model, loss_fn, optimizer, scaler, batches, accum_steps, max_norm):
    """Exercise 08 Task 1's broken loop: no no_sync, clip before unscale_, no zero_grad."""
    for start in range(0, len(batches), accum_steps):
        window = batches[start:start + accum_steps]
        for x, y in window:
            with torch.autocast(device_type=x.device.type, dtype=torch.float16):
                loss = loss_fn(model(x), y) / len(window)
            scaler.scale(loss).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
        scaler.unscale_(optimizer)
        scaler.step(optimizer)
        scaler.update()


def test_symptoms_show_each_bug_of_the_colleagues_loop(capsys):
    broken = lesson08.symptoms(colleague_train)
    assert "gradient all-reduces: 9 for 3 windows" in broken
    assert "windows whose step GradScaler skipped: [2, 3]" in broken  # the stale inf skips window 3 too
    assert broken[-1].endswith(": True") and len(broken) == 4  # one applied step, far below max_norm
    right = lesson08.symptoms(train)
    assert "gradient all-reduces: 3 for 3 windows" in right
    assert "windows whose step GradScaler skipped: [2]" in right
    assert all(line.endswith(": False") for line in right[3:]) and len(right) == 5
    assert capsys.readouterr().out.count("gradient all-reduces") == 2


def test_the_colleagues_loop_is_rejected_for_its_first_bug():
    with pytest.raises(CheckFailed, match="first backward added its gradients to the previous window's"):
        lesson08.ddp_train(colleague_train)


# --- Task 2: allreduce_bytes -----------------------------------------------------------------------------------
def bytes_right(n, accum, no_sync, compress):
    return n * (2 if compress else 4) * (1 if no_sync else accum)


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


def hook_copies_before_completion(process_group, bucket):
    """Copies the all-reduced tensor back without waiting for the all-reduce (a race on a real backend)."""
    import torch.distributed as dist

    buffer = bucket.buffer()
    compressed = buffer.to(torch.bfloat16).div_(process_group.size())
    work = dist.all_reduce(compressed, group=process_group, async_op=True)
    buffer.copy_(compressed)  # the collective is still in flight
    return work.get_future().then(lambda future: buffer)


def hook_divides_twice(process_group, bucket):
    import torch.distributed as dist

    buffer = bucket.buffer()
    compressed = buffer.to(torch.bfloat16).div_(process_group.size())
    work = dist.all_reduce(compressed, group=process_group, async_op=True)

    def back(future):
        return buffer.copy_(future.value()[0] / process_group.size())

    return work.get_future().then(back)


def hook_raises(process_group, bucket):
    return bucket.buffer().to(torch.bfloat16).all_reduce()


def hook_returns_the_bfloat16_tensor(process_group, bucket):
    """Review 08-09: the future holds the all-reduced bfloat16 tensor, not the float32 buffer."""
    import torch.distributed as dist

    compressed = bucket.buffer().to(torch.bfloat16).div_(process_group.size())
    future = dist.all_reduce(compressed, group=process_group, async_op=True).get_future()
    return future.then(lambda f: f.value()[0])


def torch_bf16_compress_hook(process_group, bucket):
    """Right: torch's own hook."""
    from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import bf16_compress_hook

    return bf16_compress_hook(process_group, bucket)


# --- Task 1 fixtures: self-contained functions (the check ships their source to the ranks) ------------------------
def train_no_zero_grad(model, loss_fn, optimizer, scaler, batches, accum_steps, max_norm):
    for start in range(0, len(batches), accum_steps):
        window = batches[start:start + accum_steps]
        for i, (x, y) in enumerate(window):
            with contextlib.nullcontext() if i == len(window) - 1 else model.no_sync():
                with torch.autocast(device_type=x.device.type, dtype=torch.float16):
                    loss = loss_fn(model(x), y) / len(window)
                scaler.scale(loss).backward()
        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
        scaler.step(optimizer)
        scaler.update()


def train_manual_all_reduce(model, loss_fn, optimizer, scaler, batches, accum_steps, max_norm):
    """A second, manual all-reduce (averaged) on top of DDP's."""
    for start in range(0, len(batches), accum_steps):
        window = batches[start:start + accum_steps]
        optimizer.zero_grad(set_to_none=True)
        for i, (x, y) in enumerate(window):
            with contextlib.nullcontext() if i == len(window) - 1 else model.no_sync():
                with torch.autocast(device_type=x.device.type, dtype=torch.float16):
                    loss = loss_fn(model(x), y) / len(window)
                scaler.scale(loss).backward()
        for p in model.parameters():
            torch.distributed.all_reduce(p.grad)
            p.grad /= torch.distributed.get_world_size()
        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
        scaler.step(optimizer)
        scaler.update()


def train_manual_all_reduce_instead_of_ddps(model, loss_fn, optimizer, scaler, batches, accum_steps, max_norm):
    """Review 08-09: the whole window under no_sync(), then a manual per-parameter all-reduce (DDP did none)."""
    import torch.distributed as dist
    for start in range(0, len(batches), accum_steps):
        window = batches[start:start + accum_steps]
        optimizer.zero_grad(set_to_none=True)
        with model.no_sync():
            for x, y in window:
                with torch.autocast(device_type=x.device.type, dtype=torch.float16):
                    loss = loss_fn(model(x), y) / len(window)
                scaler.scale(loss).backward()
        for p in model.parameters():
            dist.all_reduce(p.grad)
            p.grad /= dist.get_world_size()
        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
        scaler.step(optimizer)
        scaler.update()


def train_no_sync_around_the_window(model, loss_fn, optimizer, scaler, batches, accum_steps, max_norm):
    """Review 08-09: the whole window, last backward included, under no_sync()."""
    for start in range(0, len(batches), accum_steps):
        window = batches[start:start + accum_steps]
        optimizer.zero_grad(set_to_none=True)
        with model.no_sync():
            for x, y in window:
                with torch.autocast(device_type=x.device.type, dtype=torch.float16):
                    loss = loss_fn(model(x), y) / len(window)
                scaler.scale(loss).backward()
        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
        scaler.step(optimizer)
        scaler.update()


def train_clips_first(model, loss_fn, optimizer, scaler, batches, accum_steps, max_norm):
    for start in range(0, len(batches), accum_steps):
        window = batches[start:start + accum_steps]
        optimizer.zero_grad(set_to_none=True)
        for i, (x, y) in enumerate(window):
            with contextlib.nullcontext() if i == len(window) - 1 else model.no_sync():
                with torch.autocast(device_type=x.device.type, dtype=torch.float16):
                    loss = loss_fn(model(x), y) / len(window)
                scaler.scale(loss).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
        scaler.unscale_(optimizer)
        scaler.step(optimizer)
        scaler.update()


def train_no_sync_on_the_last(model, loss_fn, optimizer, scaler, batches, accum_steps, max_norm):
    """Review rev25-r3 M2: no_sync() on the last micro-batch of a window instead of the others."""
    for start in range(0, len(batches), accum_steps):
        window = batches[start:start + accum_steps]
        optimizer.zero_grad(set_to_none=True)
        for i, (x, y) in enumerate(window):
            with model.no_sync() if i == len(window) - 1 else contextlib.nullcontext():
                with torch.autocast(device_type=x.device.type, dtype=torch.float16):
                    loss = loss_fn(model(x), y) / len(window)
                scaler.scale(loss).backward()
        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
        scaler.step(optimizer)
        scaler.update()


def train_no_sync_always(model, loss_fn, optimizer, scaler, batches, accum_steps, max_norm):
    for start in range(0, len(batches), accum_steps):
        window = batches[start:start + accum_steps]
        optimizer.zero_grad(set_to_none=True)
        for x, y in window:
            with model.no_sync():
                with torch.autocast(device_type=x.device.type, dtype=torch.float16):
                    loss = loss_fn(model(x), y) / len(window)
                scaler.scale(loss).backward()
        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
        scaler.step(optimizer)
        scaler.update()


def train_not_divided(model, loss_fn, optimizer, scaler, batches, accum_steps, max_norm):
    for start in range(0, len(batches), accum_steps):
        window = batches[start:start + accum_steps]
        optimizer.zero_grad(set_to_none=True)
        for i, (x, y) in enumerate(window):
            with contextlib.nullcontext() if i == len(window) - 1 else model.no_sync():
                with torch.autocast(device_type=x.device.type, dtype=torch.float16):
                    loss = loss_fn(model(x), y)
                scaler.scale(loss).backward()
        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
        scaler.step(optimizer)
        scaler.update()


def train_steps_every_micro_batch(model, loss_fn, optimizer, scaler, batches, accum_steps, max_norm):
    for start in range(0, len(batches), accum_steps):
        window = batches[start:start + accum_steps]
        for i, (x, y) in enumerate(window):
            optimizer.zero_grad(set_to_none=True)
            with contextlib.nullcontext() if i == len(window) - 1 else model.no_sync():
                with torch.autocast(device_type=x.device.type, dtype=torch.float16):
                    loss = loss_fn(model(x), y) / len(window)
                scaler.scale(loss).backward()
            scaler.unscale_(optimizer)
            torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
            scaler.step(optimizer)
            scaler.update()


def train_bfloat16(model, loss_fn, optimizer, scaler, batches, accum_steps, max_norm):
    for start in range(0, len(batches), accum_steps):
        window = batches[start:start + accum_steps]
        optimizer.zero_grad(set_to_none=True)
        for i, (x, y) in enumerate(window):
            with contextlib.nullcontext() if i == len(window) - 1 else model.no_sync():
                with torch.autocast(device_type=x.device.type, dtype=torch.bfloat16):
                    loss = loss_fn(model(x), y) / len(window)
                scaler.scale(loss).backward()
        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
        scaler.step(optimizer)
        scaler.update()


def train_steps_optimizer_itself(model, loss_fn, optimizer, scaler, batches, accum_steps, max_norm):
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
        optimizer.step()
        scaler.update()


def train_zero_grad_after_step(model, loss_fn, optimizer, scaler, batches, accum_steps, max_norm):
    """Right, written otherwise: ExitStack for no_sync, zero_grad after the step, windows counted up front."""
    n_windows = -(-len(batches) // accum_steps)
    for w in range(n_windows):
        window = batches[w * accum_steps:(w + 1) * accum_steps]
        for i, (x, y) in enumerate(window):
            with contextlib.ExitStack() as stack:
                if i < len(window) - 1:
                    stack.enter_context(model.no_sync())  # forward *and* backward inside it
                with torch.autocast(device_type=x.device.type, dtype=torch.float16):
                    out = model(x)
                loss = loss_fn(out.float(), y) / len(window)
                scaler.scale(loss).backward()
        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad(set_to_none=True)


def bytes_elements(n, accum, no_sync, compress):
    return n * (1 if no_sync else accum)


def bytes_ignores_compression(n, accum, no_sync, compress):
    return n * 4 * (1 if no_sync else accum)


def bytes_as_text(n, accum, no_sync, compress):
    return f"{n * (2 if compress else 4) * (1 if no_sync else accum)} bytes"


def bytes_numpy_floor_division(n_params, accum_steps, no_sync, bf16_compress):
    """Right, written otherwise: float32's bytes halved with //, numpy integer arithmetic (an int all the same)."""
    import numpy as np

    per_element = np.int64(4) // (2 if bf16_compress else 1)
    return per_element * n_params * (1 if no_sync else accum_steps)


def bytes_with_element_size(n_params, accum_steps, no_sync, bf16_compress):
    """Right, written otherwise: the element size read from torch, all-reduces counted."""
    dtype = torch.bfloat16 if bf16_compress else torch.float32
    allreduces = 1 if no_sync else accum_steps
    return allreduces * n_params * torch.tensor([], dtype=dtype).element_size()


class _EqualToAnything(int):  # review rev25-r2 E4: `answers != wants` called its __eq__
    def __eq__(self, other):
        return True

    def __ne__(self, other):
        return False

    __hash__ = int.__hash__


WRONG = {
    ("08", "ddp_train"): {
        "forgets no_sync": (train_without_no_sync, "you forgot `no_sync()`"),
        "no_sync on every micro-batch": (train_no_sync_always, "only 0 gradient all-reduces"),
        "no_sync on the last micro-batch instead (review rev25-r3 M2)": (train_no_sync_on_the_last,
                                                                         "the last one ran inside `no_sync()`"),
        "no zero_grad (stale inf gradients)": (train_no_zero_grad,
                                               "first backward added its gradients to the previous window's"),
        "a second, manual all-reduce on top of DDP's": (train_manual_all_reduce,
                                                         "called `torch.distributed.all_reduce` itself"),
        "whole window under no_sync(), manual per-parameter all-reduce": (
            train_manual_all_reduce_instead_of_ddps, "you replaced DDP's bucketed all-reduce with per-parameter"),
        "whole window under no_sync() (one-process pre-run)": (
            train_no_sync_around_the_window, "so the ranks would train different models"),
        "clips before unscale_": (train_clips_first, "you clipped before `unscale_`"),
        "loss not divided by the window length": (train_not_divided, "did not divide each micro-batch loss"),
        "steps after every micro-batch": (train_steps_every_micro_batch, "stepped after every micro-batch"),
        "bfloat16 autocast": (train_bfloat16, "not in float16"),
        "optimizer.step() instead of scaler.step": (train_steps_optimizer_itself,
                                                    "you called `optimizer.step()` yourself"),
    },
    ("08", "allreduce_bytes"): {
        # judged by its int content (review rev25-r6 M1: checks.plain converts a value-type subclass)
        "an int that equals anything (review rev25-r2 E4)": (lambda n, a, s, c: _EqualToAnything(0),
                                                             "you said 0 bytes, a real DDP window all-reduces"),
        "AMP halves the traffic": (lambda n, a, s, c: n * 2 * (1 if s else a),
                                   "AMP does not halve the gradient traffic"),
        "one all-reduce even without no_sync": (lambda n, a, s, c: n * (2 if c else 4),
                                                "every backward of the window all-reduces"),
        "one all-reduce per micro-batch with no_sync": (lambda n, a, s, c: n * (2 if c else 4) * a,
                                                        "only the last micro-batch's backward all-reduces"),
        "bits": (lambda n, a, s, c: 8 * bytes_right(n, a, s, c), "that is bits"),
        "elements, not bytes": (bytes_elements, "counts elements"),
        "compression ignored": (bytes_ignores_compression, "a bf16 compression hook sends 2 bytes"),
        "a string": (bytes_as_text, "return a number of bytes"),
        "a float (review: 9488.0 passed, the stub says -> int)": (
            lambda n, a, s, c: float(bytes_right(n, a, s, c)), "a float"),
        "true division by 2 for the compression": (
            lambda n, a, s, c: n * 4 * (1 if s else a) / (2 if c else 1), "`/` makes a float"),
    },
    ("08", "bf16_hook"): {
        "no compression": (hook(dtype=torch.float32), "sent float32: nothing was compressed"),
        "float16 instead of bfloat16": (hook(dtype=torch.float16), "sent float16"),
        "no division by the world size": (hook(divide=False), "twice too large"),
        "result not copied back": (hook(copy_back=False), "did not go through"),
        "returns nothing": (hook(returns="nothing"), "returned NoneType, not a `torch.futures.Future`"),
        "copies before the all-reduce completes": (hook_copies_before_completion,
                                                    "read the tensor before its all-reduce completed"),
        "divides by the world size twice": (hook_divides_twice, "0.5× the true ones"),
        "raises": (hook_raises, "AttributeError"),
        "future holds the bfloat16 tensor": (hook_returns_the_bfloat16_tensor,
                                             "future holds the bfloat16 tensor that was all-reduced"),
    },
}
RIGHT = {
    ("08", "ddp_train"): {
        "rank-0 logging, provided names": train_with_rank0_logging,
        "ExitStack, zero_grad after the step, float() loss": train_zero_grad_after_step,
    },
    ("08", "allreduce_bytes"): {
        "the formula": bytes_right,
        "element size from torch": bytes_with_element_size,
        "floor division, numpy integers": bytes_numpy_floor_division,
    },
    ("08", "bf16_hook"): {
        "then() callback": hook(),
        "wait(), then copy": bf16_hook_with_world_size,
        "torch's bf16_compress_hook": torch_bf16_compress_hook,
    },
}

test_wrong_answer_is_named, test_right_answer_passes = grader_fixtures.tests(WRONG, RIGHT)
