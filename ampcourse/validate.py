"""Argument checks shared by the package: each raises ``TypeError``/``ValueError`` naming the argument."""

from __future__ import annotations

import math
import numbers
from typing import Any


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
