"""Honest benchmarks for lesson 06: step time, memory, achieved FLOP/s and the fraction of peak.

The package is split by subject; every name is re-exported here, so ``from ampcourse.bench import time_fn``
and ``bench.compare_precisions(...)`` work as they always did.

``timing`` (:func:`time_fn`, :class:`Timing`, :func:`synchronize`)
    Warm-up calls are run first and not timed (allocations, cuDNN/cuBLAS heuristics, torch.compile).
    Each timed call is bracketed by a device synchronisation (CUDA and MPS run asynchronously: without
    it the clock would stop when the work is *queued*, not done). On CUDA the elapsed time comes from
    ``torch.cuda.Event(enable_timing=True)`` pairs; elsewhere from ``time.perf_counter``. Many repeats;
    the median and the inter-quartile range are reported (a mean is dragged by one slow outlier).

``memory`` (:func:`saved_activation_bytes`, :func:`state_bytes`, :func:`peak_memory_bytes`)
    :func:`saved_activation_bytes` counts, on any device, the bytes autograd keeps for the backward pass
    (with ``torch.autograd.graph.saved_tensors_hooks``), each storage once. Storages of the *parameters*
    themselves (a ``Linear`` saves its weight) are not activations: they are reported apart
    (``parameter_bytes``) and not counted. Casts of parameters that a region saves (autocast saves the
    bfloat16/float16 copy of each weight it multiplies with) are real extra memory, but they are per
    step, not per sample: they are reported apart too (``parameter_copies``). :func:`state_bytes` counts
    parameters, gradients and optimizer state by dtype; :func:`peak_memory_bytes` reads the CUDA
    allocator's peak (``None`` where no allocator statistics exist, e.g. on the CPU).

``flops`` (FLOP counts, datasheet peaks, measured matmul throughput, TF32 and oneDNN precision settings)
    :func:`matmul_flops` (2·m·k·n: one multiply and one add per term), :func:`achieved_flops`,
    :data:`DATASHEET_PEAKS` (dense figures from NVIDIA's datasheets — *not* the "with sparsity" ones,
    which are twice as high), :func:`peak_flops` and :func:`fraction_of_peak`.

``hardware`` (:func:`cpu_features`, :func:`available_modes`: which :data:`MODES` this device runs)

``steps`` (one training step of an MLP, and precisions compared on it)
    :func:`benchmark_step` times one training step of an MLP in one of :data:`MODES`;
    :func:`compare_precisions` times several modes in the same process, interleaved (rounds in
    alternating order, so a drift of the machine's speed reaches every mode alike), and reports
    speed-ups against FP32 from that same run, with a warning when the rounds disagree.
    :func:`memory_summary` says where the step's memory goes.

``sweeps`` (:func:`bf16_sweep`, :func:`compare_products`)
    The same interleaved comparison for FP32 against one AMP mode across layer widths, and for matrix
    products.

``units``: the mode names, :class:`BenchmarkError` and the unit formatting (``format_time`` …).
"""

from .flops import (
    DATASHEET_PEAKS,
    MAX_MATMUL_ELEMENTS,
    MatmulResult,
    achieved_flops,
    datasheet_entry,
    fp32_precision_settings,
    fraction_of_peak,
    matmul_flops,
    matmul_throughput,
    measured_peak_flops,
    mkldnn_fp32_precision,
    peak_flops,
    tf32_api,
    tf32_enabled,
)
from .hardware import available_modes, cpu_features, has_bf16_hardware, mode_unavailable_reason, native_stderr_silenced
from .memory import ActivationReport, largest_batch_estimate, peak_memory_bytes, saved_activation_bytes, state_bytes
from .steps import (
    CLEAR_DIFFERENCE,
    MAX_MLP_PARAMETERS,
    MAX_STEP_MACS,
    MAX_TIMED_STEPS,
    Comparison,
    MemorySummary,
    StepResult,
    benchmark_step,
    cast_cost,
    compare_precisions,
    judge,
    make_mlp,
    memory_summary,
    mlp_problem,
    mlp_step_flops,
    train_step_fn,
)
from .sweeps import MAX_SWEEP_COUNT, Bf16Sweep, ProductComparison, SweepPoint, bf16_sweep, compare_products
from .timing import Timing, synchronize, time_fn
from .units import MODES, BenchmarkError, format_bytes, format_flops, format_time

__all__ = [
    # units
    "MODES", "BenchmarkError", "format_bytes", "format_flops", "format_time",
    # timing
    "Timing", "synchronize", "time_fn",
    # memory
    "ActivationReport", "largest_batch_estimate", "peak_memory_bytes", "saved_activation_bytes", "state_bytes",
    # hardware
    "available_modes", "cpu_features", "has_bf16_hardware", "mode_unavailable_reason", "native_stderr_silenced",
    # flops
    "DATASHEET_PEAKS", "MAX_MATMUL_ELEMENTS", "MatmulResult", "achieved_flops", "datasheet_entry",
    "fp32_precision_settings", "fraction_of_peak", "matmul_flops", "matmul_throughput", "measured_peak_flops",
    "mkldnn_fp32_precision", "peak_flops", "tf32_api", "tf32_enabled",
    # steps
    "CLEAR_DIFFERENCE", "MAX_MLP_PARAMETERS", "MAX_STEP_MACS", "MAX_TIMED_STEPS", "Comparison", "MemorySummary",
    "StepResult", "benchmark_step", "cast_cost", "compare_precisions", "judge", "make_mlp", "memory_summary",
    "mlp_problem", "mlp_step_flops", "train_step_fn",
    # sweeps
    "MAX_SWEEP_COUNT", "Bf16Sweep", "ProductComparison", "SweepPoint", "bf16_sweep", "compare_products",
]
