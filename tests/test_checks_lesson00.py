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
