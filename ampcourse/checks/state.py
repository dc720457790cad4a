"""Each check runs in torch's default global state, whatever the learner's earlier cells left behind.

An answer can change process-wide torch settings and never set them back: ``torch.set_default_dtype``,
``torch.set_default_device``, ``torch.set_grad_enabled(False)``, an ``autocast`` region entered with
``__enter__()`` and never left. Without this, one task's leftovers change the next task's grade (a
wrong answer passes inside a stray autocast region; a float16 default dtype is blamed on the next task).
:func:`clean_torch_state` sets the defaults for the duration of a check and restores the learner's
state afterwards. :func:`install` applies it to every notebook cell that calls a check (``check.name(...)``).
"""

from __future__ import annotations

import contextlib
import re
import types
from collections.abc import Iterator

import torch

AUTOCAST_DEVICES = ("cpu", "cuda", "mps", "xpu")
_CHECK_CELL = re.compile(r"^\s*check\.\w+\(", re.M)


def _device_types() -> list[str]:
    from torch.amp.autocast_mode import is_autocast_available

    return [d for d in AUTOCAST_DEVICES if is_autocast_available(d)]


def _default_device() -> str | None:
    context = getattr(torch._GLOBAL_DEVICE_CONTEXT, "device_context", None)
    return None if context is None else context.device


def snapshot() -> dict:
    """The global torch state a check depends on."""
    return {
        "dtype": torch.get_default_dtype(),
        "device": _default_device(),
        "grad": torch.is_grad_enabled(),
        "autocast": {d: (torch.is_autocast_enabled(d), torch.get_autocast_dtype(d)) for d in _device_types()},
        "autocast_cache": torch.is_autocast_cache_enabled(),
    }


def restore(state: dict) -> None:
    """Put back a :func:`snapshot`."""
    torch.set_default_dtype(state["dtype"])
    torch.set_default_device(state["device"])
    torch.set_grad_enabled(state["grad"])
    for device, (enabled, dtype) in state["autocast"].items():
        torch.set_autocast_enabled(device, enabled)
        torch.set_autocast_dtype(device, dtype)
    torch.set_autocast_cache_enabled(state["autocast_cache"])


def reset() -> None:
    """torch's defaults: float32, default device cpu, grad mode on, autocast off everywhere and each device's
    autocast dtype torch's default (:data:`ampcourse.device.AUTOCAST_DEFAULT_DTYPES`: a region entered with
    ``__enter__()`` and never left also set the dtype)."""
    from ..device import AUTOCAST_DEFAULT_DTYPES

    torch.set_default_dtype(torch.float32)
    torch.set_default_device(None)
    torch.set_grad_enabled(True)
    for device in _device_types():
        torch.set_autocast_enabled(device, False)
        if device in AUTOCAST_DEFAULT_DTYPES:
            torch.set_autocast_dtype(device, AUTOCAST_DEFAULT_DTYPES[device])
    torch.set_autocast_cache_enabled(True)


@contextlib.contextmanager
def clean_torch_state() -> Iterator[None]:
    """Run the block in torch's default global state; restore the caller's state afterwards."""
    saved = snapshot()
    reset()
    try:
        with torch.inference_mode(False):
            yield
    finally:
        restore(saved)


class _CellGuard:
    """IPython hooks: a cell that calls ``check.something(...)`` runs inside :func:`clean_torch_state`."""

    def __init__(self) -> None:
        self.saved: dict | None = None

    def pre_run_cell(self, info) -> None:
        if _CHECK_CELL.search(getattr(info, "raw_cell", "") or ""):
            self.saved = snapshot()
            reset()

    def post_run_cell(self, result) -> None:
        if self.saved is not None:
            saved, self.saved = self.saved, None
            restore(saved)


_GUARD = _CellGuard()


def install(shell) -> None:
    """Register the hooks on an IPython shell (once).

    Installed by the first cell that imports :mod:`ampcourse.checks`; if that cell is itself a check
    cell, it is guarded from here on (its source is already in IPython's input history).
    """
    for event in ("pre_run_cell", "post_run_cell"):
        callback = getattr(_GUARD, event)
        if callback not in shell.events.callbacks[event]:
            shell.events.register(event, callback)
            if event == "pre_run_cell":
                history = shell.user_ns.get("_ih") or [""]
                _GUARD.pre_run_cell(types.SimpleNamespace(raw_cell=history[-1]))
