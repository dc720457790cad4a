"""Which device the course runs on, what it can do, and which AMP recipe suits it.

Every notebook and every check picks its device here, so one environment variable moves the
whole course::

    AMPCOURSE_DEVICE=cpu jupyter lab      # force the CPU even on a GPU machine

The order without the variable is CUDA, then Apple MPS, then CPU.

The recommendation for an NVIDIA GPU is one rule, :data:`RECIPE_RULES` (the first row whose condition
holds wins); :func:`recommend` applies it and :func:`recipe_rules` prints it, so lesson 00, exercise 00,
its hint and its check all read the same rows:

=================================  ==================  ==========  ==========================================
condition (compute capability)     AMP dtype           GradScaler  why
=================================  ==================  ==========  ==========================================
>= 8.0 (Ampere … Blackwell 12.x)   bfloat16            no          bfloat16 Tensor Cores; FP32's exponent range
7.x (Volta, Turing)                float16             yes         float16 Tensor Cores only
5.3, 6.0, 6.2 (Tegra X1, P100,     float16             yes         no Tensor Cores, but FP16 arithmetic at
Tegra X2)                                                          twice the FP32 rate
any other below 7.0 (GTX 10xx      float32 (AMP off)   no          FP16 arithmetic far slower than FP32 (6.1:
= 6.1, Maxwell, Kepler)                                            2 results per clock per SM against 128)
                                                                   or none at all
=================================  ==================  ==========  ==========================================

The FP16 rates are those of the CUDA C++ Programming Guide's table "Throughput of Native Arithmetic
Instructions" (reference, not measured here): 16-bit add/multiply/multiply-add per clock per SM is 256,
128, 2, 256 on 5.3, 6.0, 6.1, 6.2 against 128, 64, 128, 128 for 32-bit, and absent on 5.0/5.2 and older.

Two limits of a rule keyed on the capability alone, which :func:`describe` handles from the device: the
GTX 16xx cards (TU11x) are capability 7.5 but have no Tensor Cores; and on ROCm builds
(``torch.version.hip``) the "capability" is AMD's gfx version, not NVIDIA's, and
``torch.cuda.is_bf16_supported()`` answers True on every ROCm GPU (``torch/cuda/__init__.py``), so
:func:`describe` reads the gfx architecture name instead (:data:`ROCM_BF16_ARCHS`).

CPU autocast defaults to bfloat16 (no scaler needed); MPS autocast defaults to float16, which needs
a scaler. Those defaults are :data:`AUTOCAST_DEFAULT_DTYPES`, written out (torch's own, checked against a fresh
interpreter's ``torch.get_autocast_dtype`` by the tests), never the live autocast state: an autocast region entered
with ``__enter__()`` and never left changes ``torch.get_autocast_dtype`` for the rest of the process.
Whether a CPU has native bfloat16 arithmetic (AVX512-BF16 or AMX) decides whether bfloat16 autocast
is faster or slower than FP32 on it (lesson 06 measures it): :func:`cpu_bf16_features` reads the flags
(x86 ``flags``, aarch64 ``Features``).
"""

from __future__ import annotations

import contextlib
import os
import platform
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

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
    ((6, 0), "Pascal", False, False),
    ((0, 0), "Maxwell or older", False, False),
)

FAST_FP16_WITHOUT_TENSOR_CORES = ((5, 3), (6, 0), (6, 2))
"""Capabilities below 7.0 whose FP16 arithmetic runs at twice the FP32 rate (Tegra X1, P100, Tegra X2)."""


@dataclass(frozen=True)
class RecipeRule:
    """One row of :data:`RECIPE_RULES`: a condition on the compute capability and the recipe it gives."""

    condition: str
    holds: Callable[[tuple[int, int]], bool] = field(repr=False, compare=False)
    dtype: torch.dtype
    use_grad_scaler: bool
    why: str

    def line(self) -> str:
        """The rule in words: ``condition: recipe — why``."""
        dtype = str(self.dtype).removeprefix("torch.")
        recipe = (f"{dtype} + GradScaler" if self.use_grad_scaler
                  else f"{dtype}, no autocast" if self.dtype == torch.float32
                  else f"{dtype}, no GradScaler")
        return f"{self.condition}: {recipe} — {self.why}"


RECIPE_RULES = (
    RecipeRule("capability >= (8, 0) (Ampere, Ada, Hopper, Blackwell 10.x and 12.x)",
               lambda c: c >= (8, 0), torch.bfloat16, False,
               "bfloat16 Tensor Cores; bfloat16 keeps FP32's exponent range, so no loss scaling"),
    RecipeRule("(7, 0) <= capability < (8, 0) (Volta, Turing)",
               lambda c: (7, 0) <= c < (8, 0), torch.float16, True,
               "float16 Tensor Cores, no bfloat16 ones; float16's narrow range needs a GradScaler"),
    RecipeRule(f"capability in {FAST_FP16_WITHOUT_TENSOR_CORES} (Tegra X1, Tesla P100, Tegra X2)",
               lambda c: c in FAST_FP16_WITHOUT_TENSOR_CORES, torch.float16, True,
               "no Tensor Cores, but FP16 arithmetic at twice the FP32 rate; float16 needs a GradScaler"),
    RecipeRule("any other capability below (7, 0) (GTX 10xx = 6.1, Maxwell, Kepler)",
               lambda c: c < (7, 0), torch.float32, False,
               "FP16 arithmetic far slower than FP32 (6.1) or none at all: train in FP32"),
)
"""The course's AMP recipe for an NVIDIA GPU: the first row whose condition holds (see the module doc)."""


def recipe_rules() -> list[str]:
    """:data:`RECIPE_RULES` as lines, first match wins (what lesson 00 and exercise 00 print)."""
    return [rule.line() for rule in RECIPE_RULES]


ROCM_BF16_ARCHS = ("gfx908", "gfx90a", "gfx94", "gfx95", "gfx11", "gfx12")
"""AMD gfx architecture prefixes with bfloat16 matrix instructions (MI100 and later CDNA; RDNA3 and
later), matched against ``get_device_properties(device).gcnArchName`` (reference, not measured here)."""


@dataclass(frozen=True)
class Recommendation:
    """The AMP recipe for one device: which dtype autocast should use, and whether to scale."""

    device_type: str
    dtype: torch.dtype
    use_grad_scaler: bool
    reason: str

    @property
    def dtype_name(self) -> str:
        """``"bfloat16"``, ``"float16"`` or ``"float32"`` (a GPU where the course trains without AMP)."""
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


AUTOCAST_DEFAULT_DTYPES = {"cpu": torch.bfloat16, "cuda": torch.float16, "mps": torch.float16,
                           "xpu": torch.float16}
"""The dtype ``torch.autocast(device_type)`` uses without ``dtype=`` in a fresh process, per device type (the
values of ``torch.get_autocast_dtype`` before any region changed them)."""


def recommend(
    device_type: str,
    capability: tuple[int, int] | None = None,
) -> Recommendation:
    """The AMP dtype and scaler choice for a device type (and, on CUDA, a compute capability).

    >>> recommend("cuda", (7, 0)).dtype, recommend("cuda", (7, 0)).use_grad_scaler
    (torch.float16, True)
    >>> recommend("cuda", (6, 1)).dtype_name
    'float32'
    >>> recommend("cpu").dtype_name
    'bfloat16'

    On CUDA the answer is the first of :data:`RECIPE_RULES` that holds; a float32 recommendation means
    "train without autocast": pass ``enabled=rec.dtype != torch.float32`` (``torch.autocast("cuda",
    dtype=torch.float32)`` stays on, since its supported-dtype check in ``torch/amp/autocast_mode.py`` skips
    CUDA; on the CPU the same call warns and disables itself).
    """
    _check_device_type(device_type)
    if device_type == "cuda":
        if capability is None:
            raise ValueError("recommend('cuda', capability) needs the compute capability, e.g. (8, 0)")
        name = generation(capability)[0]
        rule = next(rule for rule in RECIPE_RULES if rule.holds(capability))
        return Recommendation("cuda", rule.dtype, rule.use_grad_scaler, f"{name} ({capability[0]}.{capability[1]}): "
                              f"{rule.why}")
    if capability is not None:
        raise ValueError(f"capability only applies to device_type 'cuda' (got {device_type!r})")
    dtype = AUTOCAST_DEFAULT_DTYPES.get(device_type) or torch.get_autocast_dtype(device_type)
    if dtype == torch.bfloat16:
        return Recommendation(
            device_type, dtype, False,
            f"{device_type.upper()} autocast defaults to bfloat16, which keeps FP32's range: no scaler",
        )
    return Recommendation(
        device_type, dtype, True,
        f"{device_type.upper()} autocast defaults to float16, whose small range needs a GradScaler",
    )


CPU_BF16_FLAGS = ("avx512_bf16", "amx_bf16", "bf16", "svebf16")
"""The Linux ``/proc/cpuinfo`` flags of CPUs with native bfloat16 arithmetic: x86's AVX512-BF16 and AMX
(``flags`` line), aarch64's BF16 and SVE-BF16 extensions (``Features`` line, e.g. Graviton3)."""


def cpu_bf16_features(cpuinfo: str | None = None) -> tuple[str, ...] | None:
    """The native-bfloat16 flags (:data:`CPU_BF16_FLAGS`) this CPU reports, or None if unknown.

    ``cpuinfo`` is the text of ``/proc/cpuinfo`` (read from this machine when None). x86 lists its flags on
    ``flags`` lines, aarch64 on ``Features`` lines. Returns None where there is no such file (macOS, Windows)
    or it has neither line: then nothing can be said. An empty tuple means a CPU without them: bfloat16 is
    then converted to FP32 for the arithmetic, and bfloat16 autocast is usually *slower* than FP32.

    >>> cpu_bf16_features("flags : fpu sse avx512f avx512_bf16 amx_bf16 amx_tile")
    ('avx512_bf16', 'amx_bf16')
    >>> cpu_bf16_features("flags : fpu sse avx2")
    ()
    >>> cpu_bf16_features("Features : fp asimd sve i8mm bf16 svebf16")
    ('bf16', 'svebf16')
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
        label = line.split(":", 1)[0].strip()
        if label in ("flags", "Features"):
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
        # ROCm: get_device_capability is AMD's gfx version, which the NVIDIA table does not cover, and
        # torch.cuda.is_bf16_supported() is True on every ROCm GPU: read this device's gfx architecture.
        name = torch.cuda.get_device_name(device)
        arch = str(getattr(torch.cuda.get_device_properties(device), "gcnArchName", "") or "")
        bf16 = any(arch.startswith(prefix) for prefix in ROCM_BF16_ARCHS) if arch else None
        gen, tensor_cores = "AMD (ROCm): not in the NVIDIA table", False
        note = f"ROCm {arch or 'architecture unknown'}"
        rec = Recommendation(
            "cuda", torch.bfloat16 if bf16 else torch.float16, not bf16,
            f"ROCm GPU {arch or '(architecture unknown)'}: "
            + ("bfloat16 matrix instructions, no scaler needed" if bf16 else
               "no bfloat16 matrix instructions known for it: float16 with a GradScaler"),
        )
    elif device.type == "cuda":
        # this device's own capability (torch.cuda.is_bf16_supported() asks the *current* device instead)
        capability = tuple(torch.cuda.get_device_capability(device))
        gen, bf16, tensor_cores = generation(capability)
        name = torch.cuda.get_device_name(device)
        if capability == (7, 5) and "GTX 16" in name:
            gen, tensor_cores = "Turing (GTX 16xx: no Tensor Cores)", False
        # native bfloat16 arithmetic = bf16 Tensor Cores (8.0 on); a V100 or T4 can only *store* bfloat16,
        # which torch.cuda.is_bf16_supported() counts by default (including_emulation=True).
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
                "no AVX512-BF16, AMX or Arm BF16: bfloat16 autocast runs, but is likely slower than FP32")
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


@contextlib.contextmanager
def one_thread():
    """Run torch's CPU ops on one thread inside the block (the thread count is restored after it). Small ops
    timed on a loaded machine otherwise wait for descheduled threads: the scheduler is measured, not the op."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)
