"""Exercise 10: each check passes answers written in several ways and names each typical mistake (fixtures in the
shape of tests/grader_fixtures.py), plus the stub and the CPU-without-FP8-matmul path."""

import collections
import math

import grader_fixtures
import pytest
import torch

from ampcourse import fp8 as fp8_module
from ampcourse.checks import NotStarted, lesson10

E4M3, E5M2 = torch.float8_e4m3fn, torch.float8_e5m2


# ------------------------------------------------------------------------------------------------- task 1
def cast(amax="abs", invert=False, fmt_max="own", apply=True, divide=False, inplace=False, low=None):
    """A scaled_cast with one mistake switched on (the defaults are the right answer)."""
    def scaled_cast(x, fp8_dtype):
        top = torch.finfo(fp8_dtype).max
        peak = {"abs": x.abs().max(), "signed": x.max(), "mean": x.abs().mean()}[amax]
        fmt = top if fmt_max == "own" else 448.0
        scale = peak / fmt if invert else fmt / peak
        if fmt_max == "none":
            scale = torch.tensor(1.0)
        if inplace:
            y = x.mul_(scale)
        elif low is not None:
            y = (x.to(low) * scale).float()
        else:
            y = x / scale if divide else (x * scale if apply else x)
        return y.clamp(-top, top).to(fp8_dtype), scale
    return scaled_cast


def cast_torchao(x, fp8_dtype):
    from torchao.float8.float8_utils import amax_to_scale, to_fp8_saturated

    scale = amax_to_scale(x.abs().max().float(), fp8_dtype)
    return to_fp8_saturated(x * scale, fp8_dtype), scale


def cast_python_floats(x, fp8_dtype):
    scale = float(torch.finfo(fp8_dtype).max) / float(x.abs().max())
    return (x * scale).to(fp8_dtype), scale  # no clamp: amax lands on max, nothing overflows


# ------------------------------------------------------------------------------------------------- task 2
def linear(fmt=E4M3, invert=False, scaled=True, w_amax_from="weight", x_amax_from="x", fp8=True, clamp=True,
           out_dtype=torch.float32, scale_dtype=torch.float32, contiguous=False, x_to_one=False, w_const=None,
           signed=False):
    """An fp8_linear with one mistake switched on (the defaults are the right answer)."""
    def fp8_linear(x, weight):
        if not fp8:
            return x @ weight.t()
        top = torch.finfo(fmt).max
        amaxes = {"x": x.max() if signed else x.abs().max(), "weight": weight.abs().max()}
        sx = top / amaxes[x_amax_from] if scaled else torch.tensor(1.0)
        sw = top / amaxes[w_amax_from] if scaled else torch.tensor(1.0)
        if x_to_one:
            sx = 1 / x.abs().max()
        if w_const is not None:
            sw = torch.tensor(w_const)
        xs, ws = x * sx, weight * sw
        if clamp:
            xs, ws = xs.clamp(-top, top), ws.clamp(-top, top)
        x8, w8 = xs.to(fmt), ws.to(fmt)
        a, b = (sx, sw) if invert else (1 / sx, 1 / sw)
        second = w8.t().contiguous() if contiguous else w8.t()
        kwargs = {} if out_dtype is None else {"out_dtype": out_dtype}
        return torch._scaled_mm(x8, second, scale_a=a.to(scale_dtype), scale_b=b.to(scale_dtype), **kwargs)
    return fp8_linear


def linear_positional(x, weight):
    """_scaled_mm's arguments by position, the scales from the amaxes directly."""
    x8 = (x * (448 / x.abs().max())).clamp(-448, 448).to(E4M3)
    w8 = (weight * (448 / weight.abs().max())).clamp(-448, 448).to(E4M3)
    return torch._scaled_mm(x8, w8.t(), x.abs().max() / 448, weight.abs().max() / 448, None, None, torch.float32)


def linear_torchao(x, weight):
    from torchao.float8.float8_utils import tensor_to_scale, to_fp8_saturated

    sx, sw = tensor_to_scale(x, E4M3), tensor_to_scale(weight, E4M3)
    x8, w8 = to_fp8_saturated(x * sx, E4M3), to_fp8_saturated(weight * sw, E4M3)
    return torch._scaled_mm(x8, w8.t(), scale_a=sx.reciprocal(), scale_b=sw.reciprocal(), out_dtype=torch.float32)


def linear_rescaled_afterwards(x, weight):
    x8, sx = cast()(x, E4M3)
    w8, sw = cast()(weight, E4M3)
    one = torch.tensor(1.0)
    return torch._scaled_mm(x8, w8.t(), scale_a=one, scale_b=one, out_dtype=torch.float32) / (sx * sw)


# ------------------------------------------------------------------------------------------------- task 3
def delayed(source="history", reducer=max, margin_on=True, clamp=True, record="x", roll=True, invert=False,
            update_first=False, zero="one", clamp_x=False, margin_mult=False, prepend=False):
    """A delayed_cast with one mistake switched on (the defaults are the right answer)."""
    def delayed_cast(x, history, fp8_dtype, margin):
        if not history:
            raise ValueError("history is empty")
        top = torch.finfo(fp8_dtype).max
        amax = float(x.abs().max())
        window = history[1:] + [amax] if update_first else history
        peak = amax if source == "current" else reducer(window)
        shift = 2**margin if margin_on else 1
        if peak == 0 and zero == "one":
            scale = 1.0
        elif invert:
            scale = peak * shift / top
        elif margin_mult:
            scale = top / peak * shift
        else:
            scale = top / peak / shift
        xs = x.clamp(-max(history), max(history)) if clamp_x else x
        scaled = xs * scale
        if clamp:
            scaled = scaled.clamp(-top, top)
        x_fp8 = scaled.to(fp8_dtype)
        recorded = {"x": amax, "scaled": float((x * scale).abs().max())}[record]
        if prepend:
            new_history = [recorded] + history[:-1]
        else:
            new_history = (history[1:] if roll else list(history)) + [recorded]
        return x_fp8, scale, new_history
    return delayed_cast


def delayed_naive_zero(x, history, fp8_dtype, margin):
    """Right everywhere but the all-zero history: divides by zero."""
    top = torch.finfo(fp8_dtype).max
    scale = top / (max(history) * 2**margin)
    return (x * scale).clamp(-top, top).to(fp8_dtype), scale, history[1:] + [float(x.abs().max())]


def delayed_no_empty_check(x, history, fp8_dtype, margin):
    """Right, but returns something for an empty history instead of raising."""
    peak = max(history, default=0.0)
    top = torch.finfo(fp8_dtype).max
    scale = top / (peak * 2**margin) if peak > 0 else 1.0
    return (x * scale).clamp(-top, top).to(fp8_dtype), scale, history[1:] + [float(x.abs().max())]


def delayed_tensor_inplace(x, history, fp8_dtype, margin):
    """Right, written otherwise: torch arithmetic, the history rolled in place, a tensor scale."""
    from collections import deque

    if len(history) == 0:
        raise ValueError("delayed_cast needs a history with at least one entry")
    peak = torch.tensor(history).max()
    top = torch.finfo(fp8_dtype).max
    scale = torch.where(peak > 0, top / (peak * 2.0**margin), torch.tensor(1.0))
    window = deque(history, maxlen=len(history))
    window.append(x.abs().max().item())
    history[:] = list(window)
    return (x * scale).clamp(-top, top).to(fp8_dtype), scale, history


# ------------------------------------------------------------------------------------------------- task 4
def fmt(prefer=(E4M3, E5M2), bound="normal", strict=False, none=True, scale_from="max", invert=False,
        other_max=False):
    """An fp8_format with one mistake switched on (the defaults are the right answer)."""
    def fp8_format(amax_history, smallest):
        peak = {"max": max(amax_history), "last": amax_history[-1]}[scale_from]
        for dtype in prefer:
            info = torch.finfo(dtype)
            low = info.tiny if bound == "normal" else info.tiny * info.eps
            scale = info.max / max(amax_history)
            fits = smallest * scale > low if strict else smallest * scale >= low
            if fits or dtype == prefer[-1] and not none:
                top = torch.finfo(E5M2 if dtype == E4M3 else E4M3).max if other_max else info.max
                s = top / peak
                return dtype, (1 / s if invert else s)
        return None, None
    return fp8_format


def fmt_by_spread(amax_history, smallest):
    """Right, written otherwise: compare the spread with each format's normal span (every check number is exact)."""
    spread = max(amax_history) / smallest
    for dtype in (torch.float8_e4m3fn, torch.float8_e5m2):
        info = torch.finfo(dtype)
        if spread <= info.max / info.tiny:
            return dtype, info.max / max(amax_history)
    return None, None


def fmt_with_ampcourse(amax_history, smallest):
    """Right, written otherwise: ampcourse.fp8's limits and scale_from_amax."""
    for name in ("e4m3", "e5m2"):
        lim = fp8_module.fp8_limits(name)
        scale = fp8_module.scale_from_amax(max(amax_history), name)
        if smallest * float(scale) >= lim.smallest_normal:
            return lim.dtype, scale
    return None, None



# ----------------------------------------------------------- the second review's answers (issue 21, lesson 10)
def w1_bf16(x, d):
    """The scale computed and applied in bf16: 448 / 2.5 = 179.2 rounds to 179."""
    m = torch.finfo(d).max
    xb = x.bfloat16()
    s = m / xb.abs().max()
    return (xb * s).clamp(-m, m).to(d), s.float()


def r1_strict(x, d):
    """Right, stricter: validates its input, amax as the infinity norm, torch.clip."""
    if not isinstance(x, torch.Tensor) or not x.is_floating_point():
        raise TypeError("x must be a float tensor")
    if d not in (E4M3, E5M2):
        raise ValueError("fp8_dtype must be float8_e4m3fn or float8_e5m2")
    fi = torch.finfo(d)
    a = torch.linalg.vector_norm(x.float(), ord=float("inf"))
    s = torch.tensor(fi.max, dtype=torch.float32) / a
    return torch.clip(x.float() * s, min=-fi.max, max=fi.max).to(d), s


def _cast8(t):
    s = torch.finfo(E4M3).max / t.abs().max().float()
    return (t.float() * s).clamp(-448, 448).to(E4M3), s


def w2_rowwise(x, w):
    """Row-wise scales: this CPU's torch._scaled_mm runs them, but the task asks for per-tensor scaling."""
    sx = 448 / x.abs().amax(dim=1, keepdim=True).float()
    sw = 448 / w.abs().amax(dim=1, keepdim=True).float()
    x8, w8 = (x * sx).clamp(-448, 448).to(E4M3), (w * sw).clamp(-448, 448).to(E4M3)
    return torch._scaled_mm(x8, w8.t(), scale_a=1 / sx, scale_b=(1 / sw).t(), out_dtype=torch.float32)


def w2_f64scale(x, w):
    """float64 one-element scales: this CPU build runs them, torch's tensorwise rule and CUDA refuse them."""
    x8, sx = _cast8(x)
    w8, sw = _cast8(w)
    return torch._scaled_mm(x8, w8.t(), scale_a=(1 / sx).double(), scale_b=(1 / sw).double(),
                            out_dtype=torch.float32)


def w2_bias_zero(x, w):
    """A zero float32 bias with a float32 output: harmless on a CPU, refused by CUDA."""
    x8, sx = _cast8(x)
    w8, sw = _cast8(w)
    return torch._scaled_mm(x8, w8.t(), scale_a=1 / sx, scale_b=1 / sw, bias=torch.zeros(w.shape[0]),
                            out_dtype=torch.float32)


def w2_bias_added(x, w):
    """A bias nobody asked for."""
    x8, sx = _cast8(x)
    w8, sw = _cast8(w)
    return torch._scaled_mm(x8, w8.t(), scale_a=1 / sx, scale_b=1 / sw,
                            bias=torch.full((w.shape[0],), 2e-3), out_dtype=torch.float32)


def r2_fastaccum(x, w):
    """Right, written otherwise: the weight transposed before the cast (still column-major), fast accumulation."""
    sx = (torch.finfo(E4M3).max / x.abs().amax()).float()
    sw = (torch.finfo(E4M3).max / w.abs().amax()).float()
    x8 = torch.clamp(x * sx, -448, 448).to(E4M3)
    wt8 = torch.clamp(w.t() * sw, -448, 448).to(E4M3)
    return torch._scaled_mm(x8, wt8, scale_a=sx.reciprocal(), scale_b=sw.reciprocal(), out_dtype=torch.float32,
                            use_fast_accum=True)


def r2_strict(x, w):
    """Right, stricter: validates the shapes, one-element (1,) scales."""
    if x.dim() != 2 or w.dim() != 2 or x.shape[1] != w.shape[1]:
        raise ValueError("x must be (m, k) and weight (n, k)")
    x8, sx = _cast8(x)
    w8, sw = _cast8(w)
    return torch._scaled_mm(x8, w8.T, scale_a=(1.0 / sx).reshape(1), scale_b=(1.0 / sw).reshape(1),
                            out_dtype=torch.float32)


def _delayed_with(factor):
    """delayed_cast with the headroom factor ``factor(margin)`` instead of 2**margin."""
    def delayed_cast(x, h, d, m):
        if not h:
            raise ValueError("history is empty")
        top = torch.finfo(d).max
        p = max(h)
        s = top / (p * factor(m)) if p else 1.0
        return (x * s).clamp(-top, top).to(d), s, h[1:] + [float(x.abs().max())]
    return delayed_cast


def r3_deque(x, h, d, m):
    """Right, written otherwise: numpy max, math.ldexp for the margin, a deque, the infinity norm as amax."""
    import collections

    import numpy as np

    if len(h) == 0:
        raise ValueError("empty history")
    q = collections.deque(h, maxlen=len(h))
    p = float(np.max(h))
    s = math.ldexp(torch.finfo(d).max / p, -m) if p > 0 else 1.0
    y = torch.clamp(x.float() * s, min=-torch.finfo(d).max, max=torch.finfo(d).max).to(d)
    q.append(float(torch.linalg.vector_norm(x, float("inf"))))
    return y, s, list(q)


def _fmt_spans(e4m3_span, e5m2_span):
    """fp8_format comparing the spread with given spans (the review's rounded 2^15, 2^29, 2^30)."""
    def fp8_format(h, sm):
        p = max(h)
        if p / sm <= e4m3_span:
            return E4M3, 448 / p
        if p / sm <= e5m2_span:
            return E5M2, 57344 / p
        return None, None
    return fp8_format


def w4_e5m2_with_subnormals(h, sm):
    """E4M3 by its normal range, but E5M2 counting its subnormals."""
    p = max(h)
    if sm * (448 / p) >= torch.finfo(E4M3).tiny:
        return E4M3, 448 / p
    if sm * (57344 / p) >= torch.finfo(E5M2).tiny * torch.finfo(E5M2).eps:
        return E5M2, 57344 / p
    return None, None


def r4_torch(h, sm):
    """Right, written otherwise: float64 torch arithmetic, compared in log2, input validated."""
    if not h or sm <= 0:
        raise ValueError("amax_history must not be empty and smallest must be positive")
    peak = torch.tensor(h, dtype=torch.float64).max()
    for d in (E4M3, E5M2):
        fi = torch.finfo(d)
        s = fi.max / peak
        if torch.log2(sm * s) >= math.log2(fi.tiny):
            return d, float(s)
    return None, None


# ------------------------------------------------------------------------------------------------- task 5
def blocks(per="block", rounding="floor", invert=False, signed=False, inplace=False, columns=False, apply=True,
           flat=False, clamp=True, mx_rule=None):
    """A block_cast with one mistake switched on (the defaults are the right answer). ``columns``: True for
    blocks of x.t() laid out row after row, "tokens" for blocks of ``block`` tokens down each column; ``mx_rule``:
    torchao's MX scale rules, "floor" (OCP, torchao's default), "floor exponent" (its E8M0 divisor), "ceil"."""
    def block_cast(x, block):
        rows, cols = x.shape
        if columns == "tokens":
            source = x.reshape(rows // block, block, cols).transpose(1, 2)
        else:
            source = x.t().reshape(-1, block) if columns else x.reshape(rows, cols // block, block)
        if per == "tensor":
            amax = x.abs().max().expand(rows, cols // block)
        elif per == "row":
            amax = x.abs().amax(dim=1, keepdim=True).expand(rows, cols // block)
        else:
            amax = (source.amax(dim=-1) if signed else source.abs().amax(dim=-1)).reshape(rows, cols // block)
        if clamp:
            amax = amax.clamp(min=1e-12)
        raw = amax / 448.0 if invert else 448.0 / amax
        scale = {"floor": torch.floor, "nearest": torch.round, "ceil": torch.ceil,
                 "none": None}[rounding]
        s = raw if scale is None else torch.exp2(scale(torch.log2(raw)))
        if mx_rule == "floor":
            s = torch.exp2(8 - torch.floor(torch.log2(amax)))
        elif mx_rule == "floor exponent":
            s = torch.exp2(torch.floor(torch.log2(amax)) - 8)
        elif mx_rule == "ceil":
            s = torch.exp2(8 - torch.ceil(torch.log2(amax)))
        b = x.reshape(rows, cols // block, block)
        if inplace:
            y = b.mul_(s[..., None])
        else:
            y = b * s[..., None] if apply else b
        x8 = y.reshape(rows, cols).clamp(-448, 448).to(E4M3)
        return x8, (s.flatten() if flat else s)
    return block_cast


def blocks_scalar_per_tensor(x, block):
    x8, s = cast()(x, E4M3)
    return x8, torch.exp2(torch.floor(torch.log2(s)))


def blocks_frexp_loop(x, block):
    """Right, written otherwise: a Python loop over rows and blocks, math.frexp for the power of two."""
    rows, cols = x.shape
    x8 = torch.empty(rows, cols, dtype=E4M3)
    scales = torch.empty(rows, cols // block)
    for r in range(rows):
        for j in range(cols // block):
            part = x[r, j * block:(j + 1) * block]
            _, exponent = math.frexp(448.0 / max(float(part.abs().max()), 1e-12))
            scales[r, j] = 2.0 ** (exponent - 1)
            x8[r, j * block:(j + 1) * block] = (part * scales[r, j]).to(E4M3)
    return x8, scales


def blocks_flat_view_torchao(x, block):
    """Right, written otherwise: blocks as rows of x.reshape(-1, block) (row-major), torchao's amax_to_scale."""
    from torchao.float8.float8_utils import amax_to_scale

    fp8_module.import_torchao()
    rows, cols = x.shape
    flat = x.reshape(-1, block)
    scales = amax_to_scale(flat.abs().amax(dim=1), E4M3, round_scales_to_power_of_2=True)
    x8 = (flat * scales[:, None]).clamp(-448, 448).to(E4M3).reshape(rows, cols)
    return x8, scales.reshape(rows, cols // block)


def blocks_ldexp_validated(x, block):
    """Right, stricter: validates its input, torch.frexp/ldexp for the power of two."""
    if x.dim() != 2 or x.shape[1] % block:
        raise ValueError("x must be 2-D with rows divisible into blocks")
    rows, cols = x.shape
    b = x.reshape(rows, cols // block, block)
    _, e = torch.frexp(448.0 / b.abs().amax(dim=-1).clamp(min=torch.finfo(torch.float32).tiny))
    s = torch.ldexp(torch.ones(rows, cols // block), e - 1)
    return (b * s[..., None]).reshape(rows, cols).to(E4M3), s


def blocks_where_zero_scale_one(x, block):
    """Right, written otherwise: an all-zero block gets scale 1 instead of a clamped amax (it casts to 0 either way)."""
    rows, cols = x.shape
    b = x.reshape(rows, cols // block, block)
    amax = b.abs().amax(dim=-1)
    raw = torch.where(amax > 0, 448.0 / torch.where(amax > 0, amax, 1.0), 1.0)
    s = torch.exp2(torch.floor(torch.log2(raw)))
    return (b * s[..., None]).reshape(rows, cols).to(E4M3), s


def _zeros_whose_float_is_want(x, fp8_dtype):
    """Review rev25-r6 E3: an all-zero x_fp8 (an exact torch.Tensor) whose own ``float`` attribute returns the check's
    ``want``."""
    _, scale = cast()(x, fp8_dtype)
    x_fp8 = torch.zeros_like(x, dtype=fp8_dtype)

    def float_():
        return grader_fixtures.callers_local("want", lambda: torch.Tensor.float(x_fp8))

    x_fp8.float = float_
    return x_fp8, scale


def _times_zero_in_fp8(x, fp8_dtype):
    """Review rev25-r6 W2: torch itself raises NotImplementedError (no float8 multiply on the CPU): not a stub."""
    x_fp8, scale = cast()(x, fp8_dtype)
    return x_fp8 * 0, scale


_Cast = collections.namedtuple("_Cast", "x_fp8 scale")


WRONG = {
    ("10", "scaled_cast"): {
        "scale inverted": (cast(invert=True), "your scale is inverted"),
        "amax without abs": (cast(amax="signed"), "largest *signed* value"),
        "mean magnitude as amax": (cast(amax="mean"), "mean magnitude"),
        "E4M3's max for E5M2": (cast(fmt_max="e4m3"), "the other format's max"),
        "zeros whose own .float() is the check's want (review rev25-r6 E3)": (
            _zeros_whose_float_is_want, "`float` set on it as an attribute of its own"),
        "torch's own NotImplementedError (review rev25-r6 W2)": (
            _times_zero_in_fp8, "raised NotImplementedError: \"mul_cpu_reduced_float\" not implemented"),
        "no scale": (cast(fmt_max="none"), "no scaling"),
        "scale not applied": (cast(apply=False), "cast without the scale"),
        "divided by the scale": (cast(divide=True), "you divided x by the scale"),
        "x scaled in place": (cast(inplace=True), "changed x in place"),
        "scaled in bfloat16": (cast(low=torch.bfloat16), "scaled x in torch.bfloat16"),
        "returns only the tensor": (lambda x, d: x.to(d), "should return a tuple of 2"),
        "scale computed in bf16 (review 2, finding 8)": (w1_bf16, "your scale was computed in bf16"),
    },
    ("10", "fp8_linear"): {
        "_scaled_mm scales inverted": (linear(invert=True), "pass 1 / scale"),
        "no scaling": (linear(scaled=False), "cast without its scale"),
        "x unscaled, weight scaled (review 3)": (
            lambda x, w: linear_mixed(x, w), "x was cast without its scale"),
        "weight times a constant 2^10 (review 3)": (linear(w_const=2.0**10), "the weight's FP8 copy is not"),
        "x's amax mapped to 1.0 (review 3)": (linear(x_to_one=True), "maps its amax to 1.0"),
        "weight scaled with x's amax": (linear(w_amax_from="x"), "comes from the amax of the other tensor"),
        "x scaled with the weight's amax": (linear(x_amax_from="weight"), "comes from the amax of the other"),
        "x's signed max as amax": (linear(signed=True), "largest *signed* value"),
        "E5M2 for the forward pass": (linear(fmt=E5M2), "forward operand to E5M2"),
        "out_dtype omitted (review 4)": (linear(out_dtype=None), "you left out out_dtype"),
        "bf16 output (review 4)": (linear(out_dtype=torch.bfloat16), "the task asks for an FP32 output"),
        "float64 scales (review 4)": (linear(scale_dtype=torch.float64), "must be float32 (torch's own rule"),
        "float64 scales, the second review's (finding 3)": (w2_f64scale, "this CPU build lets float64 through"),
        "row-wise scales (review 2, finding 3)": (w2_rowwise, "the task asks for per-tensor scaling"),
        "a zero float32 bias (review 2, finding 2)": (w2_bias_zero, "the task has no bias"),
        "a bias added (review 2, finding 7)": (w2_bias_added, "the task has no bias"),
        "row-major second operand (review 11)": (linear(contiguous=True), "not w_fp8.t().contiguous()"),
        "no FP8 at all": (linear(fp8=False), "torch._scaled_mm was never called"),
        "rescaled after _scaled_mm": (linear_rescaled_afterwards, "scale_a=1"),
        "weight not transposed": (lambda x, w: torch.zeros(x.shape[0], w.shape[1]), "never called"),
    },
    ("10", "delayed_cast"): {
        "no margin": (delayed(margin_on=False), "no margin"),
        "margin multiplied": (delayed(margin_mult=True), "margin is applied the wrong way"),
        "saturation ignored": (delayed(clamp=False), "saturation ignored"),
        "amax of the scaled tensor recorded": (delayed(record="scaled"), "the wrong tensor"),
        "current amax (dynamic, not delayed)": (delayed(source="current"), "that is dynamic scaling"),
        "last history entry instead of the max": (delayed(reducer=lambda h: h[-1]), "use the largest: max(history)"),
        "scale inverted": (delayed(invert=True), "your scale is inverted"),
        "history grows without bound": (delayed(roll=False), "drop the oldest amax"),
        "history updated before the scale (review 13)": (delayed(update_first=True), "updated the history before"),
        "x clamped to max(history) (review 13)": (delayed(clamp_x=True), "clamped x to ±max(history)"),
        "new amax prepended": (delayed(prepend=True), "at the front"),
        "all-zero history divides by zero": (delayed_naive_zero, "all-zero history"),
        "empty history accepted": (delayed_no_empty_check, "an empty history should raise ValueError"),
        "2*margin, guarded at margin 0 (review 2, finding 6)": (
            _delayed_with(lambda m: 2 * m if m else 1), "2**margin, not 2*margin (margin = 3"),
        "2*margin, divides by zero at margin 0 (review 2, finding 6)": (
            _delayed_with(lambda m: 2 * m), "with margin 0 and a non-zero history your scale divided by zero"),
    },
    ("10", "fp8_format"): {
        "E5M2 always (the role rule)": (fmt(prefer=(E5M2,)), "fits E4M3's normal range"),
        "E4M3 always": (fmt(prefer=(E4M3,), none=False), "wider than E4M3's normal range"),
        "E4M3's subnormals counted": (fmt(bound="subnormal"), "would be subnormal"),
        "boundary excluded": (fmt(strict=True), "exactly E4M3's normal span"),
        "E5M2 when neither fits": (fmt(none=False), "return (None, None)"),
        "scale from the last amax": (fmt(scale_from="last"), "uses one entry of the history"),
        "scale inverted": (fmt(invert=True), "your scale is inverted"),
        "the other format's max": (fmt(other_max=True), "the other format's max"),
        "a string, not a dtype": (lambda h, s: ("e4m3", 448 / max(h)), "return torch.float8_e4m3fn"),
        "only the dtype": (lambda h, s: E4M3, "should return a tuple of 2"),
        "spans rounded to 2^15 and 2^30 (review 2, finding 1)": (_fmt_spans(2**15, 2**30), "not 2^15"),
        "spans rounded to 2^15 and 2^29 (review 2, finding 1)": (_fmt_spans(2**15, 2**29), "not 2^15"),
        "E5M2's span rounded to 2^29": (_fmt_spans(448 / 2**-6, 2**29), "not 2^29"),
        "E5M2's subnormals counted (review 2, finding 1)": (w4_e5m2_with_subnormals,
                                                            "with E5M2 the smallest value would be subnormal"),
    },
    ("10", "block_cast"): {
        "one amax for the whole tensor": (blocks(per="tensor"), "per-tensor scaling"),
        "per-tensor, one scalar scale": (blocks_scalar_per_tensor, "one scale for the whole tensor"),
        "one amax per row": (blocks(per="row"), "one scale per row (rowwise)"),
        "blocks down the columns": (blocks(columns=True), "blocks that run down the columns"),
        "blocks of 32 tokens down each column": (blocks(columns="tokens"), "32 tokens of one feature share"),
        "amax not clamped: a zero block's scale is inf": (blocks(clamp=False), "clamp amax first"),
        "torchao's default FLOOR MX rule (OCP)": (blocks(mx_rule="floor"), "the OCP MX rule (torchao's default FLOOR"),
        "the FLOOR rule's E8M0 divisor": (blocks(mx_rule="floor exponent"), "the factor that undoes the cast"),
        "torchao's CEIL MX rule": (blocks(mx_rule="ceil"), "torchao's CEIL MX rule"),
        "scale not a power of two": (blocks(rounding="none"), "not powers of two"),
        "rounded to the nearest power of two": (blocks(rounding="nearest"), "rounded to the *nearest*"),
        "rounded up": (blocks(rounding="ceil"), "rounded *up*"),
        "inverted scale": (blocks(invert=True, rounding="none"), "inverted (amax / 448"),
        "inverted, E8M0 exponent rounded up": (blocks(invert=True, rounding="ceil"), "inverted and rounded"),
        "signed amax": (blocks(signed=True), "from the signed maximum"),
        "scales flattened": (blocks(flat=True), "one row of scales per token"),
        "x not multiplied": (blocks(apply=False), "without its scales"),
        "x changed in place": (blocks(inplace=True), "changed x in place"),
        "only x_fp8": (lambda x, block: blocks()(x, block)[0], "should return a tuple of 2"),
        "a bf16 result": (lambda x, block: (blocks()(x, block)[0].to(torch.bfloat16), blocks()(x, block)[1]),
                          "should be a torch.float8_e4m3fn tensor"),
    },
}


def linear_mixed(x, weight):
    """The review's first accepted wrong answer: x clamped and cast with no scale (scale_a = 1), weight scaled."""
    one = torch.tensor(1.0)
    x8 = x.clamp(-448, 448).to(E4M3)
    w8, sw = cast()(weight, E4M3)
    return torch._scaled_mm(x8, w8.t(), scale_a=one, scale_b=1 / sw, out_dtype=torch.float32)


RIGHT = {
    ("10", "scaled_cast"): {
        "finfo, tensor scale, clamp": cast(),
        "torchao's float8 helpers": cast_torchao,
        "python floats, no clamp": cast_python_floats,
        "validated input, infinity norm, torch.clip": r1_strict,
        "a namedtuple (review rev25-r6 M1)": lambda x, fp8_dtype: _Cast(*cast()(x, fp8_dtype)),
    },
    ("10", "fp8_linear"): {
        "task-1 casts, keyword arguments": linear(),
        "positional arguments, scales from amax / 448": linear_positional,
        "torchao's float8 helpers": linear_torchao,
        "weight transposed before the cast, fast accumulation": r2_fastaccum,
        "validated shapes, (1,)-shaped scales": r2_strict,
    },
    ("10", "delayed_cast"): {
        "list arithmetic": delayed(),
        "torch scale, deque, history rolled in place": delayed_tensor_inplace,
        "numpy max, math.ldexp, infinity norm": r3_deque,
    },
    ("10", "fp8_format"): {
        "smallest · scale against finfo.tiny": fmt(),
        "spread against max / tiny": fmt_by_spread,
        "ampcourse.fp8's limits": fmt_with_ampcourse,
        "float64 torch arithmetic compared in log2": r4_torch,
    },
    ("10", "block_cast"): {
        "reshape, amax, exp2(floor(log2))": blocks(),
        "python loop, math.frexp": blocks_frexp_loop,
        "row-major flat view, torchao's amax_to_scale": blocks_flat_view_torchao,
        "validated input, torch.frexp and ldexp": blocks_ldexp_validated,
        "a zero block gets scale 1 (torch.where), torchao's RCEIL idea": blocks_where_zero_scale_one,
    },
}

test_wrong_answer_is_named, test_right_answer_passes = grader_fixtures.tests(WRONG, RIGHT)


@pytest.mark.parametrize("check", [lesson10.scaled_cast, lesson10.fp8_linear, lesson10.delayed_cast,
                                   lesson10.fp8_format, lesson10.block_cast])
def test_a_stub_is_not_started(check):
    def stub(*args):
        raise NotImplementedError("a hint")
    with pytest.raises(NotStarted, match="not started"):
        check(stub)


def _refuse(*args, **kwargs):
    raise RuntimeError("could not create a primitive descriptor for the matmul primitive")


@pytest.mark.parametrize(("label", "answer"), [(k, v[0]) for k, v in WRONG["10", "fp8_linear"].items()])
def test_task2_grades_the_same_where_scaled_mm_raises(monkeypatch, label, answer):
    """An AMX CPU under DNNL_MAX_CPU_ISA=AVX2: torch._scaled_mm raises there, and the check runs the learner's call
    through fp8.emulated_scaled_mm, which holds it to the same contract: every wrong answer gets the same message."""
    from ampcourse.checks import CheckFailed

    with pytest.raises(CheckFailed) as real_path:
        lesson10.fp8_linear(answer)
    monkeypatch.setitem(fp8_module._FP8_MATMUL, "cpu", False)
    monkeypatch.setattr(torch, "_scaled_mm", _refuse)
    with pytest.raises(CheckFailed) as emulated_path:
        lesson10.fp8_linear(answer)
    assert str(emulated_path.value) == str(real_path.value), label


def test_task2_right_answers_pass_where_scaled_mm_raises(monkeypatch, capsys):
    monkeypatch.setitem(fp8_module._FP8_MATMUL, "cpu", False)
    monkeypatch.setattr(torch, "_scaled_mm", _refuse)
    for answer in RIGHT["10", "fp8_linear"].values():
        lesson10.fp8_linear(answer)
        assert capsys.readouterr().out.startswith("✓ Task 2")


def test_task4_reference_is_the_rule_of_the_lesson():
    """format_for picks E4M3 exactly up to E4M3's normal span (448 / 2^-6) and E5M2 up to 57344 / 2^-14."""
    assert lesson10.format_for([7.0], 2.0**-12) == (E4M3, 64.0)
    assert lesson10.format_for([7.0], 2.0**-12 * (1 - 2**-20))[0] == E5M2
    span = torch.finfo(E5M2).max / torch.finfo(E5M2).tiny
    assert lesson10.format_for([1.0], 1 / span)[0] == E5M2 and lesson10.format_for([1.0], 0.5 / span) == (None, None)
    assert math.isclose(math.log2(448 / 2**-6), 14.807, abs_tol=1e-3)
