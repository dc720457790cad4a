"""Checks for exercise 07 (troubleshooting): find the first non-finite module, diagnose and island the block that
overflows, an FP32 loss, triage a run's log.

Everything runs under float16 autocast on the course device, with tiny models (float16 matmuls are slow on
CPUs). What the learner's code does is observed from outside: its return value, the forward hooks left
registered on the models (counted before and after), and, through probes (forward pre-hooks and a spy
loss), the dtype of the tensors that reach a layer and whether autocast was on at that moment.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from typing import Any

import torch
from torch import nn

from ..device import pick_device
from ..troubleshoot import COLLAPSE_WINDOW, MAX_SKIP_FRACTION, diagnose_scale, find_nonfinite
from . import CheckFailed, call, fail, hints, noted_call, passed, require_callable

FP16_MAX = float(torch.finfo(torch.float16).max)


def _autocast(device: torch.device):
    return torch.autocast(device_type=device.type, dtype=torch.float16)


# --- Task 1: the first module that produces inf or NaN -----------------------------------------------------

class _Sqrt(nn.Module):
    """sqrt: NaN for negative inputs, never inf."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.sqrt()


class _Amplify(nn.Module):
    """A container that computes in its own forward: ``proj(x) * gain``. Its child's output is finite;
    its own is inf (float16), so only a hook on the container itself sees where the inf appeared."""

    def __init__(self, gain: float) -> None:
        super().__init__()
        self.proj = nn.Linear(6, 8)
        self.gain = gain

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(x) * self.gain


class _Scaled(nn.Module):
    """A model whose own forward computes: ``b(a(x)) * gain``. Both children are finite; only the model's own
    output (its name in ``named_modules()`` is ``''``) is inf."""

    def __init__(self, gain: float) -> None:
        super().__init__()
        self.a = nn.Linear(6, 8)
        self.b = nn.Linear(8, 3)
        self.gain = gain

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.b(self.a(x)) * self.gain


class _Boom(RuntimeError):
    """Raised by the check's raising model (and nothing else)."""


class _Raise(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        raise _Boom("the check's model raises in its forward pass (on purpose)")


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


def _container_model(device: torch.device) -> nn.Module:
    """mix (a container whose own forward overflows; its child mix.proj stays finite) → norm → head."""
    torch.manual_seed(10)
    return nn.Sequential(OrderedDict([("mix", _Amplify(1e6)), ("norm", nn.LayerNorm(8)), ("head", nn.Linear(8, 3))])
                         ).to(device)


def _root_model(device: torch.device) -> nn.Module:
    """The model itself overflows in its own forward (``b(a(x)) * 1e6``); ``a`` and ``b`` stay finite."""
    torch.manual_seed(11)
    return _Scaled(1e6).to(device)


def _finite_model(device: torch.device) -> nn.Module:
    torch.manual_seed(9)
    return nn.Sequential(OrderedDict([("a", nn.Linear(6, 8)), ("act", nn.Tanh()), ("b", nn.Linear(8, 3))])).to(device)


def _raising_model(device: torch.device) -> nn.Module:
    torch.manual_seed(9)
    return nn.Sequential(OrderedDict([("a", nn.Linear(6, 8)), ("act", nn.Tanh()), ("boom", _Raise())])).to(device)


def _hooks(model: nn.Module) -> int:
    """Forward and forward-pre hooks registered on the model's modules and globally (read-only count)."""
    from torch.nn.modules import module as module_mod

    local = sum(len(m._forward_hooks) + len(m._forward_pre_hooks) for m in model.modules())
    return local + len(module_mod._global_forward_hooks) + len(module_mod._global_forward_pre_hooks)


def _left_behind(task: str, left: int, when: str) -> CheckFailed:
    if left < 0:
        return fail(task, f"{-left} forward hook(s) that were on the model before your function ran are gone "
                          f"{when}: you removed hooks you did not register (clearing `module._forward_hooks`?). "
                          "Remove only your own: keep the handles `register_forward_hook` returns and call "
                          "`handle.remove()` on each.")
    return fail(task, f"your forward hooks are still registered {when} ({left} left): keep the handles that "
                      "`register_forward_hook` returns and call `handle.remove()` on each, in a `finally:` block "
                      "so they go even if the forward pass raises.")


def _first_nonfinite_input(model: nn.Module, x: torch.Tensor, device: torch.device) -> str | None:
    """What a learner who checks the *inputs* would return: the first module that receives inf/NaN."""
    with torch.no_grad(), _autocast(device):
        report = find_nonfinite(model, x)
    for record in report.records:
        if not record.input_finite:
            return record.name
    return None


def _spy(model: nn.Module) -> tuple[dict, Any]:
    """A forward pre-hook on the model itself, registered before the learner's function runs: when that
    function calls ``model(x)``, it records which modules carry more forward hooks than before (the ones the
    learner hooked) and whether a global forward hook was added."""
    from torch.nn.modules import module as module_mod

    base = {name: len(m._forward_hooks) for name, m in model.named_modules()}
    base_global = len(module_mod._global_forward_hooks)
    seen: dict[str, Any] = {}

    def spy(module, args):
        if not seen:
            seen["local"] = {name for name, m in model.named_modules() if len(m._forward_hooks) > base[name]}
            seen["global"] = len(module_mod._global_forward_hooks) > base_global
    return seen, model.register_forward_pre_hook(spy)


def _label(name: str) -> str:
    return "'' (the model itself)" if name == "" else f"`{name}`"


def _missed(task: str, hooked: dict, expected: str, model: nn.Module) -> CheckFailed | None:
    """The mistake when the learner's hooks were not on the module that produced the first inf/NaN."""
    local = hooked.get("local")
    if not local or hooked.get("global") or expected in local:
        return None
    children = {name for name, _ in model.named_children()}
    leaves = {name for name, module in model.named_modules() if not list(module.children())}
    if expected == "":
        return fail(task, "you did not hook the model itself (name ''): this model computes in its own forward "
                          "(`b(a(x)) * 1e6`: `a` and `b` are finite, the model's output is inf), so only a hook on "
                          "the model sees it. Hook `model.modules()`, which starts with the model, and return '' "
                          "for it.")
    if local <= children:
        return fail(task, f"you hooked only the model's top-level children (`named_children()`), so no hook saw "
                          f"{_label(expected)}, where the first inf appeared. Hook every module, not only the "
                          "children: `model.modules()` (the model itself included).")
    if local <= leaves:
        return fail(task, f"you hooked only the leaf modules, but {_label(expected)} computes in its own forward "
                          "(its children's outputs are finite, its own is inf). Put a hook on every module "
                          "(`model.modules()`), containers and the model itself too.")
    return fail(task, f"your hooks missed {_label(expected)}, the module whose output was the first to hold inf: "
                      "hook every module (`model.modules()`).")


def _run_finder(task: str, fn, model: nn.Module, x: torch.Tensor, device: torch.device) -> tuple[Any, dict]:
    seen, spy = _spy(model)
    before = _hooks(model)
    try:
        with _autocast(device):
            answer = call(task, fn, "first_nonfinite_module", model, x)
        left = _hooks(model) - before
    finally:
        spy.remove()
    if left:
        raise _left_behind(task, left, "after the function returned")
    if answer is not None and not isinstance(answer, str):
        raise fail(task, f"return the module's qualified name (a str, as in `model.named_modules()`) or None; you "
                         f"returned a {type(answer).__name__}.")
    return answer, seen


def _wrong_first(task: str, answer: Any, expected: str, model: nn.Module, x: torch.Tensor, device: torch.device,
                 bad: list, hooked: dict) -> CheckFailed:
    """Name the mistake behind a wrong name on a model whose first non-finite output is ``expected``."""
    missed = _missed(task, hooked, expected, model)
    if missed is not None:
        return missed
    names = [name for name, _ in model.named_modules()]
    bad_names = [r.name for r in bad]
    kinds = {name: type(module).__name__ for name, module in model.named_modules()}
    pre_order = [name for name in names if name in bad_names]
    if answer is None:
        return fail(task, f"you returned None, but {_label(expected)} produced inf (its output passed float16's "
                          "65504). "
                          "Check each module's *output* with `torch.isfinite(output).all()` in a forward hook.")
    if answer not in names:
        if answer == kinds[expected]:
            return fail(task, f"you returned {answer!r}, the module's class; return its qualified name as "
                              f"`model.named_modules()` gives it (here `{expected}`).")
        return fail(task, f"you returned {answer!r}, which is no module of this model: return a name from "
                          "`model.named_modules()`.")
    if answer == _first_nonfinite_input(model, x, device):
        return fail(task, f"you returned `{answer}`, the first module that *received* an inf: you checked the "
                          f"inputs instead of the outputs. The inf came out of `{expected}`; test the hook's "
                          "`output` argument.")
    nan_first = next((r.name for r in bad if r.n_nan), None)
    if answer == nan_first and bad[0].n_inf:
        return fail(task, f"you returned `{answer}`, the first module with a NaN, but `{expected}` produced an inf "
                        "before it: you only looked for NaN. `torch.isfinite` catches both inf and NaN.")
    if answer == "" and "" in bad_names:
        return fail(task, f"you returned '' (the model itself), the last module whose output was non-finite: its "
                          "hook fires after all its children's, and its output only holds their inf. Either you "
                          "kept the last name, or you took the first in `model.named_modules()` order, where the "
                          f"model comes first. Keep the first name in the order the hooks fire: `{expected}`.")
    if answer in pre_order and names.index(answer) < names.index(expected) and answer != expected:
        return fail(task, f"you returned `{answer}`, a container that comes before `{expected}` in "
                          "`model.named_modules()` (parents before children) but whose hook fires *after* its "
                          "children's: its output only holds their inf. Take the order in which the hooks fire "
                          "(execution order), not the order of named_modules().")
    if answer == bad_names[-1] or (len(bad_names) > 1 and answer == bad_names[-2]):
        return fail(task, f"you returned `{answer or '(the model itself)'}`, the last module whose output was "
                          f"non-finite, not the first: every module after `{expected}` only inherits its inf. "
                          "Keep the first name you see (hooks fire in execution order) and ignore later ones.")
    if answer in bad_names:
        return fail(task, f"you returned `{answer}`, a later module: the first non-finite output (in execution "
                          f"order) came from `{expected}`.")
    return fail(task, f"you returned `{answer}`, whose output was finite; the first module whose output held inf "
                      f"or NaN is `{expected}`.")


def first_nonfinite_module(fn) -> None:
    """Task 1: ``first_nonfinite_module(model, x)`` names the first module whose output holds inf or NaN."""
    task = "Task 1 (first_nonfinite_module)"
    require_callable(task, fn, "first_nonfinite_module")
    device = pick_device()
    x = torch.randn(4, 6, generator=torch.Generator().manual_seed(3)).to(device)

    model = _overflow_model(device)
    with torch.no_grad(), _autocast(device):
        bad = list(find_nonfinite(model, x).bad)
    expected = bad[0].name  # "block.up"
    answer, hooked = _run_finder(task, fn, model, x, device)
    if answer != expected:
        raise _wrong_first(task, answer, expected, model, x, device, bad, hooked)

    nan_model = _nan_model(device)
    with torch.no_grad(), _autocast(device):
        nan_report = find_nonfinite(nan_model, x)
    expected_nan = nan_report.first.name  # "root"
    answer, hooked = _run_finder(task, fn, nan_model, x, device)
    if answer != expected_nan:
        missed = _missed(task, hooked, expected_nan, nan_model)
        if missed is not None:
            raise missed
        if answer is None:
            raise fail(task, f"on a model whose `{expected_nan}` module produces NaN (sqrt of negative numbers) and "
                             "no inf, you returned None: you only checked for inf, not NaN. Use "
                             "`torch.isfinite(output).all()`, which is False for both.")
        raise fail(task, f"on a model where `{expected_nan}` is the first to produce NaN, you returned {answer!r}.")

    container = _container_model(device)
    with torch.no_grad(), _autocast(device):
        container_bad = list(find_nonfinite(container, x).bad)
    expected_container = container_bad[0].name  # "mix": its own forward multiplies by 1e6
    answer, hooked = _run_finder(task, fn, container, x, device)
    if answer != expected_container:
        raise _wrong_first(task, answer, expected_container, container, x, device, container_bad, hooked)

    root = _root_model(device)
    with torch.no_grad(), _autocast(device):
        root_bad = list(find_nonfinite(root, x).bad)
    expected_root = root_bad[0].name  # "": the model's own forward multiplies by 1e6
    answer, hooked = _run_finder(task, fn, root, x, device)
    if answer != expected_root:
        if answer is None and _missed(task, hooked, expected_root, root) is None:
            raise fail(task, "on a model that computes in its own forward (`b(a(x)) * 1e6`: `a` and `b` are "
                             "finite, the model's output is inf) you returned None: the first non-finite output is "
                             "the model's own, and its name in `model.named_modules()` is '' (an empty string, "
                             "which is not None). Keep it: test `name is not None`, not `if name`.")
        raise _wrong_first(task, answer, expected_root, root, x, device, root_bad, hooked)

    finite_model = _finite_model(device)
    calls = []
    own = finite_model.a.register_forward_hook(lambda module, args, output: calls.append(1))  # the user's hook
    try:
        answer, _ = _run_finder(task, fn, finite_model, x, device)
    finally:
        own.remove()
    if answer is not None:
        raise fail(task, f"every output of this model is finite, but you returned {answer!r}: return None when no "
                         "module produced inf or NaN.")

    raising = _raising_model(device)
    before = _hooks(raising)
    try:
        with _autocast(device):
            noted_call(fn, raising, x)
    except Exception:  # noqa: BLE001, S110 - the forward raises on purpose; what counts is the hooks left
        pass
    left = _hooks(raising) - before
    if left:
        raise _left_behind(task, left, "after a forward pass that raised (the check's model raises on purpose, "
                                       "after `a` and `act` ran)")
    passed(task, f"`{expected}` (inf, before later NaNs), `{expected_nan}` (NaN only), `{expected_container}` (a "
                 "container's own forward), '' (the model's own forward), None for a finite model (its own hook "
                 "kept); no hooks left behind, even when the forward pass raised.")


# --- Task 2: diagnose the block that overflows and put it in an FP32 island ---------------------------------

BLOCK_PEAKS = {  # per model: the block names in order, and the FP32 peak |output| of each block's up and down
    "first": {"b0": (4.0e4, 6.0e4), "b1": (2.0e5, 3.0e5), "b2": (30.0, 20.0)},
    "second": {"encoder": (30.0, 20.0), "mixer": (4.0e4, 6.0e4), "decoder": (2.0e5, 3.0e5)},
}


def _block_model(which: str, device: torch.device) -> nn.Module:
    """Blocks (up → act → down → norm) and a head; each block's Linears are rescaled to the FP32 peaks of
    ``BLOCK_PEAKS[which]``: one block passes 65504, one comes close (6·10⁴) and fits, the others are small."""
    torch.manual_seed(17 if which == "first" else 18)
    peaks = BLOCK_PEAKS[which]
    model = nn.Sequential(OrderedDict(
        [(name, nn.Sequential(OrderedDict([("up", nn.Linear(8, 16)), ("act", nn.ReLU()),
                                           ("down", nn.Linear(16, 8)), ("norm", nn.LayerNorm(8))])))
         for name in peaks] + [("head", nn.Linear(8, 3))]))
    h = _block_input(device).cpu()
    with torch.no_grad():
        for name, (up_peak, down_peak) in peaks.items():
            block = getattr(model, name)
            for layer, peak in ((block.up, up_peak), (block.down, down_peak)):
                hidden = layer(h if layer is block.up else block.act(block.up(h)))
                gain = peak / float(hidden.abs().max())
                layer.weight.mul_(gain)
                layer.bias.mul_(gain)
            h = block(h)
    return model.to(device)


def _block_input(device: torch.device) -> torch.Tensor:
    return torch.randn(16, 8, generator=torch.Generator().manual_seed(19)).to(device)


def _probes(model: nn.Module, seen: dict) -> None:
    """A forward pre-hook on every Linear: whether autocast was on and the dtype of the input it received."""
    for name, module in model.named_modules():
        if isinstance(module, nn.Linear):
            def probe(module, args, name=name):
                seen[name] = (torch.is_autocast_enabled(args[0].device.type), args[0].dtype)
            module.register_forward_pre_hook(probe)


class _Island(nn.Module):
    def __init__(self, module: nn.Module) -> None:
        super().__init__()
        self.module = module

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        with torch.autocast(device_type=x.device.type, enabled=False):
            return self.module(x.float())


def _overflowing_block(which: str) -> str:
    return next(name for name, (up, _) in BLOCK_PEAKS[which].items() if up > FP16_MAX)


def _near_block(which: str) -> str:
    return next(name for name, (up, down) in BLOCK_PEAKS[which].items() if 1e4 < max(up, down) < FP16_MAX)


def _check_fixed(task: str, fn, which: str, device: torch.device) -> None:
    import copy

    x = _block_input(device)
    model = _block_model(which, device)
    reference = copy.deepcopy(model)
    target = _overflowing_block(which)
    setattr(reference, target, _Island(getattr(reference, target)))
    with torch.no_grad(), _autocast(device):
        want = reference(x)
    blocks = list(BLOCK_PEAKS[which])
    seen: dict[str, tuple[bool, torch.dtype]] = {}
    _probes(model, seen)
    linears = [name for name, module in model.named_modules() if isinstance(module, nn.Linear)]
    before = _hooks(model)
    with _autocast(device):
        fixed = call(task, fn, "fp32_block", model, x)
    left = _hooks(model) - before
    if left:
        raise _left_behind(task, left, "on the model after your function returned (from your diagnosis)")
    if fixed is None:
        raise fail(task, "you returned None: return the model (changed in place, or a changed copy) whose "
                         "overflowing block now runs in an FP32 island.")
    if not isinstance(fixed, nn.Module):
        raise fail(task, f"return the fixed model (an nn.Module); you returned a {type(fixed).__name__}.")
    seen.clear()
    try:
        with torch.no_grad(), _autocast(device):
            out = fixed(x)
    except Exception as err:  # noqa: BLE001 - reported as the mistake it is
        if any(not on and dtype == torch.float16 for on, dtype in seen.values()):
            raise fail(task, "your island disables autocast but its input stayed float16: without autocast "
                             "nothing casts it, and Linear refuses a float16 input with float32 weights (\"mat1 "
                             "and mat2 must have the same dtype\"). Cast the input too: `block(x.float())`.") from None
        raise fail(task, "running the model you returned under float16 autocast raised "
                         f"{type(err).__name__}: {str(err).splitlines()[0][:160]}.") from None
    missing = [name for name in linears if name not in seen]
    if missing:
        raise fail(task, f"the model you returned no longer runs `{missing[0]}`: wrap the block you found "
                         "(keep its modules and weights), do not replace or drop it.")
    in_fp32 = {name for name, (on, dtype) in seen.items() if not on and dtype == torch.float32}
    wrapped = [block for block in [*blocks, "head"] if any(n.split(".")[0] == block for n in in_fp32)]
    target_layers = [n for n in linears if n.split(".")[0] == target]
    peak_up, peak_down = BLOCK_PEAKS[which][target]
    if set(in_fp32) == set(linears):
        raise fail(task, f"every layer of the model ran in FP32: you put the whole model in an island. Only "
                         f"`{target}` overflows; the other blocks fit float16 and should keep float16's speed. Wrap "
                         f"just `{target}`.")
    if not any(n in in_fp32 for n in target_layers):
        if wrapped:
            other = wrapped[0]
            where = ("comes after it and only inherits its NaN"
                     if [*blocks, "head"].index(other) > blocks.index(target) else "was finite in float16")
            raise fail(task, f"you put `{other}` in FP32, but `{other}` {where}: the first non-finite output "
                             f"comes from `{target}.up` (find it with forward hooks, as in Task 1, on *this* "
                             f"model). Wrap the top-level block that contains it, `{target}`.")
        if any(on and dtype == torch.float32 for n, (on, dtype) in seen.items() if n in target_layers):
            raise fail(task, f"`{target}` received a float32 input but autocast was still on (on a {device.type} "
                             f"tensor): it cast the input back to float16 at the first Linear, and its output (up to "
                             f"{peak_up:.3g}) overflowed. The island needs `torch.autocast(device_type=x.device.type, "
                             "enabled=False)` as well as `.float()`: the device type of the input, not a fixed "
                             "\"cuda\" or \"cpu\".")
        raise fail(task, f"no block ran in FP32: `{target}` still ran in float16 and its output (up to "
                         f"{peak_up:.3g} in FP32) is inf. (`.float()` on a block's weights changes nothing: they "
                         f"are float32 already, autocast casts at each op.) Put `{target}` in an island.")
    if not all(n in in_fp32 for n in target_layers):
        inside = [n for n in target_layers if n in in_fp32]
        outside = [n for n in target_layers if n not in in_fp32]
        raise fail(task, f"your island ends too early: `{inside[0]}` ran in FP32, but `{outside[0]}` got float16 "
                         f"again — autocast cast the island's float32 output (up to {peak_up:.3g}) back down, "
                         f"and it became inf. End the island where values are back in range: after the block's "
                         f"LayerNorm, i.e. wrap the whole block `{target}`.")
    extra = [block for block in wrapped if block != target]
    if extra:
        near = _near_block(which)
        why = (f"its peak ({max(BLOCK_PEAKS[which][near]):.3g}) is close to 65504, yet fits float16"
               if extra[0] == near else "it fits float16")
        raise fail(task, f"your island is too large: `{extra[0]}` ran in FP32 too, but {why}. An island costs "
                         f"16-bit speed: put only the block that overflows, `{target}`, in FP32.")
    if not isinstance(out, torch.Tensor) or not torch.isfinite(out).all():
        raise fail(task, "the model's output still holds inf or NaN, although the block ran in FP32.")
    out = torch.Tensor.float(out)  # through the class: a `float` set on the tensor never runs (review rev25-r6 E3)
    if not torch.allclose(out, want.float(), rtol=1e-2, atol=1e-2):
        gap = float((out - want.float()).abs().max())
        raise fail(task, f"the output differs from that of the model with only `{target}` in an FP32 island (max "
                         f"difference {gap:.3g}): "
                         "leave the weights and the other blocks as they are.")


def fp32_block(fn) -> None:
    """Task 2: ``fp32_block(model, x)`` finds the block that overflows under float16 autocast and returns the
    model with that block (only) in an FP32 island.

    Runs on the course device and, when that is not the CPU, on the CPU too (the first model): an island that
    turns off autocast for a fixed device type fails on one of them."""
    task = "Task 2 (fp32_block)"
    require_callable(task, fn, "fp32_block")
    device = pick_device()
    for which in BLOCK_PEAKS:
        _check_fixed(task, fn, which, device)
    ran = [device.type]
    if device.type != "cpu":
        _check_fixed(task, fn, next(iter(BLOCK_PEAKS)), torch.device("cpu"))
        ran.append("cpu")
    found = [_overflowing_block(which) for which in BLOCK_PEAKS]
    passed(task, f"found `{found[0]}` and `{found[1]}` (outputs past 65504) and put each, whole, in FP32 "
                 f"({' and '.join(ran)}): autocast off and float32 inputs there, every other block still float16 "
                 "(also the ones close to 65504); outputs finite and equal to the reference fix.")

# --- Task 3: the loss in FP32, class indices kept ----------------------------------------------------------

class _flag_on:
    """Set autocast's enabled flag for one device type on (``torch.set_autocast_enabled``), then restore it."""

    def __init__(self, device_type: str) -> None:
        self.device_type = device_type

    def __enter__(self) -> None:
        self.prev = torch.is_autocast_enabled(self.device_type)
        torch.set_autocast_enabled(self.device_type, True)

    def __exit__(self, *exc: object) -> None:
        torch.set_autocast_enabled(self.device_type, self.prev)


def _loss_case(task: str, fn, device: torch.device, generator: torch.Generator) -> str:
    """The class-index case and the soft-target case on ``device``; returns what it verified."""
    logits = (torch.randn(6, 5, generator=generator) * 4).to(device).half().requires_grad_()
    target = torch.randint(0, 5, (6,), generator=generator).to(device)
    seen: dict[str, Any] = {}
    # The other device type's autocast flag is set on too (no op of these tensors reads it): an answer that turns
    # autocast off for a fixed, wrong device type turns that flag off, and the spy sees it.
    other = "cpu" if device.type != "cpu" else "cuda"

    def spy_loss(inp, tgt):
        seen.update(inp=getattr(inp, "dtype", None), tgt=getattr(tgt, "dtype", None),
                    autocast=torch.is_autocast_enabled(device.type),
                    other_off=not torch.is_autocast_enabled(other))
        return nn.functional.cross_entropy(inp, tgt)

    reference = nn.functional.cross_entropy(logits.detach().float(), target)
    try:
        with _autocast(device), _flag_on(other):
            loss = call(task, fn, "loss_in_fp32", spy_loss, logits, target)
    except CheckFailed:
        if seen.get("tgt") is not None and seen["tgt"].is_floating_point:
            raise fail(task, f"you cast the class-index targets to {seen['tgt']} (the seed article's FP32Loss does "
                             "`target.float()`): cross_entropy wants int64 class indices and refuses them. Cast only "
                             "floating-point tensors: `t.float() if t.is_floating_point() else t`.") from None
        if seen.get("tgt") is not None and seen["tgt"] != torch.int64:
            raise fail(task, f"the class-index targets reached the loss as {seen['tgt']}: cross_entropy refuses "
                             "them. Leave integer targets as they are (int64).") from None
        raise
    if not seen:
        raise fail(task, "loss_fn was never called: return `loss_fn(...)` computed in FP32.")
    if seen["tgt"] != torch.int64:
        raise fail(task, f"the targets reached the loss as {seen['tgt']}, not int64: leave integer targets alone.")
    if seen["inp"] != torch.float32:
        raise fail(task, f"the logits reached the loss as {seen['inp']}: cast them with `.float()`.")
    if seen["autocast"] and seen["other_off"]:
        raise fail(task, f"you opened an autocast context around the loss, but for another device type: autocast "
                         f"stayed on for these {device.type} tensors. Turn it off for the device of the tensors, "
                         "`torch.autocast(device_type=logits.device.type, enabled=False)`, not a fixed \"cuda\" or "
                         "\"cpu\" (the logits' `.float()` you may keep).")
    if seen["autocast"]:
        raise fail(task, f"autocast was still on inside the loss (on a {device.type} tensor): `.float()` alone "
                         "does not take the loss out of autocast — a custom loss's matmuls would run in float16 "
                         "again. Wrap the call in `torch.autocast(device_type=logits.device.type, enabled=False)`, "
                         "with the device type of the tensors (not a fixed \"cuda\" or \"cpu\").")
    if not isinstance(loss, torch.Tensor) or loss.dtype != torch.float32:
        raise fail(task, f"return the loss as a float32 tensor (got {getattr(loss, 'dtype', type(loss).__name__)}): "
                         "no `.item()`, no cast back to 16 bits.")
    if not loss.requires_grad:
        raise fail(task, "the loss you returned has no gradient path to the logits (`.detach()`, "
                         "`torch.no_grad()` or a new tensor made from its value): backward could not train the "
                         "model. Return the loss as `loss_fn` computed it.")
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
        if seen.get("tgt") in (torch.int64, torch.int32):
            raise fail(task, f"with soft targets (float16 class probabilities) you turned them into {seen['tgt']}: "
                             "only class indices are integers. Cast a floating-point target with `.float()`, leave "
                             "an integer one alone.") from None
        raise
    if seen.get("tgt") != torch.float32:
        raise fail(task, f"soft targets (float16 class probabilities) reached the loss as {seen.get('tgt')}: cast a "
                         "floating-point target to float32 too, `target.float() if target.is_floating_point()`.")
    soft_reference = nn.functional.cross_entropy(logits.detach().float(), soft.float())
    if not torch.allclose(soft_loss.detach().float(), soft_reference, rtol=1e-6, atol=1e-6):
        raise fail(task, f"with soft targets the loss is {float(soft_loss.detach()):.6g}, the FP32 reference "
                         f"{float(soft_reference):.6g}.")
    return device.type


def loss_in_fp32(fn) -> None:
    """Task 3: ``loss_in_fp32(loss_fn, logits, target)`` computes the loss in FP32, class indices kept int64.

    Runs on the course device and, when that is not the CPU, on the CPU too: an answer that turns off autocast
    for a fixed device type fails on one of them."""
    task = "Task 3 (loss_in_fp32)"
    require_callable(task, fn, "loss_in_fp32")
    generator = torch.Generator().manual_seed(13)
    devices = [pick_device()] + ([torch.device("cpu")] if pick_device().type != "cpu" else [])
    ran = [_loss_case(task, fn, device, generator) for device in devices]
    passed(task, f"logits float32, class indices kept int64 and soft targets cast to float32, autocast off inside "
                 f"({' and '.join(ran)}); both losses float32 with a gradient path, equal to the FP32 reference.")

# --- Task 4: triage from a run's log ---------------------------------------------------------------------------------

INF, NAN = float("inf"), float("nan")
SCALE_VERDICTS = {"collapsing": "backward overflow", "unstable": "unstable", "healthy": "healthy"}
VERDICTS = ("healthy", "unstable", "forward overflow", "backward overflow")


def expected_verdict(initial_scale: float, scales: list[float], losses: list[float]) -> str:
    """The rule of Task 4: a non-finite loss is a forward overflow; with finite losses, lesson 07's
    ``diagnose_scale`` reads ``[initial_scale, *scales]`` and ``SCALE_VERDICTS`` maps its status."""
    if not all(math.isfinite(loss) for loss in losses):
        return "forward overflow"
    return SCALE_VERDICTS[diagnose_scale([initial_scale, *scales]).status]


TRIAGE_CASES = [  # (what, initial scale, scales after each update, losses, the verdict the case is meant to have)
    ("a clean run", 1024.0, [1024.0, 1024.0, 2048.0, 2048.0], [0.9, 0.8, 0.8, 0.7], "healthy"),
    ("a run with one skip in 20 steps", 65536.0, [65536.0] * 9 + [32768.0] * 11,
     [2.0 - 0.05 * i for i in range(20)], "healthy"),
    ("a start that backs off from a too-large scale (first 5 steps skipped), then trains", 2.0**24,
     [2.0**23, 2.0**22, 2.0**21, 2.0**20, 2.0**19] + [2.0**19] * 7, [2.2] * 5 + [2.1, 2.0, 1.9, 1.9, 1.8, 1.7, 1.6],
     "healthy"),
    ("a run whose loss turns inf (and then NaN)", 65536.0, [32768.0, 16384.0, 8192.0, 4096.0, 2048.0, 1024.0],
     [2.3, INF, INF, NAN, INF, INF], "forward overflow"),
    ("a run whose loss turns inf and stays inf (no NaN)", 1024.0, [1024.0, 512.0, 256.0, 128.0, 64.0],
     [1.5, 1.4, INF, INF, INF], "forward overflow"),
    ("one step with a NaN loss, then recovery (the lone non-finite loss)", 1024.0,
     [1024.0, 512.0, 512.0, 512.0, 512.0, 512.0], [1.2, NAN, 1.1, 1.0, 1.0, 0.9], "forward overflow"),
    ("a finite loss but every step skipped", 65536.0, [32768.0 / 2**i for i in range(10)],
     [2.3] * 10, "backward overflow"),
    ("a finite loss, every step skipped, the scale already below 1", 1.0, [0.5 / 2**i for i in range(10)],
     [2.3] * 10, "backward overflow"),
    ("a run that trains 20 steps, then skips each of the last 10 (a collapse mid-run)", 65536.0,
     [65536.0] * 20 + [65536.0 / 2**i for i in range(1, 11)], [1.0] * 30, "backward overflow"),
    (f"a run whose last {COLLAPSE_WINDOW} steps (exactly COLLAPSE_WINDOW) are all skipped", 4096.0,
     [4096.0] * 12 + [4096.0 / 2**i for i in range(1, COLLAPSE_WINDOW + 1)], [1.0] * (12 + COLLAPSE_WINDOW),
     "backward overflow"),
    ("a run that skips every 4th step", 65536.0, [65536.0 / 2 ** ((i + 1) // 4) for i in range(40)], [1.0] * 40,
     "unstable"),
    (f"a run that trains 20 steps, then skips the last {COLLAPSE_WINDOW - 1} (one short of COLLAPSE_WINDOW)",
     4096.0, [4096.0] * 20 + [4096.0 / 2**i for i in range(1, COLLAPSE_WINDOW)], [1.0] * (19 + COLLAPSE_WINDOW),
     "unstable"),
    ("a run with two skips in 20 steps (10%, not more)", 65536.0, [65536.0] * 5 + [32768.0] * 5 + [16384.0] * 10,
     [1.0] * 20, "healthy"),
    ("a clean run whose scale never changes", 4096.0, [4096.0] * 5, [0.9, 0.8, 0.8, 0.7, 0.7], "healthy"),
    ("a clean run growing at every step (growth_interval=1)", 8.0, [16.0, 32.0, 64.0, 128.0, 256.0],
     [0.9, 0.8, 0.8, 0.7, 0.7], "healthy"),
    # float32 (GradScaler's scale) halves 65536 = 2**16 down to 2**-149 in 165 steps; the next halving rounds to 0
    ("a finite loss, every step skipped until the scale underflows to 0 and stays 0", 65536.0,
     [65536.0 / 2**i for i in range(1, 166)] + [0.0] * 35, [2.3] * 200, "backward overflow"),
]


def _says(task: str, fn, initial: float, scales: list[float], losses: list[float]) -> Any:
    return call(task, fn, "triage", initial, list(scales), list(losses))


def _reads_without_initial(task: str, fn) -> bool:
    """Whether the answer gives, on every case, the verdict of diagnose_scale on ``scales`` without
    ``initial_scale`` (and that verdict differs from the rule's on some case)."""
    differs = False
    # and a probe: the first COLLAPSE_WINDOW steps all skipped, a collapse only when the first skip is counted
    probe = ("", 4096.0, [4096.0 / 2**i for i in range(1, COLLAPSE_WINDOW + 1)], [1.0] * COLLAPSE_WINDOW, "")
    for _what, initial, scales, losses, _meant in [*TRIAGE_CASES, probe]:
        if not all(math.isfinite(loss) for loss in losses):
            alt = "forward overflow"
        else:
            alt = SCALE_VERDICTS[diagnose_scale(scales).status]
        differs = differs or alt != expected_verdict(initial, scales, losses)
        try:
            if _says(task, fn, initial, scales, losses) != alt:
                return False
        except CheckFailed:
            return False
    return differs


def _flagged(verdict: Any) -> bool:
    return verdict in ("backward overflow", "unstable")


def _triage_mistake(task: str, fn, context: str, what: str, case: tuple, got: Any, want: str) -> CheckFailed:
    """Name the rule behind a wrong verdict, probing the answer with small logs of one kind each."""
    initial, scales, losses = case
    steady, clean = [1024.0] * 10, [0.9] * 10
    diagnosis = diagnose_scale([initial, *scales])
    after = diagnosis.steps - diagnosis.warmup_skips
    skipped_after = diagnosis.n_skipped - diagnosis.warmup_skips
    rule = (f"diagnose_scale's rule: collapsing when the last COLLAPSE_WINDOW ({COLLAPSE_WINDOW}) steps or more "
            f"were all skipped; unstable when more than MAX_SKIP_FRACTION ({MAX_SKIP_FRACTION:.0%}) of the steps "
            "from the first applied one on were skipped")
    if want == "forward overflow":
        sees_inf = _says(task, fn, 1024.0, steady, [0.9, INF, INF, INF] + [INF] * 6) == "forward overflow"
        sees_nan = _says(task, fn, 1024.0, steady, [0.9, NAN, NAN, NAN] + [NAN] * 6) == "forward overflow"
        all_bad = _says(task, fn, 1024.0, steady, [INF] * 5 + [NAN] * 5) == "forward overflow"
        if not sees_inf and not sees_nan:
            if all_bad:
                return fail(task, f"{context}: you only call it a forward overflow when every loss is inf or NaN. "
                                  "One non-finite loss is enough: that step's forward pass overflowed (no scale is "
                                  "involved there). Test `all(math.isfinite(loss) for loss in losses)`.")
            return fail(task, f"{context}: the loss itself is inf or NaN, so the overflow happened in the forward "
                              "pass (no loss scale is involved there). Look at the losses before the scales.")
        if not sees_inf:
            return fail(task, f"{context}: an inf loss is a forward overflow too. `x != x` and `math.isnan` miss "
                              "inf: test `math.isfinite(loss)`.")
        if not sees_nan:
            return fail(task, f"{context}: a NaN loss is non-finite too. `math.isinf` misses NaN: test "
                              "`math.isfinite(loss)`.")
        if "lone" in what:
            return fail(task, f"{context}: a single inf or NaN loss already means the forward pass overflowed at "
                              "that step, even though the run recovered. The loss is computed before any scaling, "
                              "so no scale caused it (lesson 04's healthy skips have finite losses: the inf there "
                              "is in the scaled gradients). Test every loss with `math.isfinite`, not only the last.")
        return fail(task, f"{context}: the loss itself is inf or NaN, so the overflow happened in the forward pass "
                          "(no loss scale is involved there). Test every loss before the scales.")
    if got == "forward overflow":
        return fail(task, f"{context}: every loss is finite, so the forward pass did not overflow; a forward "
                          "overflow shows as an inf or NaN loss. Read the scales for the rest.")
    if want == "healthy":
        if _flagged(_says(task, fn, 1024.0, steady, clean)):
            return fail(task, f"{context}: a scale that stays the same was not lowered, so no step was skipped. A "
                              "skip is a scale *below* the one before (`after < before`), not `<=`.")
        if _flagged(_says(task, fn, 2.0, [2.0 ** (2 + i) for i in range(10)], clean)):
            return fail(task, f"{context}: a scale that doubles is growth after clean steps, not a skip. Only a "
                              "scale *below* the one before marks a skipped step.")
        if "backs off" in what:
            return fail(task, f"{context}: the first steps were skipped while the scale backed off from a too-large "
                              "start (lesson 04's real run does the same), then every step was taken. Count skips "
                              f"from the first applied step on, as diagnose_scale does ({rule}).")
        if got == "unstable" and skipped_after <= MAX_SKIP_FRACTION * after:
            return fail(task, f"{context}: {skipped_after} of the {after} steps were skipped, "
                              f"{skipped_after / after:.0%}: unstable means *more than* MAX_SKIP_FRACTION "
                              f"({MAX_SKIP_FRACTION:.0%}), so this is healthy (`>`, not `>=`).")
        return fail(task, f"{context}: a few skipped steps are the scaler doing its job — it probes a higher scale "
                          "and backs off. Only a non-finite loss, or what diagnose_scale flags, is a problem "
                          f"({rule}).")
    if want == "unstable":
        if got == "backward overflow":
            return fail(task, f"{context}: only the last {diagnosis.trailing_skips} steps were skipped, fewer than "
                              f"COLLAPSE_WINDOW ({COLLAPSE_WINDOW}), so the run is not frozen (yet), but "
                              f"{skipped_after} of its {after} steps were skipped: unstable ({rule}).")
        return fail(task, f"{context}: {skipped_after} of the {after} steps from the first applied one on were "
                          f"skipped, more than MAX_SKIP_FRACTION ({MAX_SKIP_FRACTION:.0%}): overflows keep coming "
                          "back, and lesson 07's diagnose_scale calls that unstable. Return 'unstable'.")
    if scales[-1] == 0:
        zeros = len(scales) - scales.index(0.0)
        return fail(task, f"{context}: the loss is finite and every step was skipped; the scale halved until it "
                          f"underflowed float32 to 0, and stayed 0 for the last {zeros} steps. 0 → 0 is not a scale "
                          "*below* the one before, yet no step at scale 0 was applied either: diagnose_scale counts a "
                          "step that starts at 0 as skipped, and a scale of 0 is a collapse. Test `before == 0` as a "
                          "skip too (or use diagnose_scale).")
    if diagnosis.trailing_skips == COLLAPSE_WINDOW:
        one_more = [*scales, scales[-1] / 2]
        if _says(task, fn, initial, one_more, [*losses, losses[-1]]) == "backward overflow":
            return fail(task, f"{context}: the last {COLLAPSE_WINDOW} steps, exactly COLLAPSE_WINDOW, were all "
                              f"skipped. You call it a collapse from {COLLAPSE_WINDOW + 1} on: the test is "
                              "`trailing_skips >= COLLAPSE_WINDOW`, not `>` (the last COLLAPSE_WINDOW steps or more "
                              "are all skipped).")
    below = " (even below 1)" if scales[-1] < 1 else ""
    return fail(task, f"{context}: the loss is finite, yet each of the last {diagnosis.trailing_skips} steps was "
                      f"skipped while the scale kept halving{below}: from there on the model is frozen, and the inf "
                      "appears in the backward pass whatever the scale. It is a collapse when the last "
                      f"COLLAPSE_WINDOW ({COLLAPSE_WINDOW}) steps or more are all skipped, not only when every step "
                      "of the run is.")


def triage(fn) -> None:
    """Task 4: ``triage(initial_scale, scales, losses)`` reads a run's log and says where the trouble is."""
    task = "Task 4 (triage)"
    require_callable(task, fn, "triage")
    for what, initial, scales, losses, _meant in TRIAGE_CASES:
        want = expected_verdict(initial, scales, losses)
        got = call(task, fn, "triage", initial, list(scales), list(losses))
        if got not in VERDICTS:
            raise fail(task, f"return one of {', '.join(map(repr, VERDICTS))} (you returned {got!r}).")
        if got == want:
            continue
        context = f"for {what} you said {got!r}, it is {want!r}"
        if _reads_without_initial(task, fn):
            raise fail(task, f"{context}: your verdicts are diagnose_scale's on `scales` alone, without the scale "
                             "before the first step. The first step's skip is `scales[0] < initial_scale`: prepend "
                             "it, `diagnose_scale([initial_scale, *scales])`.")
        raise _triage_mistake(task, fn, context, what, (initial, scales, losses), got, want)
    passed(task, f"{len(TRIAGE_CASES)} run logs triaged as lesson 07's diagnose_scale reads them: occasional skips "
                 "(and a start that backs off) are healthy, more than MAX_SKIP_FRACTION unstable, one non-finite "
                 "loss is already a forward overflow, a finite loss with the last COLLAPSE_WINDOW steps skipped a "
                 "backward one.")


# --- tiered hints: shown one tier per failed check, or on request with `check.hint(task)` ---

HINTS = {  # each third tier is the body of the task's function, run by tests/test_checks_lesson07.py
    'first_nonfinite_module': [
        ("A forward hook runs after each module's forward, in execution order. Lesson 07's hook table does"
         ' exactly this for every module, the model itself included.'),
        ('Register one hook per module (model.modules()), record the name of each module whose tensor '
         'output is not all finite, and remove every handle in a `finally` block. The model itself is '
         "named '' (an empty string, not None)."),
        ('names = {m: n for n, m in model.named_modules()}\n'
         'found = []\n'
         'hook = lambda module, inputs, output: (found.append(names[module])\n'
         '                                       if not torch.isfinite(output).all() else None)\n'
         'handles = [m.register_forward_hook(hook) for m in model.modules()]\n'
         'try:\n'
         '    model(x)\n'
         'finally:\n'
         '    for handle in handles:\n'
         '        handle.remove()\n'
         'return found[0] if found else None'),
    ],
    'fp32_block': [
        ('Which module is the first to give inf? Your Task 1 function (or lesson 07\'s find_nonfinite) '
         'tells you; which top-level block holds it, and where are its values back in range?'),
        ('Wrap that whole block (it ends with a LayerNorm) in an island: autocast disabled for the device '
         'type of its input *and* a float32 input. Leave every other block alone, also one whose values come '
         'close to 65504.'),
        ('name = first_nonfinite_module(model, x).split(".")[0]; setattr(model, name, '
         'FP32Island(getattr(model, name))); return model'),
    ],
    'loss_in_fp32': [
        'What dtypes may a cross-entropy target have? Lesson 07 names both legal forms.',
        ('Cast the logits up, switch autocast off for the call, and cast the target only when it is '
         'floating point (soft targets become float32 too); class indices must stay int64.'),
        ('with torch.autocast(device_type=logits.device.type, enabled=False): target = target.float() if '
         'target.is_floating_point() else target; return loss_fn(logits.float(), target)'),
    ],
    'triage': [
        'Which number in the log is computed before any loss scaling happens? Start there.',
        ('A non-finite loss — even a single one — means the forward pass overflowed. With finite losses, the '
         'scales tell the rest, read as lesson 07\'s diagnose_scale reads them (the scale before the first '
         'step comes first).'),
        ("if not all(math.isfinite(loss) for loss in losses): return 'forward overflow'\n"
         'status = diagnose_scale([initial_scale, *scales]).status\n'
         "return {'collapsing': 'backward overflow', 'unstable': 'unstable', 'healthy': 'healthy'}[status]"),
    ],
}
hint = hints(__name__, HINTS)
