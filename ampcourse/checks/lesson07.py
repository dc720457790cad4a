"""Checks for exercise 07 (troubleshooting): find the first non-finite module, an FP32 island, an FP32 loss.

Everything runs under float16 autocast on the course device, with tiny models (float16 matmuls are slow on
CPUs). What the learner's code does is observed from outside: its return value, the forward hooks left
registered on the models (counted before and after), and, through probes (forward pre-hooks and a spy
loss), the dtype of the tensors that reach a layer and whether autocast was on at that moment.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

import torch
from torch import nn

from ..device import pick_device
from ..troubleshoot import find_nonfinite
from . import CheckFailed, call, fail, hints, passed, require_callable

FP16_MAX = float(torch.finfo(torch.float16).max)


def _autocast(device: torch.device):
    return torch.autocast(device_type=device.type, dtype=torch.float16)


# --- Task 1: the first module that produces inf or NaN -----------------------------------------------------

class _Sqrt(nn.Module):
    """sqrt: NaN for negative inputs, never inf."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.sqrt()


def _overflow_model(device: torch.device) -> nn.Module:
    """embed → block(up, act) → norm → head; block.up passes 65504 (inf), norm turns it into NaN."""
    torch.manual_seed(7)
    model = nn.Sequential(OrderedDict([
        ("embed", nn.Linear(6, 8)),
        ("block", nn.Sequential(OrderedDict([("up", nn.Linear(8, 8)), ("act", nn.ReLU())]))),
        ("norm", nn.LayerNorm(8)),
        ("head", nn.Linear(8, 3)),
    ]))
    with torch.no_grad():
        model.block.up.weight.mul_(1e5)
    return model.to(device)


def _nan_model(device: torch.device) -> nn.Module:
    """Only NaN, never inf: sqrt of negative values, then a Linear that spreads the NaN."""
    torch.manual_seed(8)
    return nn.Sequential(OrderedDict([("proj", nn.Linear(6, 8)), ("root", _Sqrt()), ("out", nn.Linear(8, 3))])
                         ).to(device)


def _finite_model(device: torch.device) -> nn.Module:
    torch.manual_seed(9)
    return nn.Sequential(OrderedDict([("a", nn.Linear(6, 8)), ("act", nn.Tanh()), ("b", nn.Linear(8, 3))])).to(device)


def _hooks(model: nn.Module) -> int:
    """Forward and forward-pre hooks registered on the model's modules and globally (read-only count)."""
    from torch.nn.modules import module as module_mod

    local = sum(len(m._forward_hooks) + len(m._forward_pre_hooks) for m in model.modules())
    return local + len(module_mod._global_forward_hooks) + len(module_mod._global_forward_pre_hooks)


def _first_nonfinite_input(model: nn.Module, x: torch.Tensor, device: torch.device) -> str | None:
    """What a learner who checks the *inputs* would return: the first module that receives inf/NaN."""
    with torch.no_grad(), _autocast(device):
        report = find_nonfinite(model, x)
    for record in report.records:
        if not record.input_finite:
            return record.name
    return None


def _run_finder(task: str, fn, model: nn.Module, x: torch.Tensor, device: torch.device) -> Any:
    before = _hooks(model)
    with _autocast(device):
        answer = call(task, fn, "first_nonfinite_module", model, x)
    left = _hooks(model) - before
    if left:
        raise fail(task, f"your forward hooks are still registered after the function returned ({left} left): keep the "
                         "handles that `register_forward_hook` returns and call `handle.remove()` on each, "
                         "in a `finally:` block so they go even if the forward pass raises.")
    if answer is not None and not isinstance(answer, str):
        raise fail(task, f"return the module's qualified name (a str, as in `model.named_modules()`) or None; you "
                         f"returned a {type(answer).__name__}.")
    return answer


def first_nonfinite_module(fn) -> None:
    """Task 1: ``first_nonfinite_module(model, x)`` names the first module whose output holds inf or NaN."""
    task = "Task 1 (first_nonfinite_module)"
    require_callable(task, fn, "first_nonfinite_module")
    device = pick_device()
    x = torch.randn(4, 6, generator=torch.Generator().manual_seed(3)).to(device)

    model = _overflow_model(device)
    with torch.no_grad(), _autocast(device):
        report = find_nonfinite(model, x)
    bad = report.bad
    expected = bad[0].name  # "block.up"
    answer = _run_finder(task, fn, model, x, device)
    if answer != expected:
        first_nan = next(r.name for r in bad if r.n_nan)
        if answer is None:
            raise fail(task, f"you returned None, but `{expected}` produced inf (its output passed float16's 65504). "
                             "Check each module's *output* with `torch.isfinite(output).all()` in a forward hook.")
        if answer == _first_nonfinite_input(model, x, device):
            raise fail(task, f"you returned `{answer}`, the first module that *received* an inf: you checked the "
                             f"inputs instead of the outputs. The inf came out of `{expected}`; test the hook's "
                             "`output` argument.")
        if answer == first_nan:
            raise fail(task, f"you returned `{answer}`, the first module with a NaN, but `{expected}` produced an inf "
                             "before it: you only looked for NaN. `torch.isfinite` catches both inf and NaN.")
        if answer in (bad[-1].name, bad[-2].name):
            raise fail(task, f"you returned `{answer or '(the model itself)'}`, the last module whose output was "
                             f"non-finite, not the first: every module after `{expected}` only inherits its inf. "
                             "Keep the first name you see (hooks fire in execution order) and ignore later ones.")
        if answer in [r.name for r in bad]:
            raise fail(task, f"you returned `{answer}`, a later module: the first non-finite output (in execution "
                             f"order) came from `{expected}`.")
        raise fail(task, f"you returned {answer!r}; the first module whose output held inf or NaN is `{expected}`.")

    nan_model = _nan_model(device)
    with torch.no_grad(), _autocast(device):
        nan_report = find_nonfinite(nan_model, x)
    expected_nan = nan_report.first.name  # "root"
    answer = _run_finder(task, fn, nan_model, x, device)
    if answer != expected_nan:
        if answer is None:
            raise fail(task, f"on a model whose `{expected_nan}` module produces NaN (sqrt of negative numbers) and "
                             "no inf, you returned None: you only checked for inf, not NaN. Use "
                             "`torch.isfinite(output).all()`, which is False for both.")
        raise fail(task, f"on a model where `{expected_nan}` is the first to produce NaN, you returned {answer!r}.")

    finite_model = _finite_model(device)
    answer = _run_finder(task, fn, finite_model, x, device)
    if answer is not None:
        raise fail(task, f"every output of this model is finite, but you returned {answer!r}: return None when no "
                         "module produced inf or NaN.")
    passed(task, f"`{expected}` (inf, before later NaNs), `{expected_nan}` (NaN only), None for a finite model; no "
                 "hooks left behind.")


# --- Task 2: an FP32 island --------------------------------------------------------------------------------

def _island_block(device: torch.device) -> tuple[nn.Module, dict]:
    torch.manual_seed(11)
    block = nn.Sequential(nn.Linear(8, 16), nn.ReLU())
    with torch.no_grad():
        block[0].weight.mul_(1e5)
    block = block.to(device)
    seen: dict[str, Any] = {}

    def probe(module, args):
        seen.setdefault("autocast", torch.is_autocast_enabled(device.type))
        seen.setdefault("dtype", args[0].dtype)

    block[0].register_forward_pre_hook(probe)
    return block, seen


def fp32_block(fn) -> None:
    """Task 2: ``fp32_block(block, x)`` runs ``block`` in FP32 inside a float16 autocast region."""
    task = "Task 2 (fp32_block)"
    require_callable(task, fn, "fp32_block")
    device = pick_device()
    generator = torch.Generator().manual_seed(12)
    x = torch.randn(4, 8, generator=generator).to(device).half()  # what the fp16 layer before would hand over
    block, seen = _island_block(device)
    with torch.no_grad():
        reference = block(x.float())
    seen.clear()
    peak = float(reference.abs().max())  # > 65504 (a test makes sure)
    try:
        with _autocast(device):
            out = call(task, fn, "fp32_block", block, x)
    except CheckFailed:
        if seen.get("autocast") is False and seen.get("dtype") == torch.float16:
            raise fail(task, "you disabled autocast but the input stayed float16: without autocast nothing casts it, "
                             "and Linear refuses a float16 input with float32 weights (\"mat1 and mat2 must have the "
                             "same dtype\"). Cast the input too: `block(x.float())`.") from None
        raise
    if not seen:
        raise fail(task, "the block was never called: return `block(...)` computed in FP32.")
    if seen["autocast"]:
        words = "cast the input to float32 but left autocast on" if seen["dtype"] == torch.float32 else \
            "left autocast on and the input in float16"
        raise fail(task, f"you {words}: autocast cast the Linear's input back to float16, and its output (up to "
                         f"{peak:.3g}) overflowed. Run the block inside `torch.autocast(device_type=x.device.type, "
                         "enabled=False)` — with the device type of the tensors — and cast the input with `.float()`.")
    if seen["dtype"] != torch.float32:
        raise fail(task, f"autocast was off, but the block's input was {seen['dtype']}: cast it with `x.float()`.")
    if not isinstance(out, torch.Tensor):
        raise fail(task, f"return the block's output tensor; you returned a {type(out).__name__}.")
    if out.dtype == torch.float16:
        raise fail(task, f"you cast the output back to float16, so the values above 65504 (up to {peak:.3g}) became "
                         "inf again. Return the float32 result: the next autocast op casts it down when it needs to, "
                         "and after a normalisation it fits.")
    if out.dtype != torch.float32:
        raise fail(task, f"the output is {out.dtype}; the island's output should be float32.")
    if not torch.isfinite(out).all():
        raise fail(task, "the output holds inf or NaN although the block ran in FP32.")
    error = float((out.detach() - reference).abs().max()) / peak
    if error > 1e-5:
        raise fail(task, f"the output differs from the FP32 reference (max relative error {error:.2g}).")
    passed(task, f"autocast off and a float32 input inside the block; float32 output up to {peak:.3g}, finite, equal "
                 "to the FP32 reference.")


# --- Task 3: the loss in FP32, class indices kept ----------------------------------------------------------

def loss_in_fp32(fn) -> None:
    """Task 3: ``loss_in_fp32(loss_fn, logits, target)`` computes the loss in FP32, class indices kept int64."""
    task = "Task 3 (loss_in_fp32)"
    require_callable(task, fn, "loss_in_fp32")
    device = pick_device()
    generator = torch.Generator().manual_seed(13)
    logits = (torch.randn(6, 5, generator=generator) * 4).to(device).half()
    target = torch.randint(0, 5, (6,), generator=generator).to(device)
    seen: dict[str, Any] = {}

    def spy_loss(inp, tgt):
        seen.update(inp=getattr(inp, "dtype", None), tgt=getattr(tgt, "dtype", None),
                    autocast=torch.is_autocast_enabled(device.type))
        return nn.functional.cross_entropy(inp, tgt)

    reference = nn.functional.cross_entropy(logits.float(), target)
    try:
        with _autocast(device):
            loss = call(task, fn, "loss_in_fp32", spy_loss, logits, target)
    except CheckFailed:
        if seen.get("tgt") is not None and seen["tgt"].is_floating_point:
            raise fail(task, f"you cast the class-index targets to {seen['tgt']} (the seed article's FP32Loss does "
                             "`target.float()`): cross_entropy wants int64 class indices and refuses them. Cast only "
                             "floating-point tensors: `t.float() if t.is_floating_point() else t`.") from None
        raise
    if not seen:
        raise fail(task, "loss_fn was never called: return `loss_fn(...)` computed in FP32.")
    if seen["tgt"] != torch.int64:
        raise fail(task, f"the targets reached the loss as {seen['tgt']}, not int64: leave integer targets alone.")
    if seen["inp"] != torch.float32:
        raise fail(task, f"the logits reached the loss as {seen['inp']}: cast them with `.float()`.")
    if seen["autocast"]:
        raise fail(task, "autocast was still on inside the loss: `.float()` alone does not take the loss out of "
                         "autocast — a custom loss's matmuls would run in float16 again. Wrap the call in "
                         "`torch.autocast(device_type=logits.device.type, enabled=False)`.")
    if not isinstance(loss, torch.Tensor) or loss.dtype != torch.float32:
        raise fail(task, f"return the loss as a float32 tensor (got {getattr(loss, 'dtype', type(loss).__name__)}).")
    if not torch.allclose(loss.detach(), reference, rtol=1e-6, atol=1e-6):
        raise fail(task, f"the loss is {float(loss.detach()):.6g}, the FP32 reference {float(reference):.6g}.")
    # Soft targets (class probabilities, float16 like the logits): the other legal form; they must reach the loss
    # as float32, not be left in float16 nor turned into indices.
    soft = torch.softmax(torch.randn(6, 5, generator=generator), dim=-1).to(device).half()
    seen.clear()
    try:
        with _autocast(device):
            soft_loss = call(task, fn, "loss_in_fp32", spy_loss, logits, soft)
    except CheckFailed:
        if seen.get("tgt") == torch.int64:
            raise fail(task, "with soft targets (float16 class probabilities) you turned them into int64: only "
                             "class indices are integers. Cast a floating-point target with `.float()`, leave an "
                             "integer one alone.") from None
        raise
    if seen.get("tgt") != torch.float32:
        raise fail(task, f"soft targets (float16 class probabilities) reached the loss as {seen.get('tgt')}: cast a "
                         "floating-point target to float32 too, `target.float() if target.is_floating_point()`.")
    soft_reference = nn.functional.cross_entropy(logits.float(), soft.float())
    if not torch.allclose(soft_loss.detach().float(), soft_reference, rtol=1e-6, atol=1e-6):
        raise fail(task, f"with soft targets the loss is {float(soft_loss.detach()):.6g}, the FP32 reference "
                         f"{float(soft_reference):.6g}.")
    passed(task, "logits float32, class indices kept int64 and soft targets cast to float32, autocast off inside; "
                 "both losses equal the FP32 reference.")

# --- Task 4: triage from a run's log ---------------------------------------------------------------------------------

TRIAGE_CASES = [  # (what, initial scale, scales after each update, losses, verdict)
    ("a run with two skips in 12 steps", 65536.0,
     [65536.0] * 4 + [32768.0] + [32768.0] * 5 + [16384.0, 16384.0], [2.1, 2.0, 1.9, 1.9, 1.8, 1.7, 1.7, 1.6, 1.5,
                                                                         1.5, 1.4, 1.4], "healthy"),
    ("a run whose loss turns inf", 65536.0, [32768.0, 16384.0, 8192.0, 4096.0, 2048.0, 1024.0],
     [2.3, float("inf"), float("inf"), float("nan"), float("inf"), float("inf")], "forward overflow"),
    ("a finite loss but every step skipped", 65536.0, [32768.0 / 2**i for i in range(10)],
     [2.3, 2.3, 2.3, 2.3, 2.3, 2.3, 2.3, 2.3, 2.3, 2.3], "backward overflow"),
    ("one step with a NaN loss, then recovery", 1024.0, [1024.0, 512.0, 512.0, 512.0, 512.0, 512.0],
     [1.2, float("nan"), 1.1, 1.0, 1.0, 0.9], "forward overflow"),
    ("a clean run", 1024.0, [1024.0, 1024.0, 2048.0, 2048.0], [0.9, 0.8, 0.8, 0.7], "healthy"),
]
VERDICTS = ("healthy", "forward overflow", "backward overflow")


def triage(fn) -> None:
    """Task 4: ``triage(initial_scale, scales, losses)`` reads a run's log and says where the trouble is."""
    task = "Task 4 (triage)"
    require_callable(task, fn, "triage")
    for what, initial, scales, losses, want in TRIAGE_CASES:
        got = call(task, fn, "triage", initial, list(scales), list(losses))
        if got not in VERDICTS:
            raise fail(task, f"return one of {', '.join(map(repr, VERDICTS))} (you returned {got!r}).")
        if got == want:
            continue
        context = f"for {what} you said {got!r}, it is {want!r}"
        if want == "healthy":
            raise fail(task, f"{context}: a few skipped steps are the scaler doing its job — it probes a higher scale "
                             "and backs off. Only a non-finite loss, or every step skipped, is a problem.")
        if want == "forward overflow":
            raise fail(task, f"{context}: the loss itself is inf or NaN, so the overflow happened in the forward pass "
                             "(no loss scale is involved there). Look at the losses before the scales.")
        raise fail(task, f"{context}: the loss is finite, yet every step is skipped while the scale keeps halving. "
                         "The inf appears in the backward pass and does not come from the scale.")
    passed(task, f"{len(TRIAGE_CASES)} run logs triaged right: occasional skips are healthy, a non-finite loss means a "
                 "forward overflow, a finite loss with every step skipped a backward one.")


# --- tiered hints: shown one tier per failed check, or on request with `check.hint(task)` ---

HINTS = {
    'first_nonfinite_module': [
        ("A forward hook runs after each module's forward, in execution order. Lesson 07's hook table does"
         ' exactly this for every module.'),
        ('Register one hook per module (model.modules()), record the name of each module whose tensor '
         'output is not all finite, and remove every handle in a `finally` block.'),
        ('names = {m: n for n, m in model.named_modules()}; hook appends names[module] when not '
         'torch.isfinite(output).all(); handles = [m.register_forward_hook(hook) for m in '
         'model.modules()]; try: model(x) finally: remove; return found[0] or None.'),
    ],
    'fp32_block': [
        ("Why would `block(x.float())` alone still run in float16 inside the region? (Lesson 07's FP32 "
         'island.)'),
        ('autocast casts the inputs of listed ops whatever dtype you give them; turn it off for the block,'
         ' and give the block a float32 input.'),
        'with torch.autocast(device_type=x.device.type, enabled=False): return block(x.float()).',
    ],
    'loss_in_fp32': [
        'What dtypes may a cross-entropy target have? Lesson 07 names both legal forms.',
        ('Cast the logits up, switch autocast off for the call, and cast the target only when it is '
         'floating point (soft targets); class indices must stay int64.'),
        ('with torch.autocast(device_type=logits.device.type, enabled=False): target = target.float() if '
         'target.is_floating_point() else target; return loss_fn(logits.float(), target).'),
    ],
    'triage': [
        'Which number in the log is computed before any loss scaling happens? Start there.',
        ('A non-finite loss means the forward pass overflowed. With finite losses, a skip is a scale '
         'decrease: occasional ones are normal; a decrease at every step means the backward overflows '
         'whatever the scale.'),
        ("if any loss is not finite: 'forward overflow'; elif every scales[i] < the scale before it: "
         "'backward overflow'; else 'healthy'."),
    ],
}
hint = hints(__name__, HINTS)
