"""Lesson 02: real gradients meet FP16's range — underflow, overflow and the loss scale.

Three steps, one function each:

1. :func:`collect_gradients` trains a small real network in FP32 for a few steps and keeps every gradient
   backprop produced: the weight gradients (each parameter's ``.grad``) and the activation gradients (the
   gradient of the loss with respect to each layer's output).
2. :func:`cast_fate` (:func:`fp16_fate`, :func:`bf16_fate`) multiplies them by a loss scale ``S`` and
   counts what a cast to FP16 (or BF16) does to each one: flushed to zero, subnormal, normal, or overflow
   to inf.
3. :func:`safe_scale_window` works out, by formula, the powers of two ``S`` that keep the gradients inside
   FP16's normal range — the window the learner first finds by hand on the lesson's slider.

Conventions:

* **Values are float32 first.** Float64 inputs are rounded to float32 (as torch's own ``float64 -> float16``
  cast does); the scale is rounded to float32 too.
* **The scale is applied in float32**, ``float32(values) * float32(scale)``, then the product is cast. This
  is what ``torch.amp.GradScaler`` does: it multiplies the loss by its float32 ``scale`` tensor, so every
  gradient backprop produces is the FP32 gradient times ``S``. For a power-of-two ``S`` the product is
  exact (unless it leaves float32's own range), so the only rounding is the cast itself.
* **Rounding is round-to-nearest, ties-to-even.** So the boundaries are not quite the limits of the format
  (:func:`format_limits` lists both): in FP16 a value ``<= 2**-25`` (half the smallest subnormal) becomes 0,
  and a value ``>= 65520`` (65504 plus half a step) becomes inf; 65519.99 still rounds to 65504.

Example:
    >>> g = torch.tensor([0.0, 2.0**-30, 2.0**-20, 1e-3, 10.0])
    >>> counts = fp16_fate(g)
    >>> counts.zero, counts.flushed, counts.subnormal, counts.normal, counts.overflow
    (1, 1, 1, 2, 0)
    >>> fp16_fate(g, scale=2.0**13).overflow       # 10 * 8192 = 81920 > 65504
    1
"""

from __future__ import annotations

import copy
import functools
import math
import numbers
from dataclasses import dataclass, field
from typing import NamedTuple

import torch
from torch import nn

from .device import available_device_types, pick_device
from .validate import ModelCallFailed, as_device

__all__ = [
    "CATEGORIES",
    "FORMATS",
    "FateCounts",
    "FormatLimits",
    "GradientSample",
    "ResidualBlock",
    "ScaleWindow",
    "bf16_fate",
    "cast_fate",
    "collect_gradients",
    "default_model",
    "format_limits",
    "fp16_fate",
    "safe_scale_window",
]

FORMATS = {"fp16": torch.float16, "bf16": torch.bfloat16}
_ALIASES = {"float16": "fp16", "half": "fp16", "bfloat16": "bf16"}

CATEGORIES = ("zero", "flushed", "subnormal", "normal", "overflow")
"""What a cast can do to one value: already exactly 0 before the cast; flushed (nonzero, becomes 0);
subnormal (nonzero, below the smallest normal: fewer significant bits); normal; overflow (becomes inf)."""

# The default model and data (see collect_gradients).
INPUT_FEATURES = 32
NUM_CLASSES = 10
BATCH_SIZE = 256
WIDTH = 16  # the residual stream
HIDDEN = 64  # inside each residual branch
BLOCKS = 4
BRANCH_INIT = 1e-4  # each branch's last layer starts at 1e-4 x its default initialisation
LEARNING_RATE = 0.05
MOMENTUM = 0.9
MAX_STEPS = 100


# --------------------------------------------------------------------------------------------------------
# Formats and their rounding boundaries
# --------------------------------------------------------------------------------------------------------


def _format_name(fmt: object) -> str:
    """``"fp16"`` or ``"bf16"`` for any accepted spelling of ``fmt``."""
    if isinstance(fmt, torch.dtype):
        for name, dtype in FORMATS.items():
            if dtype == fmt:
                return name
    elif isinstance(fmt, str):
        name = _ALIASES.get(fmt.strip().lower(), fmt.strip().lower())
        if name in FORMATS:
            return name
    else:
        raise TypeError(f"fmt must be a str such as 'fp16' or 'bf16' (got {fmt!r})")
    raise ValueError(
        f"fmt must be one of {sorted(FORMATS)} (or {sorted(_ALIASES)}, or the torch dtype); got {fmt!r}"
    )


@dataclass(frozen=True)
class FormatLimits:
    """A format's limits, and the float32 boundaries where a cast's result changes kind.

    ``smallest_subnormal``, ``smallest_normal`` and ``max`` are the format's own numbers. The three
    thresholds are where round-to-nearest-even puts the boundaries, for a float32 magnitude ``|x|``:

    * ``|x| <= flush_threshold`` (half the smallest subnormal) becomes 0 — the tie goes to 0, which is even;
    * ``|x| >= normal_threshold`` (the smallest normal minus half a subnormal step) becomes a normal number;
    * ``|x| >= overflow_threshold`` (``max`` plus half a step at the top) becomes inf.

    Example:
        >>> fp16 = format_limits("fp16")
        >>> fp16.smallest_subnormal == 2.0**-24, fp16.smallest_normal == 2.0**-14, fp16.max
        (True, True, 65504.0)
        >>> fp16.flush_threshold == 2.0**-25, fp16.overflow_threshold
        (True, 65520.0)
    """

    fmt: str
    dtype: torch.dtype
    smallest_subnormal: float
    smallest_normal: float
    max: float
    flush_threshold: float
    normal_threshold: float
    overflow_threshold: float


def format_limits(fmt: str | torch.dtype = "fp16") -> FormatLimits:
    """The limits of ``"fp16"`` or ``"bf16"``, read from ``torch.finfo`` (see :class:`FormatLimits`)."""
    name = _format_name(fmt)
    info = torch.finfo(FORMATS[name])
    smallest_subnormal = info.tiny * info.eps  # torch.finfo has no field for it
    _, exponent = math.frexp(info.max)  # max = m * 2**exponent, 0.5 <= m < 1
    top_step = math.ldexp(info.eps, exponent - 1)  # the gap between max and the value below it
    return FormatLimits(
        fmt=name,
        dtype=FORMATS[name],
        smallest_subnormal=smallest_subnormal,
        smallest_normal=info.tiny,
        max=info.max,
        flush_threshold=smallest_subnormal / 2,
        normal_threshold=info.tiny - smallest_subnormal / 2,
        overflow_threshold=info.max + top_step / 2,
    )


# --------------------------------------------------------------------------------------------------------
# Collecting real gradients
# --------------------------------------------------------------------------------------------------------


MAX_WIDTH = 16_384  # a ResidualBlock of 2 × 16384² weights is already 2 GiB


class ResidualBlock(nn.Module):
    """``x + down(relu(up(x)))``, with ``down`` initialised near zero.

    Starting each residual branch at (almost) zero is a standard recipe for deep networks (Goyal et al. 2017
    zero-initialise the last BatchNorm of each block; Fixup and SkipInit set the branch to zero; GPT-2 scales
    it down): at first every block is close to the identity, so the signal and the gradient pass through
    the skip path unharmed and training starts fast. The price shows in the gradients: everything inside a
    branch is multiplied by the small ``down`` weights, so it is tiny — far below FP16's smallest normal.
    """

    def __init__(self, width: int, hidden: int, branch_init: float = BRANCH_INIT) -> None:
        width = _check_int(width, "width", 1, MAX_WIDTH)
        hidden = _check_int(hidden, "hidden", 1, MAX_WIDTH)
        if isinstance(branch_init, bool) or not isinstance(branch_init, numbers.Real) or not math.isfinite(branch_init):
            raise TypeError(f"branch_init must be a finite real number (got {branch_init!r})")
        super().__init__()
        self.up = nn.Linear(width, hidden)
        self.act = nn.ReLU()
        self.down = nn.Linear(hidden, width)
        with torch.no_grad():
            self.down.weight.mul_(branch_init)
            self.down.bias.zero_()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.down(self.act(self.up(x)))


def default_model(branch_init: float = BRANCH_INIT) -> nn.Module:
    """The lesson's classifier: 32 inputs, a 16-wide residual stream, 4 residual blocks, 10 classes.

    ``Linear(32, 16) -> 4 x ResidualBlock(16, hidden 64) -> ReLU -> Linear(16, 10)``: 9,210 parameters.
    Initialised from torch's global random generator (:func:`collect_gradients` seeds it). Each branch's
    last layer starts at ``branch_init`` times torch's default initialisation (1e-4 by default; pass 1.0
    for torch's default initialisation throughout).
    """
    if isinstance(branch_init, bool) or not isinstance(branch_init, numbers.Real):
        raise TypeError(f"branch_init must be a number (got {branch_init!r})")
    if not (math.isfinite(branch_init) and branch_init >= 0):
        raise ValueError(f"branch_init must be finite and >= 0 (got {branch_init!r})")
    return nn.Sequential(
        nn.Linear(INPUT_FEATURES, WIDTH),
        *[ResidualBlock(WIDTH, HIDDEN, float(branch_init)) for _ in range(BLOCKS)],
        nn.ReLU(),
        nn.Linear(WIDTH, NUM_CLASSES),
    )


def _make_data(n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``n`` points of 10 Gaussian clusters in 32 dimensions, and their class labels (deterministic)."""
    generator = torch.Generator().manual_seed(seed)
    centers = torch.randn(NUM_CLASSES, INPUT_FEATURES, generator=generator) * (6.0 / INPUT_FEATURES**0.5)
    labels = torch.randint(0, NUM_CLASSES, (n,), generator=generator)
    inputs = centers[labels] + torch.randn(n, INPUT_FEATURES, generator=generator) / INPUT_FEATURES**0.5
    return inputs, labels


@dataclass(frozen=True, eq=False)
class GradientSample:
    """The gradients of a few real training steps, as flat float32 CPU tensors.

    Attributes:
        weight_grads: every parameter's ``.grad``, step after step.
        activation_grads: the gradient of the loss with respect to the output of every module with
            parameters (each ``Linear`` ...), step after step.
        all: ``weight_grads`` then ``activation_grads``, concatenated.
        steps: the number of training steps (gradients of every step are kept).
        n_params: the number of parameters of the model.
        losses: the training loss at each step (it goes down: the model really learns).
        seed: the seed of the data, the initialisation and everything random in training.
        device: where the model was trained.
    """

    weight_grads: torch.Tensor = field(repr=False)
    activation_grads: torch.Tensor = field(repr=False)
    all: torch.Tensor = field(repr=False)
    steps: int
    n_params: int
    losses: tuple[float, ...]
    seed: int
    device: str

    @property
    def n_values(self) -> int:
        """How many gradient values in all (``len(self.all)``)."""
        return self.all.numel()


def _check_int(value: object, name: str, low: int, high: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an int (got {value!r})")
    if value < low or (high is not None and value > high):
        bounds = f">= {low}" if high is None else f"from {low} to {high}"
        raise ValueError(f"{name} must be {bounds} (got {value})")
    return int(value)


def _check_device(device: object) -> torch.device:
    if device is None:
        return pick_device()
    if isinstance(device, bool) or not isinstance(device, (str, torch.device)):
        raise TypeError(f"device must be None, a str such as 'cpu', or a torch.device (got {device!r})")
    device = as_device("device", device)  # "CUDA was requested but this torch has no CUDA; use device='cpu'"
    if device.type not in available_device_types():
        raise ValueError(f"device {str(device)!r} is not available here; available: {available_device_types()}")
    return device


def collect_gradients(
    model: nn.Module | None = None,
    *,
    steps: int = 5,
    seed: int = 0,
    device: str | torch.device | None = None,
) -> GradientSample:
    """Train a small classifier in FP32 for ``steps`` steps; return every gradient it produced.

    The data are 10 Gaussian clusters in 32 dimensions, a fresh batch of 256 points per step; the loss is
    softmax cross-entropy (averaged over the batch); the optimizer is SGD with momentum (lr 0.05, momentum
    0.9). The default model (:func:`default_model`) is a residual network whose branches start near zero —
    a common initialisation that leaves many gradients below FP16's range, as Micikevicius et al. (2018)
    found for a good part of the activation gradients of the SSD detector. Pass your own ``model`` to
    measure it instead: it must map a ``(batch, 32)`` float tensor to ``(batch, 10)`` logits. It is copied,
    so your model is not trained.

    Activation gradients are caught by a forward hook on every module that has parameters of its own,
    which registers a tensor hook on that module's output: backprop then hands over the gradient of the loss
    with respect to that output.

    Everything is seeded with ``seed`` (data, initialisation, any dropout), so the same seed on the same
    device gives the same gradients, bit for bit. ``device`` defaults to :func:`ampcourse.device.pick_device`;
    the gradients always come back on the CPU.

    Example:
        >>> sample = collect_gradients(steps=2)
        >>> sample.n_params, sample.steps, sample.weight_grads.numel() == 2 * sample.n_params
        (9210, 2, True)
        >>> sample.losses[1] < sample.losses[0]
        True
    """
    if model is not None and not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module or None (got {type(model).__name__})")
    steps = _check_int(steps, "steps", 1, MAX_STEPS)
    seed = _check_int(seed, "seed", 0)
    device = _check_device(device)

    inputs, labels = _make_data(steps * BATCH_SIZE, seed)
    inputs, labels = inputs.to(device), labels.to(device)
    fork_devices = [device] if device.type == "cuda" else []
    with torch.random.fork_rng(devices=fork_devices):  # leave the caller's random state alone
        torch.manual_seed(seed)
        model = default_model() if model is None else copy.deepcopy(model)
        model = model.to(device=device, dtype=torch.float32).train()
        parameters = [p for p in model.parameters() if p.requires_grad]
        if not parameters:
            raise ValueError("model has no trainable parameters: there would be no gradients to collect")
        momenta = [torch.zeros_like(p) for p in parameters]

        activation_grads: list[torch.Tensor] = []

        def keep(grad: torch.Tensor) -> None:
            activation_grads.append(grad.detach().flatten().float())

        def on_forward(module: nn.Module, args: object, output: object) -> None:
            if isinstance(output, torch.Tensor) and output.requires_grad:
                output.register_hook(keep)

        layers = [m for m in model.modules() if any(True for _ in m.parameters(recurse=False))]
        handles = [layer.register_forward_hook(on_forward) for layer in layers]
        weight_grads: list[torch.Tensor] = []
        losses = []
        try:
            for step in range(steps):
                batch = slice(step * BATCH_SIZE, (step + 1) * BATCH_SIZE)
                for p in parameters:
                    p.grad = None
                try:
                    logits = model(inputs[batch])
                except (RuntimeError, TypeError, IndexError) as error:
                    reason = (str(error).strip().splitlines() or [type(error).__name__])[0]
                    raise ModelCallFailed(
                        f"model must map a ({BATCH_SIZE}, {INPUT_FEATURES}) float32 input to ({BATCH_SIZE}, "
                        f"{NUM_CLASSES}) logits; calling it on such an input failed: {reason}"
                    ) from error
                if not isinstance(logits, torch.Tensor) or logits.shape != (BATCH_SIZE, NUM_CLASSES):
                    shape = tuple(logits.shape) if isinstance(logits, torch.Tensor) else type(logits).__name__
                    raise ValueError(
                        f"model must map a ({BATCH_SIZE}, {INPUT_FEATURES}) input to "
                        f"({BATCH_SIZE}, {NUM_CLASSES}) logits (got {shape})"
                    )
                loss = nn.functional.cross_entropy(logits, labels[batch])
                loss.backward()
                weight_grads += [p.grad.detach().flatten().float() for p in parameters if p.grad is not None]
                # SGD with momentum, as torch.optim.SGD does it; written out because the first
                # use of torch.optim imports torch._dynamo, which alone takes ~1.5 s.
                with torch.no_grad():
                    for p, velocity in zip(parameters, momenta, strict=True):
                        if p.grad is not None:
                            velocity.mul_(MOMENTUM).add_(p.grad)
                            p.add_(velocity, alpha=-LEARNING_RATE)
                losses.append(loss.item())
        finally:
            for handle in handles:
                handle.remove()

    weights = torch.cat(weight_grads).cpu()
    activations = torch.cat(activation_grads).cpu() if activation_grads else torch.zeros(0)
    return GradientSample(
        weight_grads=weights,
        activation_grads=activations,
        all=torch.cat([weights, activations]),
        steps=steps,
        n_params=sum(p.numel() for p in model.parameters()),
        losses=tuple(losses),
        seed=seed,
        device=str(device),
    )


# --------------------------------------------------------------------------------------------------------
# What the cast does
# --------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class FateCounts:
    """How many of the values a cast left exactly zero, flushed, subnormal, normal, or sent to inf.

    The five counts cover every value once (see :data:`CATEGORIES`); ``fractions`` divides them by
    ``total``, the number of values, exact zeros included.
    """

    fmt: str
    scale: float  # the float32 scale the values were multiplied by
    zero: int
    flushed: int
    subnormal: int
    normal: int
    overflow: int

    @property
    def total(self) -> int:
        return self.zero + self.flushed + self.subnormal + self.normal + self.overflow

    @property
    def nonzero(self) -> int:
        """The values that were not exactly 0 before the cast."""
        return self.total - self.zero

    @property
    def counts(self) -> dict[str, int]:
        """``{category: count}`` in the order of :data:`CATEGORIES`."""
        return {name: getattr(self, name) for name in CATEGORIES}

    @property
    def fractions(self) -> dict[str, float]:
        """``{category: count / total}``."""
        return {name: count / self.total for name, count in self.counts.items()}


def _magnitudes(values: object, name: str = "values") -> torch.Tensor:
    """``|values|`` as a flat float32 tensor, after checking ``values`` is a finite, non-empty float tensor."""
    if not isinstance(values, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor (got {type(values).__name__})")
    if not values.is_floating_point():
        raise TypeError(f"{name} must be a floating-point tensor (got dtype {values.dtype})")
    if values.numel() == 0:
        raise ValueError(f"{name} is empty")
    magnitudes = values.detach().flatten().to(torch.float32).abs()
    if not torch.isfinite(magnitudes.max()):  # max is inf or nan if any value is
        raise ValueError(f"{name} must be finite (it holds inf or nan)")
    return magnitudes


def _check_scale(scale: object) -> torch.Tensor:
    """``scale`` as a float32 scalar tensor, after checking it is a positive finite number in float32."""
    if isinstance(scale, bool) or not isinstance(scale, numbers.Real):
        raise TypeError(f"scale must be a number (got {scale!r})")
    scale32 = torch.tensor(float(scale), dtype=torch.float32)
    if not (math.isfinite(scale) and scale > 0 and torch.isfinite(scale32) and scale32 > 0):
        raise ValueError(f"scale must be a positive finite number, representable in float32 (got {scale!r})")
    return scale32


def cast_fate(values: torch.Tensor, scale: float = 1.0, fmt: str | torch.dtype = "fp16") -> FateCounts:
    """Count what casting ``values * scale`` to ``fmt`` (``"fp16"`` or ``"bf16"``) does to each value.

    The product is computed in float32, ``float32(values) * float32(scale)``, as ``GradScaler`` does, then
    cast with torch's own cast, and each result is sorted into one of :data:`CATEGORIES` by its bit
    pattern. So the counts agree exactly with ``(values.float() * scale).to(torch.float16)`` done by hand.

    Raises ``TypeError`` for a non-tensor or non-float ``values`` or a non-number ``scale``, and
    ``ValueError`` for empty or non-finite ``values``, a ``scale`` that is not positive and finite, or an
    unknown ``fmt``.

    Example:
        >>> tiny = torch.tensor([2.0**-25, 2.0**-24, 2.0**-14, 65504.0, 65519.99, 65520.0])
        >>> c = cast_fate(tiny)
        >>> c.flushed, c.subnormal, c.normal, c.overflow     # 2**-25 ties to 0; 65520 rounds to inf
        (1, 1, 3, 1)
        >>> cast_fate(tiny, fmt="bf16").counts["normal"]     # BF16 has FP32's range
        6
    """
    magnitudes = _magnitudes(values)
    scale32 = _check_scale(scale)
    name = _format_name(fmt)
    dtype = FORMATS[name]
    # The cast, then its bit pattern read as an integer. The sign bit is 0 (the magnitudes are >= 0), and
    # the other 15 bits are the exponent field then the mantissa, so the integers sort like the values:
    # 0 is zero, below the pattern of the smallest normal is subnormal, the all-ones exponent is inf.
    bits = (magnitudes * scale32.to(magnitudes.device)).to(dtype).view(torch.int16)
    smallest_normal_bits, inf_bits = _bit_patterns(dtype)
    total = magnitudes.numel()
    zero_before = int((magnitudes == 0).sum())
    zero_after = int((bits == 0).sum())
    below_normal = int((bits < smallest_normal_bits).sum())
    overflow = int((bits >= inf_bits).sum())  # no nan: finite values times a finite scale
    return FateCounts(
        fmt=name,
        scale=scale32.item(),
        zero=zero_before,
        flushed=zero_after - zero_before,
        subnormal=below_normal - zero_after,
        normal=total - below_normal - overflow,
        overflow=overflow,
    )


@functools.cache
def _bit_patterns(dtype: torch.dtype) -> tuple[int, int]:
    """The bit patterns of the smallest normal and of +inf in a 16-bit format, as int16 values."""
    values = torch.tensor([torch.finfo(dtype).tiny, math.inf], dtype=dtype)
    normal, inf = values.view(torch.int16).tolist()
    return normal, inf


def fp16_fate(values: torch.Tensor, scale: float = 1.0) -> FateCounts:
    """:func:`cast_fate` for FP16 (``torch.float16``).

    Example:
        >>> fp16_fate(torch.tensor([1e-8, 1e-6, 1.0])).fractions["flushed"]
        0.3333333333333333
    """
    return cast_fate(values, scale, "fp16")


def bf16_fate(values: torch.Tensor, scale: float = 1.0) -> FateCounts:
    """:func:`cast_fate` for BF16 (``torch.bfloat16``): FP32's exponent range, so hardly anything flushes.

    Example:
        >>> bf16_fate(torch.tensor([1e-8, 1e-6, 1.0])).fractions["flushed"]
        0.0
    """
    return cast_fate(values, scale, "bf16")


# --------------------------------------------------------------------------------------------------------
# The safe window of loss scales
# --------------------------------------------------------------------------------------------------------


class ScaleWindow(NamedTuple):
    """The powers of two ``S = 2**k`` with ``min_power <= k <= max_power`` (see :func:`safe_scale_window`)."""

    min_power: int
    max_power: int

    @property
    def empty(self) -> bool:
        """True when no power of two does both jobs: the values span more than the format can hold."""
        return self.min_power > self.max_power


def _largest_power(value: float, limit: float) -> int:
    """The largest integer ``k`` with ``value * 2**k <= limit`` (exact: powers of two scale exactly)."""
    k = math.floor(math.log2(limit) - math.log2(value))
    while math.ldexp(value, k + 1) <= limit:
        k += 1
    while math.ldexp(value, k) > limit:
        k -= 1
    return k


def _smallest_power(value: float, limit: float) -> int:
    """The smallest integer ``k`` with ``value * 2**k >= limit``."""
    k = math.ceil(math.log2(limit) - math.log2(value))
    while math.ldexp(value, k - 1) >= limit:
        k -= 1
    while math.ldexp(value, k) < limit:
        k += 1
    return k


def safe_scale_window(
    values: torch.Tensor, fmt: str | torch.dtype = "fp16", *, quantile: float = 0.01,
    lost: str = "below_normal",
) -> ScaleWindow:
    """The loss scales ``S = 2**k`` that neither overflow nor leave more than ``quantile`` below normal.

    ``lost`` says what counts as lost at the low end: ``"below_normal"`` (the default: flushed to 0 *or*
    subnormal, i.e. kept with fewer significant bits) or ``"flushed"`` (only values that become 0; a
    subnormal keeps its value roughly, so it counts as kept). With ``"flushed"``, ``min_power`` is the
    smallest ``k`` with ``q * 2**k > flush_threshold`` (half the smallest subnormal, ``2**-25`` for FP16).

    With ``m = max|values|`` and ``q`` the ``quantile``-quantile of the nonzero ``|values|``:

    * ``max_power`` is the largest integer ``k`` with ``m * 2**k <= max`` (65504 for FP16): scaled by any
      ``S <= 2**max_power``, no value overflows. By formula, ``floor(log2(65504 / m))``.
    * ``min_power`` is the smallest integer ``k`` with ``q * 2**k >= smallest normal`` (``2**-14`` for
      FP16): scaled by any ``S >= 2**min_power``, at most a fraction ``quantile`` of the nonzero values stay
      below the smallest normal (flushed to 0 or subnormal). By formula, ``ceil(log2(2**-14 / q))``.

    ``q`` is an order statistic, not an interpolation: with ``n`` nonzero values sorted in increasing order,
    it is the ``(floor(quantile * n) + 1)``-th, so exactly at most ``floor(quantile * n)`` values lie below
    it. ``quantile=0`` makes ``q`` the smallest nonzero value. The powers may be negative or above 40; the
    window is empty (``min_power > max_power``) when the values span more than the format's normal range.

    The conditions use the format's limits (65504, ``2**-14``), not the rounding boundaries (65520,
    ``2**-14 - 2**-25``): a little conservative, and simple to do by hand. Only the gradients are checked:
    in real training an overflow can also happen in an intermediate result of the backward pass.

    Example:
        >>> safe_scale_window(torch.tensor([2.0**-30, 1.0]), quantile=0.0)     # 2**-30 * 2**16 = 2**-14
        ScaleWindow(min_power=16, max_power=15)
        >>> safe_scale_window(torch.tensor([2.0**-20, 0.25]), quantile=0.0)
        ScaleWindow(min_power=6, max_power=17)
    """
    magnitudes = _magnitudes(values)
    if isinstance(quantile, bool) or not isinstance(quantile, numbers.Real):
        raise TypeError(f"quantile must be a number (got {quantile!r})")
    if not 0 <= quantile < 1:
        raise ValueError(f"quantile must be in [0, 1) (got {quantile!r})")
    if lost not in ("below_normal", "flushed"):
        raise ValueError(f"lost must be 'below_normal' or 'flushed' (got {lost!r})")
    limits = format_limits(fmt)
    nonzero = magnitudes[magnitudes > 0]
    if nonzero.numel() == 0:
        raise ValueError("values are all zero: every scale keeps them zero, there is no window to find")
    rank = math.floor(quantile * nonzero.numel()) + 1  # 1-based, as torch.kthvalue counts
    q = nonzero.kthvalue(rank).values.item()
    if lost == "flushed":
        min_power = _smallest_power(q, limits.flush_threshold)
        if math.ldexp(q, min_power) == limits.flush_threshold:  # exactly half a subnormal: the tie goes to 0
            min_power += 1
    else:
        min_power = _smallest_power(q, limits.smallest_normal)
    return ScaleWindow(
        min_power=min_power,
        max_power=_largest_power(nonzero.max().item(), limits.max),
    )
