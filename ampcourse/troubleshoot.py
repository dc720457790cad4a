"""Troubleshooting mixed precision (lesson 07): the lesson's demos, beside the tools they exercise.

The reusable tools (:func:`find_nonfinite`, :func:`activation_peaks`, :func:`anomaly_message`,
:func:`grad_stats`, :class:`FP32Island`, :func:`fp32_loss`, :func:`diagnose_scale` …) live in
:mod:`ampcourse.diagnostics`; this module re-exports them, so ``from ampcourse.troubleshoot import
find_nonfinite`` keeps working. The demos:

* :func:`overflow_model` (a classifier whose weights are scaled by hand so that its activations pass 65504)
  and :class:`WhereSqrt` (finite forward, NaN backward, the backward-pass demo).
* :class:`SeedFP32Loss`: the seed article's ``FP32Loss``, reproduced to show its bug (it casts the
  class-index targets too and breaks ``cross_entropy``; :func:`fp32_loss` is the fix).
* :func:`underflow_comparison`: the same small gradients in FP32, float16, float16 with a GradScaler.
* :func:`train_in_bf16` trains a small regression model under bf16 autocast on unnormalised targets (rents
  in cents): its outputs pass 65504, fine in bf16, inf in fp16. :func:`large_activation_stats` shows a sum
  of large activations overflowing.
* :func:`scaled_training_run` trains a model under float16 autocast with a real ``torch.amp.GradScaler``
  and records ``get_scale()`` each step (read it with :func:`diagnose_scale`; draw it with
  :func:`scale_history_png`).
* :data:`SYMPTOMS` is the lesson's symptom → cause → fix table, as data (:func:`symptom_table`).

Everything is seeded and tiny: float16 matrix products are very slow on CPUs, so the demos stay small.
"""

from __future__ import annotations

import copy
import math
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from .diagnostics import (  # the tools, re-exported: their home is ampcourse.diagnostics
    COLLAPSE_WINDOW,
    FP16_MAX,
    MAX_SKIP_FRACTION,
    AnomalyReport,
    FP32Island,
    GradStats,
    ModuleRecord,
    NonFiniteReport,
    ScaleDiagnosis,
    _call_model,
    _check_logits,
    _dtype_name,
    activation_peaks,
    anomaly_message,
    anomaly_overhead,
    diagnose_scale,
    find_nonfinite,
    fp32_loss,
    grad_stats,
)
from .scaler_run import StepCounter
from .tables import Table
from .validate import as_device, as_int, as_positive

if TYPE_CHECKING:  # matplotlib is imported only when a figure is drawn
    from .widgets.base import Png

__all__ = [
    # the tools (ampcourse.diagnostics)
    "COLLAPSE_WINDOW", "FP16_MAX", "MAX_SKIP_FRACTION", "AnomalyReport", "FP32Island", "GradStats", "ModuleRecord",
    "NonFiniteReport", "ScaleDiagnosis", "activation_peaks", "anomaly_message", "anomaly_overhead", "diagnose_scale",
    "find_nonfinite", "fp32_loss", "grad_stats",
    # the demos
    "RENT_FEATURES", "SYMPTOMS", "BF16Training", "LargeActivations", "ScaleRun", "SeedFP32Loss", "WhereSqrt",
    "large_activation_stats", "overflow_model", "scale_history_png", "scaled_training_run", "symptom_table",
    "train_in_bf16", "underflow_comparison",
]


# --- The backward-pass demo ------------------------------------------------------------------------------

class WhereSqrt(nn.Module):
    """``sqrt(x)`` where ``x > 0``, else 0 — with a finite forward and (unless ``safe``) a NaN backward.

    ``torch.where(x > 0, x.sqrt(), 0)`` is finite in the forward pass, but ``sqrt`` of a negative number
    is NaN, and its backward computes ``grad / (2·sqrt(x))`` = NaN for those entries, even though
    ``where`` passes them a zero gradient (0 / NaN = NaN). ``safe=True`` takes the square root of
    ``x.clamp_min(tiny)`` instead, so no branch ever sees a NaN.
    """

    def __init__(self, safe: bool = False) -> None:
        super().__init__()
        if not isinstance(safe, bool):
            raise TypeError(f"safe must be a bool (got {safe!r})")
        self.safe = safe

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        inner = x.clamp_min(torch.finfo(x.dtype).tiny) if self.safe else x
        return torch.where(x > 0, inner.sqrt(), torch.zeros_like(x))

    def extra_repr(self) -> str:
        return f"safe={self.safe}"


def underflow_comparison(factor: float = 2.0**-20, scale: float = 2.0**16, seed: int = 0) -> Table:
    """The same small gradients three ways: FP32, float16 autocast, float16 autocast with a GradScaler.

    The loss of :func:`overflow_model` (``gain=1``: ordinary weights) is multiplied by ``factor`` to make its
    gradients small. One row per run, over all gradient entries: the fraction exactly 0 and the fraction
    that would round to 0 in float16. Without a scaler, the float16 backward pass loses the gradients that
    FP32 only *would* lose; a loss scale of ``scale`` (unscaled with ``unscale_`` before reading) keeps them.
    """
    factor, scale = as_positive("factor", factor), as_positive("scale", scale)
    model, inputs, targets = overflow_model(gain=1.0, seed=seed)
    rows = []
    for run in ("FP32", "fp16 autocast, no scaler", f"fp16 autocast, GradScaler({scale:g})"):
        model.zero_grad(set_to_none=True)
        with torch.autocast(device_type="cpu", dtype=torch.float16, enabled=run != "FP32"):
            loss = nn.functional.cross_entropy(model(inputs), targets) * factor
        if "GradScaler" in run:
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            scaler = torch.amp.GradScaler("cpu", init_scale=scale)
            scaler.scale(loss).backward()
            scaler.unscale_(optimizer)
        else:
            loss.backward()
        rows.append({"run": run} | grad_stats(model).total(model))
    return Table(rows, formats={"zero": "{:.1%}", "fp16 underflow": "{:.1%}"},
                 title=f"gradients of (loss × {factor:.3g}), all {sum(p.numel() for p in model.parameters())} entries")


class SeedFP32Loss(nn.Module):
    """The seed article's loss wrapper, reproduced to show its bug: it calls ``.float()`` on the target too.

    With class-index targets, ``cross_entropy`` then raises ``expected target dtype to be Long or Byte,
    but got Float``. (It also leaves autocast on, so a custom loss's autocast-listed ops would still run
    in float16.) Use :func:`fp32_loss` instead.
    """

    def __init__(self, base_criterion: Callable[..., torch.Tensor]) -> None:
        super().__init__()
        if not callable(base_criterion):
            raise TypeError(f"base_criterion must be callable (got {type(base_criterion).__name__})")
        self.base_criterion = base_criterion

    def forward(self, input: torch.Tensor, target: torch.Tensor) -> torch.Tensor:  # noqa: A002 - the seed's names
        return self.base_criterion(input.float(), target.float())


# --- Demo models -------------------------------------------------------------------------------------------

N_IN, N_HIDDEN, N_CLASSES = 8, 16, 4


def overflow_model(gain: float = 1e5, seed: int = 0) -> tuple[nn.Module, torch.Tensor, torch.Tensor]:
    """A small classifier whose activations exceed float16's 65504, by hand: a stand-in for a bf16-trained model.

    ``embed`` (Linear 8→16) → ``block`` (``up``: Linear 16→16 with weights × ``gain``, ``act``: ReLU)
    → ``norm`` (LayerNorm) → ``head`` (Linear 16→4). With the default ``gain`` the largest activation out
    of ``block.up`` is a few hundred thousand: fine in float32 and bfloat16 (range 3.4e38), inf in
    float16, and then ``norm`` turns the infs into NaNs (inf − inf). Nothing in bf16 training stops
    activations growing like this; running such a model under float16 autocast is a classic way to meet
    NaNs. The weights are scaled by hand here, so that the demo is a classifier (as the GradScaler runs
    of the lesson need) and small; :func:`train_in_bf16` trains a real model that overflows the same way.

    Returns ``(model, inputs, targets)``: 32 inputs and class-index targets (int64), seeded by ``seed``.
    """
    gain = as_positive("gain", gain)
    seed = as_int("seed", seed, minimum=0)
    generator = torch.Generator().manual_seed(seed)
    inputs = torch.randn(32, N_IN, generator=generator)
    targets = torch.randint(0, N_CLASSES, (32,), generator=generator)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = nn.Sequential(OrderedDict([
            ("embed", nn.Linear(N_IN, N_HIDDEN)),
            ("block", nn.Sequential(OrderedDict([("up", nn.Linear(N_HIDDEN, N_HIDDEN)), ("act", nn.ReLU())]))),
            ("norm", nn.LayerNorm(N_HIDDEN)),
            ("head", nn.Linear(N_HIDDEN, N_CLASSES)),
        ]))
    with torch.no_grad():
        model.block.up.weight.mul_(gain)
        model.block.up.bias.mul_(gain)
    return model, inputs, targets


# --- A model trained in bf16 -------------------------------------------------------------------------------

MAX_RENT_ROWS, MAX_RENT_HIDDEN = 1_000_000, 4096  # train_in_bf16's largest data set and hidden layer
RENT_FEATURES = ("area (m²)", "rooms", "distance to centre (km)", "age (years)")


@dataclass(frozen=True)
class BF16Training:
    """A regression model trained under bf16 autocast on unnormalised targets (see :func:`train_in_bf16`).

    Attributes:
        model: the trained ``hidden`` (Linear 4→``hidden``) → ``act`` (ReLU) → ``out`` (Linear →1), float32
            weights as autocast keeps them.
        inputs: the standardised features (n×4, float32), in the order of :data:`RENT_FEATURES`.
        targets: the monthly rents **in cents** (n×1, float32): about 4·10⁴ to 2.3·10⁵, not normalised.
        losses: the training loss (MSE, in cents²) of each step, computed before that step's update.
        peaks: after training, the largest |output| of each module under bf16 autocast (module name →
            value, ``"(model)"`` for the whole model), in execution order.
    """

    model: nn.Module
    inputs: torch.Tensor
    targets: torch.Tensor
    losses: tuple[float, ...]
    peaks: dict[str, float]

    def predict(self, dtype: torch.dtype | None = None, model: nn.Module | None = None) -> torch.Tensor:
        """Predictions (float32, n×1, no grad) of ``model`` (default: the trained one) on :attr:`inputs`.

        ``dtype`` is the autocast dtype (``torch.bfloat16`` or ``torch.float16``); None runs plain FP32.
        """
        if dtype not in (None, torch.bfloat16, torch.float16):
            raise ValueError(f"dtype must be None, torch.bfloat16 or torch.float16 (got {dtype!r})")
        if model is not None and not isinstance(model, nn.Module):
            raise TypeError(f"model must be a torch.nn.Module or None (got {type(model).__name__})")
        model = self.model if model is None else model
        with torch.no_grad(), torch.autocast(device_type="cpu", dtype=dtype or torch.bfloat16,
                                             enabled=dtype is not None):
            return model(self.inputs).float()

    def rmse(self, predictions: torch.Tensor) -> float:
        """Root-mean-square error of ``predictions`` against :attr:`targets`, in cents (inf or NaN if they are)."""
        if not isinstance(predictions, torch.Tensor) or predictions.shape != self.targets.shape:
            raise TypeError(f"predictions must be a tensor of shape {tuple(self.targets.shape)}")
        return float((predictions.float() - self.targets).pow(2).mean().sqrt())


def _rent_data(n: int, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """Standardised features (n×4) and monthly rents in cents (n×1) of made-up flats."""
    area = torch.empty(n).uniform_(30, 120, generator=generator)
    rooms = torch.randint(1, 6, (n,), generator=generator).float()
    distance = torch.empty(n).uniform_(0, 15, generator=generator)
    age = torch.empty(n).uniform_(0, 60, generator=generator)
    euros = 500 + 12 * area + 50 * rooms - 30 * distance - 3 * age + 10 * torch.relu(area - 90)
    raw = torch.stack([area, rooms, distance, age], dim=1)
    return (raw - raw.mean(0)) / raw.std(0), (euros * 100).unsqueeze(1)


def train_in_bf16(steps: int = 300, seed: int = 0, *, lr: float = 30.0, n: int = 256,
                  hidden: int = 32) -> BF16Training:
    """Train a small MLP under ``torch.autocast(device_type="cpu", dtype=torch.bfloat16)`` to predict rents in cents.

    The task is an ordinary regression with **unnormalised targets**, as prices, counts and sensor
    readings often are: ``n`` made-up flats, four standardised features (:data:`RENT_FEATURES`), and the
    monthly rent in cents (about 4·10⁴ to 2.3·10⁵) as the target. The model is ``hidden`` (Linear) →
    ``act`` (ReLU) → ``out`` (Linear), trained full-batch with MSE and Adam (``lr`` with a cosine decay
    to 0 over ``steps`` steps). Adam moves each weight by about ``lr`` per step whatever the gradient's
    size, so targets of 10⁵ need a large ``lr``. Nothing in bf16 training limits activations (bf16 has
    float32's range), so the trained model's output layer legitimately produces values past float16's
    65504: fine in bf16 and FP32, inf under float16 autocast.

    Deterministic: the data come from a local generator and the weights are initialised under
    ``torch.random.fork_rng`` with ``seed``, so the global RNG is left as it was. The loop runs on one
    CPU thread (the thread count is restored afterwards): its ops are tiny, and synchronising threads
    would cost more than it saves on a busy machine.

    Args:
        steps: optimizer steps (int >= 1).
        seed: seed of the data and the initial weights (int >= 0).
        lr: Adam's peak learning rate (> 0).
        n: number of training examples (int >= 2).
        hidden: width of the hidden layer (int >= 1).

    Returns:
        a :class:`BF16Training`: the model, inputs, targets, loss per step and max |output| per module.
    """
    steps = as_int("steps", steps, minimum=1)
    seed = as_int("seed", seed, minimum=0)
    lr = as_positive("lr", lr)
    n = as_int("n", n, minimum=2)
    hidden = as_int("hidden", hidden, minimum=1)
    for name, value, limit in (("steps", steps, MAX_SCALED_STEPS), ("n", n, MAX_RENT_ROWS),
                               ("hidden", hidden, MAX_RENT_HIDDEN)):
        if value > limit:
            raise ValueError(f"{name} must be at most {limit:,} (got {value:,}): this demo would not finish in "
                             "reasonable time")
    inputs, targets = _rent_data(n, torch.Generator().manual_seed(seed))
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = nn.Sequential(OrderedDict([
            ("hidden", nn.Linear(len(RENT_FEATURES), hidden)),
            ("act", nn.ReLU()),
            ("out", nn.Linear(hidden, 1)),
        ]))
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    schedule = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=steps)
    losses = []
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        for _ in range(steps):
            optimizer.zero_grad(set_to_none=True)
            with torch.autocast(device_type="cpu", dtype=torch.bfloat16):
                loss = nn.functional.mse_loss(model(inputs), targets)  # mse_loss runs in float32 under autocast
            loss.backward()
            optimizer.step()
            schedule.step()
            losses.append(loss.item())
        with torch.no_grad(), torch.autocast(device_type="cpu", dtype=torch.bfloat16):
            report = find_nonfinite(model, inputs)
    finally:
        torch.set_num_threads(threads)
    return BF16Training(model=model, inputs=inputs, targets=targets, losses=tuple(losses),
                        peaks={r.label: r.max_abs for r in report.records})


@dataclass(frozen=True)
class LargeActivations:
    """Statistics of large float16 activations (see :func:`large_activation_stats`)."""

    rows: tuple[dict[str, Any], ...]
    std: float
    n: int

    def table(self) -> Table:
        return Table(list(self.rows), title=f"{self.n}×4 float16 activations, standard deviation {self.std:g}",
                     formats={"value": lambda v: f"{v:.4g}" if isinstance(v, float) else str(v)})


def large_activation_stats(std: float = 1000.0, n: int = 256, seed: int = 0, device: str = "cpu") -> LargeActivations:
    """What sums, variances and BatchNorm do with float16 activations of standard deviation ``std``.

    Rows: a float16 ``sum`` of ``n`` values (overflows past 65504 though each value fits), their ``mean``
    (fine), a hand-written float16 variance ``((x - mean)**2).mean()`` (each square passes 65504 → inf),
    ``torch.var`` on the float16 tensor (the result itself passes 65504), and a ``BatchNorm1d`` run two ways:
    under float16 autocast (its buffers stay float32: running_var is finite) and converted with
    ``.half()`` (its running_var is float16 and becomes inf). All elementwise/reductions, cheap on CPU.
    """
    std = as_positive("std", std)
    n = as_int("n", n, minimum=2)
    seed = as_int("seed", seed, minimum=0)

    device = as_device("device", device).type
    generator = torch.Generator().manual_seed(seed)
    x32 = (torch.randn(n, 4, generator=generator) * std).to(device)
    x = x32.half()
    rows: list[dict[str, Any]] = []

    def add(what: str, value: torch.Tensor, note: str) -> None:
        rows.append({"computation": what, "dtype": _dtype_name(value.dtype),
                     "value": float(value.detach().float().max()), "note": note})

    add("x.abs().sum(0)", x.abs().sum(0), "a sum of many fp16 values passes 65504")
    add("x.abs().mean(0)", x.abs().mean(0), "the mean stays in range")
    add("((x - x.mean(0))**2).mean(0)", ((x - x.mean(0)) ** 2).mean(0), "hand-written variance: squares overflow")
    add("x.var(0)", x.var(0), "torch.var in fp16: the variance itself passes 65504")
    add("x.float().var(0)", x.float().var(0), "in FP32: the true variance")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        bn_amp = nn.BatchNorm1d(4).to(device)
        bn_half = copy.deepcopy(bn_amp).half()
    with torch.autocast(device_type=device, dtype=torch.float16):
        out = bn_amp(x)
    add("BatchNorm1d under fp16 autocast: output", out.abs(), "normalised: finite")
    add("… its running_var", bn_amp.running_var, "buffers stay FP32 under autocast (momentum 0.1)")
    bn_half(x)
    add("BatchNorm1d after .half(): running_var", bn_half.running_var, "model.half() makes the buffers fp16: inf")
    return LargeActivations(rows=tuple(rows), std=std, n=n)


# --- Loss-scale histories ----------------------------------------------------------------------------------

MAX_SCALED_STEPS = 10_000


@dataclass(frozen=True)
class ScaleRun:
    """A float16 training run with a real GradScaler (see :func:`scaled_training_run`).

    Attributes:
        scales: ``get_scale()`` before the first step, then after each step's ``update()`` (steps + 1 values).
        losses: each step's loss (float32; NaN or inf if the forward pass overflowed).
        stepped: whether ``optimizer.step()`` really ran (``register_step_post_hook``).
        params_changed: whether any parameter changed during the whole run.
    """

    scales: tuple[float, ...]
    losses: tuple[float, ...]
    stepped: tuple[bool, ...]
    params_changed: bool

    @property
    def n_stepped(self) -> int:
        return sum(self.stepped)


def scaled_training_run(model: nn.Module, inputs: torch.Tensor, targets: torch.Tensor, steps: int = 30, *,
                        init_scale: float = 2.0**16, lr: float = 0.01,
                        dtype: torch.dtype = torch.float16) -> ScaleRun:
    """Train a *copy* of ``model`` for ``steps`` SGD steps on one batch under autocast and a real GradScaler.

    The textbook loop (``zero_grad``, forward under ``torch.autocast(device_type, dtype)``,
    ``cross_entropy``, ``scaler.scale(loss).backward()``, ``scaler.step``, ``scaler.update``), with
    ``growth_interval=10`` so that growth shows in a short run. With ``dtype=torch.bfloat16`` the scaler
    is disabled (``enabled=False``: bf16 needs none) and its scale reads 1.0 throughout. The device is the
    one ``inputs`` is on.
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module (got {type(model).__name__})")
    if not isinstance(inputs, torch.Tensor) or not isinstance(targets, torch.Tensor):
        raise TypeError("inputs and targets must be tensors")
    if dtype not in (torch.float16, torch.bfloat16):
        raise ValueError(f"dtype must be torch.float16 or torch.bfloat16 (got {dtype!r})")
    if inputs.dim() < 1 or targets.dim() != 1 or len(targets) != len(inputs):
        rows = len(inputs) if inputs.dim() else "(inputs has no rows)"
        raise ValueError(f"targets must be class indices, one per row of inputs: a 1-D tensor of length {rows} "
                         f"(got shape {tuple(targets.shape)})")
    if targets.dtype != torch.int64:
        raise TypeError(f"targets must be int64 class indices, as cross_entropy takes them (got "
                        f"{_dtype_name(targets.dtype)}; use targets.long())")
    if targets.device != inputs.device:
        raise ValueError(f"inputs and targets must be on the same device (got {inputs.device} and {targets.device})")
    steps = as_int("steps", steps, minimum=1)
    if steps > MAX_SCALED_STEPS:
        raise ValueError(f"steps must be at most {MAX_SCALED_STEPS} (got {steps}): a longer demo run would not "
                         "finish in reasonable time")
    init_scale, lr = as_positive("init_scale", init_scale), as_positive("lr", lr)
    device_type = inputs.device.type
    model = copy.deepcopy(model)
    before = [p.detach().clone() for p in model.parameters()]
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    scaler = torch.amp.GradScaler(device_type, init_scale=init_scale, growth_interval=10,
                                  enabled=dtype == torch.float16)
    counter = StepCounter(optimizer)
    scales, losses, stepped = [scaler.get_scale()], [], []
    try:
        for step in range(steps):
            optimizer.zero_grad(set_to_none=True)
            with torch.autocast(device_type=device_type, dtype=dtype):
                logits = _call_model(model, (inputs,)) if step == 0 else model(inputs)
                if step == 0:
                    _check_logits(logits, targets)
                loss = nn.functional.cross_entropy(logits, targets)
            calls = counter.calls
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
            scales.append(scaler.get_scale())
            losses.append(loss.item())
            stepped.append(counter.calls > calls)
    finally:
        counter.handle.remove()
    changed = any(not torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))
    return ScaleRun(scales=tuple(float(s) for s in scales), losses=tuple(losses), stepped=tuple(stepped),
                    params_changed=changed)


# --- The symptom table -------------------------------------------------------------------------------------

SYMPTOMS: tuple[dict[str, str], ...] = (
    {"symptom": "loss is NaN from the first step; only under fp16, fine in bf16/fp32",
     "cause": "an activation passes 65504 (fp16's max) → inf, then NaN after a norm (inf − inf); e.g. a model "
              "trained in bf16 on unnormalised targets (rents in cents)",
     "fix": "find_nonfinite names the module; FP32Island around it, or stay in bf16; normalise large targets",
     "shown in": "§1 find the first inf · §4 bf16-trained model in fp16"},
    {"symptom": "forward finite, gradients NaN",
     "cause": "a backward op returns NaN (sqrt of a masked negative behind torch.where: 0 / NaN = NaN)",
     "fix": "detect_anomaly names the node (SqrtBackward0) and its forward line; make the masked branch safe",
     "shown in": "§2 detect_anomaly"},
    {"symptom": "many gradients exactly 0 in fp16",
     "cause": "gradients up to half of fp16's smallest subnormal (2^-25 ≈ 3e-8) round to 0 (underflow)",
     "fix": "grad_stats' fp16-underflow column; GradScaler (or bf16)",
     "shown in": "§2 gradient statistics"},
    {"symptom": "'mat1 and mat2 must have the same dtype' after autocast(enabled=False)",
     "cause": "an fp16 tensor from the layer before enters the FP32 region",
     "fix": "cast the inputs: .float() (FP32Island does both)",
     "shown in": "§3 FP32 islands"},
    {"symptom": "'expected target dtype to be Long' from an FP32 loss wrapper",
     "cause": ".float() on class-index targets (the seed's FP32Loss)",
     "fix": "cast only floating-point tensors: fp32_loss",
     "shown in": "§3 the loss wrapper"},
    {"symptom": "scale halves every step, weights never change",
     "cause": "loss-scale collapse: every step overflows → every step skipped",
     "fix": "diagnose_scale on get_scale() history; an inf in the forward pass: FP32Island or bf16",
     "shown in": "§4 loss-scale collapse"},
    {"symptom": "BatchNorm running_var is inf; a sum of activations is inf",
     "cause": "model.half() stores BN statistics in fp16; a sum of many large fp16 values passes 65504",
     "fix": "autocast (keeps BN buffers fp32) instead of .half(); mean instead of sum, or FP32 there",
     "shown in": "§5 BatchNorm and large activations"},
    {"symptom": "loss is inf/NaN and you do not know why",
     "cause": "the 16-bit forward pass, or the loss scale — bisect before guessing",
     "fix": "autocast(enabled=False), then GradScaler(enabled=False), one at a time: the NaN follows its cause",
     "shown in": "§6 bisect"},
    {"symptom": "a model.half() run stalls without any NaN",
     "cause": "fp16 weights: an update below half a unit in the last place of the weight (2^-11 for weights "
              "near 1) rounds away; Adam's eps=1e-8 is 0 in fp16",
     "fix": "FP32 master weights: autocast + GradScaler, never train a .half() model",
     "shown in": "§6 FP16 weights"},
    {"symptom": "NaN from an attention layer under fp16",
     "cause": "q·kᵀ scores pass 65504 before the softmax (inf − inf = NaN)",
     "fix": "scores and softmax in an FP32 island, F.scaled_dot_product_attention, or bf16",
     "shown in": "§6 attention logits"},
)


def symptom_table() -> Table:
    """:data:`SYMPTOMS` as a :class:`~ampcourse.tables.Table`."""
    return Table(list(SYMPTOMS), title="symptom → cause → fix")


def scale_history_png(histories: dict[str, Sequence[float]], title: str = "loss scale per step") -> Png:
    """A figure (PNG bytes) of one or more ``get_scale()`` histories on a log2 axis, one line per run."""
    from matplotlib.figure import Figure

    from .widgets.base import COLORS, figure_png

    if not isinstance(histories, dict) or not histories:
        raise TypeError("histories must be a non-empty dict: label -> sequence of scales")
    colors = [COLORS[c] for c in ("vermillion", "blue", "green", "orange", "purple")]
    fig = Figure(figsize=(7.5, 3.2))
    ax = fig.add_subplot()
    for i, (label, scales) in enumerate(histories.items()):
        values = [as_positive(f"histories[{label!r}]", s) for s in scales]
        ax.step(range(len(values)), [math.log2(v) for v in values], where="post", label=label,
                color=colors[i % len(colors)], linewidth=2)
    ax.set_xlabel("step")
    ax.set_ylabel("log2(scale)")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(loc="best", fontsize=8)
    fig.tight_layout()
    return figure_png(fig)
