"""Argument checks shared by the package: each raises ``TypeError``/``ValueError`` naming the argument."""

from __future__ import annotations

import math
import numbers
from typing import Any


class ModelCallFailed(ValueError, RuntimeError):
    """A model or function passed to the package failed when the package called it (e.g. inputs of the wrong shape:
    ``mat1 and mat2 shapes cannot be multiplied``). A ``ValueError`` whose message names the argument, and still a
    ``RuntimeError``, as torch's own error was, for code that catches that."""


def as_int(name: str, value: Any, *, minimum: int) -> int:
    """``value`` as an int ``>= minimum`` (bools are refused: ``True`` is not a count)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an int >= {minimum} (got {value!r})")
    if value < minimum:
        raise ValueError(f"{name} must be an int >= {minimum} (got {value!r})")
    return int(value)


def as_float(name: str, value: Any) -> float:
    """``value`` as a float (any real number; bools are refused)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a real number (got {value!r})")
    return float(value)


def as_positive(name: str, value: Any) -> float:
    """``value`` as a finite float ``> 0``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a real number > 0 (got {value!r})")
    if not 0 < float(value) < math.inf:
        raise ValueError(f"{name} must be > 0 and finite (got {value!r})")
    return float(value)


_DEVICE_NAMES = {"cuda": "CUDA", "mps": "MPS (Apple GPU)", "cpu": "CPU"}


def as_device(name: str, value: Any, *, available: bool = True):
    """``value`` (a ``torch.device`` or a str such as ``"cpu"``, ``"cuda:0"``) as a ``torch.device`` that
    this machine has: an unknown device, or one this torch build cannot use, is a clear ``ValueError``
    (e.g. "CUDA was requested but this torch has no CUDA; use device='cpu'") instead of torch's
    ``AssertionError: Torch not compiled with CUDA enabled`` from deep inside. ``available=False``
    checks the name only."""
    import torch

    if isinstance(value, bool) or not isinstance(value, (torch.device, str)):
        raise TypeError(f"{name} must be a torch.device or a str such as 'cpu' or 'cuda' (got {value!r})")
    try:
        device = torch.device(value)
    except (RuntimeError, ValueError) as err:
        raise ValueError(f"{name} must name a device: 'cpu', 'cuda', 'cuda:0' or 'mps' (got {value!r})") from err
    if device.type not in _DEVICE_NAMES:
        raise ValueError(f"{name}: the course runs on 'cpu', 'cuda' or 'mps', not {device.type!r} (got {value!r})")
    if not available:  # only the name is needed (e.g. a datasheet look-up for another machine's GPU)
        return device
    if device.type == "cuda":
        if not torch.backends.cuda.is_built():
            raise ValueError(f"CUDA was requested but this torch has no CUDA (a CPU build); use {name}='cpu'")
        if not torch.cuda.is_available():
            raise ValueError(f"CUDA was requested but no CUDA GPU is visible to this torch; use {name}='cpu'")
        if device.index is not None and device.index >= torch.cuda.device_count():
            raise ValueError(f"{name}={value!r}, but this machine has {torch.cuda.device_count()} CUDA device(s)")
    if device.type == "mps":
        mps = getattr(torch.backends, "mps", None)
        if mps is None or not mps.is_available():
            raise ValueError(f"MPS (Apple GPU) was requested but this torch cannot use it here; use {name}='cpu'")
    return device
