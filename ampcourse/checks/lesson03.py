"""Checks for exercise 03 (autocast): predict the dtypes of a forward/backward pass; build an FP32 island."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ..device import pick_device
from . import call, fail, hints, passed, require_callable

NAMES = ("hidden", "act", "logits", "loss", "weight", "weight.grad")

WHY = {
    "hidden": "`nn.Linear` runs `addmm`, which is on autocast's lower-precision list: its inputs are cast to "
              "bfloat16 and so is its output.",
    "act": "`relu` has no autocast rule: it runs in the dtype of its input, which is already bfloat16.",
    "logits": "the second `nn.Linear` is an `addmm` too: bfloat16.",
    "loss": "`cross_entropy` is on autocast's FP32 list: autocast casts the bfloat16 logits up and computes "
            "the loss in float32.",
    "weight": "autocast never changes parameters: it casts copies for each operation; the weight stays float32.",
    "weight.grad": "a gradient has the dtype of its leaf tensor: the bfloat16 gradient of the cast copy flows "
                   "back through the cast and arrives as float32.",
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
        if got[name] != truth[name]:
            raise fail(task, f"{name!r} is {_name(truth[name])}, not {_name(got[name])}: {WHY[name]}")
    passed(task, "all six dtypes right: matmuls in bfloat16, the loss in float32, weights and their "
                 "gradients float32.")


def fp32_island(fn) -> None:
    """Task 2: ``fp32_island(f, x)`` runs ``f(x)`` in float32 even inside an autocast region."""
    task = "Task 2 (fp32_island)"
    require_callable(task, fn, "fp32_island")
    device = pick_device()
    low = torch.bfloat16 if device.type == "cpu" else torch.float16
    torch.manual_seed(0)
    x = torch.randn(16, 16, device=device).to(low)
    reference = x.float() @ x.float().T

    seen: list[tuple[bool, torch.dtype]] = []

    def gram(t: torch.Tensor) -> torch.Tensor:
        seen.append((torch.is_autocast_enabled(device.type), t.dtype))
        return t @ t.T  # a matmul: autocast would run it in low precision

    with torch.autocast(device_type=device.type, dtype=low):
        out = call(task, fn, "fp32_island", gram, x)
        still_on = torch.is_autocast_enabled(device.type)
    if not seen:
        raise fail(task, "your function never called f: return f(...) computed on x.")
    autocast_on, input_dtype = seen[-1]
    if autocast_on:
        raise fail(task, "autocast was still on when f ran, so its matmul was cast to low precision again. "
                         "Wrap the call in `with torch.autocast(device_type=x.device.type, enabled=False):`.")
    if input_dtype != torch.float32:
        raise fail(task, f"autocast was off, but f got a {_name(input_dtype)} tensor, so it ran in "
                         f"{_name(input_dtype)} anyway: inside the island ops use their inputs' dtype. "
                         "Pass `x.float()`.")
    if not still_on:
        raise fail(task, "autocast was switched off for the rest of the region: disable it only inside a "
                         "nested `with torch.autocast(device_type=..., enabled=False):` block.")
    if not isinstance(out, torch.Tensor) or out.dtype != torch.float32:
        what = _name(out.dtype) if isinstance(out, torch.Tensor) else type(out).__name__
        raise fail(task, f"return the float32 tensor f(x.float()) computes (you returned {what}); do not cast "
                         "the result back down.")
    error = (out - reference).abs().max().item()
    if error > 1e-4 * reference.abs().max().item():
        raise fail(task, f"the result differs from f(x.float()) by {error:.3g}: return f's output for the whole x.")
    passed(task, "f ran in float32 with autocast off, inside an autocast region that stayed on around it.")

# --- Task 3: predict the CUDA dtypes -----------------------------------------------------------------------------

CUDA_OPS = {  # key → (the aten op probed, how the task names it)
    "linear": ("aten::linear", "F.linear / nn.Linear"),
    "relu": ("aten::relu", "torch.relu"),
    "softmax": ("aten::softmax.int", "torch.softmax(x, dim=-1)"),
    "layer_norm": ("aten::layer_norm", "F.layer_norm"),
    "sum": ("aten::sum", "x.sum()"),
    "exp": ("aten::exp", "torch.exp"),
    "mse_loss": ("aten::mse_loss", "F.mse_loss"),
}


def cuda_dtype(key: str) -> torch.dtype:
    """The output dtype of op ``key`` for float16 inputs under CUDA float16 autocast, from the probed policy."""
    from ..autocast_lists import probe

    policy = probe(CUDA_OPS[key][0], "cuda").policy
    return torch.float32 if policy == "fp32" else torch.float16


def predict_cuda_dtypes(fn) -> None:
    """Task 3: ``predict_cuda_dtypes()`` returns the output dtype of each op under CUDA float16 autocast."""
    from ..autocast_lists import probe

    task = "Task 3 (predict_cuda_dtypes)"
    require_callable(task, fn, "predict_cuda_dtypes")
    got = call(task, fn, "predict_cuda_dtypes")
    if not isinstance(got, dict) or set(got) != set(CUDA_OPS):
        keys = sorted(got) if isinstance(got, dict) else type(got).__name__
        raise fail(task, f"return a dict with exactly the keys {sorted(CUDA_OPS)} (got {keys}).")
    wrong = []
    for key, (op, shown) in CUDA_OPS.items():
        want = cuda_dtype(key)
        if got[key] != want:
            cpu = probe(op, "cpu").policy
            cuda = probe(op, "cuda").policy
            why = {"fp32": "on CUDA's FP32 list", "lower_precision_fp": "on CUDA's lower-precision list",
                   "fallthrough": "on no CUDA list, so it follows its float16 input"}.get(cuda, cuda)
            note = " (on the CPU it is not: the lists differ per device)" if cpu != cuda else ""
            wrong.append(f"{shown} → {str(want).removeprefix('torch.')}: it is {why}{note}")
    if wrong:
        raise fail(task, f"{len(wrong)} of {len(CUDA_OPS)} wrong — " + "; ".join(wrong[:2]) +
                   ("; …" if len(wrong) > 2 else "") + ". Predict per device: CUDA runs reductions, softmax, "
                   "norms, exp and losses in float32.")
    passed(task, f"all {len(CUDA_OPS)} CUDA dtypes predicted right (checked against this torch's CUDA autocast "
                 "kernels, probed without a GPU).")


# --- tiered hints: shown one tier per failed check, or on request with `check.hint(task)` ---

HINTS = {
    'predict_dtypes': [
        ("For each op, ask: is it on CPU autocast's lower-precision list, on its FP32 list, or on neither?"
         " Lesson 03's trace table lists them."),
        ('Linear (addmm) is on the lower-precision list; relu has no rule and follows its input; CPU '
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
        ('Lesson 03 showed the lists differ per device. On CUDA, which kinds of op does autocast keep in '
         'float32?'),
        ('On CUDA, matmuls and linear layers run in float16; softmax, norms, reductions such as sum, exp '
         'and the losses are on the FP32 list; ops on no list (relu) follow their input.'),
        ('linear and relu: float16; softmax, layer_norm, sum, exp, mse_loss: float32. Verify any of them '
         "with `ampcourse.autocast_lists.probe('aten::softmax.int', 'cuda')`."),
    ],
}
hint = hints(__name__, HINTS)
