"""Shared names of the lesson-06 benchmarks: the precision modes, the error a benchmarked function
becomes, the device check, and the unit formatting that the notebooks' nbval sanitizers recognise."""

from __future__ import annotations

import math
import numbers
from typing import Any

import torch

MODES = ("fp32", "tf32", "fp16", "bf16")
_AUTOCAST_DTYPE = {"fp16": torch.float16, "bf16": torch.bfloat16}
_DTYPE_MODE = {torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16"}


class BenchmarkError(RuntimeError):
    """The function being benchmarked raised; the message says which call and what it raised."""


# --- formatting (units the notebooks' nbval sanitizers recognise) ----------------------------------------

def _non_negative(name: str, value: Any) -> float:
    """A real number >= 0 (NaN and inf allowed through: they print as such)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a number >= 0 (got {value!r})")
    value = float(value)
    if value < 0:
        raise ValueError(f"{name} must be >= 0 (got {value!r})")
    return value


def format_time(seconds: float) -> str:
    """``0.0123`` → ``'12.3 ms'`` (µs, ms or s, three significant digits)."""
    seconds = _non_negative("seconds", seconds)
    seconds = float(f"{seconds:.3g}")  # round first: 999.6 µs reads "1 ms", never "1e+03 µs"
    if seconds < 1e-3:
        return f"{seconds * 1e6:.3g} µs"
    if seconds < 1:
        return f"{seconds * 1e3:.3g} ms"
    return f"{seconds:.3g} s" if seconds < 1000 else f"{seconds:.0f} s"


def format_flops(flops_per_second: float) -> str:
    """``1.5e12`` → ``'1.5 TFLOP/s'``."""
    value = _non_negative("flops_per_second", flops_per_second)
    value = float(f"{value:.3g}")  # round first: 999.6 GFLOP/s reads "1 TFLOP/s", never "1e+03 GFLOP/s"
    for unit, size in (("P", 1e15), ("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if value >= size:
            return f"{value / size:.3g} {unit}FLOP/s"
    return f"{value:.3g} FLOP/s"


def format_bytes(n: int | None) -> str:
    """``1536`` → ``'1.5 KiB'``; ``None`` → ``'—'``."""
    if n is None:
        return "—"
    if isinstance(n, bool) or not isinstance(n, numbers.Real):
        raise TypeError(f"n must be a number of bytes (an int) or None (got {n!r})")
    if not math.isfinite(n):
        raise ValueError(f"n must be a finite number of bytes (got {n!r})")
    n = int(n) if float(n).is_integer() else float(n)
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(n) >= size:
            return f"{n / size:.4g} {unit}"
    return f"{n} B" if isinstance(n, int) else f"{n:.4g} B"


def _as_device(device: Any, name: str = "device", available: bool = True) -> torch.device:
    from ..validate import as_device

    return as_device(name, device, available=available)
