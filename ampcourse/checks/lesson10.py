"""Checks for exercise 10 (FP8): a per-tensor scaled cast, an FP8 linear with ``torch._scaled_mm``, one step of
delayed scaling, the FP8 format for each tensor role, and a block-scaled cast with power-of-two scales.

Each check runs the learner's function on tensors chosen so that the typical mistakes give clearly different
results, then compares with :mod:`ampcourse.fp8`'s reference and with the reference *of each mistake*: the
failure names the mistake that matches (scale inverted, amax of the wrong tensor, the other format's max, no
margin, saturation ignored, E4M3 for gradients, ...).
"""

from __future__ import annotations

import math
from unittest import mock

import torch

from .. import fp8
from . import CheckFailed, call, fail, hints, noted_call, passed, require_callable

E4M3, E5M2 = fp8.E4M3, fp8.E5M2
#: Task 2's bound: an FP8 (E4M3) product with per-tensor scales is within 5% of FP32 (relative Frobenius error).
LINEAR_BOUND = 0.05


def _close(a: float, b: float, rel: float = 1e-3) -> bool:
    return math.isclose(float(a), float(b), rel_tol=rel)


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


# ----------------------------------------------------------------------------------------------- task 1
TASK1 = "Task 1 (scaled_cast)"


def _task1_cases() -> list[tuple[torch.Tensor, torch.dtype]]:
    """Small activations (around 0.01) whose largest *magnitude* is a negative outlier, in E4M3 and (2-D) E5M2; a
    tensor already at E4M3's max (scale exactly 1); and one whose scale is a power of two, with values that land
    exactly on E4M3's rounding ties (100 between 96 and 104, 0.5625 between 0.5 and 0.625)."""
    cases = []
    for seed, dtype, shape in ((1, E4M3, (64,)), (2, E5M2, (8, 8))):
        x = torch.randn(64, generator=_gen(seed)) * 0.01
        x[7], x[11] = -2.5, 1.25
        cases.append((x.reshape(shape), dtype))
    at_max = torch.randn(32, generator=_gen(3)) * 50
    at_max[4] = 448.0
    cases.append((at_max, E4M3))
    ties = torch.tensor([1.75, -100 / 256, 0.5625 / 256, 104 / 256, -0.3, 0.01])  # scale 448 / 1.75 = 256
    cases.append((ties, E4M3))
    return cases


def _unpack(task: str, result, name: str, n: int):
    if not isinstance(result, tuple) or len(result) != n:
        shape = type(result).__name__ if not isinstance(result, tuple) else f"a tuple of {len(result)}"
        raise fail(task, f"`{name}` should return a tuple of {n} values (see the task), but it returned {shape}.")
    return result


def _as_scale(task: str, scale) -> float:
    if isinstance(scale, torch.Tensor) and scale.numel() == 1:
        return float(scale)
    if isinstance(scale, (int, float)) and not isinstance(scale, bool):
        return float(scale)
    raise fail(task, f"the scale should be one number (a float or a scalar tensor), not {type(scale).__name__}.")


def scaled_cast(fn) -> None:
    """``scaled_cast(x, fp8_dtype) -> (x_fp8, scale)``: scale = max / amax(|x|), x_fp8 = cast(x · scale)."""
    fn = require_callable(TASK1, fn, "scaled_cast")
    for x, dtype in _task1_cases():
        given = x.clone()
        x_fp8, scale = _unpack(TASK1, call(TASK1, fn, "scaled_cast", given, dtype), "scaled_cast", 2)
        if not torch.equal(given, x):
            raise fail(TASK1, "your function changed x in place (mul_/clamp_ on the input): the caller's tensor is "
                              "no longer what it was. Compute x * scale into a new tensor.")
        scale = _as_scale(TASK1, scale)
        top, amax = torch.finfo(dtype).max, float(x.abs().max())
        name = fp8.fp8_limits(dtype).name
        if not math.isfinite(scale) or scale <= 0:
            raise fail(TASK1, f"your scale is {scale}: it should be a positive number, max / amax.")
        if _close(scale, amax / top) and not _close(amax, top):
            raise fail(TASK1, "your scale is inverted (amax / max): it shrinks x towards 0. The scale maps amax onto "
                              "the format's max: scale = max / amax.")
        if _close(scale, 1.0) and not _close(top / amax, 1.0):
            raise fail(TASK1, "your scale is 1 — no scaling: small values flush to 0. Compute scale = max / amax.")
        if _close(scale, top / float(x.max())) and not _close(float(x.max()), amax):
            raise fail(TASK1, "your amax is x.max(), the largest *signed* value; here the largest magnitude is a "
                              "negative number, which then saturates. Use amax = x.abs().max().")
        if _close(scale, top / float(x.abs().mean())):
            raise fail(TASK1, "your amax is the mean magnitude: most values then land above max and saturate. amax is "
                              "the largest magnitude, x.abs().max().")
        other = torch.finfo(E5M2 if dtype == E4M3 else E4M3).max
        if _close(scale, other / amax):
            raise fail(TASK1, f"for {name} you used the other format's max ({other:g}). Read it from the dtype: "
                              "torch.finfo(fp8_dtype).max.")
        if not _close(scale, top / amax):
            for low, short in ((torch.bfloat16, "bf16"), (torch.float16, "fp16")):
                rounded = (float(top / x.to(low).abs().max()), float(torch.tensor(top / amax).to(low)))
                if any(_close(scale, r, 1e-6) for r in rounded):
                    raise fail(TASK1, f"your scale was computed in {short} ({low}: x or its amax cast to {short} "
                                      f"first): {short} rounds max / amax = {top / amax:.6g} to {scale:.6g}. "
                                      "Compute amax and the scale in float32.")
            raise fail(TASK1, f"for {name} the scale should be max / amax = {top:g} / {amax:g} = {top / amax:.6g}; "
                              f"yours is {scale:.6g}.")
        if not isinstance(x_fp8, torch.Tensor) or x_fp8.dtype != dtype:
            got = x_fp8.dtype if isinstance(x_fp8, torch.Tensor) else type(x_fp8).__name__
            raise fail(TASK1, f"x_fp8 should be a {dtype} tensor; yours is {got}. Cast with .to(fp8_dtype).")
        if x_fp8.shape != x.shape:
            raise fail(TASK1, f"x_fp8 has shape {tuple(x_fp8.shape)}; it should keep x's shape {tuple(x.shape)}.")
        want = fp8.to_fp8(x, scale, dtype).float()
        got = torch.Tensor.float(x_fp8)  # through the class: a `float` set on the tensor never runs (rev25-r6 E3)
        if torch.equal(got, want):
            continue
        if torch.equal(got, x.clamp(-top, top).to(dtype).float()):
            raise fail(TASK1, "x_fp8 is x cast without the scale: multiply by the scale before the cast, "
                              "(x * scale).to(fp8_dtype).")
        if torch.equal(got, (x / scale).clamp(-top, top).to(dtype).float()):
            raise fail(TASK1, "you divided x by the scale: multiply (x * scale), and divide only to dequantise.")
        for low in (torch.bfloat16, torch.float16):
            if torch.equal(got, (x.to(low) * scale).float().clamp(-top, top).to(dtype).float()):
                raise fail(TASK1, f"you scaled x in {low} before the cast: x * scale is rounded twice. Multiply "
                                  "in float32, then cast to FP8 once.")
        raise fail(TASK1, f"x_fp8 differs from (x * scale) cast to {name} in "
                          f"{int((got != want).sum())} of {x.numel()} values.")
    passed(TASK1, "scale = max / amax(|x|) for E4M3 and E5M2 (a negative largest magnitude, a tensor already at "
                  "448, a power-of-two scale landing on rounding ties), x_fp8 = (x · scale) cast, x left unchanged.")


# ----------------------------------------------------------------------------------------------- task 2
TASK2 = "Task 2 (fp8_linear)"


def _task2_inputs() -> tuple[torch.Tensor, torch.Tensor]:
    """Activations of size ~1 with a negative outlier of -100, and small weights (~0.001): their scales differ
    ~25,000×. k = 64 and n = 48 are multiples of 16, as CUDA's _scaled_mm wants."""
    g = _gen(10)
    x = torch.randn(32, 64, generator=g)
    x[3, 5] = -100.0
    weight = torch.randn(48, 64, generator=g) * 0.001
    return x, weight


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.float() - b.float()).norm() / b.float().norm())


def _bind(a, b, scale_a=None, scale_b=None, bias=None, scale_result=None, out_dtype=None, use_fast_accum=False):
    """``torch._scaled_mm``'s parameters, by name, whichever way the learner passed them."""
    return dict(a=a, b=b, scale_a=scale_a, scale_b=scale_b, bias=bias, scale_result=scale_result,
                out_dtype=out_dtype, use_fast_accum=use_fast_accum)


def _mostly_equal(got: torch.Tensor, want: torch.Tensor) -> bool:
    """The same FP8 values, but for at most 1% of them (a scale rounded once more lands a few values one step
    away): a right answer written with other arithmetic is not rejected, a missing or wrong scale is."""
    return got.shape == want.shape and int((got.float() != want.float()).sum()) <= want.numel() // 100


def _operand_mistake(operand: torch.Tensor, t: torch.Tensor, other: torch.Tensor, role: str) -> str:
    """Name what went wrong with the FP8 copy of ``t`` (x or the weight); ``other`` is the other tensor."""
    top = torch.finfo(E4M3).max
    amax = float(t.abs().max())
    candidates = [
        (t.clamp(-top, top), f"{role} was cast without its scale (its values as they are, in E4M3): small values "
                             "lose their bits or flush to 0. Multiply by 448 / amax first."),
        (t / amax, f"{role}'s scale maps its amax to 1.0 (you divided by amax), not to E4M3's max 448: the values "
                   "use only the bottom of the format. scale = 448 / amax."),
        (t * (top / float(other.abs().max())), f"{role}'s scale comes from the amax of the other tensor — the wrong "
                                                "tensor. Each tensor gets its own scale: 448 / its own amax."),
        (t * (top / float(t.max())), f"{role}'s amax is its largest *signed* value, not its largest magnitude: "
                                     "use t.abs().max()."),
    ]
    for scaled, message in candidates:
        if _mostly_equal(operand, scaled.clamp(-top, top).to(E4M3)):
            return message
    return (f"{role}'s FP8 copy is not {role} · (448 / {role}.abs().max()) cast to E4M3: its scale is not the "
            "per-tensor scale of task 1.")


def _task2_arguments(c: dict) -> None:
    """The mistakes of this task that show in _scaled_mm's arguments, named before its contract is checked (the
    contract would refuse some of them with a reason that is not the mistake)."""
    a, b = c["a"], c["b"]
    if any(isinstance(t, torch.Tensor) and t.dtype == E5M2 for t in (a, b)):
        raise fail(TASK2, "you cast a forward operand to E5M2: this task's operands (activations, weights) use "
                          "E4M3, whose extra mantissa bit halves the rounding error.")
    if c["bias"] is not None:
        raise fail(TASK2, "the task has no bias: fp8_linear returns x @ weight.T only, so call torch._scaled_mm "
                          "without bias= (and on CUDA a bias is refused with out_dtype=torch.float32 anyway).")
    for key in ("scale_a", "scale_b"):
        t = c[key]
        if isinstance(t, torch.Tensor) and t.numel() != 1:
            raise fail(TASK2, f"{key} has {t.numel()} elements (shape {tuple(t.shape)}): the task asks for "
                              "per-tensor scaling, one scale per tensor from its amax over all its values — not "
                              "one per row. Pass a one-element float32 tensor, 1 / scale.")
        if isinstance(t, torch.Tensor) and t.dtype != torch.float32:
            raise fail(TASK2, f"{key} is a {t.dtype} tensor: a per-tensor scale of torch._scaled_mm must be "
                              "float32 (torch's own rule for tensorwise scales, which CUDA enforces; this CPU "
                              "build lets float64 through). Pass (1 / scale).float().")


def fp8_linear(fn) -> None:
    """``fp8_linear(x, weight) -> x @ weight.T`` through per-tensor E4M3 scales and ``torch._scaled_mm``."""
    fn = require_callable(TASK2, fn, "fp8_linear")
    x, weight = _task2_inputs()
    real = torch._scaled_mm if fp8.fp8_matmul_available("cpu") else fp8.emulated_scaled_mm
    calls = []

    def spy(*args, **kwargs):  # records the call, names the task's mistakes, holds it to CUDA's contract, runs it
        try:
            bound = _bind(*args, **kwargs)
        except TypeError as err:
            raise fail(TASK2, f"torch._scaled_mm was called with arguments it does not take ({err}).") from None
        calls.append(bound)
        _task2_arguments(bound)
        try:
            fp8._check_scaled_mm_contract(bound["a"], bound["b"], bound["scale_a"], bound["scale_b"], bound["bias"],
                                          bound["out_dtype"], bound["use_fast_accum"])
        except (TypeError, ValueError) as err:
            raise fail(TASK2, f"torch._scaled_mm's contract (as CUDA enforces it) refuses this call: {err}.") from None
        return real(bound["a"], bound["b"], scale_a=bound["scale_a"], scale_b=bound["scale_b"], bias=bound["bias"],
                    scale_result=bound["scale_result"], out_dtype=bound["out_dtype"],
                    use_fast_accum=bound["use_fast_accum"])

    with mock.patch.object(torch, "_scaled_mm", spy):
        out = call(TASK2, fn, "fp8_linear", x.clone(), weight.clone())
    if not calls:
        raise fail(TASK2, "torch._scaled_mm was never called: cast x and the weight to E4M3 and multiply them with "
                          "torch._scaled_mm(x_fp8, w_fp8.t(), scale_a=..., scale_b=..., out_dtype=torch.float32).")
    c = calls[0]
    a, b = c["a"], c["b"]
    if c["out_dtype"] is None:
        raise fail(TASK2, "you left out out_dtype: torch._scaled_mm then returns its result in the operands' FP8 "
                          "dtype. Pass out_dtype=torch.float32.")
    if c["out_dtype"] != torch.float32:
        raise fail(TASK2, f"out_dtype={c['out_dtype']}: the task asks for an FP32 output. Pass "
                          "out_dtype=torch.float32.")
    if not isinstance(out, torch.Tensor):
        raise fail(TASK2, f"`fp8_linear` should return a tensor, not {type(out).__name__}.")
    if out.dtype != torch.float32:
        raise fail(TASK2, f"the result is {out.dtype}; return _scaled_mm's FP32 output as it is.")
    if out.shape != (x.shape[0], weight.shape[0]):
        raise fail(TASK2, f"the output has shape {tuple(out.shape)}; x @ weight.T has "
                          f"{(x.shape[0], weight.shape[0])}. Pass the weight transposed: w_fp8.t().")
    if a.shape != x.shape:
        raise fail(TASK2, f"the first operand has shape {tuple(a.shape)}: it should be x's FP8 copy {tuple(x.shape)}.")
    if b.shape != (weight.shape[1], weight.shape[0]):
        raise fail(TASK2, f"the second operand has shape {tuple(b.shape)}: pass the weight's FP8 copy transposed, "
                          "w_fp8.t().")
    if not _mostly_equal(a, fp8.to_fp8(x, fp8.scale_from_amax(fp8.amax(x), E4M3), E4M3)):
        raise fail(TASK2, _operand_mistake(a, x, weight, "x"))
    if not _mostly_equal(b.t(), fp8.to_fp8(weight, fp8.scale_from_amax(fp8.amax(weight), E4M3), E4M3)):
        raise fail(TASK2, _operand_mistake(b.t(), weight, x, "the weight"))
    if b.stride(0) != 1:
        raise fail(TASK2, f"the second operand is row-major (stride {b.stride()}): CUDA's _scaled_mm wants it "
                          "column-major. Pass w_fp8.t(), a column-major view, not w_fp8.t().contiguous().")
    top = torch.finfo(E4M3).max
    for key, t, role in (("scale_a", x, "x"), ("scale_b", weight, "the weight")):
        got, sx = float(c[key]), top / float(t.abs().max())
        if _close(got, 1 / sx, 1e-3):
            continue
        if _close(got, sx, 1e-3):
            raise fail(TASK2, f"{key} is {role}'s scale itself: _scaled_mm's scales dequantise (it multiplies the "
                              f"product by scale_a · scale_b), so pass 1 / scale (the output is off by scale²).")
        if _close(got, 1.0):
            raise fail(TASK2, f"{key}=1: _scaled_mm does not undo {role}'s scale, so the output is off by that "
                              "scale. Pass 1 / scale as the dequantisation factor.")
        raise fail(TASK2, f"{key} should be 1 / ({role}'s scale) = amax / 448 = {1 / sx:.4g}; yours is {got:.4g}.")
    expected = fp8.emulated_scaled_mm(a, b, scale_a=c["scale_a"].float(), scale_b=c["scale_b"].float(),
                                      bias=c["bias"], out_dtype=torch.float32)
    if _rel(out, expected) > 1e-4:
        raise fail(TASK2, "the result is not what torch._scaled_mm returned: return its output as it is (no "
                          "rescaling, no bias, nothing added afterwards).")
    error = _rel(out, x @ weight.t())
    if error > LINEAR_BOUND:
        raise fail(TASK2, f"the output is {error:.1%} away from x @ weight.T (bound {LINEAR_BOUND:.0%}). Check each "
                          "step: amax per tensor, scale = 448 / amax, clamp, cast, then _scaled_mm with 1 / scale.")
    passed(TASK2, "torch._scaled_mm got x and the weight cast to E4M3 each with its own per-tensor scale (operands "
                  "compared value by value), 1 / scale as scale_a and scale_b, a column-major second operand and "
                  f"out_dtype=torch.float32; the result is within {LINEAR_BOUND:.0%} of x @ weight.T, with weights "
                  "~1000× smaller than the activations and a negative outlier.")


# ----------------------------------------------------------------------------------------------- task 3
TASK3 = "Task 3 (delayed_cast)"


def _task3_steps() -> list[tuple[torch.Tensor, list[float], torch.dtype, int]]:
    """(x, history, dtype, margin) cases; the history is not sorted; a zero entry is a step not seen yet."""
    g = _gen(20)
    base = torch.randn(256, generator=g)
    base = base / base.abs().max()  # amax exactly 1: each case's amax is its factor
    return [
        (base * 1.4, [3.0, 5.0, 2.0, 4.0], E4M3, 1),
        (base * 0.7, [1.5, 0.75, 1.0, 0.5], E4M3, 0),
        (base * 168.0, [40.0, 30.0, 20.0, 10.0], E5M2, 0),  # far above the history: E5M2 overflows unless clamped
        (base * 12.0, [0.0, 5.0, 2.0, 0.0], E4M3, 2),  # above max(history), within the margin's headroom of 2^2
        (base * 3.0, [0.0, 0.0, 0.0], E4M3, 0),  # nothing recorded yet: scale 1
        (base * 0.0, [2.0, 1.0], E5M2, 1),  # an all-zero tensor: its amax, 0.0, is recorded
        (base * 20.0, [4.0, 3.0, 1.0, 2.0], E4M3, 3),  # margin 3: 2**3 = 8, not 2 * 3 = 6 (0, 1, 2 cannot tell)
    ]


def _delayed_step(fn, x, history, dtype, margin):
    result = call(TASK3, fn, "delayed_cast", x.clone(), list(history), dtype, margin)
    x_fp8, scale, new_history = _unpack(TASK3, result, "delayed_cast", 3)
    return x_fp8, _as_scale(TASK3, scale), new_history


def delayed_cast(fn) -> None:
    """``delayed_cast(x, history, fp8_dtype, margin) -> (x_fp8, scale, new_history)``: delayed scaling, one step."""
    fn = require_callable(TASK3, fn, "delayed_cast")
    for x, history, dtype, margin in _task3_steps():
        before = list(history)
        top, amax = torch.finfo(dtype).max, float(x.abs().max())
        if max(before) == 0:  # nothing recorded yet
            try:
                x_fp8, scale, new_history = _delayed_step(fn, x, history, dtype, margin)
            except CheckFailed as failed:
                if "ZeroDivisionError" in str(failed) or "division by zero" in str(failed):
                    raise fail(TASK3, "an all-zero history (no amax recorded yet) divided by zero. Transformer "
                                      "Engine keeps its starting scale then: return scale 1.0 when max(history) "
                                      "is 0.") from None
                raise
            if not _close(scale, 1.0):
                raise fail(TASK3, f"an all-zero history (no amax recorded yet) must give scale 1.0, as Transformer "
                                  f"Engine starts; yours is {scale:.6g}.")
            want = 1.0
        else:
            try:
                x_fp8, scale, new_history = _delayed_step(fn, x, history, dtype, margin)
            except CheckFailed as failed:
                if margin == 0 and ("ZeroDivisionError" in str(failed) or "division by zero" in str(failed)):
                    raise fail(TASK3, "with margin 0 and a non-zero history your scale divided by zero: the "
                                      "headroom factor is 2**margin, not 2*margin (or margin) — 2**0 = 1, no "
                                      "headroom.") from None
                raise
            want = top / max(before) / 2**margin
        if want != 1.0 or max(before):
            if amax and (_close(scale, top / amax / 2**margin) or _close(scale, top / amax)):
                raise fail(TASK3, "your scale comes from this step's amax: that is dynamic scaling. Delayed scaling "
                                  "builds it from the history of *previous* amaxes: max / max(history).")
            updated = before[1:] + [amax]
            if (_close(scale, top / max(updated) / 2**margin) and not _close(max(updated), max(before))):
                raise fail(TASK3, "you updated the history before computing the scale, so this step's amax is in "
                                  "it: compute the scale from the old history first, then append the new amax.")
            if margin and _close(scale, top / max(before)):
                raise fail(TASK3, f"no margin: with margin = {margin} the scale must be max / max(history) / "
                                  "2**margin, so a tensor that grows a little since the last steps does not "
                                  "saturate.")
            if margin > 2 and _close(scale, top / max(before) / (2 * margin)):
                raise fail(TASK3, f"your margin divides by 2*margin = {2 * margin}: the headroom factor is "
                                  f"2**margin, not 2*margin (margin = {margin} binades: 2**{margin} = "
                                  f"{2**margin}; the two agree only for margins 1 and 2).")
            if margin and _close(scale, top / max(before) * 2**margin):
                raise fail(TASK3, "the margin is applied the wrong way (scale multiplied by 2**margin): it must "
                                  "leave headroom, scale = max / max(history) / 2**margin.")
            if before[-1] and _close(scale, top / before[-1] / 2**margin) and not _close(before[-1], max(before)):
                raise fail(TASK3, "your scale uses the last amax of the history only; use the largest: "
                                  "max(history).")
            if _close(scale, max(before) * 2**margin / top):
                raise fail(TASK3, "your scale is inverted: scale = max / (max(history) · 2**margin).")
            if not _close(scale, want):
                raise fail(TASK3, f"the scale should be max / max(history) / 2**margin = {want:.6g}; yours is "
                                  f"{scale:.6g}.")
        if not isinstance(x_fp8, torch.Tensor) or x_fp8.dtype != dtype:
            raise fail(TASK3, f"x_fp8 should be a {dtype} tensor.")
        got = torch.Tensor.float(x_fp8)  # through the class (review rev25-r6 E3)
        if not torch.isfinite(got).all():
            raise fail(TASK3, "saturation ignored: x grew past the history, and x · scale overflowed E5M2 to inf. "
                              "Clamp to ±torch.finfo(fp8_dtype).max before the cast (E4M3 casts saturate in "
                              "recent torch, E5M2 casts do not).")
        if not torch.equal(got, fp8.to_fp8(x, scale, dtype).float()):
            peak = max(before)
            if peak and torch.equal(got, fp8.to_fp8(x.clamp(-peak, peak), scale, dtype).float()):
                raise fail(TASK3, "you clamped x to ±max(history) before scaling: that throws away the margin's "
                                  "headroom (x may grow up to 2**margin times). Clamp x · scale to ±max instead.")
            raise fail(TASK3, "x_fp8 differs from (x · scale).clamp(-max, max) cast to the format.")
        if not isinstance(new_history, list) or not all(
                isinstance(v, (int, float)) and not isinstance(v, bool) for v in new_history):
            raise fail(TASK3, "new_history should be a list of floats (use float(x.abs().max())).")
        if len(new_history) != len(before):
            raise fail(TASK3, f"new_history has {len(new_history)} entries, the history had {len(before)}: drop the "
                              "oldest amax and append this step's, so the window keeps its length.")
        if new_history[:-1] != before[1:]:
            if new_history[1:] == before[:-1]:
                raise fail(TASK3, "you put this step's amax at the front and dropped the newest entry: the "
                                  "history is oldest first, so drop history[0] and append at the end.")
            raise fail(TASK3, "new_history should be the history without its oldest (first) entry, then this "
                              "step's amax at the end.")
        last = new_history[-1]
        if amax and (_close(last, amax * scale) or _close(last, float(got.abs().max()))) and not _close(scale, 1.0):
            raise fail(TASK3, "you recorded the amax of the scaled/FP8 tensor — the wrong tensor. The history holds "
                              "the amax of x itself, before scaling.")
        if not math.isclose(last, amax, rel_tol=1e-6, abs_tol=0.0):
            raise fail(TASK3, f"the new history entry should be this step's amax, {amax:.6g}; yours is {last:.6g}.")
    try:
        result = noted_call(fn, torch.ones(4), [], E4M3, 0)
    except ValueError:
        pass
    except Exception as err:  # noqa: BLE001 - a learner's answer may raise anything
        raise fail(TASK3, f"an empty history should raise ValueError (there is no window to scale from); yours "
                          f"raised {type(err).__name__}.") from None
    else:
        raise fail(TASK3, f"an empty history should raise ValueError (there is no window to scale from); yours "
                          f"returned {type(result).__name__}.")
    passed(TASK3, "scale from max(history) with the margin (0, 1, 2 and 3; an x above the history but within the "
                  "margin's headroom), computed before the history is updated; scale 1 for an all-zero history, "
                  "ValueError for an empty one; E5M2's overflow clamped; the history rolled by one with the amax of "
                  "x (0.0 for an all-zero x).")


# ----------------------------------------------------------------------------------------------- task 4
TASK4 = "Task 4 (fp8_format)"


def format_for(amax_history: list[float], smallest: float) -> tuple[torch.dtype | None, float | None]:
    """The reference of task 4: the format whose normal numbers hold ``max(history)`` down to ``smallest`` under
    the scale ``max / max(history)`` — E4M3 if it does (more precision), else E5M2, else ``(None, None)``."""
    peak = max(amax_history)
    for dtype in (E4M3, E5M2):
        lim = fp8.fp8_limits(dtype)
        if smallest * (lim.max / peak) >= lim.smallest_normal:
            return dtype, lim.max / peak
    return None, None


def _task4_cases() -> list[tuple[str, list[float], float]]:
    """(what it is, history, smallest). Spreads (max(history) / smallest) of 2^10, 2^12 (a gradient that fits
    E4M3), 2^20, 2^16 (fits E4M3 only with its subnormals), 2^40 (fits neither), exactly E4M3's normal span
    448 / 2^-6 = 28672 (fits: the smallest value lands on the smallest normal; every number there is exact); then
    both boundaries from either side: 30000 (just past E4M3's span, below the rounded 2^15), 2^29.5 (inside E5M2's
    span 57344 / 2^-14 ≈ 2^29.81, above the rounded 2^29), exactly E5M2's span, and 2^31 (fits E5M2 only with its
    subnormals: neither)."""
    return [
        ("activations", [2.5, 3.0, 2.0], 3.0 * 2.0**-10),
        ("a gradient with a narrow spread", [0.0035, 0.004, 0.003], 0.004 * 2.0**-12),
        ("a gradient with a wide spread", [0.002, 0.001], 0.002 * 2.0**-20),
        ("E4M3's subnormal range", [1.0, 0.5], 2.0**-16),
        ("a spread neither format holds", [8.0, 6.0], 8.0 * 2.0**-40),
        ("exactly E4M3's normal span", [1.0, 7.0, 0.5], 2.0**-12),  # 7 / 2^-12 = 448 / 2^-6 = 28672, exactly
        ("a spread just past E4M3's normal span", [1.0], 1 / 30000),  # 28672 < 30000 < 2^15: E5M2
        ("a spread just inside E5M2's normal span", [1.0], 2.0**-29.5),  # 2^29 < 2^29.5 < 2^29.81: E5M2
        ("exactly E5M2's normal span", [57344.0, 3.0], 2.0**-14),  # scale 1: smallest on E5M2's smallest normal
        ("a spread E5M2 holds only with its subnormals", [1.0], 2.0**-31),  # 2^-31 · 57344 ≈ 2^-15.2: (None, None)
    ]


def fp8_format(fn) -> None:
    """``fp8_format(amax_history, smallest) -> (dtype | None, scale | None)``: the format (and per-tensor scale)
    whose normal numbers hold a tensor's range."""
    fn = require_callable(TASK4, fn, "fp8_format")
    spans = {d: fp8.fp8_limits(d).max / fp8.fp8_limits(d).smallest_normal for d in (E4M3, E5M2)}
    for what, history, smallest in _task4_cases():
        result = call(TASK4, fn, "fp8_format", list(history), smallest)
        dtype, scale = _unpack(TASK4, result, "fp8_format", 2)
        want_dtype, want_scale = format_for(history, smallest)
        peak = max(history)
        spread = peak / smallest
        if dtype is not None and dtype not in (E4M3, E5M2):
            raise fail(TASK4, f"fp8_format returned {dtype!r} as the format: return torch.float8_e4m3fn, "
                              "torch.float8_e5m2 or None.")
        if dtype != want_dtype:
            if dtype == E4M3 and want_dtype == E5M2 and spans[E4M3] < spread <= 2.0**15:
                raise fail(TASK4, f"{what}: a spread of {spread:.6g} is past E4M3's normal span, exactly 448 / 2^-6 "
                                  f"= {spans[E4M3]:g} = 2^{math.log2(spans[E4M3]):.2f}, not 2^15: a rounded span "
                                  "lets the smallest values go subnormal. Compare smallest · scale with "
                                  "torch.finfo(dtype).tiny, or the spread with max / tiny exactly.")
            if dtype is None and want_dtype == E5M2 and 2.0**29 < spread <= spans[E5M2]:
                raise fail(TASK4, f"{what}: a spread of 2^{math.log2(spread):.2f} fits E5M2's normal span, exactly "
                                  f"57344 / 2^-14 = {spans[E5M2]:.0f} = 2^{math.log2(spans[E5M2]):.2f}, not 2^29: "
                                  "a rounded span turns away tensors E5M2 holds. Compare smallest · scale with "
                                  "torch.finfo(dtype).tiny.")
            if dtype == E5M2 and want_dtype is None:
                e5m2 = fp8.fp8_limits(E5M2)
                if smallest * (e5m2.max / peak) >= e5m2.smallest_subnormal:
                    raise fail(TASK4, f"{what}: with E5M2 the smallest value would be subnormal (below 2^-14): it "
                                      "keeps fewer mantissa bits. Count only E5M2's normal range, max / smallest "
                                      f"normal = 2^{math.log2(spans[E5M2]):.2f}; this spread fits neither format: "
                                      "return (None, None).")
            if want_dtype is None:
                raise fail(TASK4, f"{what}: a spread of 2^{math.log2(spread):.0f} fits neither format's normal "
                                  f"range (E5M2 holds {spans[E5M2]:.3g}, 2^{math.log2(spans[E5M2]):.1f}): return "
                                  "(None, None) — keep this tensor in bf16, or scale it more finely.")
            if dtype == E5M2 and want_dtype == E4M3:
                if math.isclose(spread, spans[E4M3]):
                    raise fail(TASK4, f"{what}: the spread is exactly E4M3's normal span, 448 / 2^-6 = 28672: the "
                                      "smallest value lands on E4M3's smallest normal, which still counts (>=).")
                raise fail(TASK4, f"{what}: a spread of 2^{math.log2(spread):.0f} fits E4M3's normal range "
                                  f"({spans[E4M3]:g} = 2^{math.log2(spans[E4M3]):.1f}), so E4M3 keeps one more "
                                  "mantissa bit for every value. The format follows the spread, not the role: "
                                  "choose E4M3 whenever it fits.")
            if dtype == E4M3 and want_dtype == E5M2:
                e4m3 = fp8.fp8_limits(E4M3)
                if smallest * (e4m3.max / peak) >= e4m3.smallest_subnormal:
                    raise fail(TASK4, f"{what}: with E4M3 the smallest value would be subnormal (below 2^-6): it "
                                      "keeps fewer mantissa bits. Count only E4M3's normal range, max / smallest "
                                      "normal = 28672; this spread needs E5M2.")
                raise fail(TASK4, f"{what}: a spread of 2^{math.log2(spread):.0f} is wider than E4M3's normal range "
                                  f"(2^{math.log2(spans[E4M3]):.1f}): its smallest values would be subnormal or "
                                  "flush to 0. Use E5M2 (range) when E4M3 does not fit.")
            if dtype is None:
                want_name = fp8.fp8_limits(want_dtype).name
                raise fail(TASK4, f"{what}: a spread of 2^{math.log2(spread):.2f} fits {want_name}'s normal range "
                                  f"(2^{math.log2(spans[want_dtype]):.2f}): return it, not (None, None).")
            raise fail(TASK4, f"{what}: the format should be {want_dtype}; yours is {dtype}.")
        if want_dtype is None:
            if scale is not None:
                raise fail(TASK4, f"{what}: with no format the scale should be None too; yours is {scale!r}.")
            continue
        scale = _as_scale(TASK4, scale)
        top = torch.finfo(dtype).max
        other = torch.finfo(E5M2 if dtype == E4M3 else E4M3).max
        if _close(scale, want_scale):
            continue
        if _close(scale, top / history[-1]) or _close(scale, top / history[0]):
            raise fail(TASK4, f"{what}: your scale uses one entry of the history; it must keep every recent amax "
                              "in range: max / max(history).")
        if _close(scale, peak / top):
            raise fail(TASK4, f"{what}: your scale is inverted: scale = max / max(history).")
        if _close(scale, other / peak):
            raise fail(TASK4, f"{what}: your scale uses the other format's max ({other:g}): use the chosen "
                              "format's, torch.finfo(dtype).max.")
        if _close(scale, fp8.fp8_limits(dtype).smallest_normal / smallest):
            raise fail(TASK4, f"{what}: your scale puts the smallest value on the smallest normal; the largest "
                              "amax then saturates. The scale maps max(history) onto the format's max.")
        raise fail(TASK4, f"{what}: the scale should be max / max(history) = {want_scale:.6g}; yours is "
                          f"{scale:.6g}.")
    passed(TASK4, "E4M3 whenever the spread fits its normal range (exactly 28672 = 2^14.81, boundary included, "
                  "gradients too), E5M2 when only its 2^29.81 fits (both boundaries tried from either side, "
                  "subnormals not counted), (None, None) when neither does; scale = max / max(history).")



# ----------------------------------------------------------------------------------------------- task 5
TASK5 = "Task 5 (block_cast)"


def _task5_cases() -> list[tuple[str, torch.Tensor, int]]:
    """(what, x, block) on 64 tokens × 256 values. Token 0 holds a negative outlier; block amaxes land on the
    rounding boundaries: 3.5 (448 / 3.5 = 128, already a power of two), 2.0 (224: down 128, nearest 256), 1.5
    (298.7: down 256, up 512), 0.875 (512 exactly), 1.9 (235.8: down 128; the OCP FLOOR rule gives 256 and
    saturates) and 448 (scale 1); token 4 holds one all-zero block of 32, token 5 is all zeros."""
    x = torch.randn(64, 256, generator=_gen(5))
    x[0, 40] = -3.0e4  # the outlier: its largest magnitude is negative
    x[1] = x[1].clamp(-2.0, 2.0)
    x[1, 0:32] = x[1, 0:32].clamp(-1.5, 1.5)
    x[1, 7], x[1, 100] = -1.5, 2.0
    x[2] = x[2].clamp(-3.5, 3.5)
    x[2, 3] = 3.5
    x[3] = x[3].clamp(-0.875, 0.875)
    x[3, 200], x[3, 130] = 0.875, 448.0
    x[4, 64:96] = 0.0
    x[4, 200] = 1.9
    x[5] = 0.0
    return [("blocks of 32", x, 32), ("blocks of 128", x, 128), ("one block per row (block = row length)", x, 256)]


def _task5_candidates(x: torch.Tensor, block: int) -> list[tuple[str, torch.Tensor]]:
    """(message, the scales that mistake gives), shaped (rows, row length / block) like the right answer."""
    rows, cols = x.shape
    blocks = x.reshape(rows, cols // block, block)
    amax = blocks.abs().amax(dim=-1).clamp(min=fp8.EPS)
    raw = 448.0 / amax
    pow2 = fp8.round_scale_to_power_of_2
    shape = raw.shape
    return [
        ("one amax for the whole tensor (per-tensor scaling): every block of every token then shares the "
         "outlier's scale. Take the amax of each block of `block` values of a row.",
         pow2((448.0 / x.abs().max()).expand(shape).clone())),
        ("one scale per row (rowwise): the outlier's whole token shares its scale. Split each row into blocks of "
         "`block` consecutive values, one amax each.",
         pow2((448.0 / x.abs().amax(dim=1, keepdim=True).clamp(min=fp8.EPS)).expand(shape).clone())),
        ("not powers of two: round 448 / amax *down* to one (2 ** floor(log2(s))), as torchao's "
         "round_scales_to_power_of_2 does.", raw),
        ("the OCP MX rule (torchao's default FLOOR mode), 2 ** (8 - floor(log2(amax))): a block whose amax "
         "has a large mantissa (1.9 → 486) lands above 448 and saturates. This task rounds 448 / amax down "
         "instead, as TE's MXFP8 and torchao's RCEIL mode do: 2 ** floor(log2(448 / amax)).",
         torch.exp2(8 - torch.floor(torch.log2(amax)))),
        ("the OCP MX rule's E8M0 exponent itself, 2 ** (floor(log2(amax)) - 8): that is the factor that undoes "
         "the cast, and it can saturate. Return the factor x is multiplied by, 448 / amax rounded down to a "
         "power of two.", torch.exp2(torch.floor(torch.log2(amax)) - 8)),
        ("torchao's CEIL MX rule, 2 ** (8 - ceil(log2(amax))): it never saturates but puts most blocks' amax "
         "one binade below 448's. Round 448 / amax down: 2 ** floor(log2(448 / amax)).",
         torch.exp2(8 - torch.ceil(torch.log2(amax)))),
        ("rounded to the *nearest* power of two: where that rounds up, amax · scale lands above 448 and "
         "saturates. Round down: 2 ** floor(log2(s)).", torch.exp2(torch.round(torch.log2(raw)))),
        ("rounded *up* to a power of two: amax · scale then lands above 448 and saturates. Round down: "
         "2 ** floor(log2(s)).", torch.exp2(torch.ceil(torch.log2(raw)))),
        ("inverted (amax / 448, the factor that undoes the cast): return the factor x is multiplied by, "
         "448 / amax rounded down to a power of two.", pow2(amax / 448.0)),
        ("inverted (amax / 448, the factor that undoes the cast), and not powers of two: the scale is 448 / amax, "
         "rounded down to a power of two.", amax / 448.0),
        ("inverted and rounded (2 ** ceil(log2(amax / 448)), the E8M0 exponent that undoes the cast): return "
         "the factor x is multiplied by, 448 / amax rounded down.", torch.exp2(torch.ceil(torch.log2(amax / 448.0)))),
        ("from the signed maximum (.amax() without .abs()): a block whose largest magnitude is negative gets too "
         "large a scale. Use the largest magnitude, .abs().amax().",
         pow2(448.0 / blocks.amax(dim=-1).clamp(min=fp8.EPS))),
    ]


COLUMN_BLOCKS = ("from blocks that run down the columns ({block} tokens of one feature share a scale): a block is "
                 "{block} consecutive values of one row, x.reshape(rows, cols // block, block).")


def _column_scales(x: torch.Tensor, block: int) -> torch.Tensor | None:
    """The scales of blocks of ``block`` tokens down each column, sorted (any layout of them matches)."""
    if x.shape[0] % block:
        return None
    amax = x.t().reshape(x.shape[1], -1, block).abs().amax(dim=-1).clamp(min=fp8.EPS)
    return fp8.round_scale_to_power_of_2(448.0 / amax).flatten().sort().values


def _zero_block_scales(task: str, what: str, x: torch.Tensor, block: int, got: torch.Tensor) -> torch.Tensor:
    """Refuse an all-zero block's scale unless finite; return the mask of all-zero blocks."""
    zero = x.reshape(x.shape[0], -1, block).abs().amax(dim=-1) == 0
    bad = zero & ~(torch.isfinite(got) & (got > 0))
    if bool(bad.any()):
        raise fail(task, f"{what}: an all-zero block got scale {float(got[bad][0])}: amax 0 makes 448 / amax "
                         "infinite (and 0 · inf = NaN in x_fp8). Clamp amax first, amax.clamp(min=1e-12) as "
                         "torchao's amax_to_scale does.")
    if not bool(torch.isfinite(got).all()) or not bool((got > 0).all()):
        raise fail(task, f"{what}: some scales are not positive finite numbers; a scale is 448 / amax of its "
                         "block, rounded down to a power of two.")
    return zero


def _task5_scales(what: str, x: torch.Tensor, block: int, scales, want: torch.Tensor) -> None:
    task = TASK5
    if not isinstance(scales, torch.Tensor):
        raise fail(task, f"scales should be a tensor of shape {tuple(want.shape)} (rows, row length / block), "
                         f"not {type(scales).__name__}.")
    columns = _column_scales(x, block)
    if (columns is not None and scales.numel() == want.numel()
            and torch.equal(scales.detach().float().flatten().sort().values, columns)):
        raise fail(task, f"{what}: your scales are " + COLUMN_BLOCKS.format(block=block))
    if scales.numel() != want.numel():
        named = {1: " — one scale for the whole tensor (per-tensor scaling)",
                 x.shape[0]: " — one scale per row (rowwise)"}.get(scales.numel(), "")
        raise fail(task, f"{what}: scales should have shape {tuple(want.shape)}, one per block of {block} "
                         f"consecutive values in each of the {x.shape[0]} rows; yours has {tuple(scales.shape)}"
                         f"{named}.")
    if tuple(scales.shape) != tuple(want.shape):
        raise fail(task, f"{what}: scales should have shape {tuple(want.shape)} (rows, row length / block); "
                         f"yours has {tuple(scales.shape)}: one row of scales per token.")
    got = scales.detach().float()
    zero = _zero_block_scales(task, what, x, block, got)
    # an all-zero block casts to 0 whatever its scale: any finite positive scale is right there
    want = torch.where(zero, got, want)
    if torch.equal(got, want):
        return
    for message, candidate in _task5_candidates(x, block):
        if torch.equal(got, torch.where(zero, got, candidate.float())):
            raise fail(task, f"{what}: your scales are {message}")
    raise fail(task, f"{what}: {int((got != want).sum())} of {want.numel()} scales differ from 448 / amax(block) "
                     "rounded down to a power of two.")


def block_cast(fn) -> None:
    """``block_cast(x, block) -> (x_fp8, scales)``: E4M3, one power-of-two scale per ``block`` values of a row."""
    task = TASK5
    fn = require_callable(task, fn, "block_cast")
    for what, x, block in _task5_cases():
        given = x.clone()
        x_fp8, scales = _unpack(task, call(task, fn, "block_cast", given, block), "block_cast", 2)
        if not torch.equal(given, x):
            raise fail(task, "your function changed x in place: the caller's tensor is no longer what it was. "
                             "Compute x * scale into a new tensor.")
        want8, want = fp8.block_cast(x, (1, block), E4M3, power_of_two=True)
        _task5_scales(what, x, block, scales, want)
        if not isinstance(x_fp8, torch.Tensor) or x_fp8.dtype != E4M3:
            kind = x_fp8.dtype if isinstance(x_fp8, torch.Tensor) else type(x_fp8).__name__
            raise fail(task, f"x_fp8 should be a torch.float8_e4m3fn tensor; yours is {kind}. Cast with "
                             ".to(torch.float8_e4m3fn).")
        if x_fp8.shape != x.shape:
            raise fail(task, f"x_fp8 has shape {tuple(x_fp8.shape)}; it should keep x's shape {tuple(x.shape)}.")
        if torch.equal(x_fp8.float(), want8.float()):
            continue
        if torch.equal(x_fp8.float(), x.clamp(-448, 448).to(E4M3).float()):
            raise fail(task, f"{what}: x_fp8 is x cast without its scales: multiply each block by its scale "
                             "before the cast.")
        raise fail(task, f"{what}: x_fp8 differs from (x · its block's scale) cast to E4M3 in "
                         f"{int((x_fp8.float() != want8.float()).sum())} of {x.numel()} values.")
    passed(task, "one scale per block of 32, 128 and a whole row (256) of each token's values: 448 / amax "
                 "rounded down to a power of two (amaxes 3.5, 2.0, 1.9, 1.5, 0.875, 448, a negative outlier and "
                 "all-zero blocks), x_fp8 = (x · scale) in E4M3, x left unchanged.")


__all__ = ["LINEAR_BOUND", "CheckFailed", "block_cast", "delayed_cast", "format_for", "fp8_format", "fp8_linear",
           "scaled_cast"]


# --- tiered hints: shown one tier per failed check, or on request with `check.hint(task)` ---

HINTS = {
    "scaled_cast": [
        "Which value of x must land exactly on the format's largest finite number, and where do you read that "
        "number for either FP8 dtype?",
        "The per-tensor scale maps amax = the largest |x| onto the format's max (torch.finfo(dtype).max); "
        "multiply x by it, keep the result within ±max, then cast.",
        "scale = finfo(fp8_dtype).max / x.abs().max(); x_fp8 = (x * scale).clamp(-max, max).to(fp8_dtype); "
        "return both.",
    ],
    "fp8_linear": [
        "Two tensors with very different sizes: can one scale serve both? And does torch._scaled_mm want the "
        "scale you multiplied by, or the factor that undoes it? What dtype does it return if you do not say?",
        "Cast x and weight each with its own scale (task 1). _scaled_mm multiplies its result by scale_a · "
        "scale_b to dequantise, so pass the inverses of your scales; the second operand is the weight's FP8 copy "
        "transposed (a column-major view); ask for a float32 output.",
        "x8, sx = scaled_cast(x, E4M3); w8, sw = scaled_cast(weight, E4M3); torch._scaled_mm(x8, w8.t(), "
        "scale_a=1 / sx, scale_b=1 / sw, out_dtype=torch.float32).",
    ],
    "delayed_cast": [
        "Delayed scaling decides the scale before it sees this step's tensor. What does it use instead, what "
        "happens to values of x above the format's max, and what if nothing has been recorded yet?",
        "The scale comes from the largest amax in the old history, with 2**margin of headroom (1.0 if that amax "
        "is 0; ValueError if the history is empty); the cast clamps x · scale to ±max; the history then drops its "
        "oldest entry and appends this step's amax.",
        "peak = max(history); scale = max / (peak * 2**margin) if peak > 0 else 1.0; x_fp8 = (x * scale).clamp("
        "-max, max).to(dtype); new_history = history[1:] + [float(x.abs().max())].",
    ],
    "fp8_format": [
        "After the scale puts max(history) on the format's max, where does `smallest` land — and is that still a "
        "normal number of the format? Which format do you prefer when both would do?",
        "A format fits when smallest · (max / max(history)) >= its smallest normal (torch.finfo(dtype).tiny): "
        "try E4M3 first (one more mantissa bit), then E5M2 (more range); if neither fits, (None, None).",
        "for dtype in (E4M3, E5M2): scale = finfo(dtype).max / max(history); if smallest * scale >= "
        "finfo(dtype).tiny: return dtype, scale — then return None, None.",
    ],
    "block_cast": [
        "Which values share one scale here — the whole tensor, a row, or a few neighbours in a row? And which way "
        "must a scale be rounded so that the block's largest magnitude still fits under 448?",
        "View x as (rows, row length / block, block): one amax per block of consecutive values of a row, "
        "scale = 448 / amax (amax clamped at 1e-12 for an all-zero block), rounded *down* to a power of two "
        "(the floor of its log2); multiply each block by its scale and cast to E4M3.",
        "b = x.reshape(rows, cols // block, block); a = b.abs().amax(-1).clamp(min=1e-12); s = torch.exp2("
        "torch.floor(torch.log2(448 / a))); x_fp8 = (b * s[..., None]).reshape(x.shape).to("
        "torch.float8_e4m3fn); return x_fp8, s.",
    ],
}
hint = hints(__name__, HINTS)
