"""Checks for exercise 08 (distributed): the learner's DDP + AMP training function, run for real under torchrun.

``check.ddp_train(train)`` ships the learner's function to two fresh processes: its source
(``inspect.getsource``) is written to ``user_fn.py`` in a temporary run directory, and
:mod:`ampcourse.ddp_train` (mode ``"user"``) executes it in a namespace holding ``torch``, ``nn``, ``F``, ``math``
and ``contextlib`` — so the function must be self-contained — and calls it on a DDP-wrapped model. The ranks
record, at every real ``optimizer.step()``, the parameters and the gradients it steps with, and a DDP
communication hook counts the gradient all-reduces.

Before launching, the function runs once in this process on a stand-in for DDP (:class:`LocalDDP`: a wrapper
with ``no_sync()`` that counts the backward passes that would all-reduce). That turns an untouched stub into
*not started* at once and reports errors without paying for a launch; :func:`simulate` returns the same records
as a rank, which the unit tests use to exercise the analysis (:func:`analyse`) cheaply.

The analysis compares each step with the right one *at the learner's own parameters*: the FP32 gradient of the
window's mean loss over the global batch, clipped to ``max_norm``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
import math
import tempfile
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F

from ..distributed import (
    LaunchFailed,
    LaunchTimeout,
    RunConfig,
    compare_params,
    flat_params,
    launch,
    make_model,
    make_scaler,
    micro_batch,
    param_hash,
    param_tolerance,
    train_single_process,
    window_batches,
)
from . import CheckFailed, NotStarted, call, exact_number, fail, hints, noted_call, passed, require_callable
from .facts import BYTES_PER_ELEMENT
from .spies import SpyOptimizer, SpyScaler

TASK = "Task 1 (train)"
TIMEOUT = 180.0  # seconds for one launch (two processes importing torch take several seconds on a small CPU)
PROVIDED = ("torch", "nn", "F", "math", "contextlib")
# 3 windows of 3 micro-batches; max_norm between the windows' gradient norms so that some steps clip and some not.
CONFIG = RunConfig(windows=3, accum_steps=3, micro_batch_size=4, lr=0.2, max_norm=1.5, init_scale=2.0**12,
                   growth_interval=1000, dtype="float16", mode="user")


# ------------------------------------------------------------------------------------------ in-process stand-in
class LocalDDP(nn.Module):
    """A one-process stand-in for ``DistributedDataParallel``: ``module``, ``no_sync()``, a count of the
    backward passes run outside ``no_sync`` (each would all-reduce under real DDP), and whether the latest backward
    was one of them (``last_synced``: the last micro-batch of a window must be)."""

    def __init__(self, module: nn.Module) -> None:
        super().__init__()
        self.module = module
        self.allreduces = 0
        self.last_synced: bool | None = None
        self._sync = True
        for p in module.parameters():
            p.register_post_accumulate_grad_hook(self._grad_ready)
        self._first = next(iter(module.parameters()))

    def _grad_ready(self, param) -> None:
        if param is self._first:
            self.last_synced = self._sync
            self.allreduces += self._sync

    @contextlib.contextmanager
    def no_sync(self):
        old, self._sync = self._sync, False
        try:
            yield
        finally:
            self._sync = old

    def forward(self, *args, **kwargs):
        return self.module(*args, **kwargs)


def _step_spy(optimizer, model, counter: Callable[[], int],
              last_synced: Callable[[], bool | None] | None = None) -> list[dict[str, Any]]:
    records: list[dict[str, Any]] = []

    def pre(opt, args, kwargs):
        grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in model.parameters()]
        records.append({"params": flat_params(model).tolist(),
                        "grads": torch.cat([g.detach().reshape(-1).double() for g in grads]).tolist(),
                        "allreduces": counter()})
        if last_synced is not None:  # the stand-in knows whether the window's last backward all-reduced
            records[-1]["last_synced"] = last_synced()

    optimizer.register_step_pre_hook(pre)
    return records


def simulate(fn: Callable, config: RunConfig = CONFIG) -> dict[str, Any]:
    """Run ``fn`` in this process on :class:`LocalDDP` with the *global* micro-batches; the same record a rank logs."""
    model = make_model(config)
    wrapped = LocalDDP(model)
    optimizer = torch.optim.SGD(wrapped.parameters(), lr=config.lr)
    steps = _step_spy(optimizer, model, lambda: wrapped.allreduces, lambda: wrapped.last_synced)
    scaler = make_scaler(config)
    noted_call(fn, wrapped, F.mse_loss, optimizer, scaler, window_batches(config, None), config.accum_steps,
               config.max_norm)
    return {"steps": steps, "params": flat_params(model).tolist(), "hash": param_hash(model),
            "allreduces": wrapped.allreduces, "scale": scaler.get_scale()}


# ------------------------------------------------------------------------------------ the AMP part, in-process
@contextlib.contextmanager
def one_process_group():
    """A one-process gloo group (in-memory store) for the in-process runs, so that ``torch.distributed.get_rank()``,
    rank-0 logging, a manual all-reduce or a real ``DistributedDataParallel`` work there as on a rank. Created once
    per process and kept (tearing a gloo group down and building another in the same Jupyter kernel hung once in
    testing); an existing group is used as it is."""
    import torch.distributed as dist

    if dist.is_available() and not dist.is_initialized():
        dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    yield


INF_WINDOW = 1  # the window (0-based) whose loss the AMP pre-check makes inf: a right answer skips its step


def amp_precheck(task: str, fn: Callable, config: RunConfig = CONFIG) -> None:
    """Run ``fn`` in this process with spies and an inf injected into one window's loss; name any AMP mistake.

    Verifies what the DDP analysis cannot see: the forward pass ran under float16 autocast, the loss went through
    ``scaler.scale``, the optimizer stepped only through ``scaler.step`` (so the inf window was skipped), and
    ``scaler.update`` ran once per window.
    """
    model = make_model(config)
    wrapped = LocalDDP(model)
    log: list[str] = []
    optimizer = SpyOptimizer(wrapped.parameters(), log, lr=config.lr)
    scaler = SpyScaler(log, config.device, init_scale=config.init_scale, growth_interval=config.growth_interval)
    first = next(m for m in model.modules() if isinstance(m, nn.Linear))
    forward: list[tuple[bool, torch.dtype]] = []
    first.register_forward_hook(lambda m, i, out: forward.append((torch.is_autocast_enabled(out.device.type),
                                                                   out.dtype)))
    calls = [0]
    # Stale gradients: at the first backward of each window, a parameter's accumulated gradient must equal the
    # gradient that backward brought (the previous window's — the injected inf included — was zeroed).
    incoming: dict[int, torch.Tensor] = {}
    stale: list[int] = []

    def arriving(index):
        def hook(grad):
            incoming[index] = grad.detach().clone()
        return hook

    def accumulated(index):
        def hook(param):
            window, micro = divmod(calls[0] - 1, config.accum_steps)
            if micro == 0 and window > 0 and index in incoming and not torch.allclose(
                    param.grad, incoming[index], rtol=0, atol=0, equal_nan=True):
                stale.append(window)
        return hook

    for index, param in enumerate(model.parameters()):
        param.register_hook(arriving(index))
        param.register_post_accumulate_grad_hook(accumulated(index))
    import torch.distributed as dist

    manual: list[int] = []
    real_all_reduce = dist.all_reduce

    def counting_all_reduce(*args, **kwargs):
        manual.append(1)
        return real_all_reduce(*args, **kwargs)

    def loss_fn(out, target):
        window = calls[0] // config.accum_steps
        calls[0] += 1
        loss = F.mse_loss(out, target)
        return loss * math.inf if window == INF_WINDOW else loss

    def diagnose() -> None:
        if not forward and not log:
            return  # nothing ran in this process (e.g. rank-dependent code): the launch and its analysis judge it
        if not forward:
            raise fail(task, "the model's forward pass never ran: compute each micro-batch's loss from `model(x)`.")
        if not all(on for on, _ in forward):
            raise fail(task, "a forward pass ran outside autocast: run each micro-batch's forward and loss inside "
                             "`with torch.autocast(device_type=x.device.type, dtype=torch.float16)`.")
        if any(dtype != torch.float16 for _, dtype in forward):
            raise fail(task, "autocast ran, but not in float16 (the CPU's default is bfloat16): pass "
                             "`dtype=torch.float16`.")
        if "scale" not in log:
            raise fail(task, "`scaler.scale(loss)` was never called: backward must run on the scaled loss "
                             "(`scaler.scale(loss).backward()`), or small float16 gradients underflow and "
                             "`scaler.step` has no inf check to act on.")
        if "scaler.step" in log and "update" not in log:
            raise fail(task, f"`scaler.update()` ran 0 times for {config.windows} windows: call it once per window, "
                             "after `scaler.step(optimizer)`, so the scale backs off after an inf.")
        if "optimizer.step (direct)" in log:
            raise fail(task, f"you called `optimizer.step()` yourself, so window {INF_WINDOW + 1}, whose loss the "
                             "check made inf, was applied anyway: step through `scaler.step(optimizer)`, which skips "
                             "a step whose gradients hold inf/NaN (an `unscale_` before it does not change that).")

    dist.all_reduce = counting_all_reduce
    try:
        call(task, fn, "train", wrapped, loss_fn, optimizer, scaler, window_batches(config, None),
             config.accum_steps, config.max_norm)
    except NotStarted:
        raise
    except CheckFailed:
        diagnose()
        raise
    finally:
        dist.all_reduce = real_all_reduce
    if not forward and not log:
        return  # nothing ran in this process (e.g. rank-dependent code): the launch and its analysis judge it
    diagnose()
    if log.count("scaler.step") == config.n_micro:
        raise fail(task, f"the optimizer stepped after every micro-batch ({config.n_micro} steps): step once per "
                         f"window of {config.accum_steps} micro-batches, after accumulating their gradients.")
    if manual and wrapped.allreduces == 0:
        raise fail(task, f"your function called `torch.distributed.all_reduce` itself ({len(manual)} times) and "
                         "DDP all-reduced nothing: you replaced DDP's bucketed all-reduce with per-parameter ones. "
                         "Run the last micro-batch of each window outside `no_sync()` (its backward all-reduces "
                         "the accumulated gradients, averaged) and drop yours.")
    if manual:
        raise fail(task, f"your function called `torch.distributed.all_reduce` itself ({len(manual)} times), on top "
                         "of DDP's own all-reduce: DDP already averages the gradients during the backward of the "
                         "last micro-batch (outside `no_sync()`). Remove the manual all-reduce — it sums (or, "
                         "divided, repeats) what DDP did and doubles the traffic.")
    if stale:
        raise fail(task, f"window {stale[0] + 1}'s first backward added its gradients to the previous window's "
                         "(the check left inf gradients in the window it made inf): call "
                         "`optimizer.zero_grad(set_to_none=True)` at the start of every window, before the first "
                         "backward.")
    if log.count("update") != config.windows:
        raise fail(task, f"`scaler.update()` ran {log.count('update')} times for {config.windows} windows: once per "
                         "window, after `scaler.step(optimizer)`, so the scale backs off after an inf.")
    applied = log.count("optimizer.step")
    if applied != config.windows - 1:
        raise fail(task, f"{applied} optimizer steps were applied for {config.windows} windows, one of them with inf "
                         "gradients (the check injected it): that one must be skipped by `scaler.step`.")


def symptoms(fn: Callable, config: RunConfig = CONFIG) -> list[str]:
    """What a training function does, as the logs of a DDP run would show it: exercise 08 Task 1's evidence.

    Runs ``fn`` in this process on :class:`LocalDDP` (which counts the backward passes that would all-reduce),
    with window ``INF_WINDOW + 1``'s loss made inf, and prints (and returns) integer counts and yes/no answers
    only — the same on every CPU: gradient all-reduces per window, which windows were skipped, and whether each
    applied step's gradient norm was far below ``max_norm`` although the true gradients were larger.
    """
    model = make_model(config)
    wrapped = LocalDDP(model)
    optimizer = torch.optim.SGD(wrapped.parameters(), lr=config.lr)
    steps = _step_spy(optimizer, model, lambda: wrapped.allreduces)
    scaler = make_scaler(config)
    calls = [0]

    def loss_fn(out, target):
        window = calls[0] // config.accum_steps
        calls[0] += 1
        loss = F.mse_loss(out, target)
        return loss * math.inf if window == INF_WINDOW else loss

    scales = []
    original_update = scaler.update

    def update(new_scale=None):
        before = scaler.get_scale()
        original_update(new_scale)
        scales.append((before, scaler.get_scale(), len(steps)))

    scaler.update = update
    noted_call(fn, wrapped, loss_fn, optimizer, scaler, window_batches(config, None), config.accum_steps,
               config.max_norm)
    lines = [f"{config.n_micro} micro-batches in windows of {config.accum_steps}; the loss of window "
             f"{INF_WINDOW + 1} was made inf",
             f"gradient all-reduces: {wrapped.allreduces} for {config.windows} windows"]
    skipped = [k + 1 for k, (before, after, _) in enumerate(scales) if after < before]
    lines.append(f"windows whose step GradScaler skipped: {skipped}")
    for k, step in enumerate(steps):
        seen = float(torch.tensor(step["grads"], dtype=torch.float64).norm())
        _, true_norm = _reference_step(config, step["params"], k)
        lines.append(f"applied step {k + 1}: the optimizer stepped with a gradient norm below 1% of max_norm "
                     f"({config.max_norm:g}) and of the true gradient's norm: "
                     f"{seen < 0.01 * min(config.max_norm, true_norm)}")
    print("\n".join(lines))
    return lines


# ---------------------------------------------------------------------------------------------------- analysis
def _reference_step(config: RunConfig, params: list[float], window: int) -> tuple[torch.Tensor, float]:
    """The clipped FP32 gradient of window ``window``'s mean loss over the global batch, at ``params``."""
    model = make_model(config)
    torch.nn.utils.vector_to_parameters(torch.tensor(params, dtype=torch.float32), model.parameters())
    batches = [micro_batch(config, window * config.accum_steps + i) for i in range(config.accum_steps)]
    loss = sum(F.mse_loss(model(x), y) for x, y in batches) / len(batches)
    loss.backward()
    grad = torch.cat([p.grad.reshape(-1).double() for p in model.parameters()])
    norm = float(grad.norm())
    return grad * min(1.0, config.max_norm / (norm + 1e-6)), norm


def analyse(task: str, config: RunConfig, done: dict[int, dict[str, Any]], reference: torch.Tensor | None = None,
            tolerance: float | None = None) -> str:
    """Judge the ranks' ``user_done`` records; raise :class:`CheckFailed` naming the mistake, else a summary."""
    records = done[min(done)]
    steps, windows, n_micro = records["steps"], config.windows, config.n_micro
    s = config.accum_steps
    if not steps:
        raise fail(task, "the optimizer never stepped (or every step was skipped): call `scaler.step(optimizer)` "
                         "once per window, after unscale_ and clipping.")
    if len(steps) == n_micro:
        raise fail(task, f"the optimizer stepped after every micro-batch ({n_micro} steps): step once per window of "
                         f"{s} micro-batches, after accumulating their gradients.")
    if len(steps) != windows:
        raise fail(task, f"expected {windows} optimizer steps ({n_micro} micro-batches in windows of {s}), saw "
                         f"{len(steps)}.")
    if records["allreduces"] and any(step.get("last_synced") is False for step in steps):
        raise fail(task, "the all-reduce ran on a micro-batch before the last of a window, and the last one ran "
                         "inside `no_sync()`: its gradients were never reduced, so the ranks would step on different "
                         "gradients. The last backward of a window must run outside `no_sync()` (it reduces the "
                         "whole window's gradients); run all the others inside `with model.no_sync():`.")
    if records["allreduces"] > windows:
        raise fail(task, f"DDP all-reduced the gradients {records['allreduces']} times for {windows} windows: you "
                         f"forgot `no_sync()`. Run forward and backward of all but the last micro-batch of a window "
                         "inside `with model.no_sync():`, so the gradients are all-reduced once per window.")
    diverged = len({r["hash"] for r in done.values()}) > 1
    if records["allreduces"] < windows or diverged:
        # One record (the in-process pre-run) cannot show ranks diverging; it only shows what would make them.
        outcome = ("and the ranks ended with different parameters" if diverged else
                   "so the ranks would train different models" if len(done) == 1 else
                   "so the ranks trained on unsynchronised gradients")
        raise fail(task, f"only {records['allreduces']} gradient all-reduces for {windows} windows, {outcome}: "
                         "the last micro-batch of each window must run outside `no_sync()`, so its backward "
                         "all-reduces the accumulated gradients.")
    for k, step in enumerate(steps):
        expected, true_norm = _reference_step(config, step["params"], k)
        seen = torch.tensor(step["grads"], dtype=torch.float64)
        seen_norm, expected_norm = float(seen.norm()), float(expected.norm())
        if not math.isfinite(seen_norm):
            raise fail(task, f"window {k + 1}: the optimizer stepped with inf/NaN gradients: step through "
                             "`scaler.step(optimizer)`, which skips such steps.")
        ratio = seen_norm / expected_norm
        scaled = config.init_scale
        if ratio < 0.01 and abs(seen_norm - config.max_norm / scaled) < 0.05 * config.max_norm / scaled:
            raise fail(task, f"you clipped before `unscale_`: the threshold {config.max_norm:g} was compared with "
                             f"gradients ×{scaled:g}, so the optimizer got gradients of norm {seen_norm:.3g}. Call "
                             "`scaler.unscale_(optimizer)` first, then `clip_grad_norm_`.")
        if abs(ratio - scaled) < 0.05 * scaled or abs(ratio - scaled * s) < 0.05 * scaled * s:
            raise fail(task, f"window {k + 1}: the optimizer stepped with gradients still multiplied by the scale "
                             f"({scaled:g}): call `scaler.unscale_(optimizer)` before clipping and step with "
                             "`scaler.step(optimizer)`.")
        if config.world_size > 1 and abs(ratio - config.world_size) < 0.05 * config.world_size:
            raise fail(task, f"window {k + 1}: the step gradient is {ratio:.2f}× the right one, about the number of "
                             "ranks: you all-reduced (summed) the gradients yourself on top of DDP, which already "
                             "averages them. Remove the manual all-reduce.")
        if seen_norm > config.max_norm * 1.05:
            raise fail(task, f"window {k + 1}: the optimizer stepped with gradients of norm {seen_norm:.3g}, above "
                             f"max_norm = {config.max_norm:g}: clip with `torch.nn.utils.clip_grad_norm_("
                             "model.parameters(), max_norm)` after `scaler.unscale_(optimizer)`.")
        if abs(ratio - 1) < 0.05 and float(seen @ expected) / (seen_norm * expected_norm) > 0.99:
            continue
        if ratio > 1.05 and true_norm < config.max_norm and abs(ratio - min(s, config.max_norm / true_norm)) < 0.1:
            raise fail(task, f"window {k + 1}: the step gradient is {ratio:.2f}× the window's mean gradient: you did "
                             f"not divide each micro-batch loss by the window's length ({s}).")
        raise fail(task, f"window {k + 1}: the step gradient is {ratio:.3g}× the right one (the mean gradient of the "
                         f"window's {s} micro-batches, clipped to max_norm).")
    summary = (f"{n_micro} micro-batches per rank → {windows} steps, {records['allreduces']} gradient all-reduces "
               f"(one per window), unscaled gradients clipped to max_norm, ranks bit-identical")
    if reference is not None:
        comparison = compare_params(torch.tensor(records["params"], dtype=torch.float64), reference,
                                    tolerance if tolerance is not None else 1e-3)
        if not comparison.ok:
            raise fail(task, f"the final parameters differ from the single-process reference ({comparison}), "
                             "although every step looked right: run the recipe exactly (autocast float16, "
                             "scale → backward, unscale_, clip, step, update).")
        summary += f"; vs the single-process run: {comparison}"
    return summary


# ------------------------------------------------------------------------------------------------------ the check
def _source(task: str, fn: Callable) -> str:
    if not inspect.isfunction(fn) or fn.__name__ == "<lambda>":
        raise fail(task, "`train` must be a function defined with `def train(...):` in a notebook cell.")
    try:
        source = textwrap.dedent(inspect.getsource(fn))
    except (OSError, TypeError):
        raise fail(task, "the check could not read the source of your function (it ships the source to the new "
                         "processes). Define it with `def` in a notebook cell and run that cell again.") from None
    outside = sorted(name for name in inspect.getclosurevars(fn).globals if name not in PROVIDED)
    if outside or fn.__closure__:
        names = ", ".join(f"`{n}`" for n in outside) or "variables of an enclosing function"
        raise fail(task, f"your function uses {names}, defined outside it. It runs in fresh processes that only "
                         f"provide {', '.join(PROVIDED)}: import or define what it needs inside the function.")
    return source


def _error_message(error: LaunchFailed) -> str:
    result = error.result
    errors = result.errors() if result is not None else {}
    if error.rank is not None and error.rank in errors:
        record = errors[error.rank]
        hint = ""
        if record.get("type") == "NameError":
            hint = (f" The function runs in fresh processes with only {', '.join(PROVIDED)} defined: import or "
                    "define what it needs inside it.")
        return (f"your function raised {record.get('type')} on rank {error.rank}: {record.get('message')}.{hint} "
                "(It ran in this process without error, so look for code that depends on the rank or on "
                "torch.distributed.)")
    return f"the launch failed: {error}"


def ddp_train(fn) -> None:
    """Task 1: ``train(model, loss_fn, optimizer, scaler, batches, accum_steps, max_norm)`` on a DDP model."""
    task = TASK
    require_callable(task, fn, "train")
    try:
        source = _source(task, fn)
    except CheckFailed:
        call(task, simulate, "train", fn)  # an untouched stub is "not started" rather than refused
        raise
    # The pre-run, in this process: the shipped source in the ranks' namespace, in a one-process group, so a stub
    # is "not started" and errors and AMP mistakes show at once, without paying for a launch.
    namespace: dict[str, Any] = {"torch": torch, "nn": nn, "F": F, "math": math, "contextlib": contextlib}
    try:
        exec(compile(source, "<your function>", "exec"), namespace)  # noqa: S102 - the learner's own function
    except Exception as error:  # noqa: BLE001
        raise fail(task, f"your function's cell could not run on its own ({type(error).__name__}: {error}).") from None
    fresh = namespace[fn.__name__]
    with one_process_group():
        simulated = call(task, simulate, "train", fresh)
        amp_precheck(task, fresh)
    if simulated["steps"] or simulated["allreduces"]:
        # The same analysis as the launch's, on the one-process run (no reference, one rank): the mistakes it
        # names are named here at once; what needs two real ranks (a manual all-reduce that sums, diverged
        # ranks, the final parameters against the single-process run) is judged after the launch.
        analyse(task, CONFIG, {0: simulated})
    config = dataclasses.replace(CONFIG, user_fn=fn.__name__)
    with tempfile.TemporaryDirectory(prefix="ampcourse-08-") as folder:
        run_dir = Path(folder)
        (run_dir / "user_fn.py").write_text(source, encoding="utf-8")
        config.write(run_dir)
        try:
            result = launch("ampcourse.ddp_train", nproc=config.world_size, args=[str(run_dir)], run_dir=run_dir,
                            timeout=TIMEOUT)
        except LaunchTimeout:
            raise fail(task, f"the two processes did not finish within {TIMEOUT:g} s and were killed: a rank is "
                             "stuck — an endless loop, or one rank waiting in an all-reduce the other never starts "
                             "(e.g. `no_sync()` used differently on the two ranks).") from None
        except LaunchFailed as error:
            raise fail(task, _error_message(error)) from None
        try:
            done = {rank: result.one(rank, "user_done") for rank in range(config.world_size)}
        except KeyError as error:
            raise fail(task, f"a rank finished without its record ({error}); the launch log is incomplete.") from None
    reference = train_single_process(dataclasses.replace(config, mode="ddp"))
    try:
        summary = analyse(task, config, done, reference.params, param_tolerance(config))
    except CheckFailed:
        raise
    except Exception as error:  # noqa: BLE001 - never an internal traceback
        raise fail(task, f"the ranks' logs could not be read ({type(error).__name__}: {error}).") from None
    passed(task, f"2 processes under torchrun: {summary}.")

# --- Task 2: how many bytes does a window all-reduce? ---------------------------------------------------------------

def _measured_allreduce(accum_steps: int, no_sync: bool) -> tuple[int, torch.dtype, int]:
    """(elements per all-reduce, the gradient buffer's dtype, all-reduces per window) of a real one-process DDP
    window under float16 autocast, read by a DDP communication hook."""
    from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook
    from torch.nn.parallel import DistributedDataParallel

    seen: list[tuple[int, torch.dtype]] = []

    def hook(state, bucket):
        seen.append((bucket.buffer().numel(), bucket.buffer().dtype))
        return allreduce_hook(state, bucket)

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 4))
    with one_process_group():
        ddp = DistributedDataParallel(model)
        ddp.register_comm_hook(None, hook)
        for i in range(accum_steps):
            last = i == accum_steps - 1
            with contextlib.nullcontext() if (last or not no_sync) else ddp.no_sync():
                with torch.autocast("cpu", dtype=torch.float16):
                    loss = ddp(torch.randn(8, 32)).float().pow(2).mean()
                loss.backward()
    n_params = sum(p.numel() for p in model.parameters())
    assert all(n == n_params for n, _ in seen), seen  # one bucket holds every gradient here
    return n_params, seen[0][1], len(seen)


def _windows(a: int, s: bool) -> int:
    return 1 if s else a


# Wrong rules (n, accum, no_sync, compress, element size under autocast) and what each gets wrong. An answer is
# blamed for one only when it agrees with that rule on every case.
_BYTES_MISTAKES = (
    (lambda n, a, s, c, e: n * 2 * _windows(a, s),
     "under autocast the parameters and their gradients stay float32 (4 bytes), so AMP does not halve the gradient "
     "traffic — only a compression hook does."),
    (lambda n, a, s, c, e: n * (2 if c else e),
     "without no_sync() every backward of the window all-reduces, accum_steps times per window; with it, once."),
    (lambda n, a, s, c, e: n * (2 if c else e) * a,
     "with no_sync() only the last micro-batch's backward all-reduces, once per window."),
    (lambda n, a, s, c, e: 8 * n * (2 if c else e) * _windows(a, s), "that is bits; return bytes."),
    (lambda n, a, s, c, e: n * _windows(a, s),
     "that counts elements, not bytes: multiply by the bytes per element as sent (4 for float32, 2 for the "
     "bfloat16 a compression hook sends)."),
    (lambda n, a, s, c, e: n * e * _windows(a, s),
     "a bf16 compression hook sends 2 bytes per element (bfloat16), not the 4 of the float32 gradients — that is "
     "the point of the hook."),
)


def allreduce_bytes(fn) -> None:
    """Task 2: ``allreduce_bytes(n_params, accum_steps, no_sync, bf16_compress)``: bytes all-reduced per window."""
    task = "Task 2 (allreduce_bytes)"
    require_callable(task, fn, "allreduce_bytes")
    call(task, fn, "allreduce_bytes", 1000, 4, True, False)  # an untouched stub is "not started" before any DDP run
    cases = []
    for accum, no_sync in ((3, True), (3, False), (1, True)):  # 3: not a power of two, not a byte size
        n_params, dtype, count = _measured_allreduce(accum, no_sync)
        element = BYTES_PER_ELEMENT[dtype]  # a constant: an answer cell may have patched Tensor.element_size
        for compress in (False, True):
            cases.append((n_params, accum, no_sync, compress, element, count))
    answers = []
    for n_params, accum, no_sync, compress, _, _ in cases:
        got = call(task, fn, "allreduce_bytes", n_params, accum, no_sync, compress)
        number = exact_number(got)  # int's own ==, never the answer's type's
        if number is None:
            raise fail(task, f"return a number of bytes, as an int (you returned {type(got).__name__}).")
        answers.append(number)
    wants = [count * n * (2 if compress else element) for n, _, _, compress, element, count in cases]
    if answers != wants:
        k = next(i for i, (got, want) in enumerate(zip(answers, wants, strict=True)) if got != want)
        n_params, accum, no_sync, compress, element, _ = cases[k]
        context = (f"for {n_params} parameters, {accum} micro-batches per window, no_sync={no_sync}, "
                   f"bf16_compress={compress} you said {answers[k]:g} bytes, a real DDP window all-reduces "
                   f"{wants[k]:g}")
        for rule, why in _BYTES_MISTAKES:
            if all(got == rule(n, a, s, c, e) for got, (n, a, s, c, e, _) in zip(answers, cases, strict=True)):
                raise fail(task, f"{context}: {why}")
        raise fail(task, f"{context}. Bytes per all-reduce = parameters × bytes per gradient element as sent; times "
                         "the number of all-reduces per window.")
    if floats := [got for got in answers if isinstance(got, float)]:
        raise fail(task, f"the byte counts are right, but you returned {floats[0]!r}, a float: a byte count is a "
                         "whole number and the task asks for an int. `/` makes a float even when it divides "
                         "exactly: use `*` and `//`, or `int(...)`.")
    passed(task, "bytes per window right with and without no_sync() and bf16 compression, measured on a real DDP "
                 "window: AMP leaves the gradients float32, so it does not halve the traffic — a bf16 hook does.")


# --- Task 3: a bf16 compression hook -------------------------------------------------------------------------------

class TwoRanks:
    """Stands for the process group given to the hook: two ranks (this process plays both)."""

    def size(self) -> int:
        return 2

    def rank(self) -> int:
        return 0


COMPLETION_DELAY = 0.05  # seconds: the simulated all-reduce completes this long after it started (or at wait())


class _Work:
    """A simulated asynchronous all-reduce on two ranks with identical gradients: while it is in flight the tensor
    holds NaN (on a real backend its contents are undefined until the collective completes); it completes at
    ``wait()``, or :data:`COMPLETION_DELAY` seconds later on a timer thread, writing the sum (2× the input) and
    completing the future — so a hook that reads the tensor before the work completes reads NaN."""

    def __init__(self, tensor: torch.Tensor) -> None:
        import threading

        self.tensor, self.sent = tensor, tensor.clone()
        self.future = torch.futures.Future()
        self._lock, self._done = threading.Lock(), False
        tensor.fill_(math.nan)
        self._timer = threading.Timer(COMPLETION_DELAY, self._complete)
        self._timer.daemon = True
        self._timer.start()

    def _complete(self) -> None:
        with self._lock:
            if self._done:
                return
            self._done = True
            self.tensor.copy_(self.sent * 2)  # the other rank holds the same gradient: SUM doubles it
        self.future.set_result([self.tensor])

    def wait(self, timeout=None) -> bool:
        self._timer.cancel()
        self._complete()
        return True

    def is_completed(self) -> bool:
        return self._done

    def get_future(self):
        return self.future


@contextlib.contextmanager
def _simulated_two_ranks(record: list[torch.dtype]):
    """``dist.all_reduce`` and ``dist.get_world_size`` as on two ranks with identical gradients: the sum doubles.
    An ``async_op=True`` all-reduce completes later (:class:`_Work`); a blocking one at once."""
    import torch.distributed as dist

    real_all_reduce, real_world_size = dist.all_reduce, dist.get_world_size
    pending: list[_Work] = []

    def all_reduce(tensor, op=None, group=None, async_op=False):
        record.append(tensor.dtype)
        work = _Work(tensor)
        pending.append(work)
        if not async_op:
            work.wait()
            return None
        return work

    dist.all_reduce, dist.get_world_size = all_reduce, lambda group=None: 2
    try:
        yield
    finally:
        for work in pending:  # nothing is left in flight after the check
            work.wait()
        dist.all_reduce, dist.get_world_size = real_all_reduce, real_world_size


def bf16_hook(fn) -> None:
    """Task 3: ``bf16_hook(process_group, bucket)``: a DDP communication hook that all-reduces in bfloat16."""
    from torch.nn.parallel import DistributedDataParallel

    task = "Task 3 (bf16_hook)"
    require_callable(task, fn, "bf16_hook")

    def make():
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(1)
            return nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 4))

    x = torch.randn(8, 32, generator=torch.Generator().manual_seed(2))
    reference = make()
    with torch.autocast("cpu", dtype=torch.float16):
        loss = reference(x).float().pow(2).mean()
    loss.backward()
    true = [p.grad.detach().clone() for p in reference.parameters()]
    sent: list[torch.dtype] = []
    problems: list[BaseException | str] = []
    held: list[Any] = []

    def guarded(state, bucket):
        """Runs the learner's hook; anything that would break DDP's C++ reducer is recorded instead."""
        try:
            result = noted_call(fn, state, bucket)
        except Exception as error:  # noqa: BLE001 - reported after backward, never inside the reducer
            problems.append(error)
            result = None
        if not issubclass(type(result), torch._C.Future) and not problems:  # real class: a Future or .then()
            problems.append(f"your hook returned {type(result).__name__}, not a `torch.futures.Future`")
        if problems:
            future = torch.futures.Future()
            future.set_result(bucket.buffer())
            return future

        def seen(future):  # what the learner's future holds, passed on to DDP unchanged
            value = future.value()
            held.append(value[0] if isinstance(value, list) and value else value)
            return value

        return result.then(seen)

    model = make()
    with one_process_group():
        ddp = DistributedDataParallel(model)
        ddp.register_comm_hook(TwoRanks(), guarded)
        with _simulated_two_ranks(sent):
            with torch.autocast("cpu", dtype=torch.float16):
                loss = ddp(x).float().pow(2).mean()
            call(task, lambda: loss.backward(), "bf16_hook")
    if problems and isinstance(problems[0], NotImplementedError):
        call(task, fn, "bf16_hook", None, None)  # "not started"
    if problems and isinstance(problems[0], BaseException):
        from . import raised_message

        raise fail(task, raised_message("bf16_hook", problems[0]))
    if problems:
        raise fail(task, f"{problems[0]}: return the future of the all-reduce, e.g. "
                         "`dist.all_reduce(t, group=process_group, async_op=True).get_future()`, chained with "
                         "`.then(...)` to copy the result back into the bucket's buffer.")
    if not sent:
        raise fail(task, "your hook never called `dist.all_reduce`: the hook must all-reduce the bucket "
                         "(`dist.all_reduce(tensor, group=process_group, async_op=True)`) and return its future.")
    if sent[0] == torch.float32:
        raise fail(task, "the all-reduce sent float32: nothing was compressed. Convert the bucket's buffer to "
                         "bfloat16 before the all-reduce, and back into the float32 buffer after it.")
    if sent[0] != torch.bfloat16:
        raise fail(task, f"the all-reduce sent {str(sent[0]).removeprefix('torch.')}; the task asks for bfloat16 "
                         "(float16's range can overflow a sum of gradients; bfloat16 has float32's range).")
    grads = [p.grad for p in model.parameters()]
    if any(g is not None and bool(g.isnan().any()) for g in grads):
        raise fail(task, "the gradients DDP got are NaN: your hook read the tensor before its all-reduce completed "
                         "(the check's all-reduce, like a real one with `async_op=True`, finishes later; until then "
                         "the tensor's contents are undefined). Copy the result back only after `work.wait()`, or "
                         "in a `.then(...)` callback of `work.get_future()`.")
    if held and isinstance(held[0], torch.Tensor) and held[0].dtype != torch.float32:
        raise fail(task, f"your hook's future holds the {str(held[0].dtype).removeprefix('torch.')} tensor that "
                         "was all-reduced, not the bucket's float32 buffer. DDP happens to copy it into the "
                         "gradients (it only checks the shape), but the task — and torch's own compression hooks "
                         "— copy the result back into `bucket.buffer()` and return that buffer.")
    if any(g is None or g.dtype != torch.float32 for g in grads):
        raise fail(task, "after backward the gradients are not float32: copy the all-reduced values back into the "
                         "bucket's (float32) buffer and return that buffer from the future.")
    ratio = grad_ratio = sum(g.double().norm() ** 2 for g in grads).sqrt() / sum(
        t.double().norm() ** 2 for t in true).sqrt()
    if abs(grad_ratio - 2) < 0.02:
        raise fail(task, "the gradients came out twice too large (on 2 ranks): all_reduce *sums*; DDP wants the "
                         "average. Divide by the world size (`process_group.size()`), before or after the "
                         "all-reduce.")
    if abs(ratio - 1) > 0.02 or any((g - t).abs().max() > 2.0**-7 * t.abs().max() + 1e-12
                                    for g, t in zip(grads, true, strict=True)):
        raise fail(task, f"the averaged gradients are {float(ratio):.3g}× the true ones, or differ by more than "
                         "bfloat16 rounding: all-reduce the bfloat16 copy of the buffer divided by the world size, "
                         "then copy it into the buffer.")
    if all(torch.equal(g, t) for g, t in zip(grads, true, strict=True)):
        raise fail(task, "the gradients are exactly the float32 ones: the values DDP used did not go through "
                         "bfloat16. Copy the all-reduced bfloat16 tensor back into the buffer and return the buffer.")
    passed(task, "the hook all-reduced a bfloat16 copy (half the bytes), averaged over the ranks, and handed DDP "
                 "float32 gradients equal to the true ones within bfloat16 rounding.")


# --- tiered hints: shown one tier per failed check, or on request with `check.hint(task)` ---

HINTS = {
    'train': [
        ("Three lines of evidence, three bugs. Which call decides how many backward passes all-reduce? What "
         "does `clip_grad_norm_` compare max_norm with before `unscale_`? And what happens to an inf gradient "
         "that nobody clears before the next window?"),
        ('`with model.no_sync():` around the forward and backward of each non-last micro-batch of a window; '
         '`scaler.unscale_(optimizer)` before clipping; `optimizer.zero_grad()` at the start of every window.'),
        ('per window: zero_grad; for i, (x, y): ctx = nullcontext() if last else model.no_sync(); with '
         'ctx: autocast float16, loss / len(window), scaler.scale(loss).backward(); then unscale_, '
         'clip_grad_norm_, scaler.step, scaler.update.'),
    ],
    'allreduce_bytes': [
        ('Two questions: in which dtype are the gradients DDP all-reduces under autocast (lesson 03: what '
         "dtype is a parameter's gradient?), and how many all-reduces does one window make?"),
        ('Under autocast the parameters stay float32, so do their gradients: 4 bytes each unless a hook '
         'compresses them to bfloat16 (2 bytes). Without no_sync() every backward all-reduces; with it, '
         'once per window.'),
        'return n_params * (2 if bf16_compress else 4) * (1 if no_sync else accum_steps).',
    ],
    'bf16_hook': [
        ('Three steps: make a smaller copy of the buffer, all-reduce it asynchronously, and put the result'
         ' back where DDP reads it. Which step averages?'),
        ('compressed = bucket.buffer().to(torch.bfloat16) divided by process_group.size(); all_reduce(...,'
         ' async_op=True).get_future(); chain `.then(f)` where f copies `future.value()[0]` into the '
         'float32 buffer and returns it.'),
        ('buffer = bucket.buffer(); c = buffer.to(torch.bfloat16).div_(process_group.size()); def back(f):'
         ' buffer.copy_(f.value()[0]); return buffer; return dist.all_reduce(c, group=process_group, '
         'async_op=True).get_future().then(back).'),
    ],
}
hint = hints(__name__, HINTS)
