"""Bad input gets a clear ``ValueError``/``TypeError`` that names the argument: never a raw error from deep
inside torch or the standard library, never a silent wrong result, never a hang.

The cases are the ones the reliability probe (issue 17) found giving raw errors, wrong results or hangs.
"""

import math

import pytest
import torch

from ampcourse import accumulation, bench, capstone, device, floats, troubleshoot
from ampcourse.__main__ import main
from ampcourse.quiz import Question, Quiz
from ampcourse.widgets import lesson01, lesson06

HAS_CUDA = torch.cuda.is_available()
HAS_MPS = getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available()


def _tiny_step():
    return None


# Every public function that takes a device, called with that device.
DEVICE_CALLS = {
    "device.describe": lambda d: device.describe(d),
    "bench.synchronize": lambda d: bench.synchronize(d),
    "bench.time_fn": lambda d: bench.time_fn(_tiny_step, warmup=0, repeats=1, device=d),
    "bench.matmul_throughput": lambda d: bench.matmul_throughput(4, 4, 4, device=d, warmup=0, repeats=1),
    "bench.peak_flops": lambda d: bench.peak_flops(d),
    "bench.compare_precisions": lambda d: bench.compare_precisions(width=8, depth=1, batch=2, device=d,
                                                                   warmup=0, repeats=1),
    "troubleshoot.large_activation_stats": lambda d: troubleshoot.large_activation_stats(device=d),
    "capstone.recommended_dtype": lambda d: capstone.recommended_dtype(d),
    "capstone.train": lambda d: capstone.train(capstone.TrainConfig(), device=d, progress=None),
    "widgets.lesson06.measure": lambda d: lesson06.measure(128, 32, device=d),
}


@pytest.mark.skipif(HAS_CUDA, reason="this machine has CUDA")
@pytest.mark.parametrize("name", DEVICE_CALLS)
def test_cuda_on_a_machine_without_it_is_a_clear_error(name):
    with pytest.raises(ValueError, match=r"CUDA was requested but .*; use device='cpu'"):
        DEVICE_CALLS[name]("cuda")


@pytest.mark.skipif(HAS_MPS, reason="this machine has MPS")
@pytest.mark.parametrize("name", DEVICE_CALLS)
def test_mps_where_it_is_missing_is_a_clear_error(name):
    with pytest.raises(ValueError, match="MPS .* was requested"):
        DEVICE_CALLS[name]("mps")


@pytest.mark.parametrize("name", DEVICE_CALLS)
@pytest.mark.parametrize("bad", ["tpu", "nope", "", 3, 2.5, True])
def test_unknown_devices_are_clear_errors(name, bad):
    with pytest.raises((ValueError, TypeError), match="device"):
        DEVICE_CALLS[name](bad)


@pytest.mark.parametrize(("args", "error", "words"), [
    (("x", -1, 3), ValueError, "exponent_bits must be from 2 to 11"),
    (("x", 100, 10), ValueError, "exponent_bits must be from 2 to 11"),
    (("x", 5, -2), ValueError, "mantissa_bits must be from 0 to 52"),
    (("x", 5, 60), ValueError, "mantissa_bits must be from 0 to 52"),
    (("x", "5", 2), TypeError, "exponent_bits must be an int"),
    (("x", 5.0, 2), TypeError, "exponent_bits must be an int"),
    ((5, 5, 2), TypeError, "name must be a non-empty str"),
])
def test_derive_format_refuses_impossible_layouts(args, error, words):
    with pytest.raises(error, match=words):
        floats.derive_format(*args)


def test_round_to_a_number_beyond_float32_gives_inf_like_a_cast():
    assert floats.round_to(10**29, "fp16") == math.inf
    assert floats.round_to(-(10**400), "bf16") == -math.inf
    assert floats.round_to(1e39, "fp32") == math.inf == torch.tensor(1e39, dtype=torch.float64).float().item()


@pytest.mark.parametrize(("fn", "value", "error"), [
    (bench.format_time, "abc", TypeError), (bench.format_time, None, TypeError), (bench.format_time, -1.0, ValueError),
    (bench.format_flops, "abc", TypeError), (bench.format_flops, -1e12, ValueError),
    (bench.format_bytes, math.nan, ValueError), (bench.format_bytes, "1KB", TypeError),
    (bench.format_bytes, math.inf, ValueError),
])
def test_format_helpers_refuse_what_they_cannot_show(fn, value, error):
    with pytest.raises(error, match="seconds|flops_per_second|n must"):
        fn(value)


def test_format_bytes_shows_a_fraction_instead_of_truncating_it():
    assert bench.format_bytes(1.7) == "1.7 B" and bench.format_bytes(1536) == "1.5 KiB"


@pytest.mark.parametrize("achieved", [math.nan, math.inf, -1.0])
def test_fraction_of_peak_refuses_nan_and_inf(achieved):
    with pytest.raises(ValueError, match="achieved must be a finite number"):
        bench.fraction_of_peak(achieved, 1e12)


def test_tf32_enabled_wants_a_bool():
    with pytest.raises(TypeError, match="enabled must be True or False"):
        with bench.tf32_enabled("yes"):
            pass


def test_quiz_check_names_the_question_range():
    quiz = Quiz([Question("2 + 2?", ["3", "4"], answer=1, why="four")])
    with pytest.raises(ValueError, match=r"i must be from 0 to 0: this quiz has 1 question"):
        quiz.check(5)
    with pytest.raises(TypeError, match="i must be a question number"):
        quiz.check("0")


def _state():
    return accumulation.make_state()


def test_load_checkpoint_on_a_corrupt_or_missing_file(tmp_path):
    state = _state()
    corrupt = tmp_path / "corrupt.pt"
    corrupt.write_bytes(b"this is not a checkpoint" * 10)
    with pytest.raises(ValueError, match="is not a readable checkpoint"):
        accumulation.load_checkpoint(corrupt, state.model, state.optimizer, state.scaler)
    with pytest.raises(ValueError, match="no checkpoint file"):
        accumulation.load_checkpoint(tmp_path / "missing.pt", state.model, state.optimizer, state.scaler)
    other = tmp_path / "other.pt"
    torch.save({"weights": torch.zeros(2)}, other)
    with pytest.raises(ValueError, match="not a save_checkpoint file"):
        accumulation.load_checkpoint(other, state.model, state.optimizer, state.scaler)


def test_resume_matches_checks_the_folder_first(tmp_path):
    with pytest.raises(ValueError, match="does not exist"):
        accumulation.resume_matches(tmp_path / "no" / "such" / "dir" / "x.pt")


def test_sizes_that_cannot_finish_are_refused_with_the_limit():
    with pytest.raises(ValueError, match=r"more than this benchmark allows on cpu \(2e\+11"):
        bench.compare_precisions(width=4096, depth=64, batch=4096, device="cpu")
    digits = capstone.load_digits()
    with pytest.raises(ValueError, match=f"n must be at most {capstone.MAX_PNG_DIGITS}"):
        capstone.digits_png(digits, n=10**6)


@pytest.mark.parametrize("text", ["1" * 20000 + "x", "1" * 999 + "x", "1/" + "1" * 5000, "2**" + "9" * 3000])
def test_a_long_paste_into_the_bit_explorer_is_refused_or_read_at_once(text):
    # The old patterns backtracked quadratically (20,000 characters took 20 s); these return at once.
    with pytest.raises(ValueError, match="could not read"):
        lesson01.parse_value(text)
    assert lesson01.parse_value("1" * 900) == math.inf or lesson01.parse_value("1" * 900) > 1e308


@pytest.mark.parametrize(("argv", "words"), [
    (["grade", "exercises/nothing.ipynb"], "not an exercise notebook"),
    (["grade", "README.md"], "not an exercise notebook"),
    (["execute", "notebooks/nope.ipynb"], "no such notebook"),
    (["grade", "--timeout", "0", "exercises/00_start_here.ipynb"], "timeout must be"),
])
def test_command_line_mistakes_end_in_one_line_not_a_traceback(argv, words, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert words in err and "Traceback" not in err


def test_silent_wrong_results_are_now_errors():
    with pytest.raises(ValueError, match="clock gave a duration"):
        bench.time_fn(_tiny_step, warmup=0, repeats=2, clock=lambda: math.nan)
    ticks = iter([5.0, 4.0, 3.0, 2.0])
    with pytest.raises(ValueError, match="never goes back"):
        bench.time_fn(_tiny_step, warmup=0, repeats=2, clock=lambda: next(ticks))
    for warmup, total in ((-1, 10), (5.5, 10)):
        with pytest.raises((ValueError, TypeError), match="warmup"):
            capstone.cosine_schedule(warmup, total)
    with pytest.raises(ValueError, match="repeats must be an int >= 1"):
        lesson06.measure(128, 32, device="cpu", repeats=0)


def test_sizes_that_cannot_be_allocated_are_refused_with_the_limit():
    from ampcourse import autocast_lists, scaler_sim

    with pytest.raises(ValueError, match="n_steps must be at most"):
        scaler_sim.overflow_pattern(10**9)
    with pytest.raises(ValueError, match="MAX_MLP_PARAMETERS"):
        bench.make_mlp(10**6, 10**6)
    with pytest.raises(ValueError, match="MAX_MATMUL_ELEMENTS"):
        bench.matmul_throughput(10**6, 10**6, 10**6)
    with pytest.raises(TypeError, match="rows must be"):
        autocast_lists.as_table(42)


# --- What the last probe still found (issue 17): formats, scale histories, the lesson-00 slider, shapes ------------

@pytest.mark.parametrize(("formats", "error", "words"), [
    ({"a": ".2f"}, ValueError, r"formats\['a'\] = '.2f' is not a format string: .*'\{:.2f\}'"),
    ({"b": "{:.2f}"}, ValueError, r"formats names columns that this table does not have: \['b'\]; its columns are"),
    ({"a": "{:q}"}, ValueError, r"formats\['a'\] = '\{:q\}' cannot format the value 1.5"),
    ({"a": "{:.2f}", "note": "{:d}"}, ValueError, r"formats\['note'\] = '\{:d\}' cannot format the value 'x'"),
    ({"a": 5}, TypeError, r"formats\['a'\] must be a format string such as '\{:.2f\}' or a function"),
    ({"a": lambda v: v["key"]}, ValueError, r"formats\['a'\] = .* cannot format the value 1.5 \(TypeError"),
    ("{:.2f}", TypeError, "formats must be a dict"),
])
def test_table_formats_are_checked_when_the_table_is_made(formats, error, words):
    from ampcourse.tables import Table

    with pytest.raises(error, match=words):
        Table([{"a": 1.5, "note": "x"}], formats=formats)


@pytest.mark.parametrize(("kwargs", "error", "words"), [
    ({"columns": "ab"}, TypeError, r"columns must be a list of column names .*got 'ab'; a single str would be split"),
    ({"columns": ["a", "a"]}, ValueError, r"columns must not repeat a name: \['a'\]"),
    ({"columns": [1]}, TypeError, r"columns must be a list of str \(got \[1\]\)"),
    ({"formats": {"a": "{{}}"}}, ValueError, r"formats\['a'\] = '\{\{\}\}' has no replacement field"),
    ({"formats": {"a": "{:>100000000}"}}, ValueError, r"makes a cell of 100,000,000 characters .*at most 10,000"),
])
def test_table_columns_and_formats_that_would_show_something_else_are_refused(kwargs, error, words):
    """Audit r3, finding 29: ``columns='ab'`` became two columns 'a' and 'b', duplicates were kept, ``'{{}}'``
    printed ``{}`` for every value and ``'{:>100000000}'`` built a 200 MB cell."""
    from ampcourse.tables import Table

    with pytest.raises(error, match=words):
        Table([{"a": 1.5, "b": 2}], **kwargs)
    assert Table([{"a": 1.5, "b": 2}], columns=("b", "a"), formats={"a": "{{{:.1f}}}"}).text().splitlines()[-1] \
        == "2  {1.5}"  # a tuple of names and an escaped brace beside a field are fine


def test_table_formats_that_fit_still_work():
    from ampcourse.tables import Table

    table = Table([{"a": 1.5, "b": None}], formats={"a": "{:.2f}", "b": lambda v: "—" if v is None else str(v)})
    assert table.text().splitlines()[-1].split() == ["1.50", "—"]
    assert Table([], formats={"a": "{:.2f}"}).text()  # no rows, no columns to check against: accepted


def test_a_scale_history_of_zeros_is_refused_and_a_fall_to_zero_is_named():
    with pytest.raises(ValueError, match=r"scales\[0\] must be > 0: a GradScaler starts at its init_scale"):
        troubleshoot.diagnose_scale([0.0] * 20)
    tiny = float(torch.finfo(torch.float32).smallest_normal) * 2.0**-22  # 2^-148: float32's second subnormal
    diagnosis = troubleshoot.diagnose_scale([tiny * 2, tiny, 0.0, 0.0, 0.0])
    assert diagnosis.status == "collapsing"
    assert "the scale fell to 0 after 2 of 4 steps" in diagnosis.reason and "went down on each" not in diagnosis.reason


@pytest.mark.parametrize(("value", "error", "words"), [
    ("x", TypeError, "log10_value must be a number from -9 to 6"),
    (None, TypeError, "log10_value must be a number"),
    (True, TypeError, "log10_value must be a number"),
    (9, ValueError, r"log10_value must be in \[-9.0, 6.0\], the slider's range: values from 1e-9 to 1e6 \(got 9\)"),
    (1e9, ValueError, r"log10_value must be in \[-9.0, 6.0\]"),
    (-10, ValueError, r"log10_value must be in \[-9.0, 6.0\]"),
    (math.nan, ValueError, r"log10_value must be in \[-9.0, 6.0\]"),
])
def test_the_lesson00_slider_refuses_what_it_would_clamp(value, error, words):
    from ampcourse.widgets import lesson00

    with pytest.raises(error, match=words):
        lesson00.cast_survival(value)


def _linear8():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 4))


@pytest.mark.parametrize(("call", "words"), [
    (lambda m: troubleshoot.find_nonfinite(m, torch.ones(2, 3)),
     r"the model failed in module '0' \(Linear\) on the inputs given \(a float32 tensor of shape \(2, 3\) on cpu\): "
     r"RuntimeError: mat1 and mat2 shapes cannot be multiplied"),
    (lambda m: troubleshoot.find_nonfinite(m, torch.ones(2, 8, dtype=torch.float64)),
     r"in module '0' \(Linear\) on the inputs given \(a float64 tensor .*must have the same dtype"),
    (lambda m: troubleshoot.find_nonfinite(m, [1.0, 2.0]), r"on the inputs given \(list\): TypeError"),
    (lambda m: troubleshoot.activation_peaks(m, torch.ones(2, 3)), r"in module '0' \(Linear\) on the inputs given"),
    (lambda m: troubleshoot.scaled_training_run(m, torch.ones(2, 3), torch.tensor([0, 1])),
     r"the model failed on the inputs given \(a float32 tensor of shape \(2, 3\)"),
    (lambda m: troubleshoot.scaled_training_run(m, torch.ones(2, 8), torch.zeros(3, dtype=torch.long)),
     r"targets must be class indices, one per row of inputs: a 1-D tensor of length 2 \(got shape \(3,\)\)"),
    (lambda m: troubleshoot.scaled_training_run(m, torch.ones(2, 8), torch.zeros(2, 4, dtype=torch.long)),
     r"targets must be class indices, one per row of inputs"),
    (lambda m: troubleshoot.scaled_training_run(m, torch.ones(2, 8), torch.tensor([0, 7])),
     r"targets must be class indices from 0 to 3: the model gives 4 logits per row \(got values from 0 to 7\)"),
    (lambda m: troubleshoot.scaled_training_run(torch.nn.Linear(8, 4), torch.ones(2, 8), torch.tensor([0, 1]),
                                                steps=10**9),
     "steps must be at most 10000"),
    (lambda m: troubleshoot.activation_peaks(m, torch.ones(2, 8), device_type="tpu"), "device_type must name a device"),
])
def test_shape_and_dtype_mismatches_are_clear_value_errors(call, words):
    with pytest.raises(ValueError, match=words) as caught:
        call(_linear8())
    assert "Traceback" not in str(caught.value)


@pytest.mark.parametrize(("call", "error", "words"), [
    (lambda m: troubleshoot.scaled_training_run(m, torch.ones(2, 8), torch.zeros(2)), TypeError,
     r"targets must be int64 class indices, as cross_entropy takes them \(got float32; use targets.long\(\)\)"),
    (lambda m: troubleshoot.activation_peaks(m, [1.0]), TypeError, "inputs must be a tensor"),
    (lambda m: troubleshoot.activation_peaks("model", torch.ones(2, 8)), TypeError, "model must be a torch.nn.Module"),
])
def test_wrong_types_for_the_lesson07_tools_are_type_errors(call, error, words):
    with pytest.raises(error, match=words):
        call(_linear8())


@pytest.mark.skipif(HAS_CUDA, reason="this machine has CUDA")
def test_activation_peaks_and_collect_gradients_on_missing_cuda():
    from ampcourse import gradients

    with pytest.raises(ValueError, match=r"CUDA was requested but .*; use device_type='cpu'"):
        troubleshoot.activation_peaks(_linear8(), torch.ones(2, 8), device_type="cuda")
    with pytest.raises(ValueError, match=r"CUDA was requested but .*; use device='cpu'"):
        gradients.collect_gradients(device="cuda")


def test_collect_gradients_names_the_input_a_model_must_take():
    from ampcourse import gradients

    with pytest.raises(ValueError, match=r"model must map a \(256, 32\) float32 input to \(256, 10\) logits; calling "
                                         r"it on such an input failed: mat1 and mat2 shapes cannot be multiplied"):
        gradients.collect_gradients(model=torch.nn.Linear(3, 3), steps=1, device="cpu")


def test_a_failing_model_is_still_a_runtime_error_for_code_that_caught_torch_s():
    from ampcourse.validate import ModelCallFailed

    with pytest.raises(ModelCallFailed) as caught:
        troubleshoot.find_nonfinite(_linear8(), torch.ones(2, 3))
    assert isinstance(caught.value, ValueError) and isinstance(caught.value, RuntimeError)
    assert isinstance(caught.value.__cause__, RuntimeError)  # torch's own error stays attached


# --- Found by a sweep of every public function (wrong types, empty lists, negative or huge sizes, NaN, cuda) -------

def test_fp8_device_arguments_are_checked_like_everywhere_else():
    from ampcourse import fp8

    with pytest.raises(ValueError, match="device must name a device"):
        fp8.fp8_tensor_cores("x")
    with pytest.raises(ValueError, match="device must name a device"):
        fp8.fp8_matmul_available("x")
    with pytest.raises(ValueError, match="device must name a device"):
        fp8.compare_precisions([0], epochs=1, device="x")
    assert fp8.fp8_tensor_cores("cuda") is HAS_CUDA and fp8.fp8_tensor_cores("cpu") is False


@pytest.mark.skipif(HAS_CUDA, reason="this machine has CUDA")
def test_fp8_on_missing_cuda_is_a_clear_error():
    from ampcourse import fp8

    for call in (lambda: fp8.fp8_matmul_available("cuda"), lambda: fp8.compare_precisions([0], device="cuda")):
        with pytest.raises(ValueError, match=r"CUDA was requested but .*; use device='cpu'"):
            call()


def test_fp8_sizes_that_cannot_finish_are_refused_with_the_limit():
    from ampcourse import fp8

    with pytest.raises(ValueError, match=f"n_steps must be at most {fp8.MAX_AMAX_STEPS:,}"):
        fp8.amax_sequence(10**12)
    with pytest.raises(ValueError, match=f"epochs must be at most {fp8.MAX_EPOCHS}"):
        fp8.compare_precisions([0], epochs=10**6)
    with pytest.raises(ValueError, match=f"steps must be at most {fp8.MAX_COLLECT_STEPS:,}"):
        fp8.collect_tensors(steps=10**9)
    with pytest.raises(TypeError, match="progress must be None or a function"):
        fp8.compare_precisions([0], epochs=1, progress="yes")


@pytest.mark.parametrize(("kwargs", "error", "words"), [
    ({"a": "x"}, TypeError, "a must be a 2-D tensor"),
    ({"b": torch.ones(3)}, TypeError, "b must be a 2-D tensor"),
    ({"b": torch.ones(3, 2).to(torch.float8_e4m3fn)}, ValueError,
     r"a is \(2, 2\) and b is \(3, 2\): a's columns must equal b's rows"),
    ({"scale_a": 1.0}, TypeError, "scale_a must be a tensor"),
    ({"out_dtype": "float32"}, TypeError, "out_dtype must be a torch.dtype"),
])
def test_emulated_scaled_mm_checks_its_operands(kwargs, error, words):
    from ampcourse import fp8

    one = torch.ones(())
    ones = torch.ones(2, 2).to(fp8.E4M3)
    args = {"a": ones, "b": ones, "scale_a": one, "scale_b": one} | kwargs
    with pytest.raises(error, match=words):
        fp8.emulated_scaled_mm(**args)
    out = fp8.emulated_scaled_mm(ones, ones, scale_a=one, scale_b=one, out_dtype=torch.float32)
    assert out.tolist() == [[2, 2]] * 2


@pytest.mark.parametrize("runs", [None, [], {"fp32": []}, {"fp32": [1.0]}, "fp32"])
def test_accuracy_table_wants_what_compare_precisions_returns(runs):
    from ampcourse import fp8

    with pytest.raises(TypeError, match="runs must be what compare_precisions returns"):
        fp8.accuracy_table(runs)


def test_quiz_helpers_and_pick_device_name_their_arguments():
    from ampcourse import quiz

    with pytest.raises(TypeError, match="question must be a Question"):
        quiz.feedback("What is fp16?", 0)
    with pytest.raises(TypeError, match="message must be a str"):
        quiz.feedback_html(True, None)
    with pytest.raises(ValueError, match="correct must be True, False or None"):
        quiz.feedback_html([], "Correct")
    with pytest.raises(TypeError, match="env must be None or a mapping"):
        device.pick_device("cpu")
    with pytest.raises(TypeError, match=r"env\['AMPCOURSE_DEVICE'\] must be a str"):
        device.pick_device({"AMPCOURSE_DEVICE": 0})


def test_accumulation_demos_refuse_sizes_and_scales_they_cannot_show():
    with pytest.raises(ValueError, match=r"scale=1e\+12 is too large for this demo: .*at most 2\*\*16"):
        accumulation.clip_demo(scale=1e12)
    with pytest.raises(ValueError, match=f"n_samples must be at most {accumulation.MAX_SAMPLES:,}"):
        accumulation.make_problem(10**12)
    with pytest.raises(ValueError, match=f"n_samples must be at most {accumulation.MAX_SAMPLES:,}"):
        accumulation.equivalence_report(n_samples=10**12)
    with pytest.raises(ValueError, match=r"n_micro × micro_batch_size must be at most"):
        accumulation.remainder_report(micro_batch_size=10**12)
    with pytest.raises(ValueError, match=f"k must be at most {accumulation.MAX_STEPS:,} steps"):
        accumulation.resume_from_fp32("unused.pt", k=10**12)
    with pytest.raises(ValueError, match=f"n must be at most {accumulation.MAX_STEPS:,} steps"):
        accumulation.train_steps(_state(), 10**12)


def test_more_sizes_that_cannot_finish_are_refused_with_the_limit():
    from ampcourse import gradients, scaler_run

    with pytest.raises(ValueError, match=f"steps must be at most {scaler_run.MAX_REAL_STEPS:,}"):
        scaler_run.real_scaler_run(10**12)
    for kwargs, words in (({"width": -1, "hidden": 4}, "width must be from 1"),
                          ({"width": 4, "hidden": 10**12}, f"hidden must be from 1 to {gradients.MAX_WIDTH}")):
        with pytest.raises(ValueError, match=words):
            gradients.ResidualBlock(**kwargs)
    with pytest.raises(TypeError, match="branch_init must be a finite real number"):
        gradients.ResidualBlock(4, 4, branch_init="small")


def test_autocast_observe_names_op_and_dtype():
    from ampcourse import autocast_lists

    with pytest.raises(ValueError, match=r"op: no example call for 3"):
        autocast_lists.observe(3)
    with pytest.raises(ValueError, match="dtype must be torch.bfloat16 or torch.float16"):
        autocast_lists.observe("aten::layer_norm", dtype=torch.float64)
    with pytest.raises(ValueError, match="unknown device type"):
        autocast_lists.observe("aten::layer_norm", device_type=["cpu"])


def test_lesson08_helpers_check_their_arguments():
    from ampcourse import distributed as d

    config = d.RunConfig(windows=1, dtype="float32")
    for call, words in ((lambda: d.make_model("config"), "config must be a RunConfig"),
                        (lambda: d.micro_batch(0, 0), "config must be a RunConfig"),
                        (lambda: d.window_batches(None, 0), "config must be a RunConfig"),
                        (lambda: d.flat_params("model"), "model must be a torch.nn.Module"),
                        (lambda: d.param_hash(None), "model must be a torch.nn.Module")):
        with pytest.raises(TypeError, match=words):
            call()
    with pytest.raises(ValueError, match="device must name a device"):
        d.window_batches(config, 0, device="x")
    model = d.make_model(config)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = d.make_scaler(config, enabled=False)
    batches = d.window_batches(config, None)
    for kwargs, error, words in (({"optimizer": "sgd"}, TypeError, "optimizer must be a torch.optim.Optimizer"),
                                 ({"scaler": None}, TypeError, "scaler must be a torch.amp.GradScaler"),
                                 ({"batches": 5}, TypeError, "batches must be a list"),
                                 ({"dtype": "float16"}, ValueError, "dtype must be one of"),
                                 ({"on_window": 1}, TypeError, "on_window must be None or a function")):
        args = {"model": model, "optimizer": optimizer, "scaler": scaler, "batches": batches, "accum_steps": 2,
                "max_norm": 1.0, "dtype": torch.float32} | kwargs
        with pytest.raises(error, match=words):
            d.train_windows(**args)


def test_sweep_split_and_bf16_training_refuse_sizes_that_cannot_finish():
    with pytest.raises(ValueError, match=f"rounds must be at most {bench.MAX_SWEEP_COUNT}"):
        bench.bf16_sweep((8,), rounds=10**12, device="cpu")
    with pytest.raises(ValueError, match=r"more than this benchmark allows on cpu"):
        bench.bf16_sweep((8,), batch=10**12, device="cpu")
    with pytest.raises(TypeError, match="seed must be an int"):
        bench.bf16_sweep((8,), seed=1.5, device="cpu")
    with pytest.raises(ValueError, match=f"n must be at most {capstone.MAX_SPLIT:,}"):
        capstone.split(10**12)
    for kwargs, limit in (({"steps": 10**12}, troubleshoot.MAX_SCALED_STEPS),
                          ({"n": 10**12}, troubleshoot.MAX_RENT_ROWS),
                          ({"hidden": 10**12}, troubleshoot.MAX_RENT_HIDDEN)):
        with pytest.raises(ValueError, match=f"{next(iter(kwargs))} must be at most {limit:,}"):
            troubleshoot.train_in_bf16(**kwargs)


def _window_parts():
    model = torch.nn.Linear(2, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0)
    batch = [(torch.zeros(1, 2), torch.zeros(1, dtype=torch.long))]
    return [model, optimizer, torch.amp.GradScaler("cpu", enabled=False), scheduler, batch, 1.0, torch.bfloat16]


@pytest.mark.parametrize(("position", "value", "error", "words"), [
    (0, None, TypeError, "model must be a torch.nn.Module"),
    (1, "sgd", TypeError, "optimizer must be a torch.optim.Optimizer"),
    (2, None, TypeError, "scaler must be a torch.amp.GradScaler"),
    (3, 1.0, TypeError, "scheduler must be a learning-rate scheduler"),
    (4, [], ValueError, "micro_batches must be a non-empty list"),
    (4, [torch.zeros(2)], ValueError, "micro_batches must be a non-empty list"),
    (5, -1.0, ValueError, "max_norm"),
    (6, "bf16", ValueError, "dtype must be one of"),
])
def test_train_window_names_a_bad_argument(position, value, error, words):
    parts = _window_parts()
    parts[position] = value
    with pytest.raises(error, match=words):
        capstone.train_window(*parts)
