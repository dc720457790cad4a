"""A step-by-step simulator of PyTorch's dynamic loss scaling (``torch.amp.GradScaler``).

``GradScaler`` keeps two numbers: the *scale* the loss is multiplied by, and a *growth tracker*
counting consecutive steps whose gradients were all finite.  At the end of every iteration
``GradScaler.update()`` calls ``torch._amp_update_scale_``; on CPU that is
``_amp_update_scale_cpu_kernel`` in PyTorch's ``aten/src/ATen/native/cpu/AmpGradScalerKernels.cpp``
(the CUDA kernel, in ``aten/src/ATen/native/cuda/AmpKernels.cu``, has the same logic).  Per step
it does::

    if found_inf:                      # this step's optimizer.step() was skipped
        scale = to_float32(scale * backoff_factor)
        tracker = 0
    else:
        tracker += 1
        if tracker == growth_interval:
            grown = to_float32(scale * growth_factor)
            if isfinite(grown):        # never grow past the float32 range to inf
                scale = grown
            tracker = 0

``scale`` lives in a float32 tensor and ``tracker`` in an int32 tensor, but the factors are C++
``double`` values, so each product is computed in float64 and then rounded to float32.

Python floats (float64) alone would not give torch's numbers: with a factor such as 1.7 or 0.3,
or an init_scale such as 0.1, the float64 scale differs from torch's from its first change; and a
float64 scale keeps growing past float32's maximum (about 3.4e38), where torch's stops, or shrinks
below float32's smallest subnormal (about 1.4e-45), where torch's becomes 0.  Float32 arithmetic
is not right either: ``float32(3.0) * float32(0.3)`` rounds to 0.90000004, but the kernel's
float64 product ``3.0 * 0.3`` rounds to 0.89999998.  :func:`simulate_grad_scaler` multiplies in
float64 and rounds to float32, like the kernel, and so matches torch bit for bit.

:func:`overflow_pattern` makes reproducible ``found_inf`` sequences (random overflows at a given
rate, periodic bursts of overflows) to feed the simulator from the lesson's sliders.
"""

import math
import numbers
import struct
from dataclasses import dataclass, field

import numpy as np
from numpy.typing import ArrayLike

from .validate import as_float, as_int

__all__ = ["ScalerTrace", "overflow_pattern", "simulate_grad_scaler"]

_FLOAT32 = struct.Struct("f")


@dataclass(frozen=True)
class ScalerTrace:
    """What ``torch.amp.GradScaler`` does over a run, step by step (see :func:`simulate_grad_scaler`).

    The scales are float32 values held as Python floats, i.e. exactly what
    ``GradScaler.get_scale()`` returns.

    Attributes:
        init_scale, growth_factor, backoff_factor, growth_interval: the scaler's settings.
        scales: the scale in effect at each step (the loss is multiplied by it), before that
            step's update.
        skipped: for each step, whether ``scaler.step(optimizer)`` skipped ``optimizer.step()``.
        growth_tracker: the growth tracker after each step's update.
        final_scale: the scale after the last step's update, i.e. the one the next step would use.
    """

    init_scale: float
    growth_factor: float
    backoff_factor: float
    growth_interval: int
    scales: tuple[float, ...] = field(repr=False)
    skipped: tuple[bool, ...] = field(repr=False)
    growth_tracker: tuple[int, ...] = field(repr=False)
    final_scale: float

    @property
    def final_growth_tracker(self) -> int:
        """The growth tracker after the last step (0 if there were no steps)."""
        return self.growth_tracker[-1] if self.growth_tracker else 0

    @property
    def n_skipped(self) -> int:
        """How many optimizer steps were skipped."""
        return sum(self.skipped)

    def state_dict(self) -> dict[str, float | int]:
        """What ``GradScaler.state_dict()`` returns after the last step.

        Like torch, a scaler that never ran a step reports ``init_scale`` as given, not yet
        rounded to float32.

        Example:
            >>> state = simulate_grad_scaler([False, True], init_scale=8.0).state_dict()
            >>> state["scale"], state["_growth_tracker"]
            (4.0, 0)
        """
        return {
            "scale": self.final_scale if self.scales else self.init_scale,
            "growth_factor": self.growth_factor,
            "backoff_factor": self.backoff_factor,
            "growth_interval": self.growth_interval,
            "_growth_tracker": self.final_growth_tracker,
        }


def simulate_grad_scaler(
    found_inf: ArrayLike,
    *,
    init_scale: float = 2.0**16,
    growth_factor: float = 2.0,
    backoff_factor: float = 0.5,
    growth_interval: int = 2000,
    overflow_above: float | None = None,
) -> ScalerTrace:
    """Replay ``torch.amp.GradScaler``'s scale updates for a given pattern of overflowing steps.

    The result equals, bit for bit, what a real ``GradScaler(init_scale=..., growth_factor=...,
    backoff_factor=..., growth_interval=...)`` does when step ``i``'s gradients contain an inf or
    NaN exactly when ``found_inf[i]`` is true (see the module docstring for the update rule).

    Args:
        found_inf: one entry per step, true where that step's gradients were not finite: a 1-D
            sequence, NumPy array or CPU tensor of bools (or of the ints 0 and 1).
        init_scale: the first scale; must be > 0 and finite once rounded to float32.
        growth_factor: multiplies the scale after ``growth_interval`` clean steps in a row; > 1.
        backoff_factor: multiplies the scale after a step with an overflow; in (0, 1).
        growth_interval: how many clean steps in a row make the scale grow; an int >= 1.
        overflow_above: optional ceiling: a step *also* overflows when its scale is above this value.
            It models the feedback of real training — gradients with ``max|g|`` overflow FP16 once
            ``S > 65504 / max|g|`` — so that a scale that grows too far is pushed back, as in a real run.
            ``skipped`` then reports both kinds of overflow.

    Returns:
        A :class:`ScalerTrace`.

    Example:
        >>> trace = simulate_grad_scaler([False, False, True, False], init_scale=4.0, growth_interval=2)
        >>> trace.scales, trace.skipped, trace.growth_tracker, trace.final_scale
        ((4.0, 4.0, 8.0, 4.0), (False, False, True, False), (1, 0, 0, 1), 4.0)
    """
    # The kernel takes the factors as C++ doubles; converting them to float also stops a NumPy
    # float32 factor from turning the products below into float32 arithmetic.
    init_scale, growth_factor, backoff_factor, growth_interval = _checked_scaler_args(
        init_scale, growth_factor, backoff_factor, growth_interval
    )
    overflows = _as_step_flags(found_inf)
    if overflow_above is not None:
        if isinstance(overflow_above, bool) or not isinstance(overflow_above, numbers.Real) or not (
                0 < overflow_above < math.inf):
            raise ValueError(f"overflow_above must be a positive finite number or None (got {overflow_above!r})")

    scale = _round_to_float32(init_scale)
    tracker = 0
    scales, trackers, skipped = [], [], []
    for overflow in overflows:
        scales.append(scale)
        if overflow_above is not None and scale > overflow_above:
            overflow = True
        skipped.append(overflow)
        if overflow:
            scale = _round_to_float32(scale * backoff_factor)
            tracker = 0
        else:
            tracker += 1
            if tracker == growth_interval:
                grown = _round_to_float32(scale * growth_factor)
                if math.isfinite(grown):
                    scale = grown
                tracker = 0
        trackers.append(tracker)

    return ScalerTrace(
        init_scale=init_scale,
        growth_factor=growth_factor,
        backoff_factor=backoff_factor,
        growth_interval=growth_interval,
        scales=tuple(scales),
        skipped=tuple(skipped),
        growth_tracker=tuple(trackers),
        final_scale=scale,
    )


MAX_STEPS = 10_000_000  # overflow_pattern's longest pattern (a tuple of bools: ~80 MB)


def overflow_pattern(
    n_steps: int,
    *,
    rate: float = 0.0,
    burst_every: int | None = None,
    burst_len: int = 1,
    seed: int = 0,
) -> tuple[bool, ...]:
    """A reproducible ``found_inf`` sequence for :func:`simulate_grad_scaler`.

    Each step overflows independently with probability ``rate`` (drawn from
    ``numpy.random.default_rng(seed)``, so the same arguments always give the same pattern).
    With ``burst_every``, every period of ``burst_every`` steps also ends with ``burst_len``
    overflowing steps in a row: steps ``burst_every - burst_len`` to ``burst_every - 1``, and so on.

    Args:
        n_steps: length of the pattern; an int >= 0.
        rate: probability that a step overflows at random; in [0, 1].
        burst_every: period of the bursts, an int >= 1, or None for no bursts.
        burst_len: overflowing steps per burst; an int in [1, burst_every] (unused without bursts).
        seed: seed of the random overflows; an int >= 0.

    Example:
        >>> overflow_pattern(8, burst_every=4, burst_len=2)
        (False, False, True, True, False, False, True, True)
        >>> sum(overflow_pattern(1000, rate=0.1))
        89
    """
    n_steps = as_int("n_steps", n_steps, minimum=0)
    if n_steps > MAX_STEPS:
        raise ValueError(f"n_steps must be at most {MAX_STEPS:,} (a simulation, not a training run; got {n_steps:,})")
    if not 0 <= as_float("rate", rate) <= 1:
        raise ValueError(f"rate must be in [0, 1] (got {rate!r})")
    burst_len = as_int("burst_len", burst_len, minimum=1)
    seed = as_int("seed", seed, minimum=0)

    overflows = np.random.default_rng(seed).random(n_steps) < rate
    if burst_every is not None:
        burst_every = as_int("burst_every", burst_every, minimum=1)
        if burst_len > burst_every:
            raise ValueError(
                f"burst_len must be <= burst_every (got burst_len={burst_len}, burst_every={burst_every})"
            )
        overflows |= np.arange(n_steps) % burst_every >= burst_every - burst_len
    return tuple(overflows.tolist())


def _round_to_float32(x: float) -> float:
    """Round a float64 to float32 as C++'s ``static_cast<float>`` does: to nearest, inf beyond range."""
    try:
        return _FLOAT32.unpack(_FLOAT32.pack(x))[0]
    except OverflowError:  # struct refuses what the cast would round to inf
        return math.inf


def _as_step_flags(found_inf: ArrayLike) -> list[bool]:
    flags = np.asarray(found_inf)
    if flags.ndim != 1:
        raise ValueError(f"found_inf must be 1-D, one entry per step (got {flags.ndim}-D)")
    if flags.size == 0:
        return []
    if flags.dtype.kind not in "biu":
        raise TypeError(f"found_inf must hold bools or the ints 0 and 1 (got dtype {flags.dtype})")
    if flags.dtype.kind != "b" and not np.isin(flags, (0, 1)).all():
        raise ValueError("found_inf must hold bools or the ints 0 and 1 (got other ints)")
    return flags.astype(bool).tolist()


def _checked_scaler_args(
    init_scale, growth_factor, backoff_factor, growth_interval
) -> tuple[float, float, float, int]:
    init_scale = as_float("init_scale", init_scale)
    if not 0 < _round_to_float32(init_scale) < math.inf:
        raise ValueError(
            f"init_scale must be > 0 and finite in float32, i.e. in about [1.4e-45, 3.4e38] "
            f"(got {init_scale!r})"
        )
    growth_factor = as_float("growth_factor", growth_factor)
    if not 1 < growth_factor < math.inf:
        raise ValueError(f"growth_factor must be > 1 and finite (got {growth_factor!r})")
    backoff_factor = as_float("backoff_factor", backoff_factor)
    if not 0 < backoff_factor < 1:
        raise ValueError(f"backoff_factor must be in (0, 1) (got {backoff_factor!r})")
    growth_interval = as_int("growth_interval", growth_interval, minimum=1)
    return init_scale, growth_factor, backoff_factor, growth_interval



