"""Lesson 06, the machine: the CPU flags that decide low-precision matmul speed (:func:`cpu_features`), which
precision modes a device runs (:func:`available_modes`), and a block that silences the native stderr of
``torch.profiler``."""

from __future__ import annotations

import contextlib
from typing import Any

import torch

from .units import MODES, _as_device

# --- hardware -------------------------------------------------------------------------------------------

_CPU_FLAGS = ("avx2", "fma", "f16c", "avx512f", "avx512_bf16", "avx512_fp16", "amx_tile", "amx_bf16", "amx_fp16")


def cpu_features(cpuinfo: str | None = None) -> dict[str, Any]:
    """The CPU's model and the flags that decide low-precision matmul speed (from ``/proc/cpuinfo``).

    Returns ``{"model": str, "flags": {flag: bool}, "torch_capability": str}``; ``flags`` is empty where
    ``/proc/cpuinfo`` does not exist (macOS, Windows). ``avx512_bf16``/``amx_bf16`` give fast bf16
    matrix products on the CPU; without them torch falls back to slower paths. ``cpuinfo`` overrides
    the file's text (tests).
    """
    if cpuinfo is None:
        try:
            with open("/proc/cpuinfo", encoding="utf-8") as handle:
                cpuinfo = handle.read()
        except OSError:
            cpuinfo = ""
    if not isinstance(cpuinfo, str):
        raise TypeError(f"cpuinfo must be a str or None (got {cpuinfo!r})")
    model, flags = "unknown", set()
    for line in cpuinfo.splitlines():
        label, _, value = line.partition(":")
        if label.strip() == "model name" and model == "unknown":
            model = value.strip()
        elif label.strip() in ("flags", "Features") and not flags:
            flags = set(value.split())
    found = {flag: flag in flags for flag in _CPU_FLAGS} if flags else {}
    try:
        capability = torch.backends.cpu.get_cpu_capability()
    except (AttributeError, RuntimeError):
        capability = "unknown"
    return {"model": model, "flags": found, "torch_capability": capability}


def mode_unavailable_reason(mode: str, device: torch.device | str) -> str | None:
    """Why ``mode`` cannot run on ``device`` (a short sentence), or None if it can."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES} (got {mode!r})")
    device = _as_device(device)
    if mode == "fp32":
        return None
    if mode == "tf32":
        if device.type != "cuda":
            return "TF32 is a CUDA Tensor Core mode (compute capability >= 8.0)"
        if torch.cuda.get_device_capability(device) < (8, 0):
            return "TF32 needs compute capability >= 8.0 (Ampere or newer)"
        return None
    if mode == "bf16":
        if device.type == "cuda" and not torch.cuda.is_bf16_supported(including_emulation=False):
            return "this GPU has no native bfloat16"
        if device.type == "mps" and not torch.backends.mps.is_macos_or_newer(14, 0):
            return "MPS bfloat16 needs macOS 14"
    return None


def available_modes(device: torch.device | str) -> list[str]:
    """The :data:`MODES` this device runs: fp32 always; tf32 on CUDA with capability >= 8.0; fp16 (on the
    CPU it is slow: keep it tiny); bf16 where supported."""
    device = _as_device(device)
    return [mode for mode in MODES if mode_unavailable_reason(mode, device) is None]


def has_bf16_hardware(features: dict[str, Any] | None = None) -> bool:
    """Whether this CPU reports bfloat16 matrix hardware (AVX512-BF16 or AMX-BF16) in :func:`cpu_features`."""
    flags = (features or cpu_features())["flags"]
    return bool(flags.get("avx512_bf16") or flags.get("amx_bf16"))


@contextlib.contextmanager
def native_stderr_silenced():
    """Send file descriptor 2 to /dev/null for the block: torch.profiler's native layer writes
    ``USDT … profiler_start/stop`` lines there, which Python cannot catch. Python's own ``sys.stderr`` is
    flushed first; errors raised in the block still propagate."""
    import os
    import sys

    sys.stderr.flush()
    saved = os.dup(2)
    with open(os.devnull, "w") as null:
        os.dup2(null.fileno(), 2)
        try:
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)
