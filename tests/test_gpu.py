"""Tests that need a CUDA GPU (marked ``gpu``; they skip without one, see tests/conftest.py).

``python -m ampcourse gpucheck`` runs them on a GPU machine; the CPU suite checks the same
package code against simulated CUDA (autocast_lists) or the CPU GradScaler (scaler_sim).
"""

import pytest
import torch
import torch.nn.functional as F

from ampcourse import bench
from ampcourse.autocast_lists import EXAMPLES, observe, registered_ops
from ampcourse.device import describe, pick_device, recommend

pytestmark = pytest.mark.gpu


def test_the_course_picks_the_gpu_and_recommends_by_capability():
    device = pick_device()
    assert device.type == "cuda"
    capability = torch.cuda.get_device_capability(device)
    rec = recommend("cuda", capability)
    assert rec.dtype == (torch.bfloat16 if capability >= (8, 0) else torch.float16)
    assert describe(device).name == torch.cuda.get_device_name(device)


def test_real_cuda_autocast_behaves_as_the_registrations_say(figures):
    cuda = registered_ops("cuda")
    checked, disagree = 0, []
    for op in EXAMPLES:
        if cuda.get(op) not in ("lower_precision_fp", "fp32", "promote"):
            continue
        seen = observe(op, "cuda", torch.float16)
        assert not any(run.simulated for run in seen.runs), "a GPU is present: nothing should be simulated"
        checked += 1
        if not seen.agrees:
            disagree.append(f"{op}: registered {seen.registered}, observed {seen.observed}")
    assert not disagree, "\n".join(disagree)
    figures(f"real CUDA autocast: {checked} registered ops behave as their registration says")


def test_binary_cross_entropy_is_refused_under_cuda_autocast():
    x = torch.rand(4, device="cuda")
    with torch.autocast(device_type="cuda", dtype=torch.float16), pytest.raises(RuntimeError, match="unsafe"):
        F.binary_cross_entropy(torch.sigmoid(x), torch.ones_like(x))


def test_bench_uses_the_cuda_allocator_and_events():
    device = torch.device("cuda")
    a = torch.randn(1024, 1024, device=device)
    timing = bench.time_fn(lambda: a @ a, warmup=2, repeats=5, device=device)
    assert len(timing.times) == 5 and timing.median > 0
    peak = bench.peak_memory_bytes(lambda: torch.empty(64 * 2**20, dtype=torch.uint8, device=device), device)
    assert peak is not None and peak >= 64 * 2**20
    assert bench.peak_flops(device, torch.bfloat16) is None or bench.peak_flops(device, torch.bfloat16)[0] > 1e12


def test_fp16_autocast_saves_half_size_activations_on_cuda():
    layer = torch.nn.Linear(512, 512, device="cuda")
    x = torch.randn(256, 512, device="cuda", requires_grad=True)

    def step(dtype):
        def run():
            with torch.autocast(device_type="cuda", dtype=dtype, enabled=dtype != torch.float32):
                layer(x).relu().sum().backward()
        return run

    fp32 = bench.saved_activation_bytes(step(torch.float32), layer)
    fp16 = bench.saved_activation_bytes(step(torch.float16), layer)
    # fp32 saves the ReLU output (x is a leaf: counted like a parameter); fp16 saves the ReLU output and
    # autocast's fp16 copy of x, each half the size, plus a fp16 copy of the weight.
    assert fp32.by_dtype == {torch.float32: 256 * 512 * 4}
    assert fp16.by_dtype == {torch.float16: 2 * 256 * 512 * 2}
    assert fp16.parameter_copies == {torch.float16: 512 * 512 * 2}
