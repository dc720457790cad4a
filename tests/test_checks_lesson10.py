"""Exercise 10: each check passes the right answer and names each typical mistake (one fixture per mistake)."""

import pytest
import torch

from ampcourse.checks import CheckFailed, NotStarted, lesson10

E4M3, E5M2 = torch.float8_e4m3fn, torch.float8_e5m2


# ------------------------------------------------------------------------------------------------- task 1
def cast(amax="abs", invert=False, fmt_max="own", apply=True, divide=False):
    """A scaled_cast with one mistake switched on (the defaults are the right answer)."""
    def scaled_cast(x, fp8_dtype):
        peak = x.abs().max() if amax == "abs" else x.max()
        top = torch.finfo(fp8_dtype).max if fmt_max == "own" else 448.0
        scale = peak / top if invert else top / peak
        if fmt_max == "none":
            scale = torch.tensor(1.0)
        y = x / scale if divide else (x * scale if apply else x)
        return y.clamp(-torch.finfo(fp8_dtype).max, torch.finfo(fp8_dtype).max).to(fp8_dtype), scale
    return scaled_cast


def test_task1_right_answer_passes(capsys):
    lesson10.scaled_cast(cast())
    assert capsys.readouterr().out.startswith("✓ Task 1 (scaled_cast)")


TASK1_MISTAKES = {
    "scale inverted": (cast(invert=True), "your scale is inverted"),
    "amax without abs (wrong tensor)": (cast(amax="signed"), "largest \\*signed\\* value"),
    "E4M3's max for E5M2": (cast(fmt_max="e4m3"), "the other format's max"),
    "no scale": (cast(fmt_max="none"), "no scaling"),
    "scale not applied": (cast(apply=False), "cast without the scale"),
    "divided by the scale": (cast(divide=True), "you divided x by the scale"),
    "returns only the tensor": (lambda x, d: x.to(d), "should return a tuple of 2"),
}


@pytest.mark.parametrize(("fn", "words"), TASK1_MISTAKES.values(), ids=TASK1_MISTAKES)
def test_task1_mistakes_are_named(fn, words):
    with pytest.raises(CheckFailed, match=words) as info:
        lesson10.scaled_cast(fn)
    assert not isinstance(info.value, NotStarted)


# ------------------------------------------------------------------------------------------------- task 2
def linear(fmt=E4M3, invert=False, scaled=True, w_amax_from="weight", x_amax_from="x", fp8=True, clamp=True):
    def fp8_linear(x, weight):
        if not fp8:
            return x @ weight.t()
        top = torch.finfo(fmt).max
        amaxes = {"x": x.abs().max(), "weight": weight.abs().max()}
        sx = top / amaxes[x_amax_from] if scaled else torch.tensor(1.0)
        sw = top / amaxes[w_amax_from] if scaled else torch.tensor(1.0)
        xs, ws = x * sx, weight * sw
        if clamp:
            xs, ws = xs.clamp(-top, top), ws.clamp(-top, top)
        x8, w8 = xs.to(fmt), ws.to(fmt)
        a, b = (sx, sw) if invert else (1 / sx, 1 / sw)
        return torch._scaled_mm(x8, w8.t(), scale_a=a.float(), scale_b=b.float(), out_dtype=torch.float32)
    return fp8_linear


def test_task2_right_answer_passes(capsys):
    lesson10.fp8_linear(linear())
    assert capsys.readouterr().out.startswith("✓ Task 2 (fp8_linear)")


def test_task2_bf16_output_also_passes(capsys):
    def fp8_linear(x, weight):
        sx, sw = 448 / x.abs().max(), 448 / weight.abs().max()
        x8, w8 = (x * sx).clamp(-448, 448).to(E4M3), (weight * sw).clamp(-448, 448).to(E4M3)
        return torch._scaled_mm(x8, w8.t(), scale_a=1 / sx, scale_b=1 / sw, out_dtype=torch.bfloat16)
    lesson10.fp8_linear(fp8_linear)
    assert capsys.readouterr().out.startswith("✓ Task 2")


TASK2_MISTAKES = {
    "_scaled_mm scales inverted": (linear(invert=True), "scales you passed to torch._scaled_mm are inverted"),
    "no scaling": (linear(scaled=False), "you cast without scales"),
    "weight scaled with x's amax (wrong tensor)": (linear(w_amax_from="x"), "amax of x — the wrong tensor"),
    "x scaled with the weight's amax (wrong tensor)": (linear(x_amax_from="weight"), "amax of the weight"),
    "E5M2 for the forward pass": (linear(fmt=E5M2), "forward operand to E5M2"),
    "no FP8 at all": (linear(fp8=False), "torch._scaled_mm was never called"),
    "weight not transposed": (lambda x, w: torch.zeros(x.shape[0], w.shape[1]), "Pass the weight transposed"),
}


@pytest.mark.parametrize(("fn", "words"), TASK2_MISTAKES.values(), ids=TASK2_MISTAKES)
def test_task2_mistakes_are_named(fn, words):
    with pytest.raises(CheckFailed, match=words) as info:
        lesson10.fp8_linear(fn)
    assert not isinstance(info.value, NotStarted)


# ------------------------------------------------------------------------------------------------- task 3
def delayed(source="history", reducer=max, margin_on=True, clamp=True, record="x", roll=True, invert=False):
    def delayed_cast(x, history, fp8_dtype, margin):
        top = torch.finfo(fp8_dtype).max
        amax = float(x.abs().max())
        peak = amax if source == "current" else reducer(history)
        shift = 2**margin if margin_on else 1
        scale = peak * shift / top if invert else top / peak / shift
        scaled = x * scale
        if clamp:
            scaled = scaled.clamp(-top, top)
        x_fp8 = scaled.to(fp8_dtype)
        recorded = {"x": amax, "scaled": float((x * scale).abs().max())}[record]
        new_history = (history[1:] if roll else list(history)) + [recorded]
        return x_fp8, scale, new_history
    return delayed_cast


def test_task3_right_answer_passes(capsys):
    lesson10.delayed_cast(delayed())
    assert capsys.readouterr().out.startswith("✓ Task 3 (delayed_cast)")


TASK3_MISTAKES = {
    "no margin": (delayed(margin_on=False), "no margin"),
    "saturation ignored": (delayed(clamp=False), "saturation ignored"),
    "amax of the scaled tensor recorded (wrong tensor)": (delayed(record="scaled"), "the wrong tensor"),
    "current amax (dynamic, not delayed)": (delayed(source="current"), "that is dynamic scaling"),
    "last history entry instead of the max": (delayed(reducer=lambda h: h[-1]), "use the largest: max\\(history\\)"),
    "scale inverted": (delayed(invert=True), "your scale is inverted"),
    "history grows without bound": (delayed(roll=False), "drop the\\s+oldest amax"),
}


@pytest.mark.parametrize(("fn", "words"), TASK3_MISTAKES.values(), ids=TASK3_MISTAKES)
def test_task3_mistakes_are_named(fn, words):
    with pytest.raises(CheckFailed, match=words) as info:
        lesson10.delayed_cast(fn)
    assert not isinstance(info.value, NotStarted)


# ------------------------------------------------------------------------------------------------- task 4
def test_task4_right_answer_passes(capsys):
    lesson10.fp8_format(lambda role: E5M2 if role == "grad_output" else E4M3)
    assert capsys.readouterr().out.startswith("✓ Task 4 (fp8_format)")


TASK4_MISTAKES = {
    "E4M3 for gradients": (lambda role: E4M3, "E4M3 for gradients"),
    "E5M2 for everything": (lambda role: E5M2, "E5M2 for input and weight"),
    "E5M2 for weights": (lambda role: E4M3 if role == "input" else E5M2, "E5M2 for weight"),
    "a string, not a dtype": (lambda role: "e4m3", "return torch.float8_e4m3fn"),
}


@pytest.mark.parametrize(("fn", "words"), TASK4_MISTAKES.values(), ids=TASK4_MISTAKES)
def test_task4_mistakes_are_named(fn, words):
    with pytest.raises(CheckFailed, match=words) as info:
        lesson10.fp8_format(fn)
    assert not isinstance(info.value, NotStarted)


@pytest.mark.parametrize("check", [lesson10.scaled_cast, lesson10.fp8_linear, lesson10.delayed_cast,
                                   lesson10.fp8_format])
def test_a_stub_is_not_started(check):
    def stub(*args):
        raise NotImplementedError("a hint")
    with pytest.raises(NotStarted, match="not started"):
        check(stub)


def test_task2_runs_on_a_cpu_without_an_fp8_matmul(monkeypatch, capsys):
    """AVX2-only CPUs: torch._scaled_mm raises there; the check runs the learner's call through the emulation."""
    from ampcourse import fp8

    monkeypatch.setitem(fp8._FP8_MATMUL, "cpu", False)

    def refuse(*args, **kwargs):
        raise RuntimeError("could not create a primitive descriptor for the matmul primitive")
    monkeypatch.setattr(torch, "_scaled_mm", refuse)
    lesson10.fp8_linear(linear())
    assert capsys.readouterr().out.startswith("✓ Task 2")
    with pytest.raises(CheckFailed, match="scales you passed to torch._scaled_mm are inverted"):
        lesson10.fp8_linear(linear(invert=True))
