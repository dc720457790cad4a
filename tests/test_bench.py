"""ampcourse.bench: honest timing (fake clocks), saved-activation bytes counted by hand, state bytes, FLOP/s."""

import doctest

import pytest
import torch
import torch.nn.functional as F

from ampcourse import bench
from ampcourse.bench import (
    DATASHEET_PEAKS,
    MODES,
    BenchmarkError,
    Timing,
    achieved_flops,
    available_modes,
    benchmark_step,
    compare_precisions,
    cpu_features,
    datasheet_entry,
    fraction_of_peak,
    largest_batch_estimate,
    matmul_flops,
    peak_flops,
    peak_memory_bytes,
    saved_activation_bytes,
    state_bytes,
    time_fn,
)


class FakeDevice:
    """A fake clock and an asynchronous 'device': fn() queues work; sync() waits for it."""

    def __init__(self, works):
        self.now, self.busy_until, self.works, self.calls = 0.0, 0.0, list(works), 0

    def clock(self):
        return self.now

    def fn(self):
        work = self.works[self.calls]
        self.calls += 1
        self.busy_until = max(self.busy_until, self.now) + work
        self.now += 1e-6  # launching is cheap

    def sync(self):
        self.now = max(self.now, self.busy_until)


def test_warmup_excluded_and_each_run_synchronised():
    works = [5.0, 5.0, 0.010, 0.030, 0.020, 0.500, 0.040]  # two slow warm-ups, one outlier
    dev = FakeDevice(works)
    timing = time_fn(dev.fn, warmup=2, repeats=5, clock=dev.clock, sync=dev.sync)
    assert dev.calls == 7 and timing.warmup == 2
    assert timing.times == pytest.approx((0.010, 0.030, 0.020, 0.500, 0.040))
    assert timing.median == pytest.approx(0.030)
    assert timing.p25 == pytest.approx(0.020) and timing.p75 == pytest.approx(0.040)
    assert timing.iqr == pytest.approx(0.020)
    assert timing.mean == pytest.approx(0.12)  # the outlier drags the mean, not the median


def test_without_sync_the_clock_would_see_only_the_launch():
    dev = FakeDevice([0.0, 0.25, 0.25])
    timing = time_fn(dev.fn, warmup=1, repeats=2, clock=dev.clock, sync=lambda: None)
    assert max(timing.times) < 1e-3  # what an unsynchronised benchmark measures: the launch
    dev = FakeDevice([0.0, 0.25, 0.25])
    assert time_fn(dev.fn, warmup=1, repeats=2, clock=dev.clock, sync=dev.sync).median == pytest.approx(0.25)


def test_timing_str_puts_a_unit_on_every_number():
    timing = Timing((0.0119, 0.0123, 0.0128), warmup=3)
    assert str(timing) == "12.3 ms (IQR 12.1 ms – 12.6 ms, 3 runs)"
    assert str(Timing((2e-5,), 0)) == "20 µs (IQR 20 µs – 20 µs, 1 runs)"
    with pytest.raises(ValueError):
        Timing((), 0)


def test_real_clock_on_cpu():
    timing = time_fn(lambda: torch.ones(10).sum(), warmup=1, repeats=3)
    assert len(timing.times) == 3 and all(t >= 0 for t in timing.times)


def test_bad_arguments_and_raising_function():
    with pytest.raises(TypeError, match="fn must be a function"):
        time_fn(42)
    with pytest.raises(ValueError, match="repeats"):
        time_fn(lambda: None, repeats=0)
    with pytest.raises(ValueError, match="warmup"):
        time_fn(lambda: None, warmup=-1)
    with pytest.raises(TypeError, match="repeats"):
        time_fn(lambda: None, repeats=2.5)
    with pytest.raises(TypeError, match="clock"):
        time_fn(lambda: None, clock=3)
    with pytest.raises(TypeError, match="device"):
        time_fn(lambda: None, device=3)

    def broken():
        raise ZeroDivisionError("boom")
    with pytest.raises(BenchmarkError, match=r"raised ZeroDivisionError during warm-up call 1 of 3: boom"):
        time_fn(broken)
    with pytest.raises(BenchmarkError, match="timed call 1 of 20"):
        time_fn(broken, warmup=0)
    with pytest.raises(BenchmarkError, match="activation count"):
        saved_activation_bytes(broken)


def test_activation_bytes_of_linear_relu_by_hand():
    torch.manual_seed(0)
    lin = torch.nn.Linear(4, 3)
    x = torch.randn(2, 4)
    # addmm saves the input x (2×4 fp32 = 32 B) for the weight gradient; relu saves its output (2×3 = 24 B).
    # x needs no gradient, so the weight is not saved here.
    report = saved_activation_bytes(lambda: torch.relu(lin(x)), lin)
    assert report.by_dtype == {torch.float32: 32 + 24} and report.total == 56
    assert report.parameter_bytes == 0 and report.copies_total == 0

    # an input that needs a gradient: addmm also saves the weight (a parameter: not an activation)
    h = torch.randn(2, 4, requires_grad=True)
    report = saved_activation_bytes(lambda: torch.relu(lin(h)), lin)
    assert report.by_dtype == {torch.float32: 24}  # h itself is a leaf that requires grad: not counted
    assert report.parameter_bytes == 32 + 48  # h's storage (leaf) and the weight's 3×4 fp32


def test_bf16_autocast_halves_matmul_saved_activations():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 8), torch.nn.ReLU())
    x = torch.randn(4, 8)

    def forward(enabled):
        def run():
            with torch.autocast(device_type="cpu", dtype=torch.bfloat16, enabled=enabled):
                return model(x)
        return run

    fp32 = saved_activation_bytes(forward(False), model)
    bf16 = saved_activation_bytes(forward(True), model)
    # fp32: x, relu1 output (= input of layer 2), relu2 output: 3 × 4×8×4 B; the second weight is a parameter
    assert fp32.by_dtype == {torch.float32: 3 * 128} and fp32.parameter_bytes == 8 * 8 * 4
    # bf16: the same three tensors at 2 bytes, plus autocast's bf16 copy of the second weight (8×8×2)
    assert bf16.by_dtype == {torch.bfloat16: 3 * 64} and bf16.parameter_copies == {torch.bfloat16: 128}
    assert bf16.total * 2 == fp32.total
    assert bf16.held_for_backward == 3 * 64 + 128


def test_mse_loss_under_autocast_keeps_an_fp32_copy():
    model = bench.make_mlp(16, 2)
    x, target = torch.randn(4, 16), torch.randn(4, 16)

    def run():
        with torch.autocast(device_type="cpu", dtype=torch.bfloat16):
            return F.mse_loss(model(x), target)
    report = saved_activation_bytes(run, model)
    # mse_loss runs in fp32 under autocast: it saves an fp32 copy of the output, and the fp32 target
    assert report.by_dtype[torch.float32] == 2 * 4 * 16 * 4
    assert report.by_dtype[torch.bfloat16] == 3 * 4 * 16 * 2


def test_state_bytes_for_adam():
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 3)  # 15 parameters = 60 B
    optimizer = torch.optim.Adam(model.parameters())
    before = state_bytes(model, optimizer)
    assert before == {"parameters": {torch.float32: 60}, "gradients": {}, "optimizer state": {}}
    model(torch.randn(2, 4)).sum().backward()
    optimizer.step()
    after = state_bytes(model, optimizer)
    assert after["gradients"] == {torch.float32: 60}
    # exp_avg + exp_avg_sq (2 × 60 B) + one float32 step counter per parameter tensor (2 × 4 B)
    assert after["optimizer state"] == {torch.float32: 128}
    with pytest.raises(TypeError, match="model"):
        state_bytes("model")
    with pytest.raises(TypeError, match="optimizer"):
        state_bytes(model, "adam")


def test_peak_memory_is_none_without_allocator_stats():
    assert peak_memory_bytes(lambda: None, "cpu") is None
    with pytest.raises(TypeError, match="fn"):
        peak_memory_bytes(None, "cpu")


def test_flops_and_fraction_of_peak():
    assert matmul_flops(2, 3, 4) == 48
    assert achieved_flops(48, 0.5) == 96.0
    assert fraction_of_peak(50.0, 200.0) == 0.25
    with pytest.raises(ValueError, match="seconds"):
        achieved_flops(10, 0)
    with pytest.raises(ValueError, match="peak"):
        fraction_of_peak(1.0, -1)
    with pytest.raises(TypeError, match="m must be an int"):
        matmul_flops(1.5, 2, 3)


def test_datasheet_table_is_dense_and_matches_names():
    # dense figures: the A100's BF16 is 312 TFLOP/s (624 with sparsity); H100 SXM 989.5 (1979 sparse)
    assert DATASHEET_PEAKS["A100"]["bf16"] == 312e12 and DATASHEET_PEAKS["H100"]["bf16"] == 989.5e12
    for name, peaks in DATASHEET_PEAKS.items():
        assert peaks["fp32"] > 0
        for mode in ("tf32", "fp16", "bf16"):
            if mode in peaks:
                assert peaks[mode] >= peaks["fp32"], name
    assert "bf16" not in DATASHEET_PEAKS["V100-SXM2"] and "tf32" not in DATASHEET_PEAKS["T4"]
    assert datasheet_entry("Tesla V100-SXM2-16GB") == "V100-SXM2"
    assert datasheet_entry("NVIDIA H100 80GB HBM3") == "H100"
    assert datasheet_entry("NVIDIA L40S") == "L40S" and datasheet_entry("NVIDIA L40") is None
    assert datasheet_entry("NVIDIA GeForce RTX 4090") == "RTX 4090"
    assert datasheet_entry("NVIDIA H200") == "H200" and datasheet_entry("Tesla T4") == "T4"
    assert datasheet_entry("NVIDIA H100 NVL") == "H100 NVL" and datasheet_entry("NVIDIA H200 NVL") == "H200 NVL"
    assert bench.peak_flops("cuda", "bf16", gpu_name="NVIDIA H200 NVL")[0] == 835.5e12
    value, source = peak_flops("cuda", torch.bfloat16, gpu_name="NVIDIA A100-SXM4-40GB")
    assert value == 312e12 and source.startswith("datasheet:") and "dense" in source
    assert peak_flops("cuda", "bf16", gpu_name="Tesla T4") is None
    assert peak_flops("cpu", "fp32") is None
    with pytest.raises(ValueError, match="dtype"):
        peak_flops("cpu", "fp8")


def test_available_modes_and_reasons_on_cpu():
    assert available_modes("cpu") == ["fp32", "fp16", "bf16"]
    assert "CUDA" in bench.mode_unavailable_reason("tf32", "cpu")
    with pytest.raises(ValueError, match="mode"):
        bench.mode_unavailable_reason("int8", "cpu")


def test_cpu_features_parses_flags():
    info = "model name\t: Some CPU\nflags\t\t: fpu avx2 fma avx512f avx512_bf16\n"
    found = cpu_features(info)
    assert found["model"] == "Some CPU"
    assert found["flags"]["avx512_bf16"] and found["flags"]["avx2"] and not found["flags"]["amx_bf16"]
    assert cpu_features("")["flags"] == {}


def test_largest_batch_estimate():
    assert largest_batch_estimate(1000, 30, 100) == 30
    assert largest_batch_estimate(50, 30, 100) == 0
    with pytest.raises(ValueError, match="per_sample_bytes"):
        largest_batch_estimate(1000, 0, 100)
    with pytest.raises(TypeError, match="memory_budget_bytes"):
        largest_batch_estimate(1e9, 10, 0)


def test_benchmark_step_fp16_uses_a_scaler_and_restores_nothing_on_cpu():
    result = benchmark_step("fp16", width=8, depth=2, batch=4, device="cpu", warmup=1, repeats=2)
    assert result.error is None and result.timing.runs == 2 and result.peak_bytes is None
    assert result.state["optimizer state"][torch.float32] > 0
    assert result.activations.by_dtype[torch.float16] == 3 * 4 * 8 * 2
    skipped = benchmark_step("tf32", width=8, depth=1, batch=2, device="cpu")
    assert skipped.timing is None and "CUDA" in skipped.error
    with pytest.raises(ValueError, match="mode"):
        benchmark_step("fp64", width=8, depth=1, batch=2, device="cpu")
    with pytest.raises(ValueError, match="width"):
        benchmark_step("fp32", width=0, depth=1, batch=2, device="cpu")


def test_compile_failure_becomes_a_row(monkeypatch):
    def broken_compile(model):
        raise RuntimeError("no C++ compiler found\nmore detail")
    monkeypatch.setattr(torch, "compile", broken_compile)
    comparison = compare_precisions(width=8, depth=1, batch=2, device="cpu", modes=["fp32"], compile=(False, True),
                                    warmup=0, repeats=1)
    compiled = comparison.row("fp32", compiled=True)
    assert compiled.timing is None and compiled.error == "torch.compile failed: RuntimeError: no C++ compiler found"
    assert "no C++ compiler found" in comparison.table().text()


def test_compare_precisions_table_and_ratios():
    comparison = compare_precisions(width=8, depth=2, batch=4, device="cpu", warmup=0, repeats=2)
    assert [r.mode for r in comparison.rows] == list(MODES)
    assert comparison.rounds == 4 and comparison.baseline.timing.runs == 4 * 2
    assert len(comparison.baseline.round_medians) == 4 and comparison.baseline.spread >= 0
    assert comparison.speedup(comparison.baseline) == 1.0
    bf16 = comparison.row("bf16")
    expected = bf16.activations.total / comparison.baseline.activations.total
    assert comparison.activation_ratio(bf16) == pytest.approx(expected)
    text = comparison.table().text()
    assert "1.00×" in text and "not run: TF32" in text
    with pytest.raises(ValueError, match="modes"):
        compare_precisions(width=8, depth=1, batch=2, device="cpu", modes=["fp8"])
    with pytest.raises(TypeError, match="compile"):
        compare_precisions(width=8, depth=1, batch=2, device="cpu", compile=True)


def test_tf32_flags_are_restored():
    before = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
    with bench.tf32_enabled(not before[0]):
        assert torch.backends.cuda.matmul.fp32_precision == ("ieee" if before[0] else "tf32")
    # restored: the legacy flags read as before (no "mix of the legacy and new APIs" error)
    assert (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32) == before
    with pytest.raises(TypeError, match="enabled"):
        with bench.tf32_enabled("yes"):
            pass


def test_tf32_enabled_works_after_the_new_fp32_precision_api():
    # torch >= 2.9: once fp32_precision was set, *reading* the legacy allow_tf32 flag raises; tf32_enabled
    # must still save, set and restore
    assert bench.tf32_api() == "fp32_precision"  # the installed torch (2.13) has the new API
    matmul = torch.backends.cuda.matmul
    before = matmul.fp32_precision
    try:
        matmul.fp32_precision = "tf32"
        with pytest.raises(RuntimeError, match="mix of the legacy and new APIs"):
            _ = matmul.allow_tf32
        with bench.tf32_enabled(False):
            assert matmul.fp32_precision == "ieee" and torch.backends.cudnn.conv.fp32_precision == "ieee"
        assert matmul.fp32_precision == "tf32"
        settings = bench.fp32_precision_settings()
        assert settings["torch.backends.cuda.matmul.fp32_precision"] == "tf32"
        assert settings["torch.get_float32_matmul_precision()"].startswith("unreadable")
    finally:
        matmul.fp32_precision = before
    assert matmul.allow_tf32 is False  # "none" again: the legacy flag is readable


def test_mlp_step_flops_leaves_out_the_inputs_gradient():
    assert bench.mlp_step_flops(256, 4, 64) == 11 * 2 * 64 * 256 * 256
    row = benchmark_step("fp32", width=8, depth=2, batch=4, device="cpu", warmup=0, repeats=1)
    assert row.step_flops == 5 * 2 * 4 * 8 * 8
    assert row.achieved == pytest.approx(row.step_flops / row.timing.median)
    with pytest.raises(ValueError, match="depth"):
        bench.mlp_step_flops(8, 0, 4)


def test_bf16_sweep_reports_rounds_spread_and_stops_on_budget():
    sweep = bench.bf16_sweep((8, 16, 4096), depth=1, batch=4, rounds=3, repeats=1, warmup=0, budget_seconds=5)
    assert [p.width for p in sweep.points] == [8, 16]  # 4096 would take far more than the budget
    assert sweep.stopped.startswith("stopped before width 4096")
    for p in sweep.points:
        assert len(p.fp32) == len(p.low) == 3 and len(p.ratios) == 3
        assert min(p.ratios) <= p.speedup <= max(p.ratios) and p.spread >= 0
    lines = sweep.lines()
    assert len(lines) == 4 and "3 rounds per width" in lines[0]
    assert isinstance(sweep.verdict(), str)
    with pytest.raises(ValueError, match="widths"):
        bench.bf16_sweep((16, 8))
    with pytest.raises(ValueError, match="mode"):
        bench.bf16_sweep((8,), mode="fp32")


def test_bf16_sweep_verdict_and_noise_flag_from_known_times():
    fast = bench.SweepPoint(512, 4, 8, fp32=(2.0, 2.0, 2.0), low=(1.0, 1.0, 1.0))
    slow = bench.SweepPoint(64, 4, 8, fp32=(1.0, 1.0, 1.0), low=(2.0, 2.0, 2.0))
    noisy = bench.SweepPoint(128, 4, 8, fp32=(1.0, 2.0, 1.0), low=(1.0, 1.0, 1.0))
    sweep = bench.Bf16Sweep("bf16", "cpu", (slow, noisy, fast), rounds=3, noise_threshold=0.25)
    assert sweep.pays_off_from() == 512 and sweep.noisy == (noisy,)
    # review 0506 M4: a noisy width means no verdict at all
    assert sweep.verdict().startswith("no verdict") and "128" in sweep.verdict()
    clean = bench.Bf16Sweep("bf16", "cpu", (slow, fast), rounds=3, noise_threshold=0.25)
    assert "paid off (> 1.10× the fp32 speed in every round) from width 512" in clean.verdict()
    never = bench.Bf16Sweep("bf16", "cpu", (slow,), rounds=3, noise_threshold=0.25)
    assert never.pays_off_from() is None and "did not pay off" in never.verdict()
    assert "Only one width was measured" in never.verdict()
    # the one rule: 1.08× in every round is no clear difference, so it does not pay off
    marginal = bench.SweepPoint(1024, 4, 8, fp32=(1.08, 1.08, 1.08), low=(1.0, 1.0, 1.0))
    assert bench.Bf16Sweep("bf16", "cpu", (slow, marginal), rounds=3, noise_threshold=0.25).pays_off_from() is None


def test_compare_precisions_verdict_uses_the_one_rule():
    """Review 0506 M3: the step comparison's verdict is judge's (CLEAR_DIFFERENCE, every round the same way, no
    verdict when a row's rounds disagree), not thresholds of its own."""
    def row(mode, medians):
        return bench.StepResult(mode, False, 8, 1, 2, "cpu", timing=bench.Timing(tuple(medians), 0),
                                round_medians=tuple(medians))

    base = row("fp32", (2.0, 2.0, 2.0, 2.0))
    steady = bench.Comparison((base, row("bf16", (1.0, 1.0, 1.0, 1.0)), row("fp16", (1.9, 1.9, 1.9, 1.9)),
                               row("tf32", (4.0, 4.0, 4.0, 4.0))), rounds=4)
    assert steady.verdict(steady.row("bf16")) == "faster"
    assert steady.verdict(steady.row("fp16")) == "no clear difference"  # 1.05×: within CLEAR_DIFFERENCE
    assert steady.verdict(steady.row("tf32")) == "slower"
    busy = bench.Comparison((base, row("bf16", (1.0, 3.0, 1.0, 1.0))), rounds=4)
    assert busy.warning and busy.verdict(busy.row("bf16")).startswith("no verdict")
    skipped = bench.StepResult("tf32", False, 8, 1, 2, "cpu", error="CUDA only")
    assert bench.Comparison((base, skipped)).verdict(skipped) == "not run: CUDA only"


def test_compare_products_prints_the_flops_its_ratio_divides():
    """Review 0506 nit: the FLOP/s printed and the ratio printed come from the same statistic."""
    c = bench.compare_products({"a": (32, 32, 32, "fp32"), "b": (31, 31, 31, "fp32")}, rounds=4, repeats=1)
    assert c.ratio("a", "b") == pytest.approx(c.achieved("a") / c.achieved("b"))
    assert bench.format_flops(c.achieved("a")) in c.line("a", "b")


def test_docstring_examples():
    assert doctest.testmod(bench).failed == 0


def test_memory_summary_and_cast_cost():
    result = benchmark_step("bf16", width=8, depth=2, batch=4, device="cpu", warmup=0, repeats=1)
    summary = bench.memory_summary(result)
    params = 2 * (8 * 8 + 8) * 4
    assert summary.parameters == params and summary.gradients == params
    assert summary.optimizer_state == 2 * params + 4 * 4  # exp_avg, exp_avg_sq, 4 step counters
    assert summary.weight_copies == 8 * 8 * 2  # the second layer's bf16 weight
    assert summary.activations == result.activations.total and summary.per_sample * 4 == summary.activations
    assert summary.fixed == 4 * params + 16 + 128 and summary.total == summary.fixed + summary.activations
    assert summary.total_at(4) == summary.total and summary.total_at(40) == summary.fixed + 10 * summary.activations
    with pytest.raises(TypeError, match="result"):
        bench.memory_summary("row")
    timing = bench.cast_cost(bench.make_mlp(8, 2), torch.bfloat16, device="cpu", warmup=0, repeats=2)
    assert timing.runs == 2
    with pytest.raises(ValueError, match="dtype"):
        bench.cast_cost(bench.make_mlp(8, 1), torch.float32, device="cpu")


def test_formats_never_print_an_exponent_at_a_unit_boundary():
    """Found as a flaky lesson-06 cell: 999.6 µs printed as '1e+03 µs', which the timing sanitizer cannot read."""
    from ampcourse.bench import format_flops, format_time

    assert format_time(0.0009996) == "1 ms" and format_time(0.9996) == "1 s" and format_time(999.6e-9) == "1 µs"
    assert format_time(0.000123) == "123 µs" and format_time(1234.0) == "1230 s"
    assert format_flops(999.6e9) == "1 TFLOP/s" and format_flops(123e9) == "123 GFLOP/s"


class DriftingMachine:
    """Every training step takes 1 s plus ``drift`` s for each step run before it: a machine that slows down
    steadily (heat, another program starting). ``clock`` is the fake clock; ``log`` the modes in the order run."""

    def __init__(self, drift):
        self.now, self.drift, self.log = 0.0, drift, []

    def clock(self):
        return self.now

    def patch(self, monkeypatch):
        real = bench.steps.train_step_fn

        def step_fn(model, optimizer, scaler, x, target, mode, device_type):
            step = real(model, optimizer, scaler, x, target, mode, device_type)

            def timed():
                step()
                self.now += 1.0 + self.drift * len(self.log)
                self.log.append(mode)
            return timed
        monkeypatch.setattr(bench.steps, "train_step_fn", step_fn)  # where _prepare_step looks it up


def test_compare_precisions_interleaves_so_a_drift_lands_on_no_mode(monkeypatch):
    machine = DriftingMachine(drift=0.01)
    machine.patch(monkeypatch)
    modes = ["fp32", "fp16", "bf16"]
    comparison = compare_precisions(width=8, depth=1, batch=2, device="cpu", modes=modes, warmup=1, repeats=2,
                                    rounds=4, clock=machine.clock)
    # set-up: each row's warm-up step; then 4 rounds of 2 timed steps per row, every other round reversed
    timed = machine.log[len(modes):]
    assert machine.log[:len(modes)] == modes
    rounds = [timed[i:i + 6] for i in range(0, 24, 6)]
    forward = [m for m in modes for _ in range(2)]
    assert rounds == [forward, forward[::-1], forward, forward[::-1]]
    # every mode costs the same: the steady slow-down reaches all of them alike
    for row in comparison.rows[1:]:
        assert comparison.speedup(row) == pytest.approx(1.0, abs=1e-12)
        assert row.timing.runs == 8 and len(row.round_medians) == 4
    assert comparison.warning is None
    # the same machine, one round in a fixed order: the later modes take the blame
    monkeypatch.undo()
    late = DriftingMachine(drift=0.01)
    late.patch(monkeypatch)
    once = compare_precisions(width=8, depth=1, batch=2, device="cpu", modes=modes, warmup=1, repeats=2, rounds=1,
                              clock=late.clock)
    assert once.speedup(once.row("fp16")) < 0.99 and once.speedup(once.row("bf16")) < once.speedup(once.row("fp16"))


def test_a_comparison_warns_when_its_rounds_disagree(monkeypatch):
    machine = DriftingMachine(drift=0.5)  # a machine that slows down fast: later rounds are much slower
    machine.patch(monkeypatch)
    comparison = compare_precisions(width=8, depth=1, batch=2, device="cpu", modes=["fp32", "bf16"], warmup=0,
                                    repeats=1, rounds=4, clock=machine.clock)
    assert comparison.noisy == comparison.rows and all(r.spread > 0.25 for r in comparison.rows)
    assert comparison.warning.startswith("Warning: the 4 rounds of fp32, bf16 disagreed by up to")
    assert "rerun" in comparison.warning and "Warning" not in comparison.table().text()
    row = dict(mode="fp32", compiled=False, width=8, depth=1, batch=2, device="cpu")
    steady = bench.StepResult(**row, timing=Timing((1.0, 1.1, 1.2, 1.0), 0), round_medians=(1.0, 1.1, 1.2, 1.0))
    jumpy = bench.StepResult(**{**row, "mode": "bf16"}, timing=Timing((1.0, 2.0), 0), round_medians=(1.0, 2.0))
    skipped = bench.StepResult(**{**row, "mode": "tf32"}, error="not run: CUDA only")
    mixed = bench.Comparison((steady, jumpy, skipped), rounds=2, noise_threshold=0.25)
    assert steady.spread == pytest.approx(0.2 / 1.05) and skipped.spread is None
    assert mixed.noisy == (jumpy,) and "of bf16 disagreed by up to 67%" in mixed.warning
    with pytest.raises(ValueError, match="rounds"):
        compare_precisions(width=8, depth=1, batch=2, device="cpu", rounds=0)
    with pytest.raises(ValueError, match="noise_threshold"):
        compare_precisions(width=8, depth=1, batch=2, device="cpu", noise_threshold=-1)
    with pytest.raises(ValueError, match=r"rounds × repeats must be at most 10000 .*1,000,000 × 5"):
        compare_precisions(width=8, depth=1, batch=2, device="cpu", rounds=10**6)


def test_compare_products_interleaves_and_judges_with_one_threshold():
    """Review r2 #9: the lesson's timed pairs run in alternating rounds; a verdict needs the median beyond
    CLEAR_DIFFERENCE and every round the same way."""
    c = bench.compare_products({"a": (32, 32, 32, "fp32"), "b": (31, 31, 31, "fp32")}, rounds=3, repeats=1)
    assert c.rounds == 3 and len(c.ratios("a", "b")) == 3 and "rounds" in c.line("a", "b")
    fake = bench.ProductComparison(("x", "y"), {"x": c.results["a"], "y": c.results["a"]},
                                   {"x": (1.0, 1.0, 1.0), "y": (2.0, 2.0, 0.9)}, 3, noise_threshold=10)
    assert fake.verdict("x", "y") == "no clear difference"  # one round disagrees
    fake = bench.ProductComparison(("x", "y"), {"x": c.results["a"], "y": c.results["a"]},
                                   {"x": (1.0, 1.0, 1.0), "y": (2.0, 2.0, 0.9)}, 3)
    assert fake.noisy("x", "y") and fake.verdict("x", "y").startswith("no verdict") and "noisy" in fake.line("x", "y")
    fake = bench.ProductComparison(("x", "y"), {"x": c.results["a"], "y": c.results["a"]},
                                   {"x": (1.0, 1.0, 1.0), "y": (2.0, 2.0, 1.9)}, 3)
    assert fake.verdict("x", "y") == "faster" and fake.verdict("y", "x") == "slower"
    with pytest.raises(ValueError, match="cases"):
        bench.compare_products({})


def test_bf16_hardware_comes_from_the_cpu_flags():
    assert bench.has_bf16_hardware({"flags": {"avx512_bf16": True}})
    assert bench.has_bf16_hardware({"flags": {"amx_bf16": True, "avx512_bf16": False}})
    assert not bench.has_bf16_hardware({"flags": {"avx2": True}})


def test_mkldnn_fp32_precision_is_restored():
    before = torch.backends.mkldnn.matmul.fp32_precision
    with bench.mkldnn_fp32_precision("bf16"):
        assert torch.backends.mkldnn.matmul.fp32_precision == "bf16"
    assert torch.backends.mkldnn.matmul.fp32_precision == before
    with pytest.raises(ValueError, match="precision"):
        with bench.mkldnn_fp32_precision("fp8"):
            pass


def test_native_stderr_is_silenced_and_restored(capfd):
    import os

    with bench.native_stderr_silenced():
        os.write(2, b"USDT: hidden\n")
    os.write(2, b"shown\n")
    err = capfd.readouterr().err
    assert "hidden" not in err and "shown" in err


def test_the_benchmarked_step_is_public_and_printable():
    """Review r2 #10: lesson 06 prints the step it times."""
    from ampcourse.source import code_of

    assert "scaler.scale(loss).backward()" in code_of(bench.train_step_fn)
    assert "GradScaler" in code_of(bench.mlp_problem)


def _step_row(mode, compiled=False):
    return bench.StepResult(mode, compiled, 8, 1, 2, "cpu", timing=bench.Timing((1.0,), 0), round_medians=(1.0,))


@pytest.mark.parametrize("rows, rounds, threshold, error, words", [
    ((), 1, 0.25, ValueError, "at least one StepResult"),
    ("fp32", 1, 0.25, TypeError, "rows must be a tuple of StepResult"),
    (({"mode": "fp32"},), 1, 0.25, TypeError, "rows must be a StepResult"),
    ((_step_row("fp32"), _step_row("fp32")), 1, 0.25, ValueError, "twice: fp32"),
    ((_step_row("fp32"), _step_row("bf16"), _step_row("bf16")), 1, 0.25, ValueError, "twice: bf16"),
    ((_step_row("fp32"),), 0, 0.25, ValueError, "rounds"),
    ((_step_row("fp32"),), 1, -1, ValueError, "noise_threshold"),
], ids=["empty", "a str", "a dict row", "fp32 twice", "bf16 twice", "zero rounds", "negative threshold"])
def test_a_comparison_refuses_rows_it_cannot_compare(rows, rounds, threshold, error, words):
    """Reliability audit 29: Comparison(rows=(), rounds=0, noise_threshold=-1) and duplicate rows were accepted."""
    with pytest.raises(error, match=words):
        bench.Comparison(rows, rounds=rounds, noise_threshold=threshold)


def test_a_comparison_names_a_non_row_passed_to_its_methods():
    """Reliability audit 29: speedup/activation_ratio/verdict on a non-row raised a raw AttributeError."""
    comparison = bench.Comparison((_step_row("fp32"), _step_row("fp32", compiled=True)))
    for method in (comparison.speedup, comparison.activation_ratio, comparison.verdict):
        with pytest.raises(TypeError, match="row must be a StepResult"):
            method("fp32")
    assert comparison.speedup(comparison.row("fp32", compiled=True)) == 1.0
    assert comparison.rows == tuple(comparison.rows)
