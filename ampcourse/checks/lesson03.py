"""Checks for exercise 03 (autocast): predict the dtypes of a forward/backward pass; build an FP32 island."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ..autocast_lists import fp32_rule
from ..device import pick_device
from . import call, fail, hints, last_tier_next, passed, require_callable

NAMES = ("hidden", "act", "logits", "loss", "weight", "weight.grad")

WHY = {  # the rule that decides each dtype, without the dtype itself (a wrong answer must not be handed the answer)
    "hidden": "`nn.Linear` (`aten::linear`) is on CPU autocast's lower-precision list: its inputs are cast to "
              "the region's dtype, and so is its output.",
    "act": "`relu` has no autocast rule: it runs in the dtype of its input (what did the first Linear return?).",
    "logits": "the second `nn.Linear` is an `aten::linear` too, on the lower-precision list like the first.",
    "loss": "`cross_entropy` is on CPU autocast's FP32 list: autocast casts its input logits up before it runs.",
    "weight": "autocast never changes parameters: it casts copies for each operation and leaves the weight as "
              "you created it.",
    "weight.grad": "a gradient has the dtype of its leaf tensor: the gradient of the cast copy flows back through "
                   "the cast to the weight itself.",
}


def observed_dtypes() -> dict[str, torch.dtype]:
    """Run the exercise's code (CPU, bfloat16 autocast) and return what really happens."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    x, y = torch.randn(5, 8), torch.randint(0, 4, (5,))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        hidden = model[0](x)
        act = model[1](hidden)
        logits = model[2](act)
        loss = F.cross_entropy(logits, y)
    loss.backward()
    return {"hidden": hidden.dtype, "act": act.dtype, "logits": logits.dtype, "loss": loss.dtype,
            "weight": model[0].weight.dtype, "weight.grad": model[0].weight.grad.dtype}


def _name(dtype: object) -> str:
    return str(dtype).removeprefix("torch.")


def predict_dtypes(fn) -> None:
    """Task 1: ``predict_dtypes()`` returns the dtype of each tensor of the exercise's autocast code."""
    task = "Task 1 (predict_dtypes)"
    require_callable(task, fn, "predict_dtypes")
    got = call(task, fn, "predict_dtypes")
    if not isinstance(got, dict):
        raise fail(task, f"return a dict like {{'hidden': torch.bfloat16, ...}}; you returned {type(got).__name__}.")
    missing = [n for n in NAMES if n not in got]
    if missing:
        raise fail(task, f"your dict has no entry for {', '.join(map(repr, missing))}; it needs all of "
                         f"{', '.join(map(repr, NAMES))}.")
    truth = observed_dtypes()
    for name in NAMES:
        if not isinstance(got[name], torch.dtype):
            raise fail(task, f"{name!r}: give a torch dtype such as torch.float32, not {got[name]!r}.")
    if wrong := [name for name in NAMES if got[name] != truth[name]]:
        # Each key is one of two dtypes: naming every wrong key would hand over the answer on the first try. The
        # first failures name one (and its rule); the one that shows the last hint tier, which answers, names all.
        shown = wrong if last_tier_next(__name__, "predict_dtypes") else wrong[:1]
        said = " ".join(f"{name!r} (you said {_name(got[name])}): {WHY[name]}" for name in shown)
        more = "" if len(shown) == len(wrong) else " Find the other wrong ones by the same kind of rule."
        one = "One: " if len(shown) < len(wrong) else ""  # not for a single wrong key (review rev25-r3 N3)
        raise fail(task, f"{len(wrong)} of {len(NAMES)} wrong. {one}{said}{more}")
    passed(task, "all six dtypes right: matmuls in bfloat16, the loss in float32, weights and their "
                 "gradients float32.")


def _autocast_state(device_type: str) -> tuple[bool, torch.dtype]:
    return torch.is_autocast_enabled(device_type), torch.get_autocast_dtype(device_type)


def _state_words(state: tuple[bool, torch.dtype]) -> str:
    return f"{'on' if state[0] else 'off'}, dtype {_name(state[1])}"


def fp32_island(fn) -> None:
    """Task 2: ``fp32_island(f, x)`` runs ``f(x)`` in float32 even inside an autocast region, and leaves the
    autocast state (enabled flag and dtype on ``x``'s device type) as it found it.

    It is called twice: inside a ``low``-precision autocast region, and outside any region. An answer that turns
    autocast off and then back *on* (``set_autocast_enabled(..., True)``) passes the first call and leaks
    autocast into the code after the second; the state is compared before and after each call (and put back
    by the check, so that nothing leaks out of the check either).
    """
    task = "Task 2 (fp32_island)"
    require_callable(task, fn, "fp32_island")
    device = pick_device()
    low = torch.bfloat16 if device.type == "cpu" else torch.float16
    torch.manual_seed(0)
    x = torch.randn(16, 16, device=device).to(low)
    reference = x.float() @ x.float().T

    seen: list[tuple[bool, torch.dtype]] = []
    # The region is open on the other device type as well (its flag set directly: without that device,
    # torch.autocast would disable itself), so an island that disables autocast on the wrong device is told so.
    other = "cuda" if device.type == "cpu" else "cpu"
    other_off: list[bool] = []

    def gram(t: torch.Tensor) -> torch.Tensor:
        # Autocast on in float32 (CUDA's `torch.autocast("cuda", dtype=torch.float32)` stays on: its constructor
        # has no supported-dtype check there, torch/amp/autocast_mode.py) casts to float32: f runs in float32.
        low_on = torch.is_autocast_enabled(device.type) and torch.get_autocast_dtype(device.type) != torch.float32
        seen.append((low_on, t.dtype))
        other_off.append(not torch.is_autocast_enabled(other))
        return t @ t.T  # a matmul: autocast would run it in low precision

    other_state = _autocast_state(other)
    with torch.autocast(device_type=device.type, dtype=low):
        torch.set_autocast_enabled(other, True)
        try:
            inside = _autocast_state(device.type)
            out = call(task, fn, "fp32_island", gram, x)
            after_inside = _autocast_state(device.type)
        finally:
            torch.set_autocast_enabled(other, other_state[0])
            torch.set_autocast_dtype(other, other_state[1])
    if not seen:
        raise fail(task, "your function never called f: return f(...) computed on x.")
    autocast_on, input_dtype = seen[-1]
    if autocast_on and other_off[-1]:
        raise fail(task, f"you disabled autocast for device_type {other!r}, but x is on {device.type}: autocast "
                         f"stayed on for {device.type} when f ran, so its matmul was cast to low precision again. "
                         "Use `torch.autocast(device_type=x.device.type, enabled=False)`.")
    if autocast_on:
        raise fail(task, "autocast was still on when f ran, so its matmul was cast to low precision again. "
                         "Wrap the call in `with torch.autocast(device_type=x.device.type, enabled=False):`.")
    if input_dtype != torch.float32:
        raise fail(task, f"autocast was off, but f got a {_name(input_dtype)} tensor, so it ran in "
                         f"{_name(input_dtype)} anyway: inside the island ops use their inputs' dtype. "
                         "Pass `x.float()`.")
    if not after_inside[0]:
        raise fail(task, "autocast was switched off for the rest of the region: disable it only inside a "
                         "nested `with torch.autocast(device_type=..., enabled=False):` block.")
    if after_inside != inside:
        raise fail(task, f"inside the region autocast was {_state_words(inside)} before your function and "
                         f"{_state_words(after_inside)} after it: you changed the region's dtype. Leave it as it "
                         "was: a nested `with torch.autocast(device_type=..., enabled=False):` restores it.")
    if not isinstance(out, torch.Tensor) or out.dtype != torch.float32:
        what = _name(out.dtype) if isinstance(out, torch.Tensor) else type(out).__name__
        raise fail(task, f"return the float32 tensor f(x.float()) computes (you returned {what}); do not cast "
                         "the result back down.")
    error = (out - reference).abs().max().item()
    if error > 1e-4 * reference.abs().max().item():
        raise fail(task, f"the result differs from f(x.float()) by {error:.3g}: return f's output for the whole x.")

    # outside any region: f still runs in float32, and autocast must stay as it was (off)
    seen.clear()
    before = _autocast_state(device.type)
    try:
        out = call(task, fn, "fp32_island", gram, x)
        after = _autocast_state(device.type)
    finally:
        torch.set_autocast_enabled(device.type, before[0])
        torch.set_autocast_dtype(device.type, before[1])
    if after != before:
        turned_on = after[0] and not before[0]
        why = ("you turned autocast back on yourself (`set_autocast_enabled(..., True)`) instead of putting back "
               "what was there, so outside a region your function switched autocast on for everything after "
               "it" if turned_on else "you changed it without putting back what was there")
        raise fail(task, f"called outside any autocast region, autocast was {_state_words(before)} before "
                         f"your function and {_state_words(after)} after it: {why}. The autocast state must be "
                         "as it was: a nested `with torch.autocast(device_type=..., enabled=False):` restores "
                         "it on exit (or save `torch.is_autocast_enabled(device_type)` and restore that).")
    if not seen or seen[-1] != (False, torch.float32):
        raise fail(task, "called outside an autocast region, f did not run on a float32 tensor with autocast off: "
                         "pass `x.float()` whether or not a region is open around your function.")
    if not isinstance(out, torch.Tensor) or out.dtype != torch.float32:
        raise fail(task, "called outside an autocast region, your function did not return f's float32 result.")
    passed(task, "f ran in float32 with autocast off, inside an autocast region that stayed on around it and "
                 "outside one, and the autocast state was as before after each call.")

# --- Task 3: predict the CUDA dtypes of ops the lesson did not show -----------------------------------------------

CUDA_OPS = {  # key → (the aten op whose CUDA policy decides, how the task names the call, its relatives in the rule)
    "bmm": ("aten::bmm", "torch.bmm(x, w)", "a matmul, like the lesson's mm and addmm"),
    "conv1d": ("aten::conv1d", "F.conv1d(x, w)", "a convolution, like conv2d"),
    "amin": ("aten::amin", "torch.amin(x, dim=-1)", "a minimum, like max and amax"),
    "cumprod": ("aten::cumprod", "torch.cumprod(x, dim=-1)", "a running product, like cumsum and prod"),
    "log1p": ("aten::log1p", "torch.log1p(x)", "a logarithm, log(1 + x), like log"),
    "softmin": ("aten::softmax.int", "F.softmin(x, dim=-1)", "softmax of -x, like softmax and log_softmax"),
    "smooth_l1_loss": ("aten::smooth_l1_loss", "F.smooth_l1_loss(x, target)", "a loss, like mse_loss and l1_loss"),
    "var_mean": ("aten::var_mean", "torch.var_mean(x)", "a statistic, like mean and var"),
}
RELATIVES = {  # the ops of lesson 03's rule (or tables) that each Task 3 op's family is read from: all agree on CUDA
    "bmm": ("aten::mm", "aten::addmm"), "conv1d": ("aten::conv2d",), "amin": ("max", "amax"),
    "cumprod": ("cumsum", "prod"), "log1p": ("log",), "softmin": ("softmax", "log_softmax"),
    "smooth_l1_loss": ("mse_loss", "l1_loss"), "var_mean": ("mean", "var"),
}
FAMILY_IS_A_HEURISTIC = {  # per-op lists: close relatives with different CUDA policies (the task text names them)
    "fp32": ("aten::rsqrt", "aten::reciprocal", "aten::tan", "aten::sinh", "aten::acos", "aten::softplus"),
    "fallthrough": ("aten::sqrt", "aten::tanh", "aten::sin", "aten::cos", "aten::erf", "aten::exp2",
                    "aten::sigmoid", "aten::gelu", "aten::silu"),
}


def _cuda_calls(device: str) -> dict[str, torch.Tensor]:
    """Task 3's calls, on float16 tensors of ``device`` (run under CUDA autocast by :func:`cuda_truth`)."""
    x = torch.randn(2, 4, 4, device=device, dtype=torch.float16)
    w = torch.randn(2, 4, 4, device=device, dtype=torch.float16)
    return {"bmm": torch.bmm(x, w), "conv1d": F.conv1d(x, torch.randn(3, 4, 2, device=device, dtype=torch.float16)),
            "amin": torch.amin(x, dim=-1), "cumprod": torch.cumprod(x, dim=-1), "log1p": torch.log1p(x),
            "softmin": F.softmin(x, dim=-1), "smooth_l1_loss": F.smooth_l1_loss(x, w), "var_mean": torch.var_mean(x)[0]}


def cuda_truth() -> dict[str, torch.dtype]:
    """The output dtype of each of Task 3's calls under CUDA float16 autocast: the calls really run (simulated
    with fake CUDA tensors on a machine without a GPU, :func:`ampcourse.autocast_lists.device_trace`)."""
    from ..autocast_lists import device_trace

    return {k: v.dtype for k, v in device_trace(_cuda_calls, "cuda", torch.float16).result.items()}


def cuda_dtype(key: str) -> torch.dtype:
    """The output dtype of op ``key`` for float16 inputs under CUDA float16 autocast."""
    return cuda_truth()[key]


def _why_cuda(key: str) -> str:
    from ..autocast_lists import policy_of

    op, _, family = CUDA_OPS[key]
    policy, cpu = policy_of(op, "cuda"), policy_of(op, "cpu")
    lists = {"fp32": "CUDA's FP32 list", "lower_precision_fp": "CUDA's lower-precision list",
             "fallthrough": "no CUDA list (it follows its input)"}
    note = " (the CPU's lists differ here)" if cpu != policy else ""
    return f"{family}; its relatives are on {lists.get(policy, policy)}{note}"


def predict_cuda_dtypes(fn) -> None:
    """Task 3: ``predict_cuda_dtypes()`` returns the output dtype of each op under CUDA float16 autocast."""
    task = "Task 3 (predict_cuda_dtypes)"
    require_callable(task, fn, "predict_cuda_dtypes")
    got = call(task, fn, "predict_cuda_dtypes")
    if not isinstance(got, dict) or set(got) != set(CUDA_OPS):
        keys = sorted(got) if isinstance(got, dict) else type(got).__name__
        raise fail(task, f"return a dict with exactly the keys {sorted(CUDA_OPS)} (got {keys}).")
    if bad := [k for k in CUDA_OPS if got[k] not in (torch.float16, torch.float32)]:
        raise fail(task, f"{bad[0]!r}: give torch.float16 or torch.float32, not {got[bad[0]]!r}.")
    truth = cuda_truth()
    wrong = [k for k in CUDA_OPS if got[k] != truth[k]]
    if wrong:
        shown = wrong if last_tier_next(__name__, "predict_cuda_dtypes") else wrong[:1]  # as in Task 1
        said = "; ".join(f"{CUDA_OPS[k][1]} (you said {_name(got[k])}): {_why_cuda(k)}" for k in shown)
        one = "one: " if len(shown) < len(wrong) else ""
        raise fail(task, f"{len(wrong)} of {len(CUDA_OPS)} wrong — {one}{said}. The lists are per op (a family is "
                         "a heuristic), but for these eight the relatives in lesson 03's rule all agree: "
                         f"{fp32_rule('cuda')}; matmuls and convolutions run in float16, most losses (mse_loss, "
                         "l1_loss, nll_loss, …) in float32. Check an op with "
                         "`ampcourse.autocast_lists.probe('aten::cumprod', 'cuda')`.")
    passed(task, f"all {len(CUDA_OPS)} CUDA dtypes predicted right (the calls ran under this torch's CUDA autocast "
                 "kernels, simulated without a GPU).")


# --- tiered hints: shown one tier per failed check, or on request with `check.hint(task)` ---

HINTS = {
    'predict_dtypes': [
        ("For each op, ask: is it on CPU autocast's lower-precision list, on its FP32 list, or on neither?"
         " Lesson 03's trace table lists them."),
        ('Linear (aten::linear) is on the lower-precision list; relu has no rule and follows its input; CPU '
         'autocast lists cross_entropy for float32. Parameters are never converted.'),
        ('hidden, act, logits: bfloat16; loss: float32; weight and weight.grad: float32 (a gradient has '
         "its leaf's dtype)."),
    ],
    'fp32_island': [
        ('Two things keep f out of float32 inside an autocast region: autocast itself, and a low-precision'
         " x. Lesson 03's FP32-island section handles both."),
        ('A nested `torch.autocast(..., enabled=False)` turns autocast off for its body only; inside it '
         'nothing casts for you.'),
        '`with torch.autocast(device_type=x.device.type, enabled=False): return f(x.float())`.',
    ],
    'predict_cuda_dtypes': [
        ('Lesson 03 showed the lists differ per device and printed the CUDA FP32 rule. The lists name ops one '
         'by one; for each op below, which op of the rule (or of the lesson\'s tables) is its closest relative?'),
        (f"The lesson's rule, read from the installed torch: {fp32_rule('cuda')}. Matmuls and convolutions run "
         "in float16, most losses in float32. Relatives: bmm ~ mm, conv1d ~ conv2d, amin ~ max/amax, cumprod ~ "
         "cumsum/prod, log1p ~ log, softmin = softmax(-x), smooth_l1_loss ~ mse_loss, var_mean ~ mean/var."),
        ('bmm, conv1d, amin, var_mean: float16; cumprod, log1p, softmin, smooth_l1_loss: float32. Verify any '
         "with `ampcourse.autocast_lists.probe('aten::cumprod', 'cuda')`."),
    ],
}
hint = hints(__name__, HINTS)
