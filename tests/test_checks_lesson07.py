"""Exercise 07: the checks pass right answers and name each typical wrong one (the fixtures)."""

import pytest
import torch

from ampcourse.checks import CheckFailed, NotStarted, lesson07
from ampcourse.device import pick_device


def finder(check="isfinite", where="output", keep="first", remove=True):
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
        handles = [m.register_forward_hook(hook) for m in model.modules()]
        try:
            model(x)
        finally:
            if remove:
                for handle in handles:
                    handle.remove()
        if not found:
            return None
        return found[0] if keep == "first" else found[-1]
    return first_nonfinite_module


def island(disable=True, cast=True, output_half=False):
    def fp32_block(block, x):
        with torch.autocast(device_type=x.device.type, enabled=not disable):
            out = block(x.float() if cast else x)
        return out.half() if output_half else out
    return fp32_block


def loss_wrapper(cast_target="if float", cast_logits=True, disable=True):
    def loss_in_fp32(loss_fn, logits, target):
        if cast_target is True:
            target = target.float()
        elif cast_target == "long":
            target = target.long()
        elif cast_target == "if float" and target.is_floating_point():
            target = target.float()
        with torch.autocast(device_type=logits.device.type, enabled=not disable):
            return loss_fn(logits.float() if cast_logits else logits, target)
    return loss_in_fp32


def test_right_answers_pass(capsys):
    lesson07.first_nonfinite_module(finder())
    lesson07.fp32_block(island())
    lesson07.loss_in_fp32(loss_wrapper())
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 3 and all(line.startswith("✓ Task") for line in lines)


def test_the_island_block_really_passes_fp16_range():
    block, _ = lesson07._island_block(pick_device())
    x = torch.randn(4, 8, generator=torch.Generator().manual_seed(12))
    with torch.no_grad():
        assert float(block(x).abs().max()) > torch.finfo(torch.float16).max


FINDER_MISTAKES = {
    "returns the last instead of the first": (finder(keep="last"), "the last module whose output was non-finite"),
    "leaves hooks registered": (finder(remove=False), "hooks are still registered"),
    "only checks for inf": (finder(check="isinf"), "only checked for inf, not NaN"),
    "only checks for NaN": (finder(check="isnan"), "you only looked for NaN"),
    "checks inputs instead of outputs": (finder(where="input"), "checked the inputs instead of the outputs"),
}
ISLAND_MISTAKES = {
    "only disables autocast": (island(cast=False), "disabled autocast but the input stayed float16"),
    "only casts the input": (island(disable=False), "cast the input to float32 but left autocast on"),
    "neither": (island(disable=False, cast=False), "left autocast on and the input in float16"),
    "casts the output back to fp16": (island(output_half=True), "cast the output back to float16"),
}
LOSS_MISTAKES = {
    "casts the class-index targets (the seed's wrapper)": (loss_wrapper(cast_target=True),
                                                          "cast the class-index targets"),
    "logits not cast": (loss_wrapper(cast_logits=False), "logits reached the loss as torch.float16"),
    "autocast left on": (loss_wrapper(disable=False), "autocast was still on inside the loss"),
    "soft targets left in float16": (loss_wrapper(cast_target="never"), "soft targets .* reached the loss as "
                                                                         "torch.float16"),
    "every target made long": (loss_wrapper(cast_target="long"), "you turned them into int64"),
}


@pytest.mark.parametrize(("fn", "words"), FINDER_MISTAKES.values(), ids=FINDER_MISTAKES)
def test_finder_mistakes_are_named(fn, words):
    with pytest.raises(CheckFailed, match=words):
        lesson07.first_nonfinite_module(fn)


@pytest.mark.parametrize(("fn", "words"), ISLAND_MISTAKES.values(), ids=ISLAND_MISTAKES)
def test_island_mistakes_are_named(fn, words):
    with pytest.raises(CheckFailed, match=words):
        lesson07.fp32_block(fn)


@pytest.mark.parametrize(("fn", "words"), LOSS_MISTAKES.values(), ids=LOSS_MISTAKES)
def test_loss_mistakes_are_named(fn, words):
    with pytest.raises(CheckFailed, match=words):
        lesson07.loss_in_fp32(fn)


@pytest.mark.parametrize("answer", [None, "", "head", 3, torch.nn.Linear(1, 1)])
def test_constant_answers_fail_without_a_traceback(answer):
    with pytest.raises(CheckFailed):
        lesson07.first_nonfinite_module(lambda model, x: answer)
    with pytest.raises(CheckFailed):
        lesson07.fp32_block(lambda block, x: answer)
    with pytest.raises(CheckFailed):
        lesson07.loss_in_fp32(lambda loss_fn, logits, target: answer)


def test_finite_model_must_give_none():
    wrong = finder()

    def always_name(model, x):
        return wrong(model, x) or ""

    with pytest.raises(CheckFailed, match="return None when no module produced inf or NaN"):
        lesson07.first_nonfinite_module(always_name)


def test_not_callable_and_stubs():
    def stub(*args):
        raise NotImplementedError("hint")

    for check in (lesson07.first_nonfinite_module, lesson07.fp32_block, lesson07.loss_in_fp32):
        with pytest.raises(NotStarted):
            check(stub)
        with pytest.raises(CheckFailed, match="should be a function"):
            check(42)


# --- Task 4: triage -------------------------------------------------------------------------------------------------
def triage_right(initial, scales, losses):
    import math
    if not all(math.isfinite(x) for x in losses):
        return "forward overflow"
    before = [initial, *scales[:-1]]
    if all(a < b for b, a in zip(before, scales, strict=True)):
        return "backward overflow"
    return "healthy"


def triage_any_skip(initial, scales, losses):
    before = [initial, *scales[:-1]]
    return "backward overflow" if any(a < b for b, a in zip(before, scales, strict=True)) else "healthy"


def triage_scales_only(initial, scales, losses):
    before = [initial, *scales[:-1]]
    return "forward overflow" if all(a < b for b, a in zip(before, scales, strict=True)) else "healthy"


TRIAGE_MISTAKES = {
    "any skip is a problem": (triage_any_skip, "the scaler doing its job"),
    "scales only, losses ignored": (triage_scales_only, "Look at the losses before the scales|every step is skipped"),
    "bad label": (lambda i, s, losses: "overflow", "return one of"),
}


def test_triage_right_answer_passes(capsys):
    lesson07.triage(triage_right)
    assert capsys.readouterr().out.startswith("✓ Task 4")


@pytest.mark.parametrize(("fn", "words"), TRIAGE_MISTAKES.values(), ids=TRIAGE_MISTAKES)
def test_triage_mistakes_are_named(fn, words):
    with pytest.raises(CheckFailed, match=words):
        lesson07.triage(fn)
