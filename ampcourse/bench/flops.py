"""Lesson 06, FLOP/s: 2·m·k·n per product (:func:`matmul_flops`), achieved FLOP/s and the fraction of the peak,
:data:`DATASHEET_PEAKS` (dense figures from NVIDIA's datasheets — *not* the "with sparsity" ones, twice as
high), one timed product (:func:`matmul_throughput`), and the TF32 / oneDNN float32 precision settings."""

from __future__ import annotations

import contextlib
import math
import re
import warnings
from dataclasses import dataclass
from typing import Any

import torch

from ..validate import as_int, as_positive
from .hardware import mode_unavailable_reason
from .timing import Timing, time_fn
from .units import _AUTOCAST_DTYPE, _DTYPE_MODE, MODES, _as_device

# --- FLOP/s ---------------------------------------------------------------------------------------------

def matmul_flops(m: int, k: int, n: int) -> int:
    """Floating-point operations of an (m×k) @ (k×n) product: 2·m·k·n (a multiply and an add per term).

    >>> matmul_flops(2, 3, 4)
    48
    """
    return 2 * as_int("m", m, minimum=1) * as_int("k", k, minimum=1) * as_int("n", n, minimum=1)


def achieved_flops(flops: float, seconds: float) -> float:
    """FLOP/s: ``flops / seconds`` (seconds, not milliseconds)."""
    if isinstance(flops, bool) or not isinstance(flops, (int, float)) or flops < 0 or not math.isfinite(flops):
        raise ValueError(f"flops must be a finite number >= 0 (got {flops!r})")
    return float(flops) / as_positive("seconds", seconds)


def fraction_of_peak(achieved: float, peak: float) -> float:
    """``achieved / peak`` (a fraction: 0.42 means 42% of the peak)."""
    if isinstance(achieved, bool) or not isinstance(achieved, (int, float)) or not 0 <= achieved < math.inf:
        raise ValueError(f"achieved must be a finite number >= 0 (got {achieved!r})")
    return float(achieved) / as_positive("peak", peak)


_T = 1e12
_SOURCES = {
    "V100-SXM2": "NVIDIA V100 datasheet (SXM2)",
    "V100-PCIE": "NVIDIA V100 datasheet (PCIe)",
    "T4": "NVIDIA T4 datasheet",
    "A10": "NVIDIA A10 datasheet (dense; the sparse figures are 2×)",
    "A100": "NVIDIA A100 datasheet (dense; the sparse figures are 2×)",
    "L4": "NVIDIA L4 datasheet (its tensor figures are sparse: halved here)",
    "L40S": "NVIDIA L40S datasheet (dense; the sparse figures are 2×)",
    "RTX 4090": "NVIDIA Ada GPU architecture whitepaper (RTX 4090, FP32 accumulate, dense)",
    "H100": "NVIDIA H100 datasheet, SXM (its tensor figures are sparse: halved here)",
    "H100 PCIe": "NVIDIA H100 datasheet, PCIe (its tensor figures are sparse: halved here)",
    "H200": "NVIDIA H200 datasheet, SXM (its tensor figures are sparse: halved here)",
    "H100 NVL": "NVIDIA H100 datasheet, NVL (its tensor figures are sparse: halved here)",
    "H200 NVL": "NVIDIA H200 datasheet, NVL (its tensor figures are sparse: halved here)",
}

#: Peak FLOP/s from NVIDIA datasheets (whitepaper for the RTX 4090): **dense**, without 2:4 sparsity.
#: ``fp32`` is the non-tensor FP32 rate; ``tf32``/``fp16``/``bf16`` are Tensor Core rates with FP32
#: accumulation. Keys are matched as whole words in ``torch.cuda.get_device_name()`` (longest match
#: wins: "H100 PCIe" and "H100 NVL" before "H100", which is taken to be the SXM part; the same for
#: H200). A missing dtype: no such
#: Tensor Core mode on that GPU (V100 and T4 have no TF32/BF16 Tensor Cores).
DATASHEET_PEAKS: dict[str, dict[str, float]] = {
    "V100-SXM2": {"fp32": 15.7 * _T, "fp16": 125 * _T},
    "V100-PCIE": {"fp32": 14 * _T, "fp16": 112 * _T},
    "T4": {"fp32": 8.1 * _T, "fp16": 65 * _T},
    "A10": {"fp32": 31.2 * _T, "tf32": 62.5 * _T, "fp16": 125 * _T, "bf16": 125 * _T},
    "A100": {"fp32": 19.5 * _T, "tf32": 156 * _T, "fp16": 312 * _T, "bf16": 312 * _T},
    "L4": {"fp32": 30.3 * _T, "tf32": 60 * _T, "fp16": 121 * _T, "bf16": 121 * _T},
    "L40S": {"fp32": 91.6 * _T, "tf32": 183 * _T, "fp16": 362.05 * _T, "bf16": 362.05 * _T},
    "RTX 4090": {"fp32": 82.6 * _T, "tf32": 82.6 * _T, "fp16": 165.2 * _T, "bf16": 165.2 * _T},
    "H100": {"fp32": 67 * _T, "tf32": 494.5 * _T, "fp16": 989.5 * _T, "bf16": 989.5 * _T},
    "H100 PCIe": {"fp32": 51 * _T, "tf32": 378 * _T, "fp16": 756.5 * _T, "bf16": 756.5 * _T},
    "H200": {"fp32": 67 * _T, "tf32": 494.5 * _T, "fp16": 989.5 * _T, "bf16": 989.5 * _T},
    "H100 NVL": {"fp32": 60 * _T, "tf32": 417.5 * _T, "fp16": 835.5 * _T, "bf16": 835.5 * _T},
    "H200 NVL": {"fp32": 60 * _T, "tf32": 417.5 * _T, "fp16": 835.5 * _T, "bf16": 835.5 * _T},
}


def _mode_name(dtype: Any) -> str:
    if isinstance(dtype, torch.dtype):
        if dtype not in _DTYPE_MODE:
            raise ValueError(f"dtype must be float32, float16 or bfloat16 (got {dtype})")
        return _DTYPE_MODE[dtype]
    if isinstance(dtype, str) and dtype in MODES:
        return dtype
    raise ValueError(f"dtype must be one of {MODES} or a torch dtype float32/float16/bfloat16 (got {dtype!r})")


def datasheet_entry(gpu_name: str) -> str | None:
    """The :data:`DATASHEET_PEAKS` key that matches ``gpu_name`` (whole words, longest first), or None.

    >>> datasheet_entry("NVIDIA H100 PCIe"), datasheet_entry("NVIDIA A100-SXM4-80GB"), datasheet_entry("NVIDIA A10G")
    ('H100 PCIe', 'A100', None)
    >>> datasheet_entry("NVIDIA H200 NVL"), datasheet_entry("NVIDIA H200")
    ('H200 NVL', 'H200')
    """
    if not isinstance(gpu_name, str):
        raise TypeError(f"gpu_name must be a str (got {gpu_name!r})")
    for key in sorted(DATASHEET_PEAKS, key=len, reverse=True):
        if re.search(rf"(?<![A-Za-z0-9]){re.escape(key)}(?![A-Za-z0-9])", gpu_name, flags=re.IGNORECASE):
            return key
    return None


def peak_flops(device: torch.device | str, dtype: Any = "fp32", *, gpu_name: str | None = None
               ) -> tuple[float, str] | None:
    """The datasheet peak FLOP/s for ``dtype`` (a mode name or a torch dtype) on ``device``, and its source.

    ``None`` where it is not known: CPUs and Apple GPUs (measure one with :func:`measured_peak_flops`),
    GPUs not in :data:`DATASHEET_PEAKS`, or a mode the GPU has no Tensor Cores for. ``gpu_name`` overrides
    the name read from the device (for tests, or to look up another GPU).
    """
    device = _as_device(device, available=gpu_name is None)
    mode = _mode_name(dtype)
    if gpu_name is None:
        if device.type != "cuda":
            return None
        gpu_name = torch.cuda.get_device_name(device)
    key = datasheet_entry(gpu_name)
    if key is None or mode not in DATASHEET_PEAKS[key]:
        return None
    return DATASHEET_PEAKS[key][mode], f"datasheet: {_SOURCES[key]}"


def tf32_api() -> str:
    """Which TF32 switches this torch has: ``"fp32_precision"`` (torch >= 2.9) or ``"allow_tf32"`` (older).

    Since torch 2.9 the documented settings are ``torch.backends.cuda.matmul.fp32_precision`` and
    ``torch.backends.cudnn.conv.fp32_precision`` (``"tf32"`` or ``"ieee"``; ``"none"``: inherit), and
    ``torch.set_float32_matmul_precision("high")`` sets the matmul ones. The legacy ``allow_tf32`` flags
    still work when *set*, but *reading* them after the new API was used raises ``RuntimeError`` ("you
    have used mix of the legacy and new APIs"), so code that saves and restores the flags must use the
    new API where it exists.
    """
    try:
        torch.backends.cuda.matmul.fp32_precision  # noqa: B018 - probing the attribute is the point
    except (AttributeError, RuntimeError):
        return "allow_tf32"
    return "fp32_precision"


@contextlib.contextmanager
def tf32_enabled(enabled: bool):
    """Allow (``True``) or forbid (``False``) TF32 in CUDA matrix products and cuDNN convolutions; restore after.

    Uses ``torch.backends.cuda.matmul.fp32_precision`` and ``torch.backends.cudnn.{conv,rnn}.fp32_precision``
    (``"tf32"`` / ``"ieee"``) where torch has them (>= 2.9, see :func:`tf32_api`), the legacy
    ``allow_tf32`` flags otherwise. Works whichever API was used before in the process. On a CPU these
    settings change nothing that this course measures.
    """
    if not isinstance(enabled, bool):
        raise TypeError(f"enabled must be True or False (got {enabled!r})")
    if tf32_api() == "fp32_precision":
        knobs = (torch.backends.cuda.matmul, torch.backends.cudnn.conv, torch.backends.cudnn.rnn)
        before = [knob.fp32_precision for knob in knobs]
        for knob in knobs:
            knob.fp32_precision = "tf32" if enabled else "ieee"
        try:
            yield
        finally:
            for knob, value in zip(knobs, before, strict=True):
                knob.fp32_precision = value
        return
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        legacy = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
        torch.backends.cuda.matmul.allow_tf32 = enabled
        torch.backends.cudnn.allow_tf32 = enabled
    try:
        yield
    finally:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = legacy


def fp32_precision_settings() -> dict[str, str]:
    """The current float32 precision settings by name (torch >= 2.9; empty dict on older torch).

    ``torch.backends.cuda.matmul`` (cuBLAS), ``torch.backends.cudnn.conv``, ``torch.backends.mkldnn.matmul``
    (oneDNN on the CPU: ``"bf16"`` or ``"tf32"`` let it use reduced-precision hardware for float32
    products) and ``torch.get_float32_matmul_precision()``; a value that cannot be read (mixed legacy and
    new APIs) is reported as the error's first words.
    """
    if tf32_api() != "fp32_precision":
        return {}
    readers = {
        "torch.backends.cuda.matmul.fp32_precision": lambda: torch.backends.cuda.matmul.fp32_precision,
        "torch.backends.cudnn.conv.fp32_precision": lambda: torch.backends.cudnn.conv.fp32_precision,
        "torch.backends.mkldnn.matmul.fp32_precision": lambda: torch.backends.mkldnn.matmul.fp32_precision,
        "torch.get_float32_matmul_precision()": torch.get_float32_matmul_precision,
    }
    out = {}
    for name, read in readers.items():
        try:
            out[name] = str(read())
        except RuntimeError as err:
            out[name] = f"unreadable: {str(err).split(',')[0][:80]}"
    return out


@dataclass(frozen=True)
class MatmulResult:
    """One timed (m×k) @ (k×n) product."""

    m: int
    k: int
    n: int
    mode: str
    timing: Timing

    @property
    def flops(self) -> int:
        return matmul_flops(self.m, self.k, self.n)

    @property
    def achieved(self) -> float:
        """FLOP/s at the median time."""
        return achieved_flops(self.flops, self.timing.median)


MAX_MATMUL_ELEMENTS = 5e8


def matmul_throughput(m: int, k: int, n: int, *, mode: str = "fp32", device: torch.device | str = "cpu",
                      warmup: int = 2, repeats: int = 5, seed: int = 0) -> MatmulResult:
    """Time one (m×k) @ (k×n) product in ``mode`` (fp32, tf32 — CUDA only —, fp16 or bf16 inputs)."""
    m, k, n = (as_int(name, v, minimum=1) for name, v in (("m", m), ("k", k), ("n", n)))
    if m * k + k * n + m * n > MAX_MATMUL_ELEMENTS:
        raise ValueError(f"m={m}, k={k}, n={n} needs {m * k + k * n + m * n:.2g} matrix elements, more than "
                         f"matmul_throughput allows ({MAX_MATMUL_ELEMENTS:.0e}, bench.MAX_MATMUL_ELEMENTS: 2 GB in "
                         "float32)")
    device = _as_device(device)
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES} (got {mode!r})")
    reason = mode_unavailable_reason(mode, device)
    if reason:
        raise ValueError(f"mode {mode!r} is not available on {device}: {reason}")
    dtype = _AUTOCAST_DTYPE.get(mode, torch.float32)
    g = torch.Generator().manual_seed(seed)
    a = torch.randn(m, k, generator=g).to(device=device, dtype=dtype)
    b = torch.randn(k, n, generator=g).to(device=device, dtype=dtype)
    with tf32_enabled(mode == "tf32") if device.type == "cuda" else contextlib.nullcontext():
        timing = time_fn(lambda: torch.mm(a, b), warmup=warmup, repeats=repeats, device=device)
    return MatmulResult(m, k, n, mode, timing)


def measured_peak_flops(device: torch.device | str, mode: str = "fp32", *, size: int = 1024,
                        repeats: int = 5) -> tuple[float, str]:
    """A measured stand-in for the peak: the FLOP/s of one large square product (``size``³), and a label."""
    result = matmul_throughput(size, size, size, mode=mode, device=device, repeats=repeats)
    return result.achieved, f"measured: {size}×{size} @ {size}×{size} {mode} product on this device"


@contextlib.contextmanager
def mkldnn_fp32_precision(precision: str):
    """Set oneDNN's ``torch.backends.mkldnn.matmul.fp32_precision`` (``"bf16"``: FP32 products on a CPU computed
    with bf16 inputs where the hardware has it; ``"none"``/``"ieee"``: FP32); restore it after."""
    if precision not in ("none", "ieee", "bf16", "tf32"):
        raise ValueError(f"precision must be 'none', 'ieee', 'bf16' or 'tf32' (got {precision!r})")
    knob = torch.backends.mkldnn.matmul
    before = knob.fp32_precision
    knob.fp32_precision = precision
    try:
        yield
    finally:
        knob.fp32_precision = before
