"""Lesson 10: FP8 training — per-tensor scaling, dynamic vs delayed scaling, and torchao's Float8 linears.

The lesson writes the FP8 code itself (amax → scale → saturating cast → ``torch._scaled_mm``); this module holds
the same steps as tested helpers for the checks, the widget and the training runs, plus the plumbing:

* formats: :func:`fp8_dtype`, :func:`fp8_limits`, :func:`limits_table` (read from ``torch.finfo``);
* per-tensor scaling: :func:`amax`, :func:`scale_from_amax`, :func:`to_fp8` (saturating), :func:`scaled_mm`
  (a validated wrapper around ``torch._scaled_mm``), :func:`fp8_fate` (what a cast does to each value);
* the delayed-scaling simulator behind the widget: :func:`amax_sequence`, :func:`simulate_scaling`. It works on
  integer exponents only (each "tensor" holds powers of two with binomial counts), so its results are exact
  and the same on every machine;
* torchao: :func:`import_torchao` (quiet on machines where torchao's GPU kernels cannot load),
  :func:`fp8_tensor_cores`, :func:`to_float8`, and :func:`compare_precisions` (FP32, bf16 autocast and FP8
  from the same seeds on lesson 09's digits);
* scaling granularity, emulated exactly: :func:`block_cast` / :func:`block_dequantize` (one scale per block,
  optionally a power of two: :func:`round_scale_to_power_of_2`), :data:`GRANULARITIES` (per-tensor, rowwise,
  1×128 / 128×128, MX), :func:`granularity_errors` on :func:`outlier_pair` (the lesson's table and widget);
* recipes and layer choice: :func:`recipe_table`, :func:`gemm_table` (torchao read from its configs, Transformer
  Engine from its docs), :func:`conversion_plan` and :func:`filter_grid` (torchao's own layer filter);
* checking FP8 on one's own model: :func:`check_fp8` (converted layers, per-layer SQNR against bf16, amax and
  scales), :func:`loss_gap` (lesson 09's paired rule on losses), :func:`profile_fp8` (FP8 GEMMs and step times
  on a GPU with FP8 Tensor Cores).

Facts checked against torch 2.13 (``torch/headeronly/util/Float8_e4m3fn.h``) and torchao 0.18:

* ``torch.finfo(torch.float8_e4m3fn).max == 448``, ``torch.finfo(torch.float8_e5m2).max == 57344``;
* a cast to ``float8_e4m3fn`` (no inf in the format) *saturates*: anything above 448, inf included, becomes 448;
  a cast to ``float8_e5m2`` rounds an overflow to inf (it has inf). torchao clamps before every cast
  (``torchao.float8.float8_utils.to_fp8_saturated``), and so does :func:`to_fp8`;
* ``torch._scaled_mm(a, b, scale_a=..., scale_b=...)`` computes ``(a · scale_a) @ (b · scale_b)``: its scales
  are the *dequantisation* factors, the reciprocals of the scales the tensors were multiplied by;
* torchao 0.18's ``ScalingType`` has only ``DYNAMIC`` and ``DISABLED``: delayed scaling was deprecated in 0.9 and
  deleted in 0.10 (pytorch/ao#1680, #1753: complexity, no users, dynamic scaling more accurate); Transformer
  Engine's ``DelayedScaling`` recipe keeps it (history 1024, ``max``), so the lesson teaches it with
  :func:`simulate_scaling`.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import io
import logging
import math
import os
import statistics
import sys
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import nn

from .tables import Table
from .validate import as_device, as_int

__all__ = [
    "E4M3", "E5M2", "FORMATS", "HISTORY_LENGTHS", "N_STEPS", "SPIKE_STEP", "FP8Fate", "FP8Limits", "PrecisionRun",
    "ScalingTrace", "amax", "amax_sequence", "compare_precisions", "fp8_dtype", "fp8_fate", "fp8_limits",
    "fp8_tensor_cores", "import_torchao", "limits_table", "scale_from_amax", "scaled_mm", "simulate_scaling",
    "to_float8", "to_fp8", "emulated_scaled_mm", "fp8_matmul_available",
    "ROLES", "ROLE_FORMAT", "TensorSample", "accuracy_table", "collect_tensors",
    "fate_table", "train_step", "LOSS_GAP_TOLERANCE", "fp8_friendly", "SCALED_MM_OUT_DTYPES", "MAX_SEEDS",
    "GRANULARITIES", "Granularity", "GranularityResult", "OUTLIER_AT", "OUTLIER_LOG10", "PAIR_SHAPE", "block_cast",
    "block_dequantize", "granularity_errors", "granularity_table", "outlier_pair", "round_scale_to_power_of_2",
    "TORCHAO_RECIPES", "TE_RECIPES", "recipe_table", "gemm_table", "torchao_filter", "conversion_plan", "filter_grid",
    "SQNR_FLOOR_DB", "LayerCheck", "FP8Check", "check_fp8", "loss_gap", "profile_fp8",
]

E4M3 = torch.float8_e4m3fn
E5M2 = torch.float8_e5m2
FORMATS = {"e4m3": E4M3, "e5m2": E5M2}
_ALIASES = {"float8_e4m3fn": "e4m3", "e4m3fn": "e4m3", "float8_e5m2": "e5m2"}
EPS = 1e-12  # the smallest amax a scale is computed from (torchao's float8_utils.EPS): an all-zero tensor stays finite


# ------------------------------------------------------------------------------------------------ formats
def fp8_dtype(fmt: str | torch.dtype) -> torch.dtype:
    """``torch.float8_e4m3fn`` or ``torch.float8_e5m2`` for ``"e4m3"``/``"e5m2"`` (or the dtype itself).

    Example:
        >>> fp8_dtype("e5m2")
        torch.float8_e5m2
    """
    if isinstance(fmt, torch.dtype):
        if fmt in FORMATS.values():
            return fmt
        raise ValueError(f"fmt must be torch.float8_e4m3fn or torch.float8_e5m2 (got {fmt})")
    if not isinstance(fmt, str):
        raise TypeError(f"fmt must be 'e4m3', 'e5m2' or an FP8 torch dtype (got {fmt!r})")
    name = _ALIASES.get(fmt.strip().lower(), fmt.strip().lower())
    if name not in FORMATS:
        raise ValueError(f"fmt must be 'e4m3' or 'e5m2' (got {fmt!r})")
    return FORMATS[name]


def _name(dtype: torch.dtype) -> str:
    return "E4M3" if dtype == E4M3 else "E5M2"


@dataclass(frozen=True)
class FP8Limits:
    """An FP8 format's numbers (from ``torch.finfo``), and the float32 thresholds of a cast to it.

    ``|x| <= flush_threshold`` (half the smallest subnormal) becomes 0; from ``max`` plus half the top step
    (464 in E4M3, 61440 in E5M2) a cast saturates (E4M3) or becomes inf (E5M2) — :func:`to_fp8` clamps first, so
    both saturate there.
    ``relative_step`` is the gap between 1 and the next number (``finfo.eps``): the worst relative rounding
    error is half of it.
    """

    name: str
    dtype: torch.dtype
    exponent_bits: int
    mantissa_bits: int
    max: float
    smallest_normal: float
    smallest_subnormal: float
    relative_step: float

    @property
    def flush_threshold(self) -> float:
        return self.smallest_subnormal / 2

    @property
    def dynamic_range_bits(self) -> float:
        """log2(max / smallest subnormal): how many binades the format spans."""
        return math.log2(self.max / self.smallest_subnormal)


def fp8_limits(fmt: str | torch.dtype) -> FP8Limits:
    """The limits of E4M3 or E5M2 (see :class:`FP8Limits`).

    Example:
        >>> e4m3 = fp8_limits("e4m3")
        >>> e4m3.max, e4m3.smallest_normal == 2.0**-6, e4m3.smallest_subnormal == 2.0**-9
        (448.0, True, True)
    """
    dtype = fp8_dtype(fmt)
    info = torch.finfo(dtype)
    mantissa_bits = round(-math.log2(info.eps))
    return FP8Limits(name=_name(dtype), dtype=dtype, exponent_bits=7 - mantissa_bits, mantissa_bits=mantissa_bits,
                     max=float(info.max), smallest_normal=float(info.tiny),
                     smallest_subnormal=float(info.tiny * info.eps), relative_step=float(info.eps))


def limits_table() -> Table:
    """E4M3 and E5M2 side by side: bits, max, smallest normal/subnormal, binades spanned, relative step."""
    rows = []
    for dtype in (E4M3, E5M2):
        lim = fp8_limits(dtype)
        rows.append({"format": f"{lim.name} ({str(dtype).removeprefix('torch.')})",
                     "exp/mantissa bits": f"{lim.exponent_bits}/{lim.mantissa_bits}", "max": f"{lim.max:g}",
                     "smallest normal": f"2^{math.log2(lim.smallest_normal):.0f}",
                     "smallest subnormal": f"2^{math.log2(lim.smallest_subnormal):.0f}",
                     "binades": f"{lim.dynamic_range_bits:.1f}",
                     "relative step": f"2^{math.log2(lim.relative_step):.0f}"})
    return Table(rows, title="The two FP8 formats (torch.finfo)")


# ------------------------------------------------------------------------------------- per-tensor scaling
def _float_tensor(name: str, x: Any) -> torch.Tensor:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor (got {type(x).__name__})")
    if not x.is_floating_point() or x.dtype in FORMATS.values():
        raise TypeError(f"{name} must be a float32/bfloat16/float16 tensor (got dtype {x.dtype})")
    if x.numel() == 0:
        raise ValueError(f"{name} is empty")
    return x


def amax(x: torch.Tensor) -> torch.Tensor:
    """The largest magnitude in ``x`` (``x.abs().max()``) as a float32 scalar tensor.

    Example:
        >>> amax(torch.tensor([1.0, -3.0, 2.0]))
        tensor(3.)
    """
    x = _float_tensor("x", x)
    return x.detach().abs().max().float()


def scale_from_amax(amax_value: torch.Tensor | float, fmt: str | torch.dtype, margin: int = 0) -> torch.Tensor:
    """The per-tensor scale ``fp8_max / amax / 2**margin``: multiplying by it maps ``amax`` to the format's max
    (``margin`` bits below it). A zero amax counts as ``1e-12``, so the scale stays finite.

    Example:
        >>> scale_from_amax(7.0, "e4m3")
        tensor(64.)
        >>> scale_from_amax(7.0, "e4m3", margin=1)
        tensor(32.)
    """
    dtype = fp8_dtype(fmt)
    margin = as_int("margin", margin, minimum=0)
    if isinstance(amax_value, bool) or not isinstance(amax_value, (int, float, torch.Tensor)):
        raise TypeError(f"amax_value must be a number or a scalar tensor (got {amax_value!r})")
    value = torch.as_tensor(amax_value, dtype=torch.float64).detach()
    if value.numel() != 1 or not bool(torch.isfinite(value)) or float(value) < 0:
        raise ValueError(f"amax_value must be one finite number >= 0 (got {amax_value!r})")
    scale = (torch.finfo(dtype).max / value.clamp(min=EPS) / 2.0**margin).reshape(()).to(torch.float32)
    if not 0 < float(scale) < math.inf:
        raise ValueError(f"margin={margin} with amax_value={float(value):g} gives a scale of {float(scale):g}, "
                         "outside float32's range: a margin is a few binades (0 to 4)")
    return scale


def to_fp8(x: torch.Tensor, scale: torch.Tensor | float, fmt: str | torch.dtype) -> torch.Tensor:
    """``x · scale`` clamped to ``±max`` and cast to the FP8 format: a saturating cast (as torchao does it).

    Example:
        >>> to_fp8(torch.tensor([1.0, 1000.0]), 1.0, "e5m2").float().tolist()
        [1.0, 1024.0]
        >>> to_fp8(torch.tensor([1.0, 1000.0]), 100.0, "e5m2").float().tolist()  # 96: E5M2 rounding
        [96.0, 57344.0]
    """
    x = _float_tensor("x", x)
    dtype = fp8_dtype(fmt)
    scale = _scale_tensor("scale", scale)
    top = torch.finfo(dtype).max
    return (x.float() * scale.to(x.device)).clamp(-top, top).to(dtype)


def _inverse_scale(name: str, scale: Any) -> torch.Tensor:
    """``1 / scale`` as a float32 scalar tensor; a scale so small that its reciprocal overflows is refused."""
    inverse = 1 / _scale_tensor(name, scale)
    if not bool(torch.isfinite(inverse)):
        raise ValueError(f"{name} is too small ({float(scale):g}): its reciprocal, the dequantisation factor "
                         "torch._scaled_mm gets, overflows float32 (the smallest usable scale is about 3e-39)")
    return inverse


def _scale_tensor(name: str, scale: Any) -> torch.Tensor:
    if isinstance(scale, bool) or not isinstance(scale, (int, float, torch.Tensor)):
        raise TypeError(f"{name} must be a positive number or a scalar float32 tensor (got {scale!r})")
    tensor = torch.as_tensor(scale, dtype=torch.float32).detach()
    if tensor.numel() != 1 or not bool(torch.isfinite(tensor).all()) or not float(tensor) > 0:
        raise ValueError(f"{name} must be one positive finite number (got {scale!r})")
    return tensor.reshape(())


_FP8_MATMUL: dict[str, bool] = {}


def fp8_matmul_available(device: torch.device | str = "cpu") -> bool:
    """Whether ``torch._scaled_mm`` runs on this device (probed once per device type, then cached).

    On CUDA it needs FP8 Tensor Cores (compute capability 8.9+). On a CPU, torch 2.13 always has it: on a CPU
    with AMX, oneDNN's FP8 matmul; on every other CPU, ``_scaled_mm_out_cpu_emulated`` (the FP8 operands
    converted to float32, multiplied by the scales, ``at::matmul``) — no speed-up either way. It raises ("could
    not create a primitive descriptor") only on an AMX CPU whose oneDNN is held below AMX
    (``DNNL_MAX_CPU_ISA=AVX2``, the course's second test pass): there :func:`emulated_scaled_mm` stands in.
    """
    device = as_device("device", device)
    if device.type not in _FP8_MATMUL:
        try:
            a = torch.zeros(16, 16, device=device).to(E4M3)
            one = torch.ones((), device=device)
            torch._scaled_mm(a, a.t(), scale_a=one, scale_b=one, out_dtype=torch.float32)
            _FP8_MATMUL[device.type] = True
        except (RuntimeError, NotImplementedError):
            _FP8_MATMUL[device.type] = False
    return _FP8_MATMUL[device.type]


#: The output dtypes ``torch._scaled_mm`` produces: a float (the usual) or FP8 again (the default: ``a.dtype``).
SCALED_MM_OUT_DTYPES = (torch.float32, torch.bfloat16, torch.float16, E4M3, E5M2)


def _check_scaled_mm_contract(a: Any, b: Any, scale_a: Any, scale_b: Any, bias: Any, out_dtype: Any,
                              use_fast_accum: Any) -> torch.dtype:
    """``torch._scaled_mm``'s contract for per-tensor scales, as CUDA enforces it, on every device; returns the
    output dtype (``a.dtype`` when ``out_dtype`` is None).

    From torch 2.13's meta registration (``_check_scaled_mm_sizes`` in ``torch/_meta_registrations.py``: 2-D FP8
    operands, tensorwise scales float32) and CUDA's ``_scaled_mm_out_cuda`` (``aten/src/ATen/native/cuda/
    Blas.cpp``: row-major ``a``, column-major ``b``, k and n multiples of 16, not two E5M2 operands, and a bias
    only with a bf16/fp16/FP8 output, in bf16 or fp16 matching it). The CPU kernel accepts some of what CUDA
    refuses (a float32 bias with a float32 output, float64 scales, two E5M2 operands): held to CUDA's rules
    here, an answer that runs on a CPU runs on a GPU too. The layout rules apply to CUDA tensors only (the
    course's check names a row-major ``b`` itself). Row-wise and block scales are not part of it: this course's
    FP8 matrix products are per-tensor.
    """
    for name, t in (("a", a), ("b", b)):
        if not isinstance(t, torch.Tensor) or t.dim() != 2:
            raise TypeError(f"{name} must be a 2-D tensor (got {getattr(t, 'shape', type(t).__name__)})")
        if t.dtype not in FORMATS.values():
            raise TypeError(f"{name} must be a float8_e4m3fn or float8_e5m2 tensor, as torch._scaled_mm takes it "
                            f"(got {t.dtype}): cast it with .to(torch.float8_e4m3fn) first")
    if a.dtype == b.dtype == E5M2:
        raise ValueError("a and b are both float8_e5m2: CUDA's torch._scaled_mm refuses that (\"Multiplication of "
                         "two Float8_e5m2 matrices is not supported\"); make at least one operand float8_e4m3fn")
    if a.shape[1] != b.shape[0]:
        raise ValueError(f"a is {tuple(a.shape)} and b is {tuple(b.shape)}: a's columns must equal b's rows")
    for name, t in (("scale_a", scale_a), ("scale_b", scale_b)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a tensor, as torch._scaled_mm takes it (got {type(t).__name__})")
        if t.numel() != 1:
            raise ValueError(f"{name} must have one element, a per-tensor scale (got {t.numel()} elements, shape "
                             f"{tuple(t.shape)}): this emulation and the course's tasks scale per tensor")
        if t.dtype != torch.float32:
            raise ValueError(f"{name} must be a float32 tensor (got {t.dtype}): torch refuses other per-tensor "
                             "scales (\"For tensorwise scaling, both scale_a and scale_b must be float (fp32) "
                             "tensors\", its meta registration; CUDA's kernel alike), even where a CPU build "
                             "accepts them")
    if a.device.type == "cuda":  # the CUDA kernels' layout rules (torch's _check_scaled_mm_sizes)
        if not (a.stride(1) == 1 and a.stride(0) >= a.shape[1]):
            raise ValueError(f"a must be row-major on CUDA (got stride {a.stride()}): pass x8.contiguous()")
        if not (b.stride(0) == 1 and b.stride(1) >= b.shape[0]):
            raise ValueError(f"b must be column-major on CUDA (got stride {b.stride()}): pass w8.t() of a row-major "
                             "(n, k) weight, not w8.t().contiguous()")
        if a.shape[1] % 16 or b.shape[1] % 16:
            raise ValueError(f"on CUDA the sizes k and n must be multiples of 16 (got a {tuple(a.shape)}, "
                             f"b {tuple(b.shape)})")
    if not isinstance(use_fast_accum, bool):
        raise TypeError(f"use_fast_accum must be True or False (got {use_fast_accum!r})")
    if out_dtype is not None and not isinstance(out_dtype, torch.dtype):
        raise TypeError(f"out_dtype must be a torch.dtype such as torch.float32 (got {out_dtype!r})")
    if out_dtype is not None and out_dtype not in SCALED_MM_OUT_DTYPES:
        raise ValueError(f"out_dtype must be one of {[str(d) for d in SCALED_MM_OUT_DTYPES]} (got {out_dtype})")
    out = a.dtype if out_dtype is None else out_dtype
    if bias is not None:
        if not isinstance(bias, torch.Tensor) or bias.numel() != b.shape[1]:
            raise ValueError(f"bias must be None or a tensor of {b.shape[1]} elements, one per output column (got "
                             f"{tuple(bias.shape) if isinstance(bias, torch.Tensor) else type(bias).__name__})")
        if out == torch.float32:
            raise ValueError("a bias needs a bf16 or fp16 output: CUDA's torch._scaled_mm refuses a bias with "
                             "out_dtype=torch.float32 (\"Bias is not supported when out_dtype is set to "
                             "Float32\"); add it to the float32 result afterwards instead")
        if bias.dtype not in (torch.bfloat16, torch.float16):
            raise ValueError(f"bias must be a bfloat16 or float16 tensor, as CUDA's torch._scaled_mm wants it "
                             f"(got {bias.dtype})")
        if out in (torch.bfloat16, torch.float16) and bias.dtype != out:
            raise ValueError(f"with out_dtype={out} the bias must be {out} too, as CUDA's torch._scaled_mm "
                             f"wants it (got {bias.dtype})")
    return out


def emulated_scaled_mm(a: torch.Tensor, b: torch.Tensor, scale_a: torch.Tensor, scale_b: torch.Tensor,
                       bias: torch.Tensor | None = None, scale_result: torch.Tensor | None = None,
                       out_dtype: torch.dtype | None = None, use_fast_accum: bool = False) -> torch.Tensor:
    """What ``torch._scaled_mm`` computes with per-tensor scales, by hand — for a machine where it cannot run.

    ``(a · scale_a) @ (b · scale_b) (+ bias)`` from the exact FP8 values in FP32, then cast to ``out_dtype`` —
    which defaults to ``a.dtype`` (FP8), as ``torch._scaled_mm``'s does: pass ``out_dtype=torch.float32``. It
    holds its inputs to ``_scaled_mm``'s contract as CUDA enforces it, so an answer that works here works there:
    FP8 operands (not both E5M2), one-element float32 scales, a bias only with a bf16/fp16/FP8 output (bf16 or
    fp16, matching it), on CUDA a row-major ``a`` and a column-major ``b`` with k, n multiples of 16.
    This is torch 2.13's own CPU fallback (``_scaled_mm_out_cpu_emulated``); only the summation order may
    differ. The parameters are ``torch._scaled_mm``'s, in its order; ``scale_result`` divides an FP8 output;
    ``use_fast_accum`` (a CUDA accumulator mode) changes nothing here.
    """
    dtype = _check_scaled_mm_contract(a, b, scale_a, scale_b, bias, out_dtype, use_fast_accum)
    if scale_result is not None and (not isinstance(scale_result, torch.Tensor) or scale_result.numel() != 1
                                     or scale_result.dtype != torch.float32):
        raise ValueError(f"scale_result must be None or a float32 tensor with one element (got {scale_result!r})")
    out = (a.float() * scale_a.float()) @ (b.float() * scale_b.float())
    if bias is not None:
        out = out + bias.float()
    if scale_result is not None and dtype in FORMATS.values():
        out = out * (1 / scale_result.float())
    return out.to(dtype)


def scaled_mm(a_fp8: torch.Tensor, a_scale: torch.Tensor | float, b_fp8: torch.Tensor, b_scale: torch.Tensor | float,
              out_dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """``a @ b`` from FP8 operands that were multiplied by ``a_scale`` and ``b_scale``: ``torch._scaled_mm`` with
    the reciprocal scales (torch's scales dequantise), products accumulated in FP32, result in ``out_dtype``.

    ``a_fp8`` is ``(m, k)`` and ``b_fp8`` is ``(k, n)``; on CUDA, ``b`` must be column-major (pass ``w8.t()`` of a
    row-major ``(n, k)`` weight, as ``F.linear`` would) and k and n multiples of 16 (m is free; in training the
    weight-gradient product contracts over the tokens, so batch × sequence must be a multiple of 16 as well).
    Where ``torch._scaled_mm`` cannot run (:func:`fp8_matmul_available`), :func:`emulated_scaled_mm` does the
    same arithmetic.
    """
    for name, t in (("a_fp8", a_fp8), ("b_fp8", b_fp8)):
        if not isinstance(t, torch.Tensor) or t.dtype not in FORMATS.values() or t.dim() != 2:
            raise TypeError(f"{name} must be a 2-D float8_e4m3fn or float8_e5m2 tensor "
                            f"(got {getattr(t, 'dtype', type(t).__name__)})")
    if a_fp8.shape[1] != b_fp8.shape[0]:
        raise ValueError(f"a_fp8 is {tuple(a_fp8.shape)} and b_fp8 is {tuple(b_fp8.shape)}: inner sizes differ")
    if out_dtype not in (torch.float32, torch.bfloat16, torch.float16):
        raise ValueError(f"out_dtype must be torch.float32, torch.bfloat16 or torch.float16 (got {out_dtype!r})")
    inv_a = _inverse_scale("a_scale", a_scale).to(a_fp8.device)
    inv_b = _inverse_scale("b_scale", b_scale).to(b_fp8.device)
    matmul = torch._scaled_mm if fp8_matmul_available(a_fp8.device) else emulated_scaled_mm
    return matmul(a_fp8, b_fp8, scale_a=inv_a, scale_b=inv_b, out_dtype=out_dtype)


@dataclass(frozen=True)
class FP8Fate:
    """What a saturating cast of ``values · scale`` to an FP8 format did to the non-zero values.

    ``flushed``: became 0; ``subnormal``; ``normal``; ``saturated``: past the point where even rounding would
    not bring it back to the format's max (``max`` + half the top step: 464 in E4M3, 61440 in E5M2), so the clamp
    changed it. ``zero`` counts the values that were already 0.
    """

    fmt: str
    scale: float
    zero: int
    flushed: int
    subnormal: int
    normal: int
    saturated: int

    @property
    def nonzero(self) -> int:
        return self.flushed + self.subnormal + self.normal + self.saturated

    def fraction(self, kind: str) -> float:
        """``kind``'s share of the non-zero values (0 if there are none)."""
        if kind not in ("flushed", "subnormal", "normal", "saturated"):
            raise ValueError(f"kind must be 'flushed', 'subnormal', 'normal' or 'saturated' (got {kind!r})")
        return getattr(self, kind) / self.nonzero if self.nonzero else 0.0


def fp8_fate(values: torch.Tensor, scale: torch.Tensor | float, fmt: str | torch.dtype) -> FP8Fate:
    """Sort every value of ``values · scale`` (float32) by what a saturating cast to ``fmt`` does to it.

    Example:
        >>> f = fp8_fate(torch.tensor([0.0, 2.0**-11, 2.0**-8, 1.0, 1e3]), 1.0, "e4m3")
        >>> f.zero, f.flushed, f.subnormal, f.normal, f.saturated
        (1, 1, 1, 1, 1)
    """
    values = _float_tensor("values", values)
    dtype = fp8_dtype(fmt)
    scale_t = _scale_tensor("scale", scale)
    lim = fp8_limits(dtype)
    scaled = values.detach().float().flatten().abs() * scale_t.to(values.device)
    if not bool(torch.isfinite(scaled).all()):
        raise ValueError("values · scale must be finite (values holds inf/nan, or the scale is too large)")
    cast = to_fp8(scaled, 1.0, dtype).float()
    zero = int((scaled == 0).sum())
    flushed = int(((cast == 0) & (scaled > 0)).sum())
    top_step = 2.0 ** math.floor(math.log2(lim.max)) * lim.relative_step  # the gap below max: 32 in E4M3
    saturated = int((scaled >= lim.max + top_step / 2).sum())
    subnormal = int(((cast > 0) & (cast < lim.smallest_normal)).sum())
    normal = scaled.numel() - zero - flushed - saturated - subnormal
    return FP8Fate(lim.name, float(scale_t), zero, flushed, subnormal, normal, saturated)


# ------------------------------------------------------------------------------ delayed-scaling simulator
N_STEPS = 200
SPIKE_STEP = 120
HISTORY_LENGTHS = (1, 2, 4, 8, 16, 32, 64)
#: The tensor at every step: values 2**(log2_amax - k), k = 0..SPREAD, with count C(SPREAD, k): a bell over
#: binades, like real activations and gradients, and exact (powers of two, integer counts).
SPREAD = 24
COUNTS = np.array([math.comb(SPREAD, k) for k in range(SPREAD + 1)], dtype=np.int64)


MAX_AMAX_STEPS = 10_000_000


def amax_sequence(n_steps: int = N_STEPS, spike_bits: int = 0, spike_step: int = SPIKE_STEP) -> np.ndarray:
    """log2 of a tensor's amax step by step (ints): it grows one binade every 50 steps, wobbles up one binade at
    two steps in every nine, and at ``spike_step`` jumps ``spike_bits`` binades for one step (a loss spike).

    Example:
        >>> amax_sequence(10).tolist()
        [1, 0, 0, 0, 1, 0, 0, 0, 0, 1]
        >>> int(amax_sequence(spike_bits=5)[SPIKE_STEP] - amax_sequence()[SPIKE_STEP])
        5
    """
    n_steps = as_int("n_steps", n_steps, minimum=1)
    if n_steps > MAX_AMAX_STEPS:
        raise ValueError(f"n_steps must be at most {MAX_AMAX_STEPS:,} (got {n_steps:,}): the sequence is held in "
                         "memory")
    spike_bits = as_int("spike_bits", spike_bits, minimum=0)
    spike_step = as_int("spike_step", spike_step, minimum=0)
    steps = np.arange(n_steps)
    log2 = steps // 50 + np.isin(steps % 9, (0, 4)).astype(np.int64)
    if spike_step < n_steps:
        log2[spike_step] += spike_bits
    return log2.astype(np.int64)


@dataclass(frozen=True, eq=False)
class ScalingTrace:
    """One simulated run of per-tensor scaling (see :func:`simulate_scaling`); arrays have one entry per step.

    ``log2_amax``: the tensor's amax; ``log2_scale_amax``: the amax the scale was built from (the history's
    maximum, or the current amax for dynamic scaling), before the margin; ``saturated`` and ``flushed``: the
    fraction of the step's values clamped to the max and flushed to 0; ``worst_clip_bits``: how many binades
    the largest value was above the max (0: nothing clipped).
    """

    fmt: str
    history: int | None
    margin: int
    log2_amax: np.ndarray = field(repr=False)
    log2_scale_amax: np.ndarray = field(repr=False)
    saturated: np.ndarray = field(repr=False)
    flushed: np.ndarray = field(repr=False)

    @property
    def kind(self) -> str:
        return "dynamic" if self.history is None else f"delayed (history {self.history})"

    @property
    def worst_clip_bits(self) -> np.ndarray:
        return np.maximum(0, self.log2_amax - self.log2_scale_amax - self.margin)

    @property
    def saturated_steps(self) -> int:
        return int((self.saturated > 0).sum())

    @property
    def n_steps(self) -> int:
        return len(self.log2_amax)


def _fates(exponent_of_top: np.ndarray, fmt: torch.dtype) -> tuple[np.ndarray, np.ndarray]:
    """Saturated and flushed fractions when the largest value lands at ``max · 2**e`` (e an int per step)."""
    lim = fp8_limits(fmt)
    k = np.arange(SPREAD + 1)
    e = exponent_of_top[:, None] - k[None, :]  # the exponent (relative to max) of each binade, each step
    scaled = lim.max * np.exp2(e.astype(np.float64))  # exact: max times a power of two
    total = COUNTS.sum()
    saturated = (COUNTS * (scaled > lim.max)).sum(axis=1) / total
    flushed = (COUNTS * (scaled <= lim.flush_threshold)).sum(axis=1) / total
    return saturated, flushed


def _previous_max(values: np.ndarray, history: int) -> np.ndarray:
    """``out[t] = max(values[max(0, t - history):t])`` for t >= 1, ``out[0] = values[0]``: the largest of the
    previous ``history`` entries, in O(n) (van Herk / Gil-Werman: running maxima within blocks of ``history``,
    forwards and backwards, so any window is the max of one block's suffix and the next block's prefix)."""
    n = len(values)
    h = min(history, n)
    low = np.iinfo(np.int64).min
    blocks = -(-n // h)
    padded = np.full(blocks * h, low, dtype=np.int64)
    padded[:n] = values
    grid = padded.reshape(blocks, h)
    prefix = np.maximum.accumulate(grid, axis=1).ravel()
    suffix = np.maximum.accumulate(grid[:, ::-1], axis=1)[:, ::-1].ravel()
    out = np.empty(n, dtype=np.int64)
    out[0] = values[0]
    start = np.maximum(np.arange(1, n) - history, 0)  # window [start, t - 1]
    end = np.arange(0, n - 1)
    full = end - start + 1 == h
    out[1:] = np.where(full, np.maximum(suffix[start], prefix[end]), np.maximum.accumulate(values)[end])
    return out


def simulate_scaling(log2_amax: Sequence[int] | np.ndarray, history: int | None, margin: int = 0,
                     fmt: str | torch.dtype = "e4m3") -> ScalingTrace:
    """Per-tensor scaling over steps: ``history=None`` is dynamic (the scale comes from this step's amax);
    ``history=H`` is delayed scaling, as Transformer Engine does it (and torchao up to 0.9): the scale comes from the
    largest amax of the previous ``H`` steps, then this step's amax joins the history (the first step has no
    history and, here, uses its own amax; Transformer Engine starts from scale 1). The scale is
    ``max / amax / 2**margin``. At most :data:`MAX_AMAX_STEPS` steps.

    The values of each step are :data:`COUNTS` values at ``2**(log2_amax - k)``; the counts of saturated and
    flushed values are exact (integer exponents), so a trace is the same on every machine.

    Example:
        >>> t = simulate_scaling([0, 0, 2, 0], history=1)
        >>> t.log2_scale_amax.tolist(), t.saturated_steps, t.worst_clip_bits.tolist()
        ([0, 0, 0, 2], 1, [0, 0, 2, 0])
    """
    dtype = fp8_dtype(fmt)
    if isinstance(log2_amax, (str, bytes)) or not isinstance(log2_amax, (Sequence, np.ndarray)):
        raise TypeError(f"log2_amax must be a list of ints (got {type(log2_amax).__name__})")
    values = np.asarray(log2_amax)
    if values.ndim != 1 or values.size == 0 or not np.issubdtype(values.dtype, np.integer):
        raise ValueError("log2_amax must be a non-empty 1-D list of ints (exponents of two)")
    if values.size > MAX_AMAX_STEPS:
        raise ValueError(f"log2_amax must have at most {MAX_AMAX_STEPS:,} steps (got {values.size:,}): the "
                         f"simulation holds {SPREAD + 1} numbers per step in memory")
    values = values.astype(np.int64)
    if history is not None:
        history = as_int("history", history, minimum=1)
    margin = as_int("margin", margin, minimum=0)
    used = values.copy() if history is None else _previous_max(values, history)
    saturated, flushed = _fates(values - used - margin, dtype)
    return ScalingTrace(_name(dtype), history, margin, values, used, saturated, flushed)


# ----------------------------------------------------------------------------------------------- torchao
_TORCHAO_NOISE = ("torchao", "torch.utils._pytree")


def import_torchao():
    """``torchao.float8``, imported without the noise torchao prints on machines where its GPU kernels cannot
    load ("Failed to load … .so" log warnings, a torch pytree deprecation warning).

    Those lines go to loggers ``torchao`` and ``torch.utils._pytree`` and to C-level stderr: all three are held
    back while importing (logging raised to ERROR, file descriptor 2 sent to a buffer). Raises ImportError with
    the install command when torchao is missing.
    """
    if "torchao.float8" in sys.modules:
        return sys.modules["torchao.float8"]
    loggers = [logging.getLogger(name) for name in _TORCHAO_NOISE]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.ERROR)
    try:
        with _quiet_stderr(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return importlib.import_module("torchao.float8")
    except ImportError as error:
        raise ImportError(f"torchao is not installed ({error}): pip install torchao==0.18.0") from None
    finally:
        for logger, level in zip(loggers, levels, strict=True):
            logger.setLevel(level)


@contextlib.contextmanager
def _quiet_stderr():
    """Send C-level writes to file descriptor 2 (and Python's sys.stderr) to a throw-away buffer."""
    sys.stderr.flush() if sys.stderr else None
    try:
        saved = os.dup(2)
    except OSError:  # no file descriptor 2 (some embedded interpreters): Python-level redirect only
        with contextlib.redirect_stderr(io.StringIO()):
            yield
        return
    with open(os.devnull, "w") as sink:
        os.dup2(sink.fileno(), 2)
        try:
            with contextlib.redirect_stderr(io.StringIO()):
                yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)


def fp8_tensor_cores(device: torch.device | str) -> bool:
    """True on a CUDA GPU with FP8 Tensor Cores (compute capability 8.9 or newer: Ada, Hopper, Blackwell)."""
    device = as_device("device", device, available=False)
    return device.type == "cuda" and torch.cuda.is_available() and torch.cuda.get_device_capability(device) >= (8, 9)


def fp8_friendly(module: nn.Module, fqn: str) -> bool:
    """The module filter :func:`to_float8` gives torchao: ``_scaled_mm`` needs k and n divisible by 16 (here it
    leaves out only the 10-way head; the first layer, 64 → 256, is converted)."""
    return isinstance(module, nn.Linear) and module.in_features % 16 == 0 and module.out_features % 16 == 0


def to_float8(model: nn.Module, device: torch.device | str) -> nn.Module:
    """``torchao.float8.convert_to_float8_training`` on ``model`` (in place, returned): every ``nn.Linear`` whose
    sizes are multiples of 16 becomes a ``Float8Linear`` (torchao's default "tensorwise" recipe: dynamic per-tensor
    scales, input and weight E4M3, output gradients E5M2). Without FP8 Tensor Cores it emulates the matrix
    products (``emulate=True``): the same FP8 casts, then an FP32 product of the dequantised operands. That
    reproduces the casts, not the accumulator: on the GPU the forward product uses fast accumulation by default
    (``gemm_config_output=Float8GemmConfig(use_fast_accum=True)``; a no-op under emulation), the two backward
    products do not."""
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module (got {type(model).__name__})")
    device = as_device("device", device)
    float8 = import_torchao()
    config = float8.Float8LinearConfig(emulate=not fp8_tensor_cores(device))
    return float8.convert_to_float8_training(model, config=config, module_filter_fn=fp8_friendly)


PRECISIONS = ("fp32", "bf16", "fp8")


@dataclass(frozen=True, eq=False)
class PrecisionRun:
    """One training run: ``losses`` per step, ``accuracy`` on the validation set at the end."""

    precision: str
    seed: int
    losses: tuple[float, ...]
    accuracy: float


def train_step(model: nn.Module, optimizer: torch.optim.Optimizer, x: torch.Tensor, y: torch.Tensor,
                autocast: bool) -> float:
    """One step: bf16 autocast around the forward (off for FP32), backward, AdamW step. No GradScaler: bf16 and
    torchao's FP8 (per-tensor scales, E5M2 gradients) need none."""
    optimizer.zero_grad(set_to_none=True)
    with torch.autocast(device_type=x.device.type, dtype=torch.bfloat16, enabled=autocast):
        loss = nn.functional.cross_entropy(model(x), y)
    loss.backward()
    optimizer.step()
    return float(loss.detach())


MAX_EPOCHS = 50
MAX_SEEDS = 20


def compare_precisions(seeds: Sequence[int] = (0, 1, 2), *, epochs: int = 4, device: torch.device | str = "cpu",
                       size: str = "small",
                       progress: Callable[[str], Any] | None = None) -> dict[str, list[PrecisionRun]]:
    """Train lesson 09's digits MLP in FP32, bf16 autocast and FP8 (:func:`to_float8` + bf16 autocast) from each
    seed: same initial weights, same batches. Returns ``{"fp32": [runs...], "bf16": [...], "fp8": [...]}``."""
    from .capstone import SIZES, load_digits, make_model, split

    if isinstance(seeds, (str, bytes)) or not isinstance(seeds, Sequence) or not seeds:
        raise TypeError(f"seeds must be a non-empty list of ints (got {seeds!r})")
    if len(seeds) > MAX_SEEDS:
        raise ValueError(f"seeds must hold at most {MAX_SEEDS} seeds (got {len(seeds):,}): each trains "
                         f"{len(PRECISIONS)} models")
    seeds = [as_int("seed", s, minimum=0) for s in seeds]
    epochs = as_int("epochs", epochs, minimum=1)
    if epochs > MAX_EPOCHS:
        raise ValueError(f"epochs must be at most {MAX_EPOCHS} (got {epochs}): each epoch trains "
                         f"{len(PRECISIONS)} models per seed, and more would not finish in reasonable time")
    device = as_device("device", device)
    if not isinstance(size, str) or size not in SIZES:
        raise ValueError(f"size must be one of {tuple(SIZES)} (got {size!r})")
    if progress is not None and not callable(progress):
        raise TypeError(f"progress must be None or a function taking one str, such as print (got {progress!r})")
    digits = load_digits()
    train_index, val_index = split(len(digits), 0.2, seed=0)
    x_train, y_train = digits.tensors(train_index, device)
    x_val, y_val = digits.tensors(val_index, device)
    batch, lr = SIZES[size]["micro_batch"], SIZES[size]["lr"]
    runs: dict[str, list[PrecisionRun]] = {p: [] for p in PRECISIONS}
    for seed in seeds:
        for precision in PRECISIONS:
            model = make_model(size, seed=seed, dropout=0.0).to(device)
            if precision == "fp8":
                to_float8(model, device)
            optimizer = torch.optim.AdamW(model.parameters(), lr=lr)
            order = torch.Generator().manual_seed(seed)
            losses = []
            for _ in range(epochs):
                perm = torch.randperm(len(x_train), generator=order).to(device)
                for start in range(0, len(perm) - batch + 1, batch):
                    idx = perm[start:start + batch]
                    losses.append(train_step(model, optimizer, x_train[idx], y_train[idx], precision != "fp32"))
            model.eval()
            with torch.no_grad(), torch.autocast(device_type=device.type, dtype=torch.bfloat16,
                                                 enabled=precision != "fp32"):
                accuracy = float((model(x_val).argmax(dim=1) == y_val).float().mean())
            runs[precision].append(PrecisionRun(precision, seed, tuple(losses), accuracy))
            if progress is not None:
                progress(f"seed {seed}: {precision:<4} final loss {losses[-1]:.3f}, validation accuracy {accuracy:.2%}")
    return runs


def _check_runs(runs: Any) -> None:
    """``runs`` is what :func:`compare_precisions` returns: precision → a non-empty list of PrecisionRun."""
    if not isinstance(runs, dict) or not runs or not all(
            isinstance(v, (list, tuple)) and v and all(isinstance(r, PrecisionRun) for r in v) for v in runs.values()):
        raise TypeError("runs must be what compare_precisions returns: a dict from precision to a non-empty list of "
                        "PrecisionRun")


def accuracy_table(runs: dict[str, list[PrecisionRun]]) -> Table:
    """Validation accuracy per precision: mean ± std over seeds, min – max (a measurement: varies by machine)."""
    _check_runs(runs)
    rows = []
    for precision, items in runs.items():
        accs = [r.accuracy for r in items]
        std = statistics.stdev(accs) if len(accs) > 1 else 0.0
        rows.append({"precision": precision, "seeds": len(accs),
                     "val accuracy (mean ± std)": f"{statistics.fmean(accs):.2%} ± {std:.2%}",
                     "min – max": f"{min(accs):.2%} – {max(accs):.2%}"})
    return Table(rows, title="Digits MLP, same seeds and batches")


# ------------------------------------------------------------------------------------ real tensors, figures
ROLES = ("input", "weight", "grad_output")
ROLE_FORMAT = {"input": E4M3, "weight": E4M3, "grad_output": E5M2}


@dataclass(frozen=True, eq=False)
class TensorSample:
    """The tensors each ``nn.Linear`` of a model multiplies, after a few FP32 training steps: ``tensors[role]`` is
    a list with one float32 CPU tensor per linear layer (its input, its weight, the gradient of its output)."""

    tensors: dict[str, list[torch.Tensor]] = field(repr=False)
    steps: int
    seed: int

    def flat(self, role: str) -> torch.Tensor:
        if role not in ROLES:
            raise ValueError(f"role must be one of {ROLES} (got {role!r})")
        return torch.cat([t.flatten() for t in self.tensors[role]])


MAX_COLLECT_STEPS = 10_000


def collect_tensors(steps: int = 10, seed: int = 0) -> TensorSample:
    """Train lesson 09's digits MLP (no dropout) in FP32 for ``steps`` AdamW steps of 64 images, then run one more
    forward and backward and keep, for every linear layer, its input, its weight and its output's gradient."""
    from .capstone import load_digits, make_model, split

    steps = as_int("steps", steps, minimum=1)
    if steps > MAX_COLLECT_STEPS:
        raise ValueError(f"steps must be at most {MAX_COLLECT_STEPS:,} (got {steps:,}): more would not finish in "
                         "reasonable time")
    seed = as_int("seed", seed, minimum=0)
    digits = load_digits()
    x_all, y_all = digits.tensors(split(len(digits), 0.2, seed=0)[0])
    model = make_model("small", seed=seed, dropout=0.0)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    order = torch.randperm(len(x_all), generator=torch.Generator().manual_seed(seed))
    for step in range(steps):
        idx = order[(step * 64) % (len(order) - 64):][:64]
        train_step(model, optimizer, x_all[idx], y_all[idx], autocast=False)
    kept: dict[str, list[torch.Tensor]] = {role: [] for role in ROLES}
    linears = [m for m in model.modules() if isinstance(m, nn.Linear)]
    grads: dict[int, torch.Tensor] = {}

    def on_forward(module, args, out):
        kept["input"].append(args[0].detach().clone())
        index = len(kept["input"]) - 1
        out.register_hook(lambda grad: grads.__setitem__(index, grad.detach().clone()))

    hooks = [m.register_forward_hook(on_forward) for m in linears]
    try:
        idx = order[:64]
        nn.functional.cross_entropy(model(x_all[idx]), y_all[idx]).backward()
    finally:
        for hook in hooks:
            hook.remove()
    kept["grad_output"] = [grads[i] for i in range(len(linears))]
    kept["weight"] = [m.weight.detach().clone() for m in linears]
    return TensorSample(kept, steps, seed)


def fate_table(sample: TensorSample) -> Table:
    """Per role, in its usual format: the share of non-zero values flushed to 0 and saturated, without a scale and
    with one scale per tensor (each layer's tensor its own ``max / amax``). A measurement (float training)."""
    if not isinstance(sample, TensorSample):
        raise TypeError(f"sample must be a TensorSample from collect_tensors() (got {type(sample).__name__})")
    rows = []
    for role in ROLES:
        dtype = ROLE_FORMAT[role]
        for label, scaled in (("none", False), ("per tensor", True)):
            fates = [fp8_fate(t, scale_from_amax(amax(t), dtype) if scaled else 1.0, dtype)
                     for t in sample.tensors[role]]
            nonzero = sum(f.nonzero for f in fates)
            rows.append({"tensor": role, "format": _name(dtype), "scale": label,
                         "flushed to 0": f"{sum(f.flushed for f in fates) / nonzero:.2%}",
                         "subnormal": f"{sum(f.subnormal for f in fates) / nonzero:.2%}",
                         "saturated": f"{sum(f.saturated for f in fates) / nonzero:.2%}"})
    return Table(rows, title="What a cast to FP8 does to the digits MLP's tensors")


def __getattr__(name: str):
    """``range_png`` and ``curves_png`` live in :mod:`ampcourse.widgets.lesson10` (a lesson with a widget module
    keeps its static figures there); the old names still work."""
    if name in ("range_png", "curves_png"):
        from .widgets import lesson10

        return getattr(lesson10, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# -------------------------------------------------------------------------------------- scaling granularity
@dataclass(frozen=True)
class Granularity:
    """One way to share scales: ``x_block`` and ``w_block`` are the (rows, columns) of the blocks that share one
    scale in the activation ``x`` (tokens × k) and the weight ``w`` (n × k) — ``None`` for a whole dimension — and
    ``power_of_two`` rounds every scale 448 / amax down to a power of two (torchao's ``round_scales_to_power_of_2``,
    TE's MXFP8 and torchao's RCEIL MX mode; MX's E8M0 scales hold nothing else — the OCP rule, torchao's FLOOR
    default, takes 2^(8 − floor(log2 amax)) instead, which can saturate). ``used_by``: where the scheme comes from."""

    name: str
    x_block: tuple[int | None, int | None]
    w_block: tuple[int | None, int | None]
    power_of_two: bool
    used_by: str


#: The four schemes of lesson 10's granularity section, its widget and exercise Task 5. Sources: torchao 0.18
#: (``Float8LinearConfig.from_recipe_name``: tensorwise without, rowwise with power-of-two scales — a test reads
#: it from the installed torchao), Transformer Engine's docs (``Float8BlockScaling``: 1×128 activation and
#: gradient blocks, 128×128 weight blocks, power-of-two FP32 scales by default; ``MXFP8BlockScaling``: 32 values
#: along a row share one E8M0 scale), DeepSeek-V3's report (1×128 / 128×128).
GRANULARITIES = (
    Granularity("per-tensor", (None, None), (None, None), False, "torchao tensorwise; TE current and delayed"),
    Granularity("rowwise", (1, None), (1, None), True, "torchao rowwise, rowwise_with_gw_hp"),
    Granularity("1x128 / 128x128", (1, 128), (128, 128), True, "TE Float8BlockScaling; DeepSeek-V3"),
    Granularity("MX: 1x32, E8M0", (1, 32), (1, 32), True, "TE MXFP8BlockScaling (Blackwell); torchao MX, RCEIL"),
)
#: Lesson 10's activation/weight pair: 64 tokens × 512 features (N(0, 1)) times a 256 × 512 weight (N(0, 0.02²)).
PAIR_SHAPE = (64, 512, 256)
OUTLIER_AT = (0, 5)  # (token, feature) of the one outlier in x
OUTLIER_LOG10 = tuple(float(v) for v in np.arange(0.0, 7.01, 0.5))  # the widget's positions: 10^0 … 10^7


def round_scale_to_power_of_2(scale: torch.Tensor) -> torch.Tensor:
    """Each float32 scale rounded *down* to a power of two, as torchao's ``round_scales_to_power_of_2`` does
    (``torch.exp2(torch.floor(torch.log2(scale)))`` in ``torchao/float8/float8_utils.py``): down, so that
    ``amax · scale`` stays at or below the format's max. Computed with ``torch.frexp`` (exact: it reads the
    exponent bits); torchao's ``exp2(floor(log2(s)))`` gives the same on the scales the course uses.

    Example:
        >>> round_scale_to_power_of_2(torch.tensor([448 / 3.0, 1.0, 0.3])).tolist()
        [128.0, 1.0, 0.25]
    """
    if not isinstance(scale, torch.Tensor) or scale.dtype != torch.float32:
        raise TypeError(f"scale must be a float32 tensor (got {getattr(scale, 'dtype', type(scale).__name__)})")
    if not bool((torch.isfinite(scale) & (scale > 0)).all()):
        raise ValueError("scale must hold positive finite numbers only")
    _, exponent = torch.frexp(scale)  # scale = m · 2**exponent, 0.5 <= m < 1: exact, unlike a float log2
    return torch.ldexp(torch.ones_like(scale), exponent - 1)


def _block_shape(name: str, t: torch.Tensor, block: Any) -> tuple[int, int]:
    if not isinstance(block, tuple) or len(block) != 2:
        raise TypeError(f"{name} must be a (rows, columns) tuple, None for a whole dimension (got {block!r})")
    shape = []
    for size, b in zip(t.shape, block, strict=True):
        if b is None:
            shape.append(int(size))
            continue
        b = as_int(name, b, minimum=1)
        if size % b:
            raise ValueError(f"{name}={block} does not tile a {tuple(t.shape)} tensor: {size} is not a multiple "
                             f"of {b}")
        shape.append(b)
    return shape[0], shape[1]


def block_cast(t: torch.Tensor, block: tuple[int | None, int | None], fmt: str | torch.dtype = "e4m3",
               power_of_two: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """Cast a 2-D tensor to FP8 with one scale per ``block`` (rows, columns; ``None``: the whole dimension):
    ``scale = max / amax(block)`` in float32 (rounded down to a power of two if ``power_of_two``), then the
    saturating cast of ``t · scale``. Returns ``(t_fp8, scales)``, ``scales`` of shape (rows / block rows,
    columns / block columns): the factors ``t`` was multiplied by. ``(None, None)`` is per-tensor scaling,
    ``(1, None)`` rowwise, ``(1, 32)`` with ``power_of_two`` MX-style.

    Example:
        >>> t8, s = block_cast(torch.tensor([[1.0, 2.0], [0.5, 0.25]]), (1, None))
        >>> s.flatten().tolist(), t8.float().tolist()
        ([224.0, 896.0], [[224.0, 448.0], [448.0, 224.0]])
    """
    t = _float_tensor("t", t)
    if t.dim() != 2:
        raise ValueError(f"t must be 2-D (got shape {tuple(t.shape)})")
    if not isinstance(power_of_two, bool):
        raise TypeError(f"power_of_two must be True or False (got {power_of_two!r})")
    dtype = fp8_dtype(fmt)
    br, bc = _block_shape("block", t, block)
    rows, cols = t.shape[0] // br, t.shape[1] // bc
    t32 = t.detach().float()
    blocks = t32.reshape(rows, br, cols, bc)
    amaxes = blocks.abs().amax(dim=(1, 3)).double()
    scales = (torch.finfo(dtype).max / amaxes.clamp(min=EPS)).float()  # torchao's amax_to_scale
    if power_of_two:
        scales = round_scale_to_power_of_2(scales)
    top = torch.finfo(dtype).max
    scaled = blocks * scales[:, None, :, None]
    return scaled.clamp(-top, top).to(dtype).reshape(t.shape), scales


def block_dequantize(t_fp8: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    """The values an FP8 tensor from :func:`block_cast` stands for, ``t_fp8 / scale`` per block, in float64 (an
    FP8 value divided by a float32 scale: exact to float64's 53 bits; exactly so for power-of-two scales)."""
    if not isinstance(t_fp8, torch.Tensor) or t_fp8.dtype not in FORMATS.values() or t_fp8.dim() != 2:
        raise TypeError("t_fp8 must be a 2-D FP8 tensor from block_cast")
    if not isinstance(scales, torch.Tensor) or scales.dim() != 2 or any(
            s == 0 or n % s for n, s in zip(t_fp8.shape, scales.shape, strict=True)):
        raise ValueError(f"scales must be the 2-D scales block_cast returned with t_fp8 (got "
                         f"{getattr(scales, 'shape', type(scales).__name__)} for {tuple(t_fp8.shape)})")
    rows, cols = scales.shape
    blocks = t_fp8.double().reshape(rows, t_fp8.shape[0] // rows, cols, t_fp8.shape[1] // cols)
    return (blocks / scales.double()[:, None, :, None]).reshape(t_fp8.shape)


def _check_log10_outlier(log10_outlier: Any) -> float:
    if isinstance(log10_outlier, bool) or not isinstance(log10_outlier, (int, float)):
        raise TypeError(f"log10_outlier must be a number from 0 to 7 (got {log10_outlier!r})")
    if not 0 <= log10_outlier <= 7:
        raise ValueError(f"log10_outlier must be from 0 to 7: an outlier of 10^0 to 10^7 (got {log10_outlier})")
    return float(log10_outlier)


def outlier_pair(log10_outlier: float = 0.0, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Lesson 10's activation/weight pair (:data:`PAIR_SHAPE`): ``x`` (tokens × k, N(0, 1)) with one value,
    ``x[OUTLIER_AT]``, set to ``10**log10_outlier``, and ``w`` (n × k, N(0, 0.02²)), both float32. Drawn with
    NumPy's generator, so the values are the same on every CPU and under every torch kernel setting."""
    log10_outlier = _check_log10_outlier(log10_outlier)
    seed = as_int("seed", seed, minimum=0)
    tokens, k, n = PAIR_SHAPE
    rng = np.random.default_rng(seed)
    x = torch.from_numpy(rng.standard_normal((tokens, k), dtype=np.float32))
    w = torch.from_numpy(rng.standard_normal((n, k), dtype=np.float32) * np.float32(0.02))
    x[OUTLIER_AT] = 10.0 ** log10_outlier
    return x, w


@dataclass(frozen=True)
class GranularityResult:
    """One scheme on one outlier: ``other_rows_error`` — relative error of the product ``x @ w.T`` on the tokens
    without the outlier; ``neighbours_error`` — on the outlier's own token, the error of the part of its product
    that the token's other values make; ``flushed_other_rows`` / ``flushed_neighbours``: how many of those values
    of ``x`` the cast flushed to 0 (of ``n_other_rows`` / ``n_neighbours``)."""

    name: str
    log10_outlier: float
    other_rows_error: float
    neighbours_error: float
    flushed_other_rows: int
    flushed_neighbours: int
    n_other_rows: int
    n_neighbours: int


def _relative(got: torch.Tensor, want: torch.Tensor) -> float:
    return float((got - want).norm() / want.norm())


@contextlib.contextmanager
def _one_thread():
    """Run small tensor ops on one thread: on a loaded 2-core machine, two threads on 32k-element ops spend more
    time waiting for each other than computing (5x slower here)."""
    from .device import one_thread

    with one_thread():
        yield


@functools.lru_cache(maxsize=2)
def _weight_side(dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor, tuple[torch.Tensor, ...]]:
    """x without its outlier, w in float64, and w dequantised under each scheme (the outlier is only in x)."""
    x, w = outlier_pair(0.0)
    with _one_thread():
        wq = tuple(block_dequantize(*block_cast(w, g.w_block, dtype, g.power_of_two)) for g in GRANULARITIES)
    return x, w.double(), wq


@functools.lru_cache(maxsize=64)
def _granularity_errors(log10_outlier: float, dtype: torch.dtype) -> tuple[GranularityResult, ...]:
    base, w64, wqs = _weight_side(dtype)
    x = base.clone()
    x[OUTLIER_AT] = 10.0 ** log10_outlier
    row, col = OUTLIER_AT
    x64 = x.double()
    others = torch.cat([x64[:row], x64[row + 1:]])
    ref_rows = others @ w64.T
    neighbours = x64[row].clone()
    neighbours[col] = 0.0
    ref_n = neighbours @ w64.T
    n_other, n_neigh = int((others != 0).sum()), int((neighbours != 0).sum())
    results = []
    for g, wq in zip(GRANULARITIES, wqs, strict=True):
        xq = block_dequantize(*block_cast(x, g.x_block, dtype, g.power_of_two))
        xq_others = torch.cat([xq[:row], xq[row + 1:]])
        xq_n = xq[row].clone()
        xq_n[col] = 0.0
        results.append(GranularityResult(
            g.name, log10_outlier, _relative(xq_others @ wq.T, ref_rows), _relative(xq_n @ wq.T, ref_n),
            int(((xq_others == 0) & (others != 0)).sum()), int(((xq_n == 0) & (neighbours != 0)).sum()),
            n_other, n_neigh))
    return tuple(results)


def granularity_errors(log10_outlier: float, fmt: str | torch.dtype = "e4m3") -> list[GranularityResult]:
    """Each scheme of :data:`GRANULARITIES` on :func:`outlier_pair` with an outlier of ``10**log10_outlier``:
    ``x`` and ``w`` cast to FP8 with the scheme's blocks, dequantised and multiplied in float64. An emulation, exact
    in what matters: every FP8 value and scale is exact in float64, so the error is the casts' alone (no
    accumulator, no kernel), the same on every CPU up to float64 summation order. Cached.

    Example:
        >>> [r.flushed_neighbours for r in granularity_errors(7.0)]  # of the outlier's 511 neighbours
        [511, 511, 127, 31]
    """
    log10_outlier, dtype = _check_log10_outlier(log10_outlier), fp8_dtype(fmt)
    with _one_thread():
        return list(_granularity_errors(log10_outlier, dtype))


def granularity_table(log10_outliers: Sequence[float] = (0.0, 4.0, 5.0, 6.0)) -> Table:
    """:func:`granularity_errors` at a few outliers, one row per (outlier, scheme): a fact (float64 emulation)."""
    if isinstance(log10_outliers, (str, bytes)) or not isinstance(log10_outliers, Sequence) or not log10_outliers:
        raise TypeError(f"log10_outliers must be a non-empty list of numbers (got {log10_outliers!r})")
    rows = []
    for p in log10_outliers:
        for r in granularity_errors(p):
            rows.append({"outlier": f"10^{p:g}", "scaling": r.name,
                         "error: other tokens": f"{r.other_rows_error:.1%}",
                         "error: token 0": f"{r.neighbours_error:.1%}",
                         "flushed: other tokens": f"{r.flushed_other_rows} / {r.n_other_rows}",
                         "flushed: token 0": f"{r.flushed_neighbours} / {r.n_neighbours}"})
    return Table(rows, title="x @ w.T in E4M3 with one outlier in x (float64 emulation of the casts)")


# ------------------------------------------------------------------------------------ recipes and layer choice
TORCHAO_RECIPES = ("tensorwise", "rowwise", "rowwise_with_gw_hp")
#: What torchao's ``Float8LinearRecipeName`` docstring (torchao/float8/config.py) says each recipe is for.
TORCHAO_RECIPE_USE = {"tensorwise": "fastest; the default", "rowwise": "more accurate",
                      "rowwise_with_gw_hp": "most accurate"}
_TE_DOCS = "https://github.com/NVIDIA/TransformerEngine/blob/main/docs/features/low_precision_training/"
#: Transformer Engine's recipes, from its docs (``docs/api/common.rst`` for the defaults, and
#: ``docs/features/low_precision_training/<recipe>/<recipe>.rst``); nothing here is run.
TE_RECIPES = (
    {"recipe": "TE DelayedScaling", "one scale per": "tensor, amax history (1024, max)",
     "x / w / grad": "E4M3 / E4M3 / E5M2", "GPU": "SM 8.9+", "for": "one read per cast, not two",
     "source": _TE_DOCS + "fp8_delayed_scaling/fp8_delayed_scaling.rst"},
    {"recipe": "TE Float8CurrentScaling", "one scale per": "tensor, this step's amax",
     "x / w / grad": "E4M3 / E4M3 / E5M2", "GPU": "SM 8.9+", "for": "the simplest recipe",
     "source": _TE_DOCS + "fp8_current_scaling/fp8_current_scaling.rst"},
    {"recipe": "TE Float8BlockScaling", "one scale per": "1x128 (x, grad), 128x128 (w); 2^k",
     "x / w / grad": "E4M3 / E4M3 / E4M3", "GPU": "SM 9.0+", "for": "DeepSeek-V3's scheme",
     "source": _TE_DOCS + "fp8_blockwise_scaling/fp8_blockwise_scaling.rst"},
    {"recipe": "TE MXFP8BlockScaling", "one scale per": "32 values of a row, E8M0 (2^k)",
     "x / w / grad": "E4M3 / E4M3 / E4M3", "GPU": "SM 10.0, 10.3", "for": "Blackwell's own",
     "source": _TE_DOCS + "mxfp8/mxfp8.rst"},
)


def _format_name(dtype: torch.dtype) -> str:
    return "E4M3" if dtype == E4M3 else "E5M2" if dtype == E5M2 else str(dtype).removeprefix("torch.")


def _cast_text(cast) -> str:
    if cast.scaling_type.name == "DISABLED":
        return "bf16"
    return f"{_format_name(cast.target_dtype)} {cast.scaling_granularity.value}"


def recipe_table() -> Table:
    """torchao's three recipes, read from the installed ``Float8LinearConfig.from_recipe_name`` (what one scale
    covers, the format of input, weight and output gradient), next to Transformer Engine's four
    (:data:`TE_RECIPES`, from its docs). GPU: the compute capability each needs (FP8 Tensor Cores: 8.9+; which
    GPUs run torchao's rowwise CUTLASS kernels its config does not say: see its README)."""
    float8 = import_torchao()
    rows = []
    for recipe in TORCHAO_RECIPES:
        c = float8.Float8LinearConfig.from_recipe_name(recipe)
        per = "tensor" if c.cast_config_input.scaling_granularity.value == "tensorwise" else "row"
        if c.round_scales_to_power_of_2:
            per += "; 2^k"
        if c.cast_config_input_for_grad_weight.scaling_type.name == "DISABLED":
            per += "; grad_w in bf16"
        rows.append({"recipe": f"torchao {recipe}", "one scale per": per,
                     "x / w / grad": " / ".join(_format_name(t.target_dtype) for t in (
                         c.cast_config_input, c.cast_config_weight, c.cast_config_grad_output)),
                     "GPU": "SM 8.9+" if per == "tensor" else "see README", "for": TORCHAO_RECIPE_USE[recipe]})
    rows += [{key: value for key, value in r.items() if key != "source"} for r in TE_RECIPES]
    return Table(rows, title="FP8 training recipes")


def gemm_table() -> Table:
    """The operands of the three matrix products of a torchao ``Float8Linear`` under each recipe, read from the
    installed configs: output = x @ w.T, grad_input = grad @ w, grad_weight = grad.T @ x."""
    float8 = import_torchao()
    rows = []
    for recipe in TORCHAO_RECIPES:
        c = float8.Float8LinearConfig.from_recipe_name(recipe)
        rows.append({"recipe": recipe,
                     "output": f"{_cast_text(c.cast_config_input)} x {_cast_text(c.cast_config_weight)}",
                     "grad_input": f"{_cast_text(c.cast_config_grad_output)} x "
                                   f"{_cast_text(c.cast_config_weight_for_grad_input)}",
                     "grad_weight": f"{_cast_text(c.cast_config_grad_output_for_grad_weight)} x "
                                    f"{_cast_text(c.cast_config_input_for_grad_weight)}",
                     "fast accum. (output)": str(c.gemm_config_output.use_fast_accum)})
    return Table(rows, title="torchao: the operands of each GEMM")


def torchao_filter(recipe: str = "tensorwise") -> Callable[[nn.Module, str], bool]:
    """torchao's own layer filter for a recipe (``torchao.float8._auto_filter_for_recipe(recipe, [])``): which
    ``nn.Linear`` it would convert — sizes multiples of 16 and above thresholds measured on H100."""
    if recipe not in ("tensorwise", "rowwise"):
        raise ValueError(f"recipe must be 'tensorwise' or 'rowwise': torchao 0.18 has automatic filters for those "
                         f"two only (got {recipe!r})")
    return import_torchao()._auto_filter_for_recipe(recipe, [])


def conversion_plan(model: nn.Module, recipes: Sequence[str] = ("tensorwise", "rowwise")) -> Table:
    """Every ``nn.Linear`` of ``model`` with its weight's (N, K) and whether torchao's filter (:func:`torchao_filter`)
    converts it under each recipe. Works on a model on the meta device (no memory), as the lesson does."""
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module (got {type(model).__name__})")
    if isinstance(recipes, str) or not recipes:
        raise TypeError(f"recipes must be a non-empty list such as ['tensorwise'] (got {recipes!r})")
    filters = {recipe: torchao_filter(recipe) for recipe in recipes}
    rows = []
    for fqn, module in model.named_modules():
        if isinstance(module, nn.Linear):
            n, k = module.weight.shape
            rows.append({"layer": fqn, "weight (N, K)": f"({n}, {k})",
                         **{f"{recipe} converts": "yes" if keep(module, fqn) else "no"
                            for recipe, keep in filters.items()}})
    if not rows:
        raise ValueError("model has no nn.Linear: there is nothing torchao.float8 would convert")
    return Table(rows, title="What torchao's automatic filter converts")


def filter_grid(recipe: str, sizes: Sequence[int] = (1024, 2048, 4096, 8192, 16384)) -> Table:
    """torchao's filter on a grid of weight sizes (rows: K = in_features, columns: N = out_features): 'yes' where
    it converts. The thresholds come from running the installed filter on meta-device linears, not from a copy."""
    keep = torchao_filter(recipe)
    sizes = [as_int("size", s, minimum=16) for s in sizes]
    rows = []
    for k in sizes:
        row = {"K (in) \\ N (out)": str(k)}
        for n in sizes:
            row[str(n)] = "yes" if keep(nn.Linear(k, n, device="meta"), "layer") else "."
        rows.append(row)
    return Table(rows, title=f"torchao's {recipe} filter: converted?")


# --------------------------------------------------------------------------------- check FP8 on your own model
#: A layer whose FP8 output is further than this from bf16 (SQNR in dB) deserves a look: 20 dB is a 10%
#: relative error, nearly 3x the 3.7% (28.6 dB) of an E4M3 product of well-behaved tensors, and what the
#: granularity section measured once an outlier took over a per-tensor scale (12.9% at 10^5).
SQNR_FLOOR_DB = 20.0


@dataclass(frozen=True)
class LayerCheck:
    """One converted layer: ``sqnr_db``, the SQNR of its output against the bf16 layer's when it gets the bf16
    model's input (this layer's own error); ``cumulative_db``, the same with the FP8 model's own input (the error
    of every FP8 layer up to this one); and the amaxes and FP8 scales its input and weight got (the smallest and
    largest scale, for rowwise recipes)."""

    name: str
    sqnr_db: float
    input_amax: float
    weight_amax: float
    input_scales: tuple[float, float]
    weight_scales: tuple[float, float]
    cumulative_db: float | None = None

    @property
    def suspect(self) -> bool:
        return self.sqnr_db < SQNR_FLOOR_DB


@dataclass(frozen=True, eq=False)
class FP8Check:
    """What :func:`check_fp8` found: the converted layers, one :class:`LayerCheck` each, and the bf16 and FP8 loss
    on the batch."""

    converted: tuple[str, ...]
    skipped: tuple[str, ...]
    layers: tuple[LayerCheck, ...]
    recipe: str
    emulated: bool

    def table(self) -> Table:
        return Table([{"layer": c.name, "SQNR vs bf16 (dB)": f"{c.sqnr_db:.1f}",
                       "end to end (dB)": "" if c.cumulative_db is None else f"{c.cumulative_db:.1f}",
                       "input amax": f"{c.input_amax:.3g}", "weight amax": f"{c.weight_amax:.3g}",
                       "input scale": _span(c.input_scales), "weight scale": _span(c.weight_scales),
                       f"below {SQNR_FLOOR_DB:g} dB": "yes" if c.suspect else "no"} for c in self.layers],
                     title=f"FP8 ({self.recipe}{', emulated' if self.emulated else ''}) against bf16, layer by layer")


def _span(pair: tuple[float, float]) -> str:
    return f"{pair[0]:.4g}" if pair[0] == pair[1] else f"{pair[0]:.4g} – {pair[1]:.4g}"


def check_fp8(model: nn.Module, batch: torch.Tensor, *, recipe: str = "tensorwise",
              module_filter_fn: Callable[[nn.Module, str], bool] | None = None) -> FP8Check:
    """Convert a *copy* of ``model`` with torchao (``recipe``; ``module_filter_fn``, default :func:`fp8_friendly`),
    run both on ``batch`` under bf16 autocast, and compare every converted layer's output with the bf16 model's
    (SQNR, torchao's ``compute_error``) twice: per layer (the FP8 layer run on the input the bf16 layer got) and
    end to end (on the FP8 model's own input, so earlier layers' errors add up); record each layer's input and
    weight amax and the scales torchao's ``tensor_to_scale`` gives them. Emulated where the device has no FP8
    Tensor Cores. ``model`` is not changed.
    """
    import copy

    from torch import nn as _nn

    if not isinstance(model, _nn.Module):
        raise TypeError(f"model must be a torch.nn.Module (got {type(model).__name__})")
    batch = _float_tensor("batch", batch)
    if recipe not in TORCHAO_RECIPES:
        raise ValueError(f"recipe must be one of {TORCHAO_RECIPES} (got {recipe!r})")
    if module_filter_fn is not None and not callable(module_filter_fn):
        raise TypeError("module_filter_fn must be None or a function (module, fqn) -> bool")
    float8 = import_torchao()
    utils = importlib.import_module("torchao.float8.float8_utils")
    device = batch.device
    emulated = not fp8_tensor_cores(device)
    config = float8.Float8LinearConfig.from_recipe_name(recipe)
    config = type(config)(**{**{f.name: getattr(config, f.name) for f in config.__dataclass_fields__.values()},
                             "emulate": emulated})
    reference, converted = copy.deepcopy(model), copy.deepcopy(model)
    float8.convert_to_float8_training(converted, config=config, module_filter_fn=module_filter_fn or fp8_friendly)
    linear_class = importlib.import_module("torchao.float8.float8_linear").Float8Linear
    names = tuple(n for n, m in converted.named_modules() if isinstance(m, linear_class))
    if not names:
        raise ValueError("no layer was converted: none passes the module filter (sizes multiples of 16?)")
    skipped = tuple(n for n, m in converted.named_modules() if type(m) is _nn.Linear)
    outputs: dict[str, dict[str, torch.Tensor]] = {"bf16": {}, "fp8": {}}
    inputs: dict[tuple[str, str], torch.Tensor] = {}

    def recorder(kind: str, name: str):
        def hook(module, args, out):
            outputs[kind][name] = out.detach().float()
            inputs[kind, name] = args[0].detach()
        return hook

    hooks = [m.register_forward_hook(recorder("bf16", n)) for n, m in reference.named_modules() if n in names]
    hooks += [m.register_forward_hook(recorder("fp8", n)) for n, m in converted.named_modules() if n in names]
    try:
        with torch.no_grad(), torch.autocast(device_type=device.type, dtype=torch.bfloat16):
            reference(batch)
            converted(batch)
    finally:
        for hook in hooks:
            hook.remove()
    modules = dict(converted.named_modules())
    layers = []
    for name in names:
        cfg = modules[name].config
        with torch.no_grad(), torch.autocast(device_type=device.type, dtype=torch.bfloat16):
            own = modules[name](inputs["bf16", name]).float()  # this layer alone, on the bf16 model's input
        scales = []
        for tensor, cast in ((inputs["fp8", name], cfg.cast_config_input),
                             (modules[name].weight, cfg.cast_config_weight)):
            s = utils.tensor_to_scale(tensor.detach().float(), cast.target_dtype,
                                      scaling_granularity=cast.scaling_granularity, axiswise_dim=-1,
                                      round_scales_to_power_of_2=cfg.round_scales_to_power_of_2)
            scales.append((float(s.min()), float(s.max())))
        sqnr = float(utils.compute_error(outputs["bf16"][name], own))
        cumulative = float(utils.compute_error(outputs["bf16"][name], outputs["fp8"][name]))
        layers.append(LayerCheck(name, sqnr, float(amax(inputs["fp8", name].float())),
                                 float(amax(modules[name].weight.detach())), scales[0], scales[1], cumulative))
    return FP8Check(names, skipped, tuple(layers), recipe, emulated)


#: Lesson 10's loss verdict: FP8's mean loss over the last steps within this fraction of bf16's, seed by seed
#: (|gap| per seed, so gaps of opposite signs cannot cancel). A consistent gap larger than this fails it.
LOSS_GAP_TOLERANCE = 0.10


def loss_gap(runs: dict[str, list[PrecisionRun]], reference: str = "bf16", candidate: str = "fp8",
             window: int = 16) -> tuple[list[float], str]:
    """Per seed, the relative gap of the mean training loss over the last ``window`` steps, ``(candidate −
    reference) / reference``, and lesson 09's verdict rule on those losses (``capstone.paired_verdict``, fed
    the negated losses so that "better" means a lower loss): ``"within noise"``, ``"fp8 better"`` or ``"fp8
    worse"``."""
    from .capstone import paired_verdict

    _check_runs(runs)
    for key in (reference, candidate):
        if key not in runs:
            raise ValueError(f"runs has no {key!r} runs (it has {sorted(runs)})")
    if len(runs[reference]) != len(runs[candidate]):
        raise ValueError("reference and candidate must have one run per seed, the same seeds")
    window = as_int("window", window, minimum=1)
    if window > min(len(r.losses) for r in runs[reference] + runs[candidate]):
        raise ValueError(f"window={window} is longer than a run ({min(len(r.losses) for r in runs[reference])} "
                         "steps)")
    final = {key: [statistics.fmean(r.losses[-window:]) for r in runs[key]] for key in (reference, candidate)}
    gaps = [(c - r) / r for r, c in zip(final[reference], final[candidate], strict=True)]
    verdict = paired_verdict([-v for v in final[reference]], [-v for v in final[candidate]])
    return gaps, verdict.replace("amp", candidate)


def profile_fp8(model: nn.Module, batch: torch.Tensor, steps: int = 20) -> str:
    """On a CUDA GPU with FP8 Tensor Cores: count the ``aten::_scaled_mm`` calls of one forward and backward of
    the torchao-converted ``model`` in ``torch.profiler`` (the FP8 GEMMs: 3 per linear), then time ``steps``
    forward+backward passes of bf16 and FP8 copies (CUDA events, after warm-up). Elsewhere it changes nothing
    and says what it would do. ``model`` itself is not changed."""
    import copy

    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module (got {type(model).__name__})")
    batch = _float_tensor("batch", batch)
    steps = as_int("steps", steps, minimum=1)
    if not fp8_tensor_cores(batch.device):
        return (f"{batch.device.type}: no FP8 Tensor Cores, so nothing to profile. On a GPU with compute capability "
                "8.9+ this counts the aten::_scaled_mm calls of one forward and backward in torch.profiler (3 per "
                "converted linear: output, grad_input, grad_weight) and times bf16 against FP8 steps.")
    float8 = import_torchao()
    fp8_model = float8.convert_to_float8_training(copy.deepcopy(model), module_filter_fn=fp8_friendly)
    bf16_model = copy.deepcopy(model)

    def step(m):
        with torch.autocast(device_type="cuda", dtype=torch.bfloat16):
            m(batch).float().pow(2).mean().backward()

    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU,
                                            torch.profiler.ProfilerActivity.CUDA]) as prof:
        step(fp8_model)
    calls = sum(e.count for e in prof.key_averages() if e.key == "aten::_scaled_mm")
    times = {}
    for label, m in (("bf16", bf16_model), ("fp8", fp8_model)):
        for _ in range(3):
            step(m)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(steps):
            step(m)
        end.record()
        torch.cuda.synchronize()
        times[label] = start.elapsed_time(end) / steps
    linear_class = importlib.import_module("torchao.float8.float8_linear").Float8Linear
    n = sum(isinstance(m, linear_class) for m in fp8_model.modules())
    return (f"{torch.cuda.get_device_name(batch.device)}: {calls} aten::_scaled_mm calls in one step for {n} "
            f"converted linears (3 each expected); forward+backward {times['bf16']:.2f} ms bf16, "
            f"{times['fp8']:.2f} ms FP8 (eager, no torch.compile)")
