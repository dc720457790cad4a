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
        ((6, 1), "Pascal or older", torch.float16, True),
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


def test_describe_asks_cuda_for_native_bf16_not_emulation(monkeypatch):
    """A V100 or T4 can store bfloat16, so is_bf16_supported() says True by default (emulation counted)."""
    _cuda_is_there(monkeypatch)
    asked = {}

    def is_bf16_supported(including_emulation=True):
        asked["including_emulation"] = including_emulation
        return including_emulation  # what torch answers on a V100: True with emulation, False without

    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda d=None: (7, 5))
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda d=None: "Tesla T4")
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", is_bf16_supported)
    hw = device.describe(torch.device("cuda"))
    assert asked == {"including_emulation": False}
    assert not hw.bf16_supported and "native bfloat16       : no" in str(hw)
    assert hw.generation == "Turing" and hw.tensor_cores


def test_describe_knows_gtx16_has_no_tensor_cores(monkeypatch):
    _cuda_is_there(monkeypatch)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda d=None: (7, 5))
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda d=None: "NVIDIA GeForce GTX 1660 Ti")
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: False)
    hw = device.describe(torch.device("cuda"))
    assert not hw.tensor_cores and "GTX 16xx" in hw.generation
    assert "Tensor Cores          : no" in str(hw)


def test_describe_does_not_read_a_rocm_gfx_version_as_an_nvidia_generation(monkeypatch):
    _cuda_is_there(monkeypatch)
    monkeypatch.setattr(torch.version, "hip", "6.2.0")
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda d=None: (9, 4))  # gfx942 (MI300)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda d=None: "AMD Instinct MI300X")
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: True)
    hw = device.describe(torch.device("cuda"))
    assert "Hopper" not in str(hw) and "ROCm" in hw.generation
    assert hw.capability is None and hw.recommendation.dtype == torch.bfloat16


def test_pascal_advice_says_fp16_is_for_memory_only():
    reason = device.recommend("cuda", (6, 1)).reason
    assert "much slower than FP32" in reason and "memory" in reason


def test_cpu_bf16_features_reads_the_flags():
    assert device.cpu_bf16_features("model name : x\nflags : fpu avx512_bf16 amx_bf16\n") == (
        "avx512_bf16", "amx_bf16")
    assert device.cpu_bf16_features("flags\t\t: fpu sse2 avx2 fma\n") == ()
    assert device.cpu_bf16_features("Processor : ARMv8\nFeatures : fp asimd\n") is None
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
