"""Lesson 05: gradient accumulation, gradient clipping and the other AMP recipes, run for real on the CPU.

Every function trains or steps a tiny model (8 → 16 → 1, tanh; 161 parameters) under
``torch.autocast("cpu", dtype=torch.float16)`` with a real ``torch.amp.GradScaler("cpu")`` and returns plain
data (dataclasses) for a notebook to print. The recipes are PyTorch's documented AMP examples
(``docs/source/notes/amp_examples.rst``):

* **accumulation** — :func:`accumulated_grads`, :func:`full_batch_grads`, :func:`equivalence_report`,
  :func:`remainder_report`: dividing each micro-batch's mean loss by the number of micro-batches gives the
  full batch's gradient (FP32: to rounding; AMP: close, not equal), and a short last window divided by the
  full count gets a gradient that is too small.
* **clipping** — :func:`clip_demo`: ``unscale_`` *before* ``clip_grad_norm_``; the wrong order compares
  S × the norm with the threshold; ``unscale_`` twice raises; a non-finite gradient gives a non-finite norm.
* **several models/losses/optimizers** — :func:`multi_model_step`: one scaler, one ``scale`` per loss, one
  ``step`` per optimizer, one ``update`` per iteration.
* **gradient penalty** — :func:`gradient_penalty_step`: ``autograd.grad`` of the scaled loss, unscaled by hand.
* **checkpoints** — :func:`train_steps`, :func:`save_checkpoint`, :func:`load_checkpoint`,
  :func:`resume_matches`, :func:`resume_from_fp32`: save and restore the scaler with the model and optimizer.

GradScaler's skip decision is private; as in :mod:`ampcourse.scaler_run`, a skipped step is seen from the
outside through ``optimizer.register_step_post_hook`` (it fires only when ``optimizer.step()`` runs) and
through the scale (:func:`~ampcourse.scaler_run.step_was_skipped`).
"""

from __future__ import annotations

import math
import os
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from .scaler_run import StepCounter, step_was_skipped
from .tables import Table
from .validate import as_int, as_positive

__all__ = [
    "Accumulation", "ClipByOptimizer", "ClipDemo", "EquivalenceReport", "GradientPenalty", "MultiModelStep",
    "OPTIMIZERS", "Problem", "RemainderReport", "ResumeFromFP32", "ResumeReport", "TrainState",
    "accumulated_grads", "amp_loss", "clip_by_optimizer", "clip_demo", "equivalence_report", "full_batch_grads",
    "gradient_penalty_step", "load_checkpoint", "make_problem", "make_state", "multi_model_step", "one_amp_step",
    "remainder_report", "resume_from_fp32", "resume_matches", "save_checkpoint", "train_steps",
]

N_INPUTS, N_HIDDEN = 8, 16
REMAINDERS = ("right", "naive")


# ----------------------------------------------------------------------------------------------- checks




def _as_steps(name: str, value: Any, *, minimum: int) -> int:
    value = as_int(name, value, minimum=minimum)
    if value > MAX_STEPS:
        raise ValueError(f"{name} must be at most {MAX_STEPS:,} steps (got {value:,}): more would not finish in "
                         "reasonable time")
    return value


def _as_bool(name: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be a bool (got {value!r})")
    return value


def _as_module(name: str, value: Any) -> nn.Module:
    if not isinstance(value, nn.Module):
        raise TypeError(f"{name} must be a torch.nn.Module (got {type(value).__name__})")
    return value


def _as_data(data: Any) -> tuple[torch.Tensor, torch.Tensor]:
    if (not isinstance(data, Sequence) or len(data) != 2
            or not all(isinstance(t, torch.Tensor) for t in data)):
        raise TypeError("data must be a pair (inputs, targets) of tensors, e.g. make_problem().data")
    x, y = data
    if x.shape[0] != y.shape[0] or x.shape[0] == 0:
        raise ValueError(f"data: inputs and targets must have the same, non-zero number of rows "
                         f"(got {x.shape[0]} and {y.shape[0]})")
    return x, y


# ---------------------------------------------------------------------------------------------- problem
@dataclass(frozen=True)
class Problem:
    """A tiny regression problem: ``new_model()`` builds the same initial model every call.

    Attributes:
        inputs, targets: ``n_samples`` rows of a noisy one-neuron teacher (FP32).
        seed: seeds the data and the model's initial weights.
    """

    inputs: torch.Tensor = field(repr=False)
    targets: torch.Tensor = field(repr=False)
    seed: int

    @property
    def data(self) -> tuple[torch.Tensor, torch.Tensor]:
        return self.inputs, self.targets

    @property
    def n_samples(self) -> int:
        return self.inputs.shape[0]

    def new_model(self) -> nn.Module:
        """A fresh 8 → 16 → 1 tanh MLP, identical on every call (the global RNG is left alone)."""
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(self.seed)
            return nn.Sequential(nn.Linear(N_INPUTS, N_HIDDEN), nn.Tanh(), nn.Linear(N_HIDDEN, 1))

    def batch(self, step: int, batch_size: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The ``step``-th batch of ``batch_size`` rows, cycling through the data (deterministic)."""
        start = (step * batch_size) % self.n_samples
        index = torch.arange(start, start + batch_size) % self.n_samples
        return self.inputs[index], self.targets[index]


MAX_SAMPLES = 1_000_000
MAX_STEPS = 10_000  # training steps of one demo call (train_steps, resume_*): more would not finish in reasonable time


def make_problem(n_samples: int = 32, seed: int = 0) -> Problem:
    """A deterministic tiny regression problem and model factory.

    Example:
        >>> problem = make_problem(16)
        >>> problem.n_samples, sum(p.numel() for p in problem.new_model().parameters())
        (16, 161)
    """
    n_samples = as_int("n_samples", n_samples, minimum=1)
    if n_samples > MAX_SAMPLES:
        raise ValueError(f"n_samples must be at most {MAX_SAMPLES:,} (got {n_samples:,}): the demos hold every sample "
                         "in memory and run them all at once")
    seed = as_int("seed", seed, minimum=0)
    generator = torch.Generator().manual_seed(seed)
    inputs = torch.randn(n_samples, N_INPUTS, generator=generator)
    teacher = torch.randn(N_INPUTS, 1, generator=generator) / math.sqrt(N_INPUTS)
    targets = torch.tanh(3 * inputs @ teacher) + 0.1 * torch.randn(n_samples, 1, generator=generator)
    return Problem(inputs, targets, seed)


def amp_loss(model: nn.Module, x: torch.Tensor, y: torch.Tensor, amp: bool) -> torch.Tensor:
    """Mean squared error; under FP16 autocast the linears run in FP16 (``mse_loss`` autocasts to FP32)."""
    with torch.autocast("cpu", dtype=torch.float16, enabled=amp):
        return nn.functional.mse_loss(model(x), y)


def _flat(tensors) -> torch.Tensor:
    return torch.cat([t.detach().reshape(-1) for t in tensors]).clone()


def _flat_grads(model: nn.Module) -> torch.Tensor:
    return _flat([p.grad if p.grad is not None else torch.zeros_like(p) for p in model.parameters()])


def _flat_params(model: nn.Module) -> torch.Tensor:
    return _flat(model.parameters())


# ----------------------------------------------------------------------------------------- accumulation
@dataclass(frozen=True)
class Accumulation:
    """Gradients of an accumulation loop (see :func:`accumulated_grads`).

    Attributes:
        grads: one flat gradient per window (= per optimizer step), as it stands before ``step``.
        window_sizes: micro-batches in each window (the last one may be short).
        divisors: what each window's micro-batch losses were divided by.
        micro_batch_size: rows per micro-batch.
    """

    grads: tuple[torch.Tensor, ...] = field(repr=False)
    window_sizes: tuple[int, ...]
    divisors: tuple[int, ...]
    micro_batch_size: int
    amp: bool
    remainder: str

    @property
    def grad(self) -> torch.Tensor:
        """The gradient of the first (or only) window."""
        return self.grads[0]


def accumulated_grads(model: nn.Module, data, micro_batches: int, *, micro_batch_size: int | None = None,
                      amp: bool = False, remainder: str = "right", scale: float = 2.0**16) -> Accumulation:
    """Accumulate gradients over ``micro_batches`` micro-batches per optimizer step; return each window's gradient.

    The loop is the documented one: each micro-batch's mean loss is divided by the number of micro-batches
    in the window and ``backward()`` adds into ``.grad``; the window's gradient is read where
    ``optimizer.step()`` would run (no step is taken, so every window starts from the same weights).

    ``micro_batch_size=None`` splits ``data`` into exactly ``micro_batches`` equal micro-batches: one window,
    whose gradient equals the full batch's (:func:`full_batch_grads`). With a ``micro_batch_size``, the data
    is cut into micro-batches of that size (it must divide the rows) and grouped into windows of
    ``micro_batches``; when they do not divide evenly the last window is short, and its losses are divided by
    its own length (``remainder="right"``) or by ``micro_batches`` anyway (``"naive"``, the usual
    ``loss / accum_steps`` loop that steps on the leftovers at the end of an epoch).

    With ``amp=True`` the forward pass runs under FP16 autocast and the backward pass is scaled by a real
    ``GradScaler("cpu", init_scale=scale)``; the gradients are read after ``scaler.unscale_``.

    Example:
        >>> problem = make_problem(16)
        >>> acc = accumulated_grads(problem.new_model(), problem.data, 4)
        >>> acc.window_sizes, float((acc.grad - full_batch_grads(problem.new_model(), problem.data)).abs().max()) < 1e-6
        ((4,), True)
    """
    model = _as_module("model", model)
    x, y = _as_data(data)
    micro_batches = as_int("micro_batches", micro_batches, minimum=1)
    amp = _as_bool("amp", amp)
    if remainder not in REMAINDERS:
        raise ValueError(f"remainder must be one of {list(REMAINDERS)} (got {remainder!r})")
    scale = as_positive("scale", scale)
    n = x.shape[0]
    if micro_batch_size is None:
        if n % micro_batches:
            raise ValueError(f"micro_batches = {micro_batches} does not divide the {n} rows of data; "
                             "pass micro_batch_size to cut the data into windows with a remainder")
        micro_batch_size = n // micro_batches
    micro_batch_size = as_int("micro_batch_size", micro_batch_size, minimum=1)
    if n % micro_batch_size:
        raise ValueError(f"micro_batch_size = {micro_batch_size} does not divide the {n} rows of data")
    n_micro = n // micro_batch_size
    full, short = divmod(n_micro, micro_batches)
    sizes = [micro_batches] * full + ([short] if short else [])
    divisors = [k if remainder == "right" else micro_batches for k in sizes]

    optimizer = torch.optim.SGD(model.parameters(), lr=0.0)  # only for scaler.unscale_
    grads, first = [], 0
    for size, divisor in zip(sizes, divisors, strict=True):
        model.zero_grad(set_to_none=True)
        scaler = torch.amp.GradScaler("cpu", init_scale=scale, enabled=amp)
        for i in range(first, first + size):
            rows = slice(i * micro_batch_size, (i + 1) * micro_batch_size)
            loss = amp_loss(model, x[rows], y[rows], amp) / divisor
            scaler.scale(loss).backward()
        if amp:
            scaler.unscale_(optimizer)
        grads.append(_flat_grads(model))
        first += size
    model.zero_grad(set_to_none=True)
    return Accumulation(tuple(grads), tuple(sizes), tuple(divisors), micro_batch_size, amp, remainder)


def full_batch_grads(model: nn.Module, data, *, amp: bool = False, scale: float = 2.0**16) -> torch.Tensor:
    """The flat gradient of the mean loss over all of ``data`` in one backward pass (``amp`` as above)."""
    return accumulated_grads(model, data, 1, amp=amp, scale=scale).grad


@dataclass(frozen=True)
class EquivalenceReport:
    """Accumulated vs full-batch gradients (see :func:`equivalence_report`).

    Attributes:
        fp32_max_diff: max |accumulated − full batch|, both FP32 (rounding only: a different summation order).
        amp_max_diff: max |AMP accumulated − FP32 full batch| (FP16 rounding of activations and gradients).
        amp_vs_amp_max_diff: max |AMP accumulated − AMP full batch|.
        max_abs_grad: max |FP32 full-batch gradient|, for scale.
        fp32_equal_bits, amp_equal_bits: whether the two are identical bit for bit.
    """

    micro_batches: int
    n_samples: int
    max_abs_grad: float
    fp32_max_diff: float
    amp_max_diff: float
    amp_vs_amp_max_diff: float
    amp_rel_diff: float
    fp32_equal_bits: bool
    amp_equal_bits: bool

    def table(self) -> Table:
        # FP32's difference is a few units in the last place; which few depends on the CPU's matmul kernels
        # (AVX2 and AVX-512 sum in different orders), so the table shows the bound it meets (exact: fp32_max_diff).
        fp32 = "< 1e-06" if self.fp32_max_diff < 1e-6 else self.fp32_max_diff
        rows = [
            {"comparison": "FP32 accumulated vs FP32 full batch", "max |diff|": fp32,
             "why": "summation order only (rounding of FP32)"},
            {"comparison": "AMP accumulated vs FP32 full batch", "max |diff|": self.amp_max_diff,
             "why": "FP16 rounding of activations and gradients (~1e-3 relative)"},
            {"comparison": "AMP accumulated vs AMP full batch", "max |diff|": self.amp_vs_amp_max_diff,
             "why": "FP16 rounds different micro-batch sums differently"},
        ]
        return Table(rows, formats={"max |diff|": lambda v: v if isinstance(v, str) else f"{v:.3g}"},
                     title=f"{self.micro_batches} micro-batches of {self.n_samples // self.micro_batches} rows; "
                           f"max |grad| = {self.max_abs_grad:.3g}")


def equivalence_report(micro_batches: int = 4, *, n_samples: int = 32, seed: int = 0) -> EquivalenceReport:
    """FP32 accumulation equals the full batch to rounding; AMP accumulation is close but not equal.

    Example:
        >>> r = equivalence_report()
        >>> r.fp32_max_diff < 1e-6 < r.amp_max_diff < 1e-2
        True
    """
    problem = make_problem(n_samples, seed)
    full = full_batch_grads(problem.new_model(), problem.data)
    acc = accumulated_grads(problem.new_model(), problem.data, micro_batches).grad
    amp_acc = accumulated_grads(problem.new_model(), problem.data, micro_batches, amp=True).grad
    amp_full = full_batch_grads(problem.new_model(), problem.data, amp=True)
    max_grad = float(full.abs().max())
    amp_diff = float((amp_acc - full).abs().max())
    return EquivalenceReport(
        micro_batches=micro_batches, n_samples=n_samples, max_abs_grad=max_grad,
        fp32_max_diff=float((acc - full).abs().max()), amp_max_diff=amp_diff,
        amp_vs_amp_max_diff=float((amp_acc - amp_full).abs().max()),
        amp_rel_diff=float((amp_acc - full).norm() / full.norm()),
        fp32_equal_bits=torch.equal(acc, full), amp_equal_bits=torch.equal(amp_acc, full))


@dataclass(frozen=True)
class RemainderReport:
    """The last, short window of an accumulation loop (see :func:`remainder_report`).

    ``reference`` is the gradient of the **mean loss over the short window's rows alone** (one backward over
    them): what an optimizer step on that window should use. ``right_ratio`` and ``naive_ratio`` are
    ‖last-window gradient‖ / ‖reference‖ for the two remainders; ``naive_ratio`` is ``short / micro_batches``.
    """

    window_sizes: tuple[int, ...]
    micro_batches: int
    short_window: int
    right_ratio: float
    naive_ratio: float
    right_max_diff: float
    expected_naive_ratio: float


def remainder_report(micro_batches: int = 4, *, n_micro: int = 10, micro_batch_size: int = 2,
                     seed: int = 0) -> RemainderReport:
    """``n_micro`` micro-batches in windows of ``micro_batches``: how big is the last (short) window's gradient?

    Example:
        >>> r = remainder_report()   # 10 micro-batches in windows of 4, 4 and 2
        >>> r.window_sizes, round(r.right_ratio, 6), round(r.naive_ratio, 6)
        ((4, 4, 2), 1.0, 0.5)
    """
    micro_batches = as_int("micro_batches", micro_batches, minimum=1)
    n_micro = as_int("n_micro", n_micro, minimum=1)
    micro_batch_size = as_int("micro_batch_size", micro_batch_size, minimum=1)
    if n_micro * micro_batch_size > MAX_SAMPLES:
        raise ValueError(f"n_micro × micro_batch_size must be at most {MAX_SAMPLES:,} samples (got "
                         f"{n_micro:,} × {micro_batch_size:,})")
    short = n_micro % micro_batches
    if short == 0:
        raise ValueError(f"n_micro = {n_micro} divides into windows of micro_batches = {micro_batches}: "
                         "there is no short window")
    problem = make_problem(n_micro * micro_batch_size, seed)
    right = accumulated_grads(problem.new_model(), problem.data, micro_batches,
                              micro_batch_size=micro_batch_size, remainder="right")
    naive = accumulated_grads(problem.new_model(), problem.data, micro_batches,
                              micro_batch_size=micro_batch_size, remainder="naive")
    x, y = problem.data
    tail = slice((n_micro - short) * micro_batch_size, None)
    reference = full_batch_grads(problem.new_model(), (x[tail], y[tail]))
    return RemainderReport(
        window_sizes=right.window_sizes, micro_batches=micro_batches, short_window=short,
        right_ratio=float(right.grads[-1].norm() / reference.norm()),
        naive_ratio=float(naive.grads[-1].norm() / reference.norm()),
        right_max_diff=float((right.grads[-1] - reference).abs().max()),
        expected_naive_ratio=short / micro_batches)


# --------------------------------------------------------------------------------------------- clipping
@dataclass(frozen=True)
class ClipDemo:
    """One AMP step with ``clip_grad_norm_`` in the right and the wrong order (see :func:`clip_demo`).

    Attributes:
        true_norm: the unscaled gradient norm (what clipping should look at).
        right_norm, wrong_norm: what ``clip_grad_norm_`` returned in each order (wrong ≈ S × right).
        right_fired, wrong_fired: whether the norm it saw exceeded ``max_norm``.
        right_update, wrong_update: ‖parameter change‖ of the step.
        update_ratio: wrong_update / right_update.
        value_clip_update: ‖update‖ with ``clip_grad_value_(clip_value)`` after ``unscale_`` (right order).
        wrong_value_clip_update: ‖update‖ with ``clip_grad_value_`` before ``unscale_`` (wrong order).
        unscale_twice_error: the RuntimeError message of a second ``unscale_`` in one iteration.
        inf_norm: what ``clip_grad_norm_`` returns after ``unscale_`` when a gradient is inf.
        inf_step_skipped: whether ``scaler.step`` then skipped ``optimizer.step()``.
        inf_grads_after_clip: the clipped gradients' non-finite count (inf × 0 = NaN).
    """

    scale: float
    max_norm: float
    lr: float
    true_norm: float
    right_norm: float
    wrong_norm: float
    right_fired: bool
    wrong_fired: bool
    right_update: float
    wrong_update: float
    update_ratio: float
    clip_value: float
    value_clip_update: float
    wrong_value_clip_update: float
    unscale_twice_error: str
    inf_norm: float
    inf_step_skipped: bool
    inf_scale_after: float
    inf_nonfinite_after_clip: int

    def table(self) -> Table:
        rows = [
            {"order": "right: scale·backward, unscale_, clip, step", "norm seen by clip": self.right_norm,
             "clipped?": self.right_fired, "‖update‖": self.right_update},
            {"order": "wrong: scale·backward, clip, step (unscales inside)", "norm seen by clip": self.wrong_norm,
             "clipped?": self.wrong_fired, "‖update‖": self.wrong_update},
        ]
        return Table(rows, formats={"norm seen by clip": "{:.6g}", "‖update‖": "{:.3g}"},
                     title=f"S = {self.scale:g}, max_norm = {self.max_norm:g}, true ‖grad‖ = {self.true_norm:.4g}")


def one_amp_step(problem: Problem, scale: float, lr: float, before_step: Callable) -> tuple[float, Any, bool, float]:
    """One AMP step; ``before_step(model, optimizer, scaler)`` runs between backward and step."""
    model = problem.new_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    scaler = torch.amp.GradScaler("cpu", init_scale=scale)
    counter = StepCounter(optimizer)
    params = _flat_params(model)
    scaler.scale(amp_loss(model, *problem.data, True)).backward()
    result = before_step(model, optimizer, scaler)
    scaler.step(optimizer)
    scaler.update()
    counter.handle.remove()
    return float((_flat_params(model) - params).norm()), result, counter.calls == 1, scaler.get_scale()


def clip_demo(scale: float = 2.0**16, max_norm: float = 1.0, *, clip_value: float = 0.01, lr: float = 0.1,
              seed: int = 0) -> ClipDemo:
    """Gradient clipping under AMP, right order vs wrong order, plus the pitfalls around it.

    Right (documented): ``scaler.scale(loss).backward(); scaler.unscale_(opt); clip_grad_norm_(params, max_norm);
    scaler.step(opt); scaler.update()``. Wrong: ``clip_grad_norm_`` before ``unscale_`` — it sees S × the norm,
    clips to ``max_norm`` in *scaled* units, and ``scaler.step`` then divides by S. With SGD the update
    then shrinks to ``lr × max_norm / S`` (at S = 2^16, almost nothing), whatever the true norm; an adaptive
    optimizer (Adam, AdamW) divides the gradient by its own running size, which cancels the shrink as long as the
    shrunk gradients (about max_norm / (S × √N) per element, N weights) stay well above its ``eps`` (1e-8): then
    the wrong order changes the update little and the loss shows nothing; at a million weights (S = 2^16,
    max_norm = 1) they reach eps and the update shrinks too (:func:`clip_by_optimizer` measures both).
    What holds for every optimizer: the norm ``clip_grad_norm_`` returns is S × the true norm, and the clip
    fires whenever S × the norm exceeds ``max_norm`` (at a usual scale: every step), so ``max_norm`` means
    nothing.

    Example:
        >>> d = clip_demo()
        >>> round(d.wrong_norm / d.right_norm), d.wrong_fired, d.update_ratio < 1e-3
        (65536, True, True)
    """
    scale = as_positive("scale", scale)
    max_norm = as_positive("max_norm", max_norm)
    clip_value = as_positive("clip_value", clip_value)
    lr = as_positive("lr", lr)
    seed = as_int("seed", seed, minimum=0)
    problem = make_problem(32, seed)
    model = problem.new_model()
    amp_loss(model, *problem.data, True).backward()
    true_norm = float(_flat_grads(model).norm())

    def right(model, optimizer, scaler):
        scaler.unscale_(optimizer)
        return float(nn.utils.clip_grad_norm_(model.parameters(), max_norm))

    def wrong(model, optimizer, scaler):
        return float(nn.utils.clip_grad_norm_(model.parameters(), max_norm))

    def right_value(model, optimizer, scaler):
        scaler.unscale_(optimizer)
        nn.utils.clip_grad_value_(model.parameters(), clip_value)

    def wrong_value(model, optimizer, scaler):
        nn.utils.clip_grad_value_(model.parameters(), clip_value)

    def twice(model, optimizer, scaler):
        scaler.unscale_(optimizer)
        try:
            scaler.unscale_(optimizer)
        except RuntimeError as error:
            return str(error)
        return ""

    def inf(model, optimizer, scaler):
        with torch.no_grad():
            next(iter(model.parameters())).grad.view(-1)[0] = math.inf
        scaler.unscale_(optimizer)
        norm = float(nn.utils.clip_grad_norm_(model.parameters(), max_norm))
        return norm, int((~torch.isfinite(_flat_grads(model))).sum())

    right_update, right_norm, right_stepped, _ = one_amp_step(problem, scale, lr, right)
    if not right_stepped:
        raise ValueError(f"scale={scale:g} is too large for this demo: the float16 gradients overflow at that "
                         "scale, so GradScaler skips the step and there is no update to compare. Use a scale of at "
                         "most 2**16 (the default).")
    wrong_update, wrong_norm, _, _ = one_amp_step(problem, scale, lr, wrong)
    value_update = one_amp_step(problem, scale, lr, right_value)[0]
    wrong_value_update = one_amp_step(problem, scale, lr, wrong_value)[0]
    message = one_amp_step(problem, scale, lr, twice)[1]
    _, (inf_norm, nonfinite), inf_stepped, inf_scale_after = one_amp_step(problem, scale, lr, inf)
    return ClipDemo(
        scale=scale, max_norm=max_norm, lr=lr, true_norm=true_norm, right_norm=right_norm, wrong_norm=wrong_norm,
        right_fired=right_norm > max_norm, wrong_fired=wrong_norm > max_norm, right_update=right_update,
        wrong_update=wrong_update, update_ratio=wrong_update / right_update, clip_value=clip_value,
        value_clip_update=value_update, wrong_value_clip_update=wrong_value_update, unscale_twice_error=message,
        inf_norm=inf_norm, inf_step_skipped=not inf_stepped, inf_scale_after=inf_scale_after,
        inf_nonfinite_after_clip=nonfinite)


@dataclass(frozen=True)
class ClipByOptimizer:
    """Clipping before and after ``unscale_``, for SGD and for AdamW (see :func:`clip_by_optimizer`).

    Attributes (each a dict keyed by optimizer name, ``"SGD"`` and ``"AdamW"``):
        first_update: ``(right, wrong)`` ‖update‖ the first step asked for: the optimizer replayed in float64 on
            the gradients it really stepped with (an FP32 parameter difference this small is rounding noise).
        update_ratio: wrong / right first-step update.
        moved: ``(right, wrong)`` share of the FP32 weights whose value the first step changed at all.
        grad_rms: ``(right, wrong)`` root-mean-square per element of the gradients the first step used — what
            AdamW compares with its ``eps`` (1e-8).
        final_loss: ``(right, wrong)`` FP32 loss after ``steps`` steps.
        fired: ``(right, wrong)`` fraction of the steps on which the clip fired.
        norm_ratio: the median, over the steps, of the norm ``clip_grad_norm_`` returned in the wrong order
            divided by the norm of an FP32 reference gradient (no autocast, no scaling) at the same weights.
        n_params: the model's parameter count.
    """

    scale: float
    max_norm: float
    lr: float
    steps: int
    first_update: dict[str, tuple[float, float]]
    update_ratio: dict[str, float]
    moved: dict[str, tuple[float, float]]
    grad_rms: dict[str, tuple[float, float]]
    final_loss: dict[str, tuple[float, float]]
    fired: dict[str, tuple[float, float]]
    norm_ratio: dict[str, float]
    n_params: int

    def table(self) -> Table:
        rows = [{"optimizer": name, "update right": self.first_update[name][0],
                 "update wrong": self.first_update[name][1], "ratio": self.update_ratio[name],
                 "moved wrong": self.moved[name][1],
                 "loss right": self.final_loss[name][0], "loss wrong": self.final_loss[name][1],
                 "fired right": self.fired[name][0], "fired wrong": self.fired[name][1]}
                for name in self.first_update]
        formats = {key: "{:.3g}" for key in rows[0] if key != "optimizer"}
        formats.update({"fired right": "{:.0%}", "fired wrong": "{:.0%}", "moved wrong": "{:.0%}"})
        return Table(rows, formats=formats, title=f"S = {self.scale:g}, max_norm = {self.max_norm:g}, "
                                                  f"{self.n_params} weights: right = unscale_ then clip, wrong = "
                                                  "clip first; update: the first step's (float64), ratio = wrong / "
                                                  "right; moved: share of weights the first step changed; loss after "
                                                  f"{self.steps} steps; fired: share of steps clipped")


OPTIMIZERS = {"SGD": lambda params, lr: torch.optim.SGD(params, lr=lr),
              "AdamW": lambda params, lr: torch.optim.AdamW(params, lr=lr)}


def _intended_update(make: Callable, lr: float, start: list[torch.Tensor], grads: list[torch.Tensor]) -> float:
    """‖update‖ of one fresh-optimizer step from ``start`` with ``grads``, computed in float64."""
    params = [p.detach().double().clone().requires_grad_(True) for p in start]
    for p, g in zip(params, grads, strict=True):
        p.grad = g.double()
    make(params, lr).step()
    return float(torch.cat([(p.detach() - s.double()).flatten() for p, s in zip(params, start, strict=True)]).norm())


def clip_by_optimizer(scale: float = 2.0**16, max_norm: float = 1.0, *, lr: float = 1e-2, steps: int = 50,
                      seed: int = 0) -> ClipByOptimizer:
    """Train ``steps`` full-batch AMP steps with ``clip_grad_norm_`` after ``unscale_`` (right) and before it
    (wrong), with SGD and with AdamW, from the same start.

    SGD's update is the gradient × lr, so the wrong order shrinks it by about S (to at most lr × max_norm / S).
    AdamW divides each gradient by its running RMS, and that cancels the shrink — as long as the shrunk gradients
    stay well above AdamW's ``eps`` (1e-8), which it adds to that RMS. Clipped to ``max_norm`` in scaled units,
    they are about max_norm / (S × √N) per element for N weights: here (161 weights, S = 2^16, max_norm = 1) about
    1e-6, and AdamW's update barely changes, so its loss shows nothing; at a million weights the same setting
    gives about 1.5e-8, comparable with eps, and AdamW's update shrinks too. What every optimizer shows: the norm
    the wrong order's ``clip_grad_norm_`` returns is S × the true one, and the clip fires on every step.

    Example:
        >>> r = clip_by_optimizer(steps=5)
        >>> r.update_ratio["SGD"] < 1e-3, 0.5 < r.update_ratio["AdamW"] < 2, r.fired["AdamW"][1]
        (True, True, 1.0)
    """
    scale = as_positive("scale", scale)
    max_norm = as_positive("max_norm", max_norm)
    lr = as_positive("lr", lr)
    steps = _as_steps("steps", steps, minimum=1)
    seed = as_int("seed", seed, minimum=0)
    problem = make_problem(32, seed)
    first, moved, rms, final, fired, ratios = {}, {}, {}, {}, {}, {}
    for name, make in OPTIMIZERS.items():
        runs = []
        for unscale_first in (True, False):
            model = problem.new_model()
            params = list(model.parameters())
            optimizer = make(params, lr)
            scaler = torch.amp.GradScaler("cpu", init_scale=scale, growth_interval=10**6)
            stepped: list[list[torch.Tensor]] = []  # the gradients the optimizer really steps with
            hook = optimizer.register_step_pre_hook(
                lambda opt, args, kwargs, stepped=stepped, params=params: stepped.append(
                    [p.grad.detach().clone() for p in params]))
            start = [p.detach().clone() for p in params]
            clipped, norm_ratio, first_moved = 0, [], None
            for _ in range(steps):
                before = _flat_params(model)
                optimizer.zero_grad(set_to_none=True)
                reference = torch.autograd.grad(amp_loss(model, *problem.data, False), params)  # FP32, unscaled
                scaler.scale(amp_loss(model, *problem.data, True)).backward()
                if unscale_first:
                    scaler.unscale_(optimizer)
                returned = float(nn.utils.clip_grad_norm_(model.parameters(), max_norm))
                clipped += returned > max_norm
                norm_ratio.append(returned / float(_flat(reference).norm()))
                scaler.step(optimizer)
                scaler.update()
                if first_moved is None:
                    first_moved = float((_flat_params(model) != before).float().mean())
            hook.remove()
            with torch.no_grad():
                loss = float(amp_loss(model, *problem.data, False))
            grads = stepped[0]
            runs.append((_intended_update(make, lr, start, grads), first_moved,
                         float(_flat(grads).pow(2).mean().sqrt()), loss, clipped / steps,
                         statistics.median(norm_ratio)))
        (right, wrong) = runs
        first[name], moved[name], rms[name] = (right[0], wrong[0]), (right[1], wrong[1]), (right[2], wrong[2])
        final[name] = (right[3], wrong[3])
        fired[name] = (right[4], wrong[4])
        ratios[name] = wrong[5]
    return ClipByOptimizer(scale=scale, max_norm=max_norm, lr=lr, steps=steps, first_update=first,
                           update_ratio={k: v[1] / v[0] for k, v in first.items()}, moved=moved, grad_rms=rms,
                           final_loss=final, fired=fired, norm_ratio=ratios,
                           n_params=sum(p.numel() for p in problem.new_model().parameters()))


# ------------------------------------------------------------------------------------------ multi-model
@dataclass(frozen=True)
class MultiModelStep:
    """One iteration of the documented two-model, two-loss, two-optimizer AMP loop (see :func:`multi_model_step`)."""

    scale_before: float
    scale_after: float
    stepped: tuple[bool, bool]
    params_changed: tuple[bool, bool]
    scale_calls: int
    step_calls: int
    update_calls: int
    inject_inf: bool


def multi_model_step(*, inject_inf: bool = False, scale: float = 2.0**12, lr: float = 0.1,
                     seed: int = 0) -> MultiModelStep:
    """PyTorch's "multiple models, losses and optimizers" example, once, with one ``GradScaler``.

    ``scaler.scale(loss0).backward(retain_graph=True); scaler.scale(loss1).backward()`` (both losses use
    both models' outputs, so the graph is kept for the second backward); ``scaler.unscale_(optimizer0)``
    (optional: e.g. to clip model0); ``scaler.step(optimizer0); scaler.step(optimizer1)``; one
    ``scaler.update()``. Each optimizer checks its *own* gradients for infs: with ``inject_inf`` (an inf put
    into model1's gradient), optimizer0 still steps, optimizer1 skips, and the single update backs off.

    The default ``scale = 2**12`` is small enough for this model pair: measured, at ``2**14`` model1's FP16
    backward overflows on its own (optimizer0 steps, optimizer1 skips) and from ``2**15`` both do.

    Example:
        >>> multi_model_step().stepped, multi_model_step(inject_inf=True).stepped
        ((True, True), (True, False))
    """
    inject_inf = _as_bool("inject_inf", inject_inf)
    scale, lr = as_positive("scale", scale), as_positive("lr", lr)
    problem = make_problem(32, as_int("seed", seed, minimum=0))
    model0 = problem.new_model()
    model1 = make_problem(1, problem.seed + 1).new_model()
    optimizer0 = torch.optim.SGD(model0.parameters(), lr=lr)
    optimizer1 = torch.optim.SGD(model1.parameters(), lr=lr)
    scaler = torch.amp.GradScaler("cpu", init_scale=scale)
    counters = (StepCounter(optimizer0), StepCounter(optimizer1))
    before = (_flat_params(model0), _flat_params(model1))
    x, y = problem.data
    optimizer0.zero_grad()
    optimizer1.zero_grad()
    with torch.autocast("cpu", dtype=torch.float16):
        output0, output1 = model0(x), model1(x)
        loss0 = nn.functional.mse_loss(2 * output0 + 3 * output1, y)
        loss1 = nn.functional.mse_loss(3 * output0 - 5 * output1, y)
    scaler.scale(loss0).backward(retain_graph=True)
    scale_before = scaler.get_scale()
    scaler.scale(loss1).backward()
    if inject_inf:
        with torch.no_grad():
            next(iter(model1.parameters())).grad.view(-1)[0] = math.inf
    scaler.unscale_(optimizer0)
    scaler.step(optimizer0)
    scaler.step(optimizer1)
    scaler.update()
    for counter in counters:
        counter.handle.remove()
    return MultiModelStep(
        scale_before=scale_before, scale_after=scaler.get_scale(),
        stepped=(counters[0].calls == 1, counters[1].calls == 1),
        params_changed=(not torch.equal(before[0], _flat_params(model0)),
                        not torch.equal(before[1], _flat_params(model1))),
        scale_calls=2, step_calls=2, update_calls=1, inject_inf=inject_inf)


# ------------------------------------------------------------------------------------- gradient penalty
@dataclass(frozen=True)
class GradientPenalty:
    """One AMP step with a gradient-norm penalty, and the FP32 reference (see :func:`gradient_penalty_step`)."""

    scale: float
    penalty: float
    fp32_penalty: float
    penalty_rel_diff: float
    loss: float
    fp32_loss: float
    update_rel_diff: float
    stepped: bool


def gradient_penalty_step(*, scale: float = 2.0**12, lr: float = 0.1, seed: int = 0) -> GradientPenalty:
    """PyTorch's documented gradient-penalty recipe under AMP, once, compared with the same step in FP32.

    ``scaled = torch.autograd.grad(scaler.scale(loss), params, create_graph=True)``; unscale by hand with
    ``inv_scale = 1 / scaler.get_scale()`` (NOT ``unscale_``: these gradients are not in ``.grad``); the
    penalty ‖grad‖ is computed in the autocast region and added to the loss; then
    ``scaler.scale(loss).backward(); scaler.step(opt); scaler.update()``.

    Measured: the default ``scale = 2**12`` steps; at ``2**16`` the double backward overflows FP16 and the
    step is skipped (the penalty itself is still finite and close).

    Example:
        >>> g = gradient_penalty_step()
        >>> g.stepped, g.penalty_rel_diff < 1e-2
        (True, True)
    """
    scale, lr = as_positive("scale", scale), as_positive("lr", lr)
    problem = make_problem(32, as_int("seed", seed, minimum=0))
    results = {}
    for amp in (False, True):
        model = problem.new_model()
        optimizer = torch.optim.SGD(model.parameters(), lr=lr)
        scaler = torch.amp.GradScaler("cpu", init_scale=scale, enabled=amp)
        counter = StepCounter(optimizer)
        before = _flat_params(model)
        params = list(model.parameters())
        loss = amp_loss(model, *problem.data, amp)
        scaled_grads = torch.autograd.grad(scaler.scale(loss), params, create_graph=True)
        inv_scale = 1.0 / scaler.get_scale()
        grads = [g * inv_scale for g in scaled_grads]
        with torch.autocast("cpu", dtype=torch.float16, enabled=amp):
            penalty = torch.stack([g.pow(2).sum() for g in grads]).sum().sqrt()
            total = loss + penalty
        scaler.scale(total).backward()
        scaler.step(optimizer)
        scaler.update()
        counter.handle.remove()
        results[amp] = (float(penalty.detach()), float(loss.detach()), _flat_params(model) - before, counter.calls == 1)
    (p32, l32, u32, _), (p16, l16, u16, stepped) = results[False], results[True]
    return GradientPenalty(scale=scale, penalty=p16, fp32_penalty=p32, penalty_rel_diff=abs(p16 - p32) / p32,
                           loss=l16, fp32_loss=l32, update_rel_diff=float((u16 - u32).norm() / u32.norm()),
                           stepped=stepped)


# ------------------------------------------------------------------------------------------- checkpoints
@dataclass
class TrainState:
    """What a training loop carries: model, optimizer, scaler (None for FP32 training), steps done."""

    problem: Problem
    model: nn.Module
    optimizer: torch.optim.Optimizer
    scaler: torch.amp.GradScaler | None
    step: int = 0
    batch_size: int = 8
    skipped: list[int] = field(default_factory=list)
    losses: list[float] = field(default_factory=list)


def make_state(*, amp: bool = True, init_scale: float = 2.0**24, growth_interval: int = 5, lr: float = 0.05,
               batch_size: int = 8, seed: int = 0) -> TrainState:
    """A fresh :class:`TrainState`: SGD with momentum (it has state to save) and, with ``amp``, a GradScaler.

    The defaults (``init_scale = 2**24``, ``growth_interval = 5``) make the first steps overflow and later
    growths overflow again, so the scaler's state matters for a resumed run.
    """
    amp = _as_bool("amp", amp)
    init_scale, lr = as_positive("init_scale", init_scale), as_positive("lr", lr)
    growth_interval = as_int("growth_interval", growth_interval, minimum=1)
    batch_size = as_int("batch_size", batch_size, minimum=1)
    problem = make_problem(64, as_int("seed", seed, minimum=0))
    model = problem.new_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    scaler = (torch.amp.GradScaler("cpu", init_scale=init_scale, growth_interval=growth_interval)
              if amp else None)
    return TrainState(problem, model, optimizer, scaler, 0, batch_size)


def train_steps(state: TrainState, n: int) -> TrainState:
    """Run ``n`` training steps on ``state`` in place (AMP if it has a scaler, else FP32); returns it.

    Batches are chosen by the global step number, so a resumed run sees the same batches as a straight one.
    Skipped steps (the scale shrank) are appended to ``state.skipped``.
    """
    if not isinstance(state, TrainState):
        raise TypeError(f"state must be a TrainState, e.g. make_state() (got {type(state).__name__})")
    n = _as_steps("n", n, minimum=0)
    amp = state.scaler is not None
    for _ in range(n):
        x, y = state.problem.batch(state.step, state.batch_size)
        state.optimizer.zero_grad(set_to_none=True)
        loss = amp_loss(state.model, x, y, amp)
        if amp:
            scaled = state.scaler.scale(loss)
            scale = state.scaler.get_scale()
            scaled.backward()
            state.scaler.step(state.optimizer)
            state.scaler.update()
            if step_was_skipped(scale, state.scaler.get_scale()):
                state.skipped.append(state.step)
        else:
            loss.backward()
            state.optimizer.step()
        state.losses.append(float(loss.detach()))
        state.step += 1
    return state


def save_checkpoint(path: str | os.PathLike, model: nn.Module, optimizer: torch.optim.Optimizer,
                    scaler: torch.amp.GradScaler | None, step: int) -> None:
    """Save model, optimizer and scaler state dicts and the step, as PyTorch documents (``scaler=None``: FP32).

    Example:
        ``save_checkpoint("ckpt.pt", state.model, state.optimizer, state.scaler, state.step)``
    """
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"path must be a str or os.PathLike (got {type(path).__name__})")
    _as_module("model", model)
    if not isinstance(optimizer, torch.optim.Optimizer):
        raise TypeError(f"optimizer must be a torch.optim.Optimizer (got {type(optimizer).__name__})")
    if scaler is not None and not isinstance(scaler, torch.amp.GradScaler):
        raise TypeError(f"scaler must be a torch.amp.GradScaler or None (got {type(scaler).__name__})")
    step = as_int("step", step, minimum=0)
    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                "scaler": None if scaler is None else scaler.state_dict(), "step": step}, path)


def _read_checkpoint(path: str | os.PathLike) -> dict:
    """``torch.load(path, weights_only=True)`` of a :func:`save_checkpoint` file; anything else: one ValueError."""
    try:
        checkpoint = torch.load(path, weights_only=True)
    except Exception as err:  # noqa: BLE001 - UnpicklingError, a truncated zip, ...: one clear message
        raise ValueError(f"path: {os.fspath(path)!r} is not a readable checkpoint (written by save_checkpoint?): "
                         f"{type(err).__name__}") from None
    if not isinstance(checkpoint, dict) or not {"model", "optimizer", "scaler", "step"} <= set(checkpoint):
        raise ValueError(f"path: {os.fspath(path)!r} is not a save_checkpoint file (it lacks model/optimizer/"
                         "scaler/step)")
    return checkpoint


def load_checkpoint(path: str | os.PathLike, model: nn.Module, optimizer: torch.optim.Optimizer,
                    scaler: torch.amp.GradScaler | None = None, *, load_scaler: bool = True) -> int:
    """Load a :func:`save_checkpoint` file into fresh objects; returns the saved step.

    ``load_scaler=False`` (or a checkpoint saved without a scaler) leaves ``scaler`` as constructed: it
    starts again from its ``init_scale``.
    """
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"path must be a str or os.PathLike (got {type(path).__name__})")
    _as_module("model", model)
    load_scaler = _as_bool("load_scaler", load_scaler)
    if not os.path.isfile(path):
        raise ValueError(f"path: no checkpoint file at {os.fspath(path)!r}")
    checkpoint = _read_checkpoint(path)  # torch.load(path, weights_only=True), or a clear ValueError
    model.load_state_dict(checkpoint["model"])
    optimizer.load_state_dict(checkpoint["optimizer"])
    if scaler is not None and load_scaler and checkpoint["scaler"] is not None:
        scaler.load_state_dict(checkpoint["scaler"])
    return int(checkpoint["step"])


@dataclass(frozen=True)
class ResumeReport:
    """2k steps straight vs k steps → checkpoint → fresh objects → k steps (see :func:`resume_matches`).

    ``*_max_param_diff`` are max |parameter difference| with the straight run; ``*_scale`` the final scales.
    """

    k: int
    straight_scale: float
    resumed_scale: float
    no_scaler_scale: float
    resumed_identical: bool
    resumed_max_param_diff: float
    no_scaler_identical: bool
    no_scaler_max_param_diff: float
    straight_skipped: tuple[int, ...]
    resumed_skipped: tuple[int, ...]
    no_scaler_skipped: tuple[int, ...]


def _resumed(path, k: int, settings: dict, load_scaler: bool) -> TrainState:
    state = make_state(**settings)
    state.step = load_checkpoint(path, state.model, state.optimizer, state.scaler, load_scaler=load_scaler)
    return train_steps(state, k)


def resume_matches(path: str | os.PathLike, k: int = 20, **settings) -> ResumeReport:
    """Does a resumed AMP run match a straight one? With the scaler saved: bit for bit. Without: no.

    ``path`` is where the checkpoint is written; ``settings`` go to :func:`make_state`.

    Example:
        >>> import tempfile
        >>> with tempfile.TemporaryDirectory() as tmp:
        ...     r = resume_matches(os.path.join(tmp, "ckpt.pt"))
        >>> r.resumed_identical, r.no_scaler_identical
        (True, False)
    """
    k = _as_steps("k", k, minimum=1)
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"path must be a str or os.PathLike (got {type(path).__name__})")
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise ValueError(f"path: the folder {folder!r} does not exist (the checkpoint is written there)")
    straight = train_steps(make_state(**settings), 2 * k)
    first = train_steps(make_state(**settings), k)
    save_checkpoint(path, first.model, first.optimizer, first.scaler, first.step)
    resumed = _resumed(path, k, settings, True)
    no_scaler = _resumed(path, k, settings, False)
    reference = _flat_params(straight.model)

    def diff(state):
        return float((_flat_params(state.model) - reference).abs().max())

    return ResumeReport(
        k=k, straight_scale=straight.scaler.get_scale(), resumed_scale=resumed.scaler.get_scale(),
        no_scaler_scale=no_scaler.scaler.get_scale(),
        resumed_identical=torch.equal(_flat_params(resumed.model), reference)
        and resumed.scaler.get_scale() == straight.scaler.get_scale(),
        resumed_max_param_diff=diff(resumed),
        no_scaler_identical=torch.equal(_flat_params(no_scaler.model), reference),
        no_scaler_max_param_diff=diff(no_scaler), straight_skipped=tuple(straight.skipped),
        resumed_skipped=tuple(first.skipped + resumed.skipped),
        no_scaler_skipped=tuple(first.skipped + no_scaler.skipped))


@dataclass(frozen=True)
class ResumeFromFP32:
    """An FP32 checkpoint resumed under AMP with a fresh scaler (see :func:`resume_from_fp32`)."""

    k: int
    init_scale: float
    skipped: tuple[int, ...]
    final_scale: float
    loss_at_checkpoint: float
    final_loss: float
    all_finite: bool


def resume_from_fp32(path: str | os.PathLike, k: int = 20, *, init_scale: float = 2.0**24,
                     **settings) -> ResumeFromFP32:
    """Train ``k`` FP32 steps, save (no scaler state), resume under AMP with a fresh scaler, train ``k`` more.

    The fresh scaler starts at ``init_scale``; a too-large one costs a few skipped steps at the start,
    then training continues.
    """
    k = _as_steps("k", k, minimum=1)
    init_scale = as_positive("init_scale", init_scale)
    fp32 = train_steps(make_state(amp=False, **settings), k)
    save_checkpoint(path, fp32.model, fp32.optimizer, None, fp32.step)
    state = make_state(amp=True, init_scale=init_scale, **settings)
    state.step = load_checkpoint(path, state.model, state.optimizer, state.scaler)
    train_steps(state, k)
    return ResumeFromFP32(k=k, init_scale=init_scale, skipped=tuple(state.skipped),
                          final_scale=state.scaler.get_scale(), loss_at_checkpoint=fp32.losses[-1],
                          final_loss=state.losses[-1], all_finite=bool(torch.isfinite(_flat_params(state.model)).all()))
