"""Lesson 06, one training step: the benchmark's MLP, :func:`benchmark_step` in one of :data:`MODES`, and
:func:`compare_precisions`, which times several modes interleaved in one process (rule 5) and judges each
against FP32 by :func:`judge`; :func:`memory_summary` says where one step's memory goes."""

from __future__ import annotations

import contextlib
import math
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F

from ..tables import Table
from ..validate import as_int, as_positive
from .flops import achieved_flops, matmul_flops, tf32_enabled
from .hardware import mode_unavailable_reason
from .memory import ActivationReport, peak_memory_bytes, saved_activation_bytes, state_bytes
from .timing import Timing, _run, synchronize, time_fn
from .units import _AUTOCAST_DTYPE, MODES, _as_device, format_bytes, format_time

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


def mlp_problem(width: int, depth: int, batch: int, device: torch.device, mode: str, seed: int):
    """The benchmark's MLP, a seeded batch and target, Adam, and a GradScaler for fp16 (``None`` otherwise)."""
    model = make_mlp(width, depth, seed=seed).to(device)
    g = torch.Generator().manual_seed(seed + 1)
    x = torch.randn(batch, width, generator=g).to(device)
    target = torch.randn(batch, width, generator=g).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    scaler = torch.amp.GradScaler(device.type) if mode == "fp16" else None
    return model, x, target, optimizer, scaler


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


def _as_row(name: str, row: Any) -> StepResult:
    if not isinstance(row, StepResult):
        raise TypeError(f"{name} must be a StepResult, a row of compare_precisions (got {type(row).__name__})")
    return row


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

    def __post_init__(self) -> None:
        if isinstance(self.rows, (str, bytes)) or not isinstance(self.rows, Sequence):
            raise TypeError(f"rows must be a tuple of StepResult (got {type(self.rows).__name__})")
        rows = tuple(self.rows)
        if not rows:
            raise ValueError("rows must hold at least one StepResult (compare_precisions gives the fp32 row first)")
        for row in rows:
            _as_row("rows", row)
        labels = [row.label for row in rows]
        twice = sorted({label for label in labels if labels.count(label) > 1})
        if twice:
            raise ValueError(f"rows must hold each mode and compile setting once (twice: {', '.join(twice)})")
        object.__setattr__(self, "rows", rows)
        object.__setattr__(self, "rounds", as_int("rounds", self.rounds, minimum=1))
        object.__setattr__(self, "noise_threshold", as_positive("noise_threshold", self.noise_threshold))

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
        _as_row("row", row)
        base = self.baseline
        if base is None or row.timing is None:
            return None
        return base.timing.median / row.timing.median

    def verdict(self, row: StepResult) -> str:
        """The row against eager fp32 by :func:`judge` (its step time in each round against fp32's in the same
        round); no verdict when either row's rounds disagreed (see :attr:`noisy`)."""
        _as_row("row", row)
        base = self.baseline
        if row.timing is None:
            return f"not run: {row.error}"
        if base is None:
            return "no verdict: no fp32 row to compare with"
        rows = (base.round_medians or (base.timing.median,), row.round_medians or (row.timing.median,))
        rounds = tuple(b / r for b, r in zip(*rows, strict=True))
        return judge(self.speedup(row), rounds, row in self.noisy or base in self.noisy, self.noise_threshold)

    def activation_ratio(self, row: StepResult) -> float | None:
        _as_row("row", row)
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
