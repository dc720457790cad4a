"""Checks for exercise 10 (FP8): a per-tensor scaled cast, an FP8 linear with ``torch._scaled_mm``, one step of
delayed scaling, and the FP8 format for each tensor role.

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
from . import CheckFailed, call, fail, hints, passed, require_callable

E4M3, E5M2 = fp8.E4M3, fp8.E5M2
#: Task 2's bound: an FP8 (E4M3) product with per-tensor scales is within 5% of FP32 (relative Frobenius error).
LINEAR_BOUND = 0.05


def _close(a: float, b: float, rel: float = 1e-3) -> bool:
    return math.isclose(float(a), float(b), rel_tol=rel)


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


# ----------------------------------------------------------------------------------------------- task 1
TASK1 = "Task 1 (scaled_cast)"


def _task1_input(seed: int) -> torch.Tensor:
    """Small activations (around 0.01) with one large negative outlier: the largest *magnitude* is negative."""
    x = torch.randn(64, generator=_gen(seed)) * 0.01
    x[7] = -2.5
    x[11] = 1.25
    return x


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
    for dtype in (E4M3, E5M2):
        x = _task1_input(1 if dtype == E4M3 else 2)
        x_fp8, scale = _unpack(TASK1, call(TASK1, fn, "scaled_cast", x.clone(), dtype), "scaled_cast", 2)
        scale = _as_scale(TASK1, scale)
        top, amax = torch.finfo(dtype).max, float(x.abs().max())
        name = fp8.fp8_limits(dtype).name
        if _close(scale, amax / top):
            raise fail(TASK1, "your scale is inverted (amax / max): it shrinks x towards 0. The scale maps amax onto "
                              "the format's max: scale = max / amax.")
        if _close(scale, 1.0) and not _close(top / amax, 1.0):
            raise fail(TASK1, "your scale is 1 — no scaling: small values flush to 0. Compute scale = max / amax.")
        if _close(scale, top / float(x.max())):
            raise fail(TASK1, "your amax is x.max(), the largest *signed* value; here the largest magnitude is a "
                              "negative number, which then saturates. Use amax = x.abs().max().")
        other = torch.finfo(E5M2 if dtype == E4M3 else E4M3).max
        if _close(scale, other / amax):
            raise fail(TASK1, f"for {name} you used the other format's max ({other:g}). Read it from the dtype: "
                              "torch.finfo(fp8_dtype).max.")
        if not _close(scale, top / amax):
            raise fail(TASK1, f"for {name} the scale should be max / amax = {top:g} / {amax:g} = {top / amax:.6g}; "
                              f"yours is {scale:.6g}.")
        if not isinstance(x_fp8, torch.Tensor) or x_fp8.dtype != dtype:
            got = x_fp8.dtype if isinstance(x_fp8, torch.Tensor) else type(x_fp8).__name__
            raise fail(TASK1, f"x_fp8 should be a {dtype} tensor; yours is {got}. Cast with .to(fp8_dtype).")
        if x_fp8.shape != x.shape:
            raise fail(TASK1, f"x_fp8 has shape {tuple(x_fp8.shape)}; it should keep x's shape {tuple(x.shape)}.")
        want = fp8.to_fp8(x, scale, dtype).float()
        got = x_fp8.float()
        if torch.equal(got, x.to(dtype).float()):
            raise fail(TASK1, "x_fp8 is x cast without the scale: multiply by the scale before the cast, "
                              "(x * scale).to(fp8_dtype).")
        if not torch.equal(got, want):
            if torch.equal(got, (x / scale).clamp(-top, top).to(dtype).float()):
                raise fail(TASK1, "you divided x by the scale: multiply (x * scale), and divide only to dequantise.")
            raise fail(TASK1, f"x_fp8 differs from (x * scale) cast to {name} in "
                              f"{int((got != want).sum())} of {x.numel()} values.")
    passed(TASK1, "scale = max / amax(|x|) for E4M3 and E5M2, and x_fp8 = (x · scale) cast, on data whose "
                  "largest magnitude is negative.")


# ----------------------------------------------------------------------------------------------- task 2
TASK2 = "Task 2 (fp8_linear)"


def _task2_inputs() -> tuple[torch.Tensor, torch.Tensor]:
    """Activations of size ~1 with an outlier of 100, and small weights (~0.001): their scales differ ~25,000×."""
    g = _gen(10)
    x = torch.randn(32, 64, generator=g)
    x[3, 5] = 100.0
    weight = torch.randn(48, 64, generator=g) * 0.001
    return x, weight


def _linear(x, weight, *, x_dtype=E4M3, w_dtype=E4M3, x_amax=None, w_amax=None, invert=False, unscaled=False):
    """The reference FP8 linear, with one mistake switched on."""
    sx = torch.tensor(1.0) if unscaled else fp8.scale_from_amax(fp8.amax(x) if x_amax is None else x_amax, x_dtype)
    sw = torch.tensor(1.0) if unscaled else fp8.scale_from_amax(fp8.amax(weight) if w_amax is None else w_amax,
                                                                w_dtype)
    x8, w8 = fp8.to_fp8(x, sx, x_dtype), fp8.to_fp8(weight, sw, w_dtype)
    if invert:
        return fp8.scaled_mm(x8, 1 / sx, w8.t(), 1 / sw, out_dtype=torch.float32)
    return fp8.scaled_mm(x8, sx, w8.t(), sw, out_dtype=torch.float32)


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.float() - b.float()).norm() / b.float().norm())


def fp8_linear(fn) -> None:
    """``fp8_linear(x, weight) -> x @ weight.T`` through per-tensor E4M3 scales and ``torch._scaled_mm``."""
    fn = require_callable(TASK2, fn, "fp8_linear")
    x, weight = _task2_inputs()
    real = torch._scaled_mm if fp8.fp8_matmul_available("cpu") else fp8.emulated_scaled_mm
    calls = []

    def spy(*args, **kwargs):  # records the operands; runs the same arithmetic where the CPU has no FP8 matmul
        calls.append(args[:2])
        return real(*args, **kwargs)

    with mock.patch.object(torch, "_scaled_mm", spy):
        out = call(TASK2, fn, "fp8_linear", x.clone(), weight.clone())
    if not isinstance(out, torch.Tensor):
        raise fail(TASK2, f"`fp8_linear` should return a tensor, not {type(out).__name__}.")
    if out.shape != (x.shape[0], weight.shape[0]):
        raise fail(TASK2, f"the output has shape {tuple(out.shape)}; x @ weight.T has "
                          f"{(x.shape[0], weight.shape[0])}. Pass the weight transposed: w_fp8.t().")
    reference = x @ weight.t()
    error = _rel(out, reference)
    if not calls:
        raise fail(TASK2, "torch._scaled_mm was never called: cast x and the weight to E4M3 and multiply them with "
                          "torch._scaled_mm(x_fp8, w_fp8.t(), scale_a=..., scale_b=..., out_dtype=torch.float32).")
    a, b = calls[0]
    if E5M2 in (a.dtype, b.dtype):
        raise fail(TASK2, "you cast a forward operand to E5M2: forward tensors (activations, weights) use E4M3, "
                          "whose extra mantissa bit halves the rounding error; E5M2's range is for gradients.")
    if not torch.isfinite(out).all():
        raise fail(TASK2, "the output holds inf/NaN: clamp x · scale to ±448 before the cast.")
    mistakes = [
        (dict(invert=True), "the scales you passed to torch._scaled_mm are inverted: scale_a and scale_b "
                            "dequantise, so pass 1 / scale_x and 1 / scale_w (the output is off by scale²)."),
        (dict(unscaled=True), "you cast without scales: the small weights flush to 0 or lose their bits in "
                              "E4M3. Compute a scale per tensor: max / amax."),
        (dict(w_amax=fp8.amax(x)), "the weight's scale comes from the amax of x — the wrong tensor. Each tensor "
                                   "gets its own scale: max / weight.abs().max()."),
        (dict(x_amax=fp8.amax(weight)), "x's scale comes from the amax of the weight — the wrong tensor: x "
                                        "saturates. Use max / x.abs().max()."),
    ]
    for options, message in mistakes:
        candidate = _linear(x, weight, **options)
        if _rel(out, candidate) < 1e-3 and _rel(candidate, reference) > LINEAR_BOUND:
            raise fail(TASK2, message)
    if error < 1e-4:
        raise fail(TASK2, "the output equals the FP32 product: nothing went through FP8. Cast both operands to "
                          "E4M3 (with their scales) before torch._scaled_mm.")
    if error > LINEAR_BOUND:
        raise fail(TASK2, f"the output is {error:.1%} away from x @ weight.T (bound {LINEAR_BOUND:.0%}). Check each "
                          "step: amax per tensor, scale = 448 / amax, clamp, cast, then _scaled_mm with 1 / scale.")
    passed(TASK2, f"torch._scaled_mm on E4M3 operands with per-tensor scales matches x @ weight.T within "
                  f"{LINEAR_BOUND:.0%} (relative error), with weights ~1000× smaller than the activations.")


# ----------------------------------------------------------------------------------------------- task 3
TASK3 = "Task 3 (delayed_cast)"


def _task3_steps() -> list[tuple[torch.Tensor, list[float], torch.dtype, int]]:
    """(x, history, dtype, margin) cases; the history is not sorted, and the last case jumps above it."""
    g = _gen(20)
    base = torch.randn(256, generator=g)
    return [
        (base * 0.5, [3.0, 5.0, 2.0, 4.0], E4M3, 1),
        (base * 0.25, [1.5, 0.75, 1.0, 0.5], E4M3, 0),
        (base * 60.0, [40.0, 30.0, 20.0, 10.0], E5M2, 0),  # x's amax (~200) is far above the history: it saturates
    ]


def delayed_cast(fn) -> None:
    """``delayed_cast(x, history, fp8_dtype, margin) -> (x_fp8, scale, new_history)``: delayed scaling, one step."""
    fn = require_callable(TASK3, fn, "delayed_cast")
    for x, history, dtype, margin in _task3_steps():
        before = list(history)
        result = call(TASK3, fn, "delayed_cast", x.clone(), list(history), dtype, margin)
        x_fp8, scale, new_history = _unpack(TASK3, result, "delayed_cast", 3)
        scale = _as_scale(TASK3, scale)
        top, amax = torch.finfo(dtype).max, float(x.abs().max())
        want = top / max(before) / 2**margin
        if _close(scale, top / amax / 2**margin) or _close(scale, top / amax):
            raise fail(TASK3, "your scale comes from this step's amax: that is dynamic scaling. Delayed scaling "
                              "builds it from the history of *previous* amaxes: max / max(history).")
        if margin and _close(scale, top / max(before)):
            raise fail(TASK3, f"no margin: with margin = {margin} the scale must be max / max(history) / 2**margin, "
                              "so a tensor that grows a little since the last steps does not saturate.")
        if _close(scale, top / before[-1] / 2**margin) and not _close(before[-1], max(before)):
            raise fail(TASK3, "your scale uses the last amax of the history only; use the largest: max(history).")
        if _close(scale, max(before) * 2**margin / top):
            raise fail(TASK3, "your scale is inverted: scale = max / (max(history) · 2**margin).")
        if not _close(scale, want):
            raise fail(TASK3, f"the scale should be max / max(history) / 2**margin = {want:.6g}; yours is {scale:.6g}.")
        if not isinstance(x_fp8, torch.Tensor) or x_fp8.dtype != dtype:
            raise fail(TASK3, f"x_fp8 should be a {dtype} tensor.")
        got = x_fp8.float()
        if not torch.isfinite(got).all():
            raise fail(TASK3, "saturation ignored: x grew past the history, and x · scale overflowed E5M2 to inf. "
                              "Clamp to ±torch.finfo(fp8_dtype).max before the cast (E4M3 casts saturate in "
                              "recent torch, E5M2 casts do not).")
        if not torch.equal(got, fp8.to_fp8(x, scale, dtype).float()):
            raise fail(TASK3, "x_fp8 differs from (x · scale).clamp(-max, max) cast to the format.")
        if not isinstance(new_history, list) or not all(isinstance(v, (int, float)) for v in new_history):
            raise fail(TASK3, "new_history should be a list of floats (use float(x.abs().max())).")
        if len(new_history) != len(before):
            raise fail(TASK3, f"new_history has {len(new_history)} entries, the history had {len(before)}: drop the "
                              "oldest amax and append this step's, so the window keeps its length.")
        if new_history[:-1] != before[1:]:
            raise fail(TASK3, "new_history should be the history without its oldest (first) entry, then this "
                              "step's amax at the end.")
        last = new_history[-1]
        if _close(last, amax * scale) or _close(last, float(got.abs().max())):
            raise fail(TASK3, "you recorded the amax of the scaled/FP8 tensor — the wrong tensor. The history holds "
                              "the amax of x itself, before scaling.")
        if not _close(last, amax, 1e-6):
            raise fail(TASK3, f"the new history entry should be this step's amax, {amax:.6g}; yours is {last:.6g}.")
    passed(TASK3, "scale from max(history) with the margin, saturating cast (E4M3 and E5M2), the history rolled by "
                  "one with the amax of x.")


# ----------------------------------------------------------------------------------------------- task 4
TASK4 = "Task 4 (fp8_format)"
ROLES = {"input": E4M3, "weight": E4M3, "grad_output": E5M2}


def fp8_format(fn) -> None:
    """``fp8_format(role) -> dtype`` for ``"input"``, ``"weight"`` and ``"grad_output"``."""
    fn = require_callable(TASK4, fn, "fp8_format")
    got = {role: call(TASK4, fn, "fp8_format", role) for role in ROLES}
    for role, dtype in got.items():
        if dtype not in (E4M3, E5M2):
            raise fail(TASK4, f"fp8_format({role!r}) returned {dtype!r}: return torch.float8_e4m3fn or "
                              "torch.float8_e5m2.")
    if got["grad_output"] == E4M3:
        raise fail(TASK4, "E4M3 for gradients: gradients span far more binades than activations, and E4M3 covers "
                          "~18 of them (max 448) against E5M2's ~32 (max 57344). Gradients use E5M2.")
    wrong = [role for role in ("input", "weight") if got[role] == E5M2]
    if wrong:
        raise fail(TASK4, f"E5M2 for {' and '.join(wrong)}: forward tensors use E4M3 — one more mantissa bit "
                          "halves the rounding error, and a per-tensor scale fits their range.")
    passed(TASK4, "E4M3 for inputs and weights (precision), E5M2 for gradients (range) — torchao's default recipe.")


__all__ = ["LINEAR_BOUND", "CheckFailed", "delayed_cast", "fp8_format", "fp8_linear", "scaled_cast"]


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
        "scale you multiplied by, or the factor that undoes it?",
        "Cast x and weight each with its own scale (task 1). _scaled_mm multiplies its result by scale_a · "
        "scale_b to dequantise, so pass the inverses of your scales; the second operand is weight transposed.",
        "x8, sx = scaled_cast(x, E4M3); w8, sw = scaled_cast(weight, E4M3); torch._scaled_mm(x8, w8.t(), "
        "scale_a=1 / sx, scale_b=1 / sw, out_dtype=torch.float32).",
    ],
    "delayed_cast": [
        "Delayed scaling decides the scale before it sees this step's tensor. What does it use instead, and what "
        "happens to values of x above the format's max?",
        "The scale comes from the largest amax in the history, with 2**margin of headroom; the cast must clamp "
        "to ±max because x may have grown; the history drops its oldest entry and appends this step's amax.",
        "scale = max / (max(history) * 2**margin); x_fp8 = (x * scale).clamp(-max, max).to(dtype); "
        "new_history = history[1:] + [float(x.abs().max())].",
    ],
    "fp8_format": [
        "Which of the three tensors spans the most binades (look at lesson 10's histograms), and which FP8 "
        "format has more exponent bits?",
        "Inputs and weights need precision (more mantissa bits); output gradients need range (more exponent "
        "bits).",
        "E4M3 for 'input' and 'weight', E5M2 for 'grad_output'.",
    ],
}
hint = hints(__name__, HINTS)
