"""The AMP flight recorder (lesson 11): watch any training loop and say, in plain words, what went wrong and where.

:class:`AmpRecorder` attaches to a model, its optimizer and (optionally) its ``torch.amp.GradScaler`` and
learning-rate scheduler; the training loop stays the user's own, with one added call, ``rec.step(loss)``
after each ``scaler.update()``. It records, per step, through public PyTorch APIs (one flag excepted, below):

* every step: the loss, the scale before and after the step, whether the optimizer applied the step
  (``optimizer.step()`` ran, seen by ``Optimizer.register_step_post_hook``; a fused optimizer's ``step()`` runs
  even on a step the scaler skips, and its kernel skips the update itself when the ``found_inf`` flag that
  ``GradScaler.step`` sets on it for the call is nonzero: the hook reads that flag, the one attribute read that
  the PyTorch docs do not list), the lr and the scheduler's ``last_epoch``;
* on sampled steps (``every=N``: steps 0, N, 2N, ..., and the step after an unsampled skipped or non-finite
  one; the hooks are attached only for those steps, so the other steps run at full speed): the module whose
  forward pass made the first inf or NaN (the first module whose output holds one, if its inputs were finite;
  else the innermost enclosing module whose inputs were finite: its own code between its submodules made it),
  each module's peak |output| and its headroom in bits to the autocast dtype's largest value, the
  gradient flowing out of each module (fraction zero or below float16's normal range at the current scale,
  and the first module whose backward made a finite gradient non-finite), each parameter's gradient
  (same fractions, first non-finite in backward order) and the true, unscaled gradient norm. The gradients
  of a sampled backward pass are kept by their hooks and measured together at its end, by a callback queued
  on the autograd engine (``torch.autograd.Variable._execution_engine.queue_callback``, not in the PyTorch
  docs; what DDP and FSDP use), before ``unscale_`` or clipping can change them in place: their kernels run
  back to back instead of one hook's work between each two of the backward pass's own
  (``benchmarks/recorder_overhead.py`` measures what a sampled step costs).

:meth:`AmpRecorder.findings` turns the records into :class:`Finding` s (kinds in :data:`KINDS`), each with a
message that names the fix. The scale rule is :func:`ampcourse.troubleshoot.diagnose_scale` (one rule for
the course: ``collapsing`` → ``scale_collapse``, ``unstable`` → ``frequent_skips``); the thresholds of the
other kinds are the constants below.

Under DDP each process records its own rank: its own batch, and the gradients its own backward pass produced
(measured before DDP's all-reduce averages them: at the end of the backward pass, since the recorder's callback is
queued before DDP's, which copies the averaged gradients back into ``param.grad``; with
``gradient_as_bucket_view=True``, where ``param.grad`` is the bucket DDP divides and all-reduces in place during the
backward pass, in each parameter's own hook, which runs before DDP's); module and parameter names carry DDP's
``module.`` prefix. A ``torch.compile`` d model gets a warning and step-level records only
(loss, scale, skips, lr, parameter gradients): module hooks cannot see inside a compiled graph, so record
the uncompiled model to find *where*.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import numbers
import struct
import warnings
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from .scaler_run import step_was_skipped
from .tables import Table
from .troubleshoot import COLLAPSE_WINDOW, MAX_SKIP_FRACTION, diagnose_scale
from .validate import as_int

__all__ = ["FP16_NORMAL_MIN", "FUSED_OPTIMIZERS", "KINDS", "LOW_HEADROOM_BITS", "MIN_FREQUENT_SKIPS", "RECENT_STEPS",
           "SAMPLE", "TRAILING_SKIPS", "UNDERFLOW_FRACTION", "AmpRecorder", "Finding", "ModuleStats", "StepRecord"]

FP16_MAX = float(torch.finfo(torch.float16).max)
FP16_NORMAL_MIN = float(torch.finfo(torch.float16).tiny)  # 2**-14: below it, fp16 is subnormal (fewer digits)
_FP16_SMALLEST = 2.0**-24  # float16's smallest subnormal
_FP16_SUBNORMAL_MIN = FP16_NORMAL_MIN * float(torch.finfo(torch.float16).eps)  # 2**-24: below half of it, fp16 is 0
#: :func:`_flushed_at_the_loss`: a loss whose |loss| x scale / numel is below this may have been flushed. float16
#: stores 0 at 2**-25 and below; the largest entry of a mean loss's gradient is about 0.3 x |loss| / numel or more for
#: MSE, cross-entropy, binary cross-entropy and L1 of O(1) losses (review rev24-r13 M1 measured 0.33-0.63), so a
#: flushed one has |loss| x scale / numel below 2**-25 / 0.3 < 2**-23; 2**-20 leaves a factor 32 of room, and an O(1)
#: loss at scale 65536 would need 2**36 outputs to come under it. Not covered (a flush read as the model's design,
#: review rev24-r14 M1/W1): losses whose gradient is far smaller than |loss| / numel (label smoothing near its optimum:
#: 0.006; L1 above 32; MSE on unnormalised targets) and accumulation over more than ~32 micro-batches.
_FLUSH_SPREAD = 2.0**-20
LOW_HEADROOM_BITS = 2.0  # low_headroom: a module's peak |output| within 2 bits (a factor 4) of the dtype's max
UNDERFLOW_FRACTION = 0.5  # underflow: more than half of a gradient's non-zero entries below fp16's normal range,
# able to carry more than half of its squared norm (or all of it 0 or below), on most sampled steps
SAMPLE = 4096  # gradient fractions are counted on at most this many entries of each tensor, spread over all of it
# and over every channel of its last dimension when that is at most SAMPLE wide (_sample_index)

MIN_FREQUENT_SKIPS = 3  # frequent_skips: at least this many skips after the first applied step (1 or 2: settling)
TRAILING_SKIPS = 3  # never healthy when the last this-many steps (or more) were all skipped
RECENT_STEPS = 2 * COLLAPSE_WINDOW  # frequent_skips also over the run's last this-many steps (a long clean start
# does not hide skips that keep coming back now)

def _fused_optimizers() -> tuple[str, ...]:
    """The ``torch.optim`` classes that, made with ``fused=True``, set ``_step_supports_amp_scaling``: those whose
    ``step()`` ``GradScaler.step`` calls also on a step it skips (read from the installed torch, not typed)."""
    import inspect

    names = []
    for name in sorted(dir(torch.optim)):
        cls = getattr(torch.optim, name)
        if not (inspect.isclass(cls) and issubclass(cls, torch.optim.Optimizer)):
            continue
        try:
            if "fused" not in inspect.signature(cls).parameters:
                continue
            optimizer = cls([nn.Parameter(torch.zeros(1))], lr=0.1, fused=True)
        except (TypeError, ValueError, RuntimeError):
            continue
        if getattr(optimizer, "_step_supports_amp_scaling", False):
            names.append(name)
    return tuple(names)


FUSED_OPTIMIZERS = _fused_optimizers()
"""The optimizers (class names in ``torch.optim``) whose ``fused=True`` form GradScaler steps on a skipped step:
Adagrad, Adam, AdamW and SGD in torch 2.13."""

KINDS = ("overflow", "nonfinite_input", "nonfinite_loss", "nonfinite_grad", "scale_collapse", "frequent_skips",
         "underflow",
         "low_headroom", "unneeded_scaler", "scheduler_on_skipped_step", "optimizer_not_stepped", "healthy")


# --- What the recorder gives back --------------------------------------------------------------------------

@dataclass(frozen=True)
class Finding:
    """One diagnosis: ``kind`` (one of :data:`KINDS`), the first ``step`` it showed at, ``where`` (a module's
    qualified name as in ``model.named_modules()``, ``""`` for the model itself; a parameter's name; or
    ``"scaler"``, ``"scheduler"``, ``"optimizer"``, ``"loss"``, ``"input"``) and a ``message`` that names the fix."""

    kind: str
    step: int
    where: str
    message: str

    def __str__(self) -> str:
        where = ("" if self.kind == "healthy" or self.where in ("scaler", "scheduler", "loss", "optimizer", "input")
                 else f" in {_label(self.where)}")
        return f"[{self.kind}] step {self.step}{where}: {self.message}"


@dataclass(frozen=True)
class ModuleStats:
    """What one module did on a sampled step (its calls merged: the largest peak, the worst gradient).

    Attributes:
        name: qualified name (``""``: the model itself).
        kind: class name.
        peak: the largest |value| of its floating-point outputs (inf if one is inf, NaN if one is NaN).
        limit: the largest finite value of the dtype it is measured against: its output's dtype when that is
            float32 (an ``FP32Island``, a float32 op) or autocast was off, else the autocast dtype (what the next
            autocast op casts to); a float32 output becomes measured against the autocast dtype when a module that
            runs autocast's low-precision ops (a Linear, a convolution) receives it and returns the autocast dtype.
        grad_lost: the fraction of the gradient flowing out of it (w.r.t. its output, as the backward pass
            holds it: multiplied by the loss scale) that is 0 or below fp16's normal range, counted on at most
            :data:`SAMPLE` entries of each tensor spread over all of it (:func:`_sample_index`); None if no
            gradient reached it.
        grad_subnormal: the fraction of its *non-zero* output-gradient entries below fp16's normal range.
        grad_finite: whether that gradient was finite (None if none reached it).
        dtype: its (first floating-point) output's dtype.
        cast_by: for a float32 output measured against the autocast dtype, the first module that received it
            and ran a low-precision op on it (its output in the autocast dtype); None otherwise.
        grad_subnormal_mass: the most of that gradient's squared norm its entries below fp16's normal range can
            carry (their count × (2**-14)² / the sample's squared norm, at most 1): the ``underflow`` rule counts
            them as lost only when they can carry more than :data:`UNDERFLOW_FRACTION` of it.
        minus_inf: its outputs' only non-finite values are -inf (no NaN, no +inf): on a step with a finite loss,
            a mask (``scores.masked_fill(future, -inf)``), which ``report()`` and ``plot()`` leave out of the
            headroom table and bars and the findings do not read as an overflow (:func:`_is_mask`).
        own_loss: for the model itself (``""``), when it returns a 0-d floating-point tensor (its own loss, as
            Hugging Face's ``outputs.loss``; the first such one of its outputs): that tensor's |value| (the largest
            over its calls); None otherwise (:func:`_flushed_at_the_loss` reads it).
        numel: for the model itself, the elements of its largest output that got a gradient and that no module
            took as an input, itself or through a view (in any of its calls): the outputs a loss reads (``recon`` of
            ``(z, recon)``, review rev24-r15 E4; ``logits`` of ``(logits, hidden)``, whose ``hidden`` the head took,
            even through a view: rev24-r16 E2, r18 E1; the larger of ``(recon, aux)`` both read by the loss,
            whichever was computed last: rev24-r17 E2); for other modules, the output whose gradient reached it
            first; where no output got a gradient, the most elements of one of its floating-point outputs in one
            call. :func:`_flushed_at_the_loss` divides the loss by it: a mean spreads the loss's gradient over that
            many entries.
        zero_d: every floating-point output it returned was 0-d (a loss module's output; a one-element output
            with a shape, a ``(1, 1)`` head at batch 1, is not: review rev24-r15 E2).
    """

    name: str
    kind: str
    peak: float
    limit: float
    grad_lost: float | None = None
    grad_subnormal: float | None = None
    grad_finite: bool | None = None
    dtype: torch.dtype | None = None
    cast_by: str | None = None
    minus_inf: bool = False
    grad_subnormal_mass: float | None = None
    own_loss: float | None = None
    numel: int | None = None
    zero_d: bool = False

    @property
    def finite(self) -> bool:
        return math.isfinite(self.peak)

    @property
    def headroom_bits(self) -> float:
        """log2(limit / peak): how many doublings the largest output can take before it overflows."""
        if not self.finite:
            return -math.inf
        return math.inf if self.peak == 0 else math.log2(self.limit / self.peak)


@dataclass(frozen=True)
class StepRecord:
    """What the recorder saw at one optimizer step (the sampled-only fields are None/empty on other steps).

    Attributes:
        step: 0, 1, 2, ... (one per ``rec.step`` call).
        loss: the loss as passed (float; inf/NaN if it was).
        scale_before, scale_after: ``scaler.get_scale()`` before the step and after its ``update()`` (None
            without an enabled scaler).
        stepped: the optimizer applied the step: ``optimizer.step()`` ran (``register_step_post_hook``) and
            did not skip it. ``GradScaler.step`` calls the ``step()`` of a fused optimizer (``fused=True``, one of
            :data:`FUSED_OPTIMIZERS`: ``_step_supports_amp_scaling``) also when a gradient is inf/NaN, handing it
            ``optimizer.found_inf`` for the call, and the fused kernel then leaves the weights alone: the hook
            reads that flag. (The scale going down is not the test: a scaler shared by two optimizers lowers
            it when either overflowed, and a resumed scaler changes it between steps.)
        skipped: it did not (with a scaler: the scaler skipped it because a gradient was inf/NaN).
        step_called: ``optimizer.step()`` ran (the hook fired), applied or not.
        scale_decreased: the scale went down (:func:`~ampcourse.scaler_run.step_was_skipped`).
        lr: ``optimizer.param_groups[0]["lr"]`` when ``rec.step`` ran.
        scheduler_epoch: the scheduler's ``last_epoch`` when ``rec.step`` ran (None without a scheduler).
        sampled: the hooks watched this step.
        autocast_dtype: the autocast dtype the forward pass ran under (None: autocast off, or not sampled).
        grad_norm: the true (unscaled) gradient norm: the norm of the gradients the backward pass produced,
            divided by the scale (inf if one is inf or NaN; None if no parameter got a gradient).
        first_nonfinite_module: the module whose forward pass made the first inf/NaN: the first module (in
            completion order) whose output held one, if its inputs were finite; else (the inf/NaN came in
            through its inputs, made between modules) the innermost enclosing module whose inputs were finite:
            its own forward code, between its submodules, made it.
        first_nonfinite_output: the first module, in completion order, whose forward output held inf/NaN.
        first_nonfinite_backward: the module whose backward made the first inf/NaN gradient: the first, in
            backward order, whose backward turned a finite gradient (w.r.t. its output) into a non-finite one
            (w.r.t. its input); or, when the first non-finite gradient is a module's *output* gradient (made by
            code between modules), the innermost enclosing module whose output gradient was finite.
        first_nonfinite_grad: the first parameter, in backward order, whose gradient was inf/NaN.
        input_finite: the model's floating-point inputs were finite (None if not sampled).
        modules: one :class:`ModuleStats` per module that ran, in execution order (first call).
        param_grad_lost: parameter name → fraction of its gradient 0 or below fp16's normal range at the
            current scale, in backward order (on a sample of at most :data:`SAMPLE` entries; for an
            ``nn.Embedding``: over all the rows that got a gradient).
        param_grad_subnormal: parameter name → the fraction of the *non-zero* entries of that sample (those
            rows) below fp16's normal range: the ``underflow`` rule reads it, as it reads a module's
            ``grad_subnormal``, so that entries 0 by design (the rows of a position table ``pos[:, :t]`` past the
            sequence length, a unit no input reached) are not read as lost.
        param_grad_subnormal_mass: parameter name → the most of its gradient's squared norm the entries below fp16's
            normal range can carry (as a module's ``grad_subnormal_mass``; the sample's count scaled to the whole
            gradient): many such entries far below the largest ones carry nothing (a softmax's tail).
        param_grad_norm: parameter name → the 2-norm of its true (unscaled) gradient (inf/NaN if it held one).
        step_called: ``optimizer.step()`` ran (see ``stepped``).
        scaler_checked: an enabled GradScaler was given, so ``GradScaler.step`` checked this step's gradients
            and applied it only if they were all finite (``torch/amp/grad_scaler.py``: ``optimizer.step()`` runs
            only when ``found_inf_per_device`` sums to 0): an applied step had finite gradients, whatever its loss.
        input_minus_inf: the positions (in the model's floating-point inputs, positional then keyword) of the
            inputs whose only non-finite values are -inf (an additive mask, or log(0) data); sampled steps only.
        input_broken: an input held NaN or +inf (broken data whatever came before); sampled steps only.
        input_masks: the positions of the inputs whose values are all 0 or -inf: additive masks (as
            ``nn.Transformer.generate_square_subsequent_mask`` gives), read as finite inputs on every sampled
            step, the first included — unless the first module whose output holds inf/NaN multiplies its input
            by a weight (:data:`_WEIGHTED`: a Linear, a convolution, an embedding) and received that input itself:
            that is log(0) data, since a mask is added to scores; sampled steps only.
        weights_finite: every trained parameter was finite when the step's hooks were attached (after the
            previous step's update, before this step's forward); None if not sampled.
        loss_cast_flushed: for a model that returns its own 0-d loss, the largest share, over the casts from
            float16 up to float32 between its modules' outputs and that loss, of the non-zero float32 loss
            gradient entries that are 0 once cast back down to float16 and that a scale keeping the largest entry
            under 65504 would have kept (flushed: the loss too small for float16, not a softmax's tail);
            None when there is no such cast with a non-zero gradient (or not sampled).
        loss_cast_zero: the parameters whose gradient comes only through such casts whose gradient was exactly 0
            (a term weighted by 0): their zeros are by design, not flushed.
        loss_cast_lost: the parameters whose gradient comes only through such casts that flushed more than
            :data:`UNDERFLOW_FRACTION` of their non-zero entries: their zeros are lost, whatever other terms do.
    """

    step: int
    loss: float
    scale_before: float | None
    scale_after: float | None
    stepped: bool
    skipped: bool
    scale_decreased: bool
    lr: float
    scheduler_epoch: int | None
    sampled: bool
    autocast_dtype: torch.dtype | None = None
    grad_norm: float | None = None
    first_nonfinite_module: str | None = None
    first_nonfinite_backward: str | None = None
    first_nonfinite_grad: str | None = None
    input_finite: bool | None = None
    modules: tuple[ModuleStats, ...] = ()
    first_nonfinite_output: str | None = None
    param_grad_lost: Mapping[str, float] = field(default_factory=dict)
    param_grad_subnormal: Mapping[str, float] = field(default_factory=dict)
    step_called: bool = False
    scaler_checked: bool = False
    input_minus_inf: tuple[int, ...] = ()
    input_broken: bool = False
    input_masks: tuple[int, ...] = ()
    weights_finite: bool | None = None
    param_grad_subnormal_mass: Mapping[str, float] = field(default_factory=dict)
    param_grad_norm: Mapping[str, float] = field(default_factory=dict)
    loss_cast_flushed: float | None = None
    loss_cast_zero: tuple[str, ...] = ()
    loss_cast_lost: tuple[str, ...] = ()

    @property
    def headroom_bits(self) -> dict[str, float]:
        """Module name → headroom in bits (sampled steps)."""
        return {m.name: m.headroom_bits for m in self.modules}


# --- The hooks of one sampled step -------------------------------------------------------------------------

def _tensors(tree: Any) -> list[torch.Tensor]:
    """The floating-point tensors in a module's output or inputs (a tensor, or tuples/lists/dicts/dataclass
    instances of them, nested)."""
    kind = type(tree)
    if kind is tuple and len(tree) == 1 and type(tree[0]) is torch.Tensor:  # the common (x,): fast path
        t = tree[0]
        return [t] if t.is_floating_point() and t.numel() else []
    if kind is torch.Tensor or isinstance(tree, torch.Tensor):
        return [tree] if tree.is_floating_point() and tree.numel() else []
    if isinstance(tree, (list, tuple)):
        return [t for item in tree for t in _tensors(item)]
    if isinstance(tree, dict):
        return [t for item in tree.values() for t in _tensors(item)]
    if dataclasses.is_dataclass(tree) and not isinstance(tree, type):  # e.g. a model's output dataclass
        return [t for f in dataclasses.fields(tree) for t in _tensors(getattr(tree, f.name, None))]
    return []


_LARGEST: dict[torch.dtype, float] = {}


def _largest(dtype: torch.dtype) -> float:
    """``torch.finfo(dtype).max`` as a float (kept: the forward hook asks for it on every module call)."""
    value = _LARGEST.get(dtype)
    if value is None:
        value = _LARGEST[dtype] = float(torch.finfo(dtype).max)
    return value


def _inputs(args: tuple, kwargs: dict) -> list[torch.Tensor]:
    """The floating-point tensors a module was called with, positional and keyword."""
    return _tensors(args) + _tensors(kwargs) if kwargs else _tensors(args)


def _widest_gap(step: int, last: int) -> int:
    """The widest gap between the channels ``k · step % last`` (``k < SAMPLE``) read, around the circle."""
    channels = torch.sort((torch.arange(SAMPLE, dtype=torch.int64) * step) % last).values
    return max(int((channels[1:] - channels[:-1]).max()), int(channels[0] + last - channels[-1]))


@functools.lru_cache(maxsize=256)
def _channel_step(last: int) -> int:
    """The step between the channels (last-dimension indices) of consecutive sample entries: coprime with
    ``last`` and near ``last`` times the golden ratio's fraction 0.618..., so that :data:`SAMPLE` consecutive
    entries read every channel when ``last <= SAMPLE``. For a wider last dimension (a 32000-word vocabulary) it is
    the candidate within 64 of that point whose channels leave the narrowest widest gap (at most
    ``2.5 · last / SAMPLE + 1`` ends the search; measured at most about ``3.1 · last / SAMPLE``): channels spread
    over the whole dimension, not a contiguous block (a stride near a multiple of ``last`` reads one)."""
    if last <= 2:
        return 1
    mid = round(last * (math.sqrt(5) - 1) / 2)
    best: tuple[int, int] | None = None
    for d in range(last):
        for c in (mid - d, mid + d):
            if not (0 < c < last and math.gcd(c, last) == 1):
                continue
            if last <= SAMPLE:
                return c
            gap = _widest_gap(c, last)
            if best is None or gap < best[0]:
                best = (gap, c)
            if gap <= 2.5 * last / SAMPLE + 1:
                return c
        if d >= 64 and best is not None:
            break
    return best[1] if best is not None else 1


@functools.lru_cache(maxsize=256)
def _sample_index(n: int, last: int, device: torch.device) -> torch.Tensor:
    """The flat indices of the sample of a tensor of ``n > SAMPLE`` entries whose last dimension is ``last``:
    entry ``k`` (of :data:`SAMPLE`) lies in the row (the flat index // ``last``) of the evenly spaced position
    ``k · n / SAMPLE``, so the sample spans the whole tensor (every batch item and, when there are at most
    ``SAMPLE`` rows, every row), at channel ``k · _channel_step(last) % last`` (every channel when ``last <=
    SAMPLE``). The ``SAMPLE`` indices are distinct. Kept per shape and device (one small int64 tensor)."""
    k = torch.arange(SAMPLE, dtype=torch.int64)
    rows = torch.div(k * n, SAMPLE, rounding_mode="floor") // last
    return (rows * last + (k * _channel_step(last)) % last).to(device)


def _sample(t: torch.Tensor) -> torch.Tensor:
    """The :data:`SAMPLE` entries of ``t`` at :func:`_sample_index` (all of ``t``, flat, when it is that small):
    spread over the whole tensor and over every channel of its last dimension."""
    flat = t.reshape(-1)
    n = flat.numel()
    return flat if n <= SAMPLE else torch.index_select(flat, 0, _sample_index(n, t.shape[-1], flat.device))


def _abs_range(t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(min, max) of ``t`` as two 0-d tensors, by one ``aminmax`` kernel with no tensor-sized copy
    (``abs().amax()`` copies the tensor; ``vector_norm(t, inf)`` is 5-10x slower on CPU): max |x| is taken from
    the pair on the host, after the step's one transfer (:func:`_abs_max_of`), so a measured tensor costs one op."""
    return torch.aminmax(t.detach())


def _input_ok(values: list[float], i: int, minus_inf_ok: bool) -> bool:
    """An input measured at ``i`` (its max |x|; its max at ``i + 1``) holds no NaN and no +inf, and a -inf only
    when ``minus_inf_ok``: no module's output held inf/NaN, or the first one that did received no inf/NaN input
    (:func:`_minus_inf_ok`). A -inf that does no harm is an additive mask or bias (0 or any finite value where
    attended, -inf where masked; softmax turns it into 0); one that makes the first non-finite output is broken
    data (log-features or log-probabilities with log(0)). An input whose values are all 0 or -inf (as
    ``nn.Transformer.generate_square_subsequent_mask`` gives) is a mask whatever happens after it
    (:func:`_zeros_and_minus_inf`: its peak is in ``masks`` of the callers), so an attention module that overflows
    on its own while it receives one is an overflow from the first step on. An attention module that overflows
    while it receives a mask with other values too (a relative-position bias folded with it) reads as broken
    data on that step: the recorder errs on the data's side there, unless the same input position held a
    harmless -inf on an earlier sampled step (:func:`_known_masks` then reads it as a mask, at diagnosis)."""
    top, high = values[i], values[i + 1]
    return not math.isnan(top) and high != math.inf and (top != math.inf or minus_inf_ok)


def _minus_inf_only(values: list[float], i: int) -> bool:
    """The tensor measured at ``i`` (max |x| at ``i``, max at ``i + 1``) holds -inf and no NaN or +inf."""
    return values[i] == math.inf and not math.isnan(values[i + 1]) and values[i + 1] != math.inf


def _first_bad_call(calls: list[tuple], values: list[float], loss_finite: bool = False) -> tuple | None:
    """The first module call (in completion order) whose output holds inf/NaN, or None. With ``loss_finite`` (the
    step's loss was finite) an output whose only non-finite values are -inf does not count: a mask module
    (``scores.masked_fill(future, -inf)``, a LogSoftmax over masked logits) whose -inf a later softmax or
    masked reduction turned finite again, not an overflow."""
    def bad(i: int) -> bool:
        return not math.isfinite(values[i]) and not (loss_finite and _minus_inf_only(values, i))
    return next((c for c in calls if any(bad(i) for i in c[4])), None)


def _minus_inf_ok(calls: list[tuple], values: list[float], loss_finite: bool = False,
                  masks: frozenset[int] = frozenset()) -> bool:
    """Whether a -inf in an input is harmless (an additive mask): no module output held inf/NaN, or the first
    one that did was handed only finite inputs or 0/-inf masks (``masks``: their peaks' indices; its -inf came
    from elsewhere, not from a mask of unknown values). A mask input that was harmless on an earlier sampled
    step stays a mask (:func:`_known_masks`, at diagnosis)."""
    bad = _first_bad_call(calls, values, loss_finite)
    return bad is None or all(math.isfinite(values[i]) or i in masks for i in bad[3])


def _zeros_and_minus_inf(t: torch.Tensor) -> torch.Tensor:
    """A 0-d bool tensor: every value of ``t`` is 0 or -inf, an additive mask
    (``generate_square_subsequent_mask``), not data. Taken of each floating-point model input on a sampled step, in
    the forward pre-hook (the input itself is not kept until ``rec.step``: under gradient accumulation that would
    hold every micro-batch, review rev24-r8); read at ``rec.step`` with the step's one transfer. Log-features and
    log-probabilities hold other negative values, a relative-position bias other values of either sign."""
    t = t.detach()
    return torch.logical_or(t == 0, t == -math.inf).all()


def _abs_max_of(low: float, high: float) -> float:
    """max |x| from ``t``'s (min, max): inf when ``t`` holds ±inf, NaN when it holds a NaN (either side)."""
    if math.isnan(low) or math.isnan(high):
        return math.nan
    return max(-low, high)


def _abs_max(t: torch.Tensor) -> float:
    """max |x| of ``t`` (a float; inf with ±inf, NaN with a NaN), as the recorder measures it."""
    low, high = _abs_range(t)
    return _abs_max_of(float(low), float(high))


_DEFER_BYTES = 64 * 2**20
"""The most gradient memory a sampled backward pass keeps alive to measure at its end (beyond it, measured at once)."""

_ENGINE = torch.autograd.Variable._execution_engine
"""The autograd engine: :meth:`_Probe._measure_params` is queued on it (``queue_callback``, what DDP and FSDP use)
to run once at the end of a backward pass."""

_FP16_OPS = (nn.Linear, nn.Conv1d, nn.Conv2d, nn.Conv3d, nn.ConvTranspose1d, nn.ConvTranspose2d,
             nn.ConvTranspose3d, nn.MultiheadAttention)
"""Modules whose forward runs autocast's lower-precision ops (linear, conv, matmul) on CPU and CUDA: a float32
input is cast to the autocast dtype there, so the module that produced it is measured against that dtype."""


_WEIGHTED = (nn.Linear, nn.Conv1d, nn.Conv2d, nn.Conv3d, nn.ConvTranspose1d, nn.ConvTranspose2d, nn.ConvTranspose3d,
             nn.Embedding, nn.EmbeddingBag)
"""Modules that multiply their input by a weight (or look it up): an additive mask is added to attention scores,
never handed to one of these, so a 0/-inf model input that such a module receives itself and whose output is the
first to hold inf/NaN is broken data (log(0) in a log-feature), not a mask (:meth:`_Probe.collect`)."""


_NARROW = (torch.float16, torch.bfloat16, torch.float32)
"""The float dtypes a norm may accumulate in float32 (``dtype=torch.float32`` refuses a float64 input)."""


def _weights_check(weights: list[torch.Tensor]) -> torch.Tensor:
    """A 0-d float32 tensor that is finite exactly when every tensor in ``weights`` is (the weights check).

    On a CPU (dtypes in :data:`_NARROW`): the sum of their 2-norms, by one ``_foreach_norm`` call. A NaN or inf
    makes it NaN or inf; finite weights give a finite sum unless one is beyond about 1e19 (its square
    overflows float32), and then the exact test below decides. Elsewhere, or when the sum is not finite: the
    largest max |w| of each (``_foreach_norm`` with ``ord=inf``: one fused kernel on CUDA, but on a CPU about 3-4x
    slower than the 2-norm, ~1 ms on lesson 11's model; there the sum's host check costs no device sync), tested
    for inf/NaN in its own dtype: 0 when all are finite, inf otherwise."""
    if all(w.device.type == "cpu" and w.dtype in _NARROW for w in weights):
        total = torch.stack(torch._foreach_norm(weights, 2, dtype=torch.float32)).sum()
        if math.isfinite(total):
            return total
    # each max |w| tested in its own dtype: a float64 weight beyond float32's range is finite (review rev24-r8)
    finite = _stack([torch.isfinite(t) for t in torch._foreach_norm(weights, math.inf)]).all()
    return torch.where(finite, 0.0, math.inf).float()


def _is_compiled(module: nn.Module) -> bool:
    """A ``torch.compile`` wrapper (``OptimizedModule``): it keeps the original module as ``_orig_mod``."""
    return type(module).__name__ == "OptimizedModule" and isinstance(getattr(module, "_orig_mod", None), nn.Module)


def _clean(name: str) -> str:
    """A name without ``torch.compile``'s ``_orig_mod`` level, so it reads as in the uncompiled model."""
    return ".".join(part for part in name.split(".") if part != "_orig_mod")


class _Hooks:
    """The hook functions of every sampled step, made once per recorder: each calls the method of the step's
    :class:`_Probe` (``probe``, set by the probe that registers them, which removes them again). Made per probe,
    they were about 1,700 objects for the garbage collector per sampled step (closures, their cells, bound methods),
    which lived through the step into its oldest generation and made it run a full collection every few dozen
    sampled steps (``benchmarks/recorder_overhead.py``).

    Each hook answers only the module (or parameter) it was made for, and only while a probe is open: a deep copy of
    the model (``AveragedModel(model)``, a "best model" snapshot) copies the hooks registered on it at that moment,
    and its calls must neither feed the recorder nor fail (review rev24-r12 E2)."""

    def __init__(self, modules: list[tuple[str, nn.Module]], params: list[tuple[str, nn.Parameter, bool]],
                 root: nn.Module) -> None:
        self.probe: _Probe | None = None
        self.root = root
        self.weights = [p for _, p, _ in params]
        self.weighted = frozenset(name for name, module in modules if isinstance(module, _WEIGHTED))
        self.modules = [(module, self._pre_hook(name, module, isinstance(module, _FP16_OPS),
                                                isinstance(module, _WEIGHTED)),
                         self._forward_hook(name, module)) for name, module in modules]
        self.params = [(param, self._param_hook(name, param, embedding)) for name, param, embedding in params]
        self.param_names = {id(param): name for name, param, _ in params}
        self.root_inputs = self._root_hook(root)

    def _root_hook(self, mine: nn.Module) -> Callable:
        ref = weakref.ref(mine)

        def hook(module: nn.Module, args: Any, kwargs: Any) -> None:
            if self.probe is not None and module is ref():
                self.probe._root_inputs(module, args, kwargs)
        return hook

    def _pre_hook(self, name: str, mine: nn.Module, casts: bool, weighted: bool) -> Callable:
        ref = weakref.ref(mine)

        def hook(module: nn.Module, args: Any, kwargs: Any) -> None:
            if self.probe is not None and module is ref():
                self.probe.pre_hook(name, casts, weighted, args, kwargs)
        return hook

    def _forward_hook(self, name: str, mine: nn.Module) -> Callable:
        ref = weakref.ref(mine)

        def hook(module: nn.Module, args: Any, kwargs: Any, output: Any) -> None:
            if self.probe is not None and module is ref():
                self.probe.forward_hook(name, module, args, kwargs, output)
        return hook

    def _param_hook(self, name: str, mine: torch.Tensor, embedding: bool) -> Callable:
        ref = weakref.ref(mine)

        def hook(param: torch.Tensor) -> None:
            if self.probe is not None and param is ref():
                self.probe.param_hook(name, embedding, param)
        return hook


class _GradientHook:
    """A tensor's gradient hook (:meth:`_Probe.gradient_hook`): one object, where a closure is four for the garbage
    collector (the function, its two cells and their tuple)."""

    __slots__ = ("probe", "roles")

    def __init__(self, probe: _Probe, roles: list[tuple[str, bool]]) -> None:
        self.probe, self.roles = probe, roles

    def __call__(self, grad: torch.Tensor) -> None:
        self.probe.gradient_hook(self.roles, grad)


class _CastHook:
    """The hook of a cast node between the model's float16 outputs and its own loss (:meth:`_Probe.cast_hook`)."""

    __slots__ = ("probe", "reach")

    def __init__(self, probe: _Probe, reach: frozenset | None) -> None:
        self.probe, self.reach = probe, reach

    def __call__(self, grad_inputs: tuple, grad_outputs: tuple) -> None:
        self.probe.cast_hook(self.reach, grad_inputs, grad_outputs)


_CAST_WALK = 2048  # graph nodes at most that the walks from a model's own loss (its casts, their parameters) visit


def _casts_up(node: Any) -> bool:
    """Whether a ``ToCopyBackward0`` node is a cast *to* float32 (the dtype of the gradient it receives, torch's
    ``_input_metadata``): one between float16 ops and the loss, not autocast's cast of a float32 weight down to
    float16 (review rev24-r18 E3: the walk stopped there and never reached a weight the loss reaches directly).
    Without that metadata (another torch), every cast counts as one."""
    try:
        return node._input_metadata[0].dtype == torch.float32
    except (AttributeError, IndexError, TypeError):
        return True


def _walk_graph(starts: list, budget: list[int], names: dict[int, str],
                stop_at_casts: bool = False) -> tuple[frozenset, list]:
    """The parameters (names) whose gradient accumulators the autograd graph reaches from ``starts``, and (with
    ``stop_at_casts``: not walking past them) the casts to float32 met (:func:`_casts_up`); ``budget[0]``: nodes
    left to visit (counted down; at 0 the walk stops short)."""
    todo, seen, params, casts = list(starts), set(), set(), []
    while todo and budget[0] > 0:
        node = todo.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        budget[0] -= 1
        variable = getattr(node, "variable", None)  # an AccumulateGrad node: the leaf it accumulates into
        if variable is not None:
            name = names.get(id(variable))
            if name is not None:
                params.add(name)
            continue
        if stop_at_casts and node.name() == "ToCopyBackward0" and _casts_up(node):
            casts.append(node)
            continue
        todo += [f for f, _ in node.next_functions]
    return frozenset(params), casts


class _Probe:
    """What the hooks (:class:`_Hooks`) of one sampled step collect. Everything a hook measures stays a tensor on the
    model's device; :meth:`collect` brings them to the CPU in one transfer (one GPU sync per sampled step).

    Each tensor is measured once, however many modules share it (a container's output is its last child's; a
    residual stream feeds several modules): one forward reduction (``aminmax``: max |x| is inf/NaN exactly when
    the tensor holds one) and one gradient hook. Inputs passed by keyword (``model(**batch)``,
    ``self.attn(hidden_states=h)``) are seen like positional ones. The gradient fractions are counted on a sample
    spread over the whole tensor of at most :data:`SAMPLE` entries per tensor (every entry below that)."""

    def __init__(self, hooks: _Hooks, at_once: bool = False) -> None:
        self.hooks = hooks
        self.handles: list[Any] = []
        self.order: list[str] = []
        self.kinds: dict[str, str] = {}
        # every measured 0-d tensor, in one list: collect() stacks it (one kernel, one transfer); the fields
        # below hold indices into it (a peak: the index of its min, its max at the next index)
        self.flat: list[torch.Tensor] = []
        self.pairs: list[int] = []
        # a small copy of each counted gradient's sample (never a view: it would keep the whole gradient
        # alive, and unscale_ / zero_grad change a parameter's gradient in place later); collect() counts them
        # all at once. A count below is -1 - k for sample k until collect() turns it into an index of values.
        self.samples: list[tuple[torch.Tensor, torch.dtype]] = []
        self.peaks: dict[str, list[int]] = {}
        self.limits: dict[str, float] = {}
        self.dtypes: dict[str, torch.dtype] = {}
        self.autocast: set[torch.dtype | None] = set()
        self.grad_out: dict[str, list[tuple[int, int, int]]] = {}  # lost, non-zero (indices), counted
        self.events: list[tuple[tuple[tuple[str, bool], ...], int]] = []  # (gradient roles, its peak)
        self.params: dict[str, tuple[int, int, int, int, int]] = {}  # lost, counted (-1 - count if kept here),
        # norm (an index of flat; or -1 - k: the norm of sample k, the whole gradient), non-zero, and the entries
        # the norm is over (as counted)
        self._pending: list[tuple[str, torch.Tensor, bool]] = []  # (name, gradient, embedding) not yet measured
        self._kept: list[list[tuple[str, bool]]] = []  # the roles of the gradients kept, not yet measured
        self._kept_grads: list[torch.Tensor] = []  # those gradients
        self._kept_bytes = 0
        self._queued = -1  # the graph task (backward pass) _measure_all is queued on; -1: none
        self._at_once = at_once  # measure each parameter's gradient in its own hook (DDP's bucket views)
        self.inputs: list[int] = []
        self._input_masks: list[int] = []  # per model input: the index of its _zeros_and_minus_inf flag
        self._root_storage: dict[int, int] = {}  # a model input's storage address -> the input's peak
        self._fed: dict[int, tuple[list[int], bool]] = {}  # call number -> (peaks of the model inputs it got,
        # it is a _WEIGHTED module): _fed_by_root
        # module calls in completion order: (name, call number, parent's call number, input peaks, output peaks)
        self.calls: list[tuple[str, int, int | None, list[int], list[int]]] = []
        self._stack: list[tuple[str, int, list[int], list[torch.Tensor]]] = []  # running calls: name, call
        # number, its input peaks, its inputs
        self._started = 0
        self.removed = False  # set by remove(): a tensor hook of a pending backward then does nothing
        self._peaks: dict[int, tuple[weakref.ref, int]] = {}  # id(tensor) -> (tensor, its peak)
        self._roles: dict[int, tuple[weakref.ref, list[tuple[str, bool]]]] = {}  # id(tensor) -> gradient roles
        self._made_by: dict[int, tuple[weakref.ref, list[str]]] = {}  # id(float32 output) -> modules returning it
        self._casts: dict[int, tuple[torch.dtype, list[str]]] = {}  # call number -> (autocast dtype, producers)
        self.cast_by: dict[str, str] = {}  # producer -> the first module that cast its float32 output down
        # the weights as the previous step's update left them: a forward inf/NaN on finite inputs with inf/NaN
        # weights is that update's doing, not this module's range
        weights = [p.detach() for p in hooks.weights]
        self.weights = None if not weights else self._put(_weights_check(weights))
        self._root = hooks.root
        self.own_loss: dict[str, list[int]] = {}  # the root's name -> the peaks of its calls' 0-d outputs: its loss
        # per float16 -> float32 cast between the model's outputs and its own loss: (indices in flat of the count of
        # non-zero float32 gradient entries of a sample, of those that are 0 once cast back to float16 and that a
        # larger scale would have kept; the parameters its gradient reaches): :meth:`cast_hook`
        self.loss_casts: list[tuple[int, int, frozenset | None]] = []
        self.loss_direct: frozenset | None = None  # the parameters the own loss reaches through no such cast
        self.numel: dict[str, int] = {}  # module -> the most elements of one of its outputs in one call
        self.shaped: set[str] = set()  # modules that returned a one-element output with a shape ((1, 1)), not 0-d
        self.grad_numel: dict[str, int] = {}  # module -> the elements of the first of its outputs' gradients
        # the model itself ("") -> the most elements of one of its outputs (in any call) that needs a gradient and
        # that no module took as an input, itself or through a view: the outputs a loss reads (logits, not the
        # hidden state the head took, even as hidden[:, -1]: review rev24-r18 E1; recon, not the z the decoder took;
        # the larger of two a loss reads, whichever was computed last: rev24-r17 E2; each call of a model called
        # twice a step: rev24-r19 E2)
        self.free_numel: dict[str, int] = {}
        self._view_bases: set[int] = set()  # id() of the tensors that a module input is a view of
        self._free_roles: dict[int, tuple[str, int]] = {}  # id() of such an output's roles list -> (model, numel)
        self._weighted = hooks.weighted
        hooks.probe = self  # the hooks, made once per recorder, call this probe's methods from now on
        handles = self.handles
        handles.append(hooks.root.register_forward_pre_hook(hooks.root_inputs, with_kwargs=True))
        for module, pre, post in hooks.modules:
            handles.append(module.register_forward_pre_hook(pre, with_kwargs=True))
            handles.append(module.register_forward_hook(post, with_kwargs=True))
        for param, hook in hooks.params:
            handles.append(param.register_post_accumulate_grad_hook(hook))

    def remove(self) -> None:
        self.removed = True  # first: gradient hooks registered on this step's graph tensors cannot be removed
        for handle in self.handles:
            handle.remove()
        self.handles.clear()
        if self.hooks.probe is self:
            self.hooks.probe = None  # its measurements are not kept alive by the hooks until the next probe
        self._peaks.clear()
        self._roles.clear()
        self._made_by.clear()
        self._casts.clear()

    def _root_inputs(self, module: nn.Module, args: Any, kwargs: Any) -> None:
        tensors = _inputs(args, kwargs)
        self.inputs += [self._peak(t) for t in tensors]
        self._input_masks += [self._put(_zeros_and_minus_inf(t)) for t in tensors]
        for t, i in zip(tensors, self.inputs[-len(tensors):] if tensors else (), strict=True):
            self._root_storage[t.untyped_storage().data_ptr()] = i

    def _put(self, t: torch.Tensor) -> int:
        """Keep a measured 0-d tensor for collect(); its index."""
        self.flat.append(t if t.dtype != torch.float64 else t.float())  # float64: not on MPS
        return len(self.flat) - 1

    def _keep_sample(self, g: torch.Tensor, n: int) -> tuple[int, int]:
        """Keep a copy of the sample (:func:`_sample`) of ``g`` (``n`` entries) for collect() (one kernel);
        (-1 - its number, its size). ``index_select``, not ``flat[index]``: the same entries, 3x faster on a CPU."""
        if n > SAMPLE:
            flat = torch.index_select(g.reshape(-1), 0, _sample_index(n, g.shape[-1], g.device))  # a copy
            n = SAMPLE
        else:
            flat = g.reshape(-1).clone()
        samples = self.samples
        samples.append((flat, flat.dtype))  # a plain copy: _magnitudes runs once per group later
        return -len(samples), n

    def _peak(self, t: torch.Tensor) -> int:
        peaks = self._peaks
        entry = peaks.get(id(t))
        if entry is not None and entry[0]() is t:
            return entry[1]
        peak = self._put_range(t)
        peaks[id(t)] = (weakref.ref(t), peak)
        return peak

    def _put_range(self, t: torch.Tensor) -> int:
        """Measure ``t`` (:func:`_abs_range`) and keep its (min, max) for collect(); the index of its min."""
        low, high = _abs_range(t)
        if low.dtype == torch.float64:  # not on MPS
            low, high = low.float(), high.float()
        flat = self.flat
        i = len(flat)
        flat += (low, high)
        self.pairs.append(i)
        return i

    def pre_hook(self, name: str, casts: bool, weighted: bool, args: Any, kwargs: Any) -> None:
        """A module's forward pre-hook (:class:`_Hooks`; ``casts``: it is one of :data:`_FP16_OPS`, ``weighted``: one
        of :data:`_WEIGHTED`)."""
        inputs = _tensors(args) + _tensors(kwargs) if kwargs else _tensors(args)  # _inputs, inlined
        number = self._started
        self._started = number + 1
        peak = self._peak
        self._stack.append((name, number, [peak(t) for t in inputs], inputs))
        bases = self._view_bases
        for t in inputs:
            if t._base is not None:
                bases.add(id(t._base))
        if casts and self._made_by:
            self._float32_inputs(number, inputs)
        if self._root_storage and inputs:
            self._fed_by_root(number, inputs, weighted)

    def _fed_by_root(self, number: int, inputs: list[torch.Tensor], weighted: bool) -> None:
        """Note the model inputs that this call receives, as they are or as a view (``x.reshape(...)``,
        ``x.flatten(1)``, ``x[:, None]``: the same storage), when it is a Linear/convolution/embedding
        (:data:`_WEIGHTED`) or receives nothing else (a Flatten, a LayerNorm over the input): a 0/-inf input that
        such a call turns into the first inf/NaN output is log(0) data, not a mask, which is added to scores beside
        other inputs (:meth:`collect`; reviews rev24-r8 and rev24-r9: reshaped, or behind a Flatten or LayerNorm,
        it read as a mask)."""
        storage = self._root_storage
        ptrs = [t.untyped_storage().data_ptr() for t in inputs]
        fed = [storage[p] for p in ptrs if p in storage]
        if fed and (weighted or len(fed) == len(ptrs)):
            self._fed[number] = (fed, weighted)

    def _float32_inputs(self, number: int, inputs: list[torch.Tensor]) -> None:
        """Note the float32 inputs, made by watched modules, of a call of a module that may run autocast's
        low-precision ops on them; its forward hook decides (:meth:`_cast_down`)."""
        for t in inputs:
            entry = self._made_by.get(id(t))
            if t.dtype != torch.float32 or entry is None or entry[0]() is not t:
                continue
            device = t.device.type
            if torch.is_autocast_enabled(device):
                dtype, producers = self._casts.setdefault(number, (torch.get_autocast_dtype(device), []))
                producers += [p for p in entry[1] if p not in producers]

    def _cast_down(self, name: str, number: int | None, outs: list[torch.Tensor]) -> None:
        """A module that received float32 inputs (:meth:`_float32_inputs`) and returned the autocast dtype ran a
        low-precision op on them: it cast them down, so their producers are measured against that dtype (on CUDA
        a LayerNorm's float32 output, say). One that returned float32 (its own forward turned autocast off, an
        "FP32 head") cast nothing."""
        pending = self._casts.pop(number, None) if number is not None else None
        if pending is None or not outs or outs[0].dtype != pending[0]:
            return
        limit = _largest(pending[0])
        for producer in pending[1]:
            if limit < self.limits[producer]:
                self.limits[producer] = limit
                self.cast_by.setdefault(producer, name)

    def _pop_call(self, name: str, outs: list[torch.Tensor]) -> tuple[int | None, list[int], list | None]:
        """Close this module's call (the innermost running call of that name; calls left open above it by an
        exception are dropped) and record it with its parent call and its input and output peaks: (its number,
        its output peaks, its input tensors)."""
        stack, peak = self._stack, self._peak
        i = len(stack) - 1
        while i >= 0 and stack[i][0] != name:
            i -= 1
        peaks = [peak(t) for t in outs]
        if i < 0:
            return None, peaks, None
        _, started, inputs, tensors = stack[i]
        del stack[i:]
        parent = stack[-1][1] if stack else None
        self.calls.append((name, started, parent, inputs, peaks))
        return started, peaks, tensors

    def forward_hook(self, name: str, module: nn.Module, args: Any, kwargs: Any, output: Any) -> None:
        """A module's forward hook (:class:`_Hooks`)."""
        peaks_of, limits, made_by, watch = self.peaks, self.limits, self._made_by, self._watch_gradient
        outs = _tensors(output)
        number, out_peaks, inputs = self._pop_call(name, outs)
        if self._casts:
            self._cast_down(name, number, outs)
        if not outs:
            return
        if module is self._root:
            loss = next((p for t, p in zip(outs, out_peaks, strict=True) if t.dim() == 0), None)
            if loss is not None:
                self.own_loss.setdefault(name, []).append(loss)
                self._hook_loss_casts(next(t for t in outs if t.dim() == 0))
            taken = {i for call in self.calls if call[0] != name for i in call[3]}  # the modules' input peaks
            free = [t for t, p in zip(outs, out_peaks, strict=True)
                    if t.requires_grad and p not in taken and id(t) not in self._view_bases
                    and (t._base is None or id(t._base) not in self._view_bases)]
        else:
            free = ()
        first = outs[0]
        size = first.numel() if len(outs) == 1 else max(t.numel() for t in outs)  # (z, recon): rev24-r15 E4
        if size > self.numel.get(name, 0):
            self.numel[name] = size
        if size == 1 and any(t.dim() for t in outs):  # a batch-1 (1, 1) head, not a 0-d loss: rev24-r15 E2
            self.shaped.add(name)
        device = first.device.type
        autocast = torch.is_autocast_enabled(device)
        dtype = torch.get_autocast_dtype(device) if autocast else None
        self.autocast.add(dtype)
        # a float32 output (an FP32Island, a float32 op under autocast) is measured against float32's max,
        # until a module that casts its inputs to the autocast dtype receives it (_cast_inputs)
        own = first.dtype
        limit = _largest(own if own == torch.float32 or not autocast else dtype)
        peaks = peaks_of.get(name)
        if peaks is None:
            self.order.append(name)
            self.kinds[name], peaks_of[name], limits[name] = type(module).__name__, list(out_peaks), limit
            self.dtypes[name] = own
        else:
            peaks += out_peaks
            if limit < limits[name]:
                limits[name] = limit
        if autocast:
            for t in outs:
                if t.dtype == torch.float32:
                    entry = made_by.get(id(t))
                    if entry is not None and entry[0]() is t:
                        entry[1].append(name)
                    else:
                        made_by[id(t)] = (weakref.ref(t), [name])
        if torch.is_grad_enabled():
            for t in outs:
                if t.requires_grad:
                    watch(t, (name, False))
            for t in inputs if inputs is not None else _inputs(args, kwargs):
                if t.requires_grad:
                    watch(t, (name, True))
            for t in free:  # counted once its gradient arrives: an attention map returned for logging gets none
                entry = self._roles.get(id(t))  # (review rev24-r20 E2)
                if entry is not None and entry[0]() is t:
                    self._free_roles[id(entry[1])] = (name, t.numel())

    def _hook_loss_casts(self, loss: torch.Tensor) -> None:
        """Hook the casts from float16 up to float32 between the model's float16 ops and its own loss (a ``.float()``
        before the loss, autocast's cast into ``mse_loss``/``cross_entropy``): their backward casts the loss's
        float32 gradient down to float16, which is where a loss too small for float16 is flushed. Read there, exact
        zeros (a dead ReLU's, a term weighted by 0) are told from flushed ones (review rev24-r15 E1/E3). Each cast
        also gets the parameters its gradient reaches (their gradient accumulators below it), so that a parameter
        reached only through casts whose gradient was exactly 0 is known to be 0 by design. The walks visit at most
        :data:`_CAST_WALK` graph nodes in all; beyond, the casts found are still read, the parameters not."""
        if loss.grad_fn is None:
            return
        budget = [_CAST_WALK]
        names = self.hooks.param_names
        direct, casts = _walk_graph([loss.grad_fn], budget, names, stop_at_casts=True)
        reached = [_walk_graph([f for f, _ in cast.next_functions], budget, names)[0] for cast in casts]
        complete = budget[0] > 0
        self.loss_direct = direct if complete else None
        for cast, reach in zip(casts, reached, strict=True):
            cast.register_hook(_CastHook(self, reach if complete else None))

    def cast_hook(self, reach: frozenset | None, grad_inputs: tuple, grad_outputs: tuple) -> None:
        """A loss cast's backward (:meth:`_hook_loss_casts`; ``reach``: the parameters its gradient reaches): of a
        sample of the float32 gradient's non-zero entries, how many are 0 in float16."""
        if self.removed or not grad_inputs or not grad_outputs:
            return
        low, high = grad_inputs[0], grad_outputs[0]
        if low is None or high is None or low.dtype != torch.float16 or high.dtype != torch.float32:
            return
        high, low = _sample(high.detach()), _sample(low.detach())
        nonzero = high != 0
        # a flushed entry counts only where a scale that keeps the largest entry under 65504 would have kept it: a
        # confident softmax's tail is flushed at any scale, by design (review rev24-r19 E1); a share of the
        # squared norm instead missed a flush of most entries of small-unit targets (rev24-r20 E1)
        size = high.abs()
        kept = size * (FP16_MAX / size.max()) >= _FP16_SMALLEST
        self.loss_casts.append((self._put(nonzero.sum()), self._put((nonzero & (low == 0) & kept).sum()), reach))

    def _watch_gradient(self, t: torch.Tensor, role: tuple[str, bool]) -> None:
        """Hook ``t``'s gradient (once per tensor) and note ``role`` (module name, is it an input) for it."""
        roles = self._roles
        entry = roles.get(id(t))
        if entry is not None and entry[0]() is t:
            entry[1].append(role)
            return
        kept = [role]
        roles[id(t)] = (weakref.ref(t), kept)
        t.register_hook(_GradientHook(self, kept))

    def gradient_hook(self, roles: list[tuple[str, bool]], grad: torch.Tensor) -> None:
        """Keep the gradient to measure it with the others at the end of the backward pass (holding it,
        autograd never reuses its memory in place: it does that only with a tensor nobody else holds), up to
        :data:`_DEFER_BYTES` at a time: beyond, the kept ones are measured at once, in order."""
        if self.removed:
            return
        g = grad.detach() if grad.requires_grad else grad  # (create_graph=True): record no graph
        n = g.numel()
        grad_numel = self.grad_numel
        free = self._free_roles.get(id(roles))
        if free is not None and free[1] > self.free_numel.get(free[0], 0):
            self.free_numel[free[0]] = free[1]
        for name, is_input in roles:  # the output whose gradient came first (the loss's): rev24-r16 E2
            if not is_input and name not in grad_numel:
                grad_numel[name] = n
        size = n * g.element_size()
        if self._kept_bytes + size > _DEFER_BYTES or not self._queue():
            self._measure_gradients()
            self._measure_gradient(roles, g)
            return
        self._kept_bytes += size
        self._kept.append(roles)  # two lists, no tuple per gradient: fewer objects for the garbage collector
        self._kept_grads.append(g)

    def _queue(self) -> bool:
        """Queue :meth:`_measure_all` to run at the end of this backward pass (once per pass: the graph task's
        id tells them apart); False outside one. A backward pass that raised never ran its callback: what it
        left kept is measured now, before this pass adds to it (a retried backward, as an OOM-retry loop does,
        is measured at its own end, before ``unscale_`` changes its gradients in place)."""
        task = torch._C._current_graph_task_id()
        if task == -1:  # not inside a backward pass
            return False
        if self._queued != task:
            if self._queued != -1:  # the pass it was queued on raised: its callback never ran
                self._measure_all()
            _ENGINE.queue_callback(self._measure_all)
            self._queued = task
        return True

    def _measure_all(self, force: bool = False) -> None:
        """The end of a backward pass: measure the gradients and the parameters kept during it (not once the probe
        is removed, unless ``force``: collect() measures what a backward pass that raised left kept)."""
        self._queued = -1
        self._measure_gradients(force)
        self._measure_params(force)

    def _measure_gradients(self, force: bool = False) -> None:
        kept, grads = self._kept[:], self._kept_grads[:]
        self._kept.clear()
        self._kept_grads.clear()
        self._kept_bytes = 0
        if self.removed and not force:
            return
        for roles, g in zip(kept, grads, strict=True):
            self._measure_gradient(roles, g)

    def _measure_gradient(self, roles: list[tuple[str, bool]], g: torch.Tensor) -> None:
        """One gradient event: its max |x| (inf/NaN exactly when the gradient holds one) and, for a gradient
        w.r.t. a module's output, a copy of its sample for the counts."""
        top = self._put_range(g)
        self.events.append((tuple(roles), top))
        outs = [name for name, is_input in roles if not is_input]
        if outs:
            k, n = self._keep_sample(g, g.numel())
            counts = (k, k, n)  # lost, non-zero: both counted on sample k at collect()
            grad_out = self.grad_out
            for name in outs:
                grad_out.setdefault(name, []).append(counts)

    def param_hook(self, name: str, embedding: bool, param: torch.Tensor) -> None:
        """Note the parameter and its gradient; measured with the others at the end of this backward pass
        (:meth:`_measure_params`): ``unscale_``, clipping and the optimizer come after ``backward()`` returns.
        The gradient tensor is kept, not read from ``param.grad`` again there: DDP with
        ``gradient_as_bucket_view=True`` copies it into its bucket and makes ``param.grad`` a view of that,
        which it divides by the world size and all-reduces in place while the backward pass goes on. A
        gradient that is such a view already (DDP's after its first backward pass; ``at_once``: the recorder
        was given the DDP wrapper) is measured now, in its own hook, which runs before DDP's (the tensor's
        post-accumulate hooks run before the AccumulateGrad node's post hooks, where DDP's reducer marks it
        ready)."""
        if self.removed:
            return
        grad = param.grad
        if grad is None:
            return
        if self._at_once or grad._is_view() or not self._queue():  # a bucket's view, or outside a backward
            self._measure_param(name, grad, embedding)
            return
        self._pending.append((name, grad, embedding))

    def _measure_params(self, force: bool = False) -> None:
        """Measure the gradients noted in this backward pass, in the order they were accumulated (at its end,
        :meth:`_measure_all`: the kernels back to back instead of one hook's work between each two of the backward
        pass's own kernels)."""
        pending = self._pending[:]
        self._pending.clear()
        if self.removed and not force:
            return
        for name, grad, embedding in pending:
            self._measure_param(name, grad, embedding)

    def _measure_param(self, name: str, grad: torch.Tensor, embedding: bool) -> None:
        """Measure one parameter's gradient ``grad``: a copy of its sample (the whole gradient up to :data:`SAMPLE`
        entries) and, for a larger one, its norm; an embedding's over the rows that got a gradient."""
        params = self.params
        if grad.is_sparse:
            return
        g = grad.detach() if grad.requires_grad else grad
        if embedding and g.dim() == 2:  # rows of tokens absent from the batch are 0 by design: leave them out
            a = g.abs()
            used = (a > 0).any(dim=1, keepdim=True)
            counted = self._put(used.sum() * a.shape[1])
            lost = self._put(((a < FP16_NORMAL_MIN) & used).sum())
            nonzero = self._put((a > 0).sum())
            size = counted  # the rows no token reached are 0: the norm is the used rows' norm
        else:
            n = g.numel()
            lost, kept = self._keep_sample(g, n)
            counted = -1 - kept
            params.pop(name, None)  # a later call (accumulation) replaces the earlier one, in its new place
            if kept == n:  # the sample is the whole gradient: its norm is counted with it at collect()
                params[name] = (lost, counted, lost, lost, counted)  # sample k, stored as -1 - k
            else:
                params[name] = (lost, counted, self._put(torch.linalg.vector_norm(g, dtype=torch.float32)), lost,
                                -1 - n)
            return
        params.pop(name, None)
        params[name] = (lost, counted, self._put(torch.linalg.vector_norm(g, dtype=torch.float32)), nonzero, size)

    def collect(self, scale: float, loss_finite: bool = False) -> dict[str, Any]:
        """The sampled-step fields of a :class:`StepRecord` (``scale``: the scale the loss was multiplied by;
        ``loss_finite``: the step's loss was finite, so a module output whose only non-finite values are -inf
        was a mask, not the start of an overflow: :func:`_first_bad_call`)."""
        if self._kept or self._pending:  # a backward pass that raised before its end: measured now, in order
            self._measure_all(force=True)
        # one stack of the measured 0-d tensors, one cat with the counts, one transfer (float32 holds every
        # count exactly: at most 2**24)
        samples = self.samples
        parts, at, norm_at = _group_counts(samples, range(len(samples))) if samples else ([], {}, {})
        order = None
        if self.flat:
            # one stack per dtype: a stack of mixed dtypes converts each 0-d tensor on its own (4x slower)
            by_dtype: dict[torch.dtype, list[int]] = {}
            for i, t in enumerate(self.flat):
                by_dtype.setdefault(t.dtype, []).append(i)
            if len(by_dtype) == 1:
                parts.insert(0, _stack(self.flat).float())
            else:
                flat = self.flat
                parts[:0] = [_stack([flat[i] for i in ix]).float() for ix in by_dtype.values()]
                order = [i for ix in by_dtype.values() for i in ix]
        values: list[float] = []
        if parts:
            try:
                values = (torch.cat(parts) if len(parts) > 1 else parts[0]).tolist()
            except RuntimeError:  # the samples on another device than the 0-d tensors (a model split across them)
                values = torch.cat([t.cpu() for t in parts]).tolist()
            if order is not None:  # back to the order of self.flat
                head = values[:len(order)]
                for j, i in enumerate(order):
                    values[i] = head[j]
            for i in self.pairs:
                values[i] = _abs_max_of(values[i], values[i + 1])
        flat, samples = len(self.flat), len(self.samples)
        nonzero_at, norms_at = flat + samples, flat + 2 * samples

        def lost(i: int) -> int:  # i: an index of values, or sample k stored as -1 - k: its count of lost entries
            return flat + at[-1 - i] if i < 0 else i

        outs = {name: [(lost(i), nonzero_at + at[-1 - j], n, norms_at + norm_at[-1 - j]) for i, j, n in counts]
                for name, counts in self.grad_out.items()}
        params = {name: (lost(i), counted, norm if norm >= 0 else norms_at + norm_at[-1 - norm],
                         nonzero if nonzero >= 0 else nonzero_at + at[-1 - nonzero], size)
                  for name, (i, counted, norm, nonzero, size) in self.params.items()}
        inputs, peaks, events, calls = self.inputs, self.peaks, self.events, self.calls
        # the model's inputs whose values are all 0 or -inf: additive masks
        mask_peaks = frozenset(i for i, flag in zip(inputs, self._input_masks, strict=True)
                               if _minus_inf_only(values, i) and values[i + 1] == 0 and values[flag] == 1.0)
        bad = _first_bad_call(calls, values, loss_finite) if mask_peaks else None
        fed, weighted = self._fed.get(bad[1], ((), False)) if bad is not None else ((), False)
        if fed and (weighted or mask_peaks.issuperset(fed)):
            # a mask is added to scores beside other values, never multiplied by a weight: a 0/-inf model input (or
            # a view of it) that the first module with an inf/NaN output received, being a Linear, a convolution,
            # an embedding, or fed by nothing but such inputs (a Flatten, a LayerNorm over the input), is log(0) data
            mask_peaks -= frozenset(fed)
        elif bad is not None and bad[0] in self._weighted:
            if any(_minus_inf_only(values, i) for i in bad[3]):
                # a Linear/conv/embedding handed a -inf (no NaN, no +inf) by the model's own code: the 0/-inf input
                # standardised, cast or concatenated on its way there (review rev24-r10), never a mask's use
                mask_peaks = frozenset()
            else:
                mask_peaks -= frozenset(bad[3])
        masks = _minus_inf_ok(calls, values, loss_finite, mask_peaks)
        return {
            "autocast_dtype": _lowest(self.autocast),
            "input_finite": None if not self.inputs else all(i in mask_peaks or _input_ok(values, i, masks)
                                                             for i in inputs),
            "input_minus_inf": tuple(k for k, i in enumerate(inputs) if _minus_inf_only(values, i)),
            "input_masks": tuple(k for k, i in enumerate(inputs) if i in mask_peaks),
            "input_broken": not all(_input_ok(values, i, True) for i in inputs),
            "weights_finite": None if self.weights is None else math.isfinite(values[self.weights]),
            "modules": self._modules(peaks, outs, events, values),
            **_forward_culprit(calls, values, loss_finite, mask_peaks),
            "first_nonfinite_backward": _backward_culprit(events, values),
            **_cast_fields(self.loss_casts, self.loss_direct, values),
            **_param_fields(params, values, scale),
        }

    def _numel(self, name: str) -> int | None:
        """A module's ``numel`` (:class:`ModuleStats`): for the model itself, its largest output that got a
        gradient and that no module took as an input; else the output whose gradient came first; else its largest
        output."""
        return self.free_numel.get(name, self.grad_numel.get(name, self.numel.get(name)))

    def _modules(self, peaks: dict, outs: dict, events: list, values: list) -> tuple[ModuleStats, ...]:
        out_finite: dict[str, bool] = {}  # module -> every gradient w.r.t. its output was finite
        for roles, i in events:
            finite = math.isfinite(values[i])
            for name, is_input in roles:
                if not is_input:
                    out_finite[name] = out_finite.get(name, True) and finite
        stats = []
        for name in self.order:
            ps = [values[i] for i in peaks[name]]
            peak = math.nan if any(math.isnan(p) for p in ps) else max(ps)
            grad: dict[str, Any] = {}
            if outs.get(name):
                total = sum(n for _, _, n, _ in outs[name])
                lost = sum(values[i] for i, _, _, _ in outs[name])
                nonzero = sum(values[j] for _, j, _, _ in outs[name])
                squares = sum(values[k] ** 2 for _, _, _, k in outs[name])
                zero = total - nonzero
                grad = {"grad_lost": lost / total, "grad_finite": out_finite.get(name, True),
                        "grad_subnormal": (lost - zero) / nonzero if nonzero else 0.0,
                        "grad_subnormal_mass": _subnormal_mass(lost - zero, squares)}
            minus_inf = not math.isfinite(peak) and all(math.isfinite(values[i]) or _minus_inf_only(values, i)
                                                        for i in peaks[name])
            own = max(values[i] for i in self.own_loss[name]) if name in self.own_loss else None
            stats.append(ModuleStats(name=name, kind=self.kinds[name], peak=peak, limit=self.limits[name], **grad,
                                     dtype=self.dtypes[name], cast_by=self.cast_by.get(name), minus_inf=minus_inf,
                                     own_loss=own, numel=self._numel(name),
                                     zero_d=self.numel.get(name) == 1 and name not in self.shaped))
        return tuple(stats)


_BITS = {torch.float16: torch.int16, torch.bfloat16: torch.int16, torch.float32: torch.int32,
         torch.float64: torch.int64}
"""Float dtype → the integer dtype of its width: a non-negative float's bit pattern orders like the number."""
_SIGNLESS = {dtype: torch.iinfo(bits).max for dtype, bits in _BITS.items()}  # every bit but the sign bit
_TINY_BITS = {dtype: int(torch.tensor(FP16_NORMAL_MIN, dtype=dtype).view(bits)) for dtype, bits in _BITS.items()}
"""The bit pattern of 2**-14 (:data:`FP16_NORMAL_MIN`, exact in each of these dtypes)."""


def _magnitudes(a: torch.Tensor) -> tuple[torch.Tensor, torch.dtype]:
    """A copy of ``a`` as |a|, and ``a``'s dtype: for the dtypes in :data:`_BITS` the bit patterns with the sign
    bit cleared (integers that order like |x|, a NaN above inf; comparing them is about twice as fast on a CPU as
    comparing float16 or float32 values, and exact), for any other floating dtype ``a.abs()``."""
    bits = _BITS.get(a.dtype)
    if bits is None:
        return a.abs(), a.dtype
    return torch.bitwise_and(a.view(bits), _SIGNLESS[a.dtype]), a.dtype


def _count_rows(rows: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """Per row of ``rows`` (the :func:`_magnitudes` of samples of one size and ``dtype``, stacked): the entries
    that are 0 or below fp16's normal range (|x| < :data:`FP16_NORMAL_MIN`; not NaN), and the non-zero ones
    (NaN included), as int32. The comparisons write int32 (``out=``): a sum over a row of a bool tensor
    first copies it to the sum's dtype, which costs more than the comparison."""
    tiny = _TINY_BITS.get(dtype, FP16_NORMAL_MIN)
    marks = torch.empty(rows.shape, dtype=torch.int32, device=rows.device)
    lost = torch.lt(rows, tiny, out=marks).sum(1, dtype=torch.int32)
    return lost, torch.ne(rows, 0, out=marks).sum(1, dtype=torch.int32)


def _group_counts(samples: list[tuple[torch.Tensor, torch.dtype]], norms: list[int] | tuple[int, ...] = ()
                  ) -> tuple[list[torch.Tensor], dict[int, int], dict[int, int]]:
    """The counts of :func:`_count_samples`, in group order, as the parts of one tensor: ``(parts, at, norm_at)``
    where ``torch.cat(parts)`` holds, for each sample, the number of entries that are 0 or below fp16's normal
    range (|x| < :data:`FP16_NORMAL_MIN`), then for each the number of non-zero entries, then the 2-norms of the
    samples ``norms`` (float32); sample ``k``'s first count is at ``at[k]``, its second at ``len(samples) +
    at[k]``, its norm at ``2 * len(samples) + norm_at[k]``. The samples of one size and dtype (most are
    :data:`SAMPLE` long) are counted together (one ``stack``, one :func:`_magnitudes`, :func:`_count_rows`: two
    comparisons, two sums), instead of four kernels per tensor in its hook; the norms are taken per group too
    (a parameter gradient of at most :data:`SAMPLE` entries is its whole sample), of the rows that need one.
    The places are worked out here, in Python: no kernel puts the counts back in the samples' order."""
    groups: dict[tuple[int, torch.dtype], list[int]] = {}
    for k, (t, dtype) in enumerate(samples):
        groups.setdefault((t.numel(), dtype), []).append(k)
    wanted = set(norms)
    lost, nonzero, norm = [], [], []
    at: dict[int, int] = {}
    norm_at: dict[int, int] = {}
    for (_, dtype), ks in groups.items():
        rows = _stack([samples[k][0] for k in ks])
        counts = _count_rows(_magnitudes(rows)[0], dtype)
        lost.append(counts[0])
        nonzero.append(counts[1])
        for k in ks:
            at[k] = len(at)
        picked = [i for i, k in enumerate(ks) if k in wanted]
        if picked:
            norm.append(torch.linalg.vector_norm(rows if len(picked) == len(ks) else rows[picked], dim=1,
                                                 dtype=torch.float32))
            for i in picked:
                norm_at[ks[i]] = len(norm_at)
    parts = lost + nonzero + norm
    if len({t.device for t in lost}) > 1:  # a model on several devices (a few groups: cheap to ask)
        parts = [t.cpu() for t in parts]
    return parts, at, norm_at


def _count_samples(samples: list[tuple[torch.Tensor, torch.dtype]]) -> torch.Tensor | None:
    """For each gradient sample (a copy kept by a hook, or its :func:`_magnitudes`: the same counts), the number
    of entries that are 0 or below fp16's normal range (|x| < :data:`FP16_NORMAL_MIN`), then for each the
    number of non-zero entries, in the samples' order (one int32 tensor on the samples' device): what
    :meth:`_Probe.collect` reads from :func:`_group_counts`."""
    if not samples:
        return None
    parts, at, _ = _group_counts(samples)
    counts = torch.cat(parts)
    place = torch.tensor([at[k] for k in range(len(samples))], device=counts.device)
    return torch.cat([counts[place], counts[place + len(samples)]])


def _stack(tensors: list[torch.Tensor]) -> torch.Tensor:
    """``torch.stack(tensors)``; on the CPU when they are on several devices (a model split across devices).
    Asking each tensor's ``.device`` costs more than the stack on a small model: the error tells instead."""
    try:
        return torch.stack(tensors)
    except RuntimeError:
        return torch.stack([t.cpu() for t in tensors])


def _lowest(dtypes: set[torch.dtype | None]) -> torch.dtype | None:
    """The autocast dtype a forward pass ran under: float16 if any module saw it, else bfloat16, else None."""
    for dtype in (torch.float16, torch.bfloat16):
        if dtype in dtypes:
            return dtype
    return next((d for d in dtypes if d is not None), None)


def _ancestors(name: str) -> list[str]:
    """The enclosing modules' names, innermost first: ``"a.b.c"`` → ``["a.b", "a", ""]``."""
    parts = name.split(".") if name else []
    return [".".join(parts[:k]) for k in range(len(parts) - 1, -1, -1)]


def _forward_culprit(calls: list[tuple], values: list[float], loss_finite: bool = False,
                     masks: frozenset[int] = frozenset()) -> dict[str, str | None]:
    """Where a forward pass made its first inf/NaN. ``first_nonfinite_output``: the first module call (in
    completion order) whose output holds one. If that call's inputs were finite, its own forward made it;
    otherwise the inf/NaN was made between modules, in the code of an enclosing module's forward: the innermost
    enclosing call whose inputs were finite (``first_nonfinite_module``; a 0/-inf mask input, ``masks``, counts
    as finite)."""
    bad = _first_bad_call(calls, values, loss_finite)
    if bad is None:
        return {"first_nonfinite_module": None, "first_nonfinite_output": None}
    by_number = {c[1]: c for c in calls}
    call = bad
    ok = _minus_inf_ok(calls, values, loss_finite, masks)
    while call is not None and not all(i in masks or _input_ok(values, i, ok) for i in call[3]):
        call = by_number.get(call[2])
    return {"first_nonfinite_module": bad[0] if call is None else call[0], "first_nonfinite_output": bad[0]}


def _backward_culprit(events: list[tuple[tuple[tuple[str, bool], ...], int]],
                      values: list[float]) -> str | None:
    """Where the backward pass made its first inf/NaN (events in backward order, one per gradient tensor, with
    the modules it is the output or the input gradient of): the first module whose input gradient is non-finite
    while every gradient that reached its output so far was finite (its own backward made it); or, when a
    module's *output* gradient is the first non-finite one, the code between modules made it: the innermost
    enclosing module whose output gradient was finite."""
    out_seen: dict[str, bool] = {}
    for roles, i in events:
        bad = not math.isfinite(values[i])
        if bad:
            for name, is_input in roles:
                if is_input and out_seen.get(name, False):
                    return name
            for name, is_input in roles:
                if not is_input:
                    enclosing = next((a for a in _ancestors(name) if out_seen.get(a, False)), None)
                    if enclosing is not None:
                        return enclosing
        for name, is_input in roles:
            if not is_input:
                out_seen[name] = out_seen.get(name, True) and not bad
    return None


def _value(values: list[float], i: int) -> float:
    """A collected value: ``values[i]``, or a count kept on the host (``i`` = -1 - count, see ``collect``)."""
    return values[i] if i >= 0 else float(-1 - i)


def _subnormal_mass(subnormal: float, squares: float) -> float:
    """The most of a gradient's squared norm ``squares`` that its ``subnormal`` non-zero entries below fp16's normal
    range can carry (each less than 2**-14): ``subnormal · 2**-28 / squares``, at most 1 (0 for a non-finite or a
    zero gradient). Entries far below the gradient's largest ones carry next to nothing: a softmax's output
    gradient has most of its entries there, and losing them changes the gradient by a few parts in 10**8."""
    if not subnormal or not 0.0 < squares < math.inf:
        return 0.0
    return min(1.0, subnormal * FP16_NORMAL_MIN**2 / squares)


def _cast_fields(casts: list[tuple[int, int, frozenset | None]], direct: frozenset | None,
                 values: list[float]) -> dict[str, Any]:
    """From the own loss's casts (:meth:`_Probe.cast_hook`): the largest share of their non-zero float32 gradient
    entries that are 0 in float16 and that a larger scale would have kept (None when no cast got a non-zero
    gradient); the parameters reached only through casts whose gradient was exactly 0 (a term weighted by 0: their
    zeros are by design); and those reached only through casts that flushed more than :data:`UNDERFLOW_FRACTION`
    (beside a healthy term: review rev24-r18 E2), whose zeros are lost."""
    live = [(values[flushed] / values[nonzero], reach) for nonzero, flushed, reach in casts if values[nonzero]]
    zero: set[str] = set()
    lost: set[str] = set()
    if direct is not None and all(reach is not None for _, _, reach in casts):
        zero = {n for nonzero, _, reach in casts if not values[nonzero] for n in reach}
        zero -= direct.union(*(reach for _, reach in live))
        lost = set().union(*(reach for share, reach in live if share > UNDERFLOW_FRACTION))
        lost -= direct.union(*(reach for share, reach in live if share <= UNDERFLOW_FRACTION))
    return {"loss_cast_flushed": max(share for share, _ in live) if live else None,
            "loss_cast_zero": tuple(sorted(zero)), "loss_cast_lost": tuple(sorted(lost))}


def _param_fields(params: dict[str, tuple[int, ...]], values: list[float], scale: float) -> dict[str, Any]:
    lost, subnormal, mass, norms, bad_first, squares, any_bad = {}, {}, {}, {}, None, 0.0, False
    for name, (i_lost, i_counted, i_norm, i_nonzero, i_size) in params.items():
        counted, norm, nonzero = _value(values, i_counted), values[i_norm], values[i_nonzero]
        lost[name] = values[i_lost] / counted if counted else 1.0
        zero = counted - nonzero
        subnormal[name] = (values[i_lost] - zero) / nonzero if nonzero else 0.0
        # the sample's count of subnormal entries, for the whole gradient the norm is over
        below = (values[i_lost] - zero) / counted * _value(values, i_size) if counted else 0.0
        mass[name] = _subnormal_mass(below, norm**2)
        norms[name] = norm / scale
        if not math.isfinite(norm) and bad_first is None:
            bad_first = name
        any_bad = any_bad or not math.isfinite(norm)
        squares += norm**2
    norm = None if not params else (math.inf if any_bad else math.sqrt(squares) / scale)
    return {"param_grad_lost": lost, "param_grad_subnormal": subnormal, "param_grad_subnormal_mass": mass,
            "param_grad_norm": norms, "first_nonfinite_grad": bad_first, "grad_norm": norm}


# --- The recorder ------------------------------------------------------------------------------------------

def _float32(value: float) -> float:
    """``value`` rounded to float32 (round to nearest even, as ``torch.tensor(value, dtype=torch.float32)``), as
    GradScaler holds its scale; by ``struct``, a hundred times cheaper than a tensor on every step."""
    try:
        return struct.unpack("f", struct.pack("f", value))[0]
    except OverflowError:  # beyond float32's range: inf, as torch rounds it
        return math.copysign(math.inf, value)


class AmpRecorder:
    """Watch a mixed-precision training loop and diagnose it: ``rec.step(loss)`` once per optimizer step.

    ::

        rec = AmpRecorder(model, optimizer, scaler)        # attaches hooks; also a context manager
        for x, y in batches:                               # the loop stays your own
            ...; scaler.step(optimizer); scaler.update()
            rec.step(loss)                                 # after scaler.update()
        print(rec.report()); rec.findings(); rec.plot(); rec.detach()

    Args:
        model: the ``nn.Module`` the loop trains (a DDP-wrapped one records its own rank; names start with
            ``module.``; a ``torch.compile`` d one records step-level data only, with a warning).
        optimizer: its optimizer (it must hold some of ``model``'s parameters).
        scaler: the ``torch.amp.GradScaler``, if the loop uses one.
        scheduler: the learning-rate scheduler, if any: enables ``scheduler_on_skipped_step``.
        every: sample every ``every``-th step (0, every, 2·every, ...): the hooks are attached only for those
            steps, and for the step after one that was skipped or had a non-finite loss without being sampled.
            The loss, scale, skipped flag and lr are recorded on every step.

    Call ``rec.step(loss)`` after ``scaler.update()`` (and before the next ``zero_grad``), once per
    optimizer step, also when the scaler skipped it. Each step reads the loss (``float(loss)``) and, with an
    enabled scaler, ``scaler.get_scale()``: on CUDA each is a GPU-to-CPU sync (two per step, as a loop that logs
    its loss pays one of them already), and a sampled step adds one more (its one transfer).

    Example:
        >>> model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))
        >>> optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        >>> x, y = torch.randn(16, 4, generator=torch.Generator().manual_seed(0)), torch.zeros(16, 1)
        >>> with AmpRecorder(model, optimizer) as rec:
        ...     for _ in range(3):
        ...         optimizer.zero_grad()
        ...         with torch.autocast("cpu", dtype=torch.bfloat16):
        ...             loss = torch.nn.functional.mse_loss(model(x), y)
        ...         loss.backward()
        ...         optimizer.step()
        ...         rec.step(loss)
        >>> [f.kind for f in rec.findings()]
        ['healthy']
        >>> rec.records[0].autocast_dtype, rec.records[2].skipped
        (torch.bfloat16, False)
    """

    def __init__(self, model: nn.Module, optimizer: torch.optim.Optimizer, scaler: torch.amp.GradScaler | None = None,
                 *, scheduler: torch.optim.lr_scheduler.LRScheduler | None = None, every: int = 1) -> None:
        _check_args(model, optimizer, scaler, scheduler)
        self.every = as_int("every", every, minimum=1)
        self.model, self.optimizer, self.scaler, self.scheduler = model, optimizer, scaler, scheduler
        self.compiled = any(_is_compiled(m) for m in model.modules())
        if self.compiled:
            warnings.warn("AmpRecorder: the model is torch.compile'd, so module hooks cannot see inside it: only "
                          "step-level data are recorded (loss, scale, skips, lr, parameter gradients), not where an "
                          "overflow starts. Record the uncompiled model to find the module.", stacklevel=2)
        self._modules = self._watched_modules()
        embeddings = {id(m.weight) for m in model.modules() if isinstance(m, (nn.Embedding, nn.EmbeddingBag))}
        # an empty parameter (a "dummy" one that tracks the device) has nothing to measure; a complex one is not
        # autocast's (no float16 form) and has no real max |x|: both are left out of the gradient fields
        self._params = [(_clean(n), p, id(p) in embeddings) for n, p in model.named_parameters()
                        if p.requires_grad and p.numel() > 0 and not p.is_complex()]
        # DDP with gradient_as_bucket_view: param.grad is the bucket DDP averages in place during backward
        self._bucket_view = any(isinstance(m, nn.parallel.DistributedDataParallel)
                                and bool(getattr(m, "gradient_as_bucket_view", False)) for m in model.modules())
        self._records: list[StepRecord] = []
        self._optimizer_steps = 0
        self._found_inf: list[torch.Tensor | None] = []  # per step() call of a fused optimizer: its found_inf
        self._step_handle = optimizer.register_step_post_hook(self._on_optimizer_step)
        self._epoch0 = None if scheduler is None else int(scheduler.last_epoch)
        self._scale = self._read_scale()
        self._probe: _Probe | None = None
        self._hooks = _Hooks(self._modules, self._params, model)
        self.attached = True
        self._open_probe()

    def _watched_modules(self) -> list[tuple[str, nn.Module]]:
        """Every module with its clean name; inside a compiled module, only the compiled wrapper itself."""
        compiled = [n for n, m in self.model.named_modules() if _is_compiled(m)]
        return [(_clean(n), m) for n, m in self.model.named_modules()
                if not any(n.startswith(c + ".") or (c == "" and n) for c in compiled)]

    def _on_optimizer_step(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        self._optimizer_steps += 1
        # GradScaler.step sets optimizer.found_inf for a fused optimizer's step() (deleted after it): the kernel
        # skipped the update when it is nonzero. An optimizer given grad_scaler= reads the scaler itself: None.
        found = getattr(optimizer, "found_inf", None)
        if "grad_scaler" in kwargs:
            self._found_inf.append(None)
        elif isinstance(found, torch.Tensor):
            self._found_inf.append(found.detach())

    def _read_scale(self) -> float | None:
        if self.scaler is None or not self.scaler.is_enabled():
            return None
        return _float32(self.scaler.get_scale())

    def _open_probe(self) -> None:
        """Sample the next step if it is on the schedule (0, every, 2·every, ...), or if the last step was
        skipped or its loss non-finite and was not sampled itself: the next one shows where the inf/NaN starts."""
        last = self._records[-1] if self._records else None
        trouble = last is not None and not last.sampled and (last.skipped or not math.isfinite(last.loss))
        if len(self._records) % self.every == 0 or trouble:
            self._probe = _Probe(self._hooks, at_once=self._bucket_view)

    # --- recording ---

    @property
    def records(self) -> tuple[StepRecord, ...]:
        """One :class:`StepRecord` per ``rec.step`` call, in order."""
        return tuple(self._records)

    def step(self, loss: torch.Tensor | float) -> None:
        """Record one optimizer step: call it after ``scaler.update()``, also when the scaler skipped the step
        (its :class:`StepRecord` is then ``rec.records[-1]``)."""
        if not self.attached:
            raise RuntimeError("this AmpRecorder is detached: create a new one to record more steps")
        value = _as_loss(loss)
        called, self._optimizer_steps = self._optimizer_steps > 0, 0
        found, self._found_inf = self._found_inf, []
        before, after = self._scale, self._read_scale()
        decreased = bool(before and after is not None and step_was_skipped(before, after))
        if not called:
            stepped = False  # a non-fused optimizer's step() is not called on a skipped step
        elif any(flag is None for flag in found):
            stepped = not decreased  # grad_scaler= optimizers: only the scale tells
        else:
            stepped = not any(float(flag) for flag in found)  # fused: skipped when found_inf was set
        sampled = {}
        if self._probe is not None:
            self._probe.remove()
            sampled = self._probe.collect(before or 1.0, loss_finite=math.isfinite(value))
            self._probe = None
        record = StepRecord(
            step=len(self._records), loss=value, scale_before=before, scale_after=after, stepped=stepped,
            skipped=not stepped, scale_decreased=decreased, lr=float(self.optimizer.param_groups[0]["lr"]),
            scheduler_epoch=None if self.scheduler is None else int(self.scheduler.last_epoch),
            sampled=bool(sampled), step_called=called, scaler_checked=before is not None, **sampled)
        self._records.append(record)
        self._scale = after
        self._open_probe()

    def detach(self) -> None:
        """Remove every hook the recorder attached (the records stay). Calling it twice is fine."""
        if self._probe is not None:
            self._probe.remove()
            self._probe = None
        self._step_handle.remove()
        self.attached = False

    def __enter__(self) -> AmpRecorder:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.detach()

    def __repr__(self) -> str:
        state = "attached" if self.attached else "detached"
        return f"AmpRecorder({len(self._records)} steps recorded, every={self.every}, {state})"

    # --- diagnosis ---

    def findings(self) -> list[Finding]:
        """What the recorded steps show, as :class:`Finding` s (``[healthy]`` when nothing is wrong; ``[]``
        before the first ``rec.step``)."""
        if not self._records:
            return []
        return _diagnose(self._records, self.scaler, self.scheduler, self._epoch0, self.every, self._weights())

    def _weights(self) -> _Weights:
        """(the dtype of the trained parameters, the smallest ``eps`` of the optimizer's groups, that group's
        ``beta2`` or None): a float16 model's dtype names what it runs in without autocast, and an eps below
        float16's smallest normal is 0 in a float16 model (Adam's default 1e-8)."""
        dtypes = {p.dtype for _, p, _ in self._params if p.is_floating_point()}
        dtype = _lowest(dtypes) or (dtypes.pop() if len(dtypes) == 1 else None)
        groups = [g for g in self.optimizer.param_groups if isinstance(g.get("eps"), (int, float))]
        if not groups:
            return dtype, None, None
        group = min(groups, key=lambda g: g["eps"])
        betas = group.get("betas")
        # beta2 gives the first step's v = (1 - beta2)·g² only where v is an average of squares (not Adamax's
        # u = max(beta2·u, |g| + eps): review rev24-r8)
        beta2 = (float(betas[1]) if isinstance(self.optimizer, _SQUARES) and isinstance(betas, (tuple, list))
                 and len(betas) == 2 and isinstance(betas[1], (int, float)) and 0 <= betas[1] < 1 else None)
        return dtype, float(group["eps"]), beta2

    def report(self) -> str:
        """The recording as plain text: the run, the sampled steps, the modules nearest to overflow, the findings."""
        return _report(self)

    def plot(self):
        """A figure (:class:`~ampcourse.widgets.base.Png`): scale and skipped steps, loss, per-module headroom."""
        return _plot(self)


def _check_args(model: Any, optimizer: Any, scaler: Any, scheduler: Any) -> None:
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module (got {type(model).__name__})")
    if not isinstance(optimizer, torch.optim.Optimizer):
        raise TypeError(f"optimizer must be a torch.optim.Optimizer, e.g. torch.optim.AdamW(model.parameters()) "
                        f"(got {type(optimizer).__name__})")
    if scaler is not None and not isinstance(scaler, torch.amp.GradScaler):
        raise TypeError(f"scaler must be a torch.amp.GradScaler or None (got {type(scaler).__name__})")
    if scheduler is not None:
        if not isinstance(scheduler, torch.optim.lr_scheduler.LRScheduler):
            raise TypeError(f"scheduler must be a torch.optim.lr_scheduler scheduler or None "
                            f"(got {type(scheduler).__name__})")
        if scheduler.optimizer is not optimizer:
            raise ValueError("scheduler must schedule this optimizer (scheduler.optimizer is another one)")
    ids = {id(p) for p in model.parameters()}
    if not any(id(p) in ids for group in optimizer.param_groups for p in group["params"]):
        raise ValueError("optimizer must hold model's parameters (it holds none of them): pass the optimizer made "
                         "with model.parameters()")


def _as_loss(loss: Any) -> float:
    """The step's loss as a float: a one-element floating-point tensor, or a real number (``float``, ``int``, numpy's
    ``float32``: any ``numbers.Real`` but bool); a complex one is refused (its imaginary part would be dropped)."""
    if isinstance(loss, torch.Tensor):
        if loss.numel() != 1:
            raise ValueError(f"loss must be the step's scalar loss (got a tensor of shape {tuple(loss.shape)})")
        if loss.is_complex():
            raise TypeError(f"loss must be a real number (got a complex tensor, {loss.dtype}): pass the real loss "
                            "the backward pass ran on")
        if not loss.is_floating_point():  # review rev24-r9 finding 8: tensor(True) read as a loss of 1.0
            raise TypeError(f"loss must be a floating-point scalar (got a {loss.dtype} tensor): pass the loss the "
                            "backward pass ran on")
        return float(loss.detach().float())
    if isinstance(loss, numbers.Complex) and not isinstance(loss, numbers.Real):
        raise TypeError(f"loss must be a real number (got {type(loss).__name__} {loss!r}): pass the real loss the "
                        "backward pass ran on")
    if isinstance(loss, bool) or not isinstance(loss, numbers.Real):
        raise TypeError(f"loss must be the step's loss: a scalar tensor or a float (got {type(loss).__name__})")
    return float(loss)


# --- The rules: records -> findings ------------------------------------------------------------------------

_Weights = tuple[torch.dtype | None, float | None, float | None]
"""What :meth:`AmpRecorder._weights` reads: (the parameters' dtype, the smallest eps, that group's beta2)."""


def _dtype_name(dtype: torch.dtype | None) -> str:
    return "no autocast (FP32)" if dtype is None else str(dtype).removeprefix("torch.") + " autocast"


def _limit_name(limit: float) -> str:
    """The dtype whose largest finite value ``limit`` is."""
    for dtype in (torch.float16, torch.bfloat16, torch.float32, torch.float64):
        if limit == float(torch.finfo(dtype).max):
            return str(dtype).removeprefix("torch.")
    return "its dtype"


def _label(name: str) -> str:
    """A module's name as the messages print it: ``(model)`` for the model itself, a name that starts with a
    Sequential index quoted (``'2'``, ``'0.attn'``: a bare number reads as a count)."""
    if not name:
        return "(model)"
    return f"'{name}'" if name.split(".")[0].isdigit() else name


def _module(record: StepRecord, name: str) -> ModuleStats | None:
    return next((m for m in record.modules if m.name == name), None)


def _known_masks(records: list[StepRecord]) -> list[StepRecord]:
    """The records with a mask input read as a mask: an input position whose -inf was harmless on an earlier
    sampled step (the step's inputs passed as finite while that input held -inf: an additive attention mask
    built once and passed on every step) stays a mask on later steps, so a sampled step whose only non-finite
    inputs are such masks (no NaN, no +inf) has finite inputs: a forward overflow there is the model's (an
    attention score past float16's range), not broken data. An input that was never harmless stays broken."""
    known: set[int] = set()
    out = []
    for r in records:
        if r.sampled and r.input_finite is True:
            known.update(r.input_minus_inf)
        elif (r.sampled and r.input_finite is False and not r.input_broken and r.input_minus_inf
              and known.issuperset(r.input_minus_inf)):
            r = dataclasses.replace(r, input_finite=True)
        out.append(r)
    return out


def _diagnose(records: list[StepRecord], scaler: Any, scheduler: Any, epoch0: int | None,
              every: int | None = None,
              weights: _Weights = (None, None, None)) -> list[Finding]:
    records = _known_masks(list(records))
    sampled = [r for r in records if r.sampled]
    found: list[Finding] = []
    applied_bad = _nonfinite_grad(records, sampled)
    if applied_bad is not None:
        found.append(applied_bad)
    for rule in (_nonfinite_input, _overflow, _nonfinite_loss, _not_stepped):
        finding = (rule(records, sampled, found, every) if rule is _nonfinite_loss else
                   _overflow(records, sampled, weights) if rule is _overflow else rule(records, sampled))
        # after a non-finite gradient was applied the weights are inf/NaN: later forward overflows and losses
        # only inherit it (nonfinite_grad says so)
        if finding is not None and not (applied_bad is not None and finding.kind in ("overflow", "nonfinite_loss")
                                        and finding.step > applied_bad.step):
            found.append(finding)
    if scaler is not None and scaler.is_enabled():
        found += _scale_findings(records, sampled, found)
        finding = _unneeded_scaler(sampled)
        if finding is not None:
            found.append(finding)
    overflowed = frozenset(f.where for f in found if f.kind == "overflow")
    for finding in (_underflow(records, sampled, weights[0]), _low_headroom(records, sampled, overflowed)):
        if finding is not None:
            found.append(finding)
    if scheduler is not None:
        finding = _scheduler_on_skipped(records, epoch0)
        if finding is not None:
            found.append(finding)
    return found or [_healthy(records, sampled)]


def _nonfinite_input(records: list[StepRecord], sampled: list[StepRecord]) -> Finding | None:
    r = next((r for r in sampled if r.input_finite is False), None)
    if r is None:
        return None
    return Finding("nonfinite_input", r.step, "input",
                   f"the batch fed to the model at step {r.step} already holds inf/NaN, before any module ran: "
                   "the data are broken, not the precision — check the data pipeline (torch.isfinite on each batch).")


def _poisoned_by(records: list[StepRecord], step: int) -> StepRecord | None:
    """The first step before ``step`` whose loss was inf/NaN and whose optimizer step was applied all the same with
    no enabled GradScaler to check it: it updated the weights with inf/NaN gradients, so a later overflow may be
    its doing. A step an enabled GradScaler checked and applied had finite gradients (``GradScaler.step`` calls
    ``optimizer.step()`` only when no gradient is inf/NaN; a float16 loss can be inf with finite gradients: a
    float16 sum above 65504), and a sampled step whose gradient norm was finite applied finite gradients."""
    return next((e for e in records if e.step < step and e.stepped and not math.isfinite(e.loss)
                 and not e.scaler_checked and (e.grad_norm is None or not math.isfinite(e.grad_norm))), None)


def _poisoned_text(e: StepRecord) -> str:
    """What :func:`_poisoned_by`'s step did, in words."""
    return (f"an earlier step ({e.step}, loss {e.loss}{'' if e.sampled else ', not sampled'}) applied "
            "optimizer.step() with inf/NaN gradients (no GradScaler skipped it), so the weights are most likely "
            "inf/NaN already")


def _overflow(records: list[StepRecord], sampled: list[StepRecord],
              weights: _Weights = (None, None, None)) -> Finding | None:
    r = next((r for r in sampled if r.first_nonfinite_module is not None and r.input_finite is not False), None)
    if r is None:
        return None
    name = r.first_nonfinite_module
    module = _module(r, name)
    kind = f" ({module.kind})" if module else ""
    output = r.first_nonfinite_output
    names = [m.name for m in r.modules]
    cast = next((m for m in r.modules if m.finite and m.peak > m.limit), None)  # a float32 output, too big
    nan = (_module(r, output) or _module(r, name) or ModuleStats("", "", math.inf, 1.0)).peak
    cast_down = cast is not None and output in names and names.index(cast.name) < names.index(output)
    maker = cast
    if cast_down:
        name = cast.name
        k = names.index(cast.name)
        while k > 0 and r.modules[k - 1].finite and r.modules[k - 1].peak >= cast.peak:  # ReLU, Dropout: pass on
            k -= 1
        maker = r.modules[k]
        made = "" if maker is cast else (f", values made by {_label(maker.name)} ({maker.kind}, peak "
                                         f"{maker.peak:.4g}), which {_label(name)} passes on")
        what = (f"{_label(name)} ({cast.kind}) returns float32 values up to {cast.peak:.4g} (step {r.step}){made}, "
                f"above {_limit_name(cast.limit)}'s largest value; the module that receives them, {_label(output)}, "
                "casts them down under autocast and holds the first inf/NaN")
    elif output is not None and output != name:
        what = (f"the forward code of {_label(name)}{kind} itself, between its submodules, makes the first inf/NaN "
                f"(step {r.step}: its inputs are finite, and the first submodule output that holds it, "
                f"{_label(output)}'s, only received it)")
    else:
        what = (f"{_label(name)}{kind} is the first module whose output holds inf/NaN (step {r.step}; every later "
                "module only inherits it)")
    invalid = "0/0, or sqrt or log of a negative number: an eps, a clamp or a mask fixes that"
    if cast_down:
        fix = _cast_down_fix(dataclasses.replace(cast, kind=maker.kind), cast.cast_by or output, said=True)
    elif r.autocast_dtype == torch.float16 and math.isnan(nan):
        fix = (f"its output holds NaN, not inf: either a value passed float16's largest value, {FP16_MAX:g}, and "
               "the inf became NaN (inf - inf or 0 × inf, as in a softmax over an inf score), or an invalid "
               f"operation made it directly ({invalid}). For an overflow: run it in FP32 "
               "(troubleshoot.FP32Island), train in bf16, or keep its values smaller (normalise its inputs; in "
               "attention, F.scaled_dot_product_attention and a mask of torch.finfo(dtype).min instead of -1e9).")
    elif r.autocast_dtype == torch.float16:
        fix = (f"a value passed float16's largest value, {FP16_MAX:g}. Run it in FP32 (troubleshoot.FP32Island), "
               "train in bf16, or keep its values smaller (normalise its inputs; in attention, "
               "F.scaled_dot_product_attention and a mask of torch.finfo(dtype).min instead of -1e9).")
    else:
        plain = r.autocast_dtype is not None or weights[0] in (None, torch.float32)
        dtype = (_dtype_name(r.autocast_dtype) if plain
                 else f"{str(weights[0]).removeprefix('torch.')} weights, no autocast")
        fix = (f"under {dtype} that is divergence or an invalid operation ({invalid}), not "
               "a precision limit: else lower the learning rate, clip the gradients, check the data.")
    earlier = _poisoned_by(records, r.step)
    if earlier is not None:
        fix = (f"{_poisoned_text(earlier)}: the cause is that step (its batch or its loss), not this module's "
               f"precision — record step {earlier.step} with every=1.")
    elif r.weights_finite is False:
        fix = _broken_weights(records, r, weights)
    return Finding("overflow", r.step, name, f"{what}: {fix}")


_SQUARES = (torch.optim.Adam, torch.optim.AdamW, torch.optim.NAdam, torch.optim.RAdam)
"""Optimizers whose second moment is ``v = beta2·v + (1 - beta2)·g²`` (``betas[1]``), read by :func:`_v_zero_below`."""


def _v_zero_below(beta2: float) -> float:
    """The |gradient| below which Adam's first ``v = (1 - beta2) · g²`` rounds to 0 in float16: below half of
    float16's smallest subnormal (2**-25; round to nearest even sends it to 0). About 5.5e-3 at beta2 = 0.999."""
    return math.sqrt(_FP16_SUBNORMAL_MIN / 2 / (1 - beta2))


def _broken_weights(records: list[StepRecord], r: StepRecord,
                    weights: _Weights) -> str:
    """The overflow's fix when the weights were already inf/NaN before step ``r``'s forward (its inputs finite):
    the optimizer update that made them, named when one applied step lies between the last sampled step whose
    weights were finite and ``r``."""
    start = next((x.step for x in reversed(records[:r.step]) if x.sampled and x.weights_finite), 0)
    updates = [x for x in records[start:r.step] if x.stepped]
    if len(updates) == 1:
        e = updates[0]
        grads = "" if e.grad_norm is None else (" and gradients" if math.isfinite(e.grad_norm) else "")
        which = (f"the optimizer update of step {e.step} made the weights inf/NaN (its loss {e.loss:.4g}{grads} "
                 "finite" if math.isfinite(e.loss) and (not e.sampled or grads) else
                 f"the optimizer update of step {e.step} made the weights inf/NaN (loss {e.loss}")
        which += "), before this forward pass ran"
    else:
        which = (f"the weights were inf/NaN before this forward pass ran: an optimizer update between steps {start} "
                 f"and {r.step - 1} made them so")
    dtype, eps, beta2 = weights
    if dtype == torch.float16 and eps is not None and eps < FP16_NORMAL_MIN:
        tiny = f"{FP16_NORMAL_MIN:.2g}"
        where = ("wherever v rounds to 0 in float16" if beta2 is None else
                 f"wherever v rounds to 0 in float16 — on a first step, where v = {1 - beta2:.3g} · g², every "
                 f"gradient below about {_v_zero_below(beta2):.2g} (beta2={beta2:g})")
        fix = (f"use eps >= {tiny} (float16's smallest normal), or train with autocast and float32 weights — not "
               "this module's precision.")
        stored = float(torch.tensor(eps, dtype=torch.float16))  # what eps is in the float16 update
        if stored == 0.0:
            return (f"{which}. In a float16 model the optimizer's eps={eps:g} is 0 in float16 (an update divides by "
                    f"sqrt(v) + eps: x/0 {where}, 0 included): {fix}")
        most = None if beta2 is None else _v_zero_below(beta2) / stored
        bound = "" if most is None else f", up to about {most:.2g} × the learning rate on a first step"
        text = (f"{which}. In a float16 model the optimizer's eps={eps:g} is not 0 but subnormal in float16 "
                f"(stored as {stored:.4g}): an update divides by sqrt(v) + eps, so {where}, it is lr · m / eps{bound}")
        lr = max((e.lr for e in updates), default=None)
        if most is None or lr is None or most * lr >= FP16_MAX:
            return f"{text} — a huge step: {fix}"
        # review rev24-r9 finding 7: such a step is at most most · lr, which at an ordinary lr cannot reach 65504
        return (f"{text}; at lr={lr:g} that is at most about {most * lr:.2g}, which cannot make a float16 weight "
                f"inf: the eps is not the likely cause. Look at the update's other causes (a too-large learning "
                f"rate, a division by 0 in the optimizer): record step {r.step - 1} with every=1. A subnormal eps "
                f"holds few digits, though: use eps >= {tiny} (float16's smallest normal).")
    return (f"{which}: the cause is that update (a too-large learning rate, an eps of 0 in the weights' dtype, "
            f"a division by 0 in the optimizer), not this module's precision — record step {r.step - 1} with every=1.")


def _not_stepped(records: list[StepRecord], sampled: list[StepRecord]) -> Finding | None:
    missed = [r.step for r in records if not r.step_called and not r.scale_decreased]
    if not missed:
        return None
    return Finding("optimizer_not_stepped", missed[0], "optimizer",
                   f"optimizer.step() did not run on {len(missed)} of {len(records)} steps (first: step {missed[0]}), "
                   "and no GradScaler skipped them: call scaler.step(optimizer) (or optimizer.step()) before "
                   "rec.step(loss); with gradient accumulation, call rec.step only on the steps that update.")


_LOSS_COMPUTATION = "comes from the loss computation"  # nonfinite_loss's words when it blames the loss itself:
# scale_collapse says "compute it in FP32" only then (not when no sampled step saw where the inf/NaN starts)


def _nonfinite_loss(records: list[StepRecord], sampled: list[StepRecord], found: list[Finding],
                    every: int | None = None) -> Finding | None:
    """The first non-finite loss, blamed on what came before it: the batch (a nonfinite_input finding) or a
    forward overflow (an overflow finding) at or before the first sampled step with a non-finite loss, else the
    loss computation itself."""
    r = next((r for r in records if not math.isfinite(r.loss)), None)
    if r is None:
        return None
    n = sum(not math.isfinite(x.loss) for x in records)
    kinds = {f.kind: f for f in found}
    bad_sampled = [x for x in sampled if not math.isfinite(x.loss)]
    overflow, bad_input = kinds.get("overflow"), kinds.get("nonfinite_input")
    if not bad_sampled:
        cause = (f"step {r.step} was not sampled, nor any other step with a non-finite loss"
                 f"{_every(records, every)}, so the "
                 "recorder did not see where it starts: record with every=1, or run troubleshoot.find_nonfinite on "
                 "that batch.")
        if overflow is not None:
            cause += f" A sampled step ({overflow.step}) overflowed in {_label(overflow.where)}."
    elif bad_input is not None and bad_input.step <= bad_sampled[0].step:
        cause = (f"the batch held inf/NaN first (step {bad_input.step}, see the nonfinite_input finding): fix the "
                 "data and the loss follows.")
    elif overflow is not None and overflow.step <= bad_sampled[0].step and r.step < overflow.step and r.stepped:
        cause = (f"the overflow seen in {_label(overflow.where)} at step {overflow.step} came after: "
                 f"{_poisoned_text(r)}; look at step {r.step} (its batch or its loss) with every=1.")
    elif overflow is not None and overflow.step <= bad_sampled[0].step:
        cause = (f"the forward pass overflowed first, in {_label(overflow.where)} (step {overflow.step}): fix that "
                 "(see the overflow finding) and the loss follows.")
    else:
        cause = (f"at step {bad_sampled[0].step}, the first sampled step with a non-finite loss, no module output was "
                 f"inf/NaN, so it {_LOSS_COMPUTATION}: compute the loss in "
                 "FP32 (troubleshoot.fp32_loss, or outside autocast) and look for log(0) or a division by 0.")
    unsampled = "" if r.sampled or not bad_sampled else (
        f" (step {r.step} was not sampled{_every(records, every)}; step {bad_sampled[0].step} was)")
    return Finding("nonfinite_loss", r.step, "loss",
                   f"the loss is {r.loss} at step {r.step} ({n} of {len(records)} steps non-finite){unsampled}: "
                   f"{cause}")


def _every(records: list[StepRecord], every: int | None = None) -> str:
    """The sampling interval: the recorder's ``every`` when given, else as read from the records: the gcd of the
    positions of the scheduled samples (0, every, 2·every, ...), leaving out the extra sample after an unsampled
    skipped or non-finite step (:meth:`AmpRecorder._open_probe`); empty when only step 0 is left."""
    if every is not None:
        return f" (every={every})"
    scheduled = [k for k, r in enumerate(records) if r.sampled and not (
        k > 0 and not records[k - 1].sampled and (records[k - 1].skipped or not math.isfinite(records[k - 1].loss)))]
    gcd = math.gcd(*scheduled) if scheduled else 0
    return f" (every={gcd})" if gcd > 0 else ""


def _nonfinite_grad(records: list[StepRecord], sampled: list[StepRecord]) -> Finding | None:
    """An optimizer step that ran with an inf/NaN gradient (no scaler, or a disabled one, to skip it)."""
    r = next((r for r in sampled if r.stepped and r.grad_norm is not None and not math.isfinite(r.grad_norm)), None)
    if r is None or r.first_nonfinite_grad is None:
        return None
    earlier = _poisoned_by(records, r.step)
    if r.input_finite is False:
        source = "the batch already held inf/NaN (see the nonfinite_input finding)"
    elif earlier is not None:
        source = f"{_poisoned_text(earlier)}: look at step {earlier.step} (its batch or its loss) with every=1"
    elif r.weights_finite is False:
        source = ("the weights were inf/NaN already before this step's forward pass: an earlier optimizer update "
                  "made them so (see the overflow finding)")
    elif r.first_nonfinite_module is not None:
        source = (f"the forward pass made it first, in {_label(r.first_nonfinite_module)} (see the overflow "
                  "finding)")
    elif not math.isfinite(r.loss):
        source = (f"every module output was finite, but the loss was {r.loss} (see the nonfinite_loss finding): the "
                  "gradient was inf/NaN from where it entered the model")
    elif r.first_nonfinite_backward is not None:
        source = (f"the forward pass was finite: the backward of {_label(r.first_nonfinite_backward)}'s own code made "
                  "it — a sqrt, log or division at 0 there (sqrt(x) at x = 0 has an infinite gradient; add a safe "
                  "eps, clamp the input, or mask before the op)")
    else:
        source = ("the forward pass was finite, so the backward pass made it — look for a sqrt, log or division "
                  "at 0 in the forward code (their gradients are infinite there)")
    return Finding("nonfinite_grad", r.step, r.first_nonfinite_grad,
                   f"optimizer.step() ran with an inf/NaN gradient at step {r.step} (first: parameter "
                   f"{r.first_nonfinite_grad}); {source}. With no GradScaler to skip that step, the weights are now "
                   "inf/NaN and every later forward pass and loss inherits it. Skip such steps (check "
                   "torch.isfinite on the grad norm before optimizer.step()) after fixing the op.")


def _default_init_scale() -> float:
    """``torch.amp.GradScaler``'s default ``init_scale`` (2**16 in torch 2.13), read from its signature."""
    import inspect

    return float(inspect.signature(torch.amp.GradScaler).parameters["init_scale"].default)


_DEFAULT_INIT_SCALE = _default_init_scale()


def _likely_cause(records: list[StepRecord], sampled: list[StepRecord], found: list[Finding],
                  collapse: bool, backing_off: bool = False) -> tuple[str, str]:
    """Where the skipped steps' inf/NaN comes from, and what to do: (where, one or two sentences). ``collapse``:
    every recent step was skipped, down to a small scale (else: skips that keep coming back). Skips that began
    before the first forward overflow are explained by what those earlier steps show (the overflow came later).
    The skips looked at are the last :data:`COLLAPSE_WINDOW` skipped steps (the collapse window), not the run's
    first skip: a scale backing off from a large init_scale, or one earlier spike, does not hide the overflow
    that makes the window's skips. The overflow explains them when no step before it was skipped, or when the
    steps before it were mostly applied (the earlier skips were the scale settling or a spike) and the window
    starts at or after it or most of the window's sampled skips saw a forward inf/NaN. When most steps before
    the overflow were skipped already, the collapse began before it: those steps tell its cause. ``backing_off``
    (every step skipped, every scale tried at or above GradScaler's default init_scale): a gradient that overflows
    there is what a too-large init_scale makes, so, after the causes no scale changes (a forward overflow, the
    batch, the loss itself), the init_scale is named rather than the gradients."""
    kinds = {f.kind: f for f in found}
    overflow = kinds.get("overflow")
    window = [r for r in records if r.skipped][-COLLAPSE_WINDOW:]
    first_skip = window[0].step if window else None
    seen = [r for r in sampled if r.skipped and window and window[0].step <= r.step <= window[-1].step]
    before = [r.skipped for r in records if overflow is not None and r.step < overflow.step]
    later = ""
    if overflow is not None and (not any(before) or not _majority(before) and (
            first_skip is None or first_skip >= overflow.step
            or _majority([r.first_nonfinite_module is not None for r in seen]))):
        where = overflow.where
        return where, (f"the forward pass overflows in {_label(where)}, and no loss scale can fix a forward "
                       "overflow: fix that module (see the overflow finding).")
    if overflow is not None:
        later = (f" (The forward overflow in {_label(overflow.where)} from step {overflow.step} on came later: "
                 "see the overflow finding.)")
        sampled = [r for r in sampled if r.step < overflow.step]
    bad_input = _input_cause(records, sampled, kinds.get("nonfinite_input"))
    if bad_input is not None:
        first_bad = kinds["nonfinite_input"].step
        seen = (f"step {bad_input}, see the nonfinite_input finding" if bad_input == first_bad else
                f"step {bad_input}; the nonfinite_input finding names the first, step {first_bad}")
        return "input", (f"the batch holds inf/NaN ({seen}): no loss scale can fix broken data — fix the data."
                         + later)
    if "nonfinite_loss" in kinds and _LOSS_COMPUTATION in kinds["nonfinite_loss"].message and (
            overflow is None or kinds["nonfinite_loss"].step <= (first_skip or 0)):
        return "loss", "the loss itself is inf/NaN: compute it in FP32 (see the nonfinite_loss finding)." + later
    if backing_off:
        first, low = records[0].scale_before, records[-1].scale_before
        doublings = math.log2(first / _DEFAULT_INIT_SCALE)
        return "scaler", (f"init_scale={first:g} is {doublings:.3g} doubling{'' if doublings == 1 else 's'} above "
                          f"GradScaler's default ({_DEFAULT_INIT_SCALE:g}), and GradScaler halves the scale once per "
                          f"skipped step: at every scale tried so far (down to {low:g}) scale × gradient passes "
                          f"{FP16_MAX:g}. Start from the default init_scale, or record more steps: skips that go on "
                          "below it are a collapse, and the steps there show its cause." + later)
    # the window's sampled skips (for skips that keep coming back, those after the first applied step): a large
    # init_scale backing off earlier, with an inf gradient where it enters the model, is not their cause (review
    # rev24-r9 finding 3); when a forward overflow came later, the skips before it (``sampled`` stops there)
    applied = next((x.step for x in records if not x.skipped), None)
    skipped = [x for x in sampled if x.skipped and (collapse or applied is None or x.step > applied)]
    inside = [x for x in skipped if window and window[0].step <= x.step <= window[-1].step]
    skipped = inside if inside or not later else skipped
    r = skipped[-1] if skipped else None
    if r is not None and r.first_nonfinite_backward is not None:
        name = r.first_nonfinite_backward
        if not collapse:
            return name, (f"the backward pass of {_label(name)} overflows float16 at scale {r.scale_before:g} "
                          f"(scale × gradient > {FP16_MAX:g}): its gradients spike; run it in FP32 (FP32Island)."
                          + later)
        tiny = float(torch.finfo(torch.float16).smallest_normal)
        return name, (f"the backward pass of {_label(name)}'s own code (not of a submodule) turns finite gradients "
                      f"into inf/NaN even at scale {r.scale_before:g}: an fp16-unsafe constant (eps=1e-8 is 0 in "
                      f"float16 — use eps >= {tiny:.2g}, its smallest normal) or a sqrt/log/division at 0 there; or "
                      "run it in FP32 (FP32Island)." + later)
    root = next((x for x in skipped if (_module(x, "") or ModuleStats("", "", 0.0, 1.0)).grad_finite is False), None)
    if root is not None:
        return "loss", ("the gradient is inf already where it enters the model: the loss is too large for float16 "
                        "— a constant multiplying it (a leftover static loss scale such as loss * 2**24: drop it, "
                        "the GradScaler scales), a sum instead of a mean, or unnormalised targets (average it or "
                        "normalise them)." + later)
    if r is not None and r.first_nonfinite_grad is not None:
        name = r.first_nonfinite_grad
        if not collapse:
            return name, (f"the gradient of {name} overflows float16 at scale {r.scale_before:g} (scale × gradient > "
                          f"{FP16_MAX:g}): the gradients spike." + later)
        return name, (f"the first non-finite gradient is that of {name}, even at scale {r.scale_before:g}: it "
                      "overflows float16 there, so the activations feeding its module or the gradient reaching it "
                      "are too large — normalise them (a norm layer before it, a smaller init), run that module in "
                      "FP32 (FP32Island), or train in bf16." + later)
    return "scaler", ("no sampled step saw where the inf/NaN starts: record with every=1, or run "
                      "troubleshoot.find_nonfinite on a failing batch." + later)


def _input_cause(records: list[StepRecord], sampled: list[StepRecord], bad_input: Finding | None) -> int | None:
    """The sampled step whose batch held inf/NaN when that explains the recent skips, else None. The skips looked
    at are the last :data:`COLLAPSE_WINDOW` skipped steps (the collapse window, or the latest of skips that keep
    coming back), not the run's first skip: skips before the bad batches (a large init_scale backing off) do not
    hide it. They are explained by the batch when most of them have a non-finite loss and most of the sampled
    steps in the window with a non-finite loss had a non-finite batch (one bad batch just before an inf loss that
    later clean batches keep making is not the cause); when no sampled step with a non-finite loss lies in the
    window, by the first sampled step of the run of non-finite losses that reaches into it (which may start on an
    unsampled step, before the window)."""
    if bad_input is None:
        return None
    window = [r for r in records if r.skipped][-COLLAPSE_WINDOW:]
    bad = [r for r in window if not math.isfinite(r.loss)]
    if not window or 2 * len(bad) <= len(window):
        return None
    inside = [r for r in sampled if window[0].step <= r.step <= window[-1].step and not math.isfinite(r.loss)]
    if inside:
        broken = [r for r in inside if r.input_finite is False]
        return broken[0].step if 2 * len(broken) > len(inside) else None
    position = {r.step: k for k, r in enumerate(records)}
    k = position[bad[0].step]
    while k > 0 and not math.isfinite(records[k - 1].loss):  # back to the start of that run of non-finite losses
        k -= 1
    start = records[k].step
    first = next((r for r in sampled if r.step >= start and not math.isfinite(r.loss)), None)
    return first.step if first is not None and first.input_finite is False else None


def _scale_findings(records: list[StepRecord], sampled: list[StepRecord], found: list[Finding]) -> list[Finding]:
    """diagnose_scale's verdict on the scale history, fed as the recorder reads it: ``unstable`` counts as
    frequent_skips only with at least :data:`MIN_FREQUENT_SKIPS` skips after the first applied step (one or two
    in a short run are the scale still settling), and a run is never passed as healthy when no step was applied
    or the last :data:`TRAILING_SKIPS` steps or more were skipped (too short for diagnose_scale's window)."""
    scales = [records[0].scale_before] + [r.scale_after for r in records]
    if any(s is None for s in scales) or scales[0] <= 0:
        return []
    diagnosis = diagnose_scale(scales, window=COLLAPSE_WINDOW, max_skip_fraction=MAX_SKIP_FRACTION)
    final = diagnosis.final_scale
    n = diagnosis.steps
    if diagnosis.status == "collapsing" or final < 1 or diagnosis.warmup_skips == n:
        # every step skipped, the scale started above the default init_scale and every scale tried is still at or
        # above it: a large init_scale backing off looks like this for its first log2(init_scale / 2**16) steps
        # (Megatron starts at 2**32); at the default init_scale itself the skips are not a backing-off
        backing_off = (diagnosis.warmup_skips == n and records[0].scale_before > _DEFAULT_INIT_SCALE
                       and records[-1].scale_before >= _DEFAULT_INIT_SCALE)
        where, cause = _likely_cause(records, sampled, found, collapse=True, backing_off=backing_off)
        start = n - diagnosis.trailing_skips if diagnosis.trailing_skips else records[-1].step
        if backing_off:
            what = (f"every one of the {n} steps was skipped ({diagnosis.first_scale:g} → {final:g}): no step has "
                    f"updated the model yet, and every scale tried is at or above GradScaler's default init_scale "
                    f"({_DEFAULT_INIT_SCALE:g}): too few steps to tell a scale still backing off from a large "
                    "init_scale from a collapse")
        elif diagnosis.status == "collapsing":
            what = diagnosis.reason.split(". ")[0]
        elif final < 1:
            what = f"the scale fell below 1 ({diagnosis.first_scale:g} → {final:g}): the gradients are scaled down"
        else:
            what = (f"every one of the {n} steps was skipped ({diagnosis.first_scale:g} → {final:g}): no step has "
                    f"updated the model yet (too few steps to tell a scale still backing off from a large "
                    f"init_scale from a collapse: diagnose_scale needs {COLLAPSE_WINDOW} skips in a row)")
        return [Finding("scale_collapse", start, where, f"{what}. Likely cause: {cause}")]
    after = [s for s in diagnosis.skipped_steps if s >= diagnosis.warmup_skips]
    if diagnosis.status == "unstable" and len(after) >= MIN_FREQUENT_SKIPS:
        where, cause = _likely_cause(records, sampled, found, collapse=False)
        return [Finding("frequent_skips", after[0], where,
                        f"{diagnosis.reason} Likely cause: {cause} Or a loss spike / too-large learning rate: lower it "
                        "or clip the gradients (after scaler.unscale_).")]
    if diagnosis.trailing_skips >= TRAILING_SKIPS:
        where, cause = _likely_cause(records, sampled, found, collapse=False)
        start = n - diagnosis.trailing_skips
        return [Finding("frequent_skips", start, where,
                        f"the last {diagnosis.trailing_skips} steps (from step {start} on) were all skipped "
                        f"({diagnosis.first_scale:g} → {final:g}): no step updates the model now; if it goes on for "
                        f"{COLLAPSE_WINDOW} steps it is a collapse. Likely cause: {cause}")]
    tail, recent = _recent_skips(records)
    if recent:
        where, cause = _likely_cause(records, sampled, found, collapse=False)
        return [Finding("frequent_skips", recent[0], where,
                        f"{len(recent)} of the last {len(tail)} steps (from step {tail[0].step} on) were skipped "
                        f"({len(recent) / len(tail):.0%} > {MAX_SKIP_FRACTION:.0%}) and the scale fell "
                        f"{tail[0].scale_before:g} → {final:g}: overflows keep coming back now, though the whole run "
                        f"skipped at most {MAX_SKIP_FRACTION:.0%} of its steps. Likely cause: {cause} Or a loss spike "
                        "/ too-large learning rate: lower it or clip the gradients (after scaler.unscale_).")]
    return []


def _recent_skips(records: list[StepRecord]) -> tuple[list[StepRecord], list[int]]:
    """The run's last :data:`RECENT_STEPS` steps after its first applied step, and their skipped steps when they
    are frequent: at least :data:`MIN_FREQUENT_SKIPS`, more than :data:`MAX_SKIP_FRACTION` of them (a back-off
    after the scale grew left out: :func:`_skip_phases`); else ``(tail, [])`` (review rev24-r9 finding 6: a run
    skipping every third step over its last 20 read as healthy after 40 clean steps)."""
    first = next((k for k, r in enumerate(records) if not r.skipped), None)
    if first is None:
        return [], []
    top, grown = 0.0, set()
    for r in records:
        if r.scale_before is None:
            continue
        if not r.skipped:
            top = max(top, r.scale_before)
        elif top and r.scale_before > top:
            grown.add(r.step)
    tail = records[max(first + 1, len(records) - RECENT_STEPS):]
    skips = [r.step for r in tail if r.skipped and r.step not in grown]
    frequent = len(skips) >= MIN_FREQUENT_SKIPS and len(skips) > MAX_SKIP_FRACTION * len(tail)
    return tail, skips if frequent else []


def _unneeded_scaler(sampled: list[StepRecord]) -> Finding | None:
    dtypes = [r.autocast_dtype for r in sampled if r.modules]
    if not dtypes or torch.float16 in dtypes:
        return None
    r = next(r for r in sampled if r.modules)
    return Finding("unneeded_scaler", r.step, "scaler",
                   f"a GradScaler is enabled but the forward pass ran under {_dtype_name(r.autocast_dtype)}, which "
                   "has float32's range: no gradient underflows, so the scaler only costs time and skips steps now "
                   "and then. Drop it, or create it with enabled=(dtype == torch.float16).")


def _majority(flags: list[bool]) -> bool:
    return bool(flags) and 2 * sum(flags) > len(flags)


def _lost_param(r: StepRecord, name: str, zeros: bool = True) -> bool:
    """A parameter's gradient counts as lost on step ``r`` by the rule a module's does (:func:`_lost_activation`):
    more than :data:`UNDERFLOW_FRACTION` of its non-zero entries below fp16's normal range, when they can carry
    more than that share of its squared norm (``param_grad_subnormal_mass``: review rev24-r9 finding 2, a softmax's
    tail of tiny entries carries next to nothing), or (with ``zeros``) all of it exactly 0. Its exact zeros alone
    do not count otherwise: rows no token or position reached are 0 in any precision, and so is everything below a
    dead ReLU."""
    lost = r.param_grad_lost.get(name)
    if lost is None:
        return False
    if zeros and name in r.loss_cast_zero:  # reached only through a cast of the loss whose gradient was exactly 0
        zeros = False
    zeros = zeros or name in r.loss_cast_lost  # reached only through casts that flushed it (rev24-r18 E2)
    subnormal = r.param_grad_subnormal.get(name, 0.0)
    mass = r.param_grad_subnormal_mass.get(name, 1.0)
    return subnormal > UNDERFLOW_FRACTION and mass > UNDERFLOW_FRACTION or (zeros and lost >= 1.0)


def _flushed_at_the_loss(r: StepRecord) -> bool:
    """The loss's gradient was flushed to 0 before it reached the model's float16 ops (a loss too small for
    float16), so a gradient that is exactly 0 everywhere further down is lost, not 0 by the model's design (a dead
    ReLU, an unused branch).

    - The loss computed outside the model: the gradient entering it (the model's own output gradient) is lost
      itself.
    - The model returns its own 0-d loss (Hugging Face's ``outputs.loss``; the model's output gradient is then the
      scale: review rev24-r10): no module's output gradient reached it intact (every module that got one, a loss
      module such as ``self.crit = nn.MSELoss()`` with its 0-d output left aside, is lost). A module multiplied by 0
      beside a live head (an auxiliary term) does not make the rest lost (rev24-r13 E3).

    "Lost" is mostly subnormal (then the gradient is tiny anyway), or exactly 0 with a loss that could have been
    flushed: |loss| x scale divided by a module's ``numel`` (a mean's division; ``numel`` is the most elements of
    one of its outputs in one call, the largest of a tuple such as ``(z, recon)``: review rev24-r15 E4) is below
    :data:`_FLUSH_SPREAD`. That module is, with the loss outside, the last one in ``r.modules`` that got an output
    gradient (the model itself, whose forward finishes last); with an own loss, the last of the modules above
    (those that got an output gradient, the model itself and the modules all of whose outputs were 0-d left
    aside; a ``(1, 1)`` head at batch 1 counts: rev24-r15 E2) in ``r.modules``'s order, that of their *first*
    call's end: not the largest inner activation, which made a dead final ReLU's zeros a flush (review rev24-r14
    E1). Exact zeros carry no magnitude, so that divisor can be a term weighted by 0 whose module's first call
    ends last: a wide one made a dead final ReLU's zeros a flush, a narrow one hid a real flush (review rev24-r15
    E1/E3). So where the model's own loss is computed in float32 from float16 outputs (``.float()``, or autocast's
    cast into ``mse_loss``), the flush is read where it happens, at that cast (``r.loss_cast_flushed``: more than
    :data:`UNDERFLOW_FRACTION` of its non-zero float32 gradient entries 0 in float16), and the divisor is not used.

    An O(1) loss at scale 65536 whose gradients are 0 by design (a saturated clamp, a dead final ReLU) is not
    flushed (reviews rev24-r11 E1, rev24-r12 E1/M1); a small mean loss over many outputs, or one divided for
    accumulation before its backward, is (rev24-r13 E1). A loss of exactly 0 counts as possibly flushed (a float16
    loss computed from flushed values is 0: rev24-r13 E2), so a satisfied hinge's exact zeros are read as a flush
    too (left: review rev24-r12 M1)."""
    root = next((m for m in r.modules if m.name == ""), None)
    own = root.own_loss if root is not None else None
    if own is None:
        first = next((m for m in reversed(r.modules) if m.grad_lost is not None), None)
        reached = [] if first is None else [first]
        loss = abs(r.loss)
    else:
        reached = [m for m in r.modules if m.grad_lost is not None and m.name != "" and not m.zero_d
                   and not (m.numel == 1 and not _lost_activation(m))]  # a (1,) loss module: rev24-r16 E1
        loss = own
    if not reached or not all(_lost_activation(m) for m in reached):
        return False
    if any(_lost_activation(m, zeros=False) for m in reached):
        return True
    if own is not None and r.loss_cast_flushed is not None:  # read at the float16 cast itself: rev24-r15 E1/E3
        return r.loss_cast_flushed > UNDERFLOW_FRACTION
    spread = loss * (r.scale_before or 1.0) / (reached[-1].numel or 1)
    return math.isfinite(spread) and spread < _FLUSH_SPREAD


def _underflow(records: list[StepRecord], sampled: list[StepRecord],
               dtype: torch.dtype | None = None) -> Finding | None:
    """Gradients lost below float16's normal range on most sampled float16 steps: those that ran float16 autocast,
    or all of them when the trained parameters are float16 (``dtype``: ``model.half()``, whose gradients are
    float16 whatever autocast does; review rev24-r9 finding 4)."""
    half = dtype == torch.float16
    steps = [r for r in sampled if (half or r.autocast_dtype == torch.float16) and not r.skipped
             and r.param_grad_lost]
    if not steps:
        return None
    flushed = [_flushed_at_the_loss(r) for r in steps]

    def held(name: str) -> list[StepRecord]:  # the steps on which the parameter's gradient counts as lost
        return [r for r, zeros in zip(steps, flushed, strict=True)
                if _lost_param(r, name, zeros)]
    where = next((name for name in steps[-1].param_grad_lost if 2 * len(held(name)) > len(steps)), None)
    if where is not None:
        on = held(where)
        last = on[-1]  # the share quoted is that of the last step on which the rule held (review rev24-r10)
        share, sub = last.param_grad_lost[where], last.param_grad_subnormal.get(where, 0.0)
        what = (f"{sub:.0%} of the non-zero gradient of parameter {where}" if sub > UNDERFLOW_FRACTION
                else f"{share:.0%} of the gradient of parameter {where}")
    else:
        names = [m.name for m in reversed(steps[-1].modules) if m.grad_lost is not None]  # backward order

        def held_out(name: str) -> list[StepRecord]:  # a module under a term weighted by 0: zeros by design (r18 E3)
            return [r for r, zeros in zip(steps, flushed, strict=True)
                    if _lost_activation(_module(r, name), zeros and not (
                        name and any(p.startswith(name + ".") for p in r.loss_cast_zero)))]
        where = next((n for n in names if 2 * len(held_out(n)) > len(steps)), None)
        if where is None:
            return None
        on = held_out(where)
        module = _module(on[-1], where)
        sub = module.grad_subnormal or 0.0
        what = (f"{sub:.0%} of the non-zero gradient flowing out of {_label(where)}" if sub > UNDERFLOW_FRACTION
                else f"{module.grad_lost:.0%} of the gradient flowing out of {_label(where)}")
    what += f" (step {on[-1].step})"
    r = steps[0]
    scale = on[-1].scale_before  # the quoted step's scale, not the first's (review rev24-r11 M1)
    if scale is None and half:
        fix = ("the model's weights are float16 (model.half()), so its gradients are too, and a GradScaler refuses "
               "float16 gradients: train with autocast and float32 weights plus a GradScaler, or in bf16.")
    elif scale is None:
        fix = "there is no GradScaler: use torch.amp.GradScaler with float16, or train in bf16."
    elif r.scale_before is not None and scale > r.scale_before:  # growing already: growth_interval is not it
        fix = (f"the loss scale {scale:g} (grown from {r.scale_before:g} at step {r.step}) is still too small for it: "
               "start it larger (init_scale), make the loss or the inputs larger (normalise them), or train in bf16.")
    else:
        fix = (f"the loss scale {scale:g} is too small for it: let the scaler grow (a larger init_scale, a shorter "
               "growth_interval), make the loss or the inputs larger (normalise them), or train in bf16.")
    return Finding("underflow", r.step, where,
                   f"{what} is 0 or below float16's smallest normal ({FP16_NORMAL_MIN:.2g}) at the current scale, on "
                   f"{len(on)} of {len(steps)} sampled float16 steps: those gradients are lost or imprecise; {fix}")


def _lost_activation(module: ModuleStats | None, zeros: bool = True) -> bool:
    """A module's output gradient counts as lost: more than :data:`UNDERFLOW_FRACTION` of its non-zero entries
    below fp16's normal range, able to carry more than that share of its squared norm (``grad_subnormal_mass``:
    then its largest entry is at most about 2**-7.5 at the scale, far below 65504, so a larger scale does lift
    them), or (with ``zeros``: the loss's side is lost too, :func:`_flushed_at_the_loss`) all
    of it exactly 0."""
    if module is None or module.grad_lost is None:
        return False
    mass = 1.0 if module.grad_subnormal_mass is None else module.grad_subnormal_mass
    return ((module.grad_subnormal or 0.0) > UNDERFLOW_FRACTION and mass > UNDERFLOW_FRACTION
            or (zeros and module.grad_lost >= 1.0))


def _cast_down_fix(m: ModuleStats, consumer: str | None, *, said: bool = False) -> str:
    """The fix for a module whose float32 output is cast down to the autocast dtype by the next module: it runs
    in FP32 already, so "run it in FP32" is no fix. ``said``: the finding has already said who casts it down (the
    overflow's text), so the fix does not repeat it. A smaller weight is offered for a norm layer only (a
    kind with "norm" in its name: LayerNorm, RMSNorm, BatchNorm2d)."""
    by = _label(consumer or m.cast_by or "the next module")
    cast = "" if said else f"; its float32 output is cast to {_limit_name(m.limit)} by {by}, which receives it"
    smaller = ("a smaller norm weight, " if "norm" in m.kind.lower() else "") + "normalise what feeds it"
    return (f"it already runs in float32{cast}: extend the FP32 region over {by} too (one FP32Island around both), "
            f"keep its values smaller ({smaller}), or train in bf16.")


def _low_headroom(records: list[StepRecord], sampled: list[StepRecord],
                  named: frozenset[str] = frozenset()) -> Finding | None:
    """A finite peak with less than LOW_HEADROOM_BITS of headroom, in a module the overflow finding does not
    already name (``named``). A peak above the limit (a float32 output too large for the dtype the next module
    casts it to) is below 0 bits: the overflow finding names it when the cast made inf; this one says 'above'."""
    for r in sampled:
        low = [m for m in r.modules if m.finite and m.headroom_bits < LOW_HEADROOM_BITS and m.name not in named]
        if low:
            m = low[0]
            others = ", ".join(_label(x.name) for x in low[1:4]) + (", ..." if len(low) > 4 else "")
            bits = m.headroom_bits
            where = (f"{bits:.1f} bits below the largest value {m.limit:g} of {_limit_name(m.limit)} (less than "
                     f"{LOW_HEADROOM_BITS:g}): a little growth overflows it" if bits >= 0 else
                     f"{-bits:.1f} bits above the largest value {m.limit:g} of {_limit_name(m.limit)}: it overflows "
                     "when cast to it")
            if m.dtype == torch.float32 and m.limit < _largest(torch.float32):
                fix = _cast_down_fix(m, m.cast_by)
                fix = fix[0].upper() + fix[1:]
            else:
                fix = "Normalise what feeds it, run it in FP32 (FP32Island) or train in bf16."
            return Finding("low_headroom", r.step, m.name,
                           f"{_label(m.name)} ({m.kind}) peaks at {m.peak:.4g}, {where}. {fix}"
                           + (f" Also near the limit: {others}." if others else ""))
    return None


def _scheduler_on_skipped(records: list[StepRecord], epoch0: int | None) -> Finding | None:
    """A skipped step k with the scheduler moving both in k's interval and in the next one: with the scheduler
    stepped before ``rec.step`` or after it, a loop that steps it only on applied steps never moves it in both."""
    epochs = [epoch0] + [r.scheduler_epoch for r in records]
    moved = [epochs[i + 1] - epochs[i] > 0 for i in range(len(records))]
    bad = [r.step for r in records[:-1] if r.skipped and moved[r.step] and moved[r.step + 1]]
    if not bad:
        return None
    n_skipped = sum(r.skipped for r in records)
    return Finding("scheduler_on_skipped_step", bad[0], "scheduler",
                   f"the scheduler stepped on {len(bad)} of the {n_skipped} steps the scaler skipped (first: step "
                   f"{bad[0]}), so the lr schedule runs ahead of the model. Call scheduler.step() only when the step "
                   "ran: read scale = scaler.get_scale() after scaler.scale(loss) and before scaler.update(), then "
                   "step the scheduler if scaler.get_scale() >= scale.")


def _skip_phases(records: list[StepRecord]) -> tuple[int, int, int]:
    """(settling, after growth, other) skipped steps: settling = before the first applied step (the scale
    backing off from its init_scale); after growth = a skip at a scale above every scale an earlier applied
    step ran at (GradScaler grew it and backed off at the next overflow: normal); other = the rest."""
    settling = growth = other = 0
    applied: list[float] = []
    for r in records:
        if not r.skipped:
            if r.scale_before is not None:
                applied.append(r.scale_before)
            continue
        if not applied:
            settling += 1
        elif r.scale_before is not None and r.scale_before > max(applied):
            growth += 1
        else:
            other += 1
    return settling, growth, other


def _few_skips(records: list[StepRecord]) -> str:
    """Why a run's skips after its first applied step are no frequent_skips, in words: too few, or too small a
    share (of the steps from the first applied one on, and of the last :data:`RECENT_STEPS`)."""
    first = next((k for k, r in enumerate(records) if not r.skipped), len(records))
    after = sum(r.skipped for r in records[first:])
    if after < MIN_FREQUENT_SKIPS:
        return f"{after} after the first applied step: fewer than {MIN_FREQUENT_SKIPS}"
    return (f"{after} of the {len(records) - first} steps from the first applied one on: at most "
            f"{MAX_SKIP_FRACTION:.0%}, and no more than that over the last {RECENT_STEPS} steps")


def _healthy(records: list[StepRecord], sampled: list[StepRecord]) -> Finding:
    skipped = sum(r.skipped for r in records)
    modules = [m for m in (sampled[-1].modules if sampled else ()) if m.finite]
    closest = min(modules, key=lambda m: m.headroom_bits, default=None)
    headroom = (f"; the module nearest to overflow is {_label(closest.name)}, {closest.headroom_bits:.1f} bits below "
                f"its output's limit" if closest is not None and math.isfinite(closest.headroom_bits) else "")
    if skipped:
        settling, growth, other = _skip_phases(records)
        parts = [f"{settling} while the scale settled (before the first applied step)" if settling else "",
                 f"{growth} back-off{'s' if growth != 1 else ''} after the scale grew (normal: GradScaler grows the "
                 "scale every growth_interval steps and halves it at the next overflow)" if growth else "",
                 f"{other} more ({_few_skips(records)})" if other else ""]
        skips = f"{skipped} skipped: " + ", ".join(p for p in parts if p)
    else:
        skips = "0 skipped"
    return Finding("healthy", records[-1].step, "",
                   f"{len(records)} steps ({len(sampled)} sampled), {skips}{headroom}: nothing to fix.")


# --- Report and figure -------------------------------------------------------------------------------------

def _fmt(value: Any) -> str:
    return "—" if value is None else f"{value:.4g}"


def _is_mask(r: StepRecord, m: ModuleStats) -> bool:
    """``m``'s outputs on step ``r`` held -inf and no other non-finite value, and the step's loss was finite: a
    mask module (its -inf became 0 in a softmax), the rule of :func:`_first_bad_call`, not a module at 0 bits."""
    return m.minus_inf and math.isfinite(r.loss)


def _report(rec: AmpRecorder) -> str:
    records = rec.records
    if not records:
        return "AmpRecorder: no step recorded yet — call rec.step(loss) after each scaler.update()."
    sampled = [r for r in records if r.sampled]
    scaler = "no GradScaler" if rec.scaler is None else ("GradScaler enabled" if rec.scaler.is_enabled()
                                                        else "GradScaler disabled")
    dtype = _dtype_name(sampled[-1].autocast_dtype) if sampled and sampled[-1].modules else "autocast unknown"
    weights = rec._weights()[0]
    if dtype == _dtype_name(None) and weights not in (None, torch.float32):
        dtype = f"{str(weights).removeprefix('torch.')} weights, no autocast"
    lines = [f"AmpRecorder: {len(records)} steps, {len(sampled)} sampled (every={rec.every}), {dtype}, {scaler}, "
             f"{sum(r.skipped for r in records)} skipped"]
    rows = [{"step": r.step, "loss": r.loss, "scale": r.scale_before, "skipped": "yes" if r.skipped else "",
             "grad norm": r.grad_norm, "lr": r.lr, "first inf/NaN": _label(r.first_nonfinite_module)
             if r.first_nonfinite_module is not None else ""} for r in sampled[-8:]]
    lines.append(Table(rows, formats={"loss": _fmt, "scale": _fmt, "grad norm": _fmt, "lr": _fmt},
                       title="sampled steps (the last 8)").text())
    if sampled and sampled[-1].modules:
        last = sampled[-1]
        masks = [m for m in last.modules if _is_mask(last, m)]
        closest = sorted((m for m in last.modules if not _is_mask(last, m)), key=lambda m: m.headroom_bits)[:6]
        rows = [{"module": _label(m.name), "type": m.kind, "peak |out|": m.peak, "headroom (bits)": m.headroom_bits,
                 "grad lost": "inf/NaN" if m.grad_finite is False else m.grad_lost} for m in closest]
        lines.append(Table(rows, formats={"peak |out|": _fmt, "headroom (bits)": "{:.1f}",
                                          "grad lost": lambda v: "—" if v is None else v if isinstance(v, str)
                                          else f"{v:.0%}"},
                           title=f"modules nearest to overflow at step {last.step}").text())
        if masks:
            lines.append("not in the table: " + ", ".join(f"{_label(m.name)} ({m.kind})" for m in masks)
                         + " — outputs whose only non-finite values are -inf on a step with a finite loss: masks "
                           "(the -inf becomes 0 in a softmax), not overflows.")
    findings = "\n".join(["findings:"] + [f"- {f}" for f in rec.findings()])
    return "\n\n".join(lines + [findings])


def _headroom_bars(records: tuple[StepRecord, ...]) -> list[tuple[str, float]]:
    """The bars of ``plot()``'s headroom panel: the 8 modules with the least headroom on their worst sampled
    step, (name, bits), most headroom first; a mask module's -inf on a step with a finite loss is left out
    (:func:`_is_mask`: no 0-bit bar for a mask)."""
    worst: dict[str, float] = {}
    for r in records:
        if not (r.sampled and r.modules):
            continue
        for m in r.modules:
            if not _is_mask(r, m):
                worst[m.name] = min(worst.get(m.name, math.inf), m.headroom_bits)
    return sorted(worst.items(), key=lambda kv: kv[1])[:8][::-1]


def _plot(rec: AmpRecorder):
    from matplotlib.figure import Figure

    from .widgets.base import COLORS, figure_png

    records = rec.records
    if not records:
        raise ValueError("nothing to plot yet: call rec.step(loss) after each optimizer step first")
    fig = Figure(figsize=(9.0, 3.0))
    axes = fig.subplots(1, 3)
    steps = [r.step for r in records]
    ax = axes[0]
    if records[0].scale_before is not None:
        scales = [r.scale_before for r in records]
        ax.step(steps, [math.log2(s) if s > 0 else math.nan for s in scales], where="post", color=COLORS["blue"])
        ax.set_ylabel("log2(scale)")
    else:
        ax.text(0.5, 0.5, "no GradScaler", ha="center", va="center", transform=ax.transAxes)
    skipped = [r.step for r in records if r.skipped]
    for s in skipped:
        ax.axvline(s, color=COLORS["vermillion"], alpha=0.3, linewidth=1)
    ax.set_title(f"scale; {len(skipped)} skipped (red)", fontsize=9)
    ax.set_xlabel("step")
    ax = axes[1]
    ax.plot(steps, [r.loss if math.isfinite(r.loss) else math.nan for r in records], color=COLORS["black"])
    for r in records:
        if not math.isfinite(r.loss):
            ax.axvline(r.step, color=COLORS["vermillion"], alpha=0.5, linewidth=1)
    ax.set_title("loss (red: inf/NaN)", fontsize=9)
    ax.set_xlabel("step")
    ax = axes[2]
    shown = _headroom_bars(records)
    if shown:
        values = [max(v, 0.0) if math.isfinite(v) or v > 0 else 0.0 for _, v in shown]
        colors = [COLORS["vermillion"] if v < LOW_HEADROOM_BITS else COLORS["green"] for _, v in shown]
        ax.barh([_label(n)[-18:] for n, _ in shown], [min(v, 64.0) for v in values], color=colors)
        ax.axvline(LOW_HEADROOM_BITS, color=COLORS["black"], linestyle="--", linewidth=1)
        ax.tick_params(axis="y", labelsize=7)
    ax.set_title("headroom (bits, worst step)", fontsize=9)
    fig.tight_layout()
    return figure_png(fig)
