"""Which device the course runs on, what it can do, and which AMP recipe suits it.

Every notebook and every check picks its device here, so one environment variable moves the
whole course::

    AMPCOURSE_DEVICE=cpu jupyter lab      # force the CPU even on a GPU machine

The order without the variable is CUDA, then Apple MPS, then CPU.

The recommendation follows the hardware generations (NVIDIA compute capability):

=====================  ==========  ======================  =========================================
GPU generation         capability  recommended AMP dtype   GradScaler
=====================  ==========  ======================  =========================================
Blackwell              10.x, 12.x  bfloat16                no (bf16 has FP32's exponent range)
Hopper                 9.0         bfloat16                no
Ada Lovelace           8.9         bfloat16                no
Ampere                 8.0, 8.6    bfloat16                no
Turing                 7.5         float16                 yes (no bf16 Tensor Cores)
Volta                  7.0, 7.2    float16                 yes (first Tensor Cores, FP16 only)
Pascal and older       < 7.0       float16                 yes (no Tensor Cores: memory savings only)
=====================  ==========  ======================  =========================================

Two limits of a table keyed on the capability alone, which :func:`describe` handles from the device
name: the GTX 16xx cards (TU11x) are capability 7.5 but have no Tensor Cores; and below 7.0 most
consumer cards (Pascal GTX 10xx, capability 6.1) run FP16 arithmetic far slower than FP32, so there
float16 is a memory measure only and plain FP32 is usually the faster choice. On ROCm builds
(``torch.version.hip``) the "capability" is AMD's gfx version, not NVIDIA's: :func:`describe` does
not map it to an NVIDIA generation.

CPU autocast defaults to bfloat16 (no scaler needed); MPS autocast defaults to float16, which needs
a scaler. Those two defaults are read from the installed torch (``torch.get_autocast_dtype``).
Whether a CPU has native bfloat16 arithmetic (AVX512-BF16 or AMX) decides whether bfloat16 autocast
is faster or slower than FP32 on it (lesson 06 measures it): :func:`cpu_bf16_features` reads the flags.
"""

from __future__ import annotations

import os
import platform
from collections.abc import Mapping
from dataclasses import dataclass

import torch

ENV_VAR = "AMPCOURSE_DEVICE"
DEVICE_TYPES = ("cuda", "mps", "cpu")

# (first capability of the generation, name, has bf16 Tensor Cores, has Tensor Cores at all)
_GENERATIONS = (
    ((12, 0), "Blackwell (consumer)", True, True),
    ((10, 0), "Blackwell", True, True),
    ((9, 0), "Hopper", True, True),
    ((8, 9), "Ada Lovelace", True, True),
    ((8, 0), "Ampere", True, True),
    ((7, 5), "Turing", False, True),
    ((7, 0), "Volta", False, True),
    ((0, 0), "Pascal or older", False, False),
)


@dataclass(frozen=True)
class Recommendation:
    """The AMP recipe for one device: which dtype autocast should use, and whether to scale."""

    device_type: str
    dtype: torch.dtype
    use_grad_scaler: bool
    reason: str

    @property
    def dtype_name(self) -> str:
        """``"bfloat16"`` or ``"float16"``."""
        return str(self.dtype).removeprefix("torch.")


@dataclass(frozen=True)
class Hardware:
    """What :func:`describe` found: plain data, printable in a notebook.

    ``bf16_supported`` means *native* bfloat16 arithmetic (bf16 Tensor Cores on NVIDIA, AVX512-BF16 or AMX
    on x86 CPUs), not merely that bfloat16 tensors can be stored; None when it cannot be read (a CPU
    without ``/proc/cpuinfo`` flags). ``bf16_note`` says where the answer came from.
    """

    device: torch.device
    name: str
    torch_version: str
    capability: tuple[int, int] | None
    generation: str | None
    tensor_cores: bool
    bf16_supported: bool | None
    recommendation: Recommendation
    bf16_note: str = ""

    def lines(self) -> list[str]:
        """The report as ``label: value`` lines."""
        rec = self.recommendation
        rows = [
            ("device", str(self.device)),
            ("hardware", self.name),
            ("torch", self.torch_version),
        ]
        if self.capability is not None:
            rows.append(("compute capability", f"{self.capability[0]}.{self.capability[1]}"))
            rows.append(("generation", self.generation or "unknown"))
        rows += [
            ("Tensor Cores", "yes" if self.tensor_cores else "no"),
            ("native bfloat16", {True: "yes", False: "no", None: "unknown"}[self.bf16_supported]
             + (f" ({self.bf16_note})" if self.bf16_note else "")),
            ("recommended AMP dtype", rec.dtype_name),
            ("GradScaler needed", "yes" if rec.use_grad_scaler else "no"),
            ("why", rec.reason),
        ]
        width = max(len(label) for label, _ in rows)
        return [f"{label:<{width}} : {value}" for label, value in rows]

    def __str__(self) -> str:
        return "\n".join(self.lines())


def _check_device_type(device_type: object, argument: str = "device_type") -> str:
    if not isinstance(device_type, str):
        raise TypeError(f"{argument} must be a str, one of {DEVICE_TYPES} (got {device_type!r})")
    if device_type not in DEVICE_TYPES:
        raise ValueError(f"{argument} must be one of {DEVICE_TYPES} (got {device_type!r})")
    return device_type


def available_device_types() -> list[str]:
    """The device types this machine can run on, best first (always ends with ``"cpu"``)."""
    found = []
    if torch.cuda.is_available():
        found.append("cuda")
    if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
        found.append("mps")
    found.append("cpu")
    return found


def pick_device(env: dict[str, str] | None = None) -> torch.device:
    """The device the course uses: ``$AMPCOURSE_DEVICE`` if set, else CUDA, then MPS, then CPU.

    >>> pick_device({"AMPCOURSE_DEVICE": "cpu"})
    device(type='cpu')

    ``env`` defaults to ``os.environ``. Asking for a device this machine does not have raises a
    ``ValueError`` that lists the ones it has.
    """
    env = os.environ if env is None else env
    if not isinstance(env, Mapping):
        raise TypeError(f"env must be None or a mapping of environment variables, like os.environ (got {env!r})")
    wanted = env.get(ENV_VAR, "")
    if not isinstance(wanted, str):
        raise TypeError(f"env[{ENV_VAR!r}] must be a str such as 'cpu' (got {wanted!r})")
    wanted = wanted.strip().lower()
    available = available_device_types()
    if not wanted:
        return torch.device(available[0])
    _check_device_type(wanted, argument=ENV_VAR)
    if wanted not in available:
        raise ValueError(
            f"{ENV_VAR}={wanted!r}, but this machine has no {wanted} device; "
            f"available here: {', '.join(available)}"
        )
    return torch.device(wanted)


def generation(capability: tuple[int, int]) -> tuple[str, bool, bool]:
    """``(name, has_bf16_tensor_cores, has_tensor_cores)`` for an NVIDIA compute capability.

    >>> generation((8, 6))
    ('Ampere', True, True)
    """
    if (
        not isinstance(capability, tuple)
        or len(capability) != 2
        or not all(isinstance(c, int) and not isinstance(c, bool) and c >= 0 for c in capability)
    ):
        raise TypeError(f"capability must be a (major, minor) tuple of ints >= 0 (got {capability!r})")
    for first, name, bf16, tensor_cores in _GENERATIONS:
        if capability >= first:
            return name, bf16, tensor_cores
    raise AssertionError("unreachable: the table ends with (0, 0)")


def recommend(
    device_type: str,
    capability: tuple[int, int] | None = None,
) -> Recommendation:
    """The AMP dtype and scaler choice for a device type (and, on CUDA, a compute capability).

    >>> recommend("cuda", (7, 0)).dtype, recommend("cuda", (7, 0)).use_grad_scaler
    (torch.float16, True)
    >>> recommend("cpu").dtype_name
    'bfloat16'
    """
    _check_device_type(device_type)
    if device_type == "cuda":
        if capability is None:
            raise ValueError("recommend('cuda', capability) needs the compute capability, e.g. (8, 0)")
        name, bf16, tensor_cores = generation(capability)
        if bf16:
            return Recommendation(
                "cuda", torch.bfloat16, False,
                f"{name} Tensor Cores run bfloat16; it keeps FP32's exponent range, so no loss scaling",
            )
        if tensor_cores:
            return Recommendation(
                "cuda", torch.float16, True,
                f"{name} Tensor Cores run float16 but not bfloat16; float16 needs a GradScaler",
            )
        return Recommendation(
            "cuda", torch.float16, True,
            f"{name} GPUs have no Tensor Cores: float16 (with a GradScaler) only saves memory, and on most "
            "consumer cards (GTX 10xx) FP16 arithmetic is much slower than FP32: train in FP32 unless "
            "memory is the limit",
        )
    if capability is not None:
        raise ValueError(f"capability only applies to device_type 'cuda' (got {device_type!r})")
    dtype = torch.get_autocast_dtype(device_type)
    if dtype == torch.bfloat16:
        return Recommendation(
            device_type, dtype, False,
            f"{device_type.upper()} autocast defaults to bfloat16, which keeps FP32's range: no scaler",
        )
    return Recommendation(
        device_type, dtype, True,
        f"{device_type.upper()} autocast defaults to float16, whose small range needs a GradScaler",
    )


CPU_BF16_FLAGS = ("avx512_bf16", "amx_bf16")
"""The Linux ``/proc/cpuinfo`` flags of x86 CPUs with native bfloat16 arithmetic."""


def cpu_bf16_features(cpuinfo: str | None = None) -> tuple[str, ...] | None:
    """The native-bfloat16 flags (:data:`CPU_BF16_FLAGS`) this CPU reports, or None if unknown.

    ``cpuinfo`` is the text of ``/proc/cpuinfo`` (read from this machine when None). Returns None where
    there is no such file (macOS, Windows) or it has no ``flags`` line (e.g. ARM): then nothing can be said.
    An empty tuple means an x86 CPU without them: bfloat16 is then converted to FP32 for the arithmetic,
    and bfloat16 autocast is usually *slower* than FP32.

    >>> cpu_bf16_features("flags : fpu sse avx512f avx512_bf16 amx_bf16 amx_tile")
    ('avx512_bf16', 'amx_bf16')
    >>> cpu_bf16_features("flags : fpu sse avx2")
    ()
    """
    if cpuinfo is None:
        try:
            with open("/proc/cpuinfo", encoding="utf-8") as info:
                cpuinfo = info.read()
        except OSError:
            return None
    if not isinstance(cpuinfo, str):
        raise TypeError(f"cpuinfo must be the text of /proc/cpuinfo or None (got {type(cpuinfo).__name__})")
    for line in cpuinfo.splitlines():
        if line.startswith("flags"):
            flags = set(line.split(":", 1)[-1].split())
            return tuple(flag for flag in CPU_BF16_FLAGS if flag in flags)
    return None


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as info:
            for line in info:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown CPU"


def describe(device: torch.device | None = None) -> Hardware:
    """Report the hardware behind ``device`` (default: :func:`pick_device`) and its AMP recipe."""
    from .validate import as_device

    device = pick_device() if device is None else as_device("device", device)
    capability = None
    gen = None
    note = ""
    if device.type == "cuda" and torch.version.hip:
        # ROCm: get_device_capability is AMD's gfx version, which the NVIDIA table does not cover.
        name = torch.cuda.get_device_name(device)
        gen, tensor_cores, note = "AMD (ROCm): not in the NVIDIA table", False, "ROCm build"
        bf16 = torch.cuda.is_bf16_supported(including_emulation=False)
        rec = Recommendation(
            "cuda", torch.bfloat16 if bf16 else torch.float16, not bf16,
            "ROCm GPU: bfloat16 if the GPU supports it (no scaler), else float16 with a GradScaler",
        )
    elif device.type == "cuda":
        capability = torch.cuda.get_device_capability(device)
        gen, _, tensor_cores = generation(capability)
        name = torch.cuda.get_device_name(device)
        if capability == (7, 5) and "GTX 16" in name:
            gen, tensor_cores = "Turing (GTX 16xx: no Tensor Cores)", False
        # including_emulation=False: a V100 or T4 can *store* bfloat16 (the default, True, says yes),
        # but has no bfloat16 arithmetic units.
        bf16 = torch.cuda.is_bf16_supported(including_emulation=False)
        rec = recommend("cuda", capability)
    elif device.type == "mps":
        name, tensor_cores = "Apple GPU (MPS)", False
        bf16 = torch.backends.mps.is_macos_or_newer(14, 0)  # MPS bf16 needs macOS 14
        rec = recommend("mps")
    else:
        name, tensor_cores = _cpu_name(), False
        flags = cpu_bf16_features()
        bf16 = None if flags is None else bool(flags)
        note = ("CPU flags " + ", ".join(flags) if flags else
                "no CPU flags to read here" if flags is None else
                "no AVX512-BF16 or AMX: bfloat16 autocast runs, but is likely slower than FP32")
        rec = recommend("cpu")
    return Hardware(
        device=device,
        name=name,
        torch_version=torch.__version__,
        capability=capability,
        generation=gen,
        tensor_cores=tensor_cores,
        bf16_supported=bf16,
        recommendation=rec,
        bf16_note=note,
    )
