"""Reusable mixed-precision diagnostics (lesson 07's tools): each works on any model, and this module can be
copied whole into a project of your own.

* :func:`find_nonfinite` runs a forward pass with a forward hook on every module and reports the modules
  whose output holds an inf or a NaN, **in execution order**: the first one is where the trouble starts
  (every later one only inherits it). The hooks are removed afterwards, whatever happens.
  :func:`activation_peaks` puts each module's largest |output| in FP32, bf16 and fp16 autocast side by side.
* :func:`anomaly_message` runs a backward pass under ``torch.autograd.detect_anomaly`` and keeps only
  what matters from what it prints: the backward node that produced the NaN and the forward line that
  created it (no giant traceback); :func:`anomaly_overhead` times what the anomaly mode costs.
* :func:`grad_stats` tabulates the gradients per parameter: norm, max |g|, the fraction exactly zero, the
  fraction that would round to zero in float16, and the count of non-finite values.
* :class:`FP32Island` runs a block in FP32 inside an autocast region: autocast **disabled** inside *and*
  the floating-point inputs cast to float32 (either alone is not enough).
* :func:`fp32_loss` wraps a loss the same way, casting only floating-point tensors, so class-index
  targets stay ``int64``.
* :func:`diagnose_scale` reads a ``get_scale()`` history (healthy, unstable or collapsing) using only the
  scale, as :func:`ampcourse.scaler_run.step_was_skipped` does; :data:`COLLAPSE_WINDOW` and
  :data:`MAX_SKIP_FRACTION` are its thresholds.

The lesson's demos (models that overflow, a model trained in bf16, scale histories, the symptom table) are in
:mod:`ampcourse.troubleshoot`, which re-exports every name of this module.
"""


import math
import re
import time
import warnings
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from .scaler_run import step_was_skipped
from .tables import Table
from .validate import ModelCallFailed, as_device, as_float, as_int

__all__ = [
    "COLLAPSE_WINDOW", "FP16_MAX", "MAX_SKIP_FRACTION", "AnomalyReport", "FP32Island", "GradStats", "ModuleRecord",
    "NonFiniteReport", "ScaleDiagnosis", "activation_peaks", "anomaly_message", "anomaly_overhead", "diagnose_scale",
    "find_nonfinite", "fp32_loss", "grad_stats",
]

FP16_MAX = float(torch.finfo(torch.float16).max)


def _tensors(tree: Any) -> list[torch.Tensor]:
    """The tensors in a module's output or inputs (a tensor, or tuples/lists/dicts of them)."""
    if isinstance(tree, torch.Tensor):
        return [tree]
    if isinstance(tree, (list, tuple)):
        return [t for item in tree for t in _tensors(item)]
    if isinstance(tree, dict):
        return [t for item in tree.values() for t in _tensors(item)]
    return []


def _float_tensors(tree: Any) -> list[torch.Tensor]:
    return [t for t in _tensors(tree) if t.is_floating_point() or t.is_complex()]


def _dtype_name(dtype: torch.dtype | None) -> str:
    return "—" if dtype is None else str(dtype).removeprefix("torch.")


# --- Finding the first non-finite value --------------------------------------------------------------------

@dataclass(frozen=True)
class ModuleRecord:
    """What one module's forward hook saw (see :func:`find_nonfinite`).

    Attributes:
        order: the position of this module in execution order (hooks fire when a forward *ends*, so a
            container comes after its children).
        name: the qualified name, as in ``model.named_modules()`` (``""`` is the model itself).
        kind: the module's class name.
        output_dtype: the dtype of the (first) floating-point output, None if it had none.
        max_abs: the largest |value| among the outputs, NaNs left out (``inf`` if there is an inf).
        n_inf, n_nan, numel: counts over all floating-point outputs.
        input_dtype: the dtype of the first floating-point input (None if none).
        max_finite_input: the largest finite |value| among the inputs (None if there is none).
        input_finite: whether all the inputs were finite.
    """

    order: int
    name: str
    kind: str
    output_dtype: torch.dtype | None
    max_abs: float
    n_inf: int
    n_nan: int
    numel: int
    input_dtype: torch.dtype | None
    max_finite_input: float | None
    input_finite: bool

    @property
    def finite(self) -> bool:
        """No inf and no NaN in the output."""
        return self.n_inf == 0 and self.n_nan == 0

    @property
    def label(self) -> str:
        """The name, with ``(model)`` for the model itself."""
        return self.name or "(model)"

    def row(self) -> dict[str, Any]:
        return {"#": self.order, "module": self.label, "type": self.kind, "out dtype": _dtype_name(self.output_dtype),
                "max |out|": self.max_abs, "inf": self.n_inf, "NaN": self.n_nan,
                "max finite |in|": self.max_finite_input}


def _max_abs(tensors: list[torch.Tensor]) -> float:
    best = -math.inf
    for t in tensors:
        values = t.detach().abs().float().reshape(-1)
        values = values[~torch.isnan(values)]
        if values.numel():
            best = max(best, float(values.max()))
    return best if best > -math.inf else math.nan


def _max_finite(tensors: list[torch.Tensor]) -> float | None:
    best = None
    for t in tensors:
        values = t.detach().abs().float().reshape(-1)
        values = values[torch.isfinite(values)]
        if values.numel():
            best = max(float(values.max()), best if best is not None else -math.inf)
    return best


def _record(order: int, name: str, module: nn.Module, inputs: Any, output: Any) -> ModuleRecord:
    outs, ins = _float_tensors(output), _float_tensors(inputs)
    return ModuleRecord(
        order=order, name=name, kind=type(module).__name__,
        output_dtype=outs[0].dtype if outs else None,
        max_abs=_max_abs(outs),
        n_inf=sum(int(torch.isinf(t).sum()) for t in outs),
        n_nan=sum(int(torch.isnan(t).sum()) for t in outs),
        numel=sum(t.numel() for t in outs),
        input_dtype=ins[0].dtype if ins else None,
        max_finite_input=_max_finite(ins),
        input_finite=all(bool(torch.isfinite(t).all()) for t in ins),
    )


@dataclass(frozen=True)
class NonFiniteReport:
    """The result of :func:`find_nonfinite`: one :class:`ModuleRecord` per module call, in execution order."""

    records: tuple[ModuleRecord, ...]
    output: Any

    @property
    def bad(self) -> tuple[ModuleRecord, ...]:
        """The module calls whose output held an inf or a NaN, in execution order."""
        return tuple(r for r in self.records if not r.finite)

    @property
    def first(self) -> ModuleRecord | None:
        """The first module (in execution order) whose output held an inf or a NaN; None if all were finite."""
        bad = self.bad
        return bad[0] if bad else None

    def summary(self) -> str:
        """One or two lines naming the first module that produced an inf or NaN."""
        first = self.first
        if first is None:
            return f"all {len(self.records)} module outputs are finite"
        what = " and ".join(w for w, n in (("inf", first.n_inf), ("NaN", first.n_nan)) if n)
        source = (f"its largest input |x| was {first.max_finite_input:.4g}" if first.max_finite_input is not None
                  else "it had no finite floating-point input")
        later = [r.label for r in self.bad[1:]]
        return (f"first non-finite output: {first.label} ({first.kind}) → {what} in "
                f"{first.n_inf + first.n_nan} of {first.numel} values, dtype {_dtype_name(first.output_dtype)}, "
                f"max |out| = {first.max_abs:g}; {source} (inputs finite: {first.input_finite})\n"
                f"later modules that only inherited it: {', '.join(later) if later else 'none'}")

    def table(self, only_bad: bool = False) -> Table:
        rows = [r.row() for r in (self.bad if only_bad else self.records)]
        num = "{:.4g}".format
        return Table(rows, formats={"max |out|": num, "max finite |in|": lambda v: "—" if v is None else num(v)},
                     title="forward hooks, in execution order")

    def __str__(self) -> str:
        return self.summary()


def find_nonfinite(model: nn.Module, *inputs: Any, **kwargs: Any) -> NonFiniteReport:
    """Run ``model(*inputs, **kwargs)`` with a forward hook on every module; report inf/NaN outputs in order.

    A forward hook fires when a module's ``forward`` returns, so the hooks fire in *execution order*
    (children before the container that called them). The first module whose output holds an inf or a
    NaN is where the trouble starts: every module after it receives the bad value and passes it on, and
    ``inf - inf`` or ``0 * inf`` turn infs into NaNs further down. Run it inside the same
    ``torch.autocast`` region as training to see what autocast computes. The hooks are removed when the
    forward pass ends, even if it raises.

    Args:
        model: the ``nn.Module`` to run (a module called twice gives two records).
        inputs, kwargs: passed to ``model``.

    Returns:
        a :class:`NonFiniteReport`; its ``first`` is None when everything was finite.

    Example:
        >>> model = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.ReLU())
        >>> find_nonfinite(model, torch.ones(1, 2)).first is None
        True
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module (got {type(model).__name__})")
    records: list[ModuleRecord] = []
    handles = []
    running: list[str] = []  # the modules entered and not yet left: the last one is where an error happened

    def enter_for(name: str) -> Callable:
        def enter(module: nn.Module, args: Any) -> None:
            running.append(name)
        return enter

    def hook_for(name: str) -> Callable:
        def hook(module: nn.Module, args: Any, output: Any) -> None:
            if running:
                running.pop()
            records.append(_record(len(records), name, module, args, output))
        return hook

    try:
        for name, module in model.named_modules():
            handles.append(module.register_forward_pre_hook(enter_for(name)))
            handles.append(module.register_forward_hook(hook_for(name)))
        output = _call_model(model, inputs, kwargs, where=running)
    finally:
        for handle in handles:
            handle.remove()
    return NonFiniteReport(records=tuple(records), output=output)


def _describe(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        return f"a {_dtype_name(value.dtype)} tensor of shape {tuple(value.shape)} on {value.device.type}"
    return type(value).__name__


def _check_logits(logits: Any, targets: torch.Tensor) -> None:
    """The model's output fits ``cross_entropy`` with these class-index targets."""
    if not isinstance(logits, torch.Tensor) or logits.dim() != 2 or len(logits) != len(targets):
        shape = tuple(logits.shape) if isinstance(logits, torch.Tensor) else type(logits).__name__
        raise ValueError(f"model must map inputs to logits of shape ({len(targets)}, classes) (got {shape})")
    if len(targets) and not 0 <= int(targets.min()) <= int(targets.max()) < logits.shape[1]:
        raise ValueError(f"targets must be class indices from 0 to {logits.shape[1] - 1}: the model gives "
                         f"{logits.shape[1]} logits per row (got values from {int(targets.min())} to "
                         f"{int(targets.max())})")


def _call_model(model: nn.Module, inputs: Sequence[Any], kwargs: dict[str, Any] | None = None, *,
                argument: str = "inputs", where: Sequence[str] = ()) -> Any:
    """``model(*inputs, **kwargs)``; an error from inside (most often inputs that do not fit: ``mat1 and mat2 shapes
    cannot be multiplied``) becomes a :class:`~ampcourse.validate.ModelCallFailed` (a ``ValueError``, and still a
    ``RuntimeError``) that names ``argument``, what was passed, the module that failed (the last name in
    ``where``, when the caller tracks it) and the error in one line."""
    try:
        return model(*inputs, **(kwargs or {}))
    except (RuntimeError, TypeError, IndexError) as err:
        reason = (str(err).strip().splitlines() or [type(err).__name__])[0]
        module = (f" in module '{where[-1] or '(the model)'}' ({type(model.get_submodule(where[-1])).__name__})"
                  if where else "")
        passed = ", ".join(_describe(x) for x in (*inputs, *(kwargs or {}).values())) or "nothing"
        raise ModelCallFailed(
            f"the model failed{module} on the {argument} given ({passed}): {type(err).__name__}: {reason}. If that "
            f"is a shape or dtype mismatch, pass {argument} that the model's first layer expects (its input size "
            "and dtype, on the model's device).") from err

# --- The backward pass: detect_anomaly ---------------------------------------------------------------------

_NODE = re.compile(r"Function '(\w+)' returned (nan|inf)")
_SOURCE_LINE = re.compile(r"^\s+File .*, line \d+, in (\S+)\n\s+(.+)$", re.MULTILINE)


@dataclass(frozen=True)
class AnomalyReport:
    """What ``detect_anomaly`` said, tidied (see :func:`anomaly_message`).

    Attributes:
        raised: whether the backward pass raised.
        error: the error's message (one line), or "" if nothing was raised.
        node: the autograd node that returned a NaN, e.g. ``"SqrtBackward0"`` (None if not found).
        forward_line: the source line of the forward call that created that node (no file path).
        forward_function: the function that line is in.
        warnings: the first line of each warning it issued (paths left out).
    """

    raised: bool
    error: str
    node: str | None
    forward_line: str | None
    forward_function: str | None
    warnings: tuple[str, ...]

    def summary(self) -> str:
        if not self.raised:
            return "detect_anomaly: the backward pass ran without an anomaly"
        lines = [f"error    : {self.error}"]
        if self.forward_line:
            lines.append(f"forward  : {self.forward_line}   (in {self.forward_function})")
        lines += [f"warning  : {w}" for w in self.warnings]
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.summary()


def _first_line(text: str) -> str:
    return text.strip().splitlines()[0] if text.strip() else ""


def anomaly_message(fn: Callable[[], Any], check_nan: bool = True) -> AnomalyReport:
    """Run ``fn()`` (a forward + ``backward()``) under ``torch.autograd.detect_anomaly`` and tidy what it says.

    ``detect_anomaly`` records, for every autograd node, the Python traceback of the forward call that
    created it (that is its cost: every op pays for a traceback), and checks every backward node's
    output: the first one that returns a NaN raises ``RuntimeError: Function 'XBackward0' returned nan
    values in its 0th output.`` Before that it issues two ``UserWarning``s: one that anomaly mode is on
    (and slow), and one with the forward traceback of the guilty node. This function catches the error
    and the warnings and keeps: the error's message, the node name, the last source line of that forward
    traceback, and each warning's first line. Other exceptions from ``fn`` propagate.

    Args:
        fn: a callable with no arguments that runs the forward and backward passes.
        check_nan: passed to ``detect_anomaly``.
    """
    if not callable(fn):
        raise TypeError(f"fn must be a callable with no arguments (got {type(fn).__name__})")
    if not isinstance(check_nan, bool):
        raise TypeError(f"check_nan must be a bool (got {check_nan!r})")
    error = ""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            with torch.autograd.detect_anomaly(check_nan=check_nan):
                fn()
        except RuntimeError as err:
            if not _NODE.search(str(err)):
                raise
            error = _first_line(str(err))
    node = _NODE.search(error)
    forward_line = forward_function = None
    notes = []
    for item in caught:
        text = str(item.message)
        notes.append(_first_line(text))
        if "Traceback of forward call" in text:
            frames = _SOURCE_LINE.findall(text)
            if frames:
                forward_function, forward_line = frames[-1][0], frames[-1][1].strip()
    return AnomalyReport(raised=bool(error), error=error, node=node.group(1) if node else None,
                         forward_line=forward_line, forward_function=forward_function, warnings=tuple(notes))


def anomaly_overhead(fn: Callable[[], Any], repeats: int = 5) -> tuple[float, float]:
    """Median seconds of ``fn()`` without and with ``detect_anomaly`` (``fn`` must not produce a NaN).

    The anomaly mode's warning is silenced here; it says what this measures: the mode is slow. Both are timed
    on one thread (``torch.set_num_threads(1)``, restored afterwards): a sub-millisecond step run on several
    threads of a loaded machine spends its time waiting for descheduled threads at every op, which swamps the
    cost being measured (a lesson 07 run under load measured 124 ms for a 0.6 ms step, in both modes).
    """
    if not callable(fn):
        raise TypeError(f"fn must be a callable with no arguments (got {type(fn).__name__})")
    repeats = as_int("repeats", repeats, minimum=1)

    def median_time(anomaly: bool) -> float:
        times = []
        for _ in range(repeats + 1):  # the first call warms up
            start = time.perf_counter()
            if anomaly:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    with torch.autograd.detect_anomaly():
                        fn()
            else:
                fn()
            times.append(time.perf_counter() - start)
        times = sorted(times[1:])
        return times[len(times) // 2]

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return median_time(False), median_time(True)
    finally:
        torch.set_num_threads(threads)

# --- Gradient statistics -----------------------------------------------------------------------------------

@dataclass(frozen=True)
class GradStats:
    """Per-parameter gradient statistics (see :func:`grad_stats`)."""

    rows: tuple[dict[str, Any], ...]
    without_grad: tuple[str, ...]

    def table(self, title: str = "gradients per parameter") -> Table:
        return Table(list(self.rows), title=title, formats={
            "norm": "{:.3g}", "max |g|": "{:.3g}", "zero": "{:.1%}", "fp16 underflow": "{:.1%}"})

    @property
    def n_nonfinite(self) -> int:
        return sum(row["non-finite"] for row in self.rows)

    def total(self, model: nn.Module) -> dict[str, Any]:
        """The whole model in one row: fractions over all gradient entries (``model`` gives the sizes)."""
        sizes = dict((name, p.numel()) for name, p in model.named_parameters())
        n = sum(sizes[row["parameter"]] for row in self.rows)
        if n == 0:
            return {"zero": math.nan, "fp16 underflow": math.nan, "non-finite": 0}
        return {key: sum(row[key] * sizes[row["parameter"]] for row in self.rows) / n
                for key in ("zero", "fp16 underflow")} | {"non-finite": self.n_nonfinite}

    def __str__(self) -> str:
        return self.table().text()


def grad_stats(model: nn.Module) -> GradStats:
    """Per parameter: gradient norm, max |g|, fraction exactly 0, fraction that float16 would round to 0,
    and how many entries are inf or NaN.

    *fp16 underflow* counts the non-zero entries that become 0 when cast to float16 (|g| below about
    3e-8, half of float16's smallest subnormal): gradients that an FP16 backward pass would lose. The
    norm and max use the finite entries only. Parameters without a ``.grad`` are listed in
    ``without_grad``.

    Example:
        >>> layer = torch.nn.Linear(2, 1)
        >>> layer(torch.ones(1, 2)).sum().backward()
        >>> [row["parameter"] for row in grad_stats(layer).rows]
        ['weight', 'bias']
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module (got {type(model).__name__})")
    rows, without = [], []
    for name, param in model.named_parameters():
        if param.grad is None:
            without.append(name)
            continue
        g = param.grad.detach()
        finite = torch.isfinite(g)
        values = g[finite].float()
        nonzero = g != 0
        rows.append({
            "parameter": name,
            "shape": "×".join(str(s) for s in g.shape) or "scalar",
            "norm": float(values.norm()) if values.numel() else math.nan,
            "max |g|": float(values.abs().max()) if values.numel() else math.nan,
            "zero": float((~nonzero).float().mean()),
            "fp16 underflow": float((nonzero & finite & (g.to(torch.float16) == 0)).float().mean()),
            "non-finite": int((~finite).sum()),
        })
    return GradStats(rows=tuple(rows), without_grad=tuple(without))

# --- FP32 islands ------------------------------------------------------------------------------------------

def _to_float32(value: Any) -> Any:
    """Floating-point tensors (also inside tuples, lists, dicts) → float32; everything else as it is."""
    if isinstance(value, torch.Tensor):
        return value.float() if value.is_floating_point() else value
    if isinstance(value, tuple):
        return tuple(_to_float32(v) for v in value)
    if isinstance(value, list):
        return [_to_float32(v) for v in value]
    if isinstance(value, dict):
        return {k: _to_float32(v) for k, v in value.items()}
    return value


def _device_type(values: Iterable[Any], fallback: nn.Module | None = None) -> str:
    for t in _tensors(list(values)):
        return t.device.type
    if fallback is not None:
        for p in fallback.parameters():
            return p.device.type
    return "cpu"


class FP32Island(nn.Module):
    """Run ``module`` in FP32 even inside a ``torch.autocast`` region.

    Two things are needed, and each alone fails:

    * ``torch.autocast(device_type=..., enabled=False)`` inside, or autocast casts the inputs of the
      block's matmuls back to float16;
    * ``.float()`` on the floating-point inputs, because a float16 tensor from the layer before stays
      float16 once autocast is off (``Linear`` then refuses it: "mat1 and mat2 must have the same dtype").

    Integer inputs (indices, masks) are left alone. The output is float32; the next autocast op casts it
    down again as it needs, so the island should end where values are back in float16's range (after a
    normalisation, for instance).
    """

    def __init__(self, module: nn.Module) -> None:
        super().__init__()
        if not isinstance(module, nn.Module):
            raise TypeError(f"module must be a torch.nn.Module (got {type(module).__name__})")
        self.module = module

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        device_type = _device_type([args, kwargs], self.module)
        with torch.autocast(device_type=device_type, enabled=False):
            return self.module(*_to_float32(args), **_to_float32(kwargs))


def fp32_loss(loss_fn: Callable[..., torch.Tensor]) -> Callable[..., torch.Tensor]:
    """``loss_fn`` computed in FP32: autocast off inside, floating-point tensors cast to float32, others kept.

    Class-index targets (``int64``) stay ``int64``, which ``cross_entropy`` and ``nll_loss`` require;
    soft targets (probabilities, floating point) become float32 like the logits.

    Example:
        >>> loss = fp32_loss(torch.nn.functional.cross_entropy)
        >>> loss(torch.zeros(2, 3, dtype=torch.float16), torch.tensor([0, 2])).dtype
        torch.float32
    """
    if not callable(loss_fn):
        raise TypeError(f"loss_fn must be callable, e.g. torch.nn.CrossEntropyLoss() (got {type(loss_fn).__name__})")

    def wrapped(*args: Any, **kwargs: Any) -> torch.Tensor:
        device_type = _device_type([args, kwargs])
        with torch.autocast(device_type=device_type, enabled=False):
            return loss_fn(*_to_float32(args), **_to_float32(kwargs))

    wrapped.__name__ = f"fp32_loss({getattr(loss_fn, '__name__', type(loss_fn).__name__)})"
    wrapped.__doc__ = f"{wrapped.__name__}: the loss in FP32, integer targets kept as they are."
    return wrapped

# --- Activation peaks per precision -----------------------------------------------------------------------

def activation_peaks(model: nn.Module, inputs: torch.Tensor, device_type: str = "cpu") -> list[dict[str, Any]]:
    """The largest |output| of each module in FP32, bf16 autocast and fp16 autocast, side by side.

    One row per module (execution order), with the float16 limit to compare with. ``device_type`` is the
    autocast device type: the one ``inputs`` is on.
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module (got {type(model).__name__})")
    if not isinstance(inputs, torch.Tensor):
        raise TypeError(f"inputs must be a tensor (got {type(inputs).__name__})")
    device_type = as_device("device_type", device_type).type
    if inputs.device.type != device_type:
        raise ValueError(f"device_type={device_type!r}, but inputs are on {inputs.device.type}: autocast for "
                         f"{device_type} would not touch them. Pass device_type={inputs.device.type!r}.")
    columns: dict[str, NonFiniteReport] = {}
    with torch.no_grad():
        columns["fp32"] = find_nonfinite(model, inputs)
        for name, dtype in (("bf16 autocast", torch.bfloat16), ("fp16 autocast", torch.float16)):
            with torch.autocast(device_type=device_type, dtype=dtype):
                columns[name] = find_nonfinite(model, inputs)
    rows = []
    for i, record in enumerate(columns["fp32"].records):
        row: dict[str, Any] = {"module": record.label}
        for name, report in columns.items():
            r = report.records[i]
            row[name] = f"{r.max_abs:.4g} ({_dtype_name(r.output_dtype)})" if r.n_nan == 0 else "NaN"
        rows.append(row)
    return rows

# --- Reading a loss-scale history --------------------------------------------------------------------------

@dataclass(frozen=True)
class ScaleDiagnosis:
    """What a loss-scale history says (see :func:`diagnose_scale`)."""

    status: str  # "healthy", "unstable" or "collapsing"
    reason: str
    steps: int
    skipped_steps: tuple[int, ...]
    warmup_skips: int
    trailing_skips: int
    first_scale: float
    final_scale: float

    @property
    def n_skipped(self) -> int:
        return len(self.skipped_steps)

    def __str__(self) -> str:
        return f"{self.status}: {self.reason}"


COLLAPSE_WINDOW = 8  # diagnose_scale: this many skipped steps in a row, at the end of a history, is a collapse
MAX_SKIP_FRACTION = 0.1  # diagnose_scale: more skipped steps than this, from the first applied one on, is unstable


def diagnose_scale(scales: Sequence[float], *, window: int = COLLAPSE_WINDOW,
                   max_skip_fraction: float = MAX_SKIP_FRACTION) -> ScaleDiagnosis:
    """Read a GradScaler's scale history: ``healthy``, ``unstable`` or ``collapsing``, with the reason.

    ``scales`` holds ``scaler.get_scale()`` read before the first step and after each step's ``update()``
    (``steps + 1`` values). A step was skipped exactly when the scale went *down*
    (:func:`ampcourse.scaler_run.step_was_skipped`: the public way; GradScaler's own flag is private).

    * **collapsing** — each of the last ``window`` steps (or more) was skipped, or the scale reached 0:
      every step overflows, no step updates the model (it is frozen), and the scale shrinks by
      ``backoff_factor`` each step. When even a tiny scale overflows, the inf is not in the scaled
      gradients: look for it in the forward pass (:func:`find_nonfinite`) or the loss.
    * **unstable** — from the first applied step on, more than ``max_skip_fraction`` of the steps were skipped:
      overflows keep coming back (a loss spike, a too-large learning rate, activations near 65504).
    * **healthy** — otherwise. Skips at the very start (the scale backing off from a too-large
      ``init_scale``) and an occasional skip after each growth are normal.

    Example:
        >>> diagnose_scale([65536.0 / 2**k for k in range(10)]).status
        'collapsing'
        >>> diagnose_scale([65536.0, 32768.0] + [32768.0] * 20).status
        'healthy'
    """
    if isinstance(scales, (str, bytes)) or not isinstance(scales, Sequence):
        raise TypeError("scales must be a sequence of scaler.get_scale() values")
    values = [as_float(f"scales[{i}]", s) for i, s in enumerate(scales)]
    if len(values) < 2:
        raise ValueError(f"scales needs at least 2 values (before and after one step), got {len(values)}")
    if any(math.isnan(v) or v < 0 or math.isinf(v) for v in values):
        raise ValueError("scales must be finite and >= 0, as GradScaler's scale is")
    if values[0] == 0:
        raise ValueError("scales[0] must be > 0: a GradScaler starts at its init_scale, which is > 0 (a history that "
                         "starts at 0 is not one that scaler.get_scale() gave)")
    window = as_int("window", window, minimum=1)
    max_skip_fraction = as_float("max_skip_fraction", max_skip_fraction)
    if not 0 <= max_skip_fraction < 1:
        raise ValueError(f"max_skip_fraction must be in [0, 1) (got {max_skip_fraction!r})")
    steps = len(values) - 1
    skipped = [values[i] == 0 or step_was_skipped(values[i], values[i + 1]) for i in range(steps)]
    skipped_steps = tuple(i for i, s in enumerate(skipped) if s)
    warmup = next((i for i, s in enumerate(skipped) if not s), steps)
    trailing = next((i for i, s in enumerate(reversed(skipped)) if not s), steps)
    first, final = values[0], values[-1]
    common = dict(steps=steps, skipped_steps=skipped_steps, warmup_skips=warmup, trailing_skips=trailing,
                  first_scale=first, final_scale=final)
    if final == 0:
        zero_from = values.index(0.0)
        reason = (f"the scale fell to 0 after {zero_from} of {steps} steps ({first:g} → 0: it underflowed float32) "
                  "after every step overflowed and was skipped, so the model is frozen. A smaller init_scale will not "
                  "help if the inf comes from the forward pass — find the first non-finite module.")
        return ScaleDiagnosis(status="collapsing", reason=reason, **common)
    if trailing >= window:
        reason = (f"the scale went down on each of the last {trailing} of {steps} steps ({first:g} → {final:g}): "
                  "every step overflowed and was skipped, so the model is frozen. A smaller init_scale will not "
                  "help if the inf comes from the forward pass — find the first non-finite module.")
        return ScaleDiagnosis(status="collapsing", reason=reason, **common)
    after = skipped[warmup:]
    fraction = sum(after) / len(after) if after else 0.0
    if fraction > max_skip_fraction:
        reason = (f"{sum(after)} of the {len(after)} steps from the first applied one on were skipped "
                  f"({fraction:.0%} > {max_skip_fraction:.0%}): overflows keep coming back.")
        return ScaleDiagnosis(status="unstable", reason=reason, **common)
    if warmup:
        reason = (f"the first {warmup} steps were skipped while the scale backed off from {first:g}; "
                  f"{sum(after)} of the {len(after)} steps after that were skipped ({fraction:.0%}); final scale "
                  f"{final:g}")
    else:
        reason = f"{sum(after)} of the {len(after)} steps were skipped ({fraction:.0%}); final scale {final:g}"
    return ScaleDiagnosis(status="healthy", reason=reason, **common)
