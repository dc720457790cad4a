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

