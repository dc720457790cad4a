"""Honest benchmarks for lesson 06: step time, memory, achieved FLOP/s and the fraction of peak.

Timing (:func:`time_fn`)
    Warm-up calls are run first and not timed (allocations, cuDNN/cuBLAS heuristics, torch.compile).
    Each timed call is bracketed by a device synchronisation (CUDA and MPS run asynchronously: without
    it the clock would stop when the work is *queued*, not done). On CUDA the elapsed time comes from
    ``torch.cuda.Event(enable_timing=True)`` pairs; elsewhere from ``time.perf_counter``. Many repeats;
    the median and the inter-quartile range are reported (a mean is dragged by one slow outlier).

Memory
    :func:`saved_activation_bytes` counts, on any device, the bytes autograd keeps for the backward pass
    (with ``torch.autograd.graph.saved_tensors_hooks``), each storage once. Storages of the *parameters*
    themselves (a ``Linear`` saves its weight) are not activations: they are reported apart
    (``parameter_bytes``) and not counted. Casts of parameters that a region saves (autocast saves the
    bfloat16/float16 copy of each weight it multiplies with) are real extra memory, but they are per
    step, not per sample: they are reported apart too (``parameter_copies``). :func:`state_bytes` counts
    parameters, gradients and optimizer state by dtype; :func:`peak_memory_bytes` reads the CUDA
    allocator's peak (``None`` where no allocator statistics exist, e.g. on the CPU).

FLOP/s
    :func:`matmul_flops` (2·m·k·n: one multiply and one add per term), :func:`achieved_flops`,
    :data:`DATASHEET_PEAKS` (dense figures from NVIDIA's datasheets — *not* the "with sparsity" ones,
    which are twice as high), :func:`peak_flops` and :func:`fraction_of_peak`.

Steps
    :func:`benchmark_step` times one training step of an MLP in one of :data:`MODES`;
    :func:`compare_precisions` times several modes in the same process, interleaved (rounds in
    alternating order, so a drift of the machine's speed reaches every mode alike), and reports
    speed-ups against FP32 from that same run, with a warning when the rounds disagree.
    :func:`bf16_sweep` does the same for FP32 against one AMP mode across layer widths.
"""

from __future__ import annotations

import contextlib
import math
import numbers
import re
import statistics
import time
import warnings
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F

from .tables import Table
from .validate import as_int, as_positive

__all__ = [
    "CLEAR_DIFFERENCE", "judge", "ProductComparison", "compare_products", "has_bf16_hardware", "mkldnn_fp32_precision",
    "mlp_problem", "native_stderr_silenced", "train_step_fn",
    "ActivationReport", "BenchmarkError", "Comparison", "DATASHEET_PEAKS", "MODES", "MatmulResult", "MemorySummary",
    "StepResult", "Timing", "achieved_flops", "available_modes", "benchmark_step", "cast_cost", "compare_precisions",
    "cpu_features", "format_bytes", "format_flops", "format_time", "fraction_of_peak", "largest_batch_estimate",
    "make_mlp", "matmul_flops", "mlp_step_flops", "tf32_api", "fp32_precision_settings", "SweepPoint",
    "Bf16Sweep", "bf16_sweep", "matmul_throughput", "measured_peak_flops", "memory_summary",
    "mode_unavailable_reason", "peak_flops", "peak_memory_bytes", "saved_activation_bytes", "state_bytes",
    "synchronize", "time_fn",
]

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


# --- timing ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Timing:
    """Timed runs in seconds (warm-up runs excluded; ``warmup`` says how many were run first)."""

    times: tuple[float, ...]
    warmup: int

    def __post_init__(self) -> None:
        if not self.times:
            raise ValueError("times must hold at least one timed run")

    def _quartiles(self) -> tuple[float, float]:
        if len(self.times) == 1:
            return self.times[0], self.times[0]
        q1, _, q3 = statistics.quantiles(self.times, n=4, method="inclusive")
        return q1, q3

    @property
    def median(self) -> float:
        return statistics.median(self.times)

    @property
    def p25(self) -> float:
        return self._quartiles()[0]

    @property
    def p75(self) -> float:
        return self._quartiles()[1]

    @property
    def iqr(self) -> float:
        """Inter-quartile range p75 − p25: the spread of the middle half of the runs."""
        q1, q3 = self._quartiles()
        return q3 - q1

    @property
    def mean(self) -> float:
        return statistics.fmean(self.times)

    @property
    def runs(self) -> int:
        return len(self.times)

    def __str__(self) -> str:
        # every number carries its unit, so the notebooks' timing sanitizer catches each of them
        return f"{format_time(self.median)} (IQR {format_time(self.p25)} – {format_time(self.p75)}, {self.runs} runs)"


def _as_device(device: Any, name: str = "device", available: bool = True) -> torch.device:
    from .validate import as_device

    return as_device(name, device, available=available)


def synchronize(device: torch.device | str | None) -> None:
    """Wait until the device has finished all queued work (CUDA, MPS); nothing to wait for on the CPU."""
    device = torch.device("cpu") if device is None else _as_device(device)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device.type == "mps":
        torch.mps.synchronize()


def _run(fn: Callable[[], Any], what: str) -> Any:
    try:
        return fn()
    except Exception as err:
        raise BenchmarkError(f"the benchmarked function raised {type(err).__name__} during {what}: {err}") from err


def time_fn(fn: Callable[[], Any], *, warmup: int = 3, repeats: int = 20, device: torch.device | str | None = None,
            clock: Callable[[], float] | None = None, sync: Callable[[], None] | None = None) -> Timing:
    """Time ``fn()``: ``warmup`` untimed calls, then ``repeats`` timed calls, each synchronised.

    Args:
        fn: a function of no arguments (wrap yours: ``lambda: step(model, x)``).
        warmup: untimed calls first (>= 0).
        repeats: timed calls (>= 1).
        device: where ``fn`` runs (default CPU): decides how to synchronise and, on CUDA, the use of
            CUDA events.
        clock: a function returning seconds (default ``time.perf_counter``; on CUDA, events are used
            unless a clock is given). Inject a fake clock to test.
        sync: waits for the device (default :func:`synchronize` on ``device``). Inject a fake to test.

    Each timed call is ``sync(); start = clock(); fn(); sync(); stop = clock()``.

    Raises:
        TypeError/ValueError: bad arguments. BenchmarkError: ``fn`` raised (the message says which call).

    >>> ticks = iter(range(100))
    >>> timing = time_fn(lambda: None, warmup=2, repeats=3, clock=lambda: next(ticks))
    >>> timing.times, timing.warmup
    ((1.0, 1.0, 1.0), 2)
    """
    if not callable(fn):
        raise TypeError(f"fn must be a function of no arguments (got {type(fn).__name__} {fn!r})")
    warmup = as_int("warmup", warmup, minimum=0)
    repeats = as_int("repeats", repeats, minimum=1)
    device = torch.device("cpu") if device is None else _as_device(device)
    if clock is not None and not callable(clock):
        raise TypeError(f"clock must be a function returning seconds (got {clock!r})")
    if sync is not None and not callable(sync):
        raise TypeError(f"sync must be a function of no arguments (got {sync!r})")
    wait = sync if sync is not None else (lambda: synchronize(device))
    for i in range(warmup):
        _run(fn, f"warm-up call {i + 1} of {warmup}")
    use_events = clock is None and device.type == "cuda"
    times = []
    if use_events:
        wait()
        pairs = []
        for i in range(repeats):
            start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            wait()
            start.record()
            _run(fn, f"timed call {i + 1} of {repeats}")
            stop.record()
            pairs.append((start, stop))
        wait()
        times = [start.elapsed_time(stop) / 1e3 for start, stop in pairs]  # elapsed_time is in ms
    else:
        now = clock if clock is not None else time.perf_counter
        for i in range(repeats):
            wait()
            start = now()
            _run(fn, f"timed call {i + 1} of {repeats}")
            wait()
            times.append(now() - start)
    bad = [t for t in times if not 0 <= float(t) < math.inf]
    if bad:
        raise ValueError(f"clock gave a duration of {bad[0]!r} s: it must be a clock that never goes back and "
                         "returns finite seconds, like time.perf_counter")
    return Timing(tuple(float(t) for t in times), warmup)


# --- memory ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class ActivationReport:
    """What autograd saved for backward during one call, each storage counted once.

    Attributes:
        by_dtype: bytes of saved activations by dtype (tensors computed from the data).
        parameter_bytes: bytes of saved storages that *are* parameters (not counted: they exist anyway).
        parameter_copies: bytes by dtype of saved casts/views-with-a-copy of parameters (autocast's
            float16/bfloat16 weights): extra memory, but fixed per step, not per sample.
        tensors: how many saved tensors were seen (a storage may be saved several times).
    """

    by_dtype: dict[torch.dtype, int]
    parameter_bytes: int = 0
    parameter_copies: dict[torch.dtype, int] = field(default_factory=dict)
    tensors: int = 0

    @property
    def total(self) -> int:
        """Activation bytes (parameters and their copies excluded)."""
        return sum(self.by_dtype.values())

    @property
    def copies_total(self) -> int:
        return sum(self.parameter_copies.values())

    @property
    def held_for_backward(self) -> int:
        """Activations plus parameter copies: the memory the graph holds beyond the parameters."""
        return self.total + self.copies_total


_PASS_THROUGH = ("ToCopyBackward", "TBackward", "ViewBackward", "TransposeBackward", "PermuteBackward",
                 "ExpandBackward", "UnsafeViewBackward", "AliasBackward", "ReshapeAliasBackward")


def _derived_from_parameter(tensor: torch.Tensor, parameters: set[int]) -> bool:
    """True if ``tensor`` is a cast/view chain of one parameter (e.g. autocast's bf16 copy of a weight)."""
    node = tensor.grad_fn
    for _ in range(6):
        if node is None:
            return False
        name = type(node).__name__
        if name == "AccumulateGrad":
            return id(node.variable) in parameters
        if not name.startswith(_PASS_THROUGH):
            return False
        nexts = [n for n, _ in node.next_functions if n is not None]
        if len(nexts) != 1:
            return False
        node = nexts[0]
    return False


def saved_activation_bytes(fn: Callable[[], Any],
                           parameters: Iterable[torch.Tensor] | torch.nn.Module = ()) -> ActivationReport:
    """Bytes autograd saves for backward while ``fn()`` runs (usually a forward pass and a loss).

    Each storage is counted once, with its full size (a saved view keeps its whole storage alive).
    Storages shared with ``parameters`` (a module or an iterable of tensors) are parameters, not
    activations; leaf tensors that require grad are treated as parameters too. Saved tensors computed
    from a parameter by casts and views only (autocast's low-precision weight copies) go to
    ``parameter_copies``. Works on every device, without running backward.

    >>> lin = torch.nn.Linear(4, 3)
    >>> x = torch.randn(2, 4)
    >>> saved_activation_bytes(lambda: torch.relu(lin(x)), lin).by_dtype   # x (2×4) + relu output (2×3)
    {torch.float32: 56}
    """
    if not callable(fn):
        raise TypeError(f"fn must be a function of no arguments (got {type(fn).__name__} {fn!r})")
    if isinstance(parameters, torch.nn.Module):
        parameters = list(parameters.parameters())
    try:
        params = [p for p in parameters]
    except TypeError:
        raise TypeError(f"parameters must be a module or an iterable of tensors (got {parameters!r})") from None
    if not all(isinstance(p, torch.Tensor) for p in params):
        raise TypeError("parameters must be a module or an iterable of tensors")
    param_ids = {id(p) for p in params}
    param_storages = {(p.device, p.untyped_storage().data_ptr()) for p in params}
    seen: dict[tuple, torch.UntypedStorage] = {}  # keeps storages alive so their addresses are not reused
    by_dtype: dict[torch.dtype, int] = {}
    copies: dict[torch.dtype, int] = {}
    parameter_bytes = 0
    count = 0

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        nonlocal parameter_bytes, count
        count += 1
        storage = tensor.untyped_storage()
        key = (tensor.device, storage.data_ptr())
        if key in seen:
            return tensor
        seen[key] = storage
        size = storage.nbytes()
        if key in param_storages or (tensor.is_leaf and tensor.requires_grad):
            parameter_bytes += size
        elif _derived_from_parameter(tensor, param_ids):
            copies[tensor.dtype] = copies.get(tensor.dtype, 0) + size
        else:
            by_dtype[tensor.dtype] = by_dtype.get(tensor.dtype, 0) + size
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        _run(fn, "the activation count")
    seen.clear()
    return ActivationReport(dict(sorted(by_dtype.items(), key=str)), parameter_bytes,
                            dict(sorted(copies.items(), key=str)), count)


def _add(counts: dict[torch.dtype, int], tensor: torch.Tensor, seen: set) -> None:
    key = (tensor.device, tensor.untyped_storage().data_ptr())
    if key in seen:
        return
    seen.add(key)
    counts[tensor.dtype] = counts.get(tensor.dtype, 0) + tensor.untyped_storage().nbytes()


def state_bytes(model: torch.nn.Module, optimizer: torch.optim.Optimizer | None = None
                ) -> dict[str, dict[torch.dtype, int]]:
    """Bytes by dtype of ``"parameters"``, ``"gradients"`` (those that exist now) and ``"optimizer state"``.

    Each storage is counted once. Adam keeps two tensors per parameter (``exp_avg``, ``exp_avg_sq``, in
    the parameter's dtype) plus a one-element ``step`` tensor.
    """
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"model must be a torch.nn.Module (got {type(model).__name__})")
    if optimizer is not None and not isinstance(optimizer, torch.optim.Optimizer):
        raise TypeError(f"optimizer must be a torch.optim.Optimizer or None (got {type(optimizer).__name__})")
    params: dict[torch.dtype, int] = {}
    grads: dict[torch.dtype, int] = {}
    opt: dict[torch.dtype, int] = {}
    seen: set = set()
    for p in model.parameters():
        _add(params, p, seen)
    for p in model.parameters():
        if p.grad is not None:
            _add(grads, p.grad, seen)
    if optimizer is not None:
        for state in optimizer.state.values():
            for value in state.values():
                if isinstance(value, torch.Tensor):
                    _add(opt, value, seen)
    return {"parameters": params, "gradients": grads, "optimizer state": opt}


def peak_memory_bytes(fn: Callable[[], Any], device: torch.device | str) -> int | None:
    """Peak bytes allocated on ``device`` while ``fn()`` runs (CUDA allocator statistics).

    The peak counts everything allocated at that moment (model, optimizer state, activations). Returns
    ``None`` without running ``fn`` where the allocator keeps no peak statistics (CPU, MPS): use
    :func:`saved_activation_bytes` and :func:`state_bytes` there.
    """
    if not callable(fn):
        raise TypeError(f"fn must be a function of no arguments (got {type(fn).__name__} {fn!r})")
    device = _as_device(device)
    if device.type != "cuda":
        return None
    torch.cuda.synchronize(device)
    torch.cuda.reset_peak_memory_stats(device)
    _run(fn, "the peak-memory run")
    torch.cuda.synchronize(device)
    return int(torch.cuda.max_memory_allocated(device))


def largest_batch_estimate(memory_budget_bytes: int, per_sample_bytes: int, fixed_bytes: int) -> int:
    """How many samples fit: ``floor((budget − fixed) / per_sample)``, 0 if even the fixed part does not fit.

    ``fixed_bytes``: what does not grow with the batch (parameters, gradients, optimizer state, autocast's
    weight copies); ``per_sample_bytes``: what does (activations per sample). A first estimate only: the
    allocator's fragmentation and temporary buffers need headroom.

    >>> largest_batch_estimate(1000, 30, 100)
    30
    """
    budget = as_int("memory_budget_bytes", memory_budget_bytes, minimum=1)
    per_sample = as_int("per_sample_bytes", per_sample_bytes, minimum=1)
    fixed = as_int("fixed_bytes", fixed_bytes, minimum=0)
    return max(0, (budget - fixed) // per_sample)


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


# --- one training step ----------------------------------------------------------------------------------

MAX_MLP_PARAMETERS = 1e9


def make_mlp(width: int, depth: int, *, seed: int = 0) -> torch.nn.Sequential:
    """``depth`` × (Linear(width, width) + ReLU), seeded."""
    width = as_int("width", width, minimum=1)
    depth = as_int("depth", depth, minimum=1)
    if width * width * depth > MAX_MLP_PARAMETERS:
        raise ValueError(f"width={width}, depth={depth} is {width * width * depth:.2g} weights, more than "
                         f"make_mlp allows ({MAX_MLP_PARAMETERS:.0e}, bench.MAX_MLP_PARAMETERS: 4 GB in float32)")
    torch.manual_seed(seed)
    layers: list[torch.nn.Module] = []
    for _ in range(depth):
        layers += [torch.nn.Linear(width, width), torch.nn.ReLU()]
    return torch.nn.Sequential(*layers)


def mlp_step_flops(width: int, depth: int, batch: int) -> int:
    """Matrix-product FLOPs of one training step of :func:`make_mlp` on a batch that needs no gradient.

    Forward: ``depth`` products of (batch × width) @ (width × width). Backward: a weight gradient for every
    layer, and an input gradient for every layer but the first (the data needs none):
    ``(3·depth − 1) · 2·batch·width²``. Bias, ReLU, the loss and the optimizer are left out (they are
    element-wise: few FLOPs, but memory traffic). Divided by the step time this gives the achieved FLOP/s;
    divided by the peak, the model FLOP/s utilisation (MFU).

    >>> mlp_step_flops(width=2, depth=1, batch=1)   # forward 8 + weight gradient 8
    16
    """
    width = as_int("width", width, minimum=1)
    depth = as_int("depth", depth, minimum=1)
    batch = as_int("batch", batch, minimum=1)
    return (3 * depth - 1) * matmul_flops(batch, width, width)


@dataclass(frozen=True)
class StepResult:
    """One mode's measurement. ``error`` is set (and the measurements are None) when the row could not run."""

    mode: str
    compiled: bool
    width: int
    depth: int
    batch: int
    device: str
    timing: Timing | None = None
    activations: ActivationReport | None = None
    peak_bytes: int | None = None
    state: dict[str, dict[torch.dtype, int]] | None = None
    first_call_seconds: float | None = None
    error: str | None = None
    round_medians: tuple[float, ...] | None = None

    @property
    def spread(self) -> float | None:
        """(slowest − fastest round's median) / the median of the rounds' medians: 0 when every round agreed.

        ``None`` for a row that did not run; 0 with a single round (nothing to compare).
        """
        if self.timing is None:
            return None
        medians = self.round_medians or (self.timing.median,)
        return (max(medians) - min(medians)) / statistics.median(medians)

    @property
    def step_flops(self) -> int:
        """Matrix-product FLOPs of one step (see :func:`mlp_step_flops`)."""
        return mlp_step_flops(self.width, self.depth, self.batch)

    @property
    def achieved(self) -> float | None:
        """Matrix-product FLOP/s of the step at its median time (``None`` for a row that did not run)."""
        return None if self.timing is None else achieved_flops(self.step_flops, self.timing.median)

    @property
    def label(self) -> str:
        return f"{self.mode}{' + compile' if self.compiled else ''}"


def train_step_fn(model, optimizer, scaler, x, target, mode, device_type):
    """The step every benchmark of lesson 06 times: zero_grad, forward and MSE loss under autocast (``mode``
    fp16/bf16; off for fp32/tf32), backward, Adam step — through the ``GradScaler`` when there is one (fp16)."""
    dtype = _AUTOCAST_DTYPE.get(mode)

    def step():
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast(device_type=device_type, dtype=dtype or torch.bfloat16, enabled=dtype is not None):
            loss = F.mse_loss(model(x), target)
        if scaler is not None:
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
        else:
            loss.backward()
            optimizer.step()
    return step


#: The most multiply-adds one benchmark step (forward + backward of the MLP) may take, per device type: on
#: a CPU, 2e11 is about a few seconds per step, and a benchmark runs many steps per mode.
MAX_STEP_MACS = {"cpu": 2e11, "mps": 5e12, "cuda": 5e13}


def _refuse_huge_step(width: int, depth: int, batch: int, device: torch.device) -> None:
    macs = 3 * batch * width * width * depth  # forward + backward ≈ 3 matmuls per layer
    limit = MAX_STEP_MACS.get(device.type, MAX_STEP_MACS["cpu"])
    if macs > limit:
        raise ValueError(f"width={width}, depth={depth}, batch={batch} is about {macs:.2g} multiply-adds per step, "
                         f"more than this benchmark allows on {device.type} ({limit:.0e}, "
                         "bench.MAX_STEP_MACS): it would not finish in reasonable time; use smaller sizes")


@dataclass
class _PreparedStep:
    """One row of a benchmark, set up and warmed up, ready to be timed (see :func:`_prepare_step`)."""

    base: dict[str, Any]
    step: Callable[[], None]
    flags: Callable[[], Any]  # a fresh context manager: the row's TF32 setting, entered around each timing
    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    activations: ActivationReport | None
    peak: int | None
    first: float | None
    times: list[float] = field(default_factory=list)
    round_medians: list[float] = field(default_factory=list)

    def time(self, repeats: int, device: torch.device, clock: Callable[[], float] | None) -> None:
        """One round: ``repeats`` timed calls (:func:`time_fn`, no warm-up: the row was warmed up)."""
        with self.flags():
            timing = time_fn(self.step, warmup=0, repeats=repeats, device=device, clock=clock)
        self.times.extend(timing.times)
        self.round_medians.append(timing.median)

    def result(self, warmup: int) -> StepResult:
        return StepResult(**self.base, timing=Timing(tuple(self.times), warmup), activations=self.activations,
                          peak_bytes=self.peak, state=state_bytes(self.model, self.optimizer),
                          first_call_seconds=self.first, round_medians=tuple(self.round_medians))


def _check_step_args(mode, width, depth, batch, device, compile, warmup, repeats):
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES} (got {mode!r})")
    width = as_int("width", width, minimum=1)
    depth = as_int("depth", depth, minimum=1)
    batch = as_int("batch", batch, minimum=1)
    device = _as_device(device)
    _refuse_huge_step(width, depth, batch, device)
    if not isinstance(compile, bool):
        raise TypeError(f"compile must be a bool (got {compile!r})")
    warmup = as_int("warmup", warmup, minimum=0)
    repeats = as_int("repeats", repeats, minimum=1)
    return width, depth, batch, device, warmup, repeats


def _prepare_step(mode: str, *, width: int, depth: int, batch: int, device: torch.device, compile: bool,
                  warmup: int, seed: int) -> _PreparedStep | StepResult:
    """Set up one row (arguments already checked): the MLP, its batch, Adam (and a GradScaler for fp16),
    the activation count, the compile (its first call timed), ``warmup`` untimed steps and, on CUDA, the
    peak of one more step. Returns a :class:`StepResult` with ``error`` when the row cannot run."""
    base = dict(mode=mode, compiled=compile, width=width, depth=depth, batch=batch, device=str(device))
    reason = mode_unavailable_reason(mode, device)
    if reason:
        return StepResult(**base, error=f"not run: {reason}")

    def flags():
        return tf32_enabled(mode == "tf32") if device.type == "cuda" else contextlib.nullcontext()

    before = torch.cuda.memory_allocated(device) if device.type == "cuda" else 0
    try:
        model, x, target, optimizer, scaler = mlp_problem(width, depth, batch, device, mode, seed)
        with flags():
            activations = None
            if not compile:
                dtype = _AUTOCAST_DTYPE.get(mode)

                def forward():
                    with torch.autocast(device_type=device.type, dtype=dtype or torch.bfloat16,
                                        enabled=dtype is not None):
                        return F.mse_loss(model(x), target)
                activations = saved_activation_bytes(forward, model)
            runner = model
            first = None
            if compile:
                try:
                    runner = torch.compile(model)
                    step = train_step_fn(runner, optimizer, scaler, x, target, mode, device.type)
                    synchronize(device)
                    start = time.perf_counter()
                    step()
                    synchronize(device)
                    first = time.perf_counter() - start
                except Exception as err:  # noqa: BLE001 - any compile failure becomes a row that says why
                    message = str(err).strip().splitlines()[0] if str(err).strip() else ""
                    return StepResult(**base, error=f"torch.compile failed: {type(err).__name__}: {message[:160]}")
            step = train_step_fn(runner, optimizer, scaler, x, target, mode, device.type)
            for i in range(warmup):
                _run(step, f"warm-up call {i + 1} of {warmup}")
            peak = peak_memory_bytes(step, device)
    except torch.OutOfMemoryError:
        return StepResult(**base, error="not run: out of device memory (every row keeps its model and optimizer "
                                        "while the rounds run): use smaller sizes or fewer modes")
    if peak is not None:
        peak -= before  # this row's memory, not the other rows' models that are alive meanwhile
    return _PreparedStep(base, step, flags, model, optimizer, activations, peak, first)


def benchmark_step(mode: str, *, width: int, depth: int, batch: int, device: torch.device | str,
                   compile: bool = False, warmup: int = 3, repeats: int = 10, seed: int = 0) -> StepResult:
    """Time one training step (forward, MSE loss, backward, Adam step) of :func:`make_mlp` in ``mode``.

    fp32: TF32 off. tf32: TF32 on for matmuls and cuDNN (:func:`tf32_enabled`; restored afterwards).
    fp16: float16 autocast and a ``torch.amp.GradScaler``. bf16: bfloat16 autocast, no scaler.
    ``compile=True`` wraps the model in ``torch.compile``; the first call (which compiles) is timed
    apart (``first_call_seconds``); a compile failure gives a row whose ``error`` says why.

    Also measured: the activations saved for backward (eager model; ``None`` for compiled rows, whose
    graph decides what to save or recompute), the CUDA peak of one step after the warm-up (None
    elsewhere; memory the process held before the row was set up is not counted), and the state bytes
    after the steps. To compare modes, use :func:`compare_precisions`: it interleaves them.
    """
    width, depth, batch, device, warmup, repeats = _check_step_args(mode, width, depth, batch, device, compile,
                                                                      warmup, repeats)
    row = _prepare_step(mode, width=width, depth=depth, batch=batch, device=device, compile=compile,
                        warmup=warmup, seed=seed)
    if isinstance(row, StepResult):
        return row
    row.time(repeats, device, None)
    return row.result(warmup)


#: One threshold for every timed comparison in lesson 06 (steps, products, the sweep): a speed ratio counts as a
#: difference when it is beyond 10 % *and* every round points the same way; otherwise it is noise.
CLEAR_DIFFERENCE = 1.10


def judge(ratio: float, rounds: Sequence[float], noisy: bool, noise_threshold: float) -> str:
    """The one verdict rule of lesson 06. ``ratio``: how many times faster (> 1) the thing is than its baseline;
    ``rounds``: the same ratio per interleaved round; ``noisy``: the rounds disagree by more than
    ``noise_threshold``. Returns "faster", "slower", "no clear difference" or a "no verdict: …" sentence."""
    if noisy:
        return f"no verdict: the rounds disagree by more than {noise_threshold:.0%} (a busy machine), rerun"
    if ratio > CLEAR_DIFFERENCE and min(rounds) > 1:
        return "faster"
    if ratio < 1 / CLEAR_DIFFERENCE and max(rounds) < 1:
        return "slower"
    return "no clear difference"


@dataclass(frozen=True)
class Comparison:
    """Rows from :func:`compare_precisions`; ``baseline`` is the eager fp32 row of the same run.

    ``rounds``: how many interleaved rounds timed the rows; a row whose rounds' medians disagree by more
    than ``noise_threshold`` (relative, see :attr:`StepResult.spread`) is :attr:`noisy`, and
    :attr:`warning` says so. The warning is not part of the table (its text would change from run to
    run): print it.
    """

    rows: tuple[StepResult, ...]
    rounds: int = 1
    noise_threshold: float = 0.25

    @property
    def noisy(self) -> tuple[StepResult, ...]:
        """The rows whose rounds disagreed by more than ``noise_threshold`` (the machine was busy: rerun)."""
        return tuple(r for r in self.rows if r.spread is not None and r.spread > self.noise_threshold)

    @property
    def warning(self) -> str | None:
        """A sentence naming the noisy rows, or ``None`` when every row's rounds agreed."""
        noisy = self.noisy
        if not noisy:
            return None
        worst = max(r.spread for r in noisy)
        return (f"Warning: the {self.rounds} rounds of {', '.join(r.label for r in noisy)} disagreed by up to "
                f"{worst:.0%} (more than {self.noise_threshold:.0%}): the machine's speed changed while the benchmark "
                "ran (other programs, clock or heat); rerun before you believe those speed-ups.")

    @property
    def baseline(self) -> StepResult | None:
        for row in self.rows:
            if row.mode == "fp32" and not row.compiled and row.timing is not None:
                return row
        return None

    def row(self, mode: str, compiled: bool = False) -> StepResult:
        for row in self.rows:
            if row.mode == mode and row.compiled == compiled:
                return row
        raise KeyError(f"no row for mode {mode!r} (compiled={compiled})")

    def speedup(self, row: StepResult) -> float | None:
        """fp32 median time / this row's median time (same run)."""
        base = self.baseline
        if base is None or row.timing is None:
            return None
        return base.timing.median / row.timing.median

    def verdict(self, row: StepResult) -> str:
        """The row against eager fp32 by :func:`judge` (its step time in each round against fp32's in the same
        round); no verdict when either row's rounds disagreed (see :attr:`noisy`)."""
        base = self.baseline
        if row.timing is None:
            return f"not run: {row.error}"
        if base is None:
            return "no verdict: no fp32 row to compare with"
        rows = (base.round_medians or (base.timing.median,), row.round_medians or (row.timing.median,))
        rounds = tuple(b / r for b, r in zip(*rows, strict=True))
        return judge(self.speedup(row), rounds, row in self.noisy or base in self.noisy, self.noise_threshold)

    def activation_ratio(self, row: StepResult) -> float | None:
        base = self.baseline
        if base is None or row.activations is None or base.activations is None or not base.activations.total:
            return None
        return row.activations.total / base.activations.total

    def lines(self) -> list[str]:
        """One line per row, without column padding (so only the measured numbers vary between runs)."""
        out = []
        for r in self.rows:
            if r.timing is None:
                out.append(f"{r.label}: {r.error}")
                continue
            speedup, ratio = self.speedup(r), self.activation_ratio(r)
            parts = [f"{r.label}: step {r.timing}", f"speed-up vs fp32 {speedup:.2f}×"]
            if r.activations is not None:
                parts.append(f"activations {format_bytes(r.activations.total)}"
                             + (f" ({ratio:.2f} of fp32)" if ratio is not None else ""))
            if r.peak_bytes is not None:
                parts.append(f"peak {format_bytes(r.peak_bytes)}")
            if r.first_call_seconds is not None:
                parts.append(f"first call (compiles) {format_time(r.first_call_seconds)}")
            out.append(", ".join(parts))
        return out

    def __repr__(self) -> str:
        return "\n".join([self.table().title, *self.lines()])

    def _repr_html_(self) -> str:
        return self.table()._repr_html_()

    def table(self) -> Table:
        """Step time (median and IQR), speed-up vs fp32, activation bytes and ratio, peak memory, notes."""
        rows = []
        for r in self.rows:
            speedup, ratio = self.speedup(r), self.activation_ratio(r)
            notes = r.error or ""
            if r.first_call_seconds is not None:
                notes = f"first call (compiles) {format_time(r.first_call_seconds)}"
            rows.append({
                "mode": r.label,
                "step time (median)": format_time(r.timing.median) if r.timing else "—",
                "IQR": f"{format_time(r.timing.p25)} – {format_time(r.timing.p75)}" if r.timing else "—",
                "speed-up vs fp32": f"{speedup:.2f}×" if speedup is not None else "—",
                "activations": format_bytes(r.activations.total) if r.activations else "—",
                "vs fp32": f"{ratio:.2f}" if ratio is not None else "—",
                "peak memory": format_bytes(r.peak_bytes),
                "notes": notes,
            })
        first = self.rows[0] if self.rows else None
        title = (f"one training step: {first.depth} × Linear({first.width}, {first.width}) + ReLU, batch "
                 f"{first.batch}, Adam, on {first.device}" if first else "")
        if first and self.rounds > 1:
            title += f"; the rows timed in turn, {self.rounds} rounds, every other round in reverse order"
        return Table(rows, title=title)


#: The most timed steps (rounds × repeats) :func:`compare_precisions` runs per row.
MAX_TIMED_STEPS = 10_000


def compare_precisions(*, width: int, depth: int, batch: int, device: torch.device | str,
                       modes: Sequence[str] | None = None, compile: Sequence[bool] = (False,),
                       compile_modes: Sequence[str] | None = None, warmup: int = 3, repeats: int = 5,
                       rounds: int = 4, noise_threshold: float = 0.25, seed: int = 0,
                       progress: Callable[[str], Any] | None = None,
                       clock: Callable[[], float] | None = None) -> Comparison:
    """Time a training step in each mode (and each ``compile`` setting), interleaved, in this one process.

    Every row is set up first — its own model, batch and optimizer (:func:`benchmark_step` describes the
    modes and what is measured), the compile, ``warmup`` untimed steps. Then the rows are timed in
    ``rounds`` rounds: in each round every row in turn runs ``repeats`` timed steps (:func:`time_fn`), and
    every other round goes in reverse order. A drift of the machine's speed during the benchmark (clock
    boost, heat, another program starting) thus reaches every row alike instead of whichever ran last:
    with an even number of rounds, a steady drift shifts every row's median by the same amount. Each row
    reports the median and IQR of all its ``rounds × repeats`` timed steps, and the median of each round
    (:attr:`StepResult.round_medians`); a row whose rounds disagree by more than ``noise_threshold`` is
    named in :attr:`Comparison.warning`.

    ``modes`` defaults to all :data:`MODES`: a mode the device lacks gives a row that says why.
    ``compile_modes`` limits the compiled runs to these modes (compiling costs seconds to minutes
    per mode on a CPU). The fp32 eager row is always there and first: it is the baseline of the speed-ups.
    Every row's model stays in memory until the rounds end (a row that does not fit says so).
    ``progress`` (e.g. ``print``) gets one line as each row is set up and one as the timing starts (no
    timings: the same on every machine). ``clock``: see :func:`time_fn` (inject a fake one to test).
    """
    modes = list(MODES) if modes is None else list(modes)
    bad = [m for m in modes if m not in MODES]
    if not modes or bad:
        raise ValueError(f"modes must be a non-empty list drawn from {MODES} (got {modes!r})")
    if isinstance(compile, bool) or not all(isinstance(c, bool) for c in compile) or not compile:
        raise TypeError(f"compile must be a non-empty tuple of bools, e.g. (False,) or (False, True) (got {compile!r})")
    compile_modes = modes if compile_modes is None else list(compile_modes)
    if any(m not in MODES for m in compile_modes):
        raise ValueError(f"compile_modes must be drawn from {MODES} (got {compile_modes!r})")
    width, depth, batch, device, warmup, repeats = _check_step_args("fp32", width, depth, batch, device, False,
                                                                      warmup, repeats)
    rounds = as_int("rounds", rounds, minimum=1)
    if rounds * repeats > MAX_TIMED_STEPS:
        raise ValueError(f"rounds × repeats must be at most {MAX_TIMED_STEPS} timed steps per row (got {rounds:,} × "
                         f"{repeats:,}): more would not finish in reasonable time and tells no more")
    threshold = as_positive("noise_threshold", noise_threshold)
    if progress is not None and not callable(progress):
        raise TypeError(f"progress must be a function taking one str, like print, or None (got {progress!r})")
    if clock is not None and not callable(clock):
        raise TypeError(f"clock must be a function returning seconds (got {clock!r})")
    order = (["fp32"] if "fp32" not in modes else []) + modes
    runs = [(m, False) for m in order if False in compile or m == "fp32"]
    runs += [(m, True) for m in order if True in compile and m in compile_modes and m in modes]
    prepared: list[_PreparedStep | StepResult] = []
    for number, (m, c) in enumerate(runs, 1):
        if progress is not None:
            progress(f"[{number}/{len(runs)}] setting up {m}" + (" with torch.compile (compiling first: the slow "
                                                                 "part)" if c else "") + " …")
        prepared.append(_prepare_step(m, width=width, depth=depth, batch=batch, device=device, compile=c,
                                      warmup=warmup, seed=seed))
    timed = [row for row in prepared if isinstance(row, _PreparedStep)]
    if progress is not None:
        progress(f"timing: {rounds} rounds of {repeats} steps per row, the rows in turn …")
    for r in range(rounds):
        for row in timed if r % 2 == 0 else reversed(timed):
            row.time(repeats, device, clock)
    rows = tuple(row.result(warmup) if isinstance(row, _PreparedStep) else row for row in prepared)
    return Comparison(rows, rounds, threshold)


# --- where does AMP pay off? a size sweep -------------------------------------------------------------------

@dataclass(frozen=True)
class SweepPoint:
    """One width of :func:`bf16_sweep`: per-round median step times of FP32 and of the AMP mode.

    A round times both modes back to back (their order alternates between rounds, so a drift of the
    machine's speed — clocks, other processes — does not always hit the same mode).
    """

    width: int
    depth: int
    batch: int
    fp32: tuple[float, ...]
    low: tuple[float, ...]

    @property
    def ratios(self) -> tuple[float, ...]:
        """FP32 time / AMP time, round by round (> 1: AMP was faster in that round)."""
        return tuple(f / lo for f, lo in zip(self.fp32, self.low, strict=True))

    @property
    def speedup(self) -> float:
        """The median of the rounds' ratios."""
        return statistics.median(self.ratios)

    @property
    def spread(self) -> float:
        """(largest − smallest ratio) / median ratio: 0 when every round agrees."""
        return (max(self.ratios) - min(self.ratios)) / self.speedup

    @property
    def fp32_achieved(self) -> float:
        """Matrix-product FLOP/s of the FP32 step (median over rounds): low = overhead-bound, high = compute-bound."""
        return achieved_flops(mlp_step_flops(self.width, self.depth, self.batch), statistics.median(self.fp32))

    @property
    def low_achieved(self) -> float:
        """The same for the AMP step."""
        return achieved_flops(mlp_step_flops(self.width, self.depth, self.batch), statistics.median(self.low))


@dataclass(frozen=True)
class Bf16Sweep:
    """The result of :func:`bf16_sweep`. ``stopped`` says why the sweep ended early (``None``: every width ran)."""

    mode: str
    device: str
    points: tuple[SweepPoint, ...]
    rounds: int
    noise_threshold: float
    stopped: str | None = None

    @property
    def noisy(self) -> tuple[SweepPoint, ...]:
        """The points whose rounds disagree by more than ``noise_threshold`` (a busy machine: rerun)."""
        return tuple(p for p in self.points if p.spread > self.noise_threshold)

    def pays_off_from(self) -> int | None:
        """The smallest width from which the AMP step was faster by :func:`judge`'s rule (median ratio beyond
        :data:`CLEAR_DIFFERENCE`, every round > 1) at every larger width measured, or ``None`` if it was not
        at the largest width."""
        width = None
        for point in reversed(self.points):
            if judge(point.speedup, point.ratios, False, self.noise_threshold) != "faster":
                break
            width = point.width
        return width

    def lines(self) -> list[str]:
        out = [f"one training step, {self.points[0].depth} × Linear(width) + ReLU, batch {self.points[0].batch}, "
               f"Adam; {self.mode} autocast vs fp32 on {self.device}; {self.rounds} rounds per width"
               if self.points else f"no width measured on {self.device}"]
        for p in self.points:
            out.append(f"width {p.width:>5}: {self.mode} {p.speedup:.2f}× the fp32 speed (rounds "
                       f"{min(p.ratios):.2f}–{max(p.ratios):.2f}){'  <- noisy: rerun' if p in self.noisy else ''}; "
                       f"fp32 step {format_flops(p.fp32_achieved)}, {self.mode} step {format_flops(p.low_achieved)}")
        if self.stopped:
            out.append(self.stopped)
        return out

    def verdict(self) -> str:
        """What this machine said, in words (machine-dependent: show it in a cell nbval ignores). No verdict when
        a width's rounds disagreed (:attr:`noisy`); with one width measured, no trend."""
        if not self.points:
            return "nothing was measured"
        if self.noisy:
            return (f"no verdict: the rounds disagreed by more than {self.noise_threshold:.0%} at width(s) "
                    f"{', '.join(str(p.width) for p in self.noisy)} — the machine was busy; rerun.")
        start = self.pays_off_from()
        rule = f"> {CLEAR_DIFFERENCE:.2f}× the fp32 speed in every round"
        if start is None:
            text = (f"{self.mode} did not pay off ({rule}) at the largest width measured here "
                    f"({self.points[-1].width}); its best: {max(p.speedup for p in self.points):.2f}× the fp32 speed.")
        elif start == self.points[0].width:
            text = f"{self.mode} paid off ({rule}) at every width measured here, from {start}."
        else:
            text = f"{self.mode} paid off ({rule}) from width {start} up; below it, not."
        if len(self.points) == 1:
            text += " Only one width was measured (the sweep stopped early): too few to see where it starts to pay off."
        return text


def mlp_problem(width: int, depth: int, batch: int, device: torch.device, mode: str, seed: int):
    """The benchmark's MLP, a seeded batch and target, Adam, and a GradScaler for fp16 (``None`` otherwise)."""
    model = make_mlp(width, depth, seed=seed).to(device)
    g = torch.Generator().manual_seed(seed + 1)
    x = torch.randn(batch, width, generator=g).to(device)
    target = torch.randn(batch, width, generator=g).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    scaler = torch.amp.GradScaler(device.type) if mode == "fp16" else None
    return model, x, target, optimizer, scaler


def _sweep_step(width: int, depth: int, batch: int, device: torch.device, mode: str, seed: int):
    model, x, target, optimizer, scaler = mlp_problem(width, depth, batch, device, mode, seed)
    return train_step_fn(model, optimizer, scaler, x, target, mode, device.type)


MAX_SWEEP_COUNT = 1000  # rounds, repeats and warmup steps of bf16_sweep


def bf16_sweep(widths: Sequence[int] = (64, 128, 256, 512, 1024, 2048), *, depth: int = 4, batch: int = 256,
               device: torch.device | str = "cpu", mode: str = "bf16", rounds: int = 3, repeats: int = 3,
               warmup: int = 1, budget_seconds: float = 10.0, noise_threshold: float = 0.25,
               seed: int = 0) -> Bf16Sweep:
    """Where does autocast pay off on this machine? Time an FP32 and an AMP training step at each width.

    For each width (increasing), ``rounds`` rounds each time the FP32 step and the ``mode`` step
    (:func:`time_fn`: ``warmup`` untimed calls, the median of ``repeats`` timed ones), alternating which
    runs first. The ratio is reported per round, so a reader sees the spread; a point whose rounds
    disagree by more than ``noise_threshold`` (relative) is flagged as noise.

    Slow machines: before a width, its cost is estimated from the previous width's (scaled by the
    FLOPs, an over-estimate while steps are overhead-bound); if it would exceed what is left of
    ``budget_seconds``, the sweep stops and ``stopped`` says so. The first width always runs.
    """
    if isinstance(widths, (str, bytes)) or not isinstance(widths, Sequence) or not widths:
        raise TypeError(f"widths must be a non-empty list of ints (got {widths!r})")
    widths = [as_int("width", w, minimum=1) for w in widths]
    if widths != sorted(set(widths)):
        raise ValueError(f"widths must be distinct and increasing (got {widths})")
    depth = as_int("depth", depth, minimum=1)
    batch = as_int("batch", batch, minimum=1)
    device = _as_device(device)
    if mode not in ("fp16", "bf16"):
        raise ValueError(f"mode must be 'bf16' or 'fp16' (got {mode!r})")
    reason = mode_unavailable_reason(mode, device)
    if reason:
        raise ValueError(f"mode {mode!r} is not available on {device}: {reason}")
    for width in widths:
        _refuse_huge_step(width, depth, batch, device)
    rounds = as_int("rounds", rounds, minimum=1)
    repeats = as_int("repeats", repeats, minimum=1)
    warmup = as_int("warmup", warmup, minimum=0)
    for name, value in (("rounds", rounds), ("repeats", repeats), ("warmup", warmup)):
        if value > MAX_SWEEP_COUNT:
            raise ValueError(f"{name} must be at most {MAX_SWEEP_COUNT} (got {value:,}): the first width always runs "
                             "all its rounds, whatever budget_seconds says, and would not finish in reasonable time")
    budget = as_positive("budget_seconds", budget_seconds)
    threshold = as_positive("noise_threshold", noise_threshold)
    seed = as_int("seed", seed, minimum=0)
    start = time.perf_counter()
    points: list[SweepPoint] = []
    stopped = None
    last_cost = last_flops = None
    for width in widths:
        flops = mlp_step_flops(width, depth, batch)
        if last_cost is not None:
            estimate = last_cost * flops / last_flops
            left = budget - (time.perf_counter() - start)
            if estimate > left:
                stopped = (f"stopped before width {width}: it would take about {format_time(estimate)} here "
                           f"(budget {format_time(budget)})")
                break
        began = time.perf_counter()
        steps = {m: _sweep_step(width, depth, batch, device, m, seed) for m in ("fp32", mode)}
        times: dict[str, list[float]] = {"fp32": [], mode: []}
        for r in range(rounds):
            order = ("fp32", mode) if r % 2 == 0 else (mode, "fp32")
            for m in order:
                times[m].append(time_fn(steps[m], warmup=warmup if r == 0 else 0, repeats=repeats,
                                        device=device).median)
        points.append(SweepPoint(width, depth, batch, tuple(times["fp32"]), tuple(times[mode])))
        last_cost, last_flops = time.perf_counter() - began, flops
    return Bf16Sweep(mode, str(device), tuple(points), rounds, threshold, stopped)


# --- memory budget and casts ------------------------------------------------------------------------------

@dataclass(frozen=True)
class MemorySummary:
    """Where one training step's memory goes (bytes), from a :class:`StepResult` measured without compile."""

    parameters: int
    gradients: int
    optimizer_state: int
    activations: int
    weight_copies: int
    batch: int

    @property
    def fixed(self) -> int:
        """What does not grow with the batch: parameters, gradients, optimizer state, weight copies."""
        return self.parameters + self.gradients + self.optimizer_state + self.weight_copies

    @property
    def per_sample(self) -> int:
        """Activation bytes per sample (the MLP's saved tensors all grow linearly with the batch)."""
        return math.ceil(self.activations / self.batch)

    @property
    def total(self) -> int:
        return self.fixed + self.activations

    def total_at(self, batch: int) -> int:
        """Total bytes at another batch size: the fixed part plus activations scaled linearly (exact for an MLP)."""
        batch = as_int("batch", batch, minimum=1)
        return self.fixed + self.activations * batch // self.batch


def memory_summary(result: StepResult) -> MemorySummary:
    """Sum :attr:`StepResult.state` and :attr:`StepResult.activations` into a :class:`MemorySummary`."""
    if not isinstance(result, StepResult):
        raise TypeError(f"result must be a StepResult (got {type(result).__name__})")
    if result.state is None or result.activations is None:
        raise ValueError(f"the {result.label} row has no memory measurement ({result.error or 'compiled row'})")
    state = {name: sum(by_dtype.values()) for name, by_dtype in result.state.items()}
    return MemorySummary(state["parameters"], state["gradients"], state["optimizer state"],
                         result.activations.total, result.activations.copies_total, result.batch)


def cast_cost(model: torch.nn.Module, dtype: torch.dtype, *, device: torch.device | str, warmup: int = 2,
              repeats: int = 10) -> Timing:
    """Time casting every weight matrix of ``model`` to ``dtype`` — the ``_to_copy`` autocast does each step."""
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"model must be a torch.nn.Module (got {type(model).__name__})")
    if dtype not in (torch.float16, torch.bfloat16):
        raise ValueError(f"dtype must be torch.float16 or torch.bfloat16 (got {dtype!r})")
    weights = [p.detach() for p in model.parameters() if p.dim() >= 2]
    if not weights:
        raise ValueError("model has no weight matrices to cast")
    return time_fn(lambda: [w.to(dtype) for w in weights], warmup=warmup, repeats=repeats, device=device)


@dataclass(frozen=True)
class ProductComparison:
    """Matrix products timed in interleaved rounds (see :func:`compare_products`)."""

    labels: tuple[str, ...]
    results: dict[str, MatmulResult]  # the median round of each product
    round_seconds: dict[str, tuple[float, ...]]  # each product's median time per round
    rounds: int
    noise_threshold: float = 0.25

    def ratios(self, label: str, baseline: str) -> tuple[float, ...]:
        """Throughput of ``label`` over ``baseline``, per round (each round's two medians)."""
        a, b = self.results[label], self.results[baseline]
        return tuple((a.flops / ta) / (b.flops / tb) for ta, tb in zip(self.round_seconds[label],
                                                                         self.round_seconds[baseline], strict=True))

    def achieved(self, label: str) -> float:
        """FLOP/s at the median of the product's round times (the statistic :meth:`ratio` compares)."""
        return achieved_flops(self.results[label].flops, statistics.median(self.round_seconds[label]))

    def ratio(self, label: str, baseline: str) -> float:
        """``achieved(label) / achieved(baseline)``: the two FLOP/s that :meth:`line` prints, divided."""
        return self.achieved(label) / self.achieved(baseline)

    def noisy(self, label: str, baseline: str) -> bool:
        """Whether the rounds' ratios disagree by more than ``noise_threshold`` (a busy machine: rerun)."""
        rounds = self.ratios(label, baseline)
        return max(rounds) / min(rounds) - 1 > self.noise_threshold

    def verdict(self, label: str, baseline: str) -> str:
        """"faster", "slower" or "no clear difference" (beyond :data:`CLEAR_DIFFERENCE` and in every round), or,
        when the rounds disagree by more than ``noise_threshold``, no verdict (:func:`judge`)."""
        return judge(self.ratio(label, baseline), self.ratios(label, baseline), self.noisy(label, baseline),
                     self.noise_threshold)

    def line(self, label: str, baseline: str) -> str:
        rounds = self.ratios(label, baseline)
        return (f"{label}: {format_flops(self.achieved(label))}, {self.ratio(label, baseline):.2f}× "
                f"{baseline}'s throughput (rounds {min(rounds):.2f}–{max(rounds):.2f})"
                + ("  <- noisy: rerun" if self.noisy(label, baseline) else ""))


def compare_products(cases: dict[str, tuple[int, int, int, str]], *, device: torch.device | str = "cpu",
                     rounds: int = 4, repeats: int = 3, warmup: int = 1, noise_threshold: float = 0.25,
                     seed: int = 0) -> ProductComparison:
    """Time several ``(m, k, n, mode)`` products in turn, in ``rounds`` rounds, every other round in reverse
    order (timing rule 5, as :func:`compare_precisions` does for steps), so that a drift of the machine's
    speed reaches every product alike. Each round's time is the median of ``repeats`` calls.

    Example:
        >>> c = compare_products({"a": (16, 16, 16, "fp32"), "b": (15, 15, 15, "fp32")}, rounds=2, repeats=1)
        >>> len(c.ratios("b", "a")), c.verdict("a", "a")
        (2, 'no clear difference')
    """
    if not isinstance(cases, dict) or not cases:
        raise ValueError("cases must be a non-empty dict of label -> (m, k, n, mode)")
    rounds = as_int("rounds", rounds, minimum=1)
    repeats = as_int("repeats", repeats, minimum=1)
    noise_threshold = as_positive("noise_threshold", noise_threshold)
    if rounds * repeats * len(cases) > MAX_TIMED_STEPS:
        raise ValueError(f"rounds × repeats × cases must be at most {MAX_TIMED_STEPS:,}")
    labels = tuple(cases)
    per_round: dict[str, list[MatmulResult]] = {label: [] for label in labels}
    for number in range(rounds):
        for label in (labels if number % 2 == 0 else labels[::-1]):
            m, k, n, mode = cases[label]
            per_round[label].append(matmul_throughput(m, k, n, mode=mode, device=device, warmup=warmup,
                                                      repeats=repeats, seed=seed))
    results = {label: sorted(runs, key=lambda r: r.timing.median)[len(runs) // 2]
               for label, runs in per_round.items()}
    return ProductComparison(labels, results, {label: tuple(r.timing.median for r in runs)
                                               for label, runs in per_round.items()}, rounds, noise_threshold)


def has_bf16_hardware(features: dict[str, Any] | None = None) -> bool:
    """Whether this CPU reports bfloat16 matrix hardware (AVX512-BF16 or AMX-BF16) in :func:`cpu_features`."""
    flags = (features or cpu_features())["flags"]
    return bool(flags.get("avx512_bf16") or flags.get("amx_bf16"))


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
