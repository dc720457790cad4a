import pytest
import torch

from ampcourse import device


@pytest.mark.parametrize(
    ("capability", "generation", "dtype", "scaler"),
    [
        ((12, 0), "Blackwell (consumer)", torch.bfloat16, False),
        ((10, 0), "Blackwell", torch.bfloat16, False),
        ((9, 0), "Hopper", torch.bfloat16, False),
        ((8, 9), "Ada Lovelace", torch.bfloat16, False),
        ((8, 6), "Ampere", torch.bfloat16, False),
        ((8, 0), "Ampere", torch.bfloat16, False),
        ((7, 5), "Turing", torch.float16, True),
        ((7, 0), "Volta", torch.float16, True),
        ((7, 2), "Volta", torch.float16, True),
        ((6, 2), "Pascal", torch.float16, True),
        ((6, 1), "Pascal", torch.float32, False),
        ((6, 0), "Pascal", torch.float16, True),
        ((5, 3), "Maxwell or older", torch.float16, True),
        ((5, 2), "Maxwell or older", torch.float32, False),
        ((3, 7), "Maxwell or older", torch.float32, False),
    ],
)
def test_recommendation_follows_the_gpu_generation(capability, generation, dtype, scaler):
    rec = device.recommend("cuda", capability)
    assert device.generation(capability)[0] == generation
    assert (rec.dtype, rec.use_grad_scaler) == (dtype, scaler)
    assert generation.split()[0] in rec.reason


def test_cpu_and_mps_follow_torchs_autocast_defaults():
    cpu, mps = device.recommend("cpu"), device.recommend("mps")
    assert (cpu.dtype, cpu.use_grad_scaler) == (torch.bfloat16, False)
    assert mps.dtype == torch.get_autocast_dtype("mps")
    assert mps.use_grad_scaler == (mps.dtype == torch.float16)


def test_env_variable_overrides_and_default_order(monkeypatch):
    assert device.pick_device({"AMPCOURSE_DEVICE": "cpu"}) == torch.device("cpu")
    assert device.pick_device({"AMPCOURSE_DEVICE": " CPU "}) == torch.device("cpu")
    monkeypatch.setattr(device, "available_device_types", lambda: ["cuda", "mps", "cpu"])
    assert device.pick_device({}) == torch.device("cuda")
    assert device.pick_device({"AMPCOURSE_DEVICE": "mps"}) == torch.device("mps")
    monkeypatch.setattr(device, "available_device_types", lambda: ["mps", "cpu"])
    assert device.pick_device({}) == torch.device("mps")


def test_asking_for_a_missing_device_names_what_is_there(monkeypatch):
    monkeypatch.setattr(device, "available_device_types", lambda: ["cpu"])
    with pytest.raises(ValueError, match="no cuda device; available here: cpu"):
        device.pick_device({"AMPCOURSE_DEVICE": "cuda"})
    with pytest.raises(ValueError, match=r"AMPCOURSE_DEVICE must be one of \('cuda', 'mps', 'cpu'\)"):
        device.pick_device({"AMPCOURSE_DEVICE": "tpu"})


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match="device_type must be one of"):
        device.recommend("gpu")
    with pytest.raises(TypeError, match="device_type must be a str"):
        device.recommend(0)
    with pytest.raises(ValueError, match="needs the compute capability"):
        device.recommend("cuda")
    with pytest.raises(ValueError, match="capability only applies"):
        device.recommend("cpu", (8, 0))
    with pytest.raises(TypeError, match="capability must be a"):
        device.generation("8.0")


def test_describe_reports_a_faked_gpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda d=None: (7, 0))
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda d=None: "Tesla V100-SXM2-16GB")
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: False)
    monkeypatch.setattr(torch.backends.cuda, "is_built", lambda: True)  # describe checks CUDA is there
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    hw = device.describe(torch.device("cuda"))
    text = str(hw)
    assert hw.generation == "Volta" and hw.tensor_cores and not hw.bf16_supported
    assert "compute capability    : 7.0" in text
    assert "recommended AMP dtype : float16" in text and "GradScaler needed     : yes" in text


def test_describe_this_machine():
    hw = device.describe()
    assert hw.device == device.pick_device()
    assert hw.torch_version == torch.__version__
    assert "recommended AMP dtype" in str(hw)



def _cuda_is_there(monkeypatch):
    """describe() refuses 'cuda' on a CPU-only torch (a clear ValueError): fake a CUDA build with one GPU."""
    monkeypatch.setattr(torch.backends.cuda, "is_built", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)


def test_describe_reads_native_bf16_from_the_device_asked_not_the_current_one(monkeypatch):
    """torch.cuda.is_bf16_supported() asks the *current* device (and counts emulation by default, so a V100
    says True): describe reads the capability of the device it was given."""
    _cuda_is_there(monkeypatch)
    capabilities = {0: (8, 0), 1: (7, 5)}  # current device 0 is an A100, device 1 a T4
    names = {0: "NVIDIA A100-SXM4-40GB", 1: "Tesla T4"}
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    index = lambda d: 0 if d is None or torch.device(d).index is None else torch.device(d).index  # noqa: E731
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda d=None: capabilities[index(d)])
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda d=None: names[index(d)])
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: True)  # the current device's answer
    t4 = device.describe(torch.device("cuda", 1))
    assert not t4.bf16_supported and "native bfloat16       : no" in str(t4)
    assert t4.generation == "Turing" and t4.tensor_cores and t4.recommendation.dtype == torch.float16
    a100 = device.describe(torch.device("cuda", 0))
    assert a100.bf16_supported and a100.recommendation.dtype == torch.bfloat16


def test_describe_knows_gtx16_has_no_tensor_cores(monkeypatch):
    _cuda_is_there(monkeypatch)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda d=None: (7, 5))
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda d=None: "NVIDIA GeForce GTX 1660 Ti")
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: False)
    hw = device.describe(torch.device("cuda"))
    assert not hw.tensor_cores and "GTX 16xx" in hw.generation
    assert "Tensor Cores          : no" in str(hw)


@pytest.mark.parametrize(("arch", "bf16"), [("gfx942:sramecc+:xnack-", True), ("gfx90a", True),
                                           ("gfx1100", True), ("gfx906", False), ("", None)])
def test_describe_on_rocm_reads_the_gfx_architecture(monkeypatch, arch, bf16):
    """On ROCm torch.cuda.is_bf16_supported() is True for every GPU (torch/cuda/__init__.py), and the
    capability is the gfx version: describe reads gcnArchName instead."""
    _cuda_is_there(monkeypatch)
    monkeypatch.setattr(torch.version, "hip", "6.2.0")
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda d=None: (9, 4))  # gfx942 (MI300)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda d=None: "AMD Instinct GPU")
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda d=None: type("P", (), {"gcnArchName": arch}))
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: True)
    hw = device.describe(torch.device("cuda"))
    assert "Hopper" not in str(hw) and "ROCm" in hw.generation and hw.capability is None
    assert hw.bf16_supported is bf16
    rec = hw.recommendation
    assert (rec.dtype, rec.use_grad_scaler) == ((torch.bfloat16, False) if bf16 else (torch.float16, True))
    assert ("no bfloat16" in rec.reason) == (not bf16)


def test_pascal_recommendation_agrees_with_its_reason():
    """6.1 (GTX 10xx): FP16 is slow, so the recipe is FP32 and the reason says so; 6.0 (P100): float16 +
    scaler, and the reason says its FP16 is fast. No recommendation's dtype contradicts its reason."""
    gtx, p100 = device.recommend("cuda", (6, 1)), device.recommend("cuda", (6, 0))
    assert (gtx.dtype, gtx.use_grad_scaler) == (torch.float32, False) and "train in FP32" in gtx.reason
    assert (p100.dtype, p100.use_grad_scaler) == (torch.float16, True) and "twice the FP32 rate" in p100.reason
    for major in range(13):
        for minor in range(10):
            rec = device.recommend("cuda", (major, minor))
            assert ("train in FP32" in rec.reason) == (rec.dtype == torch.float32)
            assert rec.use_grad_scaler == (rec.dtype == torch.float16)


def test_recipe_rules_are_the_rule_recommend_applies():
    lines = device.recipe_rules()
    assert len(lines) == len(device.RECIPE_RULES) == 4
    for rule, line in zip(device.RECIPE_RULES, lines, strict=True):
        assert line.startswith(rule.condition) and rule.why in line
    for capability in [(12, 1), (10, 3), (10, 0), (9, 0), (8, 9), (7, 5), (6, 2), (6, 1), (6, 0), (5, 3), (3, 0)]:
        first = next(rule for rule in device.RECIPE_RULES if rule.holds(capability))
        rec = device.recommend("cuda", capability)
        assert (rec.dtype, rec.use_grad_scaler) == (first.dtype, first.use_grad_scaler)
        assert first.why in rec.reason


def test_cpu_bf16_features_reads_the_flags():
    assert device.cpu_bf16_features("model name : x\nflags : fpu avx512_bf16 amx_bf16\n") == (
        "avx512_bf16", "amx_bf16")
    assert device.cpu_bf16_features("flags\t\t: fpu sse2 avx2 fma\n") == ()
    assert device.cpu_bf16_features("Processor : ARMv8\nFeatures : fp asimd\n") == ()
    graviton3 = "processor\t: 0\nBogoMIPS\t: 2100.00\nFeatures\t: fp asimd sve i8mm bf16 svebf16 rng\n"
    assert device.cpu_bf16_features(graviton3) == ("bf16", "svebf16")
    assert device.cpu_bf16_features("processor : 0\nvendor_id : x\n") is None
    with pytest.raises(TypeError, match="cpuinfo must be"):
        device.cpu_bf16_features(3)


def test_describe_reports_the_cpus_bf16_flags(monkeypatch):
    monkeypatch.setattr(device, "cpu_bf16_features", lambda: ())
    hw = device.describe(torch.device("cpu"))
    assert hw.bf16_supported is False and "likely slower than FP32" in str(hw)
    monkeypatch.setattr(device, "cpu_bf16_features", lambda: ("amx_bf16",))
    assert "native bfloat16       : yes (CPU flags amx_bf16)" in str(device.describe(torch.device("cpu")))
    monkeypatch.setattr(device, "cpu_bf16_features", lambda: None)
    assert "native bfloat16       : unknown" in str(device.describe(torch.device("cpu")))
