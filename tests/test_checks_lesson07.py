"""Exercise 07: the checks pass right answers and name each typical wrong one (the fixtures)."""

import copy
import math

import grader_fixtures
import pytest
import torch

from ampcourse.checks import CheckFailed, NotStarted, lesson07
from ampcourse.device import pick_device
from ampcourse.troubleshoot import (
    COLLAPSE_WINDOW,
    MAX_SKIP_FRACTION,
    FP32Island,
    diagnose_scale,
    find_nonfinite,
    fp32_loss,
)

# --- Task 1 ------------------------------------------------------------------------------------------------------


def finder(check="isfinite", where="output", keep="first", remove="finally", modules="all", order="execution",
           give="name"):
    """first_nonfinite_module with one mistake switched on."""
    def first_nonfinite_module(model, x):
        found = []

        def hook(module, args, output):
            tensor = output if where == "output" else args[0]
            if check == "isfinite":
                bad = not torch.isfinite(tensor).all()
            elif check == "isinf":
                bad = bool(torch.isinf(tensor).any())
            else:
                bad = bool(torch.isnan(tensor).any())
            if bad:
                found.append(names[module])

        names = {module: name for name, module in model.named_modules()}
        if modules == "children":  # review 07: named_children() only
            chosen = [m for _, m in model.named_children()]
        elif modules == "no root":  # review 07: `if name` skips the model itself
            chosen = [m for name, m in model.named_modules() if name]
        else:
            chosen = [m for m in model.modules() if modules == "all" or not list(m.children())]
        handles = [m.register_forward_hook(hook) for m in chosen]
        if remove == "finally":
            try:
                model(x)
            finally:
                for handle in handles:
                    handle.remove()
        else:
            model(x)
            if remove == "after":
                for handle in handles:
                    handle.remove()
            elif remove == "clear":
                for m in model.modules():
                    m._forward_hooks.clear()
        if not found:
            return None
        if keep == "first or None":  # the old tier-3 hint: '' (the model itself) or None is None
            return found[0] or None
        if order == "named_modules":
            found = [name for name, _ in model.named_modules() if name in found]
        name = found[0] if keep == "first" else found[-1]
        return type(dict(model.named_modules())[name]).__name__ if give == "class" else name
    return first_nonfinite_module


def finder_global_hook(model, x):
    """Right, written otherwise: one global hook, removed by a context manager."""
    import contextlib

    from torch.nn.modules.module import register_module_forward_hook

    names = {module: name for name, module in model.named_modules()}
    found = []

    def hook(module, args, output):
        if module in names and isinstance(output, torch.Tensor) and not found and \
                (output.isnan().any() or output.isinf().any()):
            found.append(names[module])

    with contextlib.ExitStack() as stack:
        stack.callback(register_module_forward_hook(hook).remove)
        model(x)
    return found[0] if found else None


class _Found(Exception):
    pass


def finder_abort(model, x):
    """Right, written otherwise (review 07): stops the forward at the first non-finite output; validates."""
    if not isinstance(model, torch.nn.Module):
        raise TypeError("model must be an nn.Module")
    names = {id(m): n for n, m in model.named_modules()}

    def hook(module, inputs, output):
        if isinstance(output, torch.Tensor) and not torch.isfinite(output).all():
            raise _Found(names[id(module)])

    handles = [m.register_forward_hook(hook) for m in model.modules()]
    try:
        model(x)
    except _Found as found:
        return found.args[0]
    finally:
        for handle in handles:
            handle.remove()
    return None


def finder_find_nonfinite(model, x):
    """Right: the course's own tool."""
    first = find_nonfinite(model, x).first
    return None if first is None else first.name


# --- Task 2 ------------------------------------------------------------------------------------------------------

class HandIsland(torch.nn.Module):
    def __init__(self, module, disable=True, cast=True, back_to_half=False, device=None):
        super().__init__()
        self.module, self.disable, self.cast, self.back, self.device = module, disable, cast, back_to_half, device

    def forward(self, x):
        with torch.autocast(device_type=self.device or x.device.type, enabled=not self.disable):
            out = self.module(x.float() if self.cast else x)
        return out.half() if self.back else out


def _first_bad(model, x):
    with torch.no_grad():
        return find_nonfinite(model, x).first.name


def fixer(pick="first block", island=FP32Island, inplace=True):
    """fp32_block with one mistake switched on (``pick``: which module goes into the island)."""
    def fp32_block(model, x):
        if not inplace:
            model = copy.deepcopy(model)
        name = _first_bad(model, x)
        top = name.split(".")[0]
        if pick == "first block":
            target = top
        elif pick == "leaf":  # wrap exactly the module the hooks name
            parent, _, leaf = name.rpartition(".")
            holder = model.get_submodule(parent) if parent else model
            setattr(holder, leaf, island(getattr(holder, leaf)))
            return model
        elif pick == "input":  # the first block that *receives* a non-finite input
            with torch.no_grad():
                report = find_nonfinite(model, x)
            target = next(r.name for r in report.records if not r.input_finite and "." not in r.name)
        elif pick == "second":
            target = list(dict(model.named_children()))[1]
        elif pick == "whole":
            return island(model)
        elif pick == "threshold":  # every block with an activation above 1e4
            with torch.no_grad():
                report = find_nonfinite(model, x)
            for top_name in {r.name.split(".")[0] for r in report.records if r.name and r.max_abs > 1e4}:
                setattr(model, top_name, island(getattr(model, top_name)))
            return model
        elif pick == "weights":
            getattr(model, top).float()
            return model
        elif pick == "nothing returned":
            setattr(model, top, island(getattr(model, top)))
            return None
        setattr(model, target, island(getattr(model, target)))
        return model
    return fp32_block


def fixer_by_hand(model, x):
    """Right, written otherwise: own hooks, own island, on a copy, the output cast back to half after the norm."""
    model = copy.deepcopy(model)
    names = {m: n for n, m in model.named_modules()}
    found = []
    handles = [m.register_forward_hook(lambda m, a, o: found.append(names[m]) if not torch.isfinite(o).all()
                                       else None) for m in model.modules()]
    try:
        with torch.no_grad():
            model(x)
    finally:
        for h in handles:
            h.remove()
    top = found[0].split(".")[0]
    model._modules[top] = HandIsland(model._modules[top], back_to_half=True)
    return model


def fixer_index(model, x):
    """Right: the position in the Sequential, from the course's tool."""
    name = _first_bad(model, x).split(".")[0]
    position = list(dict(model.named_children())).index(name)
    model[position] = HandIsland(model[position])
    return model


# --- Task 3 ------------------------------------------------------------------------------------------------------

def loss_wrapper(cast_target="if float", cast_logits=True, disable=True, device=None, give="loss"):
    def loss_in_fp32(loss_fn, logits, target):
        if cast_target is True:
            target = target.float()
        elif cast_target == "long":
            target = target.long()
        elif cast_target == "int":
            target = target.int() if not target.is_floating_point() else target.float()
        elif cast_target == "if float" and target.is_floating_point():
            target = target.float()
        with torch.autocast(device_type=device or logits.device.type, enabled=not disable):
            loss = loss_fn(logits.float() if cast_logits else logits, target)
        if give == "half":
            return loss.half()
        if give == "detached":
            return loss.detach()
        if give == "item":
            return loss.item()
        return loss
    return loss_in_fp32


def loss_tree_map(loss_fn, logits, target):
    """Right, written otherwise: cast every floating tensor with a tree map, torch.amp spelling."""
    from torch.utils._pytree import tree_map

    def up(t):
        return t.to(torch.float32) if isinstance(t, torch.Tensor) and t.dtype.is_floating_point else t

    with torch.amp.autocast(logits.device.type, enabled=False):
        return loss_fn(*tree_map(up, (logits, target)))


# --- Task 4 ------------------------------------------------------------------------------------------------------

class _HonestVerdict(str):
    """A right answer's own str subclass (review rev25-r6 M1: judged by its content)."""


def triage_right(initial, scales, losses):
    """Right: the losses, then lesson 07's diagnose_scale (the exercise's solution)."""
    if not all(math.isfinite(x) for x in losses):
        return "forward overflow"
    status = diagnose_scale([initial, *scales]).status
    return {"collapsing": "backward overflow", "unstable": "unstable", "healthy": "healthy"}[status]


def triage_with(loss_test=math.isfinite, skip=lambda after, before: after < before, losses_seen="all",
                frozen="window", window=COLLAPSE_WINDOW, unstable="from first applied", over=lambda a, b: a > b,
                zero_skips=True):
    """diagnose_scale's rule written by hand (tensors nowhere), with one mistake switched on."""
    def triage(initial, scales, losses):
        checked = losses if losses_seen == "all" else [] if losses_seen == "none" else losses[-1:]
        if losses_seen == "every" and all(not loss_test(v) for v in losses):
            return "forward overflow"
        if losses_seen != "every" and not all(loss_test(v) for v in checked):
            return "forward overflow"
        before = [initial, *scales[:-1]]
        skipped = [skip(a, b) or zero_skips and b == 0 for b, a in zip(before, scales, strict=True)]
        trailing = next((i for i, s in enumerate(reversed(skipped)) if not s), len(skipped))
        if frozen == "window" and trailing >= window or frozen == "all" and all(skipped) or \
                frozen == "any" and any(skipped) or frozen == "final" and scales[-1] < initial or \
                frozen == "run of 3" and any(all(skipped[i:i + 3]) for i in range(len(skipped) - 2)):
            return "backward overflow"
        warmup = next((i for i, s in enumerate(skipped) if not s), len(skipped))
        counted = skipped[warmup:] if unstable == "from first applied" else skipped
        if unstable != "never" and counted and over(sum(counted) / len(counted), MAX_SKIP_FRACTION):
            return "unstable"
        return "healthy"
    return triage


def triage_by_hand(initial, scales, losses):
    """Right, written otherwise: tensors, the rule of diagnose_scale's docstring and its constants."""
    if not bool(torch.isfinite(torch.tensor(losses, dtype=torch.float64)).all()):
        return "forward overflow"
    s = torch.tensor([initial, *scales], dtype=torch.float64)
    skipped = ((s[1:] < s[:-1]) | (s[:-1] == 0)).tolist()  # at scale 0 no step is applied
    if len(skipped) >= COLLAPSE_WINDOW and all(skipped[-COLLAPSE_WINDOW:]):
        return "backward overflow"
    applied = [i for i, skip in enumerate(skipped) if not skip]
    rest = skipped[applied[0]:] if applied else []
    return "unstable" if rest and sum(rest) > MAX_SKIP_FRACTION * len(rest) else "healthy"


def triage_scales_only(initial, scales, losses):
    before = [initial, *scales[:-1]]
    return "forward overflow" if all(a < b for b, a in zip(before, scales, strict=True)) else "healthy"


def triage_three_verdicts(initial, scales, losses):
    """The exercise's old rule (review 07): backward overflow only when *every* step is skipped."""
    if not all(math.isfinite(x) for x in losses):
        return "forward overflow"
    before = [initial, *scales[:-1]]
    return "backward overflow" if all(a < b for b, a in zip(before, scales, strict=True)) else "healthy"


def triage_all_nan(initial, scales, losses):
    """Review 07's w4_all_nan: a forward overflow only when every loss is non-finite."""
    if all(not math.isfinite(x) for x in losses):
        return "forward overflow"
    return triage_right(initial, scales, [1.0] * len(losses))


WRONG = {
    ("07", "first_nonfinite_module"): {
        "returns the last instead of the first": (finder(keep="last"), "the last module whose output was non-finite"),
        "leaves hooks registered": (finder(remove="never"), "hooks are still registered after the function returned"),
        "removes hooks without try/finally": (finder(remove="after"), "after a forward pass that raised"),
        "clears every hook, also the user's": (finder(remove="clear"), "you removed hooks you did not register"),
        "only checks for inf": (finder(check="isinf"), "only checked for inf, not NaN"),
        "only checks for NaN": (finder(check="isnan"), "you only looked for NaN"),
        "checks inputs instead of outputs": (finder(where="input"), "checked the inputs instead of the outputs"),
        "hooks only the leaf modules": (finder(modules="leaves"), "you hooked only the leaf modules"),
        "first in named_modules order": (finder(order="named_modules"), "named_modules()"),
        "returns the class name": (finder(give="class"), "the module's class"),
        "always a name, never None": (lambda model, x: finder()(model, x) or "",
                                      "return None when no module produced inf or NaN"),
        "hooks only named_children() (review 07)": (finder(modules="children"),
                                                    "hook every module, not only the children"),
        "skips the model itself, `if name` (review 07)": (finder(modules="no root"),
                                                          "you did not hook the model itself"),
        "found[0] or None, the old tier-3 hint (review 07)": (finder(keep="first or None"),
                                                              "'' (an empty string, which is not none)"),
    },
    ("07", "fp32_block"): {
        "only .float(), autocast left on": (fixer(island=lambda m: HandIsland(m, disable=False)),
                                            "autocast was still on"),
        "only autocast off, input not cast": (fixer(island=lambda m: HandIsland(m, cast=False)),
                                              "its input stayed float16"),
        "wraps the first block with a non-finite input": (fixer(pick="input"), "only inherits its NaN"),
        "hard-codes the second block": (fixer(pick="second"), "was finite in float16"),
        "wraps only the module the hooks name": (fixer(pick="leaf"), "your island ends too early"),
        "wraps the whole model": (fixer(pick="whole"), "you put the whole model in an island"),
        "wraps every block above 1e4": (fixer(pick="threshold"), "close to 65504, yet fits float16"),
        "block.float() instead of an island": (fixer(pick="weights"), "changes nothing"),
        "forgets to return the model": (fixer(pick="nothing returned"), "you returned None"),
        "autocast off for a fixed other device (review 07)": (
            fixer(island=lambda m: HandIsland(m, device="cuda" if pick_device().type == "cpu" else "cpu")),
            "not a fixed"),
    },
    ("07", "loss_in_fp32"): {
        "casts the class-index targets (the seed's wrapper)": (loss_wrapper(cast_target=True),
                                                              "cast the class-index targets"),
        "logits not cast": (loss_wrapper(cast_logits=False), "logits reached the loss as torch.float16"),
        "autocast left on": (loss_wrapper(disable=False), "autocast was still on inside the loss"),
        "autocast off for a fixed other device": (loss_wrapper(device="cuda" if pick_device().type == "cpu"
                                                               else "cpu"), "not a fixed"),
        "soft targets left in float16, only the logits cast (review 07's w3_logits_only)": (
            loss_wrapper(cast_target="never"), "soft targets (float16 class probabilities) reached the loss as "
                                               "torch.float16"),
        "every target made long": (loss_wrapper(cast_target="long"), "you turned them into torch.int64"),
        "class indices made int32": (loss_wrapper(cast_target="int"), "reached the loss as torch.int32"),
        "loss cast back to float16": (loss_wrapper(give="half"), "return the loss as a float32 tensor"),
        "loss detached": (loss_wrapper(give="detached"), "no gradient path"),
        "a Python float (.item())": (loss_wrapper(give="item"), "no `.item()`"),
        # re-review: torch.autocast("cuda", enabled=False) on CPU tensors (the other way round on a GPU)
        "autocast off, positional fixed wrong device": (
            loss_wrapper(device="cuda" if pick_device().type == "cpu" else "cpu"), "but for another device type"),
    },
    ("07", "triage"): {
        "any skip is a problem": (triage_with(frozen="any"), "the scaler doing its job"),
        "scales only, losses ignored": (triage_scales_only, "look at the losses before the scales"),
        "bad label": (lambda i, s, losses: "overflow", "return one of"),
        "NaN only (x != x)": (triage_with(loss_test=lambda v: v == v), "`math.isnan` miss inf"),
        "inf only": (triage_with(loss_test=lambda v: not math.isinf(v)), "`math.isinf` misses NaN"),
        "only the last loss (a lone NaN read as healthy)": (triage_with(losses_seen="last"),
                                                           "a single inf or nan loss already means"),
        "forward only when every loss is non-finite (review 07's w4_all_nan)": (triage_all_nan,
                                                                                "one non-finite loss is enough"),
        "every loss non-finite, hand-written rule": (triage_with(losses_seen="every"),
                                                     "one non-finite loss is enough"),
        "<= counts as a skip": (triage_with(skip=lambda after, before: after <= before), "not `<=`"),
        "!= counts as a skip": (triage_with(skip=lambda after, before: after != before), "growth after clean steps"),
        "final scale below the start": (triage_with(frozen="final"), "the scaler doing its job"),
        "three skips in a row": (triage_with(frozen="run of 3"), "backed off from a too-large start"),
        "backward only when every step is skipped (the old rule; review 07's mid-run collapse)": (
            triage_three_verdicts, "not only when every step of the run is"),
        "every step skipped, and unstable": (triage_with(frozen="all"), "not only when every step of the run is"),
        "window off by one (> instead of >=)": (triage_with(window=COLLAPSE_WINDOW + 1),
                                                "`trailing_skips >= collapse_window`, not `>`"),
        # re-review: `t > 8` with the rest right (t07c's tr_w_ge)
        "trailing skips > COLLAPSE_WINDOW, by hand": (triage_with(window=COLLAPSE_WINDOW + 1, over=lambda a, b: a >= b),
                                                      "not `>`"),
        # re-review: a scale of 0 that stays 0 (float32 underflow) is no skip under `after < before` alone
        "0 -> 0 not counted as a skip": (triage_with(zero_skips=False), "test `before == 0` as a skip"),
        # re-review: diagnose_scale(list(scales)), initial_scale dropped (t07c's tr_w_noinitial)
        "initial_scale not prepended": (
            lambda i, s, losses: triage_right(s[0], s[1:], losses[1:]) if all(math.isfinite(x) for x in losses)
            else "forward overflow", "prepend it"),
        "window too short": (triage_with(window=COLLAPSE_WINDOW - 1), "fewer than collapse_window"),
        "no 'unstable' verdict (review 07's every-4th-step run)": (triage_with(unstable="never"),
                                                                   "diagnose_scale calls that unstable"),
        "warm-up skips counted in the fraction": (triage_with(unstable="all steps"),
                                                  "count skips from the first applied step on"),
        ">= MAX_SKIP_FRACTION is unstable": (triage_with(over=lambda a, b: a >= b), "(`>`, not `>=`)"),
        "a finite run called a forward overflow": (lambda i, s, losses: "forward overflow",
                                                   "every loss is finite"),
        "an always-equal verdict behind a metaclass __mro__ property (review rev25-r6 E2)": (
            lambda i, s, losses: grader_fixtures.VerdictPosingAsStr("healthy"),
            "an object of type `VerdictPosingAsStr`, whose class defines `__eq__`, `__ne__`, `__class__`"),
    },
}

def finder_log_thread(model, x):
    """Right (review rev25-r4 E5): a log line printed from a worker thread, joined before the forward."""
    import threading

    log = threading.Thread(target=lambda: print(f"checking {type(model).__name__}"))
    log.start()
    log.join()
    return finder()(model, x)


RIGHT = {
    ("07", "first_nonfinite_module"): {
        "hooks on every module, try/finally": finder(),
        "one global hook, ExitStack": finder_global_hook,
        "stops the forward at the first inf, validates (review 07's r1_abort)": finder_abort,
        "the course's find_nonfinite": finder_find_nonfinite,
        "a log line from a thread it joins (review rev25-r4 E5)": finder_log_thread,
    },
    ("07", "fp32_block"): {
        "FP32Island on the first block, in place": fixer(),
        "FP32Island on a copy": fixer(inplace=False),
        "own hooks, own island on a copy, output back to half after the norm": fixer_by_hand,
        "by position in the Sequential": fixer_index,
    },
    ("07", "loss_in_fp32"): {
        "autocast off, cast only floating targets": loss_wrapper(),
        "tree map, torch.amp.autocast": loss_tree_map,
        "the course's fp32_loss": lambda loss_fn, logits, target: fp32_loss(loss_fn)(logits, target),
    },
    ("07", "triage"): {
        "losses first, then diagnose_scale": triage_right,
        "the rule by hand with tensors and the constants": triage_by_hand,
        "the rule by hand, the fixture generator with no mistake": triage_with(),
        "a str subclass of its own (review rev25-r6 M1)": (
            lambda i, s, losses: _HonestVerdict(triage_right(i, s, losses))),
    },
}

test_wrong_answer_is_named, test_right_answer_passes = grader_fixtures.tests(WRONG, RIGHT)


def test_the_blocks_pass_or_fit_float16_as_the_check_says():
    device = pick_device()
    for which, peaks in lesson07.BLOCK_PEAKS.items():
        model, x = lesson07._block_model(which, device), lesson07._block_input(device)
        with torch.no_grad(), torch.autocast(device_type=device.type, dtype=torch.float16):
            report = find_nonfinite(model, x)
        assert report.first.name == f"{lesson07._overflowing_block(which)}.up"
        near = lesson07._near_block(which)
        assert all(r.n_inf + r.n_nan == 0 for r in report.records if r.name.startswith(near))
        assert 5e4 < max(r.max_abs for r in report.records if r.name.startswith(near + ".")) < 65504
        assert list(peaks)[:2] != [None, None]


def test_the_container_model_overflows_in_its_own_forward():
    device = pick_device()
    x = torch.randn(4, 6, generator=torch.Generator().manual_seed(3)).to(device)
    with torch.no_grad(), torch.autocast(device_type=device.type, dtype=torch.float16):
        report = find_nonfinite(lesson07._container_model(device), x)
    assert [r.name for r in report.bad][:1] == ["mix"]
    assert all(r.finite for r in report.records if r.name == "mix.proj")


def test_the_raising_model_raises_after_hooks_fired():
    fired = []
    model = lesson07._raising_model(torch.device("cpu"))
    handle = model.a.register_forward_hook(lambda *args: fired.append(1))
    with pytest.raises(lesson07._Boom):
        model(torch.zeros(2, 6))
    handle.remove()
    assert fired == [1]


@pytest.mark.parametrize("answer", [None, "", "head", 3, torch.nn.Linear(1, 1)])
def test_constant_answers_fail_without_a_traceback(answer):
    with pytest.raises(CheckFailed):
        lesson07.first_nonfinite_module(lambda model, x: answer)
    with pytest.raises(CheckFailed):
        lesson07.fp32_block(lambda model, x: answer)
    with pytest.raises(CheckFailed):
        lesson07.loss_in_fp32(lambda loss_fn, logits, target: answer)


def test_not_callable_and_stubs():
    def stub(*args):
        raise NotImplementedError("hint")

    for check in (lesson07.first_nonfinite_module, lesson07.fp32_block, lesson07.loss_in_fp32, lesson07.triage):
        with pytest.raises(NotStarted):
            check(stub)
        with pytest.raises(CheckFailed, match="should be a function"):
            check(42)


def test_triage_cases_mean_what_they_say():
    """Each log has the verdict it was written for, under the rule the check reads (diagnose_scale), and the
    cases cover every verdict and the boundaries of COLLAPSE_WINDOW and MAX_SKIP_FRACTION."""
    for what, initial, scales, losses, meant in lesson07.TRIAGE_CASES:
        assert lesson07.expected_verdict(initial, scales, losses) == meant, what
        assert triage_by_hand(initial, scales, losses) == meant, what
    assert {case[-1] for case in lesson07.TRIAGE_CASES} == set(lesson07.VERDICTS)
    trailing = {diagnose_scale([c[1], *c[2]]).trailing_skips for c in lesson07.TRIAGE_CASES}
    assert {COLLAPSE_WINDOW - 1, COLLAPSE_WINDOW} <= trailing


def test_the_review_logs_agree_with_the_lesson():
    """Review 07: a mid-run collapse and a run that skips every 4th step get the lesson's diagnose_scale verdict."""
    mid = [65536.0] * 20 + [65536.0 / 2**i for i in range(1, 11)]
    assert diagnose_scale([65536.0, *mid]).status == "collapsing"
    assert lesson07.expected_verdict(65536.0, mid, [1.0] * 30) == "backward overflow"
    every_4th = [65536.0 / 2 ** ((i + 1) // 4) for i in range(40)]
    assert diagnose_scale([65536.0, *every_4th]).status == "unstable"
    assert lesson07.expected_verdict(65536.0, every_4th, [1.0] * 40) == "unstable"


def test_the_root_model_overflows_in_its_own_forward():
    device = pick_device()
    x = torch.randn(4, 6, generator=torch.Generator().manual_seed(3)).to(device)
    with torch.no_grad(), torch.autocast(device_type=device.type, dtype=torch.float16):
        report = find_nonfinite(lesson07._root_model(device), x)
    assert [r.name for r in report.bad] == [""]


PARAMETERS = {"first_nonfinite_module": "model, x", "fp32_block": "model, x",
              "loss_in_fp32": "loss_fn, logits, target", "triage": "initial_scale, scales, losses"}


def _from_hint(task, namespace):
    body = lesson07.HINTS[task][-1]
    source = f"def {task}({PARAMETERS[task]}):\n" + "".join(f"    {line}\n" for line in body.splitlines())
    exec(compile(source, f"<tier-3 hint of {task}>", "exec"), namespace)  # noqa: S102 - our own hint text
    return namespace[task]


def test_every_third_hint_tier_is_code_that_passes_its_check(capsys):
    """The last hint tier is the body of the task's function: run as written, it passes the check."""
    namespace = {"torch": torch, "math": math, "FP32Island": FP32Island, "diagnose_scale": diagnose_scale}
    assert set(lesson07.HINTS) == set(PARAMETERS)
    for task in PARAMETERS:  # in order: fp32_block's hint calls first_nonfinite_module's
        getattr(lesson07, task)(_from_hint(task, namespace))
        assert "✓" in capsys.readouterr().out, task
