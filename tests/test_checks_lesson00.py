"""The lesson-00 checks pass right answers and name each typical wrong one.

Each wrong answer below is a fixture: a mistake a learner makes, and the words the check must use.
"""

import pytest
import torch

from ampcourse.checks import CheckFailed, NotStarted
from ampcourse.checks import lesson00 as check
from ampcourse.device import describe


def right_bytes(t):
    return t.numel() * t.element_size()


def right_forward(model, x):
    hw = describe()
    with torch.autocast(device_type=hw.device.type, dtype=hw.recommendation.dtype):
        return model(x)


def stub(*args):
    raise NotImplementedError("write your code here")


WRONG_BYTES = {
    "counts elements": (lambda t: t.numel(), "number of elements"),
    "counts bits": (lambda t: t.numel() * t.element_size() * 8, "which is bits"),
    "assumes float32": (lambda t: t.numel() * 4, "as if it were float32"),
    "returns a string": (lambda t: f"{t.numel() * t.element_size()} bytes", "return a number"),
    "crashes": (lambda t: t.nbytes(), "raised TypeError"),
}


def _no_autocast(model, x):
    return model(x)


def _wrong_device(model, x):
    with torch.autocast(device_type="cuda" if describe().device.type != "cuda" else "cpu"):
        return model(x)


def _half_model(model, x):
    model.to(torch.bfloat16)
    return model(x.to(torch.bfloat16))


def _wrong_dtype(model, x):
    hw = describe()
    other = torch.float16 if hw.recommendation.dtype == torch.bfloat16 else torch.bfloat16
    with torch.autocast(device_type=hw.device.type, dtype=other):
        return model(x)


def _ignores_input(model, x):
    hw = describe()
    with torch.autocast(device_type=hw.device.type, dtype=hw.recommendation.dtype):
        return model(torch.zeros_like(x))


WRONG_FORWARD = {
    "no autocast": (_no_autocast, "did not run under autocast"),
    "device_type of another device": (_wrong_device, "device_type must match"),
    "converts the model": (_half_model, "you converted the model"),
    "other dtype": (_wrong_dtype, "recommended AMP dtype"),
    "ignores the input": (_ignores_input, "computed on the input you were given"),
    "returns a tuple": (lambda m, x: (m(x),), "return the model's output tensor"),
}


def test_right_answers_pass_with_one_line(capsys):
    check.tensor_bytes(right_bytes)
    check.amp_forward(right_forward)
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 2 and all(line.startswith("✓ Task") for line in lines)


@pytest.mark.parametrize("name", WRONG_BYTES)
def test_tensor_bytes_names_the_mistake(name):
    fn, words = WRONG_BYTES[name]
    with pytest.raises(CheckFailed, match=words):
        check.tensor_bytes(fn)


@pytest.mark.filterwarnings("ignore:.*autocast.*:UserWarning")
@pytest.mark.parametrize("name", WRONG_FORWARD)
def test_amp_forward_names_the_mistake(name):
    fn, words = WRONG_FORWARD[name]
    with pytest.raises(CheckFailed, match=words):
        check.amp_forward(fn)


@pytest.mark.parametrize("run", [check.tensor_bytes, check.amp_forward])
def test_stub_is_not_started_and_non_function_is_explained(run):
    with pytest.raises(NotStarted, match="not started"):
        run(stub)
    with pytest.raises(CheckFailed, match="should be a function"):
        run(42)


# --- Task 3: choose_recipe ---------------------------------------------------------------------------------------
def recipe_right(capability):
    return (torch.bfloat16, False) if capability >= (8, 0) else (torch.float16, True)


RECIPE_MISTAKES = {
    "bfloat16 everywhere": (lambda c: (torch.bfloat16, False), "no bfloat16 Tensor Cores"),
    "float16 + scaler everywhere": (lambda c: (torch.float16, True), "runs bfloat16 as fast"),
    "float16 without a scaler": (lambda c: (torch.float16, False) if c < (8, 0) else (torch.bfloat16, False),
                                 "float16 without a GradScaler"),
    "bfloat16 with a scaler": (lambda c: (torch.bfloat16, True) if c >= (8, 0) else (torch.float16, True),
                               "only costs time"),
    "float32 on old GPUs": (lambda c: (torch.float32, False) if c < (7, 0) else recipe_right(c), "chose float32"),
    "dtype as a string": (lambda c: ("bfloat16", False), "return a tuple \\(torch dtype, bool\\)"),
    "cutoff at Volta": (lambda c: (torch.bfloat16, False) if c >= (7, 0) else (torch.float16, True),
                        "no bfloat16 Tensor Cores"),
}


def test_choose_recipe_right_answer_passes(capsys):
    check.choose_recipe(recipe_right)
    assert capsys.readouterr().out.startswith("✓ Task 3")


@pytest.mark.parametrize(("fn", "words"), RECIPE_MISTAKES.values(), ids=RECIPE_MISTAKES)
def test_choose_recipe_mistakes_are_named(fn, words):
    with pytest.raises(CheckFailed, match=words):
        check.choose_recipe(fn)


def test_tensor_bytes_storage_of_a_view_is_named():
    with pytest.raises(CheckFailed, match="size of the whole storage"):
        check.tensor_bytes(lambda t: t.untyped_storage().nbytes())
